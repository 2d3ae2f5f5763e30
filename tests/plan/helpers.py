"""Small clusters and pending workloads for the planner's tests, as Kubernetes objects."""

from __future__ import annotations

from typing import Any

from kdra.allocator import FeatureGates
from kdra.fleets import render
from kdra.fleets.spec import parse_fleet
from kdra.plan.inputs import Inputs, split
from kdra.plan.nodetypes import NodeType, node_types

Obj = dict[str, Any]
NS = "ml"
GATES = FeatureGates()


def fleet(pools: list[Obj], name: str = "types") -> Any:
    return parse_fleet(
        {
            "apiVersion": "kdra.dev/v1alpha1",
            "kind": "Fleet",
            "metadata": {"name": name},
            "spec": {"pools": pools},
        }
    )


def types_of(pools: list[Obj], **kw: Any) -> list[NodeType]:
    return node_types(fleet(pools), GATES, **kw)


def cluster(pools: list[Obj]) -> list[Obj]:
    return render(fleet(pools, "cluster"))


def template(name: str, request: Obj) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", **request}]}}},
    }


def gpus(n: int, cls: str = "gpu.nvidia.com") -> Obj:
    return {"exactly": {"deviceClassName": cls, "count": n}}


def mig(min_memory: str) -> Obj:
    """A MIG device with at least that memory, else a whole GPU (firstAvailable)."""
    sel = f'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("{min_memory}")) >= 0'
    return {
        "firstAvailable": [
            {"name": "mig", "deviceClassName": "mig.nvidia.com", "selectors": [{"cel": {"expression": sel}}]},
            {"name": "whole", "deviceClassName": "gpu.nvidia.com"},
        ]
    }


def claim(name: str, request: Obj) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"devices": {"requests": [{"name": "gpu", **request}]}},
    }


def pod(
    name: str,
    *,
    templates: tuple[str, ...] = (),
    claims: tuple[str, ...] = (),
    cpu: str = "1",
    group: str | None = None,
    node: str | None = None,
    **spec: Any,
) -> Obj:
    entries = [{"name": f"t{i}", "resourceClaimTemplateName": t} for i, t in enumerate(templates)]
    entries += [{"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate(claims)]
    meta: Obj = {"name": name, "namespace": NS}
    if group:
        meta["labels"] = {"kdra.dev/pod-group": group}
    p: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}],
            "resourceClaims": entries,
            **spec,
        },
    }
    if node:
        p["spec"]["nodeName"] = node
    return p


def pod_group(name: str, members: int, required: str | None = None) -> Obj:
    spec: Obj = {"minMember": members}
    if required:
        spec["topologyConstraint"] = {"requiredTopologyLevel": required}
    return {
        "apiVersion": "kdra.dev/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }


def inputs(*objs: Obj | list[Obj]) -> Inputs:
    flat: list[Obj] = []
    for o in objs:
        flat.extend(o if isinstance(o, list) else [o])
    return split(flat)


H100 = {
    "name": "h100",
    "count": 0,
    "cpu": "192",
    "memory": "2Ti",
    "price": 55.0,
    "accelerator": {"model": "H100-SXM-80GB", "count": 8, "mig": {"mode": "dynamic"}},
}
A100 = {
    "name": "a100",
    "count": 0,
    "cpu": "96",
    "memory": "1Ti",
    "price": 33.0,
    "accelerator": {"model": "A100-40GB", "count": 8},
}
L40S = {
    "name": "l40s",
    "count": 0,
    "cpu": "48",
    "memory": "384Gi",
    "price": 10.5,
    "accelerator": {"model": "L40S", "count": 4},
}
