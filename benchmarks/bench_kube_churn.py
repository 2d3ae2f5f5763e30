"""Scheduling under churn on a real control plane: kube-scheduler against `kdra scheduler`, pods completing
and arriving at a steady rate for minutes (issue 26 item 2).

One control plane (support.controlplane), N nodes x D devices (one ResourceSlice per node; Node
objects as KWOK makes them, without KWOK's process: nothing runs the pods, so "completing" is the benchmark
deleting them, grace period 0, and kube-controller-manager releasing their claims), then per scheduler, on
a fleet of its own:

1. fill: FILL of the devices taken by one-device template-claim pods (a burst; not measured);
2. churn for MINUTES: every PERIOD seconds the RATE x PERIOD oldest bound pods are deleted and as many new
   pods created (8 client threads), so the fleet stays about FILL full and every new pod fits;
3. the figures of the churn window: pods bound per second, creation -> bound latency of the pods created in
   it (p50, p99, max; the API server's one-second stamps, as benchmarks/kubebench.py says), pods created
   but never bound within 60 s after the window, the scheduler process's CPU per bound pod and RSS (after
   the fill, peak, at the end), and its API writes per bound pod (kube-scheduler's client-go counter;
   kdra's client counter, read with SIGUSR1 through KDRA_STATS at the window's start and end), and the
   cores the API server, etcd and kube-controller-manager used over the window.

The latencies are recorded from a list every PERIOD, before the pods are deleted. The first scheduler's
pods are deleted before the second's run (its claims released), so both start from an empty namespace.

Usage: python benchmarks/bench_kube_churn.py [--nodes 1000] [--devices 8] [--fill 0.5] [--rate 10]
       [--period 5] [--minutes 10] [--kdra-first] [--only kdra|kube-scheduler] [--qps 500] [--burst 1000]
       [--quick]   (--quick: 100 nodes, rate 5, 1 minute)

The 2-core machine is shared: the figures move with its load (printed per run); run it both ways round.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
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
from kubebench import (  # noqa: E402
    ProcessMeter,
    client_writes,
    control_plane_cpu,
    cores,
    free,
    load,
    namespace,
    parse_time,
    percentile,
    rss_mib,
    scheduled_at,
    wait_all_bound,
)
from support.controlplane import ControlPlane, ControlPlaneConfig, force_delete, running_control_plane  # noqa: E402

Obj = dict[str, Any]


class KdraWrites:
    """kdra's client's write count, read through KDRA_STATS (SIGUSR1 makes the process write it)."""

    def __init__(self, proc: KdraProcess, path: Path) -> None:
        self.proc, self.path = proc, path

    def __call__(self) -> float:
        asked = time.time()
        os.kill(self.proc.pid, signal.SIGUSR1)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                st = json.loads(self.path.read_text())
                if st.get("written_at", 0) >= asked:
                    return float(st["api_writes"])
            except (OSError, ValueError):
                pass
            time.sleep(0.1)
        raise TimeoutError("kdra did not write its stats")


def run(
    cp: ControlPlane,
    kube: KubeClient,
    fleet: DeviceFleet,
    scheduler: str,
    ns: str,
    pid: int,
    writes: Callable[[], float],
    args: argparse.Namespace,
) -> Obj:
    namespace(kube, ns)
    kube.create(claim_template("one", ns, fleet.device_class))
    serial = iter(range(10**9))

    def pods(n: int) -> list[Obj]:
        return [template_pod(f"p{next(serial):06d}", ns, "one", scheduler=scheduler) for _ in range(n)]

    fill = int(args.fill * args.nodes * args.devices)
    pool = ThreadPoolExecutor(8)
    list(pool.map(kube.create, pods(fill)))
    wait_all_bound(kube, ns, timeout=max(600.0, fill / 2))
    rss_filled = rss_mib(pid)
    print(f"{scheduler}: {fill} pods bound (fill), RSS {rss_filled:.0f} MiB; churn starts", flush=True)

    per_period = max(1, round(args.rate * args.period))
    latency: dict[str, float] = {}  # pod -> creation -> bound seconds, recorded before it is deleted
    created_in_window: set[str] = set()
    deleted = 0
    load_before = load()
    writes0 = writes()
    plane0 = control_plane_cpu(cp)
    t0 = time.time()
    end = t0 + 60 * args.minutes
    with ProcessMeter(pid) as meter:
        while time.time() < end:
            tick = time.monotonic()
            listed = kube.list("Pod", ns)
            bound: list[tuple[float, str]] = []
            for p in listed:
                name = p["metadata"]["name"]
                at = scheduled_at(p)
                if at is None:
                    continue
                created = parse_time(p["metadata"]["creationTimestamp"])
                if name in created_in_window and name not in latency:
                    latency[name] = at - created
                bound.append((created, name))
            bound.sort()
            done = [name for _, name in bound[:per_period]]
            list(pool.map(lambda n: force_delete(kube, "Pod", n, ns), done))
            deleted += len(done)
            new = pods(per_period)
            created_in_window.update(p["metadata"]["name"] for p in new)
            list(pool.map(kube.create, new))
            time.sleep(max(0.0, args.period - (time.monotonic() - tick)))
        window = time.time() - t0
        n_writes = writes() - writes0
        plane = cores(plane0, control_plane_cpu(cp), window)
        # the window's last pods: bound within 60 s, or counted as not bound
        deadline = time.monotonic() + 60
        while True:
            listed = kube.list("Pod", ns)
            for p in listed:
                name = p["metadata"]["name"]
                at = scheduled_at(p)
                if at is not None and name in created_in_window and name not in latency:
                    latency[name] = at - parse_time(p["metadata"]["creationTimestamp"])
            if len(latency) >= len(created_in_window) or time.monotonic() > deadline:
                break
            time.sleep(2.0)
    pool.shutdown()
    lat = sorted(latency.values())
    bound_in_window = len(lat)
    return {
        "scheduler": scheduler,
        "minutes": window / 60,
        "created": len(created_in_window),
        "deleted": deleted,
        "bound": bound_in_window,
        "not_bound": len(created_in_window) - bound_in_window,
        "pods_per_s": bound_in_window / window,
        "p50_s": percentile(lat, 0.5),
        "p99_s": percentile(lat, 0.99),
        "max_s": lat[-1] if lat else float("nan"),
        "cpu_ms_per_pod": 1000 * meter.cpu_s / max(1, bound_in_window),
        "cpu_cores": meter.cpu_s / window,
        "rss_filled_mib": rss_filled,
        "rss_peak_mib": meter.peak_rss_mib,
        "rss_end_mib": meter.end_rss_mib,
        "writes_per_pod": n_writes / max(1, bound_in_window),
        "load": f"{load_before} -> {load()}",
        "plane": plane,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--fill", type=float, default=0.5)
    ap.add_argument("--rate", type=float, default=10.0, help="pods completing and arriving per second")
    ap.add_argument("--period", type=float, default=5.0)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--qps", type=int, default=500)
    ap.add_argument("--burst", type=int, default=1000)
    ap.add_argument("--kdra-first", action="store_true")
    ap.add_argument("--only", choices=("kube-scheduler", "kdra"), default=None)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.quick:
        args.nodes, args.rate, args.minutes = 100, 5.0, 1.0
    print(f"machine: {os.cpu_count()} CPUs, load average {load()}", flush=True)
    config = ControlPlaneConfig(kube_api_qps=args.qps, kube_api_burst=args.burst, verbosity=1)
    results: list[Obj] = []
    with (
        tempfile.TemporaryDirectory(prefix="kdra-bench-churn-") as work,
        running_control_plane(Path(work), config, log=sys.stderr) as cp,
    ):
        kube = cp.client()
        t = time.time()
        fleet = DeviceFleet(kube, "churn-a", nodes=args.nodes, devices=args.devices, kubelet=False)
        fleet.create(workers=8)
        print(
            f"control plane {cp.version}; fleet: {args.nodes} nodes x {args.devices} devices in "
            f"{time.time() - t:.0f}s; fill {args.fill:.0%}, {args.rate:g} pods/s completing and arriving "
            f"for {args.minutes:g} min (every {args.period:g}s)",
            flush=True,
        )
        order = ["kdra", "kube-scheduler"] if args.kdra_first else ["kube-scheduler", "kdra"]
        for i, which in enumerate(o for o in order if args.only in (None, o)):
            ns = f"churn-{which}"
            if i:
                free(kube, f"churn-{order[0]}", timeout=900)
            if which == "kube-scheduler":
                ks = cp.components["kube-scheduler"].proc
                assert ks is not None
                r = run(
                    cp,
                    kube,
                    fleet,
                    "default-scheduler",
                    ns,
                    ks.pid,
                    lambda: client_writes(cp.metrics("kube-scheduler")),
                    args,
                )
            else:
                stats = Path(work) / "kdra-stats.json"
                os.environ["KDRA_STATS"] = str(stats)
                proc = KdraProcess(
                    cp,
                    ["scheduler", "--kube-api-qps", str(args.qps), "--kube-api-burst", str(args.burst)],
                    Path(work) / "kdra.log",
                )
                del os.environ["KDRA_STATS"]
                try:
                    deadline = time.monotonic() + 60
                    while "serving schedulerName" not in proc.log():
                        if time.monotonic() > deadline or not proc.running():
                            raise RuntimeError(f"kdra scheduler did not start:\n{proc.log()}")
                        time.sleep(0.2)
                    r = run(cp, kube, fleet, "kdra", ns, proc.pid, KdraWrites(proc, stats), args)
                finally:
                    proc.stop(timeout=60)
            r["scheduler"] = which
            results.append(r)
            print(json.dumps(r), flush=True)
    print(f"\nload average at the end {load()}")
    print(
        f"{'scheduler':15} {'min':>4} {'created':>7} {'bound':>6} {'unbound':>7} {'pods/s':>6} {'p50 s':>5} "
        f"{'p99 s':>5} {'max s':>5} {'ms CPU/pod':>10} {'cores':>5} {'RSS fill/peak/end MiB':>21} "
        f"{'writes/pod':>10}  load"
    )
    for r in results:
        rss = f"{r['rss_filled_mib']:.0f}/{r['rss_peak_mib']:.0f}/{r['rss_end_mib']:.0f}"
        print(
            f"{r['scheduler']:15} {r['minutes']:4.1f} {r['created']:7d} {r['bound']:6d} {r['not_bound']:7d} "
            f"{r['pods_per_s']:6.1f} {r['p50_s']:5.0f} {r['p99_s']:5.0f} {r['max_s']:5.0f} "
            f"{r['cpu_ms_per_pod']:10.1f} {r['cpu_cores']:5.2f} {rss:>21} {r['writes_per_pod']:10.2f}  "
            f"{r['load']}"
        )
    for r in results:
        print(f"{r['scheduler']}: control plane cores over the churn window: {r['plane']}")
    return 0 if all(r["not_bound"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
