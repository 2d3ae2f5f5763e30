"""How far kdra's policy is from the best packing of what it placed (issue 30, item 2), per replay seed.

At 100% arrived workload the unallocated GPU capacity is the free capacity left in the fleet. On the
default openb trace nearly all of it sits on GPUs that hold shares (a whole-GPU pod leaves nothing idle),
so it is bounded below by how well the placed shares can be packed at all: GPUs holding shares x 1,000
minus the shares' milli-GPU can be no less than for the fewest GPUs those shares fit in. Printed per seed:

- kdra: unallocated GPU % at 100% arrived (placement view; the allocator gives the same figures);
- on shares: the part of it on GPUs holding shares;
- FFD: the same shares packed offline by first-fit decreasing (an achievable packing, not a bound);
- bound: Martello and Toth's L2 lower bound on the GPUs those shares need (no packing of them does better);
- all arrived: L2 for every share that arrived by 100%, as if all had been placed.

    python benchmarks/bench_replay_bound.py [--seeds 42-51] [--policy kdra] [--variant KIND:SEED]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))


def l2_bound(sizes: list[int], capacity: int) -> int:
    """Martello and Toth's L2: the fewest bins of `capacity` the sizes could fit in is at least this."""
    best = 0
    half = capacity / 2
    cuts = sorted({0, *(s for s in sizes if s <= half)})
    for k in cuts:
        big = [s for s in sizes if s > capacity - k]
        mid = [s for s in sizes if half < s <= capacity - k]
        small = sum(s for s in sizes if k <= s <= half)
        room = len(mid) * capacity - sum(mid)
        extra = max(0, -(-(small - room) // capacity))
        best = max(best, len(big) + len(mid) + extra)
    return max(best, -(-sum(sizes) // capacity))


def main() -> int:
    from kdra.cli.replay import parse_seeds
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
    rows = []
    print("seed  policy%  on shares%  FFD%   bound%  | all arrived: bound%")
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
        bound = l2_bound(shares, MILLI) * MILLI - sum(shares)
        arrived = [p.request.gpu_milli for p in pods if p.request.is_share]
        bound_all = l2_bound(arrived, MILLI) * MILLI - sum(arrived)
        row = [run.unallocated_at(100), 100 * idle_shares / cap, 100 * ffd / cap, 100 * bound / cap,
               100 * bound_all / cap]  # fmt: skip
        rows.append(row)
        cells = f"{row[0]:7.2f} {row[1]:10.2f} {row[2]:6.2f} {row[3]:7.2f}  | {row[4]:7.2f}"
        print(f"{seed:<5} {cells}", flush=True)
    means = [statistics.mean(r[i] for r in rows) for i in range(5)]
    print(f"mean  {means[0]:7.2f} {means[1]:10.2f} {means[2]:6.2f} {means[3]:7.2f}  | {means[4]:7.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
