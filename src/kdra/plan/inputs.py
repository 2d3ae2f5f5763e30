"""What a plan starts from: the cluster's nodes, devices and running pods, the pending pods and their gangs,
as Kubernetes objects from files or a live cluster (read as `kdra export` does, plus the scheduling objects
the session reads: PodGroups of every accepted shape, Workloads, Queues, Topology, and PodDisruptionBudgets).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kdra.api.types import Obj
from kdra.errors import InputError
from kdra.kube.store import SESSION_SOURCES
from kdra.scheduler.cache import is_terminal
from kdra.scheduler.gang import pod_group_ref, pod_queue

CLUSTER_KINDS = ("Node", "DeviceClass", "ResourceSlice")


@dataclass
class Inputs:
    nodes: list[Obj] = field(default_factory=list)
    classes: dict[str, Obj] = field(default_factory=dict)
    slices: list[Obj] = field(default_factory=list)
    taint_rules: list[Obj] = field(default_factory=list)  # DeviceTaintRules
    claims: list[Obj] = field(default_factory=list)
    templates: list[Obj] = field(default_factory=list)
    pending: list[Obj] = field(default_factory=list)
    running: list[Obj] = field(default_factory=list)
    scheduling: list[Obj] = field(default_factory=list)  # PodGroup, Workload, Queue, Topology
    pdbs: list[Obj] = field(default_factory=list)


def _ns(obj: Mapping[str, Any]) -> str:
    return (obj.get("metadata") or {}).get("namespace") or "default"


def split(objs: Iterable[Obj]) -> Inputs:
    out = Inputs()
    for o in objs:
        kind = o.get("kind")
        if kind == "Node":
            out.nodes.append(o)
        elif kind == "DeviceClass":
            out.classes[o["metadata"]["name"]] = o
        elif kind == "ResourceSlice":
            out.slices.append(o)
        elif kind == "DeviceTaintRule":
            out.taint_rules.append(o)
        elif kind == "ResourceClaim":
            out.claims.append(o)
        elif kind == "ResourceClaimTemplate":
            out.templates.append(o)
        elif kind == "Pod":
            if is_terminal(o) or (o.get("metadata") or {}).get("deletionTimestamp"):
                continue
            (out.running if (o.get("spec") or {}).get("nodeName") else out.pending).append(o)
        elif kind in ("PodGroup", "Workload", "Queue", "Topology"):
            out.scheduling.append(o)
        elif kind == "PodDisruptionBudget":
            out.pdbs.append(o)
    out.nodes.sort(key=lambda n: n["metadata"]["name"])
    return out


def select(
    pods: Sequence[Obj],
    *,
    namespace: str | None = None,
    queue: str | None = None,
    names: Sequence[str] = (),
    gangs: Mapping[str, Any] | None = None,
) -> list[Obj]:
    """The pending pods a plan is for: of one namespace, one queue (the pod's or its gang's), or named ones
    (`name` in the namespace, or `namespace/name`)."""
    out = []
    wanted = set(names)
    for p in pods:
        meta = p.get("metadata") or {}
        if namespace is not None and _ns(p) != namespace:
            continue
        if wanted and meta.get("name") not in wanted and f"{_ns(p)}/{meta.get('name')}" not in wanted:
            continue
        if queue is not None:
            q = pod_queue(p)
            g = pod_group_ref(p)
            spec = (gangs or {}).get(g[1]) if g else None
            if spec is not None and getattr(spec, "queue", None):
                q = spec.queue
            if q != queue:
                continue
        out.append(p)
    for name in names:
        if not any(meta.get("name") == name or f"{_ns(p)}/{meta.get('name')}" == name
                   for p in pods for meta in [p.get("metadata") or {}]):  # fmt: skip
            raise InputError(f"POD {name}: Not found: no pending pod {name!r} in the input")
    return out


def read_cluster(client: Any, namespace: str | None = None) -> list[Obj]:
    """A live cluster's objects: what `kdra export` reads, the scheduling objects the session reads (each
    served shape; a CRD that is not installed is skipped) and PodDisruptionBudgets."""
    from kdra.kube.export import export_objects

    objs = export_objects(client, namespace)
    cache: dict[str, Any] = {}
    for src in SESSION_SOURCES:
        if src.kind in ("SchedulingShard",):
            continue
        gv = client.served_version(src.api_group, src.plural, src.prefer, cache)
        if gv is None:
            continue
        for o in client.list(src.kind, None, api_version=gv):
            o.setdefault("kind", src.kind)
            o.setdefault("apiVersion", gv)
            objs.append(o)
    for o in client.list("PodDisruptionBudget", namespace):
        o.setdefault("kind", "PodDisruptionBudget")
        objs.append(o)
    return objs
