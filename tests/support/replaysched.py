"""kdra's scheduler with a replay placement policy (`--placement kdra`) over a replay trace's fleet,
in-process: the pods created one at a time in the replay's order and scheduled as they come, as
`kdra replay --online` places them. Shared by the tests that compare it with the replay and by
benchmarks/bench_replay_scheduler.py."""

from __future__ import annotations

import time
from collections.abc import Iterable

from kdra.cluster import MemoryStore
from kdra.fleets import render
from kdra.replay.trace import Trace, TracePod, pod_objects
from kdra.scheduler.fragmentation import placement_plugins, placement_preference
from kdra.scheduler.scheduler import Scheduler, SchedulerConfig


def policy_scheduler(store: MemoryStore, trace: Trace, policy: str = "kdra") -> Scheduler:
    """The trace's fleet in `store`, and a scheduler whose node and devices the policy chooses."""
    for obj in render(trace.fleet()):
        store.create(obj)
    (plugin,) = placement_plugins(policy)
    return Scheduler(
        store, SchedulerConfig(extra_plugins=[plugin], device_preference=placement_preference([plugin]))
    )


def place_in_turn(
    store: MemoryStore, sched: Scheduler, pods: Iterable[TracePod]
) -> tuple[dict[str, str], float]:
    """Each pod's objects created, then a scheduling run: the node of every placed pod by name, and the CPU
    seconds the runs took."""
    got: dict[str, str] = {}
    cpu = 0.0
    for p in pods:
        for obj in pod_objects(p):
            store.create(obj)
        c0 = time.process_time()
        for r in sched.run():
            if r.node:
                got[r.pod.split("/")[1]] = r.node
        cpu += time.process_time() - c0
    return got, cpu
