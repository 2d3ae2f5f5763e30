"""Device preferences for the allocator's search: which devices of a node a pod gets, not only which node.

Each policy implements kdra.allocator.preference.DevicePreference: one sort key per candidate device
(whole devices, MIG placements, shares), lower first, upstream's order on ties. The allocator still checks
every rule, so the choice is always a valid allocation; a preference only decides among valid ones.

- `fragmentation`: keep the largest shapes the target workload needs placeable. FGD's measure
  (kdra.scheduler.fragmentation.unusable) over the node's units: for every shape the node offers (MIG
  profiles by their placement tables, whole devices, the request's own share size on shareable devices)
  the free capacity it could no longer use, plus, per PCIe root and NUMA node, the whole group (a PCIe
  pair, a NUMA quad) as one shape. A candidate is ranked by how much it raises that fragmentation, then by
  how many placements of each profile it removes (weighted by their size).
- `binpack`: the most used unit first (a share goes to the fullest GPU it fits), then the fullest PCIe
  root and NUMA node, so wholly free GPUs and pairs stay free.
- `spread`: the least used unit, PCIe root and NUMA node first.
- `topology`: devices sharing a PCIe root (then NUMA node, then NVLink domain) with the devices the pod
  already got in this allocation first; a request's first device goes where its whole count fits under one
  PCIe root (else NUMA node), the fullest such group first; devices of one group stay together.

All four first take the smallest device that serves the request (a selector such as "at least 10Gi" matches
every MIG profile from 1g.10gb up to the whole GPU: a bigger one only wastes it); the policy decides
among devices of that size.

`compare_with_first_fit` scores a preference's choice against upstream's first fit for explanations.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from kdra.allocator import AllocatedState, Allocator
from kdra.allocator.index import DeviceEntry, NodeView
from kdra.allocator.preference import DevicePreference, RequestView, SearchContext, SortKey
from kdra.scheduler.fragmentation import (
    EPS,
    NUMA_NODE,
    NVLINK_DOMAIN,
    PCIE_ROOT,
    WHOLE,
    Unit,
    UnitTable,
    attr_value,
    device_kind,
)

DEVICE_PREFERENCES = ("fragmentation", "binpack", "spread", "topology")
GROUP_ATTRIBUTES = (PCIE_ROOT, NUMA_NODE)  # within a node: the groups whose wholeness is worth keeping
_MEMO_MAX = 200_000


class StateProbe:
    """What a policy reads about a node's state: a SearchContext during a search, or a state with an
    allocation applied (for explanations). Methods: in_use, shared_in_use, consumed, counters_left."""

    def __init__(self, allocator: Allocator, state: AllocatedState) -> None:
        self._allocator = allocator
        self.state = state

    def in_use(self, dev: DeviceEntry) -> bool:
        return dev.key in self.state.dedicated

    def shared_in_use(self, dev: DeviceEntry) -> bool:
        return dev.key in self.state.shared

    def consumed(self, dev: DeviceEntry) -> dict[str, int]:
        return dict(self.state.consumed.get(dev.key) or {})

    def counters_left(self, pool_index: int, view: NodeView) -> dict[str, dict[str, int]]:
        avail, _broken = self._allocator.available_counters(view.pools[pool_index])
        return avail


Probe = SearchContext | StateProbe  # what a policy reads a node's state through


class MeasuredPreference(DevicePreference, Protocol):
    """A device preference that also measures a node's state (reports compare it with first fit)."""

    measure_name: str

    def measure(self, view: NodeView, probe: Probe, devices: Sequence[DeviceEntry]) -> float: ...


class _Node:
    """A node view's units plus where each device sits (cached per NodeView)."""

    def __init__(self, view: NodeView) -> None:
        sets: dict[tuple[str, str, str], dict[str, int]] = {}
        for pool in view.pools:
            for name, counters in (pool.counter_sets or {}).items():
                sets[(pool.driver, pool.name, name)] = counters
        self.view = view
        self.table = UnitTable(view.devices, sets)
        self.pool_of: dict[int, int] = {
            id(d): pi for d, pi in zip(view.devices, view.device_pool, strict=True)
        }
        self.use_of: dict[int, tuple[tuple[int, int], ...]] = {}
        for u in self.table.units:
            for placements in u.placements.values():
                for d, use in placements:
                    self.use_of[id(d)] = use
        self.kinds = self.table.kinds()
        self.sizes: list[dict[str, float]] = [
            {k: self.table.of[pl[0][0].key][1] for k, pl in u.placements.items() if pl}
            for u in self.table.units
        ]
        self.group_size: dict[str, int] = {}
        self.groups: dict[str, dict[Any, list[int]]] = {}
        self.group_of: dict[str, list[Any]] = {}
        for attr in GROUP_ATTRIBUTES:
            groups = {v: ui for v, ui in self.table.groups(attr).items()}
            if groups and max(len(ui) for ui in groups.values()) >= 2:
                self.groups[attr] = groups
                self.group_size[attr] = max(len(ui) for ui in groups.values())
                of: list[Any] = [None] * len(self.table.units)
                for v, uis in groups.items():
                    for i in uis:
                        of[i] = v
                self.group_of[attr] = of


_NODES: dict[int, tuple[NodeView, _Node]] = {}


def node_model(view: NodeView) -> _Node:
    hit = _NODES.get(id(view))
    if hit is not None and hit[0] is view:
        return hit[1]
    if len(_NODES) > 4096:
        _NODES.clear()
    model = _Node(view)
    _NODES[id(view)] = (view, model)
    return model


class _UnitState:
    """One unit's state under a probe: free fraction, counters left (partitionable), untouched."""

    __slots__ = ("free", "left", "untouched")

    def __init__(self, free: float, left: tuple[int, ...] | None, untouched: bool) -> None:
        self.free = free
        self.left = left
        self.untouched = untouched


def _main_capacity(dev: DeviceEntry) -> str | None:
    if "memory" in dev.capacity:
        return "memory"
    return next(iter(sorted(dev.capacity)), None)


def _left_free(unit: Unit, left: tuple[int, ...]) -> float:
    totals = unit.counters or {}
    names = unit.counter_names
    if totals.get("memory"):
        return max(0.0, left[names.index("memory")] / totals["memory"])
    fr = [left[i] / totals[c] for i, c in enumerate(names) if totals.get(c)]
    return max(0.0, min(fr)) if fr else 1.0


def unit_state(node: _Node, ui: int, probe: Probe, ctx_view: NodeView) -> _UnitState:
    unit = node.table.units[ui]
    if unit.counters is not None:
        pi = node.pool_of[id(unit.devices[0])]
        left = unit.remaining(_counters_left(probe, pi, ctx_view).get(unit.key[2], {}))
        return _UnitState(_left_free(unit, left), left, left == unit.remaining(unit.counters))
    if unit.shared:
        dev = unit.devices[0]
        cap = _main_capacity(dev)
        used = probe.in_use(dev)
        if cap is None:
            return _UnitState(0.0 if used else 1.0, None, not used and not probe.shared_in_use(dev))
        total = dev.capacity[cap].value.nanos
        consumed = probe.consumed(dev).get(cap, 0)
        free = 0.0 if used else max(0.0, (total - consumed) / total) if total > 0 else 0.0
        return _UnitState(free, None, not used and not probe.shared_in_use(dev) and consumed == 0)
    of = node.table.of
    free = 1.0
    for d in unit.devices:
        if probe.in_use(d):
            free -= of[d.key][1]
    free = max(0.0, free)
    return _UnitState(free, None, free >= 1.0 - EPS)


def _counters_left(probe: Probe, pi: int, view: NodeView) -> dict[str, dict[str, int]]:
    if isinstance(probe, SearchContext):
        return probe.counters_left(pi)
    left: dict[str, dict[str, int]] = probe.counters_left(pi, view)
    return left


def _after(node: _Node, ui: int, st: _UnitState, dev: DeviceEntry, request: RequestView | None) -> _UnitState:
    """The unit's state once `dev` is given to the request."""
    unit = node.table.units[ui]
    if unit.counters is not None and st.left is not None:
        left = list(st.left)
        for i, amount in node.use_of.get(id(dev), ()):
            left[i] -= amount
        lt = tuple(left)
        return _UnitState(_left_free(unit, lt), lt, False)
    if unit.shared:
        cap = _main_capacity(dev)
        reqs = request.capacity_requests if request is not None else None
        if cap is None or not reqs or cap not in reqs:
            return _UnitState(0.0, None, False)
        total = dev.capacity[cap].value.nanos
        take = reqs[cap].nanos / total if total > 0 else 1.0
        return _UnitState(max(0.0, st.free - take), None, False)
    return _UnitState(max(0.0, st.free - node.table.of[dev.key][1]), None, False)


# -- fragmentation -------------------------------------------------------------------------------


class FragmentationPreference:
    """FGD on the node's units (module docstring). `targets`: shape -> weight (a MIG profile name such as
    `3g.40gb`, `whole`, `gpu`, or a locality attribute such as resource.kubernetes.io/pcieRoot for its
    whole groups); by default every shape the node offers and every locality group weigh 1."""

    name = "fragmentation"

    def __init__(self, targets: Mapping[str, float] | None = None) -> None:
        self.targets = dict(targets) if targets else None
        self._memo: dict[tuple[Any, ...], tuple[tuple[bool, ...], float]] = {}

    def _weights(self, node: _Node) -> list[tuple[str, float]]:
        if self.targets is None:
            return [(k, 1.0) for k in node.kinds]
        return [(k, w) for k, w in self.targets.items() if w > 0 and k not in GROUP_ATTRIBUTES]

    def _group_weight(self, attr: str) -> float:
        if self.targets is None:
            return 1.0
        return float(self.targets.get(attr, 0.0))

    def _fits(
        self,
        node: _Node,
        ui: int,
        st: _UnitState,
        kinds: list[tuple[str, float]],
        share: float | None,
        kinds_key: Any = None,
    ) -> tuple[tuple[bool, ...], float]:
        """Per target kind (and the request's share size, when it is a share) whether one member fits
        the unit, and the unit's placeable capacity."""
        fits, cap = self._kind_fits(node, ui, st, kinds, kinds_key)
        if share is not None:
            fits = (*fits, st.free >= share - EPS)
        return fits, cap

    def _kind_fits(
        self, node: _Node, ui: int, st: _UnitState, kinds: list[tuple[str, float]], kinds_key: Any = None
    ) -> tuple[tuple[bool, ...], float]:
        unit = node.table.units[ui]
        if unit.counters is not None and st.left is not None:
            key = (unit.signature, st.left, kinds_key if kinds_key is not None else tuple(kinds))
            hit = self._memo.get(key)
            if hit is not None:
                return hit
            fits = []
            cap = 0.0
            size = node.sizes[ui]
            for k, w in kinds:
                n = unit.placeable(k, st.left)
                fits.append(n > 0)
                cap += w * size.get(k, 0.0) * n
            if len(self._memo) > _MEMO_MAX:
                self._memo.clear()
            out = (tuple(fits), cap)
            self._memo[key] = out
            return out
        if unit.key[2].startswith("parent:"):
            return tuple(
                any(device_kind(d) == k for d in unit.devices) and st.free > EPS for k, _w in kinds
            ), st.free
        return tuple(k == WHOLE and st.untouched for k, _w in kinds), st.free

    def _unit_frag(self, fits: tuple[bool, ...], weights: list[float], free: float) -> float:
        return sum(w * free for ok, w in zip(fits, weights, strict=True) if not ok)

    def _group_frag(self, frees: list[float], whole: list[bool], size: int) -> float:
        # FGD for a shape of `size` wholly free units within one group.
        if sum(1 for ok in whole if ok) < size:
            return sum(frees)
        return sum(f for f, ok in zip(frees, whole, strict=True) if not ok)

    def keys(self, ctx: SearchContext, request: RequestView, devices: Sequence[DeviceEntry]) -> list[SortKey]:
        node = node_model(ctx.view)
        kinds = self._weights(node)
        kinds_key = tuple(kinds)
        weights = [w for _k, w in kinds]
        share = _share_size(request, devices)
        if share is not None:
            weights = [*weights, 1.0]
        states: dict[int, _UnitState] = {}
        before: dict[int, tuple[tuple[bool, ...], float, float]] = {}  # unit -> fits, capacity, frag
        groups_before: dict[tuple[str, Any], tuple[list[float], list[bool], float]] = {}
        seen: dict[tuple[int, Any, Any], tuple[float, float, float]] = {}  # (unit, after state) -> key

        def state(i: int) -> _UnitState:
            st = states.get(i)
            if st is None:
                st = states[i] = unit_state(node, i, ctx, ctx.view)
            return st

        out: list[Any] = []
        of = node.table.of
        for dev in devices:
            hit = of.get(dev.key)
            if hit is None:
                out.append((0.0, 0.0, 0.0))
                continue
            ui = hit[0]
            st = state(ui)
            after = _after(node, ui, st, dev, request)
            memo_key = (ui, after.left, round(after.free, 9))
            got = seen.get(memo_key)
            if got is not None:
                out.append(got)
                continue
            b = before.get(ui)
            if b is None:
                f0, c0 = self._fits(node, ui, st, kinds, share, kinds_key)
                b = before[ui] = (f0, c0, self._unit_frag(f0, weights, st.free))
            f1, c1 = self._fits(node, ui, after, kinds, share, kinds_key)
            delta = self._unit_frag(f1, weights, after.free) - b[2]
            for attr, groups in node.groups.items():
                w = self._group_weight(attr)
                value = node.group_of[attr][ui]
                if not w or value is None:
                    continue
                members = groups[value]
                gb = groups_before.get((attr, value))
                if gb is None:
                    sts = [state(i) for i in members]
                    frees = [x.free for x in sts]
                    whole = [x.untouched for x in sts]
                    gb = groups_before[(attr, value)] = (
                        frees,
                        whole,
                        self._group_frag(frees, whole, node.group_size[attr]),
                    )
                frees, whole = list(gb[0]), list(gb[1])
                j = members.index(ui)
                frees[j], whole[j] = after.free, after.untouched
                delta += w * (self._group_frag(frees, whole, node.group_size[attr]) - gb[2])
            key = (round(hit[1], 6), round(delta, 9), round(b[1] - c1, 9))
            seen[memo_key] = key
            out.append(key)
        return out

    def measure(self, view: NodeView, probe: Probe, devices: Sequence[DeviceEntry]) -> float:
        """The node's fragmentation (GPU units the target shapes cannot use), lower is better."""
        node = node_model(view)
        kinds = self._weights(node)
        weights = [w for _k, w in kinds]
        states = [unit_state(node, i, probe, view) for i in range(len(node.table.units))]
        total = 0.0
        weight = sum(weights)
        for i, st in enumerate(states):
            fits, _cap = self._fits(node, i, st, kinds, None)
            total += self._unit_frag(fits, weights, st.free)
        for attr, groups in node.groups.items():
            w = self._group_weight(attr)
            if not w:
                continue
            weight += w
            size = node.group_size[attr]
            for members in groups.values():
                total += w * self._group_frag(
                    [states[i].free for i in members], [states[i].untouched for i in members], size
                )
        return round(total / weight, 4) if weight else 0.0

    measure_name = (
        "fragmentation: free GPUs a target shape (mean over the shapes) could not use; lower is better"
    )


def _share_size(request: RequestView, devices: Sequence[DeviceEntry]) -> float | None:
    """The fraction of a shareable device one share of this request takes (None: not a share)."""
    reqs = request.capacity_requests
    if not reqs:
        return None
    for d in devices:
        if d.allow_multi:
            cap = _main_capacity(d)
            if cap is not None and cap in reqs and d.capacity[cap].value.nanos > 0:
                return float(reqs[cap].nanos / d.capacity[cap].value.nanos)
    return None


# -- bin packing and spread ----------------------------------------------------------------------


class _ByUse:
    reverse = False

    def keys(
        self, ctx: SearchContext, request: RequestView, devices: Sequence[DeviceEntry]
    ) -> list[tuple[float, ...]]:
        node = node_model(ctx.view)
        states: dict[int, _UnitState] = {}
        gfree: dict[tuple[str, Any], float] = {}
        sign = -1.0 if self.reverse else 1.0
        out: list[tuple[float, ...]] = []
        of = node.table.of
        for dev in devices:
            hit = of.get(dev.key)
            if hit is None:
                out.append((0.0, 0.0))
                continue
            ui = hit[0]
            st = states.get(ui)
            if st is None:
                st = states[ui] = unit_state(node, ui, ctx, ctx.view)
            key = [round(hit[1], 6), sign * round(st.free, 9)]
            for attr, groups in node.groups.items():
                value = node.group_of[attr][ui]
                if value is None:
                    key.append(0.0)
                    continue
                g = gfree.get((attr, value))
                if g is None:
                    g = gfree[(attr, value)] = sum(
                        (states.get(i) or states.setdefault(i, unit_state(node, i, ctx, ctx.view))).free
                        for i in groups[value]
                    )
                key.append(sign * round(g, 9))
            out.append(tuple(key))
        return out

    def measure(self, view: NodeView, probe: Probe, devices: Sequence[DeviceEntry]) -> float:
        node = node_model(view)
        frees = [unit_state(node, i, probe, view).free for i in range(len(node.table.units))]
        if not frees:
            return 0.0
        if self.reverse:  # spread: how unevenly the units are used (standard deviation of their use)
            mean = sum(frees) / len(frees)
            return round(math.sqrt(sum((f - mean) ** 2 for f in frees) / len(frees)), 4)
        return round(sum(f for f in frees if f < 1.0 - EPS), 4)  # binpack: free capacity of partly used units


class BinPackPreference(_ByUse):
    name = "binpack"
    measure_name = "binpack: free capacity left on partly used GPUs (lower is better)"


class SpreadPreference(_ByUse):
    name = "spread"
    reverse = True
    measure_name = "spread: standard deviation of GPU use across the node (lower is better)"


# -- topology ------------------------------------------------------------------------------------

_AFFINITY = ((PCIE_ROOT, 4), (NUMA_NODE, 2), (NVLINK_DOMAIN, 1))


class TopologyPreference:
    name = "topology"
    measure_name = "topology: distinct PCIe roots + NUMA nodes among the pod's devices (lower is better)"

    def __init__(self) -> None:
        self._packing = BinPackPreference()

    def keys(self, ctx: SearchContext, request: RequestView, devices: Sequence[DeviceEntry]) -> list[SortKey]:
        chosen = ctx.chosen()
        near = {attr: {attr_value(d, attr) for d in chosen} - {None} for attr, _w in _AFFINITY}
        node = node_model(ctx.view)
        states: dict[int, _UnitState] = {}

        def available(d: DeviceEntry) -> bool:
            if ctx.in_use(d):
                return False
            hit = node.table.of.get(d.key)
            if hit is None:
                return True
            st = states.get(hit[0])
            if st is None:
                st = states[hit[0]] = unit_state(node, hit[0], ctx, ctx.view)
            if st.left is None:
                return st.free > EPS
            return all(st.left[i] >= amount for i, amount in node.use_of.get(id(d), ()))

        # Room per group: units with a device of this request still available.
        room: dict[tuple[str, Any], set[Any]] = {}
        for d in devices:
            if available(d):
                unit = node.table.of[d.key][0] if d.key in node.table.of else d.key
                for attr in (PCIE_ROOT, NUMA_NODE):
                    v = attr_value(d, attr)
                    if v is not None:
                        room.setdefault((attr, v), set()).add(unit)
        # The whole pod's devices of this class from here on should fit one group, not just this request's.
        here = (request.claim_index, request.request_index)
        need = sum(
            r.count
            for r in ctx.requests()
            if (r.claim_index, r.request_index) >= here and r.class_name == request.class_name
        )
        packing = self._packing.keys(ctx, request, devices)
        out: list[Any] = []
        for d, pack in zip(devices, packing, strict=True):
            key: list[Any] = [pack[0], -sum(w for attr, w in _AFFINITY if attr_value(d, attr) in near[attr])]
            for attr in (PCIE_ROOT, NUMA_NODE):
                v = attr_value(d, attr)
                n = len(room.get((attr, v), ())) if v is not None else 0
                key.append(0 if n >= need else 1)  # groups that hold the whole request first
            key.append(pack)  # then as bin packing: the fullest unit and group
            # devices of a group together
            key += [str(attr_value(d, NUMA_NODE)), str(attr_value(d, PCIE_ROOT))]
            out.append(tuple(key))
        return out

    def measure(self, view: NodeView, probe: Probe, devices: Sequence[DeviceEntry]) -> float:
        return float(sum(len({attr_value(d, a) for d in devices} - {None}) for a in (PCIE_ROOT, NUMA_NODE)))


DevicePolicy = FragmentationPreference | BinPackPreference | SpreadPreference | TopologyPreference


def make_device_preference(name: str, targets: Mapping[str, float] | None = None) -> DevicePolicy:
    """A device preference by name (DEVICE_PREFERENCES); `targets` only for `fragmentation`."""
    if name == "fragmentation":
        return FragmentationPreference(targets)
    if name == "binpack":
        return BinPackPreference()
    if name == "spread":
        return SpreadPreference()
    if name == "topology":
        return TopologyPreference()
    raise ValueError(f"unknown device preference {name!r} (one of {', '.join(DEVICE_PREFERENCES)})")


# -- explanations --------------------------------------------------------------------------------


def _devices_of(view: NodeView, allocations: Sequence[Mapping[str, Any]]) -> list[DeviceEntry]:
    by_key = {d.key: d for d in view.devices}
    out = []
    for alloc in allocations:
        for r in ((alloc or {}).get("devices") or {}).get("results") or []:
            d = by_key.get((r.get("driver", ""), r.get("pool", ""), r.get("device", "")))
            if d is not None:
                out.append(d)
    return out


def _ids(allocations: Sequence[Mapping[str, Any]]) -> list[str]:
    return [
        f"{r.get('driver')}/{r.get('pool')}/{r.get('device')}"
        for a in allocations
        for r in ((a or {}).get("devices") or {}).get("results") or []
    ]


def score_allocation(
    policy: MeasuredPreference,
    allocator: Allocator,
    node: Mapping[str, Any],
    allocations: Sequence[Mapping[str, Any]],
) -> float:
    """The policy's measure of the node once `allocations` are added to the allocator's state."""
    state = AllocatedState()
    base = allocator.state
    for key in base.dedicated:
        state.dedicated.add(key)
    for key in base.shared:
        state.shared.add(key)
    for key, consumed in base.consumed.items():
        state.consumed[key] = dict(consumed)
    for alloc in allocations:
        for r in ((alloc or {}).get("devices") or {}).get("results") or []:
            state.add_result(r, allocator.features)
    probe_alloc = Allocator.from_index(allocator.index, state)
    view = allocator.index.node_view(node)
    return policy.measure(view, StateProbe(probe_alloc, state), _devices_of(view, allocations))


def compare_with_first_fit(
    policy: MeasuredPreference,
    allocator: Allocator,
    node: Mapping[str, Any],
    claims: Sequence[Mapping[str, Any]],
    chosen: Sequence[Mapping[str, Any]],
    first_fit: Callable[[], Sequence[Mapping[str, Any]] | None] | None = None,
) -> dict[str, Any]:
    """What decided the devices: `decidedBy` is `preference` when upstream's first fit (the same claims,
    state and node without the preference) would have taken other devices, else `rules`; with the
    policy, its measure and both sets' scores."""
    ff: Sequence[Mapping[str, Any]] | None
    if first_fit is None:
        plain = Allocator.from_index(allocator.index, allocator.state, max_steps=allocator.max_steps)
        ff = plain.allocate(node, list(claims)).allocations
    else:
        ff = first_fit()
    chosen_ids = _ids(chosen)
    out: dict[str, Any] = {
        "policy": policy.name,
        "measure": policy.measure_name,
        "chosen": {"devices": chosen_ids, "score": score_allocation(policy, allocator, node, chosen)},
    }
    if ff is not None:
        out["firstFit"] = {"devices": _ids(ff), "score": score_allocation(policy, allocator, node, ff)}
        out["decidedBy"] = "preference" if _ids(ff) != chosen_ids else "rules"
    else:
        out["decidedBy"] = "preference"
    return out


def describe_choice(cmp: Mapping[str, Any]) -> str:
    """One line for people."""
    if cmp.get("decidedBy") == "rules":
        return f"devices: first fit; the {cmp['policy']} preference agreed (score {cmp['chosen']['score']:g})"
    ff = cmp.get("firstFit")
    if ff is None:
        return f"devices chosen by the {cmp['policy']} preference (score {cmp['chosen']['score']:g})"
    return (
        f"devices chosen by the {cmp['policy']} preference, not a rule: score {cmp['chosen']['score']:g} "
        f"against {ff['score']:g} for first fit ({', '.join(d.rsplit('/', 1)[-1] for d in ff['devices'])})"
    )
