"""Fragmentation: one model of free accelerator capacity, for trace replay, simulation and Kubernetes mode.

FGD (Fragmentation Gradient Descent; Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing
Workloads with Fragmentation Gradient Descent", USENIX ATC '23) measures a node's fragmentation for a
target workload as the free accelerator capacity a task drawn from that workload could not use. This
module has that measure once (`unusable`) and the views it is applied to:

- **DRA units** (`UnitTable`, `DeviceUnits`): a node's accelerators as kdra's allocator sees them. A unit
  is a physical device: a GPU whose MIG placements share a counter set (DynamicMIG:
  `gpu-<n>-counter-set`) is one unit whatever is carved out of it, as are static partitions with the same
  `parentUUID` attribute; a device with allowMultipleAllocations (consumable capacity) is a unit its shares
  split; any other device is a unit of its own. Units carry their placement table (the partitions of a
  counter set by profile) and their locality (PCIe root, NUMA node, NVLink domain). The node score
  plugins below and the allocator's device preferences (kdra.scheduler.devicepref) use them.
- **The fleet** (`cluster_fragmentation`): the figures simulation reports.

The replay's GPU node views and its placement policies (the FGD paper's simulator policies and kdra's
own) live in kdra.scheduler.gpupolicies. Here are the node score plugins for kdra's scheduler
(`placement_plugins`: `fragmentation`, `binpack`, `spread`, and `kdra`, whose `FragmentationScore` wraps
a replay policy; `DeviceLocality`). Upstream's behaviour (first node by the NodeResourcesFit score, first
fitting devices) stays the default: all of these are opt-in.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from kdra.api.quantity import parse_quantity_any
from kdra.scheduler.framework import CycleState, ScorePlugin

if TYPE_CHECKING:
    from kdra.allocator.allocator import AllocatedState
    from kdra.allocator.index import AllocatorIndex, AttributeScalar, DeviceEntry
    from kdra.scheduler.devicepref import MeasuredPreference
    from kdra.scheduler.dra import DraState
    from kdra.scheduler.podinfo import NodeInfo, PodInfo
    from kdra.scheduler.session import Session

EPS = 1e-9

# -- FGD's measure ---------------------------------------------------------------------------------


def unusable(frees: Sequence[float], fits: Sequence[bool], count: int = 1) -> float:
    """FGD for one task shape: the free capacity of the units it cannot use. `fits[i]`: one member of
    the shape fits unit i. A shape of one unit (a fraction, a partition, one device) cannot use the units
    it does not fit; a shape of `count` units cannot use anything when fewer than `count` units fit, else
    the units it does not fit."""
    if count > 1 and sum(1 for ok in fits if ok) < count:
        return sum(frees)
    return sum(f for f, ok in zip(frees, fits, strict=True) if not ok)


def shape_fragment(frees: Iterable[float], d: float) -> float:
    """FGD over unit free fractions for a task of shape d (d < 1: a fraction of one unit; d >= 1: d
    whole units)."""
    fr = list(frees)
    if d < 1.0 - EPS:
        return unusable(fr, [f >= d - EPS for f in fr])
    return unusable(fr, [f >= 1.0 - EPS for f in fr], round(d))


def node_fragmentation(frees: Iterable[float], shapes: Mapping[float, float]) -> float:
    """The popularity-weighted FGD fragmentation of a node over shapes (units -> popularity)."""
    fr = list(frees)
    total = sum(shapes.values())
    if total <= 0:
        return 0.0
    return sum(p * shape_fragment(fr, d) for d, p in shapes.items()) / total


# -- DRA units -------------------------------------------------------------------------------------

# What a fragmentation measure is memoised by: the GPU model, the free CPU and memory buckets, the GPUs.
UnitKey = tuple[str, str, str]  # (driver, pool, counter set | "parent:<uuid>" | device name)
DeviceKey = tuple[str, str, str]
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
NUMA_NODE = "resource.kubernetes.io/numaNode"
NVLINK_DOMAIN = "kdra.dev/nvlinkDomain"
LOCALITY_ATTRIBUTES = (PCIE_ROOT, NUMA_NODE, NVLINK_DOMAIN)
WHOLE = "whole"  # the kind of a device that is its own unit


def device_kind(dev: DeviceEntry) -> str:
    """The shape a device offers: its `profile` attribute (MIG: 1g.10gb), else its `type` (gpu), else
    its capacity (devices with equal capacity are interchangeable shapes)."""
    for attr in ("profile", "type"):
        v = (dev.attributes.get(attr) or {}).get("string")
        if v:
            return str(v)
    return "capacity:" + ",".join(f"{n}={c.value}" for n, c in sorted(dev.capacity.items()))


def attr_value(dev: DeviceEntry, name: str) -> AttributeScalar | None:
    """A device attribute's plain value (string, int, bool or version), or None."""
    raw = dev.attribute(name)
    if not isinstance(raw, Mapping):
        return None
    for kind in ("string", "int", "bool", "version"):
        if raw.get(kind) is not None:
            return cast("AttributeScalar", raw[kind])
    return None


def _main_capacity(dev: DeviceEntry) -> str | None:
    if "memory" in dev.capacity:
        return "memory"
    return next(iter(sorted(dev.capacity)), None)


@dataclass(eq=False)
class Unit:
    """One physical accelerator of a node."""

    key: UnitKey
    devices: list[DeviceEntry] = field(default_factory=list)
    counters: dict[str, int] | None = None  # its counter set's totals (partitionable)
    shared: bool = False  # one device with allowMultipleAllocations
    locality: dict[str, Any] = field(default_factory=dict)  # LOCALITY_ATTRIBUTES -> value
    # Partitionable: kind -> its placements as (device, [(counter index, amount)]) in slice order, and
    # the counter names in a fixed order (remaining counters are tuples in that order).
    placements: dict[str, list[tuple[DeviceEntry, tuple[tuple[int, int], ...]]]] = field(default_factory=dict)
    counter_names: tuple[str, ...] = ()
    signature: Hashable = None  # equal for units of the same structure (their placeable counts agree)

    def remaining(self, left: Mapping[str, int]) -> tuple[int, ...]:
        return tuple(left.get(c, 0) for c in self.counter_names)

    def placeable(self, kind: str, left: tuple[int, ...], first_only: bool = False) -> int:
        """How many placements of `kind` fit at once in the counters left (greedy in slice order)."""
        cur = list(left)
        n = 0
        for _dev, use in self.placements.get(kind, ()):
            if all(cur[i] >= amount for i, amount in use):
                n += 1
                if first_only:
                    return n
                for i, amount in use:
                    cur[i] -= amount
        return n


class UnitTable:
    """The units of one node's devices, and per device: its unit and the fraction of it the device holds
    (a whole device all of its unit; a partition its share of the counter set's `memory` counter, or of
    its first counter; a static partition its memory over the sum of its siblings')."""

    def __init__(
        self, devices: Iterable[DeviceEntry], counter_sets: Mapping[tuple[str, str, str], Mapping[str, int]]
    ) -> None:
        self.units: list[Unit] = []
        self.of: dict[DeviceKey, tuple[int, float, float]] = {}  # device -> (unit index, fraction, memory)
        by_key: dict[UnitKey, int] = {}
        parent_mem: dict[int, float] = {}
        for d in devices:
            mem = d.capacity.get("memory")
            memcap = float(mem.value.value()) if mem is not None else 0.0
            parent = (d.attributes.get("parentUUID") or {}).get("string")
            counters: Mapping[str, int] | None = None
            if d.consumes:
                cs, used = d.consumes[0]
                key: UnitKey = (d.driver, d.pool, cs)
                counters = counter_sets.get(key, {})
                usedd = dict(used)
                cname = "memory" if "memory" in usedd and counters.get("memory") else None
                if cname is None:
                    cname = next((c for c, _v in used if counters.get(c)), None)
                frac = min(1.0, usedd[cname] / counters[cname]) if cname else 1.0
            elif parent:
                key = (d.driver, d.pool, f"parent:{parent}")
                frac = memcap  # over the parent's memory, once all its partitions are known
            else:
                key = (d.driver, d.pool, d.name)
                frac = 1.0
            ui = by_key.get(key)
            if ui is None:
                ui = by_key[key] = len(self.units)
                unit = Unit(key, counters=dict(counters) if counters is not None else None)
                unit.shared = bool(d.allow_multi and not d.consumes and not parent)
                if counters is not None:
                    unit.counter_names = tuple(sorted(counters))
                self.units.append(unit)
            unit = self.units[ui]
            unit.devices.append(d)
            for attr in LOCALITY_ATTRIBUTES:
                if attr not in unit.locality:
                    v = attr_value(d, attr)
                    if v is not None:
                        unit.locality[attr] = v
            if parent and not d.consumes:
                parent_mem[ui] = parent_mem.get(ui, 0.0) + memcap
            self.of[d.key] = (ui, frac, memcap)
        for dkey, (ui, frac, memcap) in self.of.items():
            psum = parent_mem.get(ui)
            if psum is not None:
                self.of[dkey] = (ui, min(1.0, frac / psum) if psum else 1.0, memcap)
        for unit in self.units:
            if unit.counters is not None:
                index = {c: i for i, c in enumerate(unit.counter_names)}
                for d in unit.devices:
                    use = tuple(
                        (index[c], amount)
                        for set_name, cs in d.consumes
                        if set_name == unit.key[2]
                        for c, amount in cs
                        if amount and c in index
                    )
                    unit.placements.setdefault(device_kind(d), []).append((d, use))
                unit.signature = (
                    tuple(unit.counters[c] for c in unit.counter_names),
                    tuple((k, tuple(u for _d, u in pl)) for k, pl in sorted(unit.placements.items())),
                )

    def unit_of(self, dev: DeviceEntry) -> tuple[int, float, float] | None:
        return self.of.get(dev.key)

    def kinds(self) -> list[str]:
        """Every shape a unit of this node offers: partition profiles, and `whole` for units that are
        devices (a whole GPU of a partitionable unit is its own kind, e.g. `gpu`)."""
        out: dict[str, None] = {}
        for u in self.units:
            if u.counters is not None:
                out.update(dict.fromkeys(u.placements))
            elif u.key[2].startswith("parent:"):
                out.update(dict.fromkeys(device_kind(d) for d in u.devices))
            else:
                out[WHOLE] = None
        return list(out)

    def groups(self, attribute: str) -> dict[AttributeScalar, list[int]]:
        """Units by their value of a locality attribute (units without it are left out)."""
        out: dict[AttributeScalar, list[int]] = {}
        for i, u in enumerate(self.units):
            v = u.locality.get(attribute)
            if v is not None:
                out.setdefault(v, []).append(i)
        return out


class DeviceUnits:
    """Per node of an AllocatorIndex: its UnitTable; `free(node, dra)` under the scheduler's state."""

    def __init__(self, index: AllocatorIndex) -> None:
        sets: dict[tuple[str, str, str], dict[str, int]] = {}
        pool_node: dict[tuple[str, str], str] = {}
        for s in index.slices:
            for name, counters in s.shared_counters:
                sets[(s.driver, s.pool, name)] = counters
            if s.node_name:
                pool_node[(s.driver, s.pool)] = s.node_name
        per_node: dict[str, list[DeviceEntry]] = {}
        for s in index.slices:
            node = s.node_name or pool_node.get((s.driver, s.pool), "")
            if node:
                per_node.setdefault(node, []).extend(s.devices)
        self.tables: dict[str, UnitTable] = {n: UnitTable(devs, sets) for n, devs in per_node.items()}

    @property
    def node_units(self) -> dict[str, list[UnitKey]]:
        return {n: [u.key for u in t.units] for n, t in self.tables.items()}

    def free(self, node: str, dra: DraState) -> dict[UnitKey, float]:
        """Free fraction per unit of `node` under the scheduler's allocated (and assumed) state."""
        table = self.tables.get(node)
        if table is None or not table.units:
            return {}
        return dict(zip((u.key for u in table.units), unit_frees(table, dra.state), strict=True))

    def result_use(self, node: str, result: Mapping[str, Any]) -> tuple[UnitKey, float] | None:
        """The unit an allocation result takes from and how much of it."""
        table = self.tables.get(node)
        if table is None:
            return None
        key = (result.get("driver", ""), result.get("pool", ""), result.get("device", ""))
        hit = table.of.get(key)
        if hit is None:
            return None
        ui, frac, memcap = hit
        consumed = result.get("consumedCapacity")
        if result.get("shareID") is not None and consumed is not None and memcap:
            mem = consumed.get("memory")
            if mem is not None:
                return table.units[ui].key, min(1.0, parse_quantity_any(mem).value() / memcap)
        return table.units[ui].key, frac


def unit_frees(table: UnitTable, state: AllocatedState) -> list[float]:
    """Free fraction per unit of a table under an AllocatedState (exclusive devices and shares)."""
    free = [1.0] * len(table.units)
    of = table.of
    for key in state.dedicated:
        hit = of.get(key)
        if hit is not None:
            free[hit[0]] -= hit[1]
    for key, consumed in state.consumed.items():
        hit = of.get(key)
        if hit is not None and hit[2]:
            free[hit[0]] -= consumed.get("memory", 0) / 1e9 / hit[2]
    return [max(0.0, min(1.0, f)) for f in free]


# -- DRA node scores: fragmentation, bin packing, spread, locality --------------------------------

MAX_NODE_SCORE = 100


class _DeviceScore(ScorePlugin):
    """Shared machinery: the pod's allocation on the node (from DynamicResources) applied to the units."""

    def __init__(self, weight: int = 10) -> None:
        self.weight = weight
        self.dynres: Any = None  # the profile's DynamicResources plugin (named by the session)
        self._units: DeviceUnits | None = None
        self._units_index: Any = None
        self.version = 0

    def open_session(self, ssn: Session) -> None:
        from kdra.scheduler.plugins.dynamicresources import DynamicResources

        self.dynres = ssn.plugin(DynamicResources)

    def units(self) -> DeviceUnits:
        index = self.cache.dra.index
        if self._units is None or self._units_index is not index:
            self._units = DeviceUnits(index)
            self._units_index = index
        return self._units

    def active(self, state: CycleState, pi: PodInfo) -> bool:
        pc = state.get("DynamicResources")
        return self.dynres is not None and pc is not None and bool(pc.to_allocate or pc.ext)

    def signature(self, state: CycleState, pi: PodInfo) -> Hashable:
        pc = state.get("DynamicResources")
        return (self.name, getattr(pc, "signature", None), self.version)

    def placement(
        self, state: CycleState, pi: PodInfo, ni: NodeInfo
    ) -> tuple[dict[UnitKey, float], dict[UnitKey, float], float] | None:
        """(free before, free after, pod's shape) for the pod's allocation on this node."""
        allocs = self.dynres.allocations_for(state, pi, ni)
        if allocs is None:
            return None
        units = self.units()
        before = units.free(ni.name, self.cache.dra)
        after = dict(before)
        fracs = []
        for alloc in allocs:
            for r in ((alloc or {}).get("devices") or {}).get("results") or []:
                use = units.result_use(ni.name, r)
                if use is None or use[0] not in after:
                    continue
                after[use[0]] = max(0.0, after[use[0]] - use[1])
                fracs.append(use[1])
        whole = all(f >= 1.0 - EPS for f in fracs)
        shape = float(len(fracs)) if whole else round(sum(fracs), 4)
        return before, after, shape


class DeviceFragmentation(_DeviceScore):
    name = "DeviceFragmentation"

    def __init__(self, weight: int = 10, shapes: Mapping[float, float] | None = None) -> None:
        super().__init__(weight)
        self.fixed = dict(shapes) if shapes else None
        self.seen: dict[float, float] = {}
        self._seen_pods: set[str] = set()

    def shapes(self) -> Mapping[float, float]:
        return self.fixed or self.seen or {1.0: 1.0}

    def score(self, state: CycleState, pi: PodInfo, ni: NodeInfo) -> int:
        got = self.placement(state, pi, ni)
        if got is None:
            return 0
        before, after, shape = got
        if self.fixed is None and pi.uid not in self._seen_pods and shape > 0:
            self._seen_pods.add(pi.uid)
            if shape not in self.seen:
                self.version += 1
            self.seen[shape] = self.seen.get(shape, 0.0) + 1.0
        n = max(1, len(before))
        shapes = self.shapes()
        delta = node_fragmentation(after.values(), shapes) - node_fragmentation(before.values(), shapes)
        return round(MAX_NODE_SCORE * (1.0 - delta / n))


class DeviceBinPack(_DeviceScore):
    """Prefer the node whose devices are most used after the placement (MostAllocated on devices)."""

    name = "DeviceBinPack"

    def score(self, state: CycleState, pi: PodInfo, ni: NodeInfo) -> int:
        got = self.placement(state, pi, ni)
        if got is None or not got[1]:
            return 0
        _before, after, _shape = got
        return round(MAX_NODE_SCORE * (1.0 - sum(after.values()) / len(after)))


class DeviceSpread(_DeviceScore):
    """Prefer the node with the most free device capacity after the placement (LeastAllocated on devices)."""

    name = "DeviceSpread"

    def score(self, state: CycleState, pi: PodInfo, ni: NodeInfo) -> int:
        got = self.placement(state, pi, ni)
        if got is None or not got[1]:
            return 0
        _before, after, _shape = got
        return round(MAX_NODE_SCORE * sum(after.values()) / len(after))


class DeviceLocality(_DeviceScore):
    """Prefer the node where the devices the allocator would give the pod share one PCIe root (100), else
    one NUMA node (50). A claim that must keep its devices together says so with matchAttribute (the
    allocator enforces it); this is the soft preference for claims that do not ask."""

    name = "DeviceLocality"

    def __init__(self, weight: int = 2) -> None:
        super().__init__(weight)
        self._attrs: dict[tuple[str, str, str], tuple[Any, Any]] = {}
        self._attrs_index: Any = None

    def _locality(self, key: tuple[str, str, str]) -> tuple[Any, Any]:
        index = self.cache.dra.index
        if self._attrs_index is not index:
            self._attrs = {}
            for sl in index.slices:
                for d in sl.devices:
                    root = d.attributes.get(PCIE_ROOT) or {}
                    numa = d.attributes.get(NUMA_NODE) or {}
                    self._attrs[d.key] = (root.get("string"), numa.get("int"))
            self._attrs_index = index
        return self._attrs.get(key, (None, None))

    def score(self, state: CycleState, pi: PodInfo, ni: NodeInfo) -> int:
        allocs = self.dynres.allocations_for(state, pi, ni) if self.dynres is not None else None
        keys = [
            (r.get("driver", ""), r.get("pool", ""), r.get("device", ""))
            for a in allocs or []
            for r in ((a or {}).get("devices") or {}).get("results") or []
        ]
        if len(keys) < 2:
            return MAX_NODE_SCORE
        locs = [self._locality(k) for k in keys]
        roots = {loc[0] for loc in locs}
        if len(roots) == 1 and None not in roots:
            return MAX_NODE_SCORE
        numas = {loc[1] for loc in locs}
        if len(numas) == 1 and None not in numas:
            return MAX_NODE_SCORE // 2
        return 0


PLACEMENT_POLICIES = ("upstream", "binpack", "spread", "fragmentation", "kdra")


def placement_plugins(policy: str, shapes: Mapping[float, float] | None = None) -> list[ScorePlugin]:
    """Score plugins for a placement policy; `shapes` (units -> popularity) fixes FGD's target workload.
    `kdra`: kdra's replay policy, learning the workload from the pods it sees, choosing the node and (through
    the plugin's `device_preference`) the GPUs (kdra.scheduler.policyplacement)."""
    if policy == "upstream":
        return []
    if policy == "binpack":
        return [DeviceBinPack()]
    if policy == "spread":
        return [DeviceSpread()]
    if policy == "fragmentation":
        return [DeviceFragmentation(shapes=shapes)]
    if policy == "kdra":
        from kdra.scheduler.gpupolicies import KdraPolicy
        from kdra.scheduler.policyplacement import FragmentationScore

        return [FragmentationScore(KdraPolicy)]
    raise ValueError(f"unknown placement policy {policy!r} (one of {', '.join(PLACEMENT_POLICIES)})")


def placement_preference(plugins: Iterable[object]) -> MeasuredPreference | None:
    """The device preference a placement's plugins bring (placement kdra chooses the GPUs too), or None."""
    return next((p.device_preference for p in plugins if hasattr(p, "device_preference")), None)


def cluster_fragmentation(dra: DraState, shapes: Mapping[float, float]) -> dict[str, float]:
    """Fleet figures: free units, FGD fragmentation (in units) and its share of the free capacity, and
    partly used units (idle fragments)."""
    units = DeviceUnits(dra.index)
    free_total = frag = 0.0
    partial = 0
    whole_free = 0
    for node in sorted(units.node_units):
        frees = units.free(node, dra)
        free_total += sum(frees.values())
        frag += node_fragmentation(frees.values(), shapes)
        partial += sum(1 for f in frees.values() if EPS < f < 1.0 - EPS)
        whole_free += sum(1 for f in frees.values() if f >= 1.0 - EPS)
    return {
        "free_units": round(free_total, 4),
        "fragmented_units": round(frag, 4),
        "fragmentation_ratio": round(frag / free_total, 4) if free_total else 0.0,
        "partly_used_units": partial,
        "wholly_free_units": whole_free,
    }
