"""Helpers for the scheduling-session tests on the real control plane (test_kube_session*.py): a GPU fleet
rendered by kdra.fleets in the NVIDIA DRA driver's shape, whose nodes KWOK runs; pods of gangs and queues;
and the questions the tests ask of the API (who is bound where, holding which devices)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kdra.api.pods import pod_claim_names
from kdra.cluster.store import AlreadyExistsError
from kdra.fleets import parse_fleet, render
from kdra.kube.client import KubeClient, Obj
from support.controlplane import KWOK_NODE_ANNOTATION, ControlPlane, force_delete
from support.invariants import Violation
from support.wait import wait_for

from .kubeutil import KdraProcess

FLEET_LABEL = "kdra.test/fleet"
GPU_CLASS = "gpu.nvidia.com"


def fleet_spec(prefix: str, pools: Iterable[Mapping[str, Any]]) -> Obj:
    """A Fleet whose pools are named <prefix>-<pool> (so node names, racks and blocks are the test's own)."""
    out = []
    for p in pools:
        q = dict(p)
        q["name"] = f"{prefix}-{p['name']}"
        q.setdefault("namePattern", f"{q['name']}-{{index}}")
        q.setdefault("cpu", "64")
        q.setdefault("memory", "512Gi")
        q.setdefault("labels", {})
        q["labels"] = dict(q["labels"], **{FLEET_LABEL: prefix})
        out.append(q)
    return {
        "apiVersion": "kdra.dev/v1alpha1",
        "kind": "Fleet",
        "metadata": {"name": prefix},
        "spec": {"pools": out},
    }


def render_fleet(spec: Obj) -> list[Obj]:
    """DeviceClasses, Nodes (annotated for KWOK) and ResourceSlices of a fleet spec."""
    objs = render(parse_fleet(spec, "test"), dra=True)
    for o in objs:
        if o["kind"] == "Node":
            o["metadata"].setdefault("annotations", {})[KWOK_NODE_ANNOTATION] = "fake"
    return objs


@dataclass
class GpuFleet:
    kube: KubeClient
    spec: Obj
    objects: list[Obj] = field(default_factory=list)

    @property
    def prefix(self) -> str:
        return str(self.spec["metadata"]["name"])

    @property
    def nodes(self) -> list[str]:
        return [o["metadata"]["name"] for o in self.objects if o["kind"] == "Node"]

    def create(self, objs: list[Obj] | None = None) -> GpuFleet:
        objs = render_fleet(self.spec) if objs is None else objs
        for o in objs:
            if o["kind"] == "DeviceClass":
                with contextlib.suppress(AlreadyExistsError):
                    self.kube.create(o)
        nodes = [o for o in objs if o["kind"] == "Node"]

        def node(o: Obj) -> None:
            # With its status (capacity, Ready) in the create: KWOK initialises a node it first sees
            # without them with its own defaults (1k CPUs).
            self.kube.create(o)

        with ThreadPoolExecutor(4) as pool:
            list(pool.map(node, nodes))
            list(pool.map(self.kube.create, [o for o in objs if o["kind"] == "ResourceSlice"]))
        self.objects.extend(o for o in objs if o["kind"] != "DeviceClass")
        return self

    def add_pool(self, pool: Mapping[str, Any]) -> list[str]:
        """Render one more pool of this fleet and create it; returns its node names."""
        spec = fleet_spec(self.prefix, [pool])
        objs = [o for o in render_fleet(spec) if o["kind"] != "DeviceClass"]
        self.create(objs)
        return [o["metadata"]["name"] for o in objs if o["kind"] == "Node"]

    def delete(self) -> None:
        for o in self.objects:
            if o["kind"] == "ResourceSlice":
                self.kube.delete("ResourceSlice", o["metadata"]["name"], missing_ok=True)
        for o in self.objects:
            if o["kind"] == "Node":
                self.kube.delete("Node", o["metadata"]["name"], missing_ok=True)


@contextlib.contextmanager
def gpu_fleet(kube: KubeClient, pools: Iterable[Mapping[str, Any]]) -> Iterator[GpuFleet]:
    f = GpuFleet(kube, fleet_spec(f"s{uuid.uuid4().hex[:5]}", pools)).create()
    try:
        yield f
    finally:
        f.delete()


def gpu_template(
    name: str, namespace: str, count: int = 1, device_class: str = GPU_CLASS, selector: str | None = None
) -> Obj:
    req: Obj = {"deviceClassName": device_class, "count": count}
    if selector:
        req["selectors"] = [{"cel": {"expression": selector}}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": req}]}}},
    }


def gpu_pod(
    name: str,
    namespace: str,
    template: str,
    fleet: str,
    *,
    group: str | None = None,
    queue: str | None = None,
    priority_class: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    scheduler: str = "kdra",
    grace: int = 5,
) -> Obj:
    """A pod of a claim template, kept on the test's fleet by a nodeSelector; `group` names a kdra
    PodGroup, `queue` a Queue."""
    ann = dict(annotations or {})
    if group:
        ann["kdra.dev/pod-group"] = group
    lab = dict(labels or {})
    if queue:
        lab["kdra.dev/queue"] = queue
    spec: Obj = {
        "schedulerName": scheduler,
        "terminationGracePeriodSeconds": grace,
        "nodeSelector": {FLEET_LABEL: fleet},
        "containers": [
            {
                "name": "c",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "claims": [{"name": "gpu"}]},
            }
        ],
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
    }
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": lab, "annotations": ann},
        "spec": spec,
    }


def pod_group(name: str, namespace: str, min_member: int, **spec: Any) -> Obj:
    return {
        "apiVersion": "kdra.dev/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minMember": min_member, **spec},
    }


def queue(name: str, **spec: Any) -> Obj:
    return {"apiVersion": "kdra.dev/v1alpha1", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def create_all(kube: KubeClient, objs: Iterable[Obj], workers: int = 4) -> None:
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(kube.create, objs))


def pods(kube: KubeClient, namespace: str) -> dict[str, Obj]:
    return {p["metadata"]["name"]: p for p in kube.list("Pod", namespace)}


def bound(kube: KubeClient, namespace: str, prefix: str = "") -> dict[str, str]:
    """pod -> node for bound pods that are not terminating or done."""
    out = {}
    for name, p in pods(kube, namespace).items():
        node = (p.get("spec") or {}).get("nodeName")
        live = not p["metadata"].get("deletionTimestamp") and (p.get("status") or {}).get("phase") not in (
            "Succeeded",
            "Failed",
        )
        if node and live and name.startswith(prefix):
            out[name] = node
    return out


def devices_of(kube: KubeClient, namespace: str) -> dict[str, list[str]]:
    """pod -> the devices (pool/device) its claims hold, sorted."""
    claims = {c["metadata"]["name"]: c for c in kube.list("ResourceClaim", namespace)}
    out = {}
    for name, p in pods(kube, namespace).items():
        devs = []
        for cname in pod_claim_names(p):
            alloc = ((claims.get(cname) or {}).get("status") or {}).get("allocation") or {}
            devs.extend(
                f"{r['pool']}/{r['device']}" for r in (alloc.get("devices") or {}).get("results") or []
            )
        out[name] = sorted(devs)
    return out


def allocated_claims(kube: KubeClient, namespace: str) -> list[str]:
    return sorted(
        c["metadata"]["name"]
        for c in kube.list("ResourceClaim", namespace)
        if (c.get("status") or {}).get("allocation")
    )


def condition(obj: Mapping[str, Any], ctype: str) -> Mapping[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == ctype), {})


def scheduled_message(kube: KubeClient, namespace: str, pod: str) -> str:
    p = kube.get("Pod", pod, namespace)
    c = condition(p, "PodScheduled")
    return str(c.get("message") or "") if c.get("status") == "False" else ""


def events_for(kube: KubeClient, namespace: str, name: str, kind: str | None = None) -> list[Obj]:
    return [
        e
        for e in kube.list("Event", namespace)
        if (e.get("involvedObject") or {}).get("name") == name
        and (kind is None or (e.get("involvedObject") or {}).get("kind") == kind)
    ]


def wait(fn: Any, timeout: float, what: str, interval: float = 0.3, log: Any = None) -> Any:
    return wait_for(fn, timeout, what, interval, log=log)


def settled(kube: KubeClient, namespace: str, timeout: float = 60.0, **kw: Any) -> list[Violation]:
    """The independent checker (support.invariants), after the cluster has settled."""
    from support.invariants import wait_consistent

    return wait_consistent(kube, namespace, timeout=timeout, interval=0.5, **kw)


def session_scheduler(cp: ControlPlane, log: Path, *extra: str) -> KdraProcess:
    return KdraProcess(
        cp,
        ["scheduler", "--kube-api-qps", "200", "--kube-api-burst", "400", "--resync", "0", "-v", *extra],
        log,
    )


def cleanup(kube: KubeClient, namespace: str) -> None:
    for p in kube.list("Pod", namespace):
        force_delete(kube, "Pod", p["metadata"]["name"], namespace)


def priority_class(kube: KubeClient, name: str, value: int) -> str:
    """A PriorityClass (cluster-wide, shared by the tests that use the same name)."""
    with contextlib.suppress(AlreadyExistsError):
        kube.create(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
                "preemptionPolicy": "PreemptLowerPriority",
            }
        )
    return name


def node_devices(kube: KubeClient, namespace: str) -> dict[str, int]:
    """node -> devices allocated to the namespace's claims there."""
    out: dict[str, int] = {}
    for c in kube.list("ResourceClaim", namespace):
        alloc = (c.get("status") or {}).get("allocation") or {}
        for r in (alloc.get("devices") or {}).get("results") or []:
            node = r["pool"]
            out[node] = out.get(node, 0) + 1
    return out


TERMINATE_SLOWLY = {"pod-delete.stage.kwok.x-k8s.io/delay": "4s"}  # KWOK finishes the pod 4 s after delete


@dataclass
class GuardedVictim:
    """What `victim_under_budget` set up: the fleet's one node, the running scheduler and the priority class
    a preemptor of the victim takes."""

    fleet: GpuFleet
    proc: KdraProcess
    high: str


@contextlib.contextmanager
def victim_under_budget(
    cp: ControlPlane, kube: KubeClient, namespace: str, log: Path, min_available: int
) -> Iterator[GuardedVictim]:
    """One node with one H100 GPU (claim template `one`) holding pod `serving` (labels app=serving, a low
    priority) under a PodDisruptionBudget `serving` of minAvailable `min_available`, and a kdra scheduler
    running; entered once the disruption controller has counted the pod (currentHealthy 1, disruptionsAllowed
    1 - min_available), so what the budget allows is settled before a preemptor comes."""
    low = priority_class(kube, "kdra-e2e-low", 10)
    high = priority_class(kube, "kdra-e2e-high", 1000)
    pool = {"name": "a", "count": 1, "accelerator": {"model": "H100-SXM-80GB", "count": 1}}
    with gpu_fleet(kube, [pool]) as fleet:
        kube.create(gpu_template("one", namespace, 1))
        kube.create(
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": "serving", "namespace": namespace},
                "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": "serving"}}},
            }
        )
        proc = session_scheduler(cp, log)
        try:
            kube.create(
                gpu_pod(
                    "serving", namespace, "one", fleet.prefix, priority_class=low, labels={"app": "serving"}
                )
            )
            victim = {"serving": fleet.nodes[0]}
            wait(lambda: bound(kube, namespace) == victim, 60, "the victim", log=proc.log)

            def counted() -> bool:
                status = kube.get("PodDisruptionBudget", "serving", namespace).get("status") or {}
                allowed = status.get("disruptionsAllowed")
                return bool(status.get("currentHealthy") == 1 and allowed == 1 - min_available)

            wait(counted, 60, "the budget to count the victim")
            yield GuardedVictim(fleet, proc, high)
        finally:
            proc.stop()
            cleanup(kube, namespace)
