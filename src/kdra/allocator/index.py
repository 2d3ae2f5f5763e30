"""Per-slice device indexes, pool gathering per node, and the selector-result cache.

Everything here depends only on DeviceClasses, ResourceSlices, the node and the feature gates, never
on what is in use, so it is built once and reused: a scheduler keeps one `AllocatorIndex` across many
nodes and cycles and pairs it with a cheap per-cycle `AllocatedState` (allocator.py).

Slices are compiled into `SliceEntry`/`DeviceEntry` objects once per slice version and kept in a
`SliceCache` keyed by uid (or name) plus resourceVersion when the object has one, the object itself
otherwise, and reused only for the same object or equal content (keys collide across stores). CEL
selector results are memoised on the `DeviceEntry`, keyed by the selector list, so re-evaluating a
class or request selector for a device is a dict lookup; expensive results are also kept by device
content, so republishing a slice does not re-run them. `cel_budget` bounds the new CEL work of one
scheduling attempt (CelBudgetExhausted), so that one user's expensive selectors cannot stall everyone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, cast

from kdra.allocator._nodes import node_matches
from kdra.allocator.taintrules import (
    SliceRuleTaints,
    compile_rules,
    fingerprint,
    slice_rule_taints,
)
from kdra.api.features import FeatureGates
from kdra.api.quantity import Quantity, parse_quantity_any
from kdra.cel import (
    CELCompileError,
    CelDevice,
    CELRuntimeError,
    compile_selector,
    device_input,
    selector_input_key,
)
from kdra.errors import AllocationError, InputError

# ---------------------------------------------------------------------------------------------
# Attributes
# ---------------------------------------------------------------------------------------------

_SCALAR_KINDS = ("int", "bool", "string", "version")
_LIST_KINDS = ("ints", "bools", "strings", "versions")
# A DeviceAttribute's value as the allocator compares it: the scalar, or a list's items as a set.
AttributeScalar = int | bool | str
AttributeValue = AttributeScalar | frozenset[AttributeScalar]


def attribute_value(raw: object) -> tuple[str, AttributeValue] | None:
    """(kind, value) of a DeviceAttribute dict; lists become frozensets. None if no known field.

    The order follows upstream's attributeAsSet: non-empty lists first, then scalars.
    """
    if not isinstance(raw, Mapping):
        return None
    for kind in _LIST_KINDS:
        vals = raw.get(kind)
        if vals:
            try:
                return kind, frozenset(vals)
            except TypeError:
                return None
    for kind in _SCALAR_KINDS:
        if raw.get(kind) is not None:
            return kind, raw[kind]
    return None


def display_attribute(raw: object) -> str:
    av = attribute_value(raw)
    if av is None:
        return "<unset>"
    kind, value = av
    if kind in _LIST_KINDS:
        items = cast(Mapping[str, Any], raw).get(kind) or []
        return "[" + ", ".join(str(v).lower() if isinstance(v, bool) else str(v) for v in items) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# ---------------------------------------------------------------------------------------------
# Capacity request policies
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RequestPolicy:
    default: Quantity | None
    valid_values: tuple[Quantity, ...] | None  # None when not set; () when set but empty
    has_range: bool
    range_min: Quantity | None
    range_max: Quantity | None
    range_step: Quantity | None


@dataclass(frozen=True, slots=True)
class CapacityEntry:
    value: Quantity
    policy: RequestPolicy | None


def _quantity(raw: Any, where: str) -> Quantity:
    try:
        return parse_quantity_any(raw)
    except ValueError as exc:
        raise InputError(f"{where}: Invalid value: {raw!r}: {exc}") from exc


def _parse_policy(raw: Any, where: str) -> RequestPolicy | None:
    if not isinstance(raw, Mapping):
        return None
    default = _quantity(raw["default"], where + ".default") if raw.get("default") is not None else None
    valid_values: tuple[Quantity, ...] | None = None
    if raw.get("validValues") is not None:
        valid_values = tuple(
            _quantity(v, f"{where}.validValues[{i}]") for i, v in enumerate(raw["validValues"])
        )
    rng = raw.get("validRange")
    has_range = isinstance(rng, Mapping)
    rmin = rmax = rstep = None
    if has_range:
        assert isinstance(rng, Mapping)
        if rng.get("min") is not None:
            rmin = _quantity(rng["min"], where + ".validRange.min")
        if rng.get("max") is not None:
            rmax = _quantity(rng["max"], where + ".validRange.max")
        if rng.get("step") is not None:
            rstep = _quantity(rng["step"], where + ".validRange.step")
    return RequestPolicy(default, valid_values, has_range, rmin, rmax, rstep)


# ---------------------------------------------------------------------------------------------
# Devices and slices
# ---------------------------------------------------------------------------------------------

# Selector evaluation results cached per device: MATCH, the index of the first selector that returned
# false, or a SelectorError (compile or runtime error, re-raised with the class/claim named by the caller).
MATCH = -1
MAX_CACHED_SELECTOR_SETS = 512  # per device, and candidate lists per node view


@dataclass(frozen=True, slots=True)
class SelectorError:
    index: int
    compile_error: bool
    message: str


SelectorResult = int | SelectorError


class DeviceEntry:
    """One device of one slice version, with everything the search needs pre-parsed."""

    __slots__ = (
        "_cel",
        "all_nodes",
        "allow_multi",
        "attributes",
        "binding_conditions",
        "binding_failure_conditions",
        "binds_to_node",
        "capacity",
        "capacity_raw",
        "compat_groups",
        "consumes",
        "driver",
        "has_policy",
        "key",
        "matches",
        "name",
        "node_name",
        "node_selector",
        "pool",
        "raw",
        "slice",
        "taint_rules",
        "taints",
    )

    def __init__(
        self,
        raw: Mapping[str, Any],
        slice_: SliceEntry,
        where: str,
        rule_taints: Sequence[tuple[str, Mapping[str, Any]]] = (),
    ) -> None:
        self.raw = raw
        self.slice = slice_
        self.name: str = raw.get("name", "")
        self.driver = slice_.driver
        self.pool = slice_.pool
        self.key: tuple[str, str, str] = (self.driver, self.pool, self.name)
        self.attributes: Mapping[str, Any] = raw.get("attributes") or {}
        self.capacity_raw: Mapping[str, Any] = raw.get("capacity") or {}
        cap: dict[str, CapacityEntry] = {}
        for cname, craw in self.capacity_raw.items():
            cwhere = f"{where}.capacity[{cname}]"
            value = _quantity((craw or {}).get("value", "0"), cwhere + ".value")
            cap[cname] = CapacityEntry(value, _parse_policy((craw or {}).get("requestPolicy"), cwhere))
        self.capacity = cap
        self.has_policy = any(c.policy is not None or c.value.nanos < 0 for c in cap.values())
        self.allow_multi: bool = bool(raw.get("allowMultipleAllocations"))
        consumes: list[tuple[str, tuple[tuple[str, int], ...]]] = []
        compat: list[frozenset[str]] = []
        for i, cc in enumerate(raw.get("consumesCounters") or []):
            counters = tuple(
                (n, _quantity((c or {}).get("value", "0"), f"{where}.consumesCounters[{i}].{n}").nanos)
                for n, c in (cc.get("counters") or {}).items()
            )
            consumes.append((cc.get("counterSet", ""), counters))
            compat.append(frozenset(cc.get("compatibilityGroups") or ()))
        self.consumes = tuple(consumes)
        # DRADeviceCompatibilityGroups (1.37 alpha): per consumption, the groups it declares (empty: none).
        self.compat_groups: tuple[frozenset[str], ...] | None = tuple(compat) if any(compat) else None
        # The slice's own taints, then those DeviceTaintRules add (kdra.allocator.taintrules);
        # taint_rules names the rule of each taint ("" for the slice's own).
        own = list(raw.get("taints") or [])
        self.taints: list[Mapping[str, Any]] = own + [t for _, t in rule_taints]
        self.taint_rules: tuple[str, ...] = ("",) * len(own) + tuple(r for r, _ in rule_taints)
        self.binding_conditions: list[str] | None = raw.get("bindingConditions")
        self.binding_failure_conditions: list[str] | None = raw.get("bindingFailureConditions")
        self.binds_to_node: bool = bool(raw.get("bindsToNode"))
        self.node_name: str = raw.get("nodeName") or ""
        self.all_nodes: bool = bool(raw.get("allNodes"))
        self.node_selector: Mapping[str, Any] | None = raw.get("nodeSelector")
        self.matches: dict[Any, SelectorResult] = {}
        self._cel: CelDevice | None = None

    @property
    def id(self) -> str:
        return f"{self.driver}/{self.pool}/{self.name}"

    def cel_input(self) -> CelDevice:
        if self._cel is None:
            self._cel = device_input(
                self.driver, dict(self.attributes), dict(self.capacity_raw), self.allow_multi
            )
        return self._cel

    def attribute(self, qualified: str) -> Mapping[str, Any] | None:
        """Upstream lookupAttribute: exact qualified name, else the bare id when domain == driver."""
        attrs = self.attributes
        if qualified in attrs:
            return cast(Mapping[str, Any], attrs[qualified])
        domain, sep, ident = qualified.partition("/")
        if not sep or domain != self.driver:
            return None
        return attrs.get(ident)

    def __repr__(self) -> str:
        return f"DeviceEntry({self.id})"


class SliceEntry:
    """One ResourceSlice version: pool coordinates, node selection and compiled devices."""

    __slots__ = (
        "all_nodes",
        "count",
        "devices",
        "driver",
        "generation",
        "has_per_device_field",
        "name",
        "node_name",
        "node_selector",
        "per_device",
        "pool",
        "raw",
        "shared_counters",
        "skip_node_ops",
        "uses_compat_groups",
    )

    def __init__(self, raw: Mapping[str, Any], rule_taints: SliceRuleTaints = ()) -> None:
        self.raw = raw
        meta = raw.get("metadata") or {}
        spec = raw.get("spec") or {}
        self.name: str = meta.get("name", "")
        self.driver: str = spec.get("driver", "")
        pool = spec.get("pool") or {}
        self.pool: str = pool.get("name", "")
        self.generation: int = int(pool.get("generation") or 0)
        self.count: int = int(pool.get("resourceSliceCount") or 0)
        self.node_name: str = spec.get("nodeName") or ""
        self.all_nodes: bool = bool(spec.get("allNodes"))
        self.node_selector: Mapping[str, Any] | None = spec.get("nodeSelector")
        self.has_per_device_field = spec.get("perDeviceNodeSelection") is not None
        # DRAOptionalNodeOperations (1.37 alpha): node-local operations the driver lets the kubelet skip.
        self.skip_node_ops: tuple[str, ...] = tuple(spec.get("skipNodeOperations") or ())
        self.per_device: bool = bool(spec.get("perDeviceNodeSelection"))
        where = f"ResourceSlice {self.name}: spec"
        shared: list[tuple[str, dict[str, int]]] = []
        for i, cs in enumerate(spec.get("sharedCounters") or []):
            counters = {
                n: _quantity((c or {}).get("value", "0"), f"{where}.sharedCounters[{i}].counters[{n}]").nanos
                for n, c in (cs.get("counters") or {}).items()
            }
            shared.append((cs.get("name", ""), counters))
        self.shared_counters = shared
        added: dict[str, list[tuple[str, Mapping[str, Any]]]] = {}
        for device, rule, taint in rule_taints:
            added.setdefault(device, []).append((rule, taint))
        self.devices: list[DeviceEntry] = [
            DeviceEntry(d, self, f"{where}.devices[{i}]", added.get(d.get("name", ""), ()))
            for i, d in enumerate(spec.get("devices") or [])
        ]
        self.uses_compat_groups = any(d.compat_groups is not None for d in self.devices)

    def __repr__(self) -> str:
        return f"SliceEntry({self.name}, {self.driver}/{self.pool}@{self.generation})"


class SliceCache:
    """Compiled slices, so unchanged slices keep their device index and selector cache.

    A slice is looked up by uid (or name) + resourceVersion, or by object identity when it has no
    resourceVersion, and an entry is only reused for the very same object or one with equal content
    (a C-level dict comparison, a few microseconds per slice, far cheaper than compiling it again):
    separate stores (two simulations, two tests, objects loaded from files) hand out equal uids and
    resourceVersions for different slices, and each key keeps a few variants so that alternating
    between them does not recompile. Slice dicts must not be changed in place once looked up (the
    stores replace objects on update)."""

    VARIANTS = 4  # entries per key

    def __init__(self, max_entries: int = 200_000) -> None:
        self._entries: dict[Any, list[tuple[Mapping[str, Any], SliceEntry]]] = {}
        self._size = 0
        self._max = max_entries
        self.compiled = 0  # slices compiled (misses), for tests and benchmarks

    @staticmethod
    def _key(raw: Mapping[str, Any]) -> Any:
        meta = raw.get("metadata") or {}
        rv = meta.get("resourceVersion")
        if rv:
            return ("rv", meta.get("uid") or meta.get("name"), rv)
        return ("id", id(raw))  # the entry holds `raw`, so the id cannot be reused meanwhile

    def get(self, raw: Mapping[str, Any], rule_taints: SliceRuleTaints = ()) -> SliceEntry:
        """The compiled slice; `rule_taints`: what DeviceTaintRules add to its devices."""
        key = base = self._key(raw)
        if rule_taints:
            key = (base, fingerprint(rule_taints))
        by_rv = base[0] == "rv"
        variants = self._entries.get(key)
        if variants is not None:
            for i, (seen, entry) in enumerate(variants):
                if seen is raw or (by_rv and seen == raw):
                    if i:
                        variants.insert(0, variants.pop(i))  # most recently used first
                    return entry
        entry = SliceEntry(raw, rule_taints)
        self.compiled += 1
        if self._size >= self._max:
            self._entries.clear()
            self._size = 0
            variants = None
        if variants is None:
            variants = self._entries[key] = []
        variants.insert(0, (raw, entry))
        self._size += 1
        if len(variants) > self.VARIANTS:
            variants.pop()
            self._size -= 1
        return entry

    def __len__(self) -> int:
        return self._size


DEFAULT_SLICE_CACHE = SliceCache()


# ---------------------------------------------------------------------------------------------
# Pools as seen from one node (upstream GatherPools, pools_experimental.go, v1.36)
# ---------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Pool:
    driver: str
    name: str
    incomplete: bool = False
    invalid: bool = False
    invalid_reason: str = ""
    slices: list[SliceEntry] = field(default_factory=list)  # device slices targeting the node
    other_slices: list[SliceEntry] = field(default_factory=list)  # slices of the pool for other nodes
    counter_sets: dict[str, dict[str, int]] | None = None
    generation: int = 0
    slices_seen: int = 0  # for incomplete pools: slices of this generation that exist
    slices_expected: int = 0  # and resourceSliceCount

    @property
    def id(self) -> str:
        return f"{self.driver}/{self.name}"

    def has_binding_conditions(self) -> bool:
        return any(d.binding_conditions is not None for s in self.slices for d in s.devices)


@dataclass(slots=True)
class NodeView:
    """The pools visible from one node, flattened into search order."""

    node_name: str
    pools: list[Pool]
    devices: list[DeviceEntry]  # devices of complete, valid pools in pool -> slice -> device order
    device_pool: list[int]  # index into pools per entry of `devices`
    node_ok: list[bool]  # per-device node selection (always True for slices without it)
    all_node_ok: dict[int, bool]  # id(DeviceEntry) -> node ok, for every device in every pool
    # Selectable devices per (class selectors, request selectors, gates): state-independent, so kept
    # with the view and shared by every Allocate call on this node. Entries: (device, pool index,
    # error) where error is (SelectorError, failed in class selectors) or None; plus whether any has one.
    candidates: dict[Any, tuple[list[tuple[DeviceEntry, int, tuple[SelectorError, bool] | None]], bool]] = (
        field(default_factory=dict)
    )
    keys: frozenset[tuple[str, str, str]] | None = None  # see device_keys()
    declared_features: frozenset[str] = frozenset()  # the Node's status.declaredFeatures

    def device_keys(self) -> frozenset[tuple[str, str, str]]:
        """Keys of every device whose in-use state matters on this node (the pools' devices, and for
        counters the devices of the same pools published for other nodes)."""
        keys = self.keys
        if keys is None:
            keys = self.keys = frozenset(
                d.key
                for p in self.pools
                for group in (p.slices, p.other_slices)
                for s in group
                for d in s.devices
            )
        return keys


def _device_node_ok(dev: DeviceEntry, node_name: str, labels: Mapping[str, str]) -> bool:
    return node_matches(node_name, labels, dev.node_name, dev.all_nodes, dev.node_selector)


def _build_pool(
    driver: str,
    name: str,
    slices: list[SliceEntry],
    features: FeatureGates,
    all_slices_for_pool: list[SliceEntry] | None,
) -> Pool:
    """buildPool: device slices for the node, counter sets, and the pool's other slices (whose devices
    consume the same counters), or an invalid pool with the reason."""
    slices = sorted(slices, key=lambda s: s.name)
    partitionable = features.partitionable_devices
    counter_slices = [s for s in slices if partitionable and s.shared_counters]
    device_slices = [s for s in slices if not (partitionable and s.shared_counters)]
    others: list[SliceEntry] = []
    if all_slices_for_pool is not None and len(slices) < len(all_slices_for_pool):
        names = {s.name for s in slices}
        for s in all_slices_for_pool:
            if s.name in names:
                continue
            # 1.37 may have left out a counter slice that does not target the node; 1.36 saw all of them.
            if partitionable and s.shared_counters and not features.counter_slices_everywhere:
                counter_slices.append(s)
            else:
                others.append(s)
    seen: set[str] = set()
    for s in device_slices:
        for d in s.devices:
            if d.name in seen:
                return Pool(driver, name, invalid=True, invalid_reason=f"duplicate device name {d.name}")
            seen.add(d.name)
    if not partitionable:
        return Pool(driver, name, slices=device_slices)
    counter_sets: dict[str, dict[str, int]] = {}
    for s in counter_slices:
        for cs_name, counters in s.shared_counters:
            if cs_name in counter_sets:
                return Pool(
                    driver, name, invalid=True, invalid_reason=f"duplicate counter set name {cs_name}"
                )
            counter_sets[cs_name] = counters
    reason = _validate_consumption(counter_sets, device_slices) or _validate_consumption(counter_sets, others)
    if reason:
        return Pool(driver, name, invalid=True, invalid_reason=reason)
    return Pool(driver, name, slices=device_slices, other_slices=others, counter_sets=counter_sets)


def _validate_consumption(counter_sets: dict[str, dict[str, int]], slices: Iterable[SliceEntry]) -> str:
    for s in slices:
        for d in s.devices:
            for set_name, counters in d.consumes:
                cs = counter_sets.get(set_name)
                if cs is None:
                    return f"counter set {set_name} not found"
                for cname, _ in counters:
                    if cname not in cs:
                        return f"counter {cname} not found in counter set {set_name}"
    return ""


def gather_pools(
    slices_for_node: Sequence[SliceEntry],
    node_name: str,
    labels: Mapping[str, str],
    features: FeatureGates,
    slices_by_pool: Mapping[tuple[str, str], list[SliceEntry]],
) -> list[Pool]:
    """GatherPools: the pools with devices this node can use, sorted by (driver, pool) with pools that
    have binding conditions last; incomplete and invalid pools are included, marked."""
    everywhere = features.counter_slices_everywhere
    # 1.37 ignores slices that use compatibility groups while DRADeviceCompatibilityGroups is off (their
    # pool becomes incomplete).
    skip_compat = not features.v1_36 and not features.compatibility_groups
    by_pool: dict[tuple[str, str], list[SliceEntry]] = {}
    for s in slices_for_node:
        if not features.partitionable_devices and (s.has_per_device_field or s.shared_counters):
            continue
        if skip_compat and s.uses_compat_groups:
            continue
        if s.shared_counters and everywhere:
            relevant = True  # 1.36 (and 1.37's stable allocator): visible from every node
        elif s.node_name or s.all_nodes or s.node_selector is not None:
            try:
                relevant = node_matches(node_name, labels, s.node_name, s.all_nodes, s.node_selector)
            except AllocationError as err:
                raise AllocationError(
                    f"gather pool information: failed to perform node selection for slice {s.name}: {err}"
                ) from err
        elif s.per_device:
            try:
                relevant = any(_device_node_ok(d, node_name, labels) for d in s.devices)
            except AllocationError as err:
                raise AllocationError(
                    f"gather pool information: failed to perform node selection for a device in slice "
                    f"{s.name}: {err}"
                ) from err
        else:
            continue  # some future node selection we do not know
        if not relevant:
            continue
        pid = (s.driver, s.pool)
        current = by_pool.get(pid)
        if current is None or s.generation > current[0].generation:
            by_pool[pid] = [s]
        elif s.generation == current[0].generation:
            current.append(s)
    result: list[Pool] = []
    with_binding: list[Pool] = []
    for (driver, pname), pool_slices in by_pool.items():
        first = pool_slices[0]
        if len(pool_slices) == first.count:
            pool = _build_pool(driver, pname, pool_slices, features, None)
        else:
            obsolete = False
            all_for_pool: list[SliceEntry] = []
            for s in slices_by_pool.get((driver, pname), ()):
                if s.generation == first.generation:
                    all_for_pool.append(s)
                elif s.generation > first.generation:
                    obsolete = True
                    break
            if obsolete:
                continue
            if skip_compat:
                all_for_pool = [s for s in all_for_pool if not s.uses_compat_groups]
            if len(all_for_pool) != first.count:
                result.append(
                    Pool(
                        driver,
                        pname,
                        incomplete=True,
                        generation=first.generation,
                        slices_seen=len(all_for_pool),
                        slices_expected=first.count,
                    )
                )
                continue
            pool = _build_pool(driver, pname, pool_slices, features, all_for_pool)
        (with_binding if pool.has_binding_conditions() else result).append(pool)
    result.sort(key=lambda p: (p.driver, p.name))
    with_binding.sort(key=lambda p: (p.driver, p.name))
    return result + with_binding


# ---------------------------------------------------------------------------------------------
# The index
# ---------------------------------------------------------------------------------------------


class AllocatorIndex:
    """DeviceClasses and ResourceSlices compiled once for many Allocate calls.

    Reuse it for as long as classes and slices do not change; pair it with a fresh
    `AllocatedState` whenever claims change (that part is cheap).
    """

    def __init__(
        self,
        classes: Mapping[str, Mapping[str, Any]] | Iterable[Mapping[str, Any]],
        slices: Iterable[Mapping[str, Any]],
        features: FeatureGates | None = None,
        *,
        slice_cache: SliceCache | None = None,
        taint_rules: Iterable[Mapping[str, Any]] = (),
    ) -> None:
        self.features = features or FeatureGates()
        if isinstance(classes, Mapping):
            self.classes: dict[str, Mapping[str, Any]] = dict(classes)
        else:
            self.classes = {(c.get("metadata") or {}).get("name", ""): c for c in classes}
        cache = slice_cache if slice_cache is not None else DEFAULT_SLICE_CACHE  # an empty one is falsy
        rules = compile_rules(taint_rules, self.features)
        self.slices: list[SliceEntry] = [cache.get(s, slice_rule_taints(s, rules)) for s in slices]
        self.slices_on_node: dict[str, list[SliceEntry]] = {}
        self.slices_shared: list[SliceEntry] = []
        # Slices with sharedCounters published for one node: kube-scheduler 1.36 shows them on every node.
        self.counter_slices_on_nodes: list[SliceEntry] = []
        self.slices_by_pool: dict[tuple[str, str], list[SliceEntry]] = {}
        for s in self.slices:
            if s.node_name:
                self.slices_on_node.setdefault(s.node_name, []).append(s)
                if s.shared_counters:
                    self.counter_slices_on_nodes.append(s)
            else:
                self.slices_shared.append(s)
            self.slices_by_pool.setdefault((s.driver, s.pool), []).append(s)
        self._views: dict[Any, NodeView] = {}
        self._class_selectors: dict[str, tuple[str, ...]] = {}
        self._class_devices: dict[str, dict[str | None, list[DeviceEntry]]] = {}
        self._shared_pool_names: frozenset[str] | None = None

    def pool_names_shared_by_drivers(self) -> frozenset[str]:
        """Pool names that more than one driver uses for a pool with shared counters (Kubernetes 1.36
        keys counters by pool name alone, so such pools share them)."""
        names = self._shared_pool_names
        if names is None:
            drivers: dict[str, set[str]] = {}
            for s in self.slices:
                if s.shared_counters:
                    drivers.setdefault(s.pool, set()).add(s.driver)
            names = self._shared_pool_names = frozenset(n for n, d in drivers.items() if len(d) > 1)
        return names

    def class_selectors(self, class_name: str) -> tuple[str, ...]:
        sel = self._class_selectors.get(class_name)
        if sel is None:
            cls = self.classes[class_name]
            sel = tuple(
                ((s.get("cel") or {}).get("expression") or "")
                for s in (cls.get("spec") or {}).get("selectors") or []
            )
            self._class_selectors[class_name] = sel
        return sel

    def devices_of_class(
        self, class_name: str, selectors: Sequence[str] = (), *, node: str | None = None
    ) -> list[DeviceEntry]:
        """Devices the DeviceClass's selectors and then `selectors` (a request's CEL expressions) select,
        in slice order: of every slice (`node=None`), of the slices published for one node
        (`spec.nodeName == node`), or of the slices not tied to a node by nodeName (`node=""`: allNodes,
        nodeSelector, perDeviceNodeSelection). In-use state is not considered (see `AllocatedState`).

        A device whose selector fails to evaluate is included (the allocator reports the error when it
        reaches the device), devices with binding conditions are left out while
        DRADeviceBindingConditions is off, and an unknown class selects nothing; so the count is an
        upper bound on what a request of the class can get there. Class results are cached per index
        and request selectors are memoised per device: a call is a few dict lookups per device. Do
        not change the returned list."""
        lists = self._class_devices.get(class_name)
        if lists is None:
            lists = self._class_devices[class_name] = self._select_class(class_name)
        devices = lists.get(node, [])
        if not selectors:
            return devices
        exprs = tuple(selectors)
        consumable = self.features.consumable_capacity
        list_types = self.features.cel_list_type_attributes
        lazy = self.features.cel_lazy_attributes
        out = []
        for d in devices:
            res = evaluate_selectors(d, exprs, consumable, list_types, lazy)
            if res == MATCH or isinstance(res, SelectorError):
                out.append(d)
        return out

    def class_pending_expensive(self, class_name: str) -> bool:
        """Whether `devices_of_class(class_name)` still has CEL work to do that proved expensive (one
        evaluation of the class's selectors cost EXPENSIVE_RESULT_UNITS or more)."""
        if class_name in self._class_devices or class_name not in self.classes:
            return False
        f = self.features
        key = (
            self.class_selectors(class_name),
            f.consumable_capacity,
            f.cel_list_type_attributes,
            f.cel_lazy_attributes,
        )
        return key in _expensive_selectors

    def selector_error(
        self, class_name: str, selectors: Sequence[str] = (), *, node: str | None = None
    ) -> bool:
        """Whether one of the devices `devices_of_class` gives fails to evaluate the class's selectors or
        `selectors`: the allocator raises when its search reaches such a device, so a cheaper check that
        rules the node out must leave the verdict to the allocator. Results are memoised per device."""
        devices = self.devices_of_class(class_name, node=node)
        if not devices:
            return False
        consumable = self.features.consumable_capacity
        list_types = self.features.cel_list_type_attributes
        groups = [self.class_selectors(class_name)] + ([tuple(selectors)] if selectors else [])
        return any(
            isinstance(evaluate_selectors(d, exprs, consumable, list_types), SelectorError)
            for d in devices
            for exprs in groups
        )

    def _select_class(self, class_name: str) -> dict[str | None, list[DeviceEntry]]:
        lists: dict[str | None, list[DeviceEntry]] = {None: []}
        if class_name not in self.classes:
            return lists
        exprs = self.class_selectors(class_name)
        consumable = self.features.consumable_capacity
        list_types = self.features.cel_list_type_attributes
        lazy = self.features.cel_lazy_attributes
        gate_binding = not self.features.device_binding_and_status
        every = lists[None]
        for s in self.slices:
            for d in s.devices:
                if gate_binding and d.binding_conditions:
                    continue
                res = evaluate_selectors(d, exprs, consumable, list_types, lazy)
                if res == MATCH or isinstance(res, SelectorError):
                    every.append(d)
                    lists.setdefault(s.node_name, []).append(d)
        return lists

    def node_view(self, node: Mapping[str, Any]) -> NodeView:
        meta = node.get("metadata") or node
        name: str = meta.get("name", "")
        labels: Mapping[str, str] = meta.get("labels") or {}
        declared = frozenset(
            ((node.get("status") or {}).get("declaredFeatures") or ()) if "metadata" in node else ()
        )
        key = (name, tuple(sorted(labels.items())), declared)
        view = self._views.get(key)
        if view is None:
            view = self._build_view(name, labels)
            view.declared_features = declared
            if len(self._views) > 100_000:
                self._views.clear()
            self._views[key] = view
        return view

    def _build_view(self, name: str, labels: Mapping[str, str]) -> NodeView:
        for_node = self.slices_on_node.get(name, []) + self.slices_shared
        if self.features.counter_slices_everywhere:
            for_node += [s for s in self.counter_slices_on_nodes if s.node_name != name]
        pools = gather_pools(for_node, name, labels, self.features, self.slices_by_pool)
        devices: list[DeviceEntry] = []
        device_pool: list[int] = []
        node_ok: list[bool] = []
        all_ok: dict[int, bool] = {}
        for pi, pool in enumerate(pools):
            usable = not (pool.incomplete or pool.invalid)
            for s in pool.slices:
                for d in s.devices:
                    ok = _device_node_ok(d, name, labels) if s.per_device else True
                    all_ok[id(d)] = ok
                    if usable:
                        devices.append(d)
                        device_pool.append(pi)
                        node_ok.append(ok)
        return NodeView(name, pools, devices, device_pool, node_ok, all_ok)


# ---------------------------------------------------------------------------------------------
# Bounded CEL work: one user's expensive selectors must not stall everyone
# ---------------------------------------------------------------------------------------------

# A result that took at least this much CEL work (cost units, plus one per evaluation) is also kept by
# device content, so that a slice published again with the same devices (a new resourceVersion, a pool
# generation bump) does not pay for it twice. Cheap results are not worth the fingerprint.
EXPENSIVE_RESULT_UNITS = 10_000
_MAX_EXPENSIVE_RESULTS = 100_000
_expensive_results: dict[tuple[Any, ...], SelectorResult] = {}
_expensive_selectors: set[tuple[tuple[str, ...], bool, bool, bool]] = set()


class CelBudgetExhausted(Exception):
    """The CEL work allowed for this scheduling attempt is used up. Raised only between devices, after
    the result of the device just evaluated was memoised, so the next attempt starts where this one
    stopped; caches built from a partial walk are not kept by their builders."""

    def __init__(self, budget: CelBudget) -> None:
        super().__init__(f"CEL budget of {budget.limit or 0:,} units used up")
        self.budget = budget


class CelBudget:
    """The CEL work (cost units, plus one per evaluation) one scheduling attempt may spend on selector
    results that are not memoised yet; memoised results are free. `limit` None only counts. `on_progress`
    is called with the budget at most once per `period` seconds while work is charged (a command's
    progress line while expensive selectors run)."""

    __slots__ = ("_next", "evaluations", "limit", "on_progress", "period", "spent")

    def __init__(
        self,
        limit: int | None,
        on_progress: Callable[[CelBudget], None] | None = None,
        period: float = 15.0,
    ) -> None:
        self.limit = limit
        self.spent = 0
        self.evaluations = 0
        self.on_progress = on_progress
        self.period = period
        self._next = time.monotonic() + period

    @property
    def exhausted(self) -> bool:
        return self.limit is not None and self.spent >= self.limit

    def charge(self, units: int) -> None:
        self.spent += units
        self.evaluations += 1
        if self.on_progress is not None:
            now = time.monotonic()
            if now >= self._next:
                self._next = now + self.period
                self.on_progress(self)


_budget: ContextVar[CelBudget | None] = ContextVar("kdra_cel_budget", default=None)


def active_cel_budget() -> CelBudget | None:
    """The budget the current context charges its CEL work to, if any."""
    return _budget.get()


@contextmanager
def cel_budget(
    limit: int | None, *, on_progress: Callable[[CelBudget], None] | None = None, period: float = 15.0
) -> Iterator[CelBudget | None]:
    """Bound the new CEL work done inside the block (None: unbounded); see CelBudgetExhausted. With
    `on_progress`, the work is counted and reported every `period` seconds, bounded or not."""
    if limit is None and on_progress is None:
        yield None
        return
    budget = CelBudget(limit, on_progress, period)
    token = _budget.set(budget)
    try:
        yield budget
    finally:
        _budget.reset(token)


def _fingerprint(dev: DeviceEntry, exprs: tuple[str, ...]) -> object:
    """What an expensive result is shared by: the device fields the selectors read (devices of one model
    share it whatever their uuids), else the device's whole content."""
    reads = selector_input_key(exprs, dev.cel_input())
    if reads is not None:
        return reads
    import json

    return json.dumps(
        [dev.driver, dev.attributes, dev.capacity_raw, dev.allow_multi], sort_keys=True, default=str
    )


def evaluate_selectors(
    dev: DeviceEntry, exprs: tuple[str, ...], consumable: bool, list_types: bool = False, lazy: bool = False
) -> SelectorResult:
    """MATCH, the index of the first false selector, or the first error; memoised per device (and, when
    expensive, per device content). Inside `cel_budget`, a result not memoised yet is charged to the
    budget, and CelBudgetExhausted is raised once it is used up (after memoising this device's result)."""
    if not exprs:
        return MATCH
    key = (exprs, consumable, list_types, lazy)
    matches = dev.matches
    cached = matches.get(key)
    if cached is not None:
        return cached
    budget = _budget.get()
    if budget is not None and budget.exhausted:
        raise CelBudgetExhausted(budget)
    content_key: tuple[Any, ...] | None = None
    if key in _expensive_selectors:
        content_key = (key, _fingerprint(dev, exprs))
        known = _expensive_results.get(content_key)
        if known is not None:
            matches[key] = known
            return known
    if len(matches) >= MAX_CACHED_SELECTOR_SETS:
        matches.clear()  # bounded memory when many distinct selector lists come and go
    result: SelectorResult = MATCH
    units = 0
    for i, expr in enumerate(exprs):
        try:
            # kube-scheduler compiles stored selectors in the StoredExpressions environment.
            program = compile_selector(
                expr, consumable_capacity=consumable, list_type_attributes=list_types, stored_expressions=True
            )
        except CELCompileError as exc:
            result = SelectorError(i, True, str(exc))
            break
        try:
            ok, cost = program.matches_with_cost(dev.cel_input(), lazy)
        except CELRuntimeError as exc:
            units += 1 + exc.cost
            result = SelectorError(i, False, str(exc))
            break
        units += 1 + cost
        if not ok:
            result = i
            break
    matches[key] = result
    if units >= EXPENSIVE_RESULT_UNITS:
        _expensive_selectors.add(key)
        if len(_expensive_results) >= _MAX_EXPENSIVE_RESULTS:
            _expensive_results.clear()
        _expensive_results[content_key or (key, _fingerprint(dev, exprs))] = result
    if budget is not None:
        budget.charge(units)
        if budget.exhausted:
            raise CelBudgetExhausted(budget)
    return result
