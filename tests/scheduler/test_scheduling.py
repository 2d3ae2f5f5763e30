"""Scheduling decisions of the cycle: fit, selectors, affinity, taints, priority, scoring, explanations."""

from __future__ import annotations

from builders import device_class, gpu_slice, node, pod, template

from kdra.cluster import MemoryStore, clone
from kdra.scheduler.plugins.noderesources import MOST_ALLOCATED, ScoringStrategy
from kdra.scheduler.scheduler import Scheduler, SchedulerConfig


def placements(results: list) -> dict[str, str | None]:
    return {r.pod.split("/", 1)[1]: r.node for r in results}


def condition(store: MemoryStore, name: str) -> dict:
    p = store.get("Pod", name, "default")
    return next(c for c in p["status"]["conditions"] if c["type"] == "PodScheduled")


def test_node_fit_cpu_memory_pods() -> None:
    s = MemoryStore()
    s.create(node("small", cpu="2", memory="4Gi", pods="2"))
    sch = Scheduler(s)
    s.create(pod("a", cpu="1500m"))
    s.create(pod("b", cpu="1"))
    s.create(pod("c", cpu="100m", memory="5Gi"))
    got = placements(sch.run(0))
    assert got == {"a": "small", "b": None, "c": None}
    assert condition(s, "b")["message"] == "0/1 nodes are available: 1 Insufficient cpu."
    assert condition(s, "c")["message"] == "0/1 nodes are available: 1 Insufficient memory."
    assert condition(s, "b")["reason"] == "Unschedulable"


def test_node_selector_affinity_and_taints() -> None:
    s = MemoryStore()
    s.create(node("a", labels={"zone": "z1"}))
    s.create(
        node("b", labels={"zone": "z2"}, taints=[{"key": "gpu", "value": "yes", "effect": "NoSchedule"}])
    )
    s.create(node("c", labels={"zone": "z3"}))
    sch = Scheduler(s)
    s.create(pod("sel", node_selector={"zone": "z3"}))
    s.create(pod("tainted", node_selector={"zone": "z2"}))
    s.create(
        pod(
            "tolerates",
            node_selector={"zone": "z2"},
            tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        )
    )
    aff = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1", "z2"]}]}
                ]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 10,
                    "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z2"]}]},
                }
            ],
        }
    }
    s.create(pod("affinity", affinity=aff))
    got = placements(sch.run(0))
    assert got["sel"] == "c"
    assert got["tainted"] is None
    assert got["tolerates"] == "b"
    assert got["affinity"] == "a"  # b is preferred but its taint is not tolerated
    assert "1 node(s) had untolerated taint {gpu: yes}" in condition(s, "tainted")["message"]


def test_priority_first_then_fifo() -> None:
    s = MemoryStore()
    s.create(node("n", cpu="1"))
    sch = Scheduler(s)
    s.create(pod("early", cpu="1"))
    s.create(pod("important", cpu="1", priority=1000))
    s.create(pod("late", cpu="1"))
    got = placements(sch.run(0))
    assert got["important"] == "n"
    assert got["early"] is None and got["late"] is None


def test_least_allocated_spreads_and_most_allocated_packs() -> None:
    for strategy, expected in (("LeastAllocated", {"a", "b"}), (MOST_ALLOCATED, {"a"})):
        s = MemoryStore()
        s.create(node("a"))
        s.create(node("b"))
        sch = Scheduler(s, SchedulerConfig(scoring=ScoringStrategy(type=strategy)))
        s.create(pod("p1", cpu="4"))
        s.create(pod("p2", cpu="4"))
        assert set(placements(sch.run(0)).values()) == expected, strategy


def _nominated(name: str, node_name: str, cpu: str, priority: int = 0) -> dict:
    p = pod(name, cpu=cpu, priority=priority)
    p["status"] = {"nominatedNodeName": node_name}
    return p


def test_a_nominated_node_that_passes_filter_is_taken_kube_scheduler_evaluate_nominated_node() -> None:
    """kube-scheduler's evaluateNominatedNode (pkg/scheduler/schedule_one.go): the nominated node is tried
    first and taken when it passes Filter, though scoring would prefer another; a nominated node the pod
    does not fit on, or one that does not exist, leaves it to the search over every node."""
    s = MemoryStore()
    s.create(node("a", cpu="32"))
    s.create(node("b", cpu="32"))
    sch = Scheduler(s)  # LeastAllocated: an empty node scores best
    s.create(pod("first", cpu="20"))
    assert placements(sch.run(0)) == {"first": "a"}
    # fits on a's 12 free cpu (b is emptier); too-big's nomination, of a lower priority, does not count
    s.create(_nominated("expected", "a", cpu="8", priority=10))
    s.create(_nominated("too-big", "a", cpu="16"))  # does not fit on a any more
    s.create(_nominated("gone", "c", cpu="1"))
    assert placements(sch.run(1)) == {"expected": "a", "too-big": "b", "gone": "b"}


def _held_for_a_preemptor() -> tuple[MemoryStore, Scheduler]:
    """Node big (4 cpu) still runs a 2-cpu victim (terminating: its deletion makes room) for `preemptor`
    (priority 100, 3 cpu), nominated there; node small has 2 cpu."""
    s = MemoryStore()
    s.create(node("big", cpu="4"))
    s.create(node("small", cpu="2"))
    victim = pod("victim", cpu="2")
    victim["spec"]["nodeName"] = "big"
    s.create(victim)
    sch = Scheduler(s)
    s.create(_nominated("preemptor", "big", cpu="3", priority=100))
    assert placements(sch.run(0)) == {"preemptor": None}
    return s, sch


def test_a_pod_nominated_to_a_node_keeps_its_room_from_lower_priorities_add_ge_nominated_pods() -> None:
    """kube-scheduler's RunFilterPluginsWithNominatedPods / addGENominatedPods (pkg/scheduler/framework/
    runtime/framework.go): Filter counts the pods nominated to a node, of a priority no lower than the pod's,
    as if they ran there. A lower-priority pod arriving while the victims go does not take the room
    preemption made (it would be the next victim): it goes elsewhere, and the preemptor gets its node."""
    s, sch = _held_for_a_preemptor()
    s.create(pod("latecomer", cpu="2"))
    # big has 2 free cpu and scores first on a tie, but 3 of them are the preemptor's
    assert placements(sch.run(1)) == {"latecomer": "small"}
    s.delete("Pod", "victim", "default")
    assert placements(sch.run(2)) == {"preemptor": "big"}


def test_a_nomination_counts_against_equal_priorities_not_higher_ones_nor_once_withdrawn() -> None:
    s, sch = _held_for_a_preemptor()
    s.create(pod("same", cpu="2", priority=100))
    assert placements(sch.run(1)) == {"same": "small"}  # an equal priority: the nomination counts
    s.create(pod("urgent", cpu="2", priority=1000))
    assert placements(sch.run(2)) == {"urgent": "big"}  # a higher one: it does not
    s.create(pod("later", cpu="1"))
    assert placements(sch.run(3)) == {"later": None}  # big: 2 + 2 of 4 used; small full
    s.delete("Pod", "urgent", "default")
    preemptor = clone(s.get("Pod", "preemptor", "default"))
    preemptor["status"] = {}  # preemption withdrew the nomination
    s.update(preemptor, subresource="status")
    assert placements(sch.run(4))["later"] == "big"  # the nomination no longer counts


def test_unschedulable_dra_pod_gets_the_allocators_explanation() -> None:
    s = MemoryStore()
    s.create(device_class())
    s.create(node("n1"))
    s.create(gpu_slice("n1", 2))
    s.create(template("two", count=3))
    sch = Scheduler(s)
    s.create(pod("p", template_name="two"))
    assert placements(sch.run(0)) == {"p": None}
    msg = condition(s, "p")["message"]
    assert msg.startswith("0/1 nodes are available: 1 cannot allocate all claims.")
    assert "\n" in msg  # followed by kdra's explanation


def _selector_error_world(store: MemoryStore) -> None:
    """Two nodes; the class selector reads an attribute only n2's GPUs have, so on n1's GPUs it fails at
    run time (no such key) while n2 fits."""
    cls = device_class()
    cls["spec"]["selectors"].append(
        {"cel": {"expression": 'device.attributes["gpu.example.com"].tier == "a"'}}
    )
    store.create(cls)
    for name in ("n1", "n2"):
        store.create(node(name))
        sl = gpu_slice(name, 2)
        if name == "n2":
            for dev in sl["spec"]["devices"]:
                dev["attributes"]["tier"] = {"string": "a"}
        store.create(sl)
    store.create(template("one", count=1))


def test_selector_error_on_some_nodes_fails_the_attempt_like_kube_scheduler() -> None:
    s = MemoryStore()
    _selector_error_world(s)
    sch = Scheduler(s)
    s.create(pod("p", template_name="one"))
    assert placements(sch.run(0)) == {"p": None}
    cond = condition(s, "p")
    assert cond["reason"] == "SchedulerError"
    assert "CEL runtime error: no such key: tier" in cond["message"]
    assert "on device gpu.example.com/n1/gpu-0" in cond["message"]  # 1.37 names the device


def test_a_node_whose_selector_error_gave_way_no_longer_fails_the_pod() -> None:
    # n1's GPUs make the "tiered" class's selector fail; once another pod holds all of them, n1 is ruled
    # out for want of free devices instead (its answer is computed again), and the pod goes to n2.
    s = MemoryStore()
    s.create(device_class())
    tiered = device_class("tiered")
    tiered["spec"]["selectors"].append(
        {"cel": {"expression": 'device.attributes["gpu.example.com"].tier == "a"'}}
    )
    s.create(tiered)
    for name in ("n1", "n2"):
        s.create(node(name))
        sl = gpu_slice(name, 2)
        if name == "n2":
            for dev in sl["spec"]["devices"]:
                dev["attributes"]["tier"] = {"string": "a"}
        s.create(sl)
    s.create(template("tiered", count=1, cls="tiered"))
    s.create(template("two", count=2))
    sch = Scheduler(s)
    s.create(pod("p", template_name="tiered"))
    assert placements(sch.run(0)) == {"p": None}
    assert condition(s, "p")["reason"] == "SchedulerError"
    s.create(pod("filler", template_name="two", node_selector={"kubernetes.io/hostname": "n1"}))
    got: dict[str, str | None] = {}
    for t in (1, 600, 1200):
        got.update(placements(sch.run(t)))
    assert got == {"filler": "n1", "p": "n2"}


def test_filter_errors_skip_node_keeps_kdras_old_behaviour() -> None:
    s = MemoryStore()
    _selector_error_world(s)
    sch = Scheduler(s, SchedulerConfig(filter_errors="skip-node"))
    s.create(pod("p", template_name="one"))
    assert placements(sch.run(0)) == {"p": "n2"}


def test_missing_device_class_is_unresolvable() -> None:
    s = MemoryStore()
    s.create(node("n1"))
    s.create(template("t", cls="nope"))
    sch = Scheduler(s)
    s.create(pod("p", template_name="t"))
    assert placements(sch.run(0)) == {"p": None}
    assert "device class nope does not exist" in condition(s, "p")["message"]


def test_legacy_extended_resources_are_integers() -> None:
    s = MemoryStore()
    s.create(node("n", extended={"example.com/gpu": "2"}))
    sch = Scheduler(s)
    s.create(pod("a", limits={"example.com/gpu": "2"}))
    s.create(pod("b", limits={"example.com/gpu": "1"}))
    got = placements(sch.run(0))
    assert got == {"a": "n", "b": None}
    assert condition(s, "b")["message"] == "0/1 nodes are available: 1 Insufficient example.com/gpu."


def test_same_input_same_placements() -> None:
    def run() -> list[tuple[str, str | None, list]]:
        s = MemoryStore()
        s.create(device_class())
        for i in range(4):
            s.create(node(f"n{i}", cpu="8"))
            s.create(gpu_slice(f"n{i}", 4))
        s.create(template("one"))
        s.create(template("two", count=2))
        sch = Scheduler(s)
        for i in range(12):
            s.create(pod(f"p{i}", cpu="1", template_name="one" if i % 3 else "two"))
        out = []
        for r in sch.run(0):
            claims = sorted(
                (
                    c["metadata"]["name"],
                    [d["device"] for d in c["status"]["allocation"]["devices"]["results"]],
                )
                for c in s.list("ResourceClaim")
                if (c.get("status") or {}).get("allocation")
                and c["status"]["reservedFor"][0]["name"] == r.pod.split("/")[1]
            )
            out.append((r.pod, r.node, claims))
        return out

    assert run() == run()


def test_two_stores_with_equal_uids_and_resource_versions_schedule_independently() -> None:
    # MemoryStore uids and resourceVersions are counters: both stores hand out the same (uid,
    # resourceVersion) for their slice, with 2 GPUs in one and 4 in the other. The allocator's shared
    # slice cache must keep them apart.
    def cluster(gpus: int) -> tuple[MemoryStore, Scheduler]:
        s = MemoryStore()
        s.create(device_class())
        s.create(node("n1"))
        s.create(gpu_slice("n1", gpus))
        s.create(template("three", count=3))
        return s, Scheduler(s)

    small, small_sched = cluster(2)
    large, large_sched = cluster(4)
    a, b = small.list("ResourceSlice")[0]["metadata"], large.list("ResourceSlice")[0]["metadata"]
    assert (a["uid"], a["resourceVersion"]) == (b["uid"], b["resourceVersion"])
    for i in range(2):
        small.create(pod(f"p{i}", template_name="three"))
        large.create(pod(f"p{i}", template_name="three"))
        assert placements(small_sched.run(i)) == {f"p{i}": None}
        assert placements(large_sched.run(i)) == {f"p{i}": "n1" if i == 0 else None}


def test_only_the_printed_explanation_is_computed() -> None:
    from kdra.allocator import LazyExplanation

    s = MemoryStore()
    s.create(device_class())
    for i in range(3):
        s.create(node(f"n{i}"))
        s.create(gpu_slice(f"n{i}", 2))
    s.create(template("one"))
    s.create(template("three", count=3))
    sch = Scheduler(s)
    s.create(pod("fits", template_name="one"))
    s.create(pod("big", template_name="three"))
    results = {r.pod: r for r in sch.run(0)}
    big = results["default/big"]
    from kdra.scheduler.nodefit import FitFailure

    # Every node's verdict is handed on (for messages that group nodes by reason), uncomputed; only the
    # first node's explanation, which the message prints, is computed.
    # (Shared answers keep them neutral, kdra.scheduler.owntext: `inner` is the allocator's.)
    fit = big.explanation
    assert big.node is None and isinstance(fit, FitFailure)
    assert isinstance(fit.first.inner, LazyExplanation) and fit.first.inner.computed
    assert len(fit.per_node) == 3
    lazies = [
        st.explanation.inner
        for entry in sch._sig.values()
        for _gen, st, _score in entry.results.values()
        if st is not None and isinstance(st.explanation.inner, LazyExplanation)
    ]
    assert len(lazies) == 3 and sum(e.computed for e in lazies) == 1
    # The message explains the attempt, with the device the first pod took counted as in use.
    msg = condition(s, "big")["message"]
    assert "claim default/big-" in msg and "needs 3" in msg


def test_a_pod_with_scheduling_gates_waits_until_they_are_removed_schedulinggates_preenqueue() -> None:
    """Upstream's SchedulingGates PreEnqueue (pkg/scheduler/framework/plugins/schedulinggates): a gated pod
    is not tried (Kueue and other admission controllers hold pods this way); removing the last gate (a
    spec update) enqueues it. The scheduler writes no status for it: kube-apiserver marks it
    SchedulingGated."""
    s = MemoryStore()
    s.create(node("n1", cpu="4"))
    sch = Scheduler(s)
    p = pod("gated", cpu="1")
    p["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}, {"name": "example.com/b"}]
    s.create(p)
    assert placements(sch.run(0)) == {}
    assert not s.get("Pod", "gated", "default")["spec"].get("nodeName")
    assert sch.queue.gated[s.get("Pod", "gated", "default")["metadata"]["uid"]][1].reasons == (
        "waiting for scheduling gates: [kueue.x-k8s.io/admission example.com/b]",
    )
    p = clone(s.get("Pod", "gated", "default"))
    p["spec"]["schedulingGates"] = [{"name": "example.com/b"}]
    s.update(p)
    assert placements(sch.run(1)) == {}
    p = clone(s.get("Pod", "gated", "default"))
    del p["spec"]["schedulingGates"]
    s.update(p)
    assert placements(sch.run(2)) == {"gated": "n1"}
