"""kdra's placement policy against FGD on variants of the Alibaba openb pod list (kdra.replay.variants).

    python benchmarks/bench_replay_variants.py --quick            # one drawn variant per family, seed 42
    python benchmarks/bench_replay_variants.py                    # 5 drawn variants per family, seeds 42-43
    python benchmarks/bench_replay_variants.py --variants fractional,mixed --variant-seeds 1,2 --seeds 42-51

Two sources of variants, one table:
- `--families` (default all of kdra.replay.variants.FAMILIES: pinned GPU models, fractional shares,
  fine shares, multi-GPU, CPU-heavy, mixtures of two to four): for each family and each of
  `--variant-seeds` (default 101-105, seeds no constant of the policy was tuned on), a recipe drawn by
  `family_recipe` (the rate too: pinned models at 10-100% of the GPU pods, ...);
- `--variants`: the CLI's own kinds (`--variant KIND:SEED`) at their default rates.
Each cell is the paper's experiment (inflate to 130%, shuffle, place, never remove) and the figure is the
unallocated GPU % at 100% arrived workload, for kdra offline (handed the pod list), kdra online (learning it
from the pods as they arrive: what the live scheduler runs) and FGD as the artifact runs it (offline).
Margin = FGD - kdra (positive: kdra leaves fewer GPUs idle); the last lines give the min and mean margin
and every variant and seed where kdra is worse. Placement view only (--allocator to also allocate every
claim through kdra's DRA allocator; the figures are the same).

Cost: ~25 CPU s per variant and seed for the three policies (2 cores: --quick ~4 min on an idle machine,
the full table ~40 min).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))


def main() -> int:
    from kdra.cli.replay import parse_seeds
    from kdra.replay.experiment import ONLINE, run_experiment
    from kdra.replay.trace import load_trace
    from kdra.replay.variants import FAMILIES, describe, family_recipe, make_recipe_variant, make_variant

    ap = argparse.ArgumentParser()
    ap.add_argument("--families", default=",".join(FAMILIES), help="'' for none")
    ap.add_argument("--variants", default="", help="the CLI's variant kinds, e.g. default,gpu-model,mixed")
    ap.add_argument("--variant-seeds", default="101-105")
    ap.add_argument("--seeds", default="42-43", help="replay seeds")
    ap.add_argument("--quick", action="store_true", help="variant seed 101, replay seed 42")
    ap.add_argument("--no-online", action="store_true", help="kdra offline only")
    ap.add_argument("-j", "--processes", type=int, default=2)
    ap.add_argument("--allocator", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.variant_seeds, args.seeds = "101", "42"
    base = load_trace()
    seeds = parse_seeds(args.seeds)
    vseeds = parse_seeds(args.variant_seeds)
    variants = []
    for fam in filter(None, args.families.split(",")):
        for vs in vseeds:
            recipe = family_recipe(fam, vs)
            label = f"{fam}:{vs}"
            variants.append((label, recipe, make_recipe_variant(base, recipe, f"family:{label}")))
    for kind in filter(None, args.variants.split(",")):
        for vs in vseeds:
            if kind == "default":
                variants.append(("default", {}, base))
                break
            variants.append((f"{kind}:{vs}", {}, make_variant(base, kind, vs)))
    kdras = ["kdra"] if args.no_online else ["kdra", "kdra" + ONLINE]
    policies = [*kdras, "fgd"]
    margins: dict[str, list[float]] = {p: [] for p in kdras}
    worse: list[str] = []
    print(
        f"replay seeds {args.seeds}; unallocated GPU % at 100% arrived (mean over the seeds); "
        f"margin = FGD - kdra"
    )
    head = " | ".join(f"{p:>11}" for p in policies)
    print(f"{'variant':<16} {'recipe':<44} {'mix':<34} | {head} | " + " ".join(f"margin {p}" for p in kdras))
    t0 = time.perf_counter()
    for label, recipe, trace in variants:
        mix = describe(trace)
        exp = run_experiment(
            trace, policies, seeds, processes=args.processes, use_allocator=args.allocator, stop_at=100
        )
        per = {p: [exp.policies[p].per_seed[s] for s in seeds] for p in policies}
        means = {p: statistics.mean(v) for p, v in per.items()}
        for p in kdras:
            margins[p].append(means["fgd"] - means[p])
            for i, s in enumerate(seeds):
                if per[p][i] > per["fgd"][i] + 1e-9:
                    worse.append(f"{p} on {label} seed {s} ({per[p][i]:.2f} vs {per['fgd'][i]:.2f})")
        rec = " ".join(f"{k} {v:.2f}" for k, v in recipe.items()) or "(CLI default rates)"
        shape = (
            f"sh {mix['share_pods_pct']:.0f}% mg {mix['multi_gpu_pods_pct']:.0f}% "
            f"pin {mix['pinned_pods_pct']:.0f}% c/g {mix['cpu_cores_per_gpu']:.1f}"
        )
        cells = " | ".join(f"{means[p]:>11.2f}" for p in policies)
        marg = " ".join(f"{means['fgd'] - means[p]:>+{len('margin ' + p)}.2f}" for p in kdras)
        print(f"{label:<16} {rec:<44} {shape:<34} | {cells} | {marg}", flush=True)
    print(f"{len(variants)} variants x {len(seeds)} seeds, {time.perf_counter() - t0:.0f} s wall")
    for p in kdras:
        m = margins[p]
        if m:
            print(
                f"margin {p} vs fgd: min {min(m):+.2f}  mean {statistics.mean(m):+.2f}  "
                f"worse on {sum(1 for x in m if x < 0)} of {len(m)} variants (means)"
            )
    print("worse than fgd on: " + ("; ".join(worse) if worse else "no variant and seed"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
