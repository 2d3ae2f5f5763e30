"""FGD as a score plugin in kdra's scheduler (DynamicResources allocates, the plugin picks the node)."""

from __future__ import annotations

from pathlib import Path

from kdra.cluster import MemoryStore
from kdra.fleets import render
from kdra.observe.model import FleetState
from kdra.replay.engine import ReplayCluster, arrivals, run_placement
from kdra.replay.trace import Trace, TraceNode, TracePod, load_trace, pod_objects, sample
from kdra.scheduler.fragmentation import placement_plugins
from kdra.scheduler.gpupolicies import FGDPolicy, PodRequest, make_policy, typical_pods
from kdra.scheduler.policyplacement import FragmentationScore
from kdra.scheduler.scheduler import Scheduler, SchedulerConfig
from support.replaysched import place_in_turn, policy_scheduler

SHARE = PodRequest(2000, 1024, 1, 500)


def _run(extra: list[FragmentationScore]) -> dict[str, str]:
    nodes = [TraceNode("t4-a", 32_000, 131_072, 2, "T4"), TraceNode("t4-b", 32_000, 131_072, 2, "T4")]
    store = MemoryStore()
    for obj in render(Trace(nodes, []).fleet()):
        store.create(obj)
    sched = Scheduler(store, SchedulerConfig(extra_plugins=extra))
    placed: dict[str, str] = {}
    for i in range(2):
        for obj in pod_objects(TracePod(f"p{i}", SHARE)):
            store.create(obj)
        for r in sched.run():
            if r.node:
                placed[r.pod.split("/")[1]] = r.node
    return placed


def test_fgd_plugin_fills_the_half_used_gpu_instead_of_spreading() -> None:
    spread = _run([])
    assert spread["p0"] != spread["p1"]  # upstream LeastAllocated spreads over CPU and memory
    fgd = FGDPolicy(typical_pods([SHARE, PodRequest(2000, 1024, 1, 1000)]))
    packed = _run([FragmentationScore(fgd)])
    assert packed["p0"] == packed["p1"]  # the second share completes the first one's GPU


def test_kdra_placement_in_the_scheduler_places_as_the_online_replay(
    small_trace_files: tuple[Path, Path],
) -> None:
    """`--placement kdra`: kdra's scheduler, handed the replay's pods one at a time, puts every pod on the
    node the replay chose in online mode with ties by node name (the policy learns the same pods in the same
    order, sees the same free GPUs, breaks ties alike), and the allocator takes the GPUs the policy chose."""
    trace = sample(load_trace(*small_trace_files), 40, seed=1)
    seed = 42
    cluster = ReplayCluster(trace.nodes)
    run = run_placement(trace, make_policy("kdra"), seed, online=True, tie_break="name", cluster=cluster)
    pods = arrivals(trace, seed)
    want = {name: node for name, node in run.nodes[: len(pods)] if node}
    assert 150 < len(pods) < 400 and len(want) > 100
    store = MemoryStore()
    exporter = FleetState()  # the exporter's model, fed by the same events a watch would bring
    store.watch(exporter.on_event)
    got, _ = place_in_turn(store, policy_scheduler(store, trace), pods)
    assert got == want
    # The GPUs too: each claim holds the devices (and shares) the replay's allocator gave it.
    bindings = iter(cluster.placed)
    replay_devices = {}
    for name, node in run.nodes[: len(pods)]:
        if node is not None:
            replay_devices[name] = sorted(
                (r["device"], str(r.get("consumedCapacity"))) for r in next(bindings)[1].results
            )
    for name, devices in replay_devices.items():
        claim = store.get("ResourceClaim", f"{name}-gpu", "default") if devices else None
        results = claim["status"]["allocation"]["devices"]["results"] if claim else []
        assert sorted((r["device"], str(r.get("consumedCapacity"))) for r in results) == devices, name
    capacity = trace.gpu_capacity_milli
    placed = sum(p.request.total_milli for p in pods if p.name in got)
    assert abs((100 - 100 * placed / capacity) - run.unallocated_at(100)) < 1e-9
    # The exporter's gauges per node pool: idle GPUs and the idle part of partly used ones, as the replay's
    # views have them (the replay ran on to 130%: its views are replayed to the same pods here).
    views = {v.name: v for v in ReplayCluster(trace.nodes).views}
    for tp in pods:
        node = got.get(tp.name)
        if node:
            gpus = next(r for n, r in replay_devices.items() if n == tp.name) if tp.request.num_gpu else []
            idx = [int(d.rsplit("-", 1)[1]) for d, _c in gpus]
            views[node].place(tp.request, idx)
    pools = exporter.sums.pools()
    assert sum(g for g, _i, _f in pools.values()) == capacity // 1000 and len(pools) > 3
    idle = sum(sum(v.gpu_free) for v in views.values()) / 1000
    fragmented = sum(f for v in views.values() for f in v.gpu_free if 0 < f < 1000) / 1000
    assert abs(sum(i for _g, i, _f in pools.values()) - idle) < 1e-6
    assert abs(sum(f for _g, _i, f in pools.values()) - fragmented) < 1e-6 and fragmented > 1


def test_a_placement_plugin_reused_by_a_new_scheduler_learns_afresh() -> None:
    """`kdra simulate --placement kdra` builds a scheduler per mode with the same plugins: each starts with
    a policy that has seen nothing (the other mode's pods are not its workload)."""
    (plugin,) = placement_plugins("kdra")
    nodes = [TraceNode("t4-a", 32_000, 131_072, 2, "T4")]
    policies = []
    for _ in range(2):
        store = MemoryStore()
        for obj in render(Trace(nodes, []).fleet()):
            store.create(obj)
        config = SchedulerConfig(extra_plugins=[plugin], device_preference=plugin.device_preference)
        sched = Scheduler(store, config)
        for obj in pod_objects(TracePod("p", SHARE)):
            store.create(obj)
        assert [r.node for r in sched.run()] == ["t4-a"]
        policies.append(plugin.policy)
    assert policies[0] is not policies[1]
    assert [p.model.seen for p in policies] == [1, 1]  # each learned its own scheduler's one pod
