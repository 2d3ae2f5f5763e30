"""Memory of `kdra scheduler` over rounds of load (issue 18, item 7): does RSS come back after the pods go?

One control plane (support.controlplane), N nodes x D devices, then R rounds of: P pods with one
template claim each (a tenth of them asking for more devices than a node has, so they stay pending with
an explanation), wait until every fitting pod is bound and every other one explained, delete them all
(grace period 0) and wait until kube-controller-manager has deleted their claims and kdra's informers
have caught up. kdra's resident set size is sampled every 0.2 s: the round's peak, and what is left once
the pods are gone, per round.

Two ways to run kdra:
- default: `kdra scheduler` as users run it, a process of its own; RSS from /proc/<pid>/status.
- `--in-process`: the same KubeStore and KubeScheduler on a thread of this process; after each round also
  CPython's small-object allocator: arenas held and the bytes in use in them (what a trim cannot give
  back is the difference: free blocks in arenas that still hold a live object).
- `--trace` (implies --in-process): with tracemalloc, and after each round the source lines whose live
  allocations grew most since before the first round: what the rounds left behind (the leak hunt;
  tracing slows kdra and adds its own memory, so these RSS figures are not comparable with the
  default's).

Usage: python benchmarks/bench_kube_memory.py [--nodes 100] [--devices 12] [--pods 1000] [--rounds 3]
       [--qps 500] [--burst 1000] [--in-process] [--trace [--top 15]]

Sized to take a few minutes on the shared 2-core machine; the issue's figures were 3 rounds of 5,000
pods (--nodes 500 --devices 10 --pods 5000).
"""

from __future__ import annotations

import argparse
import gc
import os
import signal
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))  # the test support, `support`
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from kubeutil import DeviceFleet, KdraProcess, claim_template, template_pod  # noqa: E402

from kdra.kube.client import KubeClient  # noqa: E402
from support.controlplane import ControlPlaneConfig, running_control_plane  # noqa: E402

NS = "bench-mem"


def rss_kb(pid: int) -> int:
    """VmRSS of a process, in KiB (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class Sampler(threading.Thread):
    """The highest RSS seen since the last `take()`."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.2):
            self.peak = max(self.peak, rss_kb(self.pid))

    def take(self) -> int:
        peak, self.peak = max(self.peak, rss_kb(self.pid)), 0
        return peak


def wait(what: str, fn: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not fn():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(1.0)


def one_round(kube: KubeClient, n: int, pods: int, settled: Callable[[], bool]) -> dict[str, float]:
    t0 = time.time()
    objs = [
        template_pod(f"r{n}-p{i:05d}", NS, "too-many" if i % 10 == 9 else "one", scheduler="kdra")
        for i in range(pods)
    ]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(kube.create, objs))
    no_fit = sum(1 for i in range(pods) if i % 10 == 9)

    def done() -> bool:
        bound = explained = 0
        for p in kube.list("Pod", NS):
            if (p.get("spec") or {}).get("nodeName"):
                bound += 1
            elif any(
                c.get("type") == "PodScheduled" and c.get("status") == "False"
                for c in (p.get("status") or {}).get("conditions") or []
            ):
                explained += 1
        return bound == pods - no_fit and explained == no_fit

    wait(f"round {n}: {pods - no_fit} pods bound and {no_fit} explained", done, max(600.0, pods / 2))
    scheduled = time.time() - t0
    names = [p["metadata"]["name"] for p in kube.list("Pod", NS)]
    with ThreadPoolExecutor(8) as pool:  # grace period 0: no kubelet finishes them
        list(pool.map(lambda name: kube.delete("Pod", name, NS, grace_period=0, missing_ok=True), names))
    wait(
        f"round {n}: pods and claims gone",
        lambda: not kube.list("Pod", NS) and not kube.list("ResourceClaim", NS),
        600,
    )
    wait(f"round {n}: kdra caught up", settled, 120)
    time.sleep(3.0)  # a few idle loop turns
    return {"scheduled_s": scheduled, "total_s": time.time() - t0}


def traced_snapshot() -> Any:
    return tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<frozen *>")]
    )


def pymalloc_stats() -> str:
    """Arenas CPython's small-object allocator holds and the bytes in use in them
    (sys._debugmallocstats, which writes to the C stderr: read back through a temporary file)."""
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        saved = os.dup(2)
        try:
            sys.stderr.flush()
            os.dup2(tmp.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        text = tmp.read().decode(errors="replace")
    got: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.rpartition("=")
        value = value.strip().replace(",", "")
        if line.startswith("# ") and value.isdigit():
            got[key.strip("# ").strip()] = int(value)
        elif "bytes/arena" in line and value.isdigit():
            got["arena bytes"] = int(value)
    held = got.get("arena bytes", 0) / 2**20
    used = got.get("bytes in allocated blocks", 0) / 2**20
    free = got.get("bytes in available blocks", 0) / 2**20
    return (
        f"pymalloc: {got.get('arenas allocated current', 0)} arenas, {held:.0f} MiB held, "
        f"{used:.0f} MiB in live objects, {free:.0f} MiB free in them"
    )


class InProcess:
    """KubeStore + KubeScheduler on a thread of this process (the loop `kdra scheduler` runs)."""

    def __init__(self, kubeconfig: Path, qps: float, burst: int) -> None:
        from kdra.kube.scheduler import KubeScheduler
        from kdra.kube.store import SCHEDULER_KINDS, KubeStore
        from kdra.scheduler.scheduler import SchedulerConfig

        client = KubeClient.from_kubeconfig(kubeconfig, qps=qps, burst=burst)
        self.store = KubeStore(client, SCHEDULER_KINDS, relist_period=300).start()
        self.sched = KubeScheduler(self.store, SchedulerConfig(scheduler_name="kdra"))
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.stop.is_set():
            self.sched.step(wait=0.2)

    def settled(self) -> bool:
        return (
            self.store.count("Pod") == 0
            and self.store.count("ResourceClaim") == 0
            and not self.sched.inflight
        )

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.sched.close()
        self.store.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--devices", type=int, default=12)
    ap.add_argument("--pods", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--qps", type=int, default=500)
    ap.add_argument("--burst", type=int, default=1000)
    ap.add_argument("--in-process", action="store_true", help="run kdra here and report pymalloc's arenas")
    ap.add_argument("--trace", action="store_true", help="run kdra here, with tracemalloc")
    ap.add_argument("--top", type=int, default=15, help="--trace: growth lines to print per round")
    args = ap.parse_args()
    args.in_process = args.in_process or args.trace
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    config = ControlPlaneConfig(kube_api_qps=args.qps, kube_api_burst=args.burst, verbosity=1)
    with (
        tempfile.TemporaryDirectory(prefix="kdra-bench-mem-") as work,
        running_control_plane(Path(work), config, log=sys.stderr) as cp,
    ):
        kube = KubeClient.from_kubeconfig(cp.kubeconfig, qps=0, burst=1)
        fleet = DeviceFleet(kube, "mem", nodes=args.nodes, devices=args.devices).create(workers=8)
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        wait(
            "the default ServiceAccount",
            lambda: kube.try_get("ServiceAccount", "default", NS) is not None,
            60,
        )
        kube.create(claim_template("one", NS, fleet.device_class))
        kube.create(claim_template("too-many", NS, fleet.device_class, count=args.devices + 1))
        where = "as a process"
        if args.in_process:
            where = "in this process" + (", traced" if args.trace else "")
        print(
            f"{args.nodes} nodes x {args.devices} devices; {args.rounds} rounds of {args.pods} pods "
            f"({args.pods // 10} of them unschedulable); kdra {where}",
            flush=True,
        )
        inproc: InProcess | None = None
        proc: KdraProcess | None = None
        baseline: Any = None
        if args.in_process:
            if args.trace:
                tracemalloc.start(8)
            inproc = InProcess(cp.kubeconfig, args.qps, args.burst)
            pid, settled = os.getpid(), inproc.settled
        else:
            proc = KdraProcess(
                cp,
                ["scheduler", "--kube-api-qps", str(args.qps), "--kube-api-burst", str(args.burst), "-v"],
                Path(work) / "kdra.log",
            )
            pid = proc.pid
            # Caught up: no pod left in its explanation bookkeeping is not visible from outside; give it
            # the API's view plus a few loop turns (one_round sleeps).
            settled = lambda: proc is not None and proc.running()  # noqa: E731
        try:
            time.sleep(3.0)
            sampler = Sampler(pid)
            sampler.start()
            print(f"start: RSS {rss_kb(pid) / 1024:.0f} MiB", flush=True)
            if args.trace:  # what the rounds leave behind is what grew since here
                gc.collect()
                baseline = traced_snapshot()
            rows = []
            for n in range(1, args.rounds + 1):
                sampler.take()
                t = one_round(kube, n, args.pods, settled)
                peak = sampler.take()
                if inproc is not None:
                    gc.collect()
                after = rss_kb(pid)
                rows.append((n, peak, after, t))
                if inproc is not None:
                    trims = inproc.sched.trimmer.trims
                else:
                    assert proc is not None
                    trims = proc.log_path.read_text(errors="replace").count("gave freed memory back")
                print(
                    f"round {n}: peak RSS {peak / 1024:.0f} MiB, after deletion {after / 1024:.0f} MiB "
                    f"(scheduled in {t['scheduled_s']:.0f}s, round {t['total_s']:.0f}s; "
                    f"heap trims so far: {trims})",
                    flush=True,
                )
                if inproc is not None and not args.trace:  # tracing hides pymalloc's arenas
                    print(f"  {pymalloc_stats()}", flush=True)
                if args.trace:
                    snap = traced_snapshot()
                    stats = snap.compare_to(baseline, "traceback")
                    grown = [st for st in stats if st.size_diff > 0]
                    net = sum(st.size_diff for st in stats)
                    print(f"  traced memory since before round 1: {net / 1024:+.0f} KiB", flush=True)
                    for stat in grown[: args.top]:
                        frames = " <- ".join(  # innermost first: where it was allocated, who asked
                            f"{Path(f.filename).parent.name}/{Path(f.filename).name}:{f.lineno}"
                            for f in list(stat.traceback)[::-1][:5]
                        )
                        print(f"  +{stat.size_diff / 1024:8.1f} KiB {stat.count_diff:+7d} blocks  {frames}")
            grew = rows[-1][2] - rows[0][2]
            print(
                "RSS per round (MiB): peak "
                + "/".join(f"{r[1] / 1024:.0f}" for r in rows)
                + ", after deletion "
                + "/".join(f"{r[2] / 1024:.0f}" for r in rows)
                + f"; after-deletion growth from round 1 to {len(rows)}: {grew / 1024:+.0f} MiB",
                flush=True,
            )
        finally:
            if inproc is not None:
                inproc.close()
            if proc is not None:
                proc.stop()
            fleet.delete(workers=8)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
