"""kdra scheduler's CPU per pod under `--placement kdra`, in-process (no control plane): a seeded sample of
the openb trace rendered into a MemoryStore, the replay's pods created one at a time up to 100% arrived and
scheduled as they come, against `kdra replay --online --ties name` on the same pods. Prints the scheduler's
CPU per pod, the replay's, and whether every pod landed on the replay's node.

    python benchmarks/bench_replay_scheduler.py --nodes 200 --pods 300
    python benchmarks/bench_replay_scheduler.py --src /other/checkout/src   # A/B against another tree
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1213, help="sample this many nodes (default: all 1,213)")
    ap.add_argument("--pods", type=int, default=0, help="only the first N pods (default: to 100%% arrived)")
    ap.add_argument("--sample-seed", type=int, default=1)
    ap.add_argument("--seed", type=int, default=42, help="the replay seed (inflation and order)")
    ap.add_argument("--src", default=str(ROOT / "src"), help="the kdra source tree to measure")
    ap.add_argument("--no-replay", action="store_true", help="skip the replay and the comparison")
    args = ap.parse_args()
    sys.path.insert(0, args.src)

    sys.path.insert(1, str(ROOT / "tests"))  # the test support, `support`, after the tree measured

    from kdra.cluster import MemoryStore
    from kdra.replay.engine import arrivals, run_placement
    from kdra.replay.trace import load_trace, sample
    from kdra.scheduler.gpupolicies import make_policy
    from support.replaysched import place_in_turn, policy_scheduler

    trace = sample(load_trace(), args.nodes, args.sample_seed)
    pods = arrivals(trace, args.seed)
    if args.pods:
        pods = pods[: args.pods]
    store = MemoryStore()
    got, cpu = place_in_turn(store, policy_scheduler(store, trace), pods)
    print(
        f"{len(trace.nodes)} nodes, {len(pods)} pods, {len(got)} placed: kdra scheduler {cpu:.2f} CPU s "
        f"({1000 * cpu / len(pods):.2f} ms per pod; kdra from {args.src})"
    )
    if not args.no_replay:
        c0 = time.process_time()
        run = run_placement(trace, make_policy("kdra"), args.seed, online=True, tie_break="name")
        replay = time.process_time() - c0
        want = {n: node for n, node in run.nodes[: len(pods)] if node}
        moved = sum(1 for n in set(got) | set(want) if got.get(n) != want.get(n))
        print(
            f"replay online: {replay:.2f} CPU s for its {len(run.nodes)} pods to 130% "
            f"({1000 * replay / len(run.nodes):.2f} ms per pod); {moved} pods placed elsewhere than replay"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
