"""The scheduling session on a real control plane (issue 12): `kdra scheduler`'s stack (informers, the
session with gangs and queues, asynchronous two-phase gang binding) against kube-scheduler 1.36.

One control plane (support.controlplane, no kubelet: pods stay bound and pending), N nodes x D devices
(one ResourceSlice per node, a DeviceClass), then three runs, each on a freed fleet:

1. session: Q Queues (weights 1-3), G gangs of 4-16 one-device pods (a kdra PodGroup each, minMember =
   size, charged to a queue) and S single one-device pods spread over the queues, created in a shuffled
   order by 8 threads, scheduled by kdra;
2. kube-scheduler: the same number of single pods, no gangs or queues, scheduled by kube-scheduler;
3. kdra plain: the same, scheduled by kdra.

kube-controller-manager creates every pod's claim from its template. kdra runs as `kdra scheduler` in a
process of its own, which writes its figures at exit (KDRA_STATS=FILE):
- lag: from the last create to the last pod bound (PodScheduled=True as the API server stamps it), from
  the last claim kube-controller-manager created (the scheduler's own lag), and the
  whole run from the first create;
- session CPU per cycle: the loop thread's CPU time in the session's actions (Scheduler.run), per run, and
  kdra's process CPU in all (watch events, binding threads, JSON);
- API writes per bound pod: every write kdra's client sent (claim finalizer and status, binding, Events,
  PodGroup/Queue status), counted by the client.
- per pod: creation -> bound latency (p50, p99; the API server's one-second stamps), and for both
  schedulers the process's CPU per bound pod and API writes per bound pod (kube-scheduler's client-go
  counter) measured the same way (benchmarks/kubebench.py); and "ready" latency, from the creation of the
  last pod of the pod's gang (its own for a single pod) to bound: the pods are created in a shuffled order
  over the whole burst, and a gang's first member waits for its last by design.
Every run ends with the independent checker (support.invariants) on its namespace. `--kube-first`
runs kube-scheduler first (then the session, then kdra plain): run both orders.

Usage: python benchmarks/bench_kube_session.py [--nodes 200] [--devices 8] [--queues 10] [--gangs 50]
       [--singles 1000] [--qps 500] [--burst 1000] [--kube-first] [--quick]
       (--quick: 40 nodes, 2 queues, 8 gangs, 150)

The 2-core machine is shared: run it under nice, once or twice, and read the figures with its load.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import random
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))  # the test support, `support`
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from kubeutil import DeviceFleet, KdraProcess, claim_template, template_pod  # noqa: E402

from kdra.cluster.store import AlreadyExistsError  # noqa: E402
from kdra.kube.client import KubeClient  # noqa: E402
from kubebench import (  # noqa: E402
    ProcessMeter,
    client_writes,
    free,
    latencies,
    load,
    namespace,
    percentile,
    scheduled_at,
)
from support.controlplane import ControlPlaneConfig, running_control_plane  # noqa: E402
from support.invariants import check_cluster  # noqa: E402

Obj = dict[str, Any]


def parse_time(s: str) -> float:
    return dt.datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp()


def last_claim(kube: KubeClient, ns: str) -> float:
    """When kube-controller-manager created the run's last claim (the pipeline's end before scheduling)."""
    times = [parse_time(c["metadata"]["creationTimestamp"]) for c in kube.list("ResourceClaim", ns)]
    return max(times, default=0.0)


def bound_times(kube: KubeClient, ns: str) -> tuple[int, float]:
    last, n = 0.0, 0
    for p in kube.list("Pod", ns):
        if not (p.get("spec") or {}).get("nodeName"):
            continue
        n += 1
        for c in (p.get("status") or {}).get("conditions") or []:
            if c.get("type") == "PodScheduled" and c.get("status") == "True":
                last = max(last, parse_time(c["lastTransitionTime"]))
    return n, last


class KdraScheduler:
    """`kdra scheduler` in a process of its own (as in production: no GIL shared with this script), its
    figures read from KDRA_STATS at exit."""

    def __init__(self, cp: Any, work: Path, qps: float, burst: int) -> None:
        self.stats_path = work / f"stats-{time.monotonic_ns()}.json"
        os.environ["KDRA_STATS"] = str(self.stats_path)
        try:
            self.proc = KdraProcess(
                cp,
                ["scheduler", "--kube-api-qps", str(qps), "--kube-api-burst", str(burst), "--resync", "0"],
                work / f"kdra-{time.monotonic_ns()}.log",
            )
        finally:
            del os.environ["KDRA_STATS"]
        deadline = time.monotonic() + 60
        while "serving schedulerName" not in self.proc.log():
            if time.monotonic() > deadline or not self.proc.running():
                raise RuntimeError(f"kdra scheduler did not start:\n{self.proc.log()}")
            time.sleep(0.2)
        self.stats: dict[str, Any] = {}

    def stop(self) -> dict[str, Any]:
        self.proc.stop(timeout=60)
        with contextlib.suppress(OSError, ValueError):
            self.stats = json.loads(self.stats_path.read_text())
        return self.stats


def create_all(kube: KubeClient, objs: list[Obj]) -> tuple[float, float]:
    t0 = time.time()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(kube.create, objs))
    return t0, time.time()


def run(
    name: str,
    kube: KubeClient,
    cp: Any,
    ns: str,
    objs: list[Obj],
    pods: int,
    args: argparse.Namespace,
    kdra: bool,
) -> dict[str, Any]:
    namespace(kube, ns)
    k = KdraScheduler(cp, Path(cp.work_dir), args.qps, args.burst) if kdra else None
    ks = cp.components["kube-scheduler"].proc
    pid = k.proc.pid if k is not None else ks.pid
    ks_writes0 = 0.0 if kdra else client_writes(cp.metrics("kube-scheduler"))
    load_before = load()
    try:
        with ProcessMeter(pid) as meter:
            first, last = create_all(kube, objs)
            deadline = time.monotonic() + args.timeout
            n, last_bind = bound_times(kube, ns)
            while n < pods and time.monotonic() < deadline:
                time.sleep(2.0)
                n, last_bind = bound_times(kube, ns)
    finally:
        if k is not None:
            k.stop()
    listed = kube.list("Pod", ns)
    lat = latencies(listed)
    ready = ready_latencies(listed)
    claims_done = last_claim(kube, ns)
    problems = check_cluster(kube, ns, schedulers=() if not kdra else ("kdra",))
    out: dict[str, Any] = {
        "run": name,
        "pods": pods,
        "bound": n,
        "create_s": last - first,
        "lag_s": max(0.0, last_bind - last),
        "claim_lag_s": max(0.0, last_bind - claims_done),
        "total_s": max(0.0, last_bind - first),
        "p50_s": percentile(lat, 0.5),
        "p99_s": percentile(lat, 0.99),
        "p50_ready_s": percentile(ready, 0.5),
        "p99_ready_s": percentile(ready, 0.99),
        "cpu_ms_per_pod": 1000 * meter.cpu_s / max(1, n),
        "load": f"{load_before} -> {load()}",
        "violations": len([p for p in problems if p.rule != "unexplained"]),
    }
    if not kdra:
        out["writes_per_pod"] = (client_writes(cp.metrics("kube-scheduler")) - ks_writes0) / max(1, n)
    if k is not None:
        st = k.stats
        out.update(
            sessions=st.get("sessions", 0),
            session_cpu_ms=1000 * st.get("session_cpu_s", 0.0) / max(1, st.get("sessions", 0)),
            session_cpu_s=st.get("session_cpu_s", 0.0),
            process_cpu_s=st.get("process_cpu_s", 0.0),
            writes_per_pod=st.get("api_writes", 0) / max(1, n),
        )
    return out


def ready_latencies(pods: list[Obj]) -> list[float]:
    """Seconds from the creation of the last pod of its gang (a single pod: its own) to bound: from when a
    scheduler could bind it. A gang's first member waits for its last by design, and the pods are created
    in a shuffled order over the whole burst, so creation -> bound mostly measures the burst for them."""
    gang_complete: dict[str, float] = {}
    for p in pods:
        g = (p["metadata"].get("annotations") or {}).get("kdra.dev/pod-group")
        if g:
            created = parse_time(p["metadata"]["creationTimestamp"])
            gang_complete[g] = max(gang_complete.get(g, created), created)
    out = []
    for p in pods:
        at = scheduled_at(p)
        if at is None:
            continue
        g = (p["metadata"].get("annotations") or {}).get("kdra.dev/pod-group")
        out.append(at - (gang_complete[g] if g else parse_time(p["metadata"]["creationTimestamp"])))
    return sorted(out)


def session_objects(
    ns: str, args: argparse.Namespace, device_class: str, rng: random.Random
) -> tuple[list[Obj], int]:
    gpus = f"deviceclass/{device_class}"
    queues = [
        {
            "apiVersion": "kdra.dev/v1alpha1",
            "kind": "Queue",
            "metadata": {"name": f"bench-q{i}"},
            "spec": {
                "resources": {
                    gpus: {
                        "quota": args.nodes * args.devices // (2 * args.queues),
                        "overQuotaWeight": 1 + i % 3,
                    }
                }
            },
        }
        for i in range(args.queues)
    ]
    objs: list[Obj] = [claim_template("one", ns, device_class)]
    pods: list[Obj] = []
    for g in range(args.gangs):
        size = rng.randint(4, 16)
        q = f"bench-q{g % args.queues}"
        objs.append(
            {
                "apiVersion": "kdra.dev/v1alpha1",
                "kind": "PodGroup",
                "metadata": {"name": f"g{g:02d}", "namespace": ns},
                "spec": {"minMember": size, "queue": q},
            }
        )
        for i in range(size):
            p = template_pod(f"g{g:02d}-{i:02d}", ns, "one")
            p["metadata"]["annotations"] = {"kdra.dev/pod-group": f"g{g:02d}"}
            pods.append(p)
    for i in range(args.singles):
        p = template_pod(f"s{i:04d}", ns, "one")
        p["metadata"]["labels"]["kdra.dev/queue"] = f"bench-q{i % args.queues}"
        pods.append(p)
    rng.shuffle(pods)
    return queues + objs + pods, len(pods)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--queues", type=int, default=10)
    ap.add_argument("--gangs", type=int, default=50)
    ap.add_argument("--singles", type=int, default=1000)
    ap.add_argument("--qps", type=float, default=500)
    ap.add_argument("--burst", type=int, default=1000)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--kube-first", action="store_true", help="kube-scheduler's run first")
    args = ap.parse_args()
    if args.quick:
        args.nodes, args.queues, args.gangs, args.singles = 40, 2, 8, 150
    rng = random.Random(args.seed)
    load = os.getloadavg()
    print(
        f"machine: {os.cpu_count()} CPUs, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}", flush=True
    )
    cfg = ControlPlaneConfig(kube_api_qps=int(args.qps), kube_api_burst=args.burst)
    with (
        tempfile.TemporaryDirectory(prefix="kdra-bench-session-") as work,
        running_control_plane(Path(work), cfg) as cp,
    ):
        kube = cp.client()
        for f in sorted((ROOT / "deploy" / "crds").glob("*.yaml")):
            import yaml

            for doc in yaml.safe_load_all(f.read_text()):
                if doc:
                    with contextlib.suppress(AlreadyExistsError):
                        kube.create(doc)
        time.sleep(2)  # the CRDs become Established
        t = time.monotonic()
        fleet = DeviceFleet(kube, "bs", nodes=args.nodes, devices=args.devices).create()
        print(
            f"fleet: {args.nodes} nodes x {args.devices} devices in {time.monotonic() - t:.0f}s", flush=True
        )
        results = []
        objs, n = session_objects("bench-session", args, fleet.device_class, rng)

        def session() -> None:
            results.append(
                run("kdra session (gangs, queues)", kube, cp, "bench-session", objs, n, args, kdra=True)
            )
            print(results[-1], flush=True)
            free(kube, "bench-session")

        def kube_scheduler() -> None:
            plain = [claim_template("one", "bench-kube", fleet.device_class)] + [
                template_pod(f"p{i:04d}", "bench-kube", "one", scheduler="default-scheduler")
                for i in range(n)
            ]
            results.append(
                run("kube-scheduler (no gangs/queues)", kube, cp, "bench-kube", plain, n, args, kdra=False)
            )
            print(results[-1], flush=True)
            free(kube, "bench-kube")

        for step in (kube_scheduler, session) if args.kube_first else (session, kube_scheduler):
            step()
        plain = [claim_template("one", "bench-plain", fleet.device_class)] + [
            template_pod(f"p{i:04d}", "bench-plain", "one") for i in range(n)
        ]
        results.append(run("kdra (no gangs/queues)", kube, cp, "bench-plain", plain, n, args, kdra=True))
        print(results[-1], flush=True)
    load = os.getloadavg()
    print(f"\nload average at the end {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    print(
        f"{'run':34} {'pods':>5} {'bound':>5} {'create s':>8} {'lag s':>6} {'claim lag':>9} {'total s':>7} "
        f"{'p50 s':>5} {'p99 s':>5} {'ready p50/p99':>13} {'ms CPU/pod':>10} {'sessions':>8} "
        f"{'ms CPU/session':>14} "
        f"{'kdra CPU s':>10} {'writes/pod':>10} {'violations':>10}  load"
    )
    for r in results:
        nan = float("nan")
        row = f"{r['run']:34} {r['pods']:5d} {r['bound']:5d} {r['create_s']:8.1f} {r['lag_s']:6.1f} "
        row += f"{r['claim_lag_s']:9.1f} {r['total_s']:7.1f} {r['p50_s']:5.0f} {r['p99_s']:5.0f} "
        row += f"{r['p50_ready_s']:6.0f}/{r['p99_ready_s']:<6.0f} "
        row += (
            f"{r['cpu_ms_per_pod']:10.1f} {r.get('sessions', '-')!s:>8} {r.get('session_cpu_ms', nan):14.1f} "
        )
        row += (
            f"{r.get('process_cpu_s', nan):10.1f} {r.get('writes_per_pod', nan):10.2f} {r['violations']:10d}"
        )
        row += f"  {r['load']}"
        print(row)
    return 0 if all(r["bound"] == r["pods"] and not r["violations"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
