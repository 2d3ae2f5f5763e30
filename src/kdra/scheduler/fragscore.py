"""Fragmentation on DRA devices (FGD, Weng et al., ATC'23) and device-aware node scores.

The unit of accelerator capacity is a physical device: a GPU whose MIG placements share a counter set
(DynamicMIG: `gpu-<n>-counter-set`) is one unit whatever is carved out of it, as are static partitions with
the same `parentUUID` attribute (each holds its memory over their sum); any other device is one unit. A
unit's free fraction counts what its claims hold: a dedicated device takes all of a standalone unit, a
partition takes its share of the counter set's `memory` counter (or of its first counter),
a share of a shareable device (consumable capacity) its consumedCapacity over the device's capacity.

FGD's fragmentation of a node for a task shape d (d < 1: a fraction of one unit; d >= 1: d whole units) is
the free capacity that task cannot use: for a fraction, the free capacity of units with less than d free;
for whole units, all free capacity when fewer than d units are wholly free, else the free capacity of
partly used units. A node's fragmentation is the popularity-weighted sum over the target workload's shapes
(by default the shapes of the pods seen so far). `DeviceFragmentation` scores a node by how little the
pod's allocation there (the devices the allocator would pick) increases it; `DeviceBinPack` and
`DeviceSpread` score by the node's device use after the placement. Upstream's behaviour (first node by the
NodeResourcesFit score, first fitting devices) stays the default: these plugins are opt-in.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import Any

from kdra.api.quantity import parse_quantity_any
from kdra.scheduler.framework import MAX_NODE_SCORE, CycleState, ScorePlugin
from kdra.scheduler.podinfo import NodeInfo, PodInfo

EPS = 1e-9
Unit = tuple[str, str, str]  # (driver, pool, counter set or device name)


class DeviceUnits:
    """Per node: its units, and per device: the unit it belongs to and the fraction it holds."""

    def __init__(self, index: Any) -> None:
        self.node_units: dict[str, list[Unit]] = {}
        self.device: dict[tuple[str, str, str], tuple[Unit, float, float]] = {}  # key -> unit, frac, mem cap
        sets: dict[tuple[str, str, str], dict[str, int]] = {}
        pool_node: dict[tuple[str, str], str] = {}
        for s in index.slices:
            for name, counters in s.shared_counters:
                sets[(s.driver, s.pool, name)] = counters
            if s.node_name:
                pool_node[(s.driver, s.pool)] = s.node_name
        seen: set[Unit] = set()
        parent_mem: dict[Unit, float] = {}  # static partitions (MIG without counters): their GPU's memory
        for s in index.slices:
            node = s.node_name or pool_node.get((s.driver, s.pool), "")
            if not node:
                continue
            units = self.node_units.setdefault(node, [])
            for d in s.devices:
                mem = d.capacity.get("memory")
                memcap = float(mem.value.value()) if mem is not None else 0.0
                parent = (d.attributes.get("parentUUID") or {}).get("string")
                if parent and not d.consumes:
                    unit = (s.driver, s.pool, f"parent:{parent}")
                    parent_mem[unit] = parent_mem.get(unit, 0.0) + memcap
                    frac = memcap  # over the parent's memory, once all its partitions are known
                elif d.consumes:
                    cs, used = d.consumes[0]
                    unit = (s.driver, s.pool, cs)
                    total = sets.get(unit, {})
                    usedd = dict(used)
                    counter = "memory" if "memory" in usedd and total.get("memory") else None
                    if counter is None:
                        counter = next((c for c, _v in used if total.get(c)), None)
                    frac = min(1.0, usedd[counter] / total[counter]) if counter else 1.0
                else:
                    unit = (s.driver, s.pool, d.name)
                    frac = 1.0
                self.device[d.key] = (unit, frac, memcap)
                if unit not in seen:
                    seen.add(unit)
                    units.append(unit)
        for key, (unit, frac, memcap) in self.device.items():
            psum = parent_mem.get(unit)
            if psum is not None:
                self.device[key] = (unit, min(1.0, frac / psum) if psum else 1.0, memcap)

    def result_use(self, result: Mapping[str, Any]) -> tuple[Unit, float] | None:
        key = (result.get("driver", ""), result.get("pool", ""), result.get("device", ""))
        hit = self.device.get(key)
        if hit is None:
            return None
        unit, frac, memcap = hit
        consumed = result.get("consumedCapacity")
        if result.get("shareID") is not None and consumed is not None and memcap:
            mem = consumed.get("memory")
            if mem is not None:
                return unit, min(1.0, parse_quantity_any(mem).value() / memcap)
        return unit, frac

    def free(self, node: str, dra: Any) -> dict[Unit, float]:
        """Free fraction per unit of `node` under the scheduler's allocated (and assumed) state."""
        units = self.node_units.get(node)
        if not units:
            return {}
        free = dict.fromkeys(units, 1.0)
        state = dra.state
        for key in state.dedicated:
            hit = self.device.get(key)
            if hit is not None and hit[0] in free:
                free[hit[0]] -= hit[1]
        for key, consumed in state.consumed.items():
            hit = self.device.get(key)
            if hit is not None and hit[0] in free and hit[2]:
                free[hit[0]] -= consumed.get("memory", 0) / 1e9 / hit[2]
        return {u: max(0.0, min(1.0, f)) for u, f in free.items()}


def shape_fragment(frees: Iterable[float], d: float) -> float:
    """FGD: free capacity a task of shape d cannot use on a node with these unit free fractions."""
    fr = list(frees)
    if d < 1.0 - EPS:
        return sum(f for f in fr if f < d - EPS)
    whole = sum(1 for f in fr if f >= 1.0 - EPS)
    if whole < round(d):
        return sum(fr)
    return sum(f for f in fr if f < 1.0 - EPS)


def node_fragmentation(frees: Iterable[float], shapes: Mapping[float, float]) -> float:
    fr = list(frees)
    total = sum(shapes.values())
    if total <= 0:
        return 0.0
    return sum(p * shape_fragment(fr, d) for d, p in shapes.items()) / total


class _DeviceScore(ScorePlugin):
    """Shared machinery: the pod's allocation on the node (from DynamicResources) applied to the units."""

    def __init__(self, weight: int = 10) -> None:
        self.weight = weight
        self.dynres: Any = None  # the profile's DynamicResources plugin (linked by kdra.scheduler.session)
        self._units: DeviceUnits | None = None
        self._units_index: Any = None
        self.version = 0

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
    ) -> tuple[dict[Unit, float], dict[Unit, float], float] | None:
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
                use = units.result_use(r)
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


PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
NUMA_NODE = "resource.kubernetes.io/numaNode"


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


PLACEMENT_POLICIES = ("upstream", "binpack", "spread", "fragmentation")


def placement_plugins(policy: str, shapes: Mapping[float, float] | None = None) -> list[ScorePlugin]:
    """Score plugins for a placement policy; `shapes` (units -> popularity) fixes FGD's target workload."""
    if policy == "upstream":
        return []
    if policy == "binpack":
        return [DeviceBinPack()]
    if policy == "spread":
        return [DeviceSpread()]
    if policy == "fragmentation":
        return [DeviceFragmentation(shapes=shapes)]
    raise ValueError(f"unknown placement policy {policy!r} (one of {', '.join(PLACEMENT_POLICIES)})")


def cluster_fragmentation(dra: Any, shapes: Mapping[float, float]) -> dict[str, float]:
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
