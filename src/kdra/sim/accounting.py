"""What a placement costs in GPUs: whole-GPU equivalents and GPU memory per device, for both models.

DRA: a full GPU counts 1; a MIG device counts its memory over its parent GPU's memory; a share of a
shareable GPU (consumable capacity) counts its consumed memory over the GPU's memory. Device plugin: each
`nvidia.com/gpu` / `amd.com/gpu` counts 1, a statically partitioned `nvidia.com/mig-<profile>` its nominal
memory over the GPU's. TPU chips are accelerators but not GPUs: they are left out of GPU figures.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kdra.api.quantity import parse_quantity_any
from kdra.api.types import Obj
from kdra.api.wellknown import AMD_GPU_DRIVER, AMD_GPU_RESOURCE, NVIDIA_GPU_DRIVER, NVIDIA_GPU_RESOURCE

MIB = 1024 * 1024
GIB = 1024 * MIB
_MIG_MEM = re.compile(r"(\d+)gb")


@dataclass(frozen=True, slots=True)
class DeviceCost:
    gpu_equiv: float
    memory: int  # bytes of GPU memory the device holds
    gpu_memory: int  # bytes of the physical GPU it is (part of)


def _mem(raw: Any) -> int:
    try:
        return parse_quantity_any(raw).value()
    except (ValueError, TypeError):
        return 0


class FleetGpus:
    """Per node: physical GPUs and their memory; per DRA device: its cost."""

    def __init__(self, dra_objects: Iterable[Obj]) -> None:
        self.node_gpus: dict[str, int] = {}
        self.node_gpu_memory: dict[str, int] = {}
        self.devices: dict[
            tuple[str, str, str], tuple[str, DeviceCost, bool]
        ] = {}  # key -> (node, cost, shareable)
        slices = []
        for obj in dra_objects:
            if obj.get("kind") == "Node":
                labels = obj["metadata"].get("labels") or {}
                name = obj["metadata"]["name"]
                if labels.get("nvidia.com/gpu.memory"):
                    self.node_gpu_memory[name] = int(labels["nvidia.com/gpu.memory"]) * MIB
                if labels.get("nvidia.com/gpu.count"):
                    self.node_gpus[name] = int(labels["nvidia.com/gpu.count"])
            elif obj.get("kind") == "ResourceSlice":
                slices.append(obj)
        amd_counts: dict[str, int] = {}
        for s in slices:
            spec = s["spec"]
            node = spec.get("nodeName") or ""
            driver = spec.get("driver", "")
            pool = (spec.get("pool") or {}).get("name", "")
            for d in spec.get("devices") or []:
                attrs = d.get("attributes") or {}
                cap = d.get("capacity") or {}
                mem = _mem((cap.get("memory") or {}).get("value", 0))
                dtype = (attrs.get("type") or {}).get("string", "")
                if driver == NVIDIA_GPU_DRIVER:
                    gmem = self.node_gpu_memory.get(node) or mem or 1
                    equiv = 1.0 if dtype != "mig" else min(1.0, mem / gmem)
                    cost = DeviceCost(equiv, mem, gmem)
                elif driver == AMD_GPU_DRIVER:
                    cost = DeviceCost(1.0, mem, mem)
                    amd_counts[node] = amd_counts.get(node, 0) + 1
                    self.node_gpu_memory.setdefault(node, mem)
                else:
                    cost = DeviceCost(0.0, 0, 0)
                self.devices[(driver, pool, d.get("name", ""))] = (
                    node,
                    cost,
                    bool(d.get("allowMultipleAllocations")),
                )
        for node, n in amd_counts.items():
            self.node_gpus.setdefault(node, n)

    @property
    def total_gpus(self) -> int:
        return sum(self.node_gpus.values())

    @property
    def total_gpu_memory(self) -> int:
        return sum(self.node_gpus[n] * self.node_gpu_memory.get(n, 0) for n in self.node_gpus)

    def dra_result_cost(self, result: Mapping[str, Any]) -> DeviceCost:
        key = (result.get("driver", ""), result.get("pool", ""), result.get("device", ""))
        hit = self.devices.get(key)
        if hit is None:
            return DeviceCost(0.0, 0, 0)
        _node, cost, _shareable = hit
        consumed = result.get("consumedCapacity")
        if result.get("shareID") is not None and consumed is not None and cost.memory:
            used = _mem(consumed.get("memory", 0))
            return DeviceCost(min(1.0, used / cost.memory), used, cost.gpu_memory)
        return cost

    def legacy_cost(self, node: str, resource: str) -> DeviceCost:
        gmem = self.node_gpu_memory.get(node, 0)
        if resource in (NVIDIA_GPU_RESOURCE, AMD_GPU_RESOURCE):
            return DeviceCost(1.0, gmem, gmem)
        if resource.startswith("nvidia.com/mig-"):
            m = _MIG_MEM.search(resource)
            mem = int(m.group(1)) * 1000 * 1000 * 1000 if m else 0
            mem = min(mem, gmem) if gmem else mem
            return DeviceCost(mem / gmem if gmem else 0.0, mem, gmem)
        return DeviceCost(0.0, 0, 0)
