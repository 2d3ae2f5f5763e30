"""kdra scheduler's `--placement kdra` keeps answers across pods (the node search's per-signature filter
answers, the policy's scores per pod shape) and still places every pod as the online replay does."""

from __future__ import annotations

import pytest

from kdra.cluster import MemoryStore
from kdra.fleets import render
from kdra.replay.engine import arrivals, run_placement
from kdra.replay.trace import default_trace_dir, load_trace, pod_objects, sample
from kdra.scheduler.fragmentation import placement_plugins, placement_preference
from kdra.scheduler.gpupolicies import make_policy
from kdra.scheduler.scheduler import Scheduler, SchedulerConfig


def test_kdra_placement_keeps_answers_across_pods_and_places_as_the_replay_to_a_full_fleet() -> None:
    """Pods of one claim shape but other CPU requests, and the policy reading the workload again, change
    the GPUs the policy prefers on a node that did not change: the devices found for an earlier pod there
    are not reused, so every pod lands where `kdra replay --online --ties name` puts it, to the fleet full."""
    if default_trace_dir() is None:
        pytest.skip("the shared Alibaba trace is not available")
    trace = sample(load_trace(), 120, seed=1)
    seed = 42
    run = run_placement(trace, make_policy("kdra"), seed, online=True, tie_break="name")
    pods = arrivals(trace, seed)
    want = dict(run.nodes[: len(pods)])
    assert len(trace.nodes) > 100 and sum(1 for n in want.values() if not n) > 5  # some pods find no room
    store = MemoryStore()
    for obj in render(trace.fleet()):
        store.create(obj)
    (plugin,) = placement_plugins("kdra")
    config = SchedulerConfig(extra_plugins=[plugin], device_preference=placement_preference([plugin]))
    sched = Scheduler(store, config)
    got: dict[str, str | None] = {p.name: None for p in pods}
    for p in pods:
        for obj in pod_objects(p):
            store.create(obj)
        for r in sched.run():
            if r.node:
                got[r.pod.split("/")[1]] = r.node
    assert got == want
    # Answers were kept: far fewer nodes evaluated than every node for every pod.
    assert sched.node_search.evaluations < len(pods) * len(trace.nodes) / 3
