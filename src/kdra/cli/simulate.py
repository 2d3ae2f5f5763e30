"""`kdra simulate`: the DRA and device-plugin models side by side on a fleet and a workload."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from kdra.cli.common import (
    PLACEMENTS,
    add_device_preference_arg,
    add_fleet_arg,
    add_gates_arg,
    add_limit_args,
    add_validate_arg,
    add_workload_arg,
    feature_gates,
)
from kdra.cli.conventions import add_flag, add_output
from kdra.errors import InputError

MODES = {"dra": ("dra",), "device-plugin": ("device-plugin",), "both": ("dra", "device-plugin")}


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "simulate",
        help="simulate a workload on a fleet, DRA vs device plugins",
        description="Run a discrete-event simulation of a workload on a fleet under the DRA model, "
        "the legacy "
        "device-plugin model, or both, and report placements, pending pods and GPU metrics. "
        "Without arguments: "
        "the bundled `mixed` fleet and `mixed-month` workload, both models.",
    )
    add_fleet_arg(p)
    add_workload_arg(p)
    p.add_argument(
        "--mode", choices=sorted(MODES), default="both", help="allocation model(s) (default: both)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed for generated workloads and names (default: 0)")
    add_output(
        p,
        ("table", "json"),
        help="table: the report's tables, the first placements and pending pods; wide: every placement "
        "and pending pod; name: pod/NAME of every pod placed; json: everything",
    )
    p.add_argument("--report", metavar="FILE", help="also write a self-contained HTML report to FILE")
    p.add_argument(
        "--scoring",
        choices=("LeastAllocated", "MostAllocated"),
        default="LeastAllocated",
        help="NodeResourcesFit scoring strategy (default: LeastAllocated, upstream's default)",
    )
    add_flag(
        p,
        "--placement",
        choices=PLACEMENTS,
        default="upstream",
        help="where devices go among nodes that fit, as `kdra scheduler --placement` (default upstream; "
        "kdra: kdra's replay policy, learning the workload from the pods it sees, docs/replay.md)",
    )
    add_device_preference_arg(p, "-o json records per placement whether the preference or the rules decided")
    add_validate_arg(p)
    add_limit_args(p, nodes=True, pods=True)
    add_gates_arg(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kdra.scheduler.plugins.noderesources import ScoringStrategy
    from kdra.scheduler.scheduler import SchedulerConfig
    from kdra.sim.report import to_html, to_json
    from kdra.sim.runner import simulate

    if args.seed < 0:
        raise InputError(f"--seed: Invalid value: {args.seed}: must not be negative")
    config = SchedulerConfig(
        scoring=ScoringStrategy(type=args.scoring),
        features=feature_gates(args),
        device_preference=getattr(args, "device_preference", None),
    )
    if args.placement != "upstream":
        import dataclasses

        from kdra.scheduler.fragmentation import placement_plugins, placement_preference

        plugins = placement_plugins(args.placement)
        config = dataclasses.replace(
            config,
            extra_plugins=plugins,
            device_preference=config.device_preference or placement_preference(plugins),
        )
    modes = MODES[args.mode]
    from kdra.cli.common import Progress, limits, validate_mode

    with Progress([f"simulate {m}" for m in modes]) as progress:

        def update(mode: str, now: float, horizon: float) -> None:
            progress.update(f"simulate {mode}", now, horizon, f"simulate {mode}")

        report = simulate(
            args.fleet,
            args.workload,
            modes,
            args.seed,
            config,
            progress=update,
            validate=validate_mode(args),
            **limits(args),
        )
    if args.report:
        try:
            os.makedirs(os.path.dirname(os.path.abspath(args.report)), exist_ok=True)
            with open(args.report, "w", encoding="utf-8") as f:
                f.write(to_html(report))
        except OSError as exc:
            raise InputError(f"--report {args.report}: {exc.strerror or exc}") from None
    if args.output == "json":
        sys.stdout.write(to_json(report))
    elif args.output == "name":
        from kdra.cli.output import write_names
        from kdra.sim.report import placements

        seen: dict[str, None] = {}
        for m in report.modes:
            seen.update((f"pod/{p['pod'].split('/')[-1]}", None) for p in placements(report.modes[m]))
        write_names(seen)
    else:
        print_tables(report, wide=args.output == "wide")
        if args.report:
            print(f"\nHTML report written to {args.report}")
    return 0


def print_tables(report: Any, *, wide: bool = False) -> None:
    """The report's tables; the placements and pending pods are cut to the first ones unless `wide`."""
    from rich.table import Table

    from kdra.api.durations import format_duration
    from kdra.cli.output import console as make_console
    from kdra.sim.report import (
        METRIC_ROWS,
        MODE_TITLES,
        format_metric,
        headline_sentence,
        pending,
        placements,
    )

    console = make_console(width=max(100, make_console().width))
    modes = list(report.modes)
    console.print(
        f"[bold]kdra simulate[/]: workload [bold]{report.workload}[/] on fleet [bold]{report.fleet}[/], "
        f"seed {report.seed}"
    )
    t = Table(title="Fleet metrics", title_justify="left")
    t.add_column("metric")
    for m in modes:
        t.add_column(MODE_TITLES[m], justify="right")
    for label, key, fmt in METRIC_ROWS:
        t.add_row(label, *(format_metric(report.modes[m].metrics[key], fmt) for m in modes))
    console.print(t)
    w = Table(title="GPU-hours by workload", title_justify="left")
    w.add_column("workload")
    for m in modes:
        w.add_column(f"pods ({MODE_TITLES[m]})", justify="right")
        w.add_column(f"GPU-h ({MODE_TITLES[m]})", justify="right")
    names = sorted({n for m in modes for n in report.modes[m].workloads})
    for n in names:
        row = [n]
        for m in modes:
            wl = report.modes[m].workloads.get(n, {})
            row += [
                f"{int(wl.get('scheduled', 0))}/{int(wl.get('pods', 0))}",
                f"{wl.get('gpu_hours', 0):,.0f}",
            ]
        w.add_row(*row)
    console.print(w)
    for m in modes:
        pl = placements(report.modes[m])
        shown = pl if wide else pl[:10]
        t = Table(
            title=f"Placements, {MODE_TITLES[m]} ("
            + (f"all {len(pl)}" if wide else f"first 10 of {len(pl)}; all with -o wide or -o json")
            + ")",
            title_justify="left",
        )
        for col in ("pod", "node", "devices", "start"):
            t.add_column(col, overflow="fold")
        for item in shown:
            t.add_row(
                item["pod"],
                item["node"] or "",
                ", ".join(item["devices"]) or "-",
                format_duration(item["start_seconds"]),
            )
        console.print(t)
    for m in modes:
        pend = pending(report.modes[m])
        if not pend:
            continue
        p = Table(
            title=f"Pending pods, {MODE_TITLES[m]} ({len(pend)})", title_justify="left", show_lines=True
        )
        p.add_column("pod")
        p.add_column("why", overflow="fold")
        for item in pend if wide else pend[:20]:
            p.add_row(item["pod"], item["explanation"])
        if len(pend) > 20 and not wide:
            p.add_row("…", f"{len(pend) - 20} more (see -o wide, -o json or --report)")
        console.print(p)
    sentence = headline_sentence(report)
    if sentence:
        console.print(f"\n[bold green]{sentence}[/]")
