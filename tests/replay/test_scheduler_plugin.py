"""FGD as a score plugin in kdra's scheduler (DynamicResources allocates, the plugin picks the node)."""

from __future__ import annotations

from kdra.cluster import MemoryStore
from kdra.fleets import render
from kdra.replay.trace import Trace, TraceNode, TracePod, pod_objects
from kdra.scheduler.fragmentation import FGDPolicy, PodRequest, typical_pods
from kdra.scheduler.policyplacement import FragmentationScore
from kdra.scheduler.scheduler import Scheduler, SchedulerConfig

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
