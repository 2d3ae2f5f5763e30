"""The openb trace replayed through `kdra scheduler --placement kdra` on a real control plane, KWOK nodes
shaped as the trace's nodes (GPU shares as consumable capacity): the unallocated GPU % at 100% arrived is the
one `kdra replay --online --ties name` computes for the same sample, and the exporter beside the scheduler
shows the fragmentation as it happens (its gauges per node pool say what the replay's views say).

A seeded sample of the trace (40 of the 1,213 nodes, as large a share of the pods) keeps it to about a
minute; the full-size live run is benchmarks/bench_replay_live.py."""

from __future__ import annotations

import contextlib
import urllib.request
import uuid
from pathlib import Path

import pytest

from kdra.cluster.store import AlreadyExistsError
from kdra.fleets import render
from kdra.kube.client import KubeClient
from kdra.observe.exposition import parse_text
from kdra.replay.engine import ReplayCluster, arrivals, run_placement
from kdra.replay.trace import TracePod, default_trace_dir, load_trace, pod_objects, sample
from kdra.scheduler.fragmentation import make_policy
from kdra.testing.controlplane import KWOK_NODE_ANNOTATION, ControlPlane, free_port

from .kubeutil import kdra_scheduler
from .sessionutil import FLEET_LABEL, GpuFleet, cleanup, fleet_spec, wait

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(default_trace_dir() is None, reason="the shared Alibaba trace is not here"),
]

NODES = 40
SAMPLE_SEED = 1
SEED = 42
POOL_LABEL = "kdra.dev/pool"


def _pools(port: int, prefix: str) -> dict[str, dict[str, float]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        samples = list(parse_text(r.read().decode()))
    out: dict[str, dict[str, float]] = {}
    for name, labels, value in samples:
        pool = labels.get("node_pool", "")
        if name.startswith("kdra_pool_gpus") and pool.startswith(prefix):
            out.setdefault(pool, {})[name] = value
    return out


def test_the_trace_on_a_live_cluster_wastes_what_the_online_replay_says(
    control_plane: ControlPlane, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    trace = sample(load_trace(), NODES, SAMPLE_SEED)
    pods = arrivals(trace, SEED)  # the replay's pods, in its order, while the arrived request is <= 100%
    cluster = ReplayCluster(trace.nodes)
    replay = run_placement(trace, make_policy("kdra"), SEED, online=True, tie_break="name", cluster=cluster)
    prefix = f"r{uuid.uuid4().hex[:5]}"
    objs = render(trace.fleet())
    for o in objs:
        if o["kind"] == "Node":
            meta = o["metadata"]
            meta.setdefault("annotations", {})[KWOK_NODE_ANNOTATION] = "fake"
            meta["labels"][FLEET_LABEL] = prefix
            meta["labels"][POOL_LABEL] = f"{prefix}-{meta['labels'][POOL_LABEL]}"
    fleet = GpuFleet(kube, fleet_spec(prefix, []))
    name, port = f"kdra-replay-{prefix}", free_port()
    try:
        fleet.create(objs)
        with kdra_scheduler(
            control_plane,
            tmp_path / "scheduler.log",
            "--scheduler-name",
            name,
            "--placement",
            "kdra",
            "--owned-nodes",
            f"{FLEET_LABEL}={prefix}",
            "--metrics-listen",
            f"127.0.0.1:{port}",
        ) as proc:
            placed: dict[str, str | None] = {}
            halfway: dict[str, dict[str, float]] = {}
            for i, tp in enumerate(pods):
                for o in pod_objects(tp, namespace):
                    if o["kind"] == "Pod":
                        o["spec"]["schedulerName"] = name
                        o["spec"]["nodeSelector"] = {FLEET_LABEL: prefix}
                    with contextlib.suppress(AlreadyExistsError):
                        kube.create(o)
                # One pod at a time, as the replay places them: bound, or found to fit nowhere.
                placed[tp.name] = wait(
                    lambda tp=tp: _outcome(kube, namespace, tp.name),
                    60,
                    f"pod {tp.name} placed or refused",
                    interval=0.05,
                    log=proc.log,
                )[1]
                if i == len(pods) // 2:
                    halfway = _settled_pools(port, prefix, _held(pods, placed))
            final = _settled_pools(port, prefix, _held(pods, placed))
        capacity = trace.gpu_capacity_milli
        live = 100 - 100 * sum(tp.request.total_milli for tp in pods if placed[tp.name]) / capacity
        assert abs(live - replay.unallocated_at(100)) <= 0.3, (live, replay.unallocated_at(100))
        # The exporter: idle and fragmented GPUs per pool, halfway and at the end, as the replay's views had
        # them after the same pods (the replay placed every pod where the live scheduler did).
        want = dict(replay.nodes[: len(pods)])
        assert placed == want
        for upto, got in ((len(pods) // 2 + 1, halfway), (len(pods), final)):
            views = {v.name: v for v in ReplayCluster(trace.nodes).views}
            bindings = iter(cluster.placed)
            for tp in pods[:upto]:
                node = want[tp.name]
                if node:
                    views[node].place(tp.request, next(bindings)[1].gpus)
            pool_of = {
                o["metadata"]["name"]: o["metadata"]["labels"][POOL_LABEL]
                for o in objs
                if o["kind"] == "Node"
            }
            for pool, series in got.items():
                mine = [v for n, v in views.items() if pool_of[n] == pool]
                idle = sum(sum(v.gpu_free) for v in mine) / 1000
                frag = sum(f for v in mine for f in v.gpu_free if 0 < f < 1000) / 1000
                assert series["kdra_pool_gpus"] == sum(len(v.gpu_free) for v in mine), pool
                assert abs(series["kdra_pool_gpus_idle"] - idle) < 1e-6, (pool, upto)
                assert abs(series["kdra_pool_gpus_fragmented"] - frag) < 1e-6, (pool, upto)
        assert sum(s["kdra_pool_gpus_fragmented"] for s in final.values()) > 0
    finally:
        cleanup(kube, namespace)
        fleet.delete()


def _outcome(kube: KubeClient, namespace: str, pod: str) -> tuple[bool, str | None] | None:
    obj = kube.get("Pod", pod, namespace)
    node = (obj.get("spec") or {}).get("nodeName")
    if node:
        return True, node
    for c in (obj.get("status") or {}).get("conditions") or []:
        if (
            c.get("type") == "PodScheduled"
            and c.get("status") == "False"
            and c.get("reason") == "Unschedulable"
        ):
            return False, None
    return None


def _held(pods: list[TracePod], placed: dict[str, str | None]) -> float:
    """GPU-equivalents the placed pods hold."""
    return sum(tp.request.total_milli for tp in pods if placed.get(tp.name)) / 1000


def _settled_pools(port: int, prefix: str, held: float) -> dict[str, dict[str, float]]:
    """The pool gauges once the exporter has seen every placed pod's claim allocated."""

    def ready() -> dict[str, dict[str, float]] | None:
        pools = _pools(port, prefix)
        used = sum(s.get("kdra_pool_gpus", 0) - s.get("kdra_pool_gpus_idle", 0) for s in pools.values())
        return pools if pools and abs(used - held) < 1e-6 else None

    got: dict[str, dict[str, float]] = wait(ready, 30, "the exporter's pool gauges to show every allocation")
    return got
