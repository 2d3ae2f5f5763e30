"""Small builders for scheduler tests: nodes with GPUs, their ResourceSlices, classes, templates, pods."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]
DRIVER = "gpu.example.com"


def node(
    name: str,
    cpu: str = "32",
    memory: str = "256Gi",
    pods: str = "110",
    labels: dict[str, str] | None = None,
    taints: list[Obj] | None = None,
    extended: dict[str, str] | None = None,
) -> Obj:
    alloc = {"cpu": cpu, "memory": memory, "pods": pods, **(extended or {})}
    n: Obj = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {},
        "status": {"allocatable": alloc, "capacity": dict(alloc)},
    }
    if taints:
        n["spec"]["taints"] = taints
    return n


def gpu_slice(node_name: str, count: int = 8, memory: str = "80Gi", model: str = "H100") -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"gpu-{i}",
                    "attributes": {"model": {"string": model}, "index": {"int": i}},
                    "capacity": {"memory": {"value": memory}},
                }
                for i in range(count)
            ],
        },
    }


def device_class(name: str = "gpu", extended_resource: str | None = None) -> Obj:
    c: Obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
    }
    if extended_resource:
        c["spec"]["extendedResourceName"] = extended_resource
    return c


def template(
    name: str, count: int = 1, cls: str = "gpu", namespace: str = "default", selector: str | None = None
) -> Obj:
    exactly: Obj = {"deviceClassName": cls, "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}},
    }


def claim(name: str, count: int = 1, cls: str = "gpu", namespace: str = "default") -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": cls, "count": count}}]}
        },
    }


def pod(
    name: str,
    cpu: str = "1",
    memory: str = "1Gi",
    template_name: str | None = None,
    claim_name: str | None = None,
    namespace: str = "default",
    priority: int = 0,
    node_selector: dict[str, str] | None = None,
    tolerations: list[Obj] | None = None,
    limits: dict[str, str] | None = None,
    affinity: Obj | None = None,
) -> Obj:
    container: Obj = {
        "name": "main",
        "image": "busybox",
        "resources": {"requests": {"cpu": cpu, "memory": memory}},
    }
    if limits:
        container["resources"]["limits"] = limits
    spec: Obj = {"containers": [container], "priority": priority}
    if template_name or claim_name:
        ref: Obj = {"name": "gpu"}
        if template_name:
            ref["resourceClaimTemplateName"] = template_name
        else:
            ref["resourceClaimName"] = claim_name
        spec["resourceClaims"] = [ref]
        container["resources"]["claims"] = [{"name": "gpu"}]
    if node_selector:
        spec["nodeSelector"] = node_selector
    if tolerations:
        spec["tolerations"] = tolerations
    if affinity:
        spec["affinity"] = affinity
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
