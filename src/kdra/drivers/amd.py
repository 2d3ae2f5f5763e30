"""gpu.amd.com: the ResourceSlices of ROCm's k8s-gpu-dra-driver @2622427 (peers.md §2.3).

A GPU in SPX/NPS1 mode is one device of type `amdgpu`; a GPU split into compute partitions (DPX, QPX, CPX) is
published only as its partitions, type `amdgpu-partition`, each with its own card and render node. Both are
named `gpu-<cardIndex>-<renderIndex>`. Capacities: memory, computeUnits, simdUnits.

Note: the upstream docs put `pciAddr`/`deviceID` on partitions, the code emits
`parentPciAddr`/`parentDeviceID` (peers.md "Discrepancy"); kdra follows the code. Newer upstream commits
moved to the standard resource.kubernetes.io/pciBusID and a numaNode attribute; kdra keeps the @2622427
shape peers.md documents.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kdra.api.types import Obj
from kdra.api.wellknown import AMD_GPU_CLASS, AMD_GPU_DRIVER
from kdra.drivers.catalog import AmdModel, AmdPartitionMode
from kdra.drivers.common import (
    PoolLayout,
    SliceGroup,
    binary_quantity,
    device_class,
    int_attr,
    string_attr,
    version_attr,
)
from kdra.drivers.nvidia import pci_topology, simulated_uuid

DRIVER = AMD_GPU_DRIVER
DEFAULT_DRIVER_VERSION = "6.12.12"
DEFAULT_DRIVER_SRC_VERSION = "F6A2C9E1B07D4E3A1C5B2D8"
STD = "resource.kubernetes.io"
_BUSES_8 = (0x05, 0x15, 0x65, 0x75, 0x85, 0x95, 0xE5, 0xF5)


@dataclass(frozen=True)
class AmdGpuInfo:
    index: int
    model: AmdModel
    mode: AmdPartitionMode
    device_id: str  # KFD unique_id: one per physical GPU
    pci_addr: str
    pcie_root: str
    driver_version: str = DEFAULT_DRIVER_VERSION
    driver_src_version: str = DEFAULT_DRIVER_SRC_VERSION


def simulated_amd_gpu(
    model: AmdModel,
    mode: AmdPartitionMode,
    node: str,
    index: int,
    count: int,
    pcie_roots: Sequence[int] = (),
) -> AmdGpuInfo:
    bus = _BUSES_8[(index * 8) // count] if count <= 8 else 0x05 + index * (0xF0 // count)
    unique = int(simulated_uuid("x", node, index).split("-")[1], 16) % (1 << 63)
    addr, root = f"0000:{bus:02x}:00.0", f"pci0000:{bus - 3:02x}"
    if pcie_roots:
        addr, root, _ = pci_topology(index, count, pcie_roots)
    return AmdGpuInfo(index, model, mode, str(unique), addr, root)


class AmdRenderer:
    def devices(self, gpus: Sequence[AmdGpuInfo], extra: Obj | None = None) -> list[Obj]:
        extra = extra or {}
        out: list[Obj] = []
        card = 1  # card0 is usually the BMC's VGA device
        render = 128
        for g in gpus:
            m, mode = g.model, g.mode
            common: Obj = {
                "family": string_attr(m.family),
                "productName": string_attr(m.product_name),
                "driverVersion": version_attr(g.driver_version),
                "driverSrcVersion": string_attr(g.driver_src_version),
                "partitionProfile": string_attr(mode.profile),
                f"{STD}/pcieRoot": string_attr(g.pcie_root),
            }
            n = mode.partitions
            caps = {
                "memory": {"value": binary_quantity(m.memory_mib * (1 << 20) // n)},
                "computeUnits": {"value": str(m.compute_units // n)},
                "simdUnits": {"value": str(m.simd_units // n)},
            }
            if n == 1:
                attrs: Obj = {
                    "type": string_attr("amdgpu"),
                    "pciAddr": string_attr(g.pci_addr),
                    "cardIndex": int_attr(card),
                    "renderIndex": int_attr(render),
                    "deviceID": string_attr(g.device_id),
                    **common,
                    **extra,
                }
                out.append({"name": f"gpu-{card}-{render}", "attributes": attrs, "capacity": caps})
                card += 1
                render += 1
                continue
            for _ in range(n):
                attrs = {
                    "type": string_attr("amdgpu-partition"),
                    "parentPciAddr": string_attr(g.pci_addr),
                    "cardIndex": int_attr(card),
                    "renderIndex": int_attr(render),
                    "parentDeviceID": string_attr(g.device_id),
                    **common,
                    **extra,
                }
                out.append({"name": f"gpu-{card}-{render}", "attributes": attrs, "capacity": caps})
                card += 1
                render += 1
        out.sort(key=lambda d: d["name"])
        return out

    def layout(self, node: str, gpus: Sequence[AmdGpuInfo], extra: Obj | None = None) -> PoolLayout:
        return PoolLayout(DRIVER, node, [SliceGroup("devices", self.devices(gpus, extra))])


def device_classes() -> list[Obj]:
    return [device_class(AMD_GPU_CLASS, f"device.driver == '{DRIVER}'")]
