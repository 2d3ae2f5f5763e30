"""Compact, cached views of Pods and Nodes for the scheduling hot path.

Quantities are parsed once per object version into ints: cpu in millicores, everything else in its
integer Value() (memory in bytes, extended resources as counts), following
k8s.io/component-helpers/resource PodRequests and the NodeResourcesFit plugin.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kdra.api.quantity import parse_quantity_any
from kdra.cluster.selectors import Requirement, node_selector_requirement
from kdra.errors import InputError

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
EPHEMERAL = "ephemeral-storage"
# Upstream non-zero defaults for scoring containers without requests (pkg/scheduler/util/pod_resources.go).
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024

# Resource names that are not extended resources (v1helper.IsExtendedResourceName is false for them).
_NATIVE_PREFIXES = ("requests.", "limits.")


def is_extended_resource(name: str) -> bool:
    """v1helper.IsExtendedResourceName: fully-qualified, not kubernetes.io/, not hugepages-/attachable-."""
    if "/" not in name or name.startswith(_NATIVE_PREFIXES):
        return False
    domain = name.split("/", 1)[0]
    return not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


def quantity_int(name: str, raw: object, where: str) -> int:
    """A resource quantity as the int NodeResourcesFit compares: millicores for cpu, Value() otherwise."""
    try:
        q = parse_quantity_any(raw)
    except (ValueError, TypeError) as exc:
        raise InputError(f"{where}: Invalid value: {raw!r}: {exc}") from exc
    return q.milli_value() if name == CPU else q.value()


def _container_requests(c: Mapping[str, Any], where: str) -> dict[str, int]:
    res = c.get("resources") or {}
    limits = res.get("limits") or {}
    requests = dict(res.get("requests") or {})
    # API defaulting: a resource with a limit and no request requests its limit.
    for k, v in limits.items():
        requests.setdefault(k, v)
    return {k: quantity_int(k, v, f"{where}.resources.requests[{k}]") for k, v in requests.items()}


def pod_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """Effective pod requests: max(sum of containers, each init container) + overhead."""
    meta = pod.get("metadata") or {}
    where = f"Pod {meta.get('namespace') or 'default'}/{meta.get('name', '')}: spec"
    spec = pod.get("spec") or {}
    total: dict[str, int] = {}
    for i, c in enumerate(spec.get("containers") or []):
        for k, v in _container_requests(c, f"{where}.containers[{i}]").items():
            total[k] = total.get(k, 0) + v
    for i, c in enumerate(spec.get("initContainers") or []):
        for k, v in _container_requests(c, f"{where}.initContainers[{i}]").items():
            if v > total.get(k, 0):
                total[k] = v
    for k, v in (spec.get("overhead") or {}).items():
        total[k] = total.get(k, 0) + quantity_int(k, v, f"{where}.overhead[{k}]")
    return total


def container_extended_requests(pod: Mapping[str, Any]) -> list[tuple[int, str, dict[str, int]]]:
    """(index over initContainers+containers, container name, extended resource -> count) per container."""
    spec = pod.get("spec") or {}
    out = []
    for idx, c in enumerate((spec.get("initContainers") or []) + (spec.get("containers") or [])):
        req = _container_requests(
            c, f"Pod {(pod.get('metadata') or {}).get('name', '')}: container {c.get('name')}"
        )
        ext = {k: v for k, v in req.items() if is_extended_resource(k) and v > 0}
        out.append((idx, str(c.get("name", "")), ext))
    return out


class PodInfo:
    """What scheduling needs from a Pod, computed once per pod version."""

    __slots__ = (
        "affinity_required",
        "attempts",
        "claim_refs",
        "continuing",
        "ext_requests",
        "initial_attempt",
        "key",
        "last_attempt",
        "name",
        "namespace",
        "node_selector",
        "nonzero_cpu",
        "nonzero_mem",
        "pod",
        "preferred_terms",
        "priority",
        "queued_at",
        "requests",
        "seq",
        "tolerations",
        "uid",
        "unschedulable_plugins",
    )

    def __init__(self, pod: Mapping[str, Any]) -> None:
        self.pod = pod
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        self.name: str = meta.get("name", "")
        self.namespace: str = meta.get("namespace") or "default"
        self.key = f"{self.namespace}/{self.name}"
        self.uid: str = meta.get("uid", "")
        self.priority: int = int(spec.get("priority") or 0)
        self.requests = pod_requests(pod)
        self.ext_requests = {k: v for k, v in self.requests.items() if is_extended_resource(k)}
        self.nonzero_cpu = self.requests.get(CPU) or DEFAULT_MILLI_CPU_REQUEST
        self.nonzero_mem = self.requests.get(MEMORY) or DEFAULT_MEMORY_REQUEST
        self.node_selector: dict[str, str] = dict(spec.get("nodeSelector") or {})
        self.tolerations: list[Mapping[str, Any]] = list(spec.get("tolerations") or [])
        aff = (spec.get("affinity") or {}).get("nodeAffinity") or {}
        req = aff.get("requiredDuringSchedulingIgnoredDuringExecution")
        self.affinity_required: list[tuple[tuple[Requirement, ...], tuple[Requirement, ...]]] | None = None
        if req is not None:
            self.affinity_required = [
                (
                    tuple(node_selector_requirement(e) for e in t.get("matchExpressions") or []),
                    tuple(node_selector_requirement(e) for e in t.get("matchFields") or []),
                )
                for t in req.get("nodeSelectorTerms") or []
            ]
        self.preferred_terms: list[tuple[int, tuple[Requirement, ...], tuple[Requirement, ...]]] = [
            (
                int(p.get("weight") or 0),
                tuple(
                    node_selector_requirement(e)
                    for e in (p.get("preference") or {}).get("matchExpressions") or []
                ),
                tuple(
                    node_selector_requirement(e) for e in (p.get("preference") or {}).get("matchFields") or []
                ),
            )
            for p in aff.get("preferredDuringSchedulingIgnoredDuringExecution") or []
        ]
        self.claim_refs: list[Mapping[str, Any]] = list(spec.get("resourceClaims") or [])
        self._new_in_queue()

    def _new_in_queue(self) -> None:
        self.attempts = 0
        self.initial_attempt: float | None = None
        self.last_attempt: float | None = None
        self.queued_at = 0.0
        self.seq = 0
        self.continuing = False  # its last attempt ran out of CEL budget and goes on (queue.requeue)
        self.unschedulable_plugins: set[str] = set()

    def with_pod(self, pod: Mapping[str, Any]) -> PodInfo:
        """PodInfo(pod) for a later version of this pod with the very same spec object (a status-only
        update), without parsing the spec again: what is read from it and from the immutable name,
        namespace and uid is shared."""
        new = PodInfo.__new__(PodInfo)
        for slot in _FROM_SPEC:
            setattr(new, slot, getattr(self, slot))
        new.pod = pod
        new._new_in_queue()
        return new


_QUEUE_FIELDS = frozenset(
    ("attempts", "continuing", "initial_attempt", "last_attempt", "queued_at", "seq", "unschedulable_plugins")
)
_FROM_SPEC = tuple(s for s in PodInfo.__slots__ if s != "pod" and s not in _QUEUE_FIELDS)


def node_taints(node: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((node.get("spec") or {}).get("taints") or [])


class NodeInfo:
    """A node plus what is assigned to it. `generation` changes whenever anything a filter reads changes."""

    __slots__ = (
        "allocatable",
        "generation",
        "idx",
        "labels",
        "name",
        "node",
        "nonzero_cpu",
        "nonzero_mem",
        "pods",
        "requested",
        "taints",
        "unschedulable",
    )

    def __init__(self, node: Mapping[str, Any], idx: int) -> None:
        self.idx = idx
        self.pods: dict[str, PodInfo] = {}
        self.requested: dict[str, int] = {}
        self.nonzero_cpu = 0
        self.nonzero_mem = 0
        self.generation = 0
        self.set_node(node)

    def set_node(self, node: Mapping[str, Any]) -> None:
        self.node = node
        meta = node.get("metadata") or {}
        self.name: str = meta.get("name", "")
        self.labels: dict[str, str] = dict(meta.get("labels") or {})
        status = node.get("status") or {}
        raw = status.get("allocatable") or status.get("capacity") or {}
        self.allocatable = {
            k: quantity_int(k, v, f"Node {self.name}: status.allocatable[{k}]") for k, v in raw.items()
        }
        spec = node.get("spec") or {}
        self.taints = node_taints(node)
        self.unschedulable = bool(spec.get("unschedulable"))
        self.generation += 1

    def add_pod(self, pi: PodInfo) -> None:
        if pi.uid in self.pods:
            return
        self.pods[pi.uid] = pi
        for k, v in pi.requests.items():
            self.requested[k] = self.requested.get(k, 0) + v
        self.nonzero_cpu += pi.nonzero_cpu
        self.nonzero_mem += pi.nonzero_mem
        self.generation += 1

    def with_pods(self, pods: list[PodInfo]) -> NodeInfo:
        """This node with `pods` added, for Filter alone (kube-scheduler's addGENominatedPods). The
        generation stays: what is cached by it (device answers) does not count nominated pods."""
        view = NodeInfo.__new__(NodeInfo)
        for slot in NodeInfo.__slots__:
            setattr(view, slot, getattr(self, slot))
        view.pods = dict(self.pods)
        view.requested = dict(self.requested)
        for pi in pods:
            view.add_pod(pi)
        view.generation = self.generation
        return view

    def remove_pod(self, uid: str) -> PodInfo | None:
        pi = self.pods.pop(uid, None)
        if pi is None:
            return None
        for k, v in pi.requests.items():
            self.requested[k] = self.requested.get(k, 0) - v
        self.nonzero_cpu -= pi.nonzero_cpu
        self.nonzero_mem -= pi.nonzero_mem
        self.generation += 1
        return pi
