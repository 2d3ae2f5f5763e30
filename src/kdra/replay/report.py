"""Outputs of `kdra replay alibaba`: the table beside the published figures, JSON, CSV and the HTML report
with allocation curves in the style of the FGD paper's figure (GPU allocation vs arrived workload)."""

from __future__ import annotations

import csv
import io
import itertools
import json
from collections.abc import Sequence
from html import escape
from typing import Any

from kdra.replay.experiment import Experiment
from kdra.scheduler.gpupolicies import PUBLISHED_UNALLOCATED_AT_100

COLORS = {
    "kdra": "#1b7f5f",
    "fgd": "#c2542d",
    "best-fit": "#3b6fb6",
    "packing": "#8d5fb0",
    "clustering": "#d49a1f",
    "dot-product": "#6b6b6b",
    "random": "#b03a6a",
}
LABELS = {
    "kdra": "kdra",
    "fgd": "FGD",
    "best-fit": "BestFit",
    "packing": "Packing",
    "clustering": "Clustering",
    "dot-product": "DotProd",
    "random": "Random",
}
FONT = "font-family='system-ui,-apple-system,Segoe UI,Roboto,sans-serif'"


def label(name: str) -> str:
    from kdra.replay.experiment import ONLINE

    if name.endswith(ONLINE):
        return label(name.removesuffix(ONLINE)) + " (online)"
    return LABELS.get(name, name)


def table_rows(exp: Experiment) -> list[dict[str, Any]]:
    rows = []
    for name, pr in sorted(exp.policies.items(), key=lambda kv: kv[1].mean):
        pub = pr.published
        rows.append(
            {
                "policy": name,
                "unallocated_gpu_pct_at_100": round(pr.mean, 2),
                "published": pub,
                "gap": round(pr.mean - pub, 2) if pub is not None else None,
                "seeds": len(pr.per_seed),
                "min": round(min(pr.per_seed.values()), 2),
                "max": round(max(pr.per_seed.values()), 2),
                "seconds_per_run": round(sum(pr.seconds.values()) / max(1, len(pr.seconds)), 1),
                "cpu_seconds_per_run": round(sum(pr.cpu_seconds.values()) / max(1, len(pr.cpu_seconds)), 1),
            }
        )
    return rows


def to_json(exp: Experiment) -> str:
    return json.dumps(exp.to_dict(), indent=2) + "\n"


def to_csv(exp: Experiment) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(
        ["policy", "seed", "unallocated_gpu_pct_at_100", "published_mean", "pods", "placed", "seconds"]
    )
    for name, pr in exp.policies.items():
        for seed in sorted(pr.per_seed):
            w.writerow(
                [
                    name,
                    seed,
                    f"{pr.per_seed[seed]:.4f}",
                    "" if pr.published is None else f"{pr.published:.2f}",
                    pr.pods.get(seed, ""),
                    pr.placed.get(seed, ""),
                    f"{pr.seconds.get(seed, 0):.2f}",
                ]
            )
    return buf.getvalue()


def print_table(exp: Experiment, file: Any = None, *, wide: bool = False, console: Any = None) -> None:
    """The comparison table; `wide` adds each seed's figure."""
    from rich.console import Console
    from rich.table import Table

    if console is None:
        console = Console(file=file, highlight=False, soft_wrap=True)
    seeds = exp.seeds
    # (Checked pairwise: a list of the range from the first to the last seed was built for any seeds,
    # 100 million entries for `--seeds 1,100000000`.)
    consecutive = all(b == a + 1 for a, b in itertools.pairwise(seeds))
    seed_text = f"{seeds[0]}-{seeds[-1]}" if consecutive and len(seeds) > 1 else ",".join(map(str, seeds))
    t = Table(
        title=f"Unallocated GPU % at 100% arrived workload (mean over seeds {seed_text}; "
        f"{exp.nodes} nodes, {exp.gpus} GPUs, inflated to {exp.inflate:.0%})",
        title_justify="left",
    )
    t.add_column("policy")
    t.add_column("kdra replay", justify="right")
    t.add_column("published (FGD artifact)", justify="right")
    t.add_column("gap", justify="right")
    t.add_column("min..max", justify="right")
    t.add_column("s/run (cpu)", justify="right")
    if wide:
        t.add_column("per seed", justify="left")
    for r in table_rows(exp):
        pub = "-" if r["published"] is None else f"{r['published']:.2f}"
        gap = "-" if r["gap"] is None else f"{r['gap']:+.2f}"
        t.add_row(
            label(r["policy"]),
            f"{r['unallocated_gpu_pct_at_100']:.2f}",
            pub,
            gap,
            f"{r['min']:.2f}..{r['max']:.2f}",
            f"{r['seconds_per_run']:.1f} ({r['cpu_seconds_per_run']:.1f})",
            *(
                [" ".join(f"{s}:{v:.2f}" for s, v in sorted(exp.policies[r["policy"]].per_seed.items()))]
                if wide
                else []
            ),
        )
    console.print(t)
    missing = [n for n in PUBLISHED_UNALLOCATED_AT_100 if n not in exp.policies]
    if not exp.reference:
        console.print(
            "published figures not shown: they are of the bundled fleet and the default pod list at 130% "
            "inflation, not of this run"
        )
    elif missing:
        console.print(
            "published, not run here: "
            + ", ".join(f"{label(n)} {PUBLISHED_UNALLOCATED_AT_100[n]:.2f}" for n in missing)
        )
    short = min((v for pr in exp.policies.values() for v in pr.arrived.values()), default=100.0)
    if short < 99.5:
        # Otherwise a list that asks for half the fleet read as a policy that wastes half of it.
        console.print(
            f"the pods' GPU request reaches only {short:.1f}% of capacity (lowest seed): "
            f"{100 - short:.1f} points of the unallocated figure are capacity no pod asked for, whatever the "
            "placement"
        )
    calls = sum(pr.allocator_calls for pr in exp.policies.values())
    secs = sum(pr.allocator_seconds for pr in exp.policies.values())
    console.print(
        f"{len(exp.policies) * len(exp.seeds)} runs in {exp.wall_seconds:.1f} s on {exp.processes} "
        f"process(es); DRA allocator: {calls} claim allocations, {secs:.1f} s"
    )


# -- HTML ---------------------------------------------------------------------------------------------


def _line_chart(
    title: str,
    series: Sequence[tuple[str, str, Sequence[tuple[float, float]]]],
    x_range: tuple[float, float],
    y_range: tuple[float, float],
    *,
    ideal: bool = True,
    width: int = 640,
    height: int = 400,
    marker_x: float | None = 100,
) -> str:
    left, right, top, bottom = 56, 120, 34, 44
    pw, ph = width - left - right, height - top - bottom
    x0, x1 = x_range
    y0, y1 = y_range

    def sx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * pw

    def sy(y: float) -> float:
        return top + ph - (min(max(y, y0), y1) - y0) / (y1 - y0) * ph

    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        f"viewBox='0 0 {width} {height}' role='img' aria-label='{escape(title)}' {FONT} font-size='12'>",
        f"<text x='{left}' y='20' font-size='14' font-weight='600'>{escape(title)}</text>",
    ]
    xstep = 10 if x1 - x0 > 40 else 5
    ystep = 10 if y1 - y0 > 40 else (5 if y1 - y0 > 15 else 2)
    x = (int(x0) // xstep) * xstep
    while x <= x1:
        if x >= x0:
            parts.append(
                f"<line x1='{sx(x):.1f}' y1='{top}' x2='{sx(x):.1f}' y2='{top + ph}' stroke='#eee'/>"
                f"<text x='{sx(x):.1f}' y='{top + ph + 16}' text-anchor='middle'>{x:g}</text>"
            )
        x += xstep
    y = (int(y0) // ystep) * ystep
    while y <= y1:
        if y >= y0:
            parts.append(
                f"<line x1='{left}' y1='{sy(y):.1f}' x2='{left + pw}' y2='{sy(y):.1f}' stroke='#eee'/>"
                f"<text x='{left - 6}' y='{sy(y) + 4:.1f}' text-anchor='end'>{y:g}</text>"
            )
        y += ystep
    parts.append(
        f"<rect x='{left}' y='{top}' width='{pw}' height='{ph}' fill='none' stroke='#999'/>"
        f"<text x='{left + pw / 2:.1f}' y='{height - 8}' text-anchor='middle'>arrived workload "
        f"(% of GPU capacity)</text>"
        f"<text transform='translate(14 {top + ph / 2:.1f}) rotate(-90)' text-anchor='middle'>"
        f"GPU allocation ratio (%)</text>"
    )
    if ideal:
        a, b = max(x0, y0), min(x1, y1)
        if b > a:
            parts.append(
                f"<line x1='{sx(a):.1f}' y1='{sy(a):.1f}' x2='{sx(b):.1f}' y2='{sy(b):.1f}' "
                f"stroke='#bbb' stroke-dasharray='4 3'/>"
            )
    if marker_x is not None and x0 <= marker_x <= x1:
        parts.append(
            f"<line x1='{sx(marker_x):.1f}' y1='{top}' x2='{sx(marker_x):.1f}' y2='{top + ph}' "
            f"stroke='#999' stroke-dasharray='2 3'/>"
        )
    ly = top + 8
    for name, color, pts in series:
        shown = [(px, py) for px, py in pts if x0 <= px <= x1]
        if not shown:
            continue
        d = " ".join(f"{'M' if i == 0 else 'L'}{sx(px):.1f},{sy(py):.1f}" for i, (px, py) in enumerate(shown))
        parts.append(f"<path d='{d}' fill='none' stroke='{color}' stroke-width='2'/>")
        parts.append(
            f"<line x1='{left + pw + 10}' y1='{ly}' x2='{left + pw + 28}' y2='{ly}' stroke='{color}' "
            f"stroke-width='3'/><text x='{left + pw + 32}' y='{ly + 4}'>{escape(name)}</text>"
        )
        ly += 18
    parts.append("</svg>")
    return "".join(parts)


def _bars(exp: Experiment, width: int = 640) -> str:
    rows = table_rows(exp)
    vmax = max([r["unallocated_gpu_pct_at_100"] for r in rows] + [r["published"] or 0 for r in rows]) * 1.1
    bar_h, gap = 12, 10
    left, top = 100, 30
    height = top + len(rows) * (2 * bar_h + gap) + 30
    pw = width - left - 150
    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' {FONT} font-size='12'>",
        f"<text x='{left}' y='18' font-size='14' font-weight='600'>Unallocated GPU % at 100% arrived "
        f"workload (lower is better)</text>",
    ]
    y = top
    for r in rows:
        name = r["policy"]
        color = COLORS.get(name, "#555")
        v = r["unallocated_gpu_pct_at_100"]
        parts.append(
            f"<text x='{left - 8}' y='{y + bar_h + 4}' text-anchor='end'>{escape(label(name))}</text>"
        )
        parts.append(
            f"<rect x='{left}' y='{y}' width='{v / vmax * pw:.1f}' height='{bar_h}' fill='{color}'/>"
            f"<text x='{left + v / vmax * pw + 4:.1f}' y='{y + bar_h - 2}'>{v:.2f} kdra replay</text>"
        )
        if r["published"] is not None:
            p = r["published"]
            parts.append(
                f"<rect x='{left}' y='{y + bar_h}' width='{p / vmax * pw:.1f}' height='{bar_h}' "
                f"fill='{color}' fill-opacity='0.35'/>"
                f"<text x='{left + p / vmax * pw + 4:.1f}' y='{y + 2 * bar_h - 2}' fill='#666'>{p:.2f} "
                f"published</text>"
            )
        y += 2 * bar_h + gap
    parts.append("</svg>")
    return "".join(parts)


def to_html(exp: Experiment, extra_sections: Sequence[str] = ()) -> str:
    order = [n for n, _ in sorted(exp.policies.items(), key=lambda kv: kv[1].mean)]
    series = [(label(n), COLORS.get(n, "#555"), exp.policies[n].mean_curve()) for n in order]
    until = max(100, round(exp.inflate * 100))
    full = _line_chart("GPU allocation vs arrived workload", series, (0, until), (0, 100))
    zoom = _line_chart("Zoom: the knee (70-100% allocated)", series, (70, until), (70, 100))
    trs = []
    for r in table_rows(exp):
        pub = "-" if r["published"] is None else f"{r['published']:.2f}"
        gap = "-" if r["gap"] is None else f"{r['gap']:+.2f}"
        trs.append(
            f"<tr><td>{escape(label(r['policy']))}</td><td>{r['unallocated_gpu_pct_at_100']:.2f}</td>"
            f"<td>{pub}</td><td>{gap}</td><td>{r['min']:.2f}..{r['max']:.2f}</td>"
            f"<td>{r['seconds_per_run']:.1f}</td></tr>"
        )
    rows = "".join(trs)
    per_seed = "".join(
        f"<tr><td>{escape(label(n))}</td>"
        + "".join(f"<td>{exp.policies[n].per_seed.get(s, float('nan')):.2f}</td>" for s in exp.seeds)
        + "</tr>"
        for n in order
    )
    seeds_head = "".join(f"<th>{s}</th>" for s in exp.seeds)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>kdra replay: Alibaba openb trace</title>
<style>
body {{ font-family: system-ui,-apple-system,Segoe UI,Roboto,sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
td, th {{ border: 1px solid #ddd; padding: 4px 10px; text-align: right; }}
td:first-child, th:first-child {{ text-align: left; }}
.charts {{ display: flex; flex-wrap: wrap; gap: 16px; }}
.note {{ color: #555; font-size: 0.9em; max-width: 60em; }}
</style></head><body>
<h1>Trace replay: Alibaba GPU trace v2023 (openb)</h1>
<p class="note">{exp.nodes} nodes, {exp.gpus} GPUs; pod list {escape(exp.pods_source)}, inflated by sampling
with replacement to {exp.inflate:.0%} of GPU capacity, shuffled, placed one at a time and never removed
(the method of Weng et al., <i>Beware of Fragmentation</i>, USENIX ATC '23). Every GPU pod's ResourceClaim is
allocated by kdra's DRA allocator on the chosen node. Published figures: the FGD artifact's
analysis_allo_discrete.csv, mean of 10 seeds. Data: Alibaba, research or study use only.</p>
<table><tr><th>policy</th><th>unallocated GPU % at 100%</th><th>published</th><th>gap</th>
<th>min..max</th><th>s/run</th></tr>{rows}</table>
<div class="charts">{full}{zoom}</div>
{_bars(exp)}
<h2>Per seed</h2>
<table><tr><th>policy</th>{seeds_head}</tr>{per_seed}</table>
{"".join(extra_sections)}
</body></html>
"""
