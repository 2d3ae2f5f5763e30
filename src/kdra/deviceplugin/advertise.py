"""The device-plugin view of the same hardware: extended resources in Node status.allocatable.

What NVIDIA's k8s-device-plugin, AMD's device plugin and GKE's TPU device plugin advertise, so kdra can
compare the DRA model with the legacy one on identical hardware:

* NVIDIA: `nvidia.com/gpu` per GPU without MIG. Static MIG under the `mixed` strategy: one
  `nvidia.com/mig-<profile>` per MIG device (a GPU in MIG mode contributes no `nvidia.com/gpu`). DynamicMIG
  has no device-plugin equivalent: the GPUs are advertised whole. Consumable shares with a share count N map
  to time-slicing with N replicas (`nvidia.com/gpu` = GPUs x N), the closest device-plugin setting; without
  a count the GPUs are advertised whole.
* AMD: `amd.com/gpu` per GPU, or per partition when the GPU is partitioned.
* Google: `google.com/tpu` per chip.
"""

from __future__ import annotations

from collections.abc import Sequence

from kdra.api.wellknown import NVIDIA_GPU_RESOURCE
from kdra.drivers.catalog import AmdModel, AmdPartitionMode, GpuModel, MigProfile, Model, TpuModel


def extended_resources(
    model: Model,
    count: int,
    *,
    mig: str = "none",
    mig_layouts: Sequence[Sequence[tuple[MigProfile, int]]] = (),
    sharing: str | int | None = None,
    partition: AmdPartitionMode | None = None,
) -> dict[str, int]:
    out: dict[str, int] = {}
    if isinstance(model, GpuModel):
        if mig == "static":
            whole = 0
            for layout in mig_layouts:
                if not layout:
                    whole += 1
                for profile, _ in layout:
                    key = f"nvidia.com/mig-{profile.name}"
                    out[key] = out.get(key, 0) + 1
            if whole:
                out[NVIDIA_GPU_RESOURCE] = whole
        else:
            replicas = sharing if isinstance(sharing, int) else 1
            out[NVIDIA_GPU_RESOURCE] = count * replicas
    elif isinstance(model, AmdModel):
        out["amd.com/gpu"] = count * (partition.partitions if partition else 1)
    elif isinstance(model, TpuModel):
        out["google.com/tpu"] = count
    return dict(sorted(out.items()))
