"""Preemption of pods that hold DRA devices, side by side: the control plane's kube-scheduler (run it on
Kubernetes 1.38: KDRA_K8S_VERSION=1.38) against `kdra scheduler`, on one control plane with KWOK as the
nodes' kubelet.

Every scenario runs once per scheduler, each time on a fleet and in a namespace of its own (so neither
scheduler sees the other's pods): low-priority victims are bound and Running first (KWOK finishes a
deleted pod 4 s later, so freed devices stay busy for a while), then the high-priority preemptor(s) are
created and, as soon as a victim is being deleted (or after 5 s when none is), a low-priority "third" pod
asking for the same kind of device. Reported per scenario and scheduler:

- victims: how many of the low-priority pods were deleted, and whether that is the minimum that lets the
  preemptor(s) run (the scenario knows it);
- to Running: seconds from the preemptor's creation until KWOK reports it Running ("-" if it never did
  within the wait);
- third pod took freed devices: whether the third pod was given a device a victim held;
- API writes: the scheduler's writes to pods, bindings, pod status, evictions, ResourceClaims and Events
  in the scenario's namespace (the API server's audit log, by User-Agent; kdra's dry-run evictions, which
  check PodDisruptionBudgets, count as evictions: the audit log's metadata cannot tell them apart).

Scenarios: whole-GPU victim; MIG victim (a 3g.20gb partition of a dynamic-MIG A100, the preemptor wants
the whole GPU as 7g.40gb); a PodDisruptionBudget that refuses (no victim may be evicted); two preemptors
racing for what one victim frees; a gang preemptor (an upstream PodGroup of 2 with the pods' priority
class, one victim per node); a victim holding a network-attached device (a ResourceSlice with allNodes,
KEP-5690's non-goal). A PodGroup-level claim (KEP-5729) is not a scenario yet: kdra does not allocate
PodGroup-level claims.

Kubernetes v1.38.0-beta.0 has no DRAPreemption gate and its DynamicResources plugin returns no
PreFilterExtensions, so kube-scheduler's dry run cannot free a victim's devices: expect no victims there
(docs/versions.md). The victims take 4 s to terminate (KWOK), so kdra's times are 4 s plus its own
latency. Run both schedulers in one invocation: the machine is shared. A few minutes on 2 cores.

Usage: KDRA_K8S_VERSION=1.38 python benchmarks/bench_preemption.py [--only kube-scheduler|kdra]
       [--scenario NAME ...] [--wait 60]
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

from e2e.kubeutil import KdraProcess  # noqa: E402
from e2e.sessionutil import (  # noqa: E402
    TERMINATE_SLOWLY,
    GpuFleet,
    fleet_spec,
    gpu_pod,
    gpu_template,
    priority_class,
)
from kdra.cluster.store import AlreadyExistsError  # noqa: E402
from kdra.kube.client import KubeClient, Obj  # noqa: E402
from support.controlplane import (  # noqa: E402
    ControlPlane,
    ControlPlaneConfig,
    force_delete,
    running_control_plane,
)
from support.invariants import audit_events, audit_time  # noqa: E402

H100 = "H100-SXM-80GB"
LOW, HIGH = "bench-preempt-low", "bench-preempt-high"
MIG = "device.attributes['gpu.nvidia.com'].profile == '{}'"
NET_DRIVER = "net.example.com"
SCHEDULERS = {"kube-scheduler": "default-scheduler", "kdra": "kdra"}


@dataclass
class Scenario:
    name: str
    pools: list[dict[str, Any]]
    victims: list[tuple[str, str]]  # (pod, template), low priority
    preemptors: list[tuple[str, str]]  # (pod, template), high priority
    third: tuple[str, str]  # (pod, template), low priority, created once a victim is going
    minimal: int  # the fewest victims that let every preemptor that can run, run
    can_run: int  # how many preemptors can run at all
    templates: list[tuple[str, int, str, str | None]] = field(default_factory=list)
    extra: Callable[[KubeClient, str, GpuFleet], None] | None = None  # more objects (PDB, slices)
    labels: dict[str, dict[str, str]] = field(default_factory=dict)  # pod -> labels
    gang: str | None = None  # the preemptors form this upstream PodGroup


def _pdb(kube: KubeClient, ns: str, fleet: GpuFleet) -> None:
    kube.create(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "keep", "namespace": ns},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "serving"}}},
        }
    )


def _network_device(kube: KubeClient, ns: str, fleet: GpuFleet) -> None:
    """One device reachable from every node (allNodes), e.g. a fabric attachment, and its class."""
    with contextlib.suppress(AlreadyExistsError):
        kube.create(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": NET_DRIVER},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{NET_DRIVER}"'}}]},
            }
        )
    kube.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{fleet.prefix}-fabric"},
            "spec": {
                "driver": NET_DRIVER,
                "pool": {"name": f"{fleet.prefix}-fabric", "generation": 1, "resourceSliceCount": 1},
                "allNodes": True,
                "devices": [{"name": "fabric-0"}],
            },
        }
    )


def scenarios() -> list[Scenario]:
    gpu = ("whole", 1, "gpu.nvidia.com", None)
    return [
        Scenario(
            "whole-gpu",
            [{"name": "a", "count": 1, "accelerator": {"model": H100, "count": 1}}],
            victims=[("low", "whole")],
            preemptors=[("high", "whole")],
            third=("third", "whole"),
            minimal=1,
            can_run=1,
            templates=[gpu],
        ),
        Scenario(
            "mig",
            [
                {
                    "name": "a",
                    "count": 1,
                    "accelerator": {"model": "A100-40GB", "count": 1, "mig": {"mode": "dynamic"}},
                }
            ],
            victims=[("low", "mig3g")],
            preemptors=[("high", "mig7g")],
            third=("third", "mig1g"),
            minimal=1,
            can_run=1,
            templates=[
                ("mig7g", 1, "mig.nvidia.com", MIG.format("7g.40gb")),
                ("mig3g", 1, "mig.nvidia.com", MIG.format("3g.20gb")),
                ("mig1g", 1, "mig.nvidia.com", MIG.format("1g.5gb")),
            ],
        ),
        Scenario(
            "pdb-refuses",
            [{"name": "a", "count": 1, "accelerator": {"model": H100, "count": 1}}],
            victims=[("serving", "whole")],
            preemptors=[("high", "whole")],
            third=("third", "whole"),
            minimal=0,
            can_run=0,
            templates=[gpu],
            extra=_pdb,
            labels={"serving": {"app": "serving"}},
        ),
        Scenario(
            "two-preemptors-one-victim",
            [{"name": "a", "count": 1, "accelerator": {"model": H100, "count": 1}}],
            victims=[("low", "whole")],
            preemptors=[("high-1", "whole"), ("high-2", "whole")],
            third=("third", "whole"),
            minimal=1,
            can_run=1,
            templates=[gpu],
        ),
        Scenario(
            "gang",
            [{"name": "a", "count": 2, "accelerator": {"model": H100, "count": 1}}],
            victims=[("low-0", "whole"), ("low-1", "whole")],
            preemptors=[("gang-0", "whole"), ("gang-1", "whole")],
            third=("third", "whole"),
            minimal=2,
            can_run=2,
            templates=[gpu],
            gang="gang",
        ),
        Scenario(
            "network-attached",
            [{"name": "a", "count": 2, "accelerator": {"model": H100, "count": 1}}],
            victims=[("low", "fabric")],
            preemptors=[("high", "fabric")],
            third=("third", "fabric"),
            minimal=1,
            can_run=1,
            templates=[("fabric", 1, NET_DRIVER, None)],
            extra=_network_device,
        ),
    ]


def _pods(kube: KubeClient, ns: str) -> dict[str, Obj]:
    return {p["metadata"]["name"]: p for p in kube.list("Pod", ns)}


def _devices(kube: KubeClient, ns: str) -> dict[str, set[str]]:
    """pod -> devices its claims hold (driver/pool/device)."""
    out: dict[str, set[str]] = {}
    for c in kube.list("ResourceClaim", ns):
        owner = next(
            (o["name"] for o in c["metadata"].get("ownerReferences") or [] if o["kind"] == "Pod"), ""
        )
        alloc = (c.get("status") or {}).get("allocation") or {}
        for r in (alloc.get("devices") or {}).get("results") or []:
            out.setdefault(owner, set()).add(f"{r['driver']}/{r['pool']}/{r['device']}")
    return out


def _wait(fn: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = fn()
        if got:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.2)


def run(
    cp: ControlPlane, kube: KubeClient, s: Scenario, which: str, wait_s: float, work: Path, verbose: bool
) -> dict[str, Any]:
    scheduler = SCHEDULERS[which]
    ns = f"pre-{s.name[:20]}-{which[:4]}-{uuid.uuid4().hex[:4]}"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    _wait(lambda: kube.try_get("ServiceAccount", "default", ns), 60, "default ServiceAccount")
    fleet = GpuFleet(kube, fleet_spec(f"p{uuid.uuid4().hex[:5]}", s.pools)).create()
    proc = (
        KdraProcess(cp, ["scheduler", "--kube-api-qps", "200", "--kube-api-burst", "400"], work / f"{ns}.log")
        if which == "kdra"
        else None
    )
    try:
        for name, count, cls, sel in s.templates:
            kube.create(gpu_template(name, ns, count, cls, sel))
        if s.extra is not None:
            s.extra(kube, ns, fleet)
        if s.gang:
            kube.create(
                {
                    "apiVersion": f"scheduling.k8s.io/{cp.release.workload_api_version}",
                    "kind": "PodGroup",
                    "metadata": {"name": s.gang, "namespace": ns},
                    # kube-scheduler 1.38 requires the group's priority to be its pods' priority.
                    "spec": {
                        "schedulingPolicy": {"gang": {"minCount": len(s.preemptors)}},
                        "priorityClassName": HIGH,
                    },
                }
            )

        def pod(name: str, template: str, prio: str, **kw: Any) -> Obj:
            p = gpu_pod(
                name,
                ns,
                template,
                fleet.prefix,
                priority_class=prio,
                scheduler=scheduler,
                labels=s.labels.get(name),
                **kw,
            )
            if s.gang and (name, template) in s.preemptors:
                p["spec"]["schedulingGroup"] = {"podGroupName": s.gang}
            return p

        for name, template in s.victims:
            kube.create(pod(name, template, LOW, annotations=TERMINATE_SLOWLY))
        victims = {v for v, _ in s.victims}
        _wait(
            lambda: (
                all(p["status"].get("phase") == "Running" for n, p in _pods(kube, ns).items() if n in victims)
                and len(_pods(kube, ns)) == len(victims)
            ),
            90,
            f"{s.name}/{which}: victims running",
        )
        if s.extra is _pdb:  # the budget protects only once its controller counted the running pod
            _wait(
                lambda: (
                    (kube.get("PodDisruptionBudget", "keep", ns).get("status") or {}).get("currentHealthy")
                    == 1
                ),
                60,
                "the budget's status",
            )
        held = _devices(kube, ns)
        freed = set().union(*(held.get(v, set()) for v in victims))
        t0 = time.time()
        for name, template in s.preemptors:
            kube.create(pod(name, template, HIGH))
        running: dict[str, float] = {}
        third_at = None
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            pods = _pods(kube, ns)
            going = [v for v in victims if v not in pods or pods[v]["metadata"].get("deletionTimestamp")]
            if third_at is None and (going or time.time() - t0 > 5):
                kube.create(pod(s.third[0], s.third[1], LOW))
                third_at = time.time()
            for name, _ in s.preemptors:
                if name not in running and (pods.get(name) or {}).get("status", {}).get("phase") == "Running":
                    running[name] = time.time() - t0
            # Done once every preemptor that can run runs and nothing changed for 5 s (a needless second
            # victim or a third pod taking the freed devices would show by then); with none that can
            # run, after 20 s.
            last = max([third_at or 0.0, *(t0 + t for t in running.values())])
            quiet = third_at is not None and time.time() - last > 5
            if quiet and len(running) >= s.can_run and (s.can_run or time.time() - t0 > 20):
                break
            time.sleep(0.2)
        pods = _pods(kube, ns)
        if verbose:
            for name, _ in s.preemptors:
                for c in ((pods.get(name) or {}).get("status") or {}).get("conditions") or []:
                    if c.get("type") == "PodScheduled" and c.get("status") != "True":
                        print(f"  {which} {name}: {c.get('reason')}: {c.get('message')}", file=sys.stderr)
        evicted = sorted(v for v in victims if v not in pods or pods[v]["metadata"].get("deletionTimestamp"))
        third_devices = _devices(kube, ns).get(s.third[0], set())
        t1 = time.time()
        time.sleep(1.0)  # the audit log is written asynchronously
        ua = "kube-scheduler/" if which == "kube-scheduler" else "kdra/"
        writes: dict[str, int] = {}
        for ev in audit_events(cp.audit_log):
            ref = ev.get("objectRef") or {}
            if ref.get("namespace") != ns or not str(ev.get("userAgent", "")).startswith(ua):
                continue
            if not t0 <= audit_time(ev) <= t1 + 1:
                continue
            what = "/".join(x for x in (ref.get("resource"), ref.get("subresource")) if x)
            if "dryRun=" in str(ev.get("requestURI", "")):
                what += " dry-run"  # checked (a budget), nothing written
            writes[what] = writes.get(what, 0) + 1
            if verbose:
                code = (ev.get("responseStatus") or {}).get("code")
                print(f"  {which} {ev.get('verb')} {what} {ref.get('name')} -> {code}", file=sys.stderr)
        return {
            "scenario": s.name,
            "scheduler": which,
            "victims": len(evicted),
            "minimal": len(evicted) == s.minimal and len(running) >= s.can_run,
            "running": running,
            "preemptors": [n for n, _ in s.preemptors],
            # A device a victim held, or (a MIG partition, a share) the room a preemptor that could have
            # run needed: a victim went and the third pod is bound while such a preemptor is not running.
            "third_took_freed": bool(third_devices & freed)
            or (
                bool(evicted)
                and bool((pods.get(s.third[0]) or {}).get("spec", {}).get("nodeName"))
                and len(running) < s.can_run
            ),
            "writes": writes,
            "log": proc.log() if proc is not None and not running and s.can_run else "",
        }
    finally:
        if proc is not None:
            proc.stop()
        for p in kube.list("Pod", ns):
            force_delete(kube, "Pod", p["metadata"]["name"], ns)
        fleet.delete()
        force_delete(kube, "ResourceSlice", f"{fleet.prefix}-fabric")
        force_delete(kube, "Namespace", ns)


def fmt(r: dict[str, Any]) -> str:
    times = ", ".join(f"{r['running'][n]:.1f}" if n in r["running"] else "-" for n in r["preemptors"])
    writes = sum(r["writes"].values())
    detail = ", ".join(f"{k} {v}" for k, v in sorted(r["writes"].items()))
    return (
        f"| {r['scenario']} | {r['scheduler']} | {r['victims']} "
        f"({'minimal' if r['minimal'] else 'not minimal'}) "
        f"| {times} | {'yes' if r['third_took_freed'] else 'no'} | {writes} ({detail}) |"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=tuple(SCHEDULERS), default=None)
    ap.add_argument("--scenario", action="append", default=None, help="run only these (repeatable)")
    ap.add_argument("--wait", type=float, default=60.0, help="seconds to wait for the preemptors to run")
    ap.add_argument("--verbose", action="store_true", help="list every counted write on stderr")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    chosen = [s for s in scenarios() if args.scenario is None or s.name in args.scenario]
    config = ControlPlaneConfig(kwok=True, audit_log=True, verbosity=1)
    rows = []
    with (
        tempfile.TemporaryDirectory(prefix="kdra-bench-preempt-") as work,
        running_control_plane(Path(work), config, log=sys.stderr) as cp,
    ):
        kube = KubeClient.from_kubeconfig(cp.kubeconfig, user_agent="bench-preemption")
        print(f"control plane {cp.version}", flush=True)
        priority_class(kube, LOW, 10)
        priority_class(kube, HIGH, 1000)
        for s in chosen:
            for which in SCHEDULERS:
                if args.only not in (None, which):
                    continue
                r = run(cp, kube, s, which, args.wait, Path(work), args.verbose)
                rows.append(r)
                print(fmt(r), flush=True)
                if r["log"]:
                    print(r["log"][-1500:], file=sys.stderr)
    print(
        "\n| scenario | scheduler | victims | preemptor to Running (s) | third pod took freed devices "
        "| API writes |"
    )
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(fmt(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
