"""Time replay: pods arrive at creation_time and leave at deletion_time, through the same placement engine
(policy on the incremental view, kdra's DRA allocator on the chosen node, claims deallocated on deletion).

Pods that do not fit wait in a FIFO queue and are retried whenever something is deleted (pods of a shape
that failed in a pass are not retried again in the same pass: they would get the same answer); a pod whose
deletion time comes while it waits leaves without running. This is a loop of its own over the engine's
pieces, not kdra.sim's discrete-event engine: that engine drives the full scheduler over the object store,
which is the right tool for hundreds of pods, not for 8,000 pods on 1,213 nodes in seconds.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kdra.api.features import FeatureGates
from kdra.replay.engine import Binding, Placer, ReplayCluster
from kdra.replay.trace import Trace
from kdra.scheduler.gpupolicies import MILLI, PodRequest, Policy


@dataclass
class TimedRun:
    policy: str
    shares: bool
    pods: int
    skipped: int  # no creation/deletion time, or zero lifetime
    scheduled: int
    never_scheduled: int  # deleted while pending
    delays: list[float]  # scheduled - created, per scheduled pod (seconds)
    utilization: list[tuple[float, float]]  # (time s, GPU milli allocated % of capacity)
    gpus_busy: list[tuple[float, float]]  # (time s, GPUs with any allocation % of GPUs)
    peak_pending: int
    seconds: float
    span: tuple[float, float]
    extra: dict[str, Any] = field(default_factory=dict)

    def delay_quantiles(self) -> dict[str, float]:
        d = sorted(self.delays)
        if not d:
            return {}

        def q(p: float) -> float:
            return d[min(len(d) - 1, int(p * len(d)))]

        return {"p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "max": d[-1], "mean": sum(d) / len(d)}

    def mean_utilization(self, start: float | None = None, end: float | None = None) -> float:
        """Time-weighted mean GPU allocation % between `start` and `end` (default: all samples)."""
        pts = self.utilization
        if len(pts) < 2:
            return pts[0][1] if pts else 0.0
        t0 = pts[0][0] if start is None else start
        t1 = pts[-1][0] if end is None else end
        total = 0.0
        dur = 0.0
        for (a, v), (b, _) in itertools.pairwise(pts):
            lo, hi = max(a, t0), min(b, t1)
            if hi <= lo:
                continue
            total += v * (hi - lo)
            dur += hi - lo
        return total / dur if dur else pts[-1][1]

    def busy_mean(self) -> float:
        """Mean GPU allocation % while pods arrive (1st to 99th percentile of creation times): the trace
        spans 149 days, but 99.8% of its pods arrive in the last 40, and a few live for months."""
        return self.mean_utilization(self.extra.get("busy_from"), self.extra.get("busy_to"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "model": "dra-shares" if self.shares else "device-plugin",
            "compress": self.extra.get("compress", 1.0),
            "pods": self.pods,
            "skipped": self.skipped,
            "scheduled": self.scheduled,
            "neverScheduled": self.never_scheduled,
            "pendingDelaySeconds": {k: round(v, 1) for k, v in self.delay_quantiles().items()},
            "delayedPods": sum(1 for d in self.delays if d > 0),
            "peakPending": self.peak_pending,
            "meanGpuAllocationPct": round(self.mean_utilization(), 3),
            "arrivalWindowSeconds": [self.extra.get("busy_from"), self.extra.get("busy_to")],
            "meanGpuAllocationPctInArrivalWindow": round(self.busy_mean(), 3),
            "peakGpuAllocationPct": round(max((u for _, u in self.utilization), default=0.0), 3),
            "peakGpusBusyPct": round(max((u for _, u in self.gpus_busy), default=0.0), 3),
            "seconds": round(self.seconds, 2),
        }


def run_timed(
    trace: Trace,
    policy: Policy,
    *,
    shares: bool = True,
    seed: int = 42,
    use_allocator: bool = True,
    compress: float = 1.0,
    progress: Callable[[int, int], None] | None = None,
    features: FeatureGates | None = None,
) -> TimedRun:
    """`compress` > 1 divides the gaps between creations by that factor and keeps every pod's lifetime:
    the trace's own times never have more than 56 pods alive at once (it is a sample of a cluster's pods),
    so compression is how to load the fleet and see queueing."""
    t0 = time.perf_counter()
    cluster = ReplayCluster(trace.nodes, shares=shares, use_allocator=use_allocator, features=features)
    policy.prepare([p.request for p in trace.pods])
    policy.prepare_fleet(cluster.views)
    placer = Placer(cluster, policy, seed)
    events: list[tuple[float, int, int]] = []
    reqs: list[PodRequest] = []
    skipped = 0
    origin = min((tp.creation for tp in trace.pods if tp.creation is not None), default=0)
    for i, tp in enumerate(trace.pods):
        req = tp.request
        if not shares and req.is_share:
            req = dataclasses.replace(req, gpu_milli=MILLI)
        reqs.append(req)
        if tp.creation is None or tp.deletion is None or tp.deletion <= tp.creation:
            skipped += 1  # no times, or a zero lifetime: never runs
            continue
        start = origin + (tp.creation - origin) / compress
        events.append((start, 1, i))
        events.append((start + (tp.deletion - tp.creation), 0, i))  # deletions first at equal times
    events.sort()
    created = {i: t for t, kind, i in events if kind == 1}
    bound: dict[int, Binding] = {}
    pending: dict[int, None] = {}  # insertion-ordered FIFO
    delays: list[float] = []
    never = 0
    peak = 0
    cap = cluster.capacity_milli
    gpus_total = sum(len(v.gpu_free) for v in cluster.views) or 1
    util: list[tuple[float, float]] = []
    busy: list[tuple[float, float]] = []
    allocated = 0
    busy_gpus = 0
    span = (float(events[0][0]), float(events[-1][0])) if events else (0.0, 0.0)
    pods = trace.pods

    def busy_delta(b: Binding, before: list[int], view_free: list[int]) -> int:
        n = 0
        for g in b.gpus:
            was = before[g] < MILLI
            now = view_free[g] < MILLI
            n += int(now) - int(was)
        return n

    def try_bind(i: int, now: float) -> bool:
        nonlocal allocated, busy_gpus
        got = placer.select(reqs[i])
        if got is None:
            return False
        idx, gpus = got
        before = list(cluster.views[idx].gpu_free)
        b = cluster.bind(idx, pods[i].name, reqs[i], gpus, policy)
        bound[i] = b
        allocated += reqs[i].total_milli
        busy_gpus += busy_delta(b, before, cluster.views[idx].gpu_free)
        delays.append(now - created[i])
        return True

    total = len(events)
    for n, (t, kind, i) in enumerate(events):
        now = float(t)
        if kind == 1:
            if not try_bind(i, now):  # waiting pods do not block new ones (unschedulable queue)
                pending[i] = None
                peak = max(peak, len(pending))
        else:
            if i in pending:
                del pending[i]
                never += 1
            b = bound.pop(i, None)
            if b is not None:
                before = list(cluster.views[b.node].gpu_free)
                cluster.unbind(reqs[i], b)
                allocated -= reqs[i].total_milli
                busy_gpus += busy_delta(b, before, cluster.views[b.node].gpu_free)
                if pending:
                    failed: set[PodRequest] = set()
                    for j in list(pending):
                        if reqs[j] in failed:
                            continue
                        if try_bind(j, now):
                            del pending[j]
                        else:
                            failed.add(reqs[j])
        # One point per event time (the last state at that time): exact means and peaks; charts downsample.
        point = (now, 100 * allocated / cap)
        if util and util[-1][0] == now:
            util[-1] = point
            busy[-1] = (now, 100 * busy_gpus / gpus_total)
        else:
            util.append(point)
            busy.append((now, 100 * busy_gpus / gpus_total))
        if progress is not None and (n & 1023) == 0:
            progress(n, total)
    if progress is not None:
        progress(total, total)
    creations = sorted(e[0] for e in events if e[1] == 1)
    busy_from = float(creations[len(creations) // 100]) if creations else 0.0
    busy_to = float(creations[len(creations) * 99 // 100]) if creations else 0.0
    return TimedRun(
        policy.name,
        shares,
        len(pods),
        skipped,
        len(delays),
        never,
        delays,
        util,
        busy,
        peak,
        time.perf_counter() - t0,
        span,
        {"busy_from": busy_from, "busy_to": busy_to, "compress": compress},
    )
