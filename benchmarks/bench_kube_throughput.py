"""Side-by-side scheduling throughput on a real control plane (issue 7 scope 6, issue 17 item 6): the
control plane's kube-scheduler (1.37 by default, KDRA_K8S_VERSION=1.36 for 1.36; 1.37's PreQueueingHints,
KEP-6132, made it ~2.4x faster on this shape) against `kdra scheduler`, on kube-scheduler's
SchedulingWithResourceClaimTemplate shape.

One control plane (support.controlplane; kube-scheduler, kube-controller-manager and kdra all with
the same --kube-api-qps/--kube-api-burst), N nodes x D devices (one ResourceSlice per node, a DeviceClass
selecting the driver), then per scheduler in turn: a ResourceClaimTemplate and P pods with one template
claim each, created by 8 client threads; the clock runs from the first create to the last pod bound (the
latest PodScheduled=True transition, which the API server stamps at binding). kube-controller-manager
creates the claims in both runs. Each run gets a fleet of its own: after the kube-scheduler run its
Nodes and ResourceSlices are deleted and a fresh fleet is created (deleting 5,000 bound pods and having
the controller manager release their claims takes longer than a run on 2 cores); kdra's informers
still list the first run's 5,000 pods and claims, a handicap for kdra. After each run a few pods that
cannot fit (D+1 devices) check that both schedulers say Unschedulable for them.

Prints, per scheduler, pods/s, creation -> bound latency per pod (p50, p99, max; the API server's
one-second stamps, benchmarks/kubebench.py), the scheduler process's CPU per bound pod and RSS (peak and
at the end), and its API writes per bound pod (kube-scheduler's rest_client_requests_total, kdra's client
count); the cores the API server, etcd and kube-controller-manager used over the run; the machine's load
average before and after each run; checks that every device is allocated at
most once and that fit/no-fit outcomes are identical. Takes a few minutes at full size on 2 cores; at
5,000 nodes x 8 devices and 20,000 pods (--nodes 5000 --devices 8 --pods 20000) kdra's run took 6 minutes
and kube-scheduler had bound 18,709 pods after 10 (--limit 600), one scheduler per control plane (--only).

Usage: python benchmarks/bench_kube_throughput.py [--nodes 500] [--devices 10] [--pods 5000] [--qps 500]
       [--burst 1000] [--kdra-first] [--only kdra|kube-scheduler] [--bind-workers N] [--limit SECONDS]
       [--rate PODS_PER_S] [--quick]   (--quick: 50 nodes x 10 devices, 400 pods; --limit: report what is
       bound that long after the first create, for a scheduler that would take too long; --rate: create the
       pods at that pace for both, so that latency compares the schedulers, not how fast creation went)

The 2-core machine is shared, so the figures move with its load (see docs/kube-commands.md); run it
both ways round (--kdra-first) before reading much into a ratio.
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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))  # the test support, `support`
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from kubeutil import (  # noqa: E402
    DeviceFleet,
    KdraProcess,
    claim_template,
    template_pod,
)

from kdra.kube.client import KubeClient  # noqa: E402
from kdra.kube.client import KubeClient as FastClient  # noqa: E402
from kubebench import (  # noqa: E402
    ProcessMeter,
    client_writes,
    control_plane_cpu,
    cores,
    create_all,
    latencies,
    load,
    scheduled_at,
    summary,
    wait_all_bound,
)
from support.controlplane import ControlPlane, ControlPlaneConfig, running_control_plane  # noqa: E402

NO_FIT = 5


def run_one(
    cp: ControlPlane,
    kube: KubeClient,
    fast: FastClient,
    fleet: DeviceFleet,
    scheduler: str,
    pods: int,
    pid: int,
    writes: Callable[[], float],
    limit: float | None = None,
    rate: float = 0.0,
) -> dict[str, Any]:
    ns = f"bench-{scheduler}"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    deadline = time.monotonic() + 60
    while not fast.try_get("ServiceAccount", "default", ns):
        if time.monotonic() > deadline:
            raise TimeoutError("default ServiceAccount")
        time.sleep(0.2)
    fast.create(claim_template("one", ns, fleet.device_class))
    fast.create(claim_template("too-many", ns, fleet.device_class, count=fleet.devices + 1))
    objs = [template_pod(f"p{i:05d}", ns, "one", scheduler=scheduler) for i in range(pods)]
    load_before = load()
    writes0 = writes()
    plane0 = control_plane_cpu(cp)
    t0 = time.time()
    with ProcessMeter(pid) as meter:
        create_all(fast, objs, rate)
        created = time.time() - t0
        listed = wait_all_bound(fast, ns, timeout=limit - created if limit else max(600.0, pods / 2))
    bound_pods = [p for p in listed if (p.get("spec") or {}).get("nodeName")]
    n = len(bound_pods)
    last = max((scheduled_at(p) or 0.0 for p in bound_pods), default=0.0)
    lat = latencies(bound_pods)
    n_writes = writes() - writes0
    plane = cores(plane0, control_plane_cpu(cp), time.time() - t0)
    elapsed = max(last, time.time() if n < pods else last) - t0
    # Second-resolution timestamps: never report less than the measured creation time.
    elapsed = max(elapsed, created)
    for i in range(NO_FIT):
        fast.create(template_pod(f"nofit{i}", ns, "too-many", scheduler=scheduler))

    def unschedulable() -> list[str]:
        out = []
        for i in range(NO_FIT):
            p = fast.get("Pod", f"nofit{i}", ns)
            for c in (p.get("status") or {}).get("conditions") or []:
                if c.get("type") == "PodScheduled" and c.get("status") == "False":
                    out.append(p["metadata"]["name"])
        return out

    deadline = time.monotonic() + 120
    while len(unschedulable()) < NO_FIT and time.monotonic() < deadline:
        time.sleep(1.0)
    devices: list[tuple[str, str, str]] = []
    for c in fast.list("ResourceClaim", ns):
        alloc = (c.get("status") or {}).get("allocation") or {}
        for r in (alloc.get("devices") or {}).get("results") or []:
            devices.append((r["driver"], r["pool"], r["device"]))
    bound = {p["metadata"]["name"] for p in fast.list("Pod", ns) if (p.get("spec") or {}).get("nodeName")}
    return {
        **summary(scheduler, lat, meter.cpu_s, n),
        "rss_peak_mib": meter.peak_rss_mib,
        "rss_end_mib": meter.end_rss_mib,
        "writes_per_pod": n_writes / max(1, n),
        "load": f"{load_before} -> {load()}",
        "plane": plane,
        "ns": ns,
        "seconds": elapsed,
        "create_seconds": created,
        "pods_per_s": n / elapsed if elapsed > 0 else 0.0,
        "double_allocated": len(devices) - len(set(devices)),
        "fit": bound,
        "no_fit": sorted(unschedulable()),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--devices", type=int, default=10)
    ap.add_argument("--pods", type=int, default=5000)
    ap.add_argument("--qps", type=int, default=500)
    ap.add_argument("--burst", type=int, default=1000)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", choices=("kube-scheduler", "kdra"), default=None)
    ap.add_argument("--kdra-first", action="store_true", help="run kdra first (on the empty cluster)")
    ap.add_argument("--bind-workers", type=int, default=None, help="kdra scheduler --bind-workers")
    ap.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="pods created per second, the same pace for both (default 0: as fast as the API server takes "
        "them, which then depends on the scheduler running beside it)",
    )
    ap.add_argument(
        "--limit",
        type=float,
        default=None,
        help="stop waiting for bindings this many seconds after the first create and report the pods bound "
        "by then (default: pods/2, at least 600)",
    )
    args = ap.parse_args()
    # SIGTERM: unwind (stop the control plane) like Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.quick:
        args.nodes, args.devices, args.pods = 50, 10, 400
    config = ControlPlaneConfig(kube_api_qps=args.qps, kube_api_burst=args.burst, verbosity=1)
    with (
        tempfile.TemporaryDirectory(prefix="kdra-bench-") as work,
        running_control_plane(Path(work), config, log=sys.stderr) as cp,
    ):
        kube = cp.client()
        fast = FastClient.from_kubeconfig(cp.kubeconfig, qps=0, burst=1)
        print(f"control plane {cp.version}", flush=True)
        t = time.time()
        fleet = DeviceFleet(kube, "bench-a", nodes=args.nodes, devices=args.devices).create(workers=8)
        print(
            f"fleet: {args.nodes} nodes x {args.devices} devices in {time.time() - t:.1f}s; "
            f"{args.pods} pods with one template claim each; client qps/burst {args.qps}/{args.burst}",
            flush=True,
        )
        results: dict[str, dict[str, Any]] = {}
        order = ["kdra", "kube-scheduler"] if args.kdra_first else ["kube-scheduler", "kdra"]
        for which in order:
            if args.only not in (None, which):
                continue
            if results:  # a fresh fleet: the first run's devices stay allocated to its pods
                t = time.time()
                fleet.delete(workers=8)
                fleet = DeviceFleet(kube, "bench-b", nodes=args.nodes, devices=args.devices).create(workers=8)
                print(f"fresh fleet for {which} in {time.time() - t:.1f}s", flush=True)
            if which == "kube-scheduler":
                ks = cp.components["kube-scheduler"].proc
                assert ks is not None
                r = run_one(
                    cp,
                    kube,
                    fast,
                    fleet,
                    "default-scheduler",
                    args.pods,
                    ks.pid,
                    lambda: client_writes(cp.metrics("kube-scheduler")),
                    args.limit,
                    args.rate,
                )
            else:
                stats = Path(work) / f"kdra-stats-{len(results)}.json"
                os.environ["KDRA_STATS"] = str(stats)
                proc = KdraProcess(
                    cp,
                    ["scheduler", "--kube-api-qps", str(args.qps), "--kube-api-burst", str(args.burst)]
                    + (["--bind-workers", str(args.bind_workers)] if args.bind_workers is not None else []),
                    Path(work) / "kdra.log",
                )
                del os.environ["KDRA_STATS"]
                try:
                    time.sleep(2.0)  # let it list and start watching, as kube-scheduler already is
                    r = run_one(
                        cp, kube, fast, fleet, "kdra", args.pods, proc.pid, lambda: 0.0, args.limit, args.rate
                    )
                finally:
                    log = proc.log()
                    proc.stop(timeout=60)
                st = json.loads(stats.read_text()) if stats.exists() else {}
                r["writes_per_pod"] = st.get("api_writes", 0) / max(1, r["bound"])
                r["events_dropped"] = st.get("events_dropped", 0)
                if not r["bound"]:
                    print(log, file=sys.stderr)
            results[which] = r
            lag = float(r["seconds"]) - float(r["create_seconds"])
            print(
                f"{which}: {r['bound']}/{args.pods} bound in {r['seconds']:.1f}s = "
                f"{r['pods_per_s']:.1f} pods/s (creation took {r['create_seconds']:.1f}s, "
                f"last binding {lag:.1f}s after the last create); latency p50 {r['p50_s']:.0f}s "
                f"p99 {r['p99_s']:.0f}s max {r['max_s']:.0f}s; CPU {r['cpu_ms_per_pod']:.1f} ms/pod; "
                f"RSS peak {r['rss_peak_mib']:.0f} MiB, end {r['rss_end_mib']:.0f} MiB; "
                f"{r['writes_per_pod']:.2f} writes/pod; load {r['load']}; control plane cores: {r['plane']}",
                flush=True,
            )
        ok = True
        for r in results.values():
            if r["double_allocated"]:
                print(f"{r['scheduler']}: {r['double_allocated']} devices allocated twice!")
                ok = False
        if len(results) == 2:
            up, kd = results["kube-scheduler"], results["kdra"]
            ratio = float(kd["pods_per_s"]) / float(up["pods_per_s"]) if up["pods_per_s"] else 0.0
            print(
                f"throughput: kdra {kd['pods_per_s']:.1f} pods/s, "
                f"kube-scheduler {up['pods_per_s']:.1f} pods/s, ratio kdra/kube-scheduler = {ratio:.2f}"
            )
            same_fit = up["fit"] == kd["fit"] and up["no_fit"] == kd["no_fit"]
            print(
                f"fit/no-fit outcomes identical: {same_fit} "
                f"(fit {len(up['fit'])} vs {len(kd['fit'])}, no-fit {up['no_fit']} vs {kd['no_fit']})"
            )
            ok = ok and same_fit
        fleet.delete(workers=8)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
