"""The scheduling session on a real control plane: `kdra scheduler`'s stack (informers, the session with
gangs and queues, asynchronous two-phase gang binding) against kube-scheduler on the same gangs.

One control plane (support.controlplane, no kubelet: pods stay bound and pending; the Workload API on, so
kube-scheduler runs with GenericWorkload and its GangScheduling plugin), N nodes x D devices (one
ResourceSlice per node, a DeviceClass), Q kdra Queues (weights 1-3), then a run per scheduler, each on a
freed fleet, of the same objects in the same shuffled order, created by 8 threads at a fixed pace
(`--rate`, objects per second; 0: as fast as the API server takes them, which makes a run whose scheduler
binds during the burst create slower than one whose scheduler binds after it, and so the gang members'
latency from their own creation, which is mostly the wait for the gang's last member, longer):

- G gangs of 4-16 one-device pods, each an upstream Workload and its PodGroup (scheduling.k8s.io, gang
  policy, minCount = size; pods name it in `spec.schedulingGroup.podGroupName`), and S single one-device
  pods. Both schedulers hold a member until its gang's minCount pods exist (kube-scheduler in its
  PreEnqueue, kdra in its session) and bind a gang only once all of it is placed (kube-scheduler's Permit,
  kdra's two-phase binding). What differs: kdra also charges each PodGroup (its `kdra.dev/queue`
  annotation) and each single (its label) to a Queue, which kube-scheduler ignores, and marks waiting
  members and groups Unschedulable (PodScheduled=False, an Event) where kube-scheduler, holding them before
  its queue, writes nothing until the gang is placed.
- `--plain`: then both schedulers on as many single pods, no gangs or queues.

kube-controller-manager creates every pod's claim from its template. kdra runs as `kdra scheduler` in a
process of its own, which writes its figures at exit (KDRA_STATS=FILE). Per run:
- lag: from the last pod's create to the last pod bound, from the last claim kube-controller-manager
  created (the scheduler's own lag; that stamp whole seconds), and the whole run from the first create;
- per pod: creation -> bound latency (p50, p99, p99 of the singles alone), and "ready" latency, from the
  creation of the last pod of the pod's gang (its own for a single pod) to bound: the pods are created in
  a shuffled order over the whole burst, and a gang's first member waits for its last by design, so its
  p99 from its own creation is about the burst's length whichever scheduler runs (the same pods' wait for
  their last member, to a few ms in every run: that p99 compares how fast a handful of gangs, those whose
  first member came early, were bound); "gang ready" is the gang members' alone. A pod's create and its
  pods/binding are read from the API server's audit log (when each write completed, in microseconds; the
  objects' own stamps are whole seconds);
- per gang, from the same log: start, from its last member's creation to the scheduler's first write to a
  member's claim, and commit, from there to its last member's binding (p50, p90 over the gangs);
- the scheduler process's CPU per bound pod and API writes per bound pod (kube-scheduler's client-go
  counter, kdra's client's count), the control plane's (API server, etcd, controller manager) CPU per
  bound pod, and kdra's sessions and the loop thread's CPU per session;
- early: gang members bound before their gang's last member was created (must be 0), groups: PodGroups
  with PodGroupInitiallyScheduled=True.
Every run ends with the independent checker (support.invariants) on its namespace. `--kube-first` runs
kube-scheduler first: run both orders.

Usage: python benchmarks/bench_kube_session.py [--nodes 200] [--devices 8] [--queues 10] [--gangs 50]
       [--singles 1000] [--rate 25] [--qps 500] [--burst 1000] [--kube-first] [--plain]
       [--quick]
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
from dataclasses import dataclass
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
    control_plane_cpu,
    create_all,
    free,
    load,
    namespace,
    percentile,
)
from support.controlplane import ControlPlaneConfig, running_control_plane  # noqa: E402
from support.invariants import audit_events, check_cluster  # noqa: E402

Obj = dict[str, Any]


def parse_time(s: str) -> float:
    return dt.datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp()


def last_claim(kube: KubeClient, ns: str) -> float:
    """When kube-controller-manager created the run's last claim (the pipeline's end before scheduling)."""
    times = [parse_time(c["metadata"]["creationTimestamp"]) for c in kube.list("ResourceClaim", ns)]
    return max(times, default=0.0)


def bound_count(kube: KubeClient, ns: str) -> int:
    return sum(1 for p in kube.list("Pod", ns) if (p.get("spec") or {}).get("nodeName"))


@dataclass(frozen=True)
class PodTimes:
    gang: str | None
    created: float
    bound: float | None


def pod_times(audit: list[Obj], pods: list[Obj]) -> list[PodTimes]:
    """Each pod's creation and binding (the pods/binding that succeeded) as the API server's audit log
    records them, when the write completed, in microseconds: the objects' own stamps are whole seconds,
    too coarse for latencies of about a second."""
    created: dict[tuple[str, str], float] = {}
    bound: dict[tuple[str, str], float] = {}
    for ev in audit:
        ref = ev.get("objectRef") or {}
        ok = (ev.get("responseStatus") or {}).get("code", 500) < 300
        if ev.get("verb") != "create" or ref.get("resource") != "pods" or not ok:
            continue
        at = stamp(ev)
        into = {None: created, "binding": bound}.get(ref.get("subresource"))
        if into is not None:
            into[(ref.get("namespace", ""), ref.get("name", ""))] = at
    out = []
    for p in pods:
        key = (p["metadata"]["namespace"], p["metadata"]["name"])
        made = created.get(key, parse_time(p["metadata"]["creationTimestamp"]))
        out.append(PodTimes(gang_of(p), made, bound.get(key)))
    return out


def stamp(ev: Obj) -> float:
    return dt.datetime.fromisoformat(str(ev["stageTimestamp"]).replace("Z", "+00:00")).timestamp()


def gang_phases(audit: list[Obj], pods: list[Obj]) -> list[tuple[float, float]]:
    """Per gang, where its time after its last member's creation went, from the audit log: (start, commit):
    start, until the scheduler's first write to a member's claim (the claims' first update: the
    delete-protection finalizer, before which neither scheduler writes anything of a placed gang);
    commit, from there to the last member's binding (every member's claim writes and bindings; kdra binds
    no member before all claims are written, kube-scheduler binds each member after its own)."""
    gang = {(p["metadata"]["namespace"], p["metadata"]["name"]): gang_of(p) for p in pods}
    claim_gang = {
        (p["metadata"]["namespace"], st["resourceClaimName"]): g
        for p in pods
        if (g := gang_of(p))
        for st in (p.get("status") or {}).get("resourceClaimStatuses") or []
    }
    created: dict[str, float] = {}
    first_write: dict[str, float] = {}
    bound: dict[str, float] = {}
    for ev in audit:
        ref = ev.get("objectRef") or {}
        if (ev.get("responseStatus") or {}).get("code", 500) >= 300:
            continue
        key = (ref.get("namespace", ""), ref.get("name", ""))
        res, sub, verb = ref.get("resource"), ref.get("subresource"), ev.get("verb")
        if res == "pods" and (g := gang.get(key)):
            if verb == "create" and sub is None:
                created[g] = max(created.get(g, 0.0), stamp(ev))
            elif verb == "create" and sub == "binding":
                bound[g] = max(bound.get(g, 0.0), stamp(ev))
        elif res == "resourceclaims" and verb in ("update", "patch") and (g := claim_gang.get(key)):
            at = dt.datetime.fromisoformat(str(ev["requestReceivedTimestamp"]).replace("Z", "+00:00"))
            first_write[g] = min(first_write.get(g, at.timestamp()), at.timestamp())
    return [
        (first_write[g] - created[g], bound[g] - first_write[g])
        for g in sorted(bound)
        if g in created and g in first_write
    ]


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
    plane0 = control_plane_cpu(cp)
    try:
        with ProcessMeter(pid) as meter:
            first, last = create_all(kube, objs, args.rate)
            deadline = time.monotonic() + args.timeout
            while (n := bound_count(kube, ns)) < pods and time.monotonic() < deadline:
                time.sleep(2.0)
    finally:
        if k is not None:
            k.stop()
    plane = sum(control_plane_cpu(cp).values()) - sum(plane0.values())
    audit, pod_list = audit_events(cp.audit_log), kube.list("Pod", ns)
    times = pod_times(audit, pod_list)
    phases = gang_phases(audit, pod_list)
    start, commit = sorted(a for a, _ in phases), sorted(c for _, c in phases)
    lat = sorted(t.bound - t.created for t in times if t.bound is not None)
    singles = sorted(t.bound - t.created for t in times if t.bound is not None and t.gang is None)
    ready = ready_latencies(times)
    gang_ready = gang_ready_latencies(times)
    last_bind = max((t.bound for t in times if t.bound is not None), default=0.0)
    last_create = max((t.created for t in times), default=0.0)
    claims_done = last_claim(kube, ns)
    groups = kube.list("PodGroup", ns, api_version=api) if (api := workload_api(objs)) else []
    problems = check_cluster(kube, ns, schedulers=() if not kdra else ("kdra",))
    out: dict[str, Any] = {
        "run": name,
        "pods": pods,
        "bound": n,
        "create_s": last - first,
        "lag_s": max(0.0, last_bind - last_create),
        "claim_lag_s": max(0.0, last_bind - claims_done),
        "total_s": max(0.0, last_bind - first),
        "p50_s": percentile(lat, 0.5),
        "p99_s": percentile(lat, 0.99),
        "p99_singles_s": percentile(singles, 0.99),
        "p50_ready_s": percentile(ready, 0.5),
        "p99_ready_s": percentile(ready, 0.99),
        "p50_gang_ready_s": percentile(gang_ready, 0.5),
        "p99_gang_ready_s": percentile(gang_ready, 0.99),
        "p50_gang_start_ms": 1000 * percentile(start, 0.5),
        "p90_gang_start_ms": 1000 * percentile(start, 0.9),
        "p50_gang_commit_ms": 1000 * percentile(commit, 0.5),
        "p90_gang_commit_ms": 1000 * percentile(commit, 0.9),
        "early_binds": early_binds(times),
        "groups_scheduled": f"{sum(map(initially_scheduled, groups))}/{len(groups)}",
        "cpu_ms_per_pod": 1000 * meter.cpu_s / max(1, n),
        "plane_ms_per_pod": 1000 * plane / max(1, n),
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


def workload_api(objs: list[Obj]) -> str | None:
    return next((o["apiVersion"] for o in objs if o["kind"] == "PodGroup"), None)


def initially_scheduled(group: Obj) -> bool:
    """The condition both schedulers set on an upstream PodGroup once its gang is placed."""
    conds = (group.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "PodGroupInitiallyScheduled" and c.get("status") == "True" for c in conds)


def gang_of(pod: Obj) -> str | None:
    return ((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")


def gang_complete(times: list[PodTimes]) -> dict[str, float]:
    """When each gang's last member was created."""
    out: dict[str, float] = {}
    for t in times:
        if t.gang:
            out[t.gang] = max(out.get(t.gang, t.created), t.created)
    return out


def ready_latencies(times: list[PodTimes]) -> list[float]:
    """Seconds from the creation of the last pod of its gang (a single pod: its own) to bound: from when a
    scheduler could bind it. A gang's first member waits for its last by design, and the pods are created
    in a shuffled order over the whole burst, so creation -> bound mostly measures the burst for them."""
    complete = gang_complete(times)
    return sorted(t.bound - (complete[t.gang] if t.gang else t.created) for t in times if t.bound is not None)


def gang_ready_latencies(times: list[PodTimes]) -> list[float]:
    """The gang members' ready latencies alone: the singles, three in four pods, hide them in `ready`."""
    return ready_latencies([t for t in times if t.gang])


def early_binds(times: list[PodTimes]) -> int:
    """Gang members bound before their gang's last member was created: a scheduler that gang-schedules
    binds none."""
    complete = gang_complete(times)
    return sum(1 for t in times if t.gang and t.bound is not None and t.bound < complete[t.gang])


def queues(args: argparse.Namespace, device_class: str) -> list[Obj]:
    """kdra's Queues (weights 1-3), quota half the fleet in all; kube-scheduler has no queues."""
    return [
        {
            "apiVersion": "kdra.dev/v1alpha1",
            "kind": "Queue",
            "metadata": {"name": f"bench-q{i}"},
            "spec": {
                "resources": {
                    f"deviceclass/{device_class}": {
                        "quota": args.nodes * args.devices // (2 * args.queues),
                        "overQuotaWeight": 1 + i % 3,
                    }
                }
            },
        }
        for i in range(args.queues)
    ]


def session_objects(
    ns: str, args: argparse.Namespace, device_class: str, scheduler: str, workload_api: str
) -> tuple[list[Obj], int]:
    """G gangs of 4-16 one-device pods and S singles, in a shuffled order (the same for every run): each
    gang an upstream Workload and its PodGroup (gang policy, minCount = size), which both schedulers read,
    charged to a kdra queue by the PodGroup's `kdra.dev/queue` annotation (singles: the pod's label), which
    kube-scheduler ignores."""
    rng = random.Random(args.seed)
    objs: list[Obj] = [claim_template("one", ns, device_class)]
    pods: list[Obj] = []
    for g in range(args.gangs):
        size = rng.randint(4, 16)
        name = f"g{g:02d}"
        gang = {"gang": {"minCount": size}}
        objs.append(
            {
                "apiVersion": workload_api,
                "kind": "Workload",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"podGroupTemplates": [{"name": "workers", "schedulingPolicy": gang}]},
            }
        )
        objs.append(
            {  # as a workload controller copies it from the template
                "apiVersion": workload_api,
                "kind": "PodGroup",
                "metadata": {
                    "name": name,
                    "namespace": ns,
                    "annotations": {"kdra.dev/queue": f"bench-q{g % args.queues}"},
                },
                "spec": {
                    "workloadRef": {"workloadName": name, "templateName": "workers"},
                    "schedulingPolicy": gang,
                },
            }
        )
        for i in range(size):
            p = template_pod(f"{name}-{i:02d}", ns, "one", scheduler=scheduler)
            p["spec"]["schedulingGroup"] = {"podGroupName": name}
            pods.append(p)
    for i in range(args.singles):
        p = template_pod(f"s{i:04d}", ns, "one", scheduler=scheduler)
        p["metadata"]["labels"]["kdra.dev/queue"] = f"bench-q{i % args.queues}"
        pods.append(p)
    rng.shuffle(pods)
    return objs + pods, len(pods)


# (heading, result key, number format): the table the run ends with, one row per run.
COLUMNS = (
    ("run", "run", ""),
    ("pods", "pods", ""),
    ("bound", "bound", ""),
    ("create s", "create_s", ".1f"),
    ("lag s", "lag_s", ".1f"),
    ("claim lag", "claim_lag_s", ".1f"),
    ("total s", "total_s", ".1f"),
    ("p50 s", "p50_s", ".2f"),
    ("p99 s", "p99_s", ".2f"),
    ("singles p99", "p99_singles_s", ".2f"),
    ("ready p50", "p50_ready_s", ".2f"),
    ("ready p99", "p99_ready_s", ".2f"),
    ("gang ready p50", "p50_gang_ready_s", ".2f"),
    ("gang ready p99", "p99_gang_ready_s", ".2f"),
    ("gang start ms p50", "p50_gang_start_ms", ".0f"),
    ("p90", "p90_gang_start_ms", ".0f"),
    ("gang commit ms p50", "p50_gang_commit_ms", ".0f"),
    ("p90", "p90_gang_commit_ms", ".0f"),
    ("ms CPU/pod", "cpu_ms_per_pod", ".1f"),
    ("plane ms/pod", "plane_ms_per_pod", ".1f"),
    ("sessions", "sessions", ""),
    ("ms CPU/session", "session_cpu_ms", ".1f"),
    ("kdra CPU s", "process_cpu_s", ".1f"),
    ("writes/pod", "writes_per_pod", ".2f"),
    ("early", "early_binds", ""),
    ("groups", "groups_scheduled", ""),
    ("violations", "violations", ""),
    ("load", "load", ""),
)


def table(results: list[dict[str, Any]]) -> list[str]:
    """The runs as aligned rows (a figure a run has not, kube-scheduler's sessions, shows as `-`)."""
    rows = [[h for h, _, _ in COLUMNS]]
    for r in results:
        rows.append([f"{r[key]:{f}}" if key in r else "-" for _, key, f in COLUMNS])
    width = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    return [
        " ".join(
            c.ljust(w) if i in (0, len(COLUMNS) - 1) else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, width, strict=True))
        )
        for row in rows
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--queues", type=int, default=10)
    ap.add_argument("--gangs", type=int, default=50)
    ap.add_argument("--singles", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=25, help="objects created per second (0: at once)")
    ap.add_argument("--qps", type=float, default=500)
    ap.add_argument("--burst", type=int, default=1000)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--kube-first", action="store_true", help="kube-scheduler's run first")
    ap.add_argument("--plain", action="store_true", help="then both schedulers on as many pods, no gangs")
    args = ap.parse_args()
    if args.quick:
        args.nodes, args.queues, args.gangs, args.singles = 40, 2, 8, 150
    load = os.getloadavg()
    print(
        f"machine: {os.cpu_count()} CPUs, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}", flush=True
    )
    cfg = ControlPlaneConfig(kube_api_qps=int(args.qps), kube_api_burst=args.burst, audit_log=True)
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
        for q in queues(args, fleet.device_class):
            kube.create(q)
        api = f"scheduling.k8s.io/{cp.release.workload_api_version}"
        results = []

        def step(name: str, ns: str, kdra: bool, gangs: bool) -> None:
            scheduler = "kdra" if kdra else "default-scheduler"
            objs, n = session_objects(ns, args, fleet.device_class, scheduler, api)
            if not gangs:
                objs = [claim_template("one", ns, fleet.device_class)]
                objs += [template_pod(f"p{i:04d}", ns, "one", scheduler=scheduler) for i in range(n)]
            results.append(run(name, kube, cp, ns, objs, n, args, kdra=kdra))
            print(results[-1], flush=True)
            free(kube, ns)

        steps = [
            ("kdra (gangs, queues)", "bench-session", True, True),
            ("kube-scheduler (gangs)", "bench-kube", False, True),
        ]
        if args.kube_first:
            steps.reverse()
        if args.plain:
            steps += [
                ("kube-scheduler (no gangs)", "bench-kube-plain", False, False),
                ("kdra (no gangs/queues)", "bench-plain", True, False),
            ]
        for name, ns, kdra, gangs in steps:
            step(name, ns, kdra, gangs)
    load = os.getloadavg()
    print(f"\nload average at the end {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    for line in table(results):
        print(line)
    ok = all(r["bound"] == r["pods"] and not r["violations"] and not r["early_binds"] for r in results)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
