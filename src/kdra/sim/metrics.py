"""Fleet metrics from a simulation run (the `metrics` object of `kdra simulate -o json`, docs/simulate.md)."""

from __future__ import annotations

import math
from typing import Any

from kdra.sim.engine import ModeResult, Sample


def _time_mean(samples: list[Sample], end: float, value: Any) -> float:
    """Mean over [0, end] of a step function that holds each sample's value until the next sample."""
    if not samples or end <= 0:
        return 0.0
    total = 0.0
    for i, s in enumerate(samples):
        t1 = samples[i + 1].t if i + 1 < len(samples) else end
        if t1 > s.t:
            total += value(s) * (min(t1, end) - s.t)
    return total / end


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]); 0 for no values."""
    if not values:
        return 0.0
    vs = sorted(values)
    k = max(0, min(len(vs) - 1, math.ceil(q / 100 * len(vs)) - 1))
    return vs[k]


def wait_times(r: ModeResult) -> list[float]:
    out = []
    for rec in r.pods.values():
        if rec.start is not None:
            out.append(rec.start - rec.arrival)
        elif rec.withdrawn and rec.end is not None:
            out.append(rec.end - rec.arrival)
        else:
            out.append(max(0.0, r.end - rec.arrival))
    return out


def compute_metrics(r: ModeResult) -> dict[str, Any]:
    samples = r.samples
    scheduled = [p for p in r.pods.values() if p.start is not None]
    withdrawn = [p for p in r.pods.values() if p.start is None and p.withdrawn]
    waits = wait_times(r)
    total = r.total_gpus or 1
    gpu_seconds = _time_mean(samples, r.end, lambda s: s.gpu_equiv) * r.end
    return {
        "pods_total": len(r.pods),
        "pods_scheduled": len(scheduled),
        "pods_pending": len(r.pods) - len(scheduled) - len(withdrawn),
        "pods_withdrawn_unscheduled": len(withdrawn),
        "gpus_total": r.total_gpus,
        "gpus_allocated_peak": round(max((s.gpu_equiv for s in samples), default=0.0), 3),
        "gpus_allocated_mean": round(_time_mean(samples, r.end, lambda s: s.gpu_equiv), 3),
        "gpu_allocation_ratio_mean": round(_time_mean(samples, r.end, lambda s: s.gpu_equiv / total), 4),
        "gpu_allocation_ratio_peak": round(max((s.gpu_equiv / total for s in samples), default=0.0), 4),
        "gpu_hours_allocated": round(gpu_seconds / 3600, 1),
        "gpu_memory_allocated_bytes_peak": max((s.gpu_memory for s in samples), default=0),
        "stranded_gpu_memory_bytes_peak": max((s.stranded for s in samples), default=0),
        "stranded_gpu_memory_bytes_mean": int(_time_mean(samples, r.end, lambda s: s.stranded)),
        "pods_pending_peak": max((s.pending for s in samples), default=0),
        "wait_seconds_p50": round(percentile(waits, 50), 1),
        "wait_seconds_p90": round(percentile(waits, 90), 1),
        "wait_seconds_p99": round(percentile(waits, 99), 1),
        "wait_seconds_max": round(max(waits, default=0.0), 1),
        "simulated_seconds": round(r.end, 1),
        "scheduling_cycles": r.cycles,
    }


def per_workload(r: ModeResult) -> dict[str, dict[str, float]]:
    """GPU-hours and pods per workload stream (the kdra.dev/workload label, else the owner)."""
    out: dict[str, dict[str, float]] = {}
    for rec in r.pods.values():
        w = out.setdefault(
            rec.workload, {"pods": 0, "scheduled": 0, "gpu_hours": 0.0, "stranded_gib_hours": 0.0}
        )
        w["pods"] += 1
        if rec.start is not None:
            w["scheduled"] += 1
            end = rec.end if rec.end is not None else r.end
            hours = max(0.0, min(end, r.end) - rec.start) / 3600
            w["gpu_hours"] += rec.gpu_seconds(r.end) / 3600
            w["stranded_gib_hours"] += rec.stranded / (1 << 30) * hours
    for w in out.values():
        w["gpu_hours"] = round(w["gpu_hours"], 1)
        w["stranded_gib_hours"] = round(w["stranded_gib_hours"], 1)
    return dict(sorted(out.items()))


def _gpu_hours_by_pod(r: ModeResult) -> dict[str, float]:
    out = {}
    for rec in r.pods.values():
        if rec.start is None:
            continue
        out[rec.key] = rec.gpu_seconds(r.end) / 3600
    return out


def _peak(r: ModeResult, keys: set[str], value: Any = None) -> float:
    """The highest total of `value(pod)` over the pods `keys` while they run (what the fleet held for
    them at its fullest); without `value`, their GPU-equivalents, shared claims' cost carried on
    included (PodRecord.gpu_segments)."""
    events: list[tuple[float, int, float]] = []
    for key in keys:
        rec = r.pods[key]
        if rec.start is None:
            continue
        end = min(rec.end if rec.end is not None else r.end, r.end)
        segments = rec.gpu_segments(r.end) if value is None else [(rec.start, end, float(value(rec)))]
        for a, b, v in segments:
            if b <= a:
                continue
            events.append((a, 1, v))
            events.append((b, 0, -v))  # ends before starts at the same instant
    top = total = 0.0
    for _t, _order, v in sorted(events):
        total += v
        top = max(top, total)
    return top


def headline(dra_r: ModeResult, dp_r: ModeResult, dra: dict[str, Any], dp: dict[str, Any]) -> dict[str, Any]:
    """DRA against device plugins on the same fleet and workload, on the same work: every figure is over
    the pods both models placed (a model that leaves pods pending does not look cheaper for it), and how
    many pods each could not place is said beside it."""
    a, b = _gpu_hours_by_pod(dra_r), _gpu_hours_by_pod(dp_r)
    common = set(a) & set(b)
    ha = sum(a[k] for k in common)
    hb = sum(b[k] for k in common)
    hours = max(dra_r.end, dp_r.end) / 3600 or 1.0
    peak_dra = _peak(dra_r, common)
    peak_dp = _peak(dp_r, common)
    stranded_dra = int(_peak(dra_r, common, lambda p: p.stranded))
    stranded_dp = int(_peak(dp_r, common, lambda p: p.stranded))
    return {
        "pods_compared": len(common),
        "pods_not_placed_dra": dra["pods_total"] - dra["pods_scheduled"],
        "pods_not_placed_device_plugin": dp["pods_total"] - dp["pods_scheduled"],
        "gpu_hours_dra": round(ha, 1),
        "gpu_hours_device_plugin": round(hb, 1),
        "gpu_hours_saved": round(hb - ha, 1),
        "gpu_hours_saved_percent": round(100 * (hb - ha) / hb, 1) if hb else 0.0,
        "gpus_saved_mean": round((hb - ha) / hours, 1),
        "gpus_allocated_peak_dra": round(peak_dra, 2),
        "gpus_allocated_peak_device_plugin": round(peak_dp, 2),
        "gpus_saved_at_peak": round(peak_dp - peak_dra, 2),
        "stranded_gpu_memory_bytes_peak_dra": stranded_dra,
        "stranded_gpu_memory_bytes_peak_device_plugin": stranded_dp,
        "stranded_gpu_memory_bytes_peak_avoided": stranded_dp - stranded_dra,
        "extra_pods_scheduled": dra["pods_scheduled"] - dp["pods_scheduled"],
        "wait_seconds_p99_dra": dra["wait_seconds_p99"],
        "wait_seconds_p99_device_plugin": dp["wait_seconds_p99"],
    }
