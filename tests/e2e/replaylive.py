"""A trace replayed through `kdra scheduler --placement kdra` on a real control plane (KWOK nodes shaped as
the trace's nodes, GPU shares as consumable capacity), one pod at a time as the replay places them; used by
tests/e2e/test_replay_live.py (a small sample) and benchmarks/bench_replay_live.py (up to the full trace)."""

from __future__ import annotations

import contextlib
import time
import urllib.request
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kdra.cluster.store import AlreadyExistsError
from kdra.fleets import render
from kdra.kube.client import KubeClient, Obj
from kdra.observe.exposition import parse_text
from kdra.replay.trace import Trace, TracePod, pod_objects
from support.controlplane import KWOK_NODE_ANNOTATION, ControlPlane, free_port

from .kubeutil import kdra_scheduler
from .sessionutil import FLEET_LABEL, GpuFleet, cleanup, fleet_spec, wait

POOL_LABEL = "kdra.dev/pool"
Pools = dict[str, dict[str, float]]  # node pool -> kdra_pool_gpus* series -> value


@dataclass
class LiveRun:
    placed: dict[str, str | None]  # pod -> node, None where it fit nowhere
    pools: dict[int, Pools] = field(default_factory=dict)  # pods created -> the exporter's pool gauges then
    node_pool: dict[str, str] = field(default_factory=dict)  # node -> its pool label
    seconds: float = 0.0

    def unallocated(self, trace: Trace, pods: Sequence[TracePod]) -> float:
        """Unallocated GPU % of the trace's fleet once `pods` were created."""
        held = sum(tp.request.total_milli for tp in pods if self.placed.get(tp.name))
        return 100 - 100 * held / trace.gpu_capacity_milli


def run_live(
    cp: ControlPlane,
    kube: KubeClient,
    namespace: str,
    trace: Trace,
    pods: Sequence[TracePod],
    log: Path,
    *,
    snapshots: Sequence[int] = (),
    pod_timeout: float = 60,
) -> LiveRun:
    """Render the trace's fleet as KWOK nodes of a fleet of their own, run kdra's scheduler on them
    (`--placement kdra --owned-nodes`, a scheduler name of its own, the exporter beside it), create `pods`
    one at a time, each waited for until bound or found to fit nowhere; the exporter's pool gauges are read
    after the pods numbered in `snapshots` (and after the last)."""
    prefix = f"r{uuid.uuid4().hex[:5]}"
    objs = render(trace.fleet())
    node_pool: dict[str, str] = {}
    for o in objs:
        if o["kind"] == "Node":
            meta = o["metadata"]
            meta.setdefault("annotations", {})[KWOK_NODE_ANNOTATION] = "fake"
            meta["labels"][FLEET_LABEL] = prefix
            meta["labels"][POOL_LABEL] = node_pool[meta["name"]] = f"{prefix}-{meta['labels'][POOL_LABEL]}"
    fleet = GpuFleet(kube, fleet_spec(prefix, []))
    name, port = f"kdra-replay-{prefix}", free_port()
    run = LiveRun({}, node_pool=node_pool)
    try:
        fleet.create(objs)
        with kdra_scheduler(
            cp,
            log,
            "--scheduler-name",
            name,
            "--placement",
            "kdra",
            "--owned-nodes",
            f"{FLEET_LABEL}={prefix}",
            "--metrics-listen",
            f"127.0.0.1:{port}",
        ) as proc:
            t0 = time.perf_counter()
            marks = {*snapshots, len(pods)}
            for i, tp in enumerate(pods, 1):
                for o in pod_objects(tp, namespace):
                    if o["kind"] == "Pod":
                        o["spec"]["schedulerName"] = name
                        o["spec"]["nodeSelector"] = {FLEET_LABEL: prefix}
                    with contextlib.suppress(AlreadyExistsError):
                        kube.create(o)
                run.placed[tp.name] = wait(
                    lambda tp=tp: _outcome(kube, namespace, tp.name),
                    pod_timeout,
                    f"pod {tp.name} bound or refused",
                    interval=0.05,
                    log=proc.log,
                )[1]
                if i in marks:
                    held = sum(p.request.total_milli for p in pods[:i] if run.placed.get(p.name)) / 1000
                    run.pools[i] = _settled_pools(port, prefix, held)
            run.seconds = time.perf_counter() - t0
    finally:
        cleanup(kube, namespace)
        fleet.delete()
    return run


def _outcome(kube: KubeClient, namespace: str, pod: str) -> tuple[bool, str | None] | None:
    obj: Obj = kube.get("Pod", pod, namespace)
    node = (obj.get("spec") or {}).get("nodeName")
    if node:
        return True, node
    for c in (obj.get("status") or {}).get("conditions") or []:
        if (c.get("type"), c.get("status"), c.get("reason")) == ("PodScheduled", "False", "Unschedulable"):
            return False, None
    return None


def _pools(port: int, prefix: str) -> Pools:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        samples = list(parse_text(r.read().decode()))
    out: Pools = {}
    for name, labels, value in samples:
        pool = labels.get("node_pool", "")
        if name.startswith("kdra_pool_gpus") and pool.startswith(prefix):
            out.setdefault(pool, {})[name] = value
    return out


def _settled_pools(port: int, prefix: str, held: float) -> Pools:
    """The pool gauges once the exporter has seen every placed pod's claim allocated (`held` GPUs)."""

    def ready() -> Pools | None:
        pools = _pools(port, prefix)
        used = sum(s.get("kdra_pool_gpus", 0) - s.get("kdra_pool_gpus_idle", 0) for s in pools.values())
        return pools if pools and abs(used - held) < 1e-6 else None

    got: Pools = wait(ready, 30, "the exporter's pool gauges to show every allocation")
    return got
