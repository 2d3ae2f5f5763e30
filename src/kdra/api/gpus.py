"""A ResourceSlice's devices as GPUs: which devices are one physical GPU, that GPU's memory, and how many
whole GPUs a device or a share of one is worth. One rule for the simulation's accounting
(kdra.sim.accounting), kdra plan and the exporter (kdra.observe).

- A device of a `gpu.*` driver is a GPU or a part of one. Its physical GPU is the one its `parentUUID`
  attribute names, else itself (`uuid`), else the counter set it draws on (DynamicMIG), else its name.
- That GPU's memory: the node's GPU Feature Discovery label (`nvidia.com/gpu.memory`, MiB) when the node has
  it, else the `memory` counter of the counter set the device draws on, else the memory of the device its
  `parentUUID` names.
- Whole-GPU equivalents: a whole GPU is 1; a MIG device or a partition is its memory over its GPU's (the
  full-GPU device of a partitionable GPU is 1); a share of a shareable device is the memory it consumes over
  the device's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kdra.api.quantity import parse_quantity_any

GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"  # GPU Feature Discovery: a GPU's memory in MiB
MIB = 1024 * 1024

CounterSetKey = tuple[str, str, str]  # (driver, pool, counter set)


def quantity_value(raw: object) -> int:
    """A quantity field's integer value; 0 when it does not parse."""
    try:
        return int(parse_quantity_any(raw).value())
    except (ValueError, TypeError):
        return 0


def attribute_text(attrs: Mapping[str, Any], name: str) -> str:
    """A device attribute's value as text, whatever its type ("" when absent)."""
    v = attrs.get(name)
    if not isinstance(v, Mapping):
        return ""
    for k in ("string", "version", "int", "bool"):
        if k in v:
            return str(v[k])
    return ""


def node_gpu_memory(node: Mapping[str, Any]) -> int:
    """The memory of one of the node's GPUs in bytes, from its GPU Feature Discovery label (0: no label)."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    raw = labels.get(GPU_MEMORY_LABEL)
    try:
        return int(raw) * MIB if raw else 0
    except ValueError:
        return 0


def counter_sets(spec: Mapping[str, Any]) -> dict[CounterSetKey, dict[str, int]]:
    """A slice's sharedCounters: (driver, pool, counter set) -> counter -> value."""
    driver = spec.get("driver", "")
    pool = (spec.get("pool") or {}).get("name", "")
    return {
        (driver, pool, cs.get("name", "")): {
            c: quantity_value((v or {}).get("value", 0)) for c, v in (cs.get("counters") or {}).items()
        }
        for cs in spec.get("sharedCounters") or []
    }


@dataclass(frozen=True, slots=True)
class GpuDevice:
    """One published device as accounting reads it."""

    name: str
    gpu: bool  # a GPU or a part of one (a gpu.* driver)
    dtype: str  # its `type` attribute (gpu, mig, ...)
    memory: int  # bytes of its `memory` capacity
    capacity: tuple[tuple[str, int], ...]  # every capacity it publishes, by name (a share's fraction of it)
    shareable: bool  # allowMultipleAllocations
    counters: tuple[tuple[str, str, int], ...]  # (counter set, counter, value) it consumes
    physical: str  # the physical GPU it is (part of); "" for a device that is not a GPU
    parent_memory: int  # memory of that physical GPU when the slice says (counter set, parent), else 0
    uuid: str
    attributes: Mapping[str, Any]


def gpu_devices(
    spec: Mapping[str, Any], known_sets: Mapping[CounterSetKey, Mapping[str, int]] | None = None
) -> list[GpuDevice]:
    """The devices of a slice's spec, in order. Counter sets are looked up in the slice, then in
    `known_sets` (the pool's other slices: a partitionable device may draw on a set published apart)."""
    driver = spec.get("driver", "")
    pool = (spec.get("pool") or {}).get("name", "")
    sets = counter_sets(spec)
    gpu = driver.startswith("gpu.")
    devs = spec.get("devices") or []
    uuid_mem: dict[str, int] = {}
    for d in devs:
        u = attribute_text(d.get("attributes") or {}, "uuid")
        if u:
            uuid_mem[u] = quantity_value(((d.get("capacity") or {}).get("memory") or {}).get("value", 0))
    out = []
    for d in devs:
        name = d.get("name", "")
        attrs = d.get("attributes") or {}
        counters = tuple(
            (cc.get("counterSet", ""), c, quantity_value((v or {}).get("value", 0)))
            for cc in d.get("consumesCounters") or []
            for c, v in sorted((cc.get("counters") or {}).items())
        )
        parent = attribute_text(attrs, "parentUUID")
        u = attribute_text(attrs, "uuid")
        parent_mem = 0
        for cs_name in {c[0] for c in counters}:
            key = (driver, pool, cs_name)
            found = sets.get(key) or (known_sets or {}).get(key) or {}
            parent_mem = max(parent_mem, found.get("memory", 0))
        if not parent_mem and parent:
            parent_mem = uuid_mem.get(parent, 0)
        drawn = sorted({c[0] for c in counters})
        cap = d.get("capacity") or {}
        out.append(
            GpuDevice(
                name=name,
                gpu=gpu,
                dtype=attribute_text(attrs, "type"),
                memory=quantity_value((cap.get("memory") or {}).get("value", 0)),
                capacity=tuple(sorted((c, quantity_value((v or {}).get("value"))) for c, v in cap.items())),
                shareable=bool(d.get("allowMultipleAllocations")),
                counters=counters,
                physical=(parent or u or (drawn[0] if drawn else name)) if gpu else "",
                parent_memory=parent_mem,
                uuid=u,
                attributes=attrs,
            )
        )
    return out


class GpuShape(Protocol):
    """What the equivalents read of a device (GpuDevice, or a record that keeps the same fields)."""

    @property
    def gpu(self) -> bool: ...
    @property
    def dtype(self) -> str: ...
    @property
    def memory(self) -> int: ...
    @property
    def counters(self) -> tuple[tuple[str, str, int], ...]: ...
    @property
    def parent_memory(self) -> int: ...


def physical_memory(dev: GpuShape, node_memory: int = 0) -> int:
    """The memory of the physical GPU `dev` is (part of): the node's label, else what the slice says."""
    return node_memory or dev.parent_memory


def gpu_equivalents(dev: GpuShape, node_memory: int = 0) -> float:
    """Whole GPUs a device allocated whole is worth (0 for a device that is not a GPU). `node_memory`: the
    node's GPU memory label (node_gpu_memory), 0 when it has none."""
    if not dev.gpu:
        return 0.0
    if dev.dtype == "mig" or dev.counters:
        parent = physical_memory(dev, node_memory)
        if dev.dtype != "mig" and dev.parent_memory and dev.memory >= dev.parent_memory:
            return 1.0  # the full-GPU device of a partitionable GPU
        return min(1.0, dev.memory / parent) if parent and dev.memory else 1.0
    return 1.0


def share_equivalents(dev: GpuShape, consumed_memory: int) -> float:
    """Whole GPUs a share of a shareable device is worth: the memory it consumes over the device's."""
    return min(1.0, consumed_memory / dev.memory) if dev.memory else 0.0
