"""What a placement costs in GPUs: whole-GPU equivalents and GPU memory per device, for both models.

DRA: what kdra.api.gpus says a device or a share of one is worth (a full GPU 1, a MIG device its memory
over its GPU's, a share its consumed memory over the device's). Device plugin: each
`nvidia.com/gpu` / `amd.com/gpu` counts 1, a statically partitioned `nvidia.com/mig-<profile>` its nominal
memory over the GPU's. TPU chips are accelerators but not GPUs: they are left out of GPU figures.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kdra.api.gpus import (
    GpuDevice,
    counter_sets,
    gpu_devices,
    gpu_equivalents,
    node_gpu_memory,
    physical_memory,
    quantity_value,
    share_equivalents,
)
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


class FleetGpus:
    """Per node: physical GPUs and their memory; per DRA device: its cost (kdra.api.gpus)."""

    def __init__(self, dra_objects: Iterable[Obj]) -> None:
        self.node_gpus: dict[str, int] = {}
        self.node_gpu_memory: dict[str, int] = {}
        self.devices: dict[
            tuple[str, str, str], tuple[str, DeviceCost, GpuDevice]
        ] = {}  # key -> (node, cost, device)
        # (node, MIG profile) -> the published MIG device's memory and its GPU's: what a static partition of
        # that profile on that node holds (device-plugin `nvidia.com/mig-<profile>`).
        self.mig_memory: dict[tuple[str, str], tuple[int, int]] = {}
        slices = []
        for obj in dra_objects:
            if obj.get("kind") == "Node":
                labels = obj["metadata"].get("labels") or {}
                name = obj["metadata"]["name"]
                if node_gpu_memory(obj):
                    self.node_gpu_memory[name] = node_gpu_memory(obj)
                if labels.get("nvidia.com/gpu.count"):
                    self.node_gpus[name] = int(labels["nvidia.com/gpu.count"])
            elif obj.get("kind") == "ResourceSlice":
                slices.append(obj)
        sets = {k: v for s in slices for k, v in counter_sets(s["spec"]).items()}
        amd_counts: dict[str, int] = {}
        for s in slices:
            spec = s["spec"]
            node = spec.get("nodeName") or ""
            driver = spec.get("driver", "")
            pool = (spec.get("pool") or {}).get("name", "")
            for dev in gpu_devices(spec, sets):
                if driver == NVIDIA_GPU_DRIVER:
                    label = self.node_gpu_memory.get(node, 0)
                    gmem = physical_memory(dev, label) or dev.memory or 1
                    cost = DeviceCost(gpu_equivalents(dev, label), dev.memory, gmem)
                    profile = (
                        ((dev.attributes.get("profile") or {}).get("string")) if dev.dtype == "mig" else None
                    )
                    if profile and dev.memory:
                        self.mig_memory.setdefault((node, profile), (dev.memory, gmem))
                elif driver == AMD_GPU_DRIVER:
                    cost = DeviceCost(gpu_equivalents(dev), dev.memory, dev.memory)
                    amd_counts[node] = amd_counts.get(node, 0) + 1
                    self.node_gpu_memory.setdefault(node, dev.memory)
                else:
                    cost = DeviceCost(0.0, 0, 0)
                self.devices[(driver, pool, dev.name)] = (node, cost, dev)
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
        _node, cost, dev = hit
        consumed = result.get("consumedCapacity")
        if result.get("shareID") is not None and consumed is not None and cost.memory:
            used = quantity_value(consumed.get("memory", 0))
            return DeviceCost(share_equivalents(dev, used), used, cost.gpu_memory)
        return cost

    def legacy_cost(self, node: str, resource: str) -> DeviceCost:
        gmem = self.node_gpu_memory.get(node, 0)
        if resource in (NVIDIA_GPU_RESOURCE, AMD_GPU_RESOURCE):
            return DeviceCost(1.0, gmem, gmem)
        if resource.startswith("nvidia.com/mig-"):
            # The memory of that profile as the node's GPUs publish it (the DRA side's figure for the same
            # device): the profile name's nominal decimal GB (10e9 for 1g.10gb; published: 9,984 MiB) made
            # every static MIG device 5-7% cheaper than the same device under DRA.
            known = self.mig_memory.get((node, resource.removeprefix("nvidia.com/mig-")))
            if known is not None:
                mem, gpu_mem = known
                return DeviceCost(mem / gpu_mem if gpu_mem else 0.0, mem, gpu_mem)
            m = _MIG_MEM.search(resource)
            mem = int(m.group(1)) * 1000 * 1000 * 1000 if m else 0
            mem = min(mem, gmem) if gmem else mem
            return DeviceCost(mem / gmem if gmem else 0.0, mem, gmem)
        return DeviceCost(0.0, 0, 0)
