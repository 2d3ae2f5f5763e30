"""kdra scheduler's `--placement kdra` keeps answers across pods (the node search's per-signature filter
answers, the policy's scores per pod shape) and still places every pod as the online replay does."""

from __future__ import annotations

import pytest

from kdra.cluster import MemoryStore
from kdra.replay.engine import arrivals, run_placement
from kdra.replay.trace import default_trace_dir, load_trace, sample
from kdra.scheduler.gpupolicies import make_policy
from support.replaysched import place_in_turn, policy_scheduler


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
    want = {name: node for name, node in run.nodes[: len(pods)] if node}
    assert len(trace.nodes) > 100 and len(pods) - len(want) > 5  # some pods find no room
    store = MemoryStore()
    sched = policy_scheduler(store, trace)
    got, _ = place_in_turn(store, sched, pods)
    assert got == want
    # Answers were kept: far fewer nodes evaluated than every node for every pod.
    assert sched.node_search.evaluations < len(pods) * len(trace.nodes) / 3
