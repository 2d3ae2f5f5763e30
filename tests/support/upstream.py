"""Differential harness: run one allocation case through the real kube-scheduler.

`run_upstream_case(control_plane, objects, node=..., feature_gates=...)` creates the case's Nodes,
DeviceClasses, ResourceSlices, DeviceTaintRules, ResourceClaims (those with `status.allocation` are
written as already allocated, so their devices are in use) and ResourceClaimTemplates on a running
`ControlPlane`, then a pod that uses every unallocated claim in order (or the case's own Pod), waits
for kube-scheduler's verdict and returns it as an `UpstreamResult`: the node and the devices it
allocated per claim, or the PodScheduled condition's reason and message. Everything it created is
removed before it returns, so cases run one after another on one control plane.

Nodes named by the case's slices or `node` but not given as objects are created (Ready, untainted).
Several pods are scheduled one after another, each after the previous one's verdict; claims that no pod
of the case uses go first, in a pod of their own.

Feature gates: kube-scheduler and kube-controller-manager are restarted with the case's gates when they
differ from the last case's (the API server keeps its own gates). Gates locked in the control plane's
release (`ControlPlane.release.locked_gates`) cannot be turned off; a case asking for that, and using the
feature, gets them listed in `UpstreamResult.ignored_gates`.
"""

from __future__ import annotations

import contextlib
import copy
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kdra.api.features import picks_deterministically
from kdra.api.types import Obj
from kdra.cluster.store import NotFoundError, StoreError
from kdra.kube.client import KubeClient
from support.controlplane import (
    ControlPlane,
    K8sRelease,
    create_node,
    ensure_default_service_account,
    force_delete,
    k8s_release,
)
from support.wait import scaled, wait_for

CLUSTER_SCOPED_ORDER = ("Node", "DeviceClass", "ResourceSlice", "DeviceTaintRule")
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"  # never pulled: there is no kubelet
ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"
POD_NAME = "upstream-case"


# Allocator features beyond what upstream's "stable" allocator supports (it supports admin access,
# prioritized list, partitionable devices, device taints), split by the implementation that supports
# them: "incubating" (1.36 and 1.37), else "experimental". 1.38's stable allocator supports the
# incubating ones too, and its incubating allocator all the experimental ones.
_INCUBATING_GATES = ("DRAConsumableCapacity", "DRAFractionalCapacityRange")
_EXPERIMENTAL_GATES = (
    "DRAListTypeAttributes",
    "DRAOptionalNodeOperations",
    "DRADerivedAttributes",
    "DRADeviceCompatibilityGroups",
)


def scheduler_allocator(gates: Mapping[str, bool], release: K8sRelease | None = None) -> str:
    """Which implementation of k8s.io/dynamic-resource-allocation/structured kube-scheduler picks for
    these (effective) gates on `release` (default: the selected one): the first of stable, incubating,
    experimental that supports every enabled feature (structured.NewAllocator; features from the
    DynamicResources plugin).

    This matters for comparisons: "stable" walks ResourceSlices in the scheduler's informer order,
    which is not deterministic, so with it only fit/no-fit is comparable, not which devices were
    picked; "incubating" and "experimental" (and, from 1.38, "stable" too) sort pools and slices by
    name."""
    rel = release or k8s_release()
    defaults = rel.allocator_gate_defaults

    def on(g: str) -> bool:
        return bool(gates.get(g, defaults.get(g, False)))

    if rel.minor not in ("1.36", "1.37"):
        return "incubating" if any(on(g) for g in _EXPERIMENTAL_GATES) else "stable"
    if any(on(g) for g in _EXPERIMENTAL_GATES):
        return "experimental"
    binding_and_status = on("DRADeviceBindingConditions") and on("DRAResourceClaimDeviceStatus")
    if binding_and_status or any(on(g) for g in _INCUBATING_GATES):
        return "incubating"
    return "stable"


@dataclass
class UpstreamResult:
    """kube-scheduler's verdict on one pod."""

    scheduled: bool  # every claim allocated (the pod is bound, or waits in PreBind for binding conditions)
    node: str | None = None
    bound: bool = False  # spec.nodeName set
    # Claim -> status.allocation; keys as in the scenario corpus: the claim's name for a resourceClaimName
    # reference, pod/<pod>/<podClaimName> for a claim made from a template.
    allocations: dict[str, Obj] = field(default_factory=dict)
    # Same keys -> the claim object after scheduling.
    claims: dict[str, Obj] = field(default_factory=dict)
    invalid: str | None = None  # the API server rejected an object of the case (422): its message
    reason: str | None = None  # PodScheduled reason when not scheduled (Unschedulable, SchedulerError)
    message: str | None = None  # PodScheduled message when not scheduled
    events: list[str] = field(default_factory=list)  # the pod's event messages
    ignored_gates: dict[str, bool] = field(default_factory=dict)
    pods: dict[str, UpstreamResult] = field(default_factory=dict)  # per pod, in scheduling order
    allocator: str = ""  # upstream implementation kube-scheduler used: see scheduler_allocator()
    release: str = ""  # the control plane's Kubernetes minor
    seconds: float = 0.0

    @property
    def deterministic(self) -> bool:
        """Whether upstream's choice of devices is deterministic for this run (not 1.36's or 1.37's
        stable allocator)."""
        return picks_deterministically(self.release, self.allocator)

    def devices(self) -> dict[str, list[tuple[str, str, str, str]]]:
        """claim -> [(request, driver, pool, device)] in allocation order."""
        out: dict[str, list[tuple[str, str, str, str]]] = {}
        for name, alloc in self.allocations.items():
            results = (alloc.get("devices") or {}).get("results") or []
            out[name] = [(r["request"], r["driver"], r["pool"], r["device"]) for r in results]
        return out


def _has_key(obj: Any, key: str, value: Any = None) -> bool:
    """Whether `key` occurs anywhere in obj (with `value`, when given; any non-empty value otherwise)."""
    if isinstance(obj, dict):
        if key in obj and (obj[key] == value if value is not None else bool(obj[key])):
            return True
        return any(_has_key(v, key, value) for v in obj.values())
    if isinstance(obj, list):
        return any(_has_key(v, key, value) for v in obj)
    return False


# Where a case uses the feature of a gate: a locked gate the case asks off changes its verdict only then.
_GATE_USES: dict[str, Any] = {
    "DRAAdminAccess": lambda objs: _has_key(objs, "adminAccess", True),
    "DRAPrioritizedList": lambda objs: _has_key(objs, "firstAvailable"),
    "DRAExtendedResource": lambda objs: (
        _has_key(objs, "extendedResourceName") or any(o.get("kind") == "Pod" for o in objs)
    ),
    # Off, it also switches binding conditions off (their dependency) and with them the allocator's
    # DeviceBindingAndStatus feature.
    "DRAResourceClaimDeviceStatus": lambda objs: _has_key(objs, "bindingConditions"),
}


def _uses_gate(gate: str, objects: list[Obj]) -> bool:
    uses = _GATE_USES.get(gate)
    return True if uses is None else bool(uses(objects))


def _pod_for(claim_names: list[str], node: str | None) -> Obj:
    spec: Obj = {
        "terminationGracePeriodSeconds": 0,
        "resourceClaims": [{"name": f"claim-{i}", "resourceClaimName": n} for i, n in enumerate(claim_names)],
        "containers": [
            {
                "name": "main",
                "image": PAUSE_IMAGE,
                "resources": {"claims": [{"name": f"claim-{i}"} for i in range(len(claim_names))]},
            }
        ],
    }
    if node:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                    ]
                }
            }
        }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": POD_NAME}, "spec": spec}


# The case's Nodes carry this label and a NoSchedule taint with it, and the case's pods select and
# tolerate it: kube-scheduler places them only there, and no other scheduler's pods (other tests running
# beside the case on the same control plane) land there. No other label or taint of the case changes.
CASE_KEY = "kdra.test/upstream-case"


def _confine(pod: Obj, ns: str) -> None:
    spec = pod.setdefault("spec", {})
    spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), CASE_KEY: ns}
    toleration = {"key": CASE_KEY, "operator": "Equal", "value": ns, "effect": "NoSchedule"}
    spec["tolerations"] = [*(spec.get("tolerations") or []), toleration]


# DeviceClasses are cluster-scoped and cases use well-known names (gpu.nvidia.com) that tests in other lanes
# create too: each case's classes, and every reference to a class in its claims, templates and pods'
# implicit extended resources, get the case namespace as a suffix. Allocation results carry no class name,
# so verdicts and devices are unchanged.
IMPLICIT_EXTENDED_PREFIX = "deviceclass.resource.kubernetes.io/"


def case_class_name(name: str, ns: str) -> str:
    return f"{name}.{ns}"


def _rename_classes(obj: Obj, ns: str) -> Obj:
    o = copy.deepcopy(obj)
    kind = o.get("kind")
    if kind == "DeviceClass":
        md = o.setdefault("metadata", {})
        md["name"] = case_class_name(md.get("name", ""), ns)
        return o
    spec = o.get("spec") or {}
    if kind == "ResourceClaimTemplate":
        spec = spec.get("spec") or {}
    if kind in ("ResourceClaim", "ResourceClaimTemplate"):
        for req in (spec.get("devices") or {}).get("requests") or []:
            for sub in [req, req.get("exactly") or {}, *(req.get("firstAvailable") or [])]:
                if sub.get("deviceClassName"):
                    sub["deviceClassName"] = case_class_name(sub["deviceClassName"], ns)
    if kind == "DeviceTaintRule":
        sel = spec.get("deviceSelector") or {}
        if sel.get("deviceClassName"):  # v1beta2's selector field
            sel["deviceClassName"] = case_class_name(sel["deviceClassName"], ns)
    if kind == "Pod":
        for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
            res = c.get("resources") or {}
            for part in ("requests", "limits"):
                amounts = res.get(part) or {}
                for name in [n for n in amounts if n.startswith(IMPLICIT_EXTENDED_PREFIX)]:
                    cls = name[len(IMPLICIT_EXTENDED_PREFIX) :]
                    amounts[IMPLICIT_EXTENDED_PREFIX + case_class_name(cls, ns)] = amounts.pop(name)
    return o


def _strip(obj: Obj, namespace: str | None) -> Obj:
    o = copy.deepcopy(obj)
    md = o.setdefault("metadata", {})
    for k in ("resourceVersion", "uid", "creationTimestamp", "generation", "managedFields"):
        md.pop(k, None)
    if namespace is not None:
        md["namespace"] = namespace
    else:
        md.pop("namespace", None)
    return o


def _pod_scheduled_condition(pod: Obj) -> Obj | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled":
            cond: Obj = c
            return cond
    return None


def run_upstream_case(
    cp: ControlPlane,
    objects: Iterable[Obj],
    *,
    node: str | None = None,
    feature_gates: Mapping[str, bool] | None = None,
    timeout: float = 60.0,
    settle: float = 3.0,
    sync_delay: float = 1.0,
) -> UpstreamResult:
    """Run one case through kube-scheduler (see the module doc). `node` pins the pod to that node,
    like the allocator's "allocate on this node". `settle`: how long an unschedulable verdict must
    hold (the scheduler may still be catching up with objects created just before the pod).
    `sync_delay`: pause between creating the objects and the pod, so that kube-scheduler's informers
    have seen every slice and claim (informers of different kinds are not ordered with each other; a
    pod created at once was seen scheduled against a partial set of pools)."""
    client = cp.client()
    gates = dict(feature_gates or {})
    objects = list(objects)
    # A locked gate asked off only matters where the case uses its feature.
    ignored: dict[str, bool] = {
        k: v for k, v in gates.items() if k in cp.release.locked_gates and not v and _uses_gate(k, objects)
    }
    cp.set_feature_gates(gates)

    ns = f"case-{uuid.uuid4().hex[:8]}"
    client.create(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": ns, "labels": {ADMIN_ACCESS_LABEL: "true"}},
        }
    )
    created: list[tuple[str, str, str | None]] = []  # (kind, name, namespace)
    t0 = time.monotonic()
    try:
        try:
            result = _run(client, objects, ns, node, created, timeout, settle, sync_delay)
        except StoreError as e:
            if e.code != 422:
                raise
            result = UpstreamResult(scheduled=False, invalid=str(e.status.get("message", e)))
        result.ignored_gates = ignored
        result.allocator = scheduler_allocator(cp.scheduler_feature_gates, cp.release)
        result.release = cp.release.minor
        result.seconds = time.monotonic() - t0
        return result
    finally:
        cleanup(client, ns, created)
        wait_binding_cycles_done(cp)  # one metrics read when nothing waits in PreBind


def _run(
    client: KubeClient,
    objects: list[Obj],
    ns: str,
    node: str | None,
    created: list[tuple[str, str, str | None]],
    timeout: float,
    settle: float,
    sync_delay: float,
) -> UpstreamResult:
    by_kind: dict[str, list[Obj]] = {}
    for o in objects:
        by_kind.setdefault(o["kind"], []).append(_rename_classes(o, ns))
    unknown = set(by_kind) - {*CLUSTER_SCOPED_ORDER, "ResourceClaim", "ResourceClaimTemplate", "Pod"}
    if unknown:
        raise ValueError(f"run_upstream_case cannot create kinds {sorted(unknown)}")

    # Nodes: the case's own, plus one for every slice's or device's nodeName and for `node` (as kdra derives).
    nodes: dict[str, Obj] = {n["metadata"]["name"]: n for n in by_kind.get("Node", [])}
    derived = [node]
    for sl in by_kind.get("ResourceSlice", []):
        spec = sl.get("spec") or {}
        derived.append(spec.get("nodeName"))
        derived.extend(d.get("nodeName") for d in spec.get("devices") or [])  # perDeviceNodeSelection
    for name in derived:
        if name and name not in nodes:
            nodes[name] = {"metadata": {"name": name}}
    for name in sorted(nodes):
        n = nodes[name]
        capacity = (n.get("status") or {}).get("capacity")
        labels = {**((n.get("metadata") or {}).get("labels") or {}), CASE_KEY: ns}
        create_node(client, name, labels=labels, capacity=capacity)
        client.patch(
            "Node", name, {"spec": {"taints": [{"key": CASE_KEY, "value": ns, "effect": "NoSchedule"}]}}
        )
        created.append(("Node", name, None))
    for kind in ("DeviceClass", "ResourceSlice", "DeviceTaintRule"):
        for o in by_kind.get(kind, []):
            body = _strip(o, None)
            body.pop("status", None)
            client.create(body)
            created.append((kind, body["metadata"]["name"], None))
    for o in by_kind.get("ResourceClaimTemplate", []):
        client.create(_strip(o, ns))
    pending: list[str] = []
    for o in by_kind.get("ResourceClaim", []):
        body = _strip(o, ns)
        status = body.pop("status", None)
        made = client.create(body)
        if status and status.get("allocation"):
            made["status"] = status
            client.update(made, "status")
        else:
            pending.append(body["metadata"]["name"])

    # Pods, in the case's order. Claims no pod of the case uses ("loose" claims) go first, in one pod of
    # their own pinned to `node`: like kdra allocate, which allocates them before the pods.
    pods = [_strip(p, ns) for p in by_kind.get("Pod", [])]
    used = {
        ref["resourceClaimName"]
        for p in pods
        for ref in p.get("spec", {}).get("resourceClaims") or []
        if ref.get("resourceClaimName")
    }
    loose = [n for n in pending if n not in used]
    if loose or not pods:
        pods.insert(0, _pod_for(loose, node))
    # Pods are refused until the namespace's default ServiceAccount exists.
    ensure_default_service_account(client, ns)
    if sync_delay > 0:
        time.sleep(scaled(sync_delay))

    total = UpstreamResult(scheduled=True)
    for pod in pods:
        pod["metadata"]["namespace"] = ns
        pod.pop("status", None)
        _confine(pod, ns)
        one = _schedule_pod(client, pod, ns, timeout, settle)
        total.pods[pod["metadata"]["name"]] = one
        total.allocations.update(one.allocations)
        total.claims.update(one.claims)
        total.events.extend(one.events)
        if one.node and not total.node:
            total.node = one.node
        if not one.scheduled:
            total.scheduled = False
            total.reason, total.message = one.reason, one.message
            break  # like kdra allocate: later pods are not tried once one does not fit
    total.bound = total.scheduled and all(p.bound for p in total.pods.values())
    return total


def _schedule_pod(client: KubeClient, pod: Obj, ns: str, timeout: float, settle: float) -> UpstreamResult:
    pod_name = pod["metadata"]["name"]
    client.create(pod)

    def pod_claims(p: Obj) -> dict[str, str | None]:
        """Result key -> ResourceClaim name (None: not made yet). Keys as in the scenario corpus: the
        claim's name for resourceClaimName references, pod/<pod>/<podClaimName> for templates."""
        generated = {
            st["name"]: st.get("resourceClaimName")
            for st in (p.get("status") or {}).get("resourceClaimStatuses") or []
        }
        out: dict[str, str | None] = {}
        for ref in p["spec"].get("resourceClaims") or []:
            if ref.get("resourceClaimName"):
                out[ref["resourceClaimName"]] = ref["resourceClaimName"]
            else:
                out[f"pod/{pod_name}/{ref['name']}"] = generated.get(ref["name"])
        return out

    def all_allocated(p: Obj) -> bool:
        # Devices with binding conditions keep the pod in PreBind (up to 10 minutes) after allocation:
        # the allocation is the verdict, the binding is not waited for.
        names = pod_claims(p)
        if not names or any(n is None for n in names.values()):
            return False
        for n in names.values():
            assert n is not None
            c = client.get("ResourceClaim", n, ns)
            if not (c.get("status") or {}).get("allocation"):
                return False
        return True

    gone: dict[str, bool] = {}

    def get_pod() -> Obj | None:
        try:
            p: Obj = client.get("Pod", pod_name, ns)
            return p
        except NotFoundError:  # e.g. evicted by kube-controller-manager's device-taint eviction
            gone["deleted"] = True
            return None

    def verdict() -> Obj | None:
        p = get_pod()
        if p is None:
            return {"spec": {}, "status": {}}
        if p["spec"].get("nodeName"):
            return p
        cond = _pod_scheduled_condition(p)
        if cond and cond.get("status") == "False" and cond.get("reason"):
            return p
        if all_allocated(p):
            return p
        return None

    p = wait_for(verdict, timeout, f"kube-scheduler's verdict on pod {ns}/{pod_name}")
    allocated = bool(p["spec"].get("nodeName")) or (not gone and all_allocated(p))
    if not allocated and not gone and settle > 0:
        deadline = time.monotonic() + scaled(settle)
        while time.monotonic() < deadline:
            time.sleep(0.2)
            q = get_pod()
            if q is None:
                break
            p = q
            if p["spec"].get("nodeName") or all_allocated(p):
                allocated = True
                break

    result = UpstreamResult(scheduled=allocated, node=p["spec"].get("nodeName"))
    result.bound = bool(result.node)
    events = client.list("Event", ns, fieldSelector=f"involvedObject.name={pod_name}")
    result.events = [e.get("message", "") for e in events]
    if gone:
        result.scheduled = False
        result.reason = "Deleted"
        result.message = "the pod was deleted before kube-scheduler's verdict: " + "; ".join(result.events)
        return result
    if not result.scheduled:
        cond = _pod_scheduled_condition(p) or {}
        result.reason = cond.get("reason")
        result.message = cond.get("message")

    for key, claim_name in pod_claims(p).items():
        if not claim_name:
            continue
        try:
            claim = client.get("ResourceClaim", claim_name, ns)
        except NotFoundError:
            continue
        result.claims[key] = claim
        alloc = (claim.get("status") or {}).get("allocation")
        if alloc and result.scheduled:
            result.allocations[key] = alloc
            if not result.node:
                for term in (alloc.get("nodeSelector") or {}).get("nodeSelectorTerms") or []:
                    for f in term.get("matchFields") or []:
                        if f.get("key") == "metadata.name" and f.get("values"):
                            result.node = f["values"][0]
    return result


BINDING_GOROUTINES = 'scheduler_goroutines{operation="binding"}'


def wait_binding_cycles_done(cp: ControlPlane, timeout: float = 30.0) -> None:
    """Wait until kube-scheduler has no binding cycle running. A pod that waited in PreBind for binding
    conditions keeps its claim's in-flight allocation in kube-scheduler until the wait notices that the
    pod was deleted, at its next 5-second poll (seen with 1.37: the next case, reusing the device names,
    was then unschedulable)."""

    def idle() -> bool:
        return cp.metrics("kube-scheduler").get(BINDING_GOROUTINES, 0.0) == 0.0

    with contextlib.suppress(OSError):
        wait_for(idle, timeout, "kube-scheduler's binding cycles to finish", interval=0.2)


def cleanup(
    client: KubeClient, ns: str, created: list[tuple[str, str, str | None]], timeout: float = 60
) -> None:
    """Remove a case's objects: force-delete its pods, strip claim finalizers, delete the namespace
    (not waited for: each case has its own) and the cluster-scoped objects (waited for, because the
    next case may reuse their names)."""
    with contextlib.suppress(StoreError):
        for p in client.list("Pod", ns):
            force_delete(client, "Pod", p["metadata"]["name"], ns)
    with contextlib.suppress(StoreError):
        for c in client.list("ResourceClaim", ns):
            name = c["metadata"]["name"]
            if c["metadata"].get("finalizers"):
                with contextlib.suppress(StoreError):
                    client.patch("ResourceClaim", name, {"metadata": {"finalizers": None}}, ns)
            client.delete("ResourceClaim", name, ns)
    with contextlib.suppress(StoreError):
        client.delete("Namespace", ns)
    for kind, name, namespace in reversed(created):
        with contextlib.suppress(StoreError):
            client.delete(kind, name, namespace, grace_period=0 if kind == "Node" else None)

    def gone() -> bool:
        for kind, name, namespace in created:
            try:
                client.get(kind, name, namespace)
                return False
            except NotFoundError:
                continue
        try:
            return not client.list("ResourceClaim", ns) and not client.list("Pod", ns)
        except NotFoundError:
            return True

    wait_for(gone, timeout, f"the objects of case namespace {ns} to be deleted")
