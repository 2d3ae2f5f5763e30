"""How far kdra's policy is from the best packing (issue 30, item 2), per replay seed.

At 100% arrived workload the unallocated GPU capacity is the free capacity left in the fleet. Printed per
seed (all as % of the fleet's GPU capacity):

- kdra: unallocated GPU % at 100% arrived (placement view; the allocator gives the same figures);
- on shares: the part of it on GPUs holding shares;
- FFD: the shares kdra placed, packed offline by first-fit decreasing (an achievable packing, not a bound);
- packed: the same shares packed offline by the LP's patterns, rounded down, the rest by FFD (achievable;
  where it equals LP, the best packing of them);
- L2 / LP: Martello and Toth's L2 lower bound and the configuration-LP bound (kdra.replay.bounds.
  bin_lp_bound, at least as tight) on the GPUs those same shares need: no packing of them does better;
- all shares (not a bound): the LP bound if every share that arrived by 100% were placed. A placement may
  fail some shares instead, so this is not a bound on the unallocated capacity;
- bound GPU-only / bound nodes: kdra.replay.bounds.placement_bound over the pods that arrived by 100%,
  any subset of them unplaced: the least unallocated GPU any placement can leave, with the fleet relaxed
  to its GPUs alone, and to groups of alike nodes (GPUs, CPU, memory and pod slots per group in total).
  These are the valid lower bounds on the figure kdra reports.

    python benchmarks/bench_replay_bound.py [--seeds 42-51] [--policy kdra] [--variant KIND:SEED]

With `--sample NODES` (40: the live e2e test's sample, kdra.replay.trace.sample seed 1), per seed on that
sample instead: kdra offline and online (ties by node name, as the live test) and FGD, beside the LP bound
(node groups) and the exact offline optimum with the full node structure (kdra.replay.bounds.
exact_placement, a HiGHS MIP): the best placement it found and its bound on the optimum within
`--time-limit` seconds (the optimum lies between them).

    python benchmarks/bench_replay_bound.py --sample 40 --seeds 42-44 [--time-limit 240]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))


HEADER = (
    "seed  kdra%  on shares%  FFD%  packed%   L2%    LP%  | all shares LP% (not a bound) |"
    " bound GPU-only%  bound nodes% | failed shares/whole%: kdra  bound"
)


def main() -> int:
    from kdra.cli.replay import parse_seeds
    from kdra.replay.bounds import bin_lp_bound, l2_bound, node_groups, placement_bound
    from kdra.replay.engine import ReplayCluster, arrivals, run_placement
    from kdra.replay.trace import load_trace, sample
    from kdra.replay.variants import make_variant, parse_variant
    from kdra.scheduler.gpupolicies import MILLI, make_policy
    from kdra.scheduler.shareplan import first_fit_decreasing

    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="42-51")
    ap.add_argument("--policy", default="kdra")
    ap.add_argument("--variant", default=None)
    ap.add_argument("--online", action="store_true")
    ap.add_argument("--sample", type=int, default=0, help="nodes of a sample of the trace: the exact optimum")
    ap.add_argument("--time-limit", type=float, default=240.0, help="seconds per MIP (--sample)")
    args = ap.parse_args()
    trace = load_trace()
    if args.variant:
        trace = make_variant(trace, *parse_variant(args.variant))
    if args.sample:
        return sample_table(sample(trace, args.sample, 1), parse_seeds(args.seeds), args.time_limit)
    cap = trace.gpu_capacity_milli
    gpu_only = node_groups(trace.nodes, resources=False)
    by_shape = node_groups(trace.nodes)
    rows = []
    print(HEADER)
    for seed in parse_seeds(args.seeds):
        cl = ReplayCluster(trace.nodes, use_allocator=False)
        run = run_placement(trace, make_policy(args.policy), seed, use_allocator=False, cluster=cl,
                            online=args.online)  # fmt: skip
        pods = arrivals(trace, seed)
        # What was placed by 100% arrived (the run went on to 130%): the first bindings.
        placed = cl.placed[: sum(1 for _pod, node in run.nodes[: len(pods)] if node)]
        shares = [req.gpu_milli for req, _b in placed if req.is_share]
        views = ReplayCluster(trace.nodes, use_allocator=False).views
        for req, b in placed:
            views[b.node].place(req, b.gpus)
        on_shares = {(b.node, b.gpus[0]) for req, b in placed if req.is_share}
        idle_shares = sum(views[n].gpu_free[g] for n, g in on_shares)
        ffd = len(first_fit_decreasing(shares, MILLI)) * MILLI - sum(shares)
        l2 = l2_bound(shares, MILLI) * MILLI - sum(shares)
        lp_b = bin_lp_bound(shares, MILLI)
        lp = lp_b.value * MILLI - sum(shares)
        best = lp_b.detail["packing"] * MILLI - sum(shares)
        arrived = [p.request.gpu_milli for p in pods if p.request.is_share]
        lp_all = bin_lp_bound(arrived, MILLI).value * MILLI - sum(arrived)
        reqs = [p.request for p in pods]
        g1 = cap - placement_bound(reqs, gpu_only).value
        nodes_bound = placement_bound(reqs, by_shape)
        g2 = cap - nodes_bound.value
        # what failed by 100% arrived (milli-GPU), kdra's and the bound's LP placement's
        failed = [p.request for p, (_n, node) in zip(pods, run.nodes, strict=False) if node is None]
        kdra_fs = sum(r.gpu_milli for r in failed if r.is_share)
        kdra_fw = sum(r.total_milli for r in failed if r.num_gpu and not r.is_share)
        d = nodes_bound.detail
        lp_fs = max(0.0, d["share_milli"] - d["lp_share_milli"])
        lp_fw = max(0.0, d["whole_milli"] - d["lp_whole_milli"])
        row = [run.unallocated_at(100), 100 * idle_shares / cap, 100 * ffd / cap, 100 * l2 / cap,
               100 * lp / cap, 100 * lp_all / cap, 100 * g1 / cap, 100 * g2 / cap,
               100 * kdra_fs / cap, 100 * kdra_fw / cap, 100 * lp_fs / cap, 100 * lp_fw / cap,
               100 * best / cap]  # fmt: skip
        rows.append(row)
        print(f"{seed:<5} " + _cells(row), flush=True)
    means = [statistics.mean(r[i] for r in rows) for i in range(len(rows[0]))]
    print("mean  " + _cells(means))
    return 0


def sample_table(trace: Any, seeds: list[int], time_limit: float) -> int:
    from kdra.replay.bounds import exact_placement, node_groups, placement_bound
    from kdra.replay.engine import arrivals, run_placement
    from kdra.scheduler.gpupolicies import make_policy

    cap = trace.gpu_capacity_milli
    print(f"{trace.nodes_source}: {len(trace.nodes)} nodes, {cap // 1000} GPUs")
    print("seed  pods  arrived%  kdra%  kdra online%  FGD%  | LP bound%  MIP best%  MIP bound%  optimal  s")
    rows = []
    for seed in seeds:
        pods = arrivals(trace, seed)
        reqs = [p.request for p in pods]
        figs = []
        for policy, kw in (("kdra", {}), ("kdra", {"online": True, "tie_break": "name"}), ("fgd", {})):
            run = run_placement(trace, make_policy(policy), seed, use_allocator=False, **kw)
            figs.append(run.unallocated_at(100))
        ub = placement_bound(reqs, node_groups(trace.nodes)).value
        e = exact_placement(trace.nodes, reqs, time_limit, upper=ub)
        arrived = 100 * sum(r.total_milli for r in reqs) / cap
        row = [
            *figs,
            100 * (cap - ub) / cap,
            100 * (cap - e.placed) / cap,
            100 * (cap - min(ub, e.bound)) / cap,
        ]
        rows.append(row)
        print(
            f"{seed:<5} {len(pods):4} {arrived:9.2f} {row[0]:6.2f} {row[1]:13.2f} {row[2]:5.2f}  |"
            f" {row[3]:9.2f} {row[4]:10.2f} {row[5]:11.2f}  {e.optimal!s:7} {e.seconds:3.0f}",
            flush=True,
        )
    m = [statistics.mean(r[i] for r in rows) for i in range(len(rows[0]))]
    print(
        f"mean  {'':4} {'':9} {m[0]:6.2f} {m[1]:13.2f} {m[2]:5.2f}  | {m[3]:9.2f} {m[4]:10.2f} {m[5]:11.2f}"
    )
    return 0


def _cells(r: list[float]) -> str:
    return (
        f"{r[0]:5.2f} {r[1]:10.2f} {r[2]:6.2f} {r[12]:8.2f} {r[3]:6.2f} {r[4]:6.2f}  | {r[5]:14.2f}{'':14} |"
        f" {r[6]:15.2f} {r[7]:13.2f} | {r[8]:26.2f}/{r[9]:.2f} {r[10]:5.2f}/{r[11]:.2f}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
