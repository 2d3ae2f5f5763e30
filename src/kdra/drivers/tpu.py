"""tpu.google.com: the ResourceSlices of kubernetes-sigs/dra-driver-google-tpu (peers.md §2.2).

Chips are devices named after their device files: `0, 1, ...` for vfio chips (v5e, v6e) and `accel0, ...` for
the accel driver (v4, v5p). Attributes: index, uuid (seeded by the node name only, so every chip of a node has
the same value, as upstream's generateUUIDs does), tpuGen, brand, accelerator, chipCount, topology. No
capacities, no counters: ICI topology reaches the workload through environment variables at prepare time.
"""

from __future__ import annotations

from kdra.api.types import Obj
from kdra.api.wellknown import TPU_CLASS, TPU_DRIVER
from kdra.drivers.catalog import TpuModel
from kdra.drivers.common import PoolLayout, SliceGroup, device_class, int_attr, string_attr
from kdra.drivers.nvidia import simulated_uuid

DRIVER = TPU_DRIVER


def chip_name(model: TpuModel, index: int) -> str:
    return f"accel{index}" if model.device_naming == "accel" else str(index)


class TpuRenderer:
    def devices(
        self, node: str, model: TpuModel, chips: int, topology: str | None, extra: Obj | None = None
    ) -> list[Obj]:
        uuid = "tpu-" + simulated_uuid("x", node).removeprefix("x-")
        common: Obj = {
            "uuid": string_attr(uuid),
            "tpuGen": string_attr(model.tpu_gen),
            "brand": string_attr("Google"),
            "accelerator": string_attr(model.accelerator),
            "chipCount": int_attr(chips),
        }
        if topology:
            common["topology"] = string_attr(topology)
        out: list[Obj] = []
        for i in range(chips):
            attrs: Obj = {"index": int_attr(i), **common, **(extra or {})}
            out.append({"name": chip_name(model, i), "attributes": attrs})
        out.sort(key=lambda d: str(d["name"]))
        return out

    def layout(
        self, node: str, model: TpuModel, chips: int, topology: str | None, extra: Obj | None = None
    ) -> PoolLayout:
        return PoolLayout(
            DRIVER, node, [SliceGroup("devices", self.devices(node, model, chips, topology, extra))]
        )


def device_classes() -> list[Obj]:
    return [device_class(TPU_CLASS, f'device.driver == "{DRIVER}"')]
