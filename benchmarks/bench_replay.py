"""Trace replay on the Alibaba openb trace: the FGD paper's experiment, timings, time replay, legacy vs DRA.

    python benchmarks/bench_replay.py                     # all 7 policies x seeds 42-51, 2 processes
    python benchmarks/bench_replay.py --policies kdra,fgd --seeds 42-44
    python benchmarks/bench_replay.py --single            # one policy, one seed: the < 30 s target
    python benchmarks/bench_replay.py --time-replay --legacy --seeds 42

Prints the per-policy table (unallocated GPU % at 100% arrived workload, mean over seeds, beside the
published figures), wall-clock and CPU seconds per run, DRA allocator calls and their share of the time.
Targets (2-core machine): one policy x one seed < 30 s; 7 policies x 10 seeds < 10 minutes. On a shared
machine wall-clock depends on the neighbours: CPU seconds are printed next to it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))


def main() -> int:
    from kdra.cli.replay import parse_seeds, resolve_policies
    from kdra.replay.engine import run_placement
    from kdra.replay.experiment import run_experiment
    from kdra.replay.report import print_table, to_html
    from kdra.replay.trace import load_trace
    from kdra.scheduler.gpupolicies import make_policy

    ap = argparse.ArgumentParser()
    ap.add_argument("--policies", default="all")
    ap.add_argument("--seeds", default="42-51")
    ap.add_argument("-j", "--processes", type=int, default=2)
    ap.add_argument("--single", action="store_true", help="one policy (the first), one seed, timed")
    ap.add_argument("--no-allocator", action="store_true")
    ap.add_argument("--time-replay", action="store_true")
    ap.add_argument("--legacy", action="store_true")
    ap.add_argument("--report", help="HTML report path")
    ap.add_argument("--json", help="write the experiment document here")
    args = ap.parse_args()
    policies = resolve_policies([args.policies])
    seeds = parse_seeds(args.seeds)
    trace = load_trace()
    if args.single:
        name, seed = policies[0], seeds[0]
        run = run_placement(trace, make_policy(name), seed, use_allocator=not args.no_allocator)
        print(
            f"{name} seed {seed}: {run.pods} pods on {len(trace.nodes)} nodes, unallocated at 100% "
            f"{run.unallocated_at(100):.2f}%; {run.seconds:.1f} s wall, {run.cpu_seconds:.1f} s CPU; "
            f"allocator {run.allocator_calls} calls, {run.allocator_seconds:.1f} s; "
            f"{run.evaluations} node scorings"
        )
        return 0
    t0 = time.perf_counter()
    exp = run_experiment(
        trace,
        policies,
        seeds,
        processes=args.processes,
        use_allocator=not args.no_allocator,
        progress=lambda d, n, w: print(f"  [{d}/{n}] {w} ({time.perf_counter() - t0:.0f} s)", flush=True),
    )
    print_table(exp)
    cpu = sum(sum(pr.cpu_seconds.values()) for pr in exp.policies.values())
    print(f"total: {exp.wall_seconds:.0f} s wall, {cpu:.0f} s CPU in workers")
    sections: list[str] = []
    if args.time_replay:
        from kdra.replay.timed import run_timed

        for name in policies:
            tr = run_timed(trace, make_policy(name), seed=seeds[0], use_allocator=not args.no_allocator)
            print("time replay", json.dumps(tr.to_dict()))
    if args.legacy:
        from kdra.replay.deviceplugin import compare

        for label, fig in compare(trace, policies[0], seeds[0], timed=True).items():
            print("legacy-vs-dra", label, json.dumps(fig.to_dict()))
    if args.report:
        Path(args.report).write_text(to_html(exp, sections))
        print(f"report: {args.report}")
    if args.json:
        Path(args.json).write_text(json.dumps(exp.to_dict(), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
