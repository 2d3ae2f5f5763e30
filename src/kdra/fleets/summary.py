"""A per-pool summary of a fleet (what `kdra cluster describe` prints), computed from one rendered node per
pool so it always agrees with what `render` publishes."""

from __future__ import annotations

from dataclasses import dataclass

from kdra.drivers.catalog import AmdModel, GpuModel, TpuModel
from kdra.fleets.spec import Fleet, Pool, parse_quantity


@dataclass(frozen=True)
class PoolSummary:
    pool: str
    nodes: int
    model: str
    accelerators_per_node: int
    devices_per_node: int  # DRA devices published per node (full GPUs, MIG devices or placements, partitions)
    slices_per_node: int
    accelerator_memory_bytes_per_node: int
    partitioning: str
    sharing: str
    zones: tuple[str, ...]
    cpu: str
    memory: str

    @property
    def devices(self) -> int:
        return self.devices_per_node * self.nodes

    @property
    def accelerators(self) -> int:
        return self.accelerators_per_node * self.nodes


def _partitioning(pool: Pool) -> str:
    acc = pool.accelerator
    if acc is None:
        return "-"
    if isinstance(acc.model, GpuModel):
        if acc.mig == "static":
            layouts = {
                "+".join(
                    p.name for p, _ in sorted(lay, key=lambda t: (-t[0].memory_slices, -t[0].compute_slices))
                )
                or "MIG off"
                for lay in acc.mig_layouts
            }
            return "static MIG " + " | ".join(sorted(layouts))
        if acc.mig == "dynamic":
            n = sum(len(p.placements) for p in acc.model.mig_profiles)
            return f"dynamic MIG ({n} placements/GPU)"
        return "whole GPUs"
    if isinstance(acc.model, AmdModel) and acc.partition:
        return f"{acc.partition.profile} ({acc.partition.partitions}/GPU)"
    if isinstance(acc.model, TpuModel):
        return f"slice {acc.tpu_topology}"
    return "-"


def summarize(fleet: Fleet) -> list[PoolSummary]:
    from kdra.fleets.render import pool_renderers

    out = []
    for pr in pool_renderers(fleet):
        pool = pr.pool
        acc = pool.accelerator
        devices = slices = 0
        if acc is not None and pool.count:
            objs = pr.slices(0)
            slices = len(objs)
            devices = sum(len(s["spec"].get("devices", ())) for s in objs)
        mem = 0
        if acc is not None:
            m = acc.model
            if isinstance(m, GpuModel):
                mem = m.memory_bytes * acc.count
            elif isinstance(m, AmdModel):
                mem = m.memory_mib * (1 << 20) * acc.count
            elif isinstance(m, TpuModel):
                mem = m.hbm_gib * (1 << 30) * acc.count
        sharing = "-"
        if acc is not None and acc.sharing is not None:
            sharing = f"consumable shares ({acc.sharing})"
        out.append(
            PoolSummary(
                pool=pool.name,
                nodes=pool.count,
                model=acc.model.key if acc else "cpu-only",
                accelerators_per_node=acc.count if acc else 0,
                devices_per_node=devices,
                slices_per_node=slices,
                accelerator_memory_bytes_per_node=mem,
                partitioning=_partitioning(pool),
                sharing=sharing,
                zones=tuple(sorted(set(pool.topology.zones))),
                cpu=pool.cpu,
                memory=pool.memory,
            )
        )
    return out


def node_memory_bytes(pool: Pool) -> int:
    return int(parse_quantity(pool.memory))
