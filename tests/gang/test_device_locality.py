"""DeviceLocality: with the option on, a multi-GPU pod goes where its devices share a PCIe root."""

from __future__ import annotations

from typing import Any

from builders import DRIVER, device_class, node, pod, template
from helpers import scheduler

from kdra.cluster import MemoryStore


def slice_with_roots(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{name}-gpus"},
        "spec": {
            "driver": DRIVER,
            "nodeName": name,
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"gpu-{i}",
                    "attributes": {
                        "resource.kubernetes.io/pcieRoot": {"string": f"pci{i // 4}"},
                        "resource.kubernetes.io/numaNode": {"int": i // 4},
                    },
                }
                for i in range(8)
            ],
        },
    }


def held(name: str, node_name: str, devices: list[int]) -> dict[str, Any]:
    """A claim already allocated to `devices` of `node_name` (its consumer is outside the test)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": DRIVER, "pool": node_name, "device": f"gpu-{i}"}
                        for i in devices
                    ]
                }
            },
            "reservedFor": [{"resource": "pods", "name": "elsewhere", "uid": f"uid-{name}"}],
        },
    }


def place(locality: bool) -> str | None:
    s = MemoryStore()
    s.create(device_class("gpu"))
    for n in ("a", "b"):
        s.create(node(n))
        s.create(slice_with_roots(n))
    # a: gpu-3 and gpu-4 free (two roots); b: gpu-4 and gpu-5 free (one root)
    s.create(held("on-a", "a", [0, 1, 2, 5, 6, 7]))
    s.create(held("on-b", "b", [0, 1, 2, 3, 6, 7]))
    sched, _gq = scheduler(s, device_locality=locality)
    s.create(template("two", count=2))
    s.create(pod("p", template_name="two"))
    (res,) = sched.run(0)
    return res.node


def test_device_locality_prefers_one_pcie_root() -> None:
    assert place(False) == "a"  # upstream: first node by score order
    assert place(True) == "b"
