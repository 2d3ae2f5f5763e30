"""Search-heavy worlds: kdra's allocator against upstream's on the worlds where a plain depth-first search
explodes (support.worlds.search_world: PCIe-root groups each a little too small for a claim whose
requests must share a root, the big-enough group last). Prints figures; asserts nothing.

For each world: the outcome (allocated, proved not to fit, gave up), search steps and CPU time of kdra
(default budget 50,000 steps), upstream's allocateOne calls and time (the oracle, tests/oracle, with
`--oracle`), and optionally another kdra source tree (`--baseline SRC`, e.g. a checkout of the commit
before the exact in-search cuts) on the same worlds.

Usage: python benchmarks/bench_search.py [--n 200] [--oracle] [--baseline PATH/TO/src]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the test support, `support`

from kdra.allocator import Allocator, FeatureGates
from support.worlds import search_world

# Runs one world list (JSON on stdin) through whatever `kdra` is importable: for --baseline trees, whose
# FeatureGates may not know versions.
RUNNER = r"""
import json, sys, time
from kdra.allocator import Allocator, FeatureGates
out = []
for w in json.load(sys.stdin):
    classes = {c["metadata"]["name"]: c for c in w["classes"]}
    a = Allocator(classes, w["slices"], w["allocated"], FeatureGates())
    t = time.process_time()
    o = a.allocate(w["nodes"][0], w["groups"][0])
    dt = time.process_time() - t
    gave_up = bool(getattr(o, "gave_up", False)) or (o.allocations is None and o.explanation.search_limit_hit)
    out.append({"outcome": "allocated" if o.allocations is not None else ("gave up" if gave_up else "unfit"),
                "steps": o.steps, "seconds": dt})
json.dump(out, sys.stdout)
"""


def run_kdra(worlds: list[Any]) -> list[dict[str, Any]]:
    out = []
    features = FeatureGates.for_version("1.37")
    for w in worlds:
        classes = {c["metadata"]["name"]: c for c in w.classes}
        a = Allocator(classes, w.slices, w.allocated, features)
        t = time.process_time()
        o = a.allocate(w.nodes[0], w.groups[0])
        dt = time.process_time() - t
        outcome = "allocated" if o.allocations is not None else ("gave up" if o.gave_up else "unfit")
        out.append({"outcome": outcome, "steps": o.steps, "seconds": dt})
    return out


def run_baseline(src: str, worlds: list[Any]) -> list[dict[str, Any]]:
    data = [
        {
            "classes": w.classes,
            "slices": w.slices,
            "allocated": w.allocated,
            "nodes": w.nodes,
            "groups": w.groups,
        }
        for w in worlds
    ]
    env = dict(os.environ, PYTHONPATH=src)
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER],
        input=json.dumps(data),
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    result: list[dict[str, Any]] = json.loads(proc.stdout)
    return result


def run_oracle(worlds: list[Any], timeout: float) -> list[dict[str, Any]]:
    from support.differential import oracle_case
    from support.oracle import Oracle

    out = []
    with Oracle("1.37") as o:
        for ans in o.run(oracle_case(w, "1.37", str(w.seed), timeout) for w in worlds):
            g = ans["groups"][0]
            outcome = {"allocation": "allocated", "unschedulable": "unfit", "timeout": "gave up"}.get(
                g["outcome"], g["outcome"]
            )
            out.append(
                {"outcome": outcome, "steps": g.get("allocateOne", 0), "seconds": g.get("seconds", 0.0)}
            )
    return out


def summarize(label: str, rows: list[dict[str, Any]], unit: str) -> str:
    counts = {k: sum(1 for r in rows if r["outcome"] == k) for k in ("allocated", "unfit", "gave up")}
    steps = [r["steps"] for r in rows]
    secs = [r["seconds"] for r in rows]
    return (
        f"{label:<16} allocated {counts['allocated']:>4}  unfit {counts['unfit']:>4}"
        f"  gave up {counts['gave up']:>4}"
        f"   {unit}: total {sum(steps):>10,}  median {statistics.median(steps):>8,.0f}  max {max(steps):>9,}"
        f"   time: total {sum(secs):7.2f} s  max {max(secs) * 1000:8.1f} ms"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=200, help="search worlds (seeds 0..n-1)")
    p.add_argument("--oracle", action="store_true", help="also run upstream's allocator (needs Go)")
    p.add_argument(
        "--timeout", type=float, default=10.0, help="upstream's time per world (kube-scheduler: 10 s)"
    )
    p.add_argument("--baseline", metavar="SRC", help="another kdra source tree to compare with")
    args = p.parse_args()
    worlds = [search_world(s) for s in range(args.n)]
    print(
        f"{args.n} search worlds, Kubernetes 1.37 defaults; timings on this (shared) machine are CPU seconds"
    )
    mine = run_kdra(worlds)
    print(summarize("kdra", mine, "steps"))
    if args.baseline:
        base = run_baseline(args.baseline, worlds)
        print(summarize(f"kdra {Path(args.baseline).parent.name}", base, "steps"))
    if args.oracle:
        up = run_oracle(worlds, args.timeout)
        print(summarize("upstream 1.37", up, "allocateOne"))
        disagree = sum(
            1
            for a, b in zip(mine, up, strict=True)
            if b["outcome"] != "gave up" and a["outcome"] != b["outcome"]
        )
        print(f"outcomes differing where upstream answered: {disagree}")
        heavy = [(a, b) for a, b in zip(mine, up, strict=True) if b["steps"] >= 1000]
        faster = sum(1 for a, b in heavy if a["seconds"] <= b["seconds"])
        print(
            f"worlds where upstream needed >= 1,000 allocateOne calls: {len(heavy)}; kdra at least as fast "
            f"(its CPU time vs upstream's wall time) on {faster}; kdra steps there: "
            f"{sum(a['steps'] for a, _ in heavy):,}, upstream allocateOne: "
            f"{sum(b['steps'] for _, b in heavy):,}"
        )


if __name__ == "__main__":
    main()
