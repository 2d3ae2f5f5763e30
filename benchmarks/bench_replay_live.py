"""The openb trace through `kdra scheduler --placement kdra` on a real control plane, against `kdra replay
--online --ties name` on the same pods (issue 30): KWOK nodes shaped as the trace's nodes (GPU shares as
consumable capacity), the replay's pods created one at a time up to 100% arrived, each waited for until
bound or found to fit nowhere (tests/e2e/replaylive.py, which the e2e test uses on a 40-node sample).

Prints the unallocated GPU % at 100% arrived live and in the replay, the pods placed on another node than
the replay's, the exporter's pool gauges at the end, and the wall time per pod.

    python benchmarks/bench_replay_live.py                  # the whole trace: 1,213 nodes, ~8,100 pods
    python benchmarks/bench_replay_live.py --nodes 200      # a seeded sample (--sample-seed, default 1)
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the test support, `support`


def main() -> int:
    from tests.e2e.replaylive import run_live

    from kdra.replay.engine import arrivals, run_placement
    from kdra.replay.trace import load_trace, sample
    from kdra.scheduler.gpupolicies import make_policy
    from support.controlplane import ControlPlaneConfig, running_control_plane

    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1213, help="sample this many nodes (default: all 1,213)")
    ap.add_argument("--sample-seed", type=int, default=1)
    ap.add_argument("--seed", type=int, default=42, help="the replay seed (inflation and order)")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    trace = sample(load_trace(), args.nodes, args.sample_seed)
    pods = arrivals(trace, args.seed)
    c0 = time.process_time()
    replay = run_placement(trace, make_policy("kdra"), args.seed, online=True, tie_break="name")
    print(
        f"{len(trace.nodes)} nodes, {trace.gpu_capacity_milli // 1000} GPUs, {len(pods)} pods to 100% "
        f"arrived; replay online: {replay.unallocated_at(100):.2f}% unallocated "
        f"({time.process_time() - c0:.1f} CPU s)",
        flush=True,
    )
    config = ControlPlaneConfig(kube_api_qps=500, kube_api_burst=1000, verbosity=1)
    with (
        tempfile.TemporaryDirectory(prefix="kdra-bench-") as work,
        running_control_plane(Path(work), config, log=sys.stderr) as cp,
    ):
        kube = cp.client()
        ns = f"replay-{uuid.uuid4().hex[:5]}"
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        live = run_live(cp, kube, ns, trace, pods, Path(work) / "scheduler.log", pod_timeout=600)
    want = dict(replay.nodes[: len(pods)])
    moved = sum(1 for p in pods if live.placed.get(p.name) != want[p.name])
    pools = live.pools[len(pods)]
    gpus = sum(s["kdra_pool_gpus"] for s in pools.values())
    idle = sum(s["kdra_pool_gpus_idle"] for s in pools.values())
    frag = sum(s["kdra_pool_gpus_fragmented"] for s in pools.values())
    print(
        f"live: {live.unallocated(trace, pods):.2f}% unallocated; {moved} of {len(pods)} pods placed "
        f"elsewhere than the replay; exporter: {idle:.2f} of {gpus:.0f} GPUs idle "
        f"({100 * idle / gpus:.2f}%), "
        f"{frag:.2f} fragmented, over {len(pools)} node pools; {live.seconds:.0f} s "
        f"({1000 * live.seconds / len(pods):.0f} ms per pod)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
