"""The openb trace replayed through `kdra scheduler --placement kdra` on a real control plane, KWOK nodes
shaped as the trace's nodes (GPU shares as consumable capacity): the unallocated GPU % at 100% arrived is the
one `kdra replay --online --ties name` computes for the same sample, and the exporter beside the scheduler
shows the fragmentation as it happens (its gauges per node pool say what the replay's views say).

A seeded sample of the trace (40 of the 1,213 nodes, as large a share of the pods: 240 pods to 100% with
replay seed 42) keeps it under a minute; the full-size live run is benchmarks/bench_replay_live.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from kdra.kube.client import KubeClient
from kdra.replay.engine import ReplayCluster, arrivals, run_placement
from kdra.replay.trace import default_trace_dir, load_trace, sample
from kdra.scheduler.gpupolicies import make_policy
from support.controlplane import ControlPlane

from .replaylive import run_live

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(default_trace_dir() is None, reason="the shared Alibaba trace is not here"),
]

NODES = 40
SAMPLE_SEED = 1
SEED = 42


def test_the_trace_on_a_live_cluster_wastes_what_the_online_replay_says(
    control_plane: ControlPlane, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    trace = sample(load_trace(), NODES, SAMPLE_SEED)
    pods = arrivals(trace, SEED)  # the replay's pods, in its order, while the arrived request is <= 100%
    cluster = ReplayCluster(trace.nodes)
    replay = run_placement(trace, make_policy("kdra"), SEED, online=True, tie_break="name", cluster=cluster)
    half = len(pods) // 2
    live = run_live(control_plane, kube, namespace, trace, pods, tmp_path / "scheduler.log", snapshots=[half])
    assert abs(live.unallocated(trace, pods) - replay.unallocated_at(100)) <= 0.3
    # Every pod where the replay put it (the same learning, the same views, ties by node name).
    want = dict(replay.nodes[: len(pods)])
    assert live.placed == want
    # The exporter, halfway and at the end: idle and fragmented GPUs per pool as the replay's views had them
    # after the same pods.
    for upto, got in sorted(live.pools.items()):
        views = {v.name: v for v in ReplayCluster(trace.nodes).views}
        bindings = iter(cluster.placed)
        for tp in pods[:upto]:
            node = want[tp.name]
            if node:
                views[node].place(tp.request, next(bindings)[1].gpus)
        assert set(got) == set(live.node_pool.values())
        for pool, series in got.items():
            mine = [v for n, v in views.items() if live.node_pool[n] == pool]
            idle = sum(sum(v.gpu_free) for v in mine) / 1000
            frag = sum(f for v in mine for f in v.gpu_free if 0 < f < 1000) / 1000
            assert series["kdra_pool_gpus"] == sum(len(v.gpu_free) for v in mine), pool
            assert abs(series["kdra_pool_gpus_idle"] - idle) < 1e-6, (pool, upto)
            assert abs(series["kdra_pool_gpus_fragmented"] - frag) < 1e-6, (pool, upto)
    assert sorted(live.pools) == [half, len(pods)]
    assert sum(s["kdra_pool_gpus_fragmented"] for s in live.pools[len(pods)].values()) > 0
