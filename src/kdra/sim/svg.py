"""Tiny inline-SVG charts for the HTML report: step-line charts over time and grouped horizontal bars.

No dependency: a report is one self-contained HTML file that opens anywhere and prints well.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from html import escape

PALETTE = {"dra": "#1b7f5f", "device-plugin": "#c2542d", "total": "#888888"}
FONT = "font-family='system-ui,-apple-system,Segoe UI,Roboto,sans-serif'"


def _nice_step(span: float, target: int = 5) -> float:
    if span <= 0:
        return 1.0
    raw = span / target
    mag = 10 ** len(str(int(raw))) / 10 if raw >= 1 else 10 ** -len(str(int(1 / raw)))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def time_axis(x_max: float) -> tuple[float, str]:
    """(seconds per tick unit, label) that fit a run of `x_max` seconds: days for a month, hours for a
    9-hour run, minutes for a short one."""
    for unit, label in ((86400.0, "day"), (3600.0, "hour"), (60.0, "minute")):
        if x_max >= 2 * unit:
            return unit, label
    return 1.0, "second"


def _fmt(v: float) -> str:
    v = round(v, 6)  # ticks are sums of steps: no 0.30000000000000004
    if abs(v) >= 1000:
        return f"{v / 1000:g}k"
    return f"{v:g}"


def _downsample(points: Sequence[tuple[float, float]], limit: int = 1500) -> list[tuple[float, float]]:
    if len(points) <= limit:
        return list(points)
    step = len(points) / limit
    out = []
    i = 0.0
    while int(i) < len(points):
        chunk = points[int(i) : int(i + step) or int(i) + 1]
        # keep the extreme of each chunk so peaks stay visible
        out.append(max(chunk, key=lambda p: p[1]))
        i += step
    return out


def step_chart(
    title: str,
    series: Sequence[tuple[str, str, Sequence[tuple[float, float]]]],
    *,
    x_max: float,
    y_label: str,
    x_unit: float | None = None,
    x_label: str | None = None,
    hlines: Sequence[tuple[str, float]] = (),
    width: int = 900,
    height: int = 280,
) -> str:
    left, right, top, bottom = 64, 150, 34, 40
    pw, ph = width - left - right, height - top - bottom
    if x_unit is None:
        x_unit, auto_label = time_axis(x_max)
        x_label = x_label or auto_label
    x_label = x_label or "day"
    # An all-zero chart gets a 0..1 axis, not ticks at 1e-09.
    y_max = max([v for _, _, pts in series for _, v in pts] + [v for _, v in hlines] + [0.0]) or 1.0
    step = _nice_step(y_max)
    y_top = step * (int(y_max / step) + 1)
    xs = x_max / x_unit if x_max > 0 else 1.0

    def px(t: float) -> float:
        return left + pw * (t / x_unit) / xs

    def py(v: float) -> float:
        return top + ph * (1 - v / y_top)

    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {width} {height}' width='100%' role='img' "
        f"aria-label='{escape(title)}' {FONT} font-size='12'>",
        f"<text x='{left}' y='20' font-size='15' font-weight='600'>{escape(title)}</text>",
    ]
    y = 0.0
    while y <= y_top + 1e-9:
        yy = py(y)
        parts.append(f"<line x1='{left}' x2='{left + pw}' y1='{yy:.1f}' y2='{yy:.1f}' stroke='#e5e5e5'/>")
        parts.append(f"<text x='{left - 6}' y='{yy + 4:.1f}' text-anchor='end' fill='#555'>{_fmt(y)}</text>")
        y += step
    xstep = _nice_step(xs, 8)
    x = 0.0
    while x <= xs + 1e-9:
        xx = left + pw * x / xs
        parts.append(f"<line x1='{xx:.1f}' x2='{xx:.1f}' y1='{top + ph}' y2='{top + ph + 4}' stroke='#555'/>")
        parts.append(
            f"<text x='{xx:.1f}' y='{top + ph + 17}' text-anchor='middle' fill='#555'>{_fmt(x)}</text>"
        )
        x += xstep
    parts.append(
        f"<text x='{left + pw / 2}' y='{height - 4}' text-anchor='middle' fill='#555'>"
        f"{escape(x_label)}</text>"
    )
    parts.append(
        f"<text x='14' y='{top + ph / 2}' transform='rotate(-90 14 {top + ph / 2})' text-anchor='middle' "
        f"fill='#555'>{escape(y_label)}</text>"
    )
    parts.append(f"<rect x='{left}' y='{top}' width='{pw}' height='{ph}' fill='none' stroke='#bbb'/>")
    for label, v in hlines:
        yy = py(v)
        parts.append(
            f"<line x1='{left}' x2='{left + pw}' y1='{yy:.1f}' y2='{yy:.1f}' stroke='#888' "
            "stroke-dasharray='5 4'/>"
        )
        parts.append(
            f"<text x='{left + pw - 4}' y='{yy - 4:.1f}' text-anchor='end' fill='#666'>{escape(label)}</text>"
        )
    for i, (label, color, pts) in enumerate(series):
        pts = _downsample(pts)
        if pts:
            d = [f"M{px(pts[0][0]):.1f},{py(pts[0][1]):.1f}"]
            for (t0, v0), (t1, _v1) in itertools.pairwise(pts):
                del t0
                d.append(f"H{px(t1):.1f}V{py(_v1):.1f}")
                del v0
            d.append(f"H{px(x_max):.1f}")
            parts.append(f"<path d='{''.join(d)}' fill='none' stroke='{color}' stroke-width='1.8'/>")
        ly = top + 16 + 20 * i
        parts.append(
            f"<line x1='{left + pw + 14}' x2='{left + pw + 34}' y1='{ly}' y2='{ly}' stroke='{color}' "
            "stroke-width='3'/>"
        )
        parts.append(f"<text x='{left + pw + 40}' y='{ly + 4}'>{escape(label)}</text>")
    parts.append("</svg>")
    return "".join(parts)


def bar_chart(
    title: str,
    categories: Sequence[str],
    series: Sequence[tuple[str, str, Sequence[float]]],
    *,
    unit: str,
    width: int = 900,
) -> str:
    row = 14 * len(series) + 10
    left, right, top = 150, 150, 34
    height = top + row * len(categories) + 30
    pw = width - left - right
    v_max = max([v for _, _, vs in series for v in vs] + [0.0]) or 1.0
    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {width} {height}' width='100%' role='img' "
        f"aria-label='{escape(title)}' {FONT} font-size='12'>",
        f"<text x='{left}' y='20' font-size='15' font-weight='600'>{escape(title)}</text>",
    ]
    for ci, cat in enumerate(categories):
        y0 = top + ci * row
        parts.append(
            f"<text x='{left - 8}' y='{y0 + row / 2 + 2:.1f}' text-anchor='end'>{escape(cat)}</text>"
        )
        for si, (_label, color, vs) in enumerate(series):
            v = vs[ci]
            w = pw * v / v_max
            yy = y0 + 4 + si * 14
            parts.append(f"<rect x='{left}' y='{yy}' width='{w:.1f}' height='12' fill='{color}'/>")
            parts.append(
                f"<text x='{left + w + 4:.1f}' y='{yy + 10}' fill='#333'>{v:,.0f} {escape(unit)}</text>"
            )
    for si, (label, color, _vs) in enumerate(series):
        ly = top + 10 + 20 * si
        parts.append(f"<rect x='{left + pw + 40}' y='{ly - 8}' width='16' height='10' fill='{color}'/>")
        parts.append(f"<text x='{left + pw + 62}' y='{ly + 1}'>{escape(label)}</text>")
    parts.append("</svg>")
    return "".join(parts)
