"""Outputs of `kdra simulate`: the JSON document (docs/simulate.md) and the self-contained HTML report."""

from __future__ import annotations

import json
from html import escape
from typing import Any

from kdra.api.durations import format_duration
from kdra.sim.engine import DEVICE_PLUGIN, DRA
from kdra.sim.runner import ModeReport, SimulationReport
from kdra.sim.svg import PALETTE, bar_chart, step_chart

GIB = 1 << 30
MODE_TITLES = {DRA: "DRA", DEVICE_PLUGIN: "device plugin"}


def placements(mr: ModeReport) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for rec in sorted(
        mr.result.pods.values(), key=lambda p: (p.start if p.start is not None else 1e30, p.key)
    ):
        if rec.start is None:
            continue
        out.append(
            {
                "pod": rec.key,
                "workload": rec.workload,
                "node": rec.node,
                "devices": rec.devices,
                # What the pod held by its end: its own devices and any shared claim it took over from a
                # user that ended (it was its own only, so a shared claim's later user read 0 while the
                # headline counted its hours); gpu_hours adds up, over pods, to gpu_hours_allocated.
                "gpu_equivalents": round(rec.gpu_equiv + sum(e for _since, e, _mem in rec.carried), 4),
                "gpu_hours": round(rec.gpu_seconds(mr.result.end) / 3600, 4),
                "arrival_seconds": round(rec.arrival, 1),
                "start_seconds": round(rec.start, 1),
                "end_seconds": round(rec.end, 1) if rec.end is not None else None,
            }
        )
        choice = mr.result.device_choices.get(rec.key)
        if choice is not None:
            out[-1]["devicePreference"] = choice
    return out


def pending(mr: ModeReport) -> list[dict[str, Any]]:
    r = mr.result
    return [
        {
            "pod": key,
            "workload": r.pods[key].workload,
            "waiting_seconds": round(r.end - r.pods[key].arrival, 1),
            "explanation": text,
        }
        for key, text in sorted(r.explanations.items())
    ]


def to_document(report: SimulationReport) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "apiVersion": "kdra.dev/v1alpha1",
        "kind": "SimulationReport",
        "fleet": report.fleet,
        "workload": report.workload,
        "seed": report.seed,
    }
    if report.headline is not None:
        doc["headline"] = report.headline
    doc["modes"] = {
        mode: {
            "metrics": mr.metrics,
            "workloads": mr.workloads,
            "placements": placements(mr),
            "pending": pending(mr),
        }
        for mode, mr in report.modes.items()
    }
    return doc


def to_json(report: SimulationReport) -> str:
    return json.dumps(to_document(report), indent=2, sort_keys=False) + "\n"


def headline_sentence(report: SimulationReport) -> str:
    h = report.headline
    if h is None:
        return ""
    # Worded by the figures' signs: where DRA held more, this said "-12.5% less, -0.5 GPUs freed" and
    # stranded memory "fell" from the smaller figure to the larger.
    pct, freed = h["gpu_hours_saved_percent"], h["gpus_saved_mean"]
    change = (
        f"{pct:g}% less, {freed:g} GPUs freed on average"
        if pct >= 0
        else (f"{-pct:g}% more, {-freed:g} GPUs more held on average")
    )
    before, after = h["stranded_gpu_memory_bytes_peak_device_plugin"], h["stranded_gpu_memory_bytes_peak_dra"]
    moved = "fell" if after < before else "rose" if after > before else "stayed"
    stranded = (
        f"{moved} from {before / GIB:,.0f} GiB to {after / GIB:,.0f} GiB"
        if moved != "stayed"
        else f"stayed at {after / GIB:,.0f} GiB"
    )
    text = (
        f"For the same {h['pods_compared']:,} pods (those both models placed), DRA allocated "
        f"{h['gpu_hours_dra']:,.0f} GPU-hours against "
        f"{h['gpu_hours_device_plugin']:,.0f} with device plugins: {change}. Their peak stranded GPU memory "
        f"{stranded}"
    )
    missed_dra, missed_dp = h["pods_not_placed_dra"], h["pods_not_placed_device_plugin"]
    if missed_dra or missed_dp:
        text += (
            f". Not placed: {missed_dra:,} pod{'s' if missed_dra != 1 else ''} under DRA, "
            f"{missed_dp:,} with device plugins"
        )
    return text + "."


_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:2rem auto;max-width:980px;
color:#222;
line-height:1.45;padding:0 1rem}
h1{font-size:1.6rem;margin-bottom:.2rem}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #ddd}
.sub{color:#666;margin-top:0}.cards{display:flex;gap:1rem;flex-wrap:wrap;margin:1.2rem 0}
.card{border:1px solid #ddd;border-radius:8px;padding:.8rem 1rem;min-width:190px;flex:1}
.card .v{font-size:1.7rem;font-weight:650;color:#1b7f5f}.card .l{color:#555;font-size:.9rem}
table{border-collapse:collapse;width:100%;font-size:.9rem;margin:.6rem 0}
th,td{border-bottom:1px solid #eee;padding:.3rem .5rem;text-align:right}th{background:#fafafa}
td:first-child,th:first-child{text-align:left}.lead{font-size:1.05rem;background:#f3faf7;border-left:4px solid
#1b7f5f;padding:.7rem 1rem}pre{white-space:pre-wrap;font-size:.8rem;margin:0}details{margin:.5rem 0}
.note{color:#666;font-size:.85rem}
"""

METRIC_ROWS = [
    ("Pods", "pods_total", "{:,}"),
    ("Pods scheduled", "pods_scheduled", "{:,}"),
    ("Pods pending at the end", "pods_pending", "{:,}"),
    ("GPUs in the fleet", "gpus_total", "{:,}"),
    ("Whole-GPU equivalents allocated, peak", "gpus_allocated_peak", "{:,.1f}"),
    ("Whole-GPU equivalents allocated, mean", "gpus_allocated_mean", "{:,.1f}"),
    ("GPU allocation ratio, mean", "gpu_allocation_ratio_mean", "{:.1%}"),
    ("GPU-hours allocated", "gpu_hours_allocated", "{:,.0f}"),
    ("Stranded GPU memory, peak (GiB)", "stranded_gpu_memory_bytes_peak", "gib"),
    ("Stranded GPU memory, mean (GiB)", "stranded_gpu_memory_bytes_mean", "gib"),
    ("Pending pods, peak", "pods_pending_peak", "{:,}"),
    ("Wait p50", "wait_seconds_p50", "dur"),
    ("Wait p99", "wait_seconds_p99", "dur"),
    ("Wait max", "wait_seconds_max", "dur"),
]


def format_metric(value: Any, fmt: str) -> str:
    if fmt == "gib":
        return f"{value / GIB:,.0f}"
    if fmt == "dur":
        return format_duration(value) if value else "0s"
    return fmt.format(value)


def report_title(report: SimulationReport) -> str:
    """What was run: both models compared, or one of them."""
    modes = list(report.modes)
    if len(modes) > 1:
        return " vs ".join("DRA" if m == DRA else "device plugins" for m in modes)
    return "DRA" if modes == [DRA] else "Device plugins"


def mode_flag(report: SimulationReport) -> str:
    modes = list(report.modes)
    return "both" if len(modes) > 1 else modes[0] if modes else "both"


def to_html(report: SimulationReport) -> str:
    modes = list(report.modes)
    end = max(mr.result.end for mr in report.modes.values())
    total = next(iter(report.modes.values())).result.total_gpus
    h = report.headline
    out = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>kdra simulate: {escape(report.workload)} on {escape(report.fleet)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{escape(report_title(report))}: {escape(report.workload)} on the {escape(report.fleet)} "
        "fleet</h1>",
        f"<p class='sub'>kdra simulate --mode {escape(mode_flag(report))} · seed {report.seed} · "
        f"{format_duration(end)} simulated · {total} GPUs</p>",
    ]
    if h is not None:
        dp = report.modes[DEVICE_PLUGIN].metrics
        dra = report.modes[DRA].metrics
        out.append(f"<p class='lead'>{escape(headline_sentence(report))}</p><div class='cards'>")
        pct, freed, avoided = (
            h["gpu_hours_saved_percent"],
            h["gpus_saved_mean"],
            h["stranded_gpu_memory_bytes_peak_avoided"],
        )
        for value, label in (
            (
                f"{abs(pct):g}%",
                f"{'fewer' if pct >= 0 else 'more'} GPU-hours for the same {h['pods_compared']:,} pods",
            ),
            (f"{abs(freed):g}", "GPUs freed on average" if freed >= 0 else "GPUs more held on average"),
            (
                f"{abs(avoided) / GIB:,.0f} GiB",
                "stranded GPU memory avoided at peak" if avoided >= 0 else "more stranded GPU memory at peak",
            ),
            (
                f"{dra['gpu_allocation_ratio_mean']:.0%} vs {dp['gpu_allocation_ratio_mean']:.0%}",
                "mean GPU allocation, DRA vs device plugin",
            ),
        ):
            out.append(
                f"<div class='card'><div class='v'>{escape(value)}</div>"
                f"<div class='l'>{escape(label)}</div></div>"
            )
        out.append("</div>")
    out.append("<h2>GPUs allocated over time</h2>")
    out.append(
        step_chart(
            "Whole-GPU equivalents allocated",
            [
                (MODE_TITLES[m], PALETTE[m], [(s.t, s.gpu_equiv) for s in report.modes[m].result.samples])
                for m in modes
            ],
            x_max=end,
            y_label="GPUs",
            hlines=[(f"fleet: {total} GPUs", total)],
        )
    )
    out.append(
        "<p class='note'>A MIG slice counts its share of its GPU's memory, a memory share its consumed "
        "memory; "
        "a device-plugin GPU counts 1 however little of it the pod uses.</p>"
    )
    out.append("<h2>Stranded GPU memory</h2>")
    out.append(
        step_chart(
            "GPU memory allocated but not needed (GiB)",
            [
                (
                    MODE_TITLES[m],
                    PALETTE[m],
                    [(s.t, s.stranded / GIB) for s in report.modes[m].result.samples],
                )
                for m in modes
            ],
            x_max=end,
            y_label="GiB",
        )
    )
    out.append("<h2>Pending pods</h2>")
    out.append(
        step_chart(
            "Pods waiting to be scheduled",
            [
                (MODE_TITLES[m], PALETTE[m], [(s.t, s.pending) for s in report.modes[m].result.samples])
                for m in modes
            ],
            x_max=end,
            y_label="pods",
        )
    )
    names = sorted({w for mr in report.modes.values() for w in mr.workloads})
    gpu_names = [
        w for w in names if any(report.modes[m].workloads.get(w, {}).get("gpu_hours", 0) for m in modes)
    ]
    if gpu_names:
        out.append("<h2>GPU-hours by workload</h2>")
        out.append(
            bar_chart(
                "GPU-hours allocated per workload",
                gpu_names,
                [
                    (
                        MODE_TITLES[m],
                        PALETTE[m],
                        [report.modes[m].workloads.get(w, {}).get("gpu_hours", 0.0) for w in gpu_names],
                    )
                    for m in modes
                ],
                unit="h",
            )
        )
    out.append(
        "<h2>Metrics</h2><table><tr><th>metric</th>"
        + "".join(f"<th>{MODE_TITLES[m]}</th>" for m in modes)
        + "</tr>"
    )
    for label, key, fmt in METRIC_ROWS:
        out.append(
            f"<tr><td>{label}</td>"
            + "".join(f"<td>{format_metric(report.modes[m].metrics[key], fmt)}</td>" for m in modes)
            + "</tr>"
        )
    out.append("</table>")
    for m in modes:
        pend = pending(report.modes[m])
        out.append(f"<h2>Pending pods: {MODE_TITLES[m]} ({len(pend)})</h2>")
        if not pend:
            out.append("<p>None: every pod that arrived was scheduled.</p>")
            continue
        out.append(
            "<table><tr><th>pod</th><th>waiting</th><th style='text-align:left'>why (scheduler)</th></tr>"
        )
        for p in pend[:200]:
            out.append(
                f"<tr><td>{escape(p['pod'])}</td><td>{format_duration(p['waiting_seconds'])}</td>"
                f"<td style='text-align:left'><pre>{escape(p['explanation'])}</pre></td></tr>"
            )
        out.append("</table>")
    for m in modes:
        pl = placements(report.modes[m])
        out.append(
            f"<details><summary>Placements: {MODE_TITLES[m]} ({len(pl)} pods)</summary><table>"
            "<tr><th>pod</th><th>node</th><th style='text-align:left'>devices</th><th>start</th></tr>"
        )
        for p in pl[:2000]:
            out.append(
                f"<tr><td>{escape(p['pod'])}</td><td>{escape(p['node'] or '')}</td>"
                f"<td style='text-align:left'>{escape(', '.join(p['devices']))}</td>"
                f"<td>{format_duration(p['start_seconds'])}</td></tr>"
            )
        out.append("</table></details>")
    out.append(
        "<p class='note'>Generated by <code>kdra simulate</code>. Same fleet, workload and seed give "
        "the same "
        "report. Metric definitions: docs/simulate.md.</p></body></html>\n"
    )
    return "".join(out)
