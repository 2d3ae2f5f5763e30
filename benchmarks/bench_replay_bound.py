"""How far kdra's policy is from the best packing (issue 30, item 2), per replay seed.

At 100% arrived workload the unallocated GPU capacity is the free capacity left in the fleet. Printed per
seed (all as % of the fleet's GPU capacity):

- kdra: unallocated GPU % at 100% arrived (placement view; the allocator gives the same figures);
- on shares: the part of it on GPUs holding shares;
- FFD: the shares kdra placed, packed offline by first-fit decreasing (an achievable packing, not a bound);
- L2 / LP: Martello and Toth's L2 lower bound and the configuration-LP bound (kdra.replay.bounds.
  bin_lp_bound, at least as tight) on the GPUs those same shares need: no packing of them does better;
- all shares (not a bound): the LP bound if every share that arrived by 100% were placed. A placement may
  fail some shares instead, so this is not a bound on the unallocated capacity;
- bound GPU-only / bound nodes: kdra.replay.bounds.placement_bound over the pods that arrived by 100%,
  any subset of them unplaced: the least unallocated GPU any placement can leave, with the fleet relaxed
  to its GPUs alone, and to groups of alike nodes (GPUs, CPU, memory and pod slots per group in total).
  These are the valid lower bounds on the figure kdra reports.

    python benchmarks/bench_replay_bound.py [--seeds 42-51] [--policy kdra] [--variant KIND:SEED]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))


HEADER = (
    "seed  kdra%  on shares%  FFD%    L2%    LP%  | all shares LP% (not a bound) |"
    " bound GPU-only%  bound nodes%"
)


def main() -> int:
    from kdra.cli.replay import parse_seeds
    from kdra.replay.bounds import bin_lp_bound, l2_bound, node_groups, placement_bound
    from kdra.replay.engine import ReplayCluster, arrivals, run_placement
    from kdra.replay.trace import load_trace
    from kdra.replay.variants import make_variant, parse_variant
    from kdra.scheduler.gpupolicies import MILLI, make_policy
    from kdra.scheduler.shareplan import first_fit_decreasing

    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="42-51")
    ap.add_argument("--policy", default="kdra")
    ap.add_argument("--variant", default=None)
    ap.add_argument("--online", action="store_true")
    args = ap.parse_args()
    trace = load_trace()
    if args.variant:
        trace = make_variant(trace, *parse_variant(args.variant))
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
        lp = bin_lp_bound(shares, MILLI).value * MILLI - sum(shares)
        arrived = [p.request.gpu_milli for p in pods if p.request.is_share]
        lp_all = bin_lp_bound(arrived, MILLI).value * MILLI - sum(arrived)
        reqs = [p.request for p in pods]
        g1 = cap - placement_bound(reqs, gpu_only).value
        g2 = cap - placement_bound(reqs, by_shape).value
        row = [run.unallocated_at(100), 100 * idle_shares / cap, 100 * ffd / cap, 100 * l2 / cap,
               100 * lp / cap, 100 * lp_all / cap, 100 * g1 / cap, 100 * g2 / cap]  # fmt: skip
        rows.append(row)
        print(f"{seed:<5} " + _cells(row), flush=True)
    means = [statistics.mean(r[i] for r in rows) for i in range(len(rows[0]))]
    print("mean  " + _cells(means))
    return 0


def _cells(r: list[float]) -> str:
    return (
        f"{r[0]:5.2f} {r[1]:10.2f} {r[2]:6.2f} {r[3]:6.2f} {r[4]:6.2f}  | {r[5]:14.2f}{'':14} |"
        f" {r[6]:15.2f} {r[7]:13.2f}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
