"""Small builders for allocator tests (plain resource.k8s.io/v1 dicts)."""

from __future__ import annotations

from typing import Any

DRIVER = "gpu.example.com"


def device(name: str, **attrs: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"name": name}
    attributes: dict[str, Any] = {}
    capacity: dict[str, Any] = {}
    for k, v in attrs.items():
        if k == "memory":
            capacity["memory"] = {"value": v}
        elif isinstance(v, bool):
            attributes[k] = {"bool": v}
        elif isinstance(v, int):
            attributes[k] = {"int": v}
        else:
            attributes[k] = {"string": v}
    if attributes:
        d["attributes"] = attributes
    if capacity:
        d["capacity"] = capacity
    return d


def slice_(
    name: str, devices: list[dict[str, Any]], node: str = "node-1", pool: str | None = None, **spec: Any
) -> dict[str, Any]:
    s: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": DRIVER,
            "pool": {"name": pool or node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }
    if (
        node
        and "allNodes" not in spec
        and "nodeSelector" not in spec
        and "perDeviceNodeSelection" not in spec
    ):
        s["spec"]["nodeName"] = node
    s["spec"].update(spec)
    return s


def device_class(name: str = "gpu", *exprs: str) -> dict[str, Any]:
    sels = [{"cel": {"expression": e}} for e in (exprs or (f'device.driver == "{DRIVER}"',))]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": sels},
    }


def request(name: str, count: int = 1, cls: str = "gpu", *selectors: str, **extra: Any) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": cls, "count": count, **extra}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    return {"name": name, "exactly": exactly}


def claim(name: str, *requests: dict[str, Any], constraints: list[Any] | None = None) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = constraints
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": devices},
    }


def allocated(name: str, *devices: str, pool: str = "node-1", **result: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": []}},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "r", "driver": DRIVER, "pool": pool, "device": d, **result}
                        for d in devices
                    ]
                }
            }
        },
    }


def node(name: str = "node-1", **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}}
