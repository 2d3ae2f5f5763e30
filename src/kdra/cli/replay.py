"""`kdra replay alibaba`: the Alibaba GPU trace v2023 through kdra's placement policies and DRA allocator."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Any

from kdra.cli.common import add_gates_arg, add_limit_args, feature_gates, limits
from kdra.cli.conventions import add_flag, add_output
from kdra.errors import InputError


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "replay",
        help="replay a GPU cluster trace (Alibaba openb) and measure GPU waste per placement policy",
        description="Replay a GPU cluster trace through kdra's placement policies and DRA allocator.",
    )
    sub = p.add_subparsers(dest="trace", metavar="TRACE")
    a = sub.add_parser(
        "alibaba",
        help="the Alibaba GPU trace v2023 (openb), the FGD paper's experiment",
        description="The FGD paper's experiment (USENIX ATC '23) on the Alibaba GPU trace v2023: the pod "
        "list inflated to --inflate x GPU capacity by sampling with replacement, shuffled, placed one at a "
        "time and never removed; reports the unallocated GPU % at 100% arrived workload per policy "
        "(mean over seeds) beside the published figures. Policies: random, dot-product, best-fit, "
        "packing, clustering, fgd, kdra (default), or `all`. Data: Alibaba, research or study use only.",
    )
    add_flag(
        a,
        "--fleet",
        default="alibaba-openb",
        help="the nodes: an openb node-list CSV (sn,cpu_milli,memory_mib,gpu,model) or the bundled "
        "alibaba-openb (default)",
    )
    a.add_argument(
        "--pods",
        metavar="CSV",
        help="pod list (name,cpu_milli,memory_mib,num_gpu,gpu_milli,"
        "gpu_spec,...); default: the trace's openb_pod_list_default.csv",
    )
    a.add_argument(
        "--policy",
        nargs="+",
        action="extend",
        default=None,
        metavar="NAME",
        help="placement policies, repeatable and comma-separated (--policy kdra --policy fgd, "
        "--policy kdra,fgd; default: kdra; `all` for all seven)",
    )
    a.add_argument(
        "--seeds",
        action="append",
        default=None,
        help="seeds: 42-51, 42,43 or 42; repeatable (default: 42-51)",
    )
    a.add_argument(
        "--variant",
        metavar="KIND[:SEED]",
        help="replay a seeded variant of the pod list instead (kdra.replay.variants): fractional, "
        "multi-gpu, gpu-model, cpu-heavy, fine-shares, mixed, or generated (a recipe of them drawn "
        "from the seed)",
    )
    a.add_argument(
        "--inflate",
        type=float,
        default=1.3,
        help="inflate the pod list to this multiple of GPU capacity (default: 1.3; 0 = as is)",
    )
    add_output(
        a, ("table", "json", "csv"), help="wide: each seed's figure too; name: policy/NAME of each policy run"
    )
    a.add_argument("--report", metavar="FILE", help="also write a self-contained HTML report to FILE")
    add_flag(
        a, "--jobs", dest="processes", type=int, default=None, help="worker processes (default: up to 2)"
    )
    a.add_argument(
        "--time-replay",
        action="store_true",
        help="also replay creation/deletion times (utilization over time, pending delays)",
    )
    a.add_argument(
        "--time-compress",
        type=float,
        default=1.0,
        metavar="K",
        help="time replay: divide the gaps between creations by K, keeping lifetimes (the trace's own "
        "times never have more than 56 pods alive at once; default 1)",
    )
    a.add_argument(
        "--legacy",
        action="store_true",
        help="also compare device-plugin integer GPUs with DRA shares on the same trace",
    )
    a.add_argument(
        "--ties",
        choices=("order", "random", "name"),
        default="order",
        help="equal node scores: the first node in a seeded random order (default; reproduces the FGD "
        "artifact), uniformly at random (upstream selectHost), or the first in a fixed order of the node "
        "names (what `kdra scheduler --placement kdra` does)",
    )
    add_flag(
        a,
        "--online",
        action="store_true",
        help="also run each policy learning the workload from the pods as they arrive, as kdra's "
        "scheduler does (`--placement kdra`), instead of being handed the pod list first; its rows are "
        "POLICY (online), beside the offline ones",
    )
    a.add_argument(
        "--no-allocator",
        action="store_true",
        help="skip kdra's DRA allocator (placement view only; for quick what-ifs)",
    )
    add_gates_arg(a)
    add_limit_args(a)
    a.set_defaults(func=run)
    p.set_defaults(func=lambda args: _usage(p))


def _usage(p: argparse.ArgumentParser) -> int:
    p.print_help(sys.stderr)
    return 2


MAX_SEEDS = 10_000  # each seed is a whole replay per policy


def parse_seeds(text: str) -> list[int]:
    out: list[int] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if not part:
                continue
            if "-" in part:
                lo, hi = part.split("-", 1)
                a, b = int(lo), int(hi)
                if b < a:
                    raise ValueError
                if b - a >= MAX_SEEDS:  # before the list is built (1-10000000000 ran out of memory)
                    raise InputError(
                        f"--seeds: Invalid value: {text!r}: {b - a + 1:,} seeds, at most {MAX_SEEDS:,}"
                    )
                out.extend(range(a, b + 1))
            else:
                out.append(int(part))
    except ValueError:
        raise InputError(f"--seeds: Invalid value: {text!r}: expected e.g. 42-51, 42,43 or 42") from None
    if not out:
        raise InputError(f"--seeds: Invalid value: {text!r}: no seeds")
    if any(s < 0 for s in out):
        raise InputError(f"--seeds: Invalid value: {text!r}: seeds must not be negative")
    if len(out) > MAX_SEEDS:
        raise InputError(f"--seeds: Invalid value: {text!r}: {len(out):,} seeds, at most {MAX_SEEDS:,}")
    return out


def resolve_policies(names: list[str]) -> list[str]:
    from kdra.scheduler.gpupolicies import POLICIES, make_policy

    out: list[str] = []
    for n in names:
        for part in n.split(","):
            part = part.strip()
            if not part:
                continue
            if part == "all":
                out.extend(p for p in POLICIES if p not in out)
                continue
            try:
                canonical = make_policy(part).name
            except KeyError:
                raise InputError(
                    f"--policy: Unsupported value: {part!r}: supported values: {', '.join(POLICIES)}, all"
                ) from None
            if canonical not in out:
                out.append(canonical)
    if not out:
        raise InputError("--policy: no policy given")
    return out


def run(args: argparse.Namespace) -> int:
    from kdra.replay.experiment import run_experiment
    from kdra.replay.report import print_table, to_csv, to_html
    from kdra.replay.trace import load_trace

    seeds = parse_seeds(",".join(args.seeds or ["42-51"]))
    policies = resolve_policies(args.policy or ["kdra"])
    if not 0 <= args.inflate <= 10:
        raise InputError(f"--inflate: Invalid value: {args.inflate}: must be between 0 and 10")
    if not (1 <= args.time_compress < math.inf):  # nan and inf too: every pod was silently skipped
        raise InputError(f"--time-compress: Invalid value: {args.time_compress}: must be at least 1")
    if args.processes is not None and args.processes < 1:
        raise InputError(f"-j/--jobs: Invalid value: {args.processes}: must be at least 1")
    features = feature_gates(args)
    trace = load_trace(_node_list(args.fleet), args.pods, **limits(args))
    if args.variant:
        from kdra.replay.variants import make_variant, parse_variant

        kind, vseed = parse_variant(args.variant)
        trace = make_variant(trace, kind, vseed)
    if trace.gpu_capacity_milli == 0:
        # Every figure is a share of the fleet's GPUs (it was a ZeroDivisionError, an internal error).
        raise InputError(f"-c/--fleet {args.fleet}: no node has a GPU: a replay measures GPU allocation")
    from kdra.cli.common import Progress

    with Progress(["replay"]) as bar:

        def progress(done: int, total: int, what: str) -> None:
            bar.update("replay", done, total, f"replay: {what}" if what else "replay")

        exp = run_experiment(
            trace,
            policies,
            seeds,
            inflate=args.inflate,
            processes=args.processes,
            use_allocator=not args.no_allocator,
            tie_break=args.ties,
            progress=progress,
            features=features,
            online=args.online,
        )
    doc = exp.to_dict()
    sections: list[str] = []
    timed_docs: dict[str, Any] = {}
    if args.time_replay:
        from kdra.replay.timed import run_timed
        from kdra.scheduler.gpupolicies import make_policy

        runs = []
        for name in policies:
            tr = run_timed(
                trace,
                make_policy(name),
                seed=seeds[0],
                use_allocator=not args.no_allocator,
                compress=args.time_compress,
                features=features,
            )
            runs.append(tr)
            timed_docs[name] = tr.to_dict()
        doc["timeReplay"] = timed_docs
        sections.append(_timed_html(runs))
    legacy_doc: dict[str, Any] = {}
    if args.legacy:
        from kdra.replay.deviceplugin import compare

        figs = compare(trace, policies[0], seeds[0], use_allocator=not args.no_allocator, features=features)
        legacy_doc = {k: v.to_dict() for k, v in figs.items()}
        doc["legacyVsDra"] = {"policy": policies[0], "seed": seeds[0], **legacy_doc}
        sections.append(_legacy_html(policies[0], legacy_doc))
    if args.report:
        try:
            os.makedirs(os.path.dirname(os.path.abspath(args.report)), exist_ok=True)
            with open(args.report, "w", encoding="utf-8") as f:
                f.write(to_html(exp, sections))
        except OSError as exc:
            raise InputError(f"--report {args.report}: {exc.strerror or exc}") from None
    if args.output == "json":
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    elif args.output == "csv":
        sys.stdout.write(to_csv(exp))
    elif args.output == "name":
        from kdra.cli.output import write_names

        write_names(f"policy/{name}" for name in exp.policies)
    else:
        from kdra.cli.output import console

        print_table(exp, wide=args.output == "wide", console=console(highlight=False, soft_wrap=True))
        if timed_docs:
            _print_timed(timed_docs)
        if legacy_doc:
            _print_legacy(
                policies[0],
                legacy_doc,
                "default pod list" if args.pods is None and not args.variant else "this pod list",
            )
        if args.report:
            print(f"\nHTML report written to {args.report}")
    return 0


def _node_list(fleet: str) -> str | None:
    """-c/--fleet of a replay: the bundled alibaba-openb (None: load_trace's default) or a node-list CSV."""
    if fleet == "alibaba-openb":
        return None
    if not fleet.endswith(".csv"):
        raise InputError(
            f"-c/--fleet: Invalid value: {fleet!r}: a replay reads an openb node-list CSV "
            "(sn,cpu_milli,memory_mib,gpu,model) or the bundled alibaba-openb"
        )
    return fleet


def _print_timed(docs: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    k = next(iter(docs.values())).get("compress", 1.0)
    how = "creation/deletion times honoured" if k == 1 else f"creation gaps compressed {k:g}x, lifetimes kept"
    t = Table(title=f"Time replay ({how})", title_justify="left")
    for c in (
        "policy",
        "scheduled",
        "never scheduled",
        "delayed",
        "delay p50/p90/p99 s",
        "peak pending",
        "mean GPU alloc %",
    ):
        t.add_column(c, justify="right" if c != "policy" else "left")
    for name, d in docs.items():
        q = d["pendingDelaySeconds"]
        t.add_row(
            name,
            str(d["scheduled"]),
            str(d["neverScheduled"]),
            str(d["delayedPods"]),
            f"{q.get('p50', 0):.0f}/{q.get('p90', 0):.0f}/{q.get('p99', 0):.0f}",
            str(d["peakPending"]),
            f"{d['meanGpuAllocationPct']:.1f}",
        )
    Console(highlight=False).print(t)
    d = next(iter(docs.values()))
    if d.get("skipped"):
        # Said, not only in the JSON: a pod list without times showed a table of zeros and nothing else.
        print(
            f"{d['skipped']} of {d['pods']} pods left out of the time replay: no creation_time or "
            "deletion_time, or a zero lifetime"
        )


def _print_legacy(policy: str, docs: dict[str, Any], pods: str) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(
        title=f"Device-plugin integer GPUs vs DRA shares (policy {policy}, {pods})",
        title_justify="left",
    )
    for c in (
        "model",
        "pods placed",
        "share pods placed",
        "GPUs held",
        "GPUs needed to host all",
        "stranded GPU memory GiB",
        "idle on shared GPUs GiB",
    ):
        t.add_column(c, justify="right" if c != "model" else "left")
    for name, d in docs.items():
        t.add_row(
            name,
            f"{d['placed']}/{d['pods']}",
            str(d["share_pods_placed"]),
            f"{d['gpus_allocated']:.0f}",
            str(d["gpus_needed"]) + (f" ({d['unhostable']} pods fit no node)" if d.get("unhostable") else ""),
            f"{d['stranded_gib']:.0f}",
            f"{d['idle_on_shared_gib']:.0f}",
        )
    Console(highlight=False).print(t)


def _timed_html(runs: list[Any]) -> str:
    from html import escape

    from kdra.replay.report import COLORS, label

    rows = "".join(
        f"<tr><td>{escape(label(r.policy))}</td><td>{r.scheduled}</td><td>{r.never_scheduled}</td>"
        f"<td>{sum(1 for d in r.delays if d > 0)}</td>"
        + "".join(f"<td>{r.delay_quantiles().get(k, 0):.0f}</td>" for k in ("p50", "p90", "p99", "max"))
        + f"<td>{r.peak_pending}</td><td>{r.busy_mean():.1f}</td></tr>"
        for r in runs
    )
    from kdra.sim.svg import step_chart

    series = [(label(r.policy), COLORS.get(r.policy, "#555"), r.utilization) for r in runs]
    span = max((r.span[1] for r in runs), default=1.0)
    chart = step_chart("GPU allocation over time (% of capacity)", series, x_max=span, y_label="%")
    return (
        "<h2>Time replay</h2><p class='note'>Creation and deletion times honoured; pods that do not fit wait "
        "and are retried when something is deleted.</p><table><tr><th>policy</th><th>scheduled</th>"
        "<th>never scheduled</th><th>delayed</th><th>delay p50 s</th><th>p90</th><th>p99</th><th>max</th>"
        f"<th>peak pending</th><th>mean GPU alloc % (1st-99th percentile of creations)</th></tr>"
        f"{rows}</table>{chart}"
    )


def _legacy_html(policy: str, docs: dict[str, Any]) -> str:
    rows = "".join(
        f"<tr><td>{name}</td><td>{d['placed']}/{d['pods']}</td><td>{d['share_pods_placed']}</td>"
        f"<td>{d['gpus_allocated']:.0f}</td><td>{d['gpus_needed']}</td><td>{d['stranded_gib']:.0f}</td>"
        f"<td>{d['idle_on_shared_gib']:.0f}</td></tr>"
        for name, d in docs.items()
    )
    return (
        f"<h2>Device-plugin integer GPUs vs DRA shares</h2><p class='note'>Policy {policy}; the default pod "
        "list placed once (not inflated). GPUs needed: GPUs with any allocation when every pod is hosted "
        "on a fleet twice the size.</p><table><tr><th>model</th><th>pods placed</th>"
        "<th>share pods placed</th>"
        "<th>GPUs held</th><th>GPUs needed to host all</th><th>stranded GPU memory GiB</th>"
        f"<th>idle on shared GPUs GiB</th></tr>{rows}</table>"
    )
