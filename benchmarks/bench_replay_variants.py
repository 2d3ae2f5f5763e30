"""kdra's placement policy against FGD on variants of the Alibaba openb pod list (kdra.replay.variants).

    python benchmarks/bench_replay_variants.py                       # 5 variants x seeds 42-44, kdra vs fgd
    python benchmarks/bench_replay_variants.py --variant-seeds 1,2 --seeds 42-51 --variants fractional

Each variant rewrites a seeded share of the pods (more GPU-sharing pods, more multi-GPU pods, pods pinned to
a GPU model, CPU-heavy GPU pods, or all of them at half the rate); each cell is the paper's experiment
(inflate to 130%, shuffle, place, never remove) and the figure is the unallocated GPU % at 100% arrived
workload. Prints one row per variant and replay seed, the means, and whether kdra is ever worse than FGD.
Placement view only (--allocator to also allocate every claim through kdra's DRA allocator; the figures
are the same, the allocator agreeing with the view is checked on every pod).
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
    from kdra.replay.experiment import run_experiment
    from kdra.replay.trace import load_trace
    from kdra.replay.variants import VARIANTS, describe, make_variant

    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--variant-seeds", default="1", help="seeds of the variants (default 1)")
    ap.add_argument("--seeds", default="42-44", help="replay seeds (default 42-44)")
    ap.add_argument("--policies", default="kdra,fgd")
    ap.add_argument("-j", "--processes", type=int, default=2)
    ap.add_argument("--allocator", action="store_true")
    args = ap.parse_args()
    base = load_trace()
    seeds = parse_seeds(args.seeds)
    policies = args.policies.split(",")
    worse = []
    print(f"policies {', '.join(policies)}; replay seeds {args.seeds}; unallocated GPU % at 100% arrived")
    t0 = time.perf_counter()
    for kind in args.variants.split(","):
        for vs in parse_seeds(args.variant_seeds):
            trace = make_variant(base, kind, vs)
            mix = describe(trace)
            exp = run_experiment(
                trace, policies, seeds, processes=args.processes, use_allocator=args.allocator
            )
            per = {p: [exp.policies[p].per_seed[s] for s in seeds] for p in policies}
            means = {p: statistics.mean(v) for p, v in per.items()}
            cells = "  ".join(
                f"{p} {means[p]:.2f} [{' '.join(f'{x:.2f}' for x in per[p])}]" for p in policies
            )
            delta = means[policies[0]] - means[policies[-1]]
            print(
                f"{kind}:{vs:<3} shares {mix['share_pods_pct']:.0f}% "
                f"multi-GPU {mix['multi_gpu_pods_pct']:.0f}% "
                f"pinned {mix['pinned_pods_pct']:.0f}% cores/GPU {mix['cpu_cores_per_gpu']:.1f} | {cells} | "
                f"{policies[0]} - {policies[-1]} {delta:+.2f}",
                flush=True,
            )
            for i, s in enumerate(seeds):
                if per[policies[0]][i] > per[policies[-1]][i] + 1e-9:
                    worse.append(f"{kind}:{vs} seed {s}")
    print(f"{time.perf_counter() - t0:.0f} s wall")
    if worse:
        print(f"{policies[0]} worse than {policies[-1]} on: {', '.join(worse)}")
    else:
        print(f"{policies[0]} never worse than {policies[-1]} on any variant and seed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
