"""The structured allocator: claims x visible devices -> allocation results, as kube-scheduler allocates.

A port of k8s.io/dynamic-resource-allocation/structured/internal/experimental/allocator_experimental.go
(the variant kube-scheduler uses once DRAConsumableCapacity or device binding conditions are on,
and a superset of the others): one claim after the other, one request after the other, one device
after the other, depth-first with backtracking; the first complete solution wins. Pools are searched
sorted by (driver, pool) with binding-condition pools last, slices by name, devices in slice order, and
a request with count > 1 only tries combinations (later devices come after earlier ones).

What differs from upstream is only how the work is organised: devices, quantities and selector results
come from an `AllocatorIndex` built once, the search walks per-request candidate lists instead of
re-checking selectors, and hopeless searches are cut short by counting candidates first (and, as a last
resort, by a step budget, the analogue of kube-scheduler's Filter timeout).
"""

from __future__ import annotations

import hashlib
import sys
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from kdra.allocator.capacity import CapacityError, CapacityRules, check_capacity, consumed_capacity
from kdra.allocator.index import (
    MATCH,
    MAX_CACHED_SELECTOR_SETS,
    AllocatorIndex,
    DeviceEntry,
    NodeView,
    Pool,
    SelectorError,
    SliceCache,
    attribute_value,
    evaluate_selectors,
)
from kdra.allocator.preference import preferred_order
from kdra.api.features import FeatureGates
from kdra.api.quantity import Quantity, parse_quantity_any
from kdra.cel import CELCompileError, CELRuntimeError, compile_derived_attribute, without_container_note
from kdra.errors import AllocationError, InputError

if TYPE_CHECKING:
    from kdra.allocator.explain import Explanation
    from kdra.allocator.preference import DevicePreference

ALLOCATION_RESULTS_MAX_SIZE = 32  # resourceapi.AllocationResultsMaxSize
QUICK_SEARCH_STEPS = 500  # device attempts before the exact pruning checks run
DEFAULT_MAX_STEPS = 50_000  # device attempts; ~0.5 s of search on this machine

DeviceKey = tuple[str, str, str]


class NodeAllocationError(AllocationError):
    """An error that only concerns this node (upstream wraps ErrFailedAllocationOnNode): the scheduler
    reports the node as unschedulable with this message and tries the others. `invalid_pools` (pool
    -> reason) and `explanation` (computed on first access, see `LazyExplanation`) say more than
    upstream's text."""

    invalid_pools: dict[str, str]
    lazy_explanation: LazyExplanation | None

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.invalid_pools = {}
        self.lazy_explanation = None

    @property
    def explanation(self) -> Explanation | None:
        return self.lazy_explanation.get() if self.lazy_explanation is not None else None


class LazyExplanation:
    """Why claims did not fit on a node, computed on first use (`get()`, `str()`, `to_dict()`) and then
    kept. It is computed from a snapshot taken when the allocation failed (the node's in-use devices,
    counters and capacity), so later changes to the `AllocatedState` do not change what it says."""

    __slots__ = ("_compute", "_value")

    def __init__(self, compute: Callable[[], Explanation]) -> None:
        self._compute: Callable[[], Explanation] | None = compute
        self._value: Explanation | None = None

    @property
    def computed(self) -> bool:
        return self._compute is None

    def get(self) -> Explanation:
        compute = self._compute
        if compute is not None:
            self._value = compute()
            self._compute = None  # drop the snapshot
        assert self._value is not None
        return self._value

    def to_dict(self) -> dict[str, Any]:
        return self.get().to_dict()

    def __str__(self) -> str:
        return str(self.get())

    def __repr__(self) -> str:
        return f"LazyExplanation({self._value!r})" if self.computed else "LazyExplanation(<not computed>)"


def deterministic_share_id(claim: Mapping[str, Any], request: str, device: str, index: int) -> str:
    """The default shareID: a valid version-4 UUID derived from the claim (uid, else namespace/name),
    the request, the device (driver/pool/name) and the result's index in the claim, so the same inputs
    always give the same allocation."""
    meta = claim.get("metadata") or {}
    ident = meta.get("uid") or f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"
    digest = hashlib.blake2b(f"{ident}\0{request}\0{device}\0{index}".encode(), digest_size=16).digest()
    return str(uuid.UUID(bytes=digest, version=4))


def random_share_id() -> str:
    """kube-scheduler's shareIDs (a fresh uuid4 each): pass `share_id=random_share_id` to get them."""
    return str(uuid.uuid4())


class SearchLimitExceeded(Exception):
    """Raised internally when the search exceeds its step budget."""


class _MaxSizeExceeded(Exception):  # upstream errAllocationResultMaxSizeExceeded
    pass


# ---------------------------------------------------------------------------------------------
# State of devices already in use
# ---------------------------------------------------------------------------------------------


@dataclass
class AllocatedState:
    """Devices, shares and consumed capacity of claims that already have status.allocation.

    Mirrors kube-scheduler's claim tracker (upstream AllocatedState): admin-access results are not
    in use; with DRAConsumableCapacity a result with a shareID is a share whose consumedCapacity adds
    up per device; everything else is a dedicated device.

    Change it only through `add_result`/`remove_result` (or `add_claim`/`remove_claim`): they keep
    reference counts, so a device held by several claims (or shared by several shares) stays in use
    until the last one is removed and consumed capacity subtracts exactly, and they bump `version`,
    which tells a long-lived `Allocator` to recompute what it derived from the state. `dedicated`,
    `shared` and `consumed` are for reading.
    """

    dedicated: set[DeviceKey] = field(default_factory=set)
    shared: set[DeviceKey] = field(default_factory=set)
    consumed: dict[DeviceKey, dict[str, int]] = field(default_factory=dict)
    version: int = 0
    # Reference counts: results per dedicated device, shares per shared device, and per device and
    # capacity name the shares that reported it in consumedCapacity (a key of `consumed` exists exactly
    # while some share of the device reported consumedCapacity, as from_claims would build it).
    _dedicated_refs: dict[DeviceKey, int] = field(default_factory=dict, repr=False)
    _share_refs: dict[DeviceKey, int] = field(default_factory=dict, repr=False)
    _consumed_refs: dict[DeviceKey, dict[str, int]] = field(default_factory=dict, repr=False)

    @classmethod
    def from_claims(cls, claims: Iterable[Mapping[str, Any]], features: FeatureGates) -> AllocatedState:
        state = cls()
        for claim in claims:
            state.add_claim(claim, features)
        return state

    @staticmethod
    def _results(claim: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        alloc = (claim.get("status") or {}).get("allocation")
        if not alloc:
            return []
        return (alloc.get("devices") or {}).get("results") or []

    def add_claim(self, claim: Mapping[str, Any], features: FeatureGates) -> None:
        """Count every result of the claim's status.allocation (nothing if it has none)."""
        for res in self._results(claim):
            self.add_result(res, features)

    def remove_claim(self, claim: Mapping[str, Any], features: FeatureGates) -> None:
        """Undo `add_claim` for the same claim (pass the allocation that was added)."""
        for res in self._results(claim):
            self.remove_result(res, features)

    def add_result(self, res: Mapping[str, Any], features: FeatureGates) -> None:
        self._change(res, features, 1)

    def remove_result(self, res: Mapping[str, Any], features: FeatureGates) -> None:
        """Undo `add_result` for an equal result: the device stays in use while other results hold it,
        and the result's consumedCapacity is subtracted exactly."""
        self._change(res, features, -1)

    def _change(self, res: Mapping[str, Any], features: FeatureGates, delta: int) -> None:
        if res.get("adminAccess"):
            return
        key = (res.get("driver", ""), res.get("pool", ""), res.get("device", ""))
        if features.consumable_capacity and res.get("shareID") is not None:
            cc = res.get("consumedCapacity")
            amounts = (
                {name: parse_quantity_any(q).nanos for name, q in cc.items()} if cc is not None else None
            )
            if delta < 0 and key not in self.shared:
                return  # not added (or already removed): nothing to undo
            self.version += 1
            _count(self._share_refs, self.shared, key, delta)
            if amounts is not None:
                agg = self.consumed.get(key)
                if agg is None:
                    if delta < 0:
                        return
                    agg = self.consumed[key] = {}
                    refs = self._consumed_refs[key] = {}
                else:
                    refs = self._consumed_refs.setdefault(key, {})
                for name, nanos in amounts.items():
                    n = (refs.get(name, 1) if name in agg else 0) + delta
                    if n > 0:
                        refs[name] = n
                        agg[name] = agg.get(name, 0) + delta * nanos
                    else:
                        refs.pop(name, None)
                        agg.pop(name, None)
                if not agg:
                    self._consumed_refs.pop(key, None)
                    del self.consumed[key]
            return
        if delta < 0 and key not in self.dedicated:
            return
        self.version += 1
        _count(self._dedicated_refs, self.dedicated, key, delta)

    def is_allocated(self, key: DeviceKey) -> bool:
        return key in self.dedicated or key in self.shared

    def _restricted(self, keys: frozenset[DeviceKey]) -> AllocatedState:
        """A copy holding only `keys` (the devices one node can see): what explaining needs, cheaply."""
        consumed = self.consumed
        if len(keys) < len(consumed):
            held = [k for k in keys if k in consumed]
        else:
            held = [k for k in consumed if k in keys]
        return AllocatedState(
            self.dedicated & keys, self.shared & keys, {k: dict(consumed[k]) for k in held}, self.version
        )


def _count(refs: dict[DeviceKey, int], members: set[DeviceKey], key: DeviceKey, delta: int) -> None:
    # Membership is the truth: a key put into `members` directly counts as one reference, and counts
    # left behind by a key taken out directly are forgotten.
    n = (refs.get(key, 1) if key in members else 0) + delta
    if n > 0:
        refs[key] = n
        members.add(key)
    else:
        refs.pop(key, None)
        members.discard(key)


# ---------------------------------------------------------------------------------------------
# Requests
# ---------------------------------------------------------------------------------------------


class ReqData:
    """One request without subrequests, or one subrequest (upstream requestData)."""

    __slots__ = (
        "admin",
        "all_devices",
        "candidates",
        "capacity_requests",
        "claim_index",
        "class_name",
        "class_obj",
        "class_selectors",
        "count",
        "derived",
        "has_capacity",
        "last_error",
        "mode",
        "name",
        "num_devices",
        "ordered",
        "parent_name",
        "raw",
        "request_index",
        "request_selectors",
        "selected_sub",
        "sub_index",
        "tolerations",
    )

    def __init__(self, raw: Mapping[str, Any], parent_name: str | None, ci: int, ri: int, si: int) -> None:
        self.raw = raw
        self.name: str = raw.get("name", "")
        self.parent_name = parent_name
        self.claim_index = ci
        self.request_index = ri
        self.sub_index = si
        self.class_name: str = raw.get("deviceClassName") or ""
        self.class_obj: Mapping[str, Any] | None = None
        self.class_selectors: tuple[str, ...] = ()
        self.request_selectors: tuple[str, ...] = ()
        self.mode: str = raw.get("allocationMode") or "ExactCount"
        self.count = 0
        self.num_devices = 0
        self.admin = bool(raw.get("adminAccess")) if parent_name is None else False
        self.tolerations: list[Mapping[str, Any]] = list(raw.get("tolerations") or [])
        cap = raw.get("capacity")
        self.has_capacity = cap is not None
        self.capacity_requests: dict[str, Quantity] | None = None
        if cap is not None and cap.get("requests") is not None:
            reqs: dict[str, Quantity] = {}
            for k, v in cap["requests"].items():
                try:
                    reqs[k] = parse_quantity_any(v)
                except ValueError as exc:
                    raise InputError(f"request {self.full_name}: capacity.requests[{k}]: {exc}") from exc
            self.capacity_requests = reqs
        self.all_devices: list[tuple[DeviceEntry, int]] = []
        self.candidates: list[tuple[DeviceEntry, int, str | None]] | None = None
        self.ordered: list[tuple[DeviceEntry, int, str | None]] = []  # in a DevicePreference's order
        self.last_error: int | None = None  # index of the last candidate with a selector error
        # DRADerivedAttributes (1.37 alpha): attribute name -> CEL expression computing it per device.
        self.derived: dict[str, str] = {
            str(a.get("name", "")): str(a.get("expression", "")) for a in raw.get("derivedAttributes") or []
        }
        self.selected_sub = 0

    @property
    def full_name(self) -> str:
        return f"{self.parent_name}/{self.name}" if self.parent_name is not None else self.name

    @property
    def base_name(self) -> str:
        return self.parent_name if self.parent_name is not None else self.name

    @property
    def sub_name(self) -> str:
        return self.name if self.parent_name is not None else ""


def claim_ref(claim: Mapping[str, Any]) -> str:
    """klog.KObj: namespace/name, or just the name without a namespace."""
    meta = claim.get("metadata") or {}
    ns = meta.get("namespace") or ""
    name = meta.get("name") or ""
    return f"{ns}/{name}" if ns else name


# ---------------------------------------------------------------------------------------------
# Constraints
# ---------------------------------------------------------------------------------------------


class _UnsupportedValue(AllocationError):
    """A constraint cannot compare a device's attribute value (see `_Constraint.unsupported_fails`)."""


class _Constraint:
    # From 1.38, without DRAListTypeAttributes a device whose attribute holds a list (or a value of an
    # unknown type) fails the attempt instead of not matching (structured/internal/*/constraint.go).
    unsupported_fails = False
    # From 1.38 versions compare as semver (Version.Equals): build metadata does not count.
    versions_ignore_build = False

    def __init__(self, request_names: Sequence[str], attribute: str, list_types: bool) -> None:
        self.request_names = set(request_names)
        self.attribute = attribute
        self.list_types = list_types
        # Set by the run when requests define derived attributes (DRADerivedAttributes): the attribute
        # of a device for a request, a derived one first (may raise AllocationError).
        self.lookup: Callable[[ReqData, DeviceEntry, str], Any] | None = None

    def value_of(self, rd: ReqData, dev: DeviceEntry) -> Any:
        if self.lookup is not None:
            return self.lookup(rd, dev, self.attribute)
        return dev.attribute(self.attribute)

    def comparable(self, raw: Any, dev: DeviceEntry) -> tuple[str, Any] | None:
        """The attribute's value as the release's constraints compare it."""
        av = attribute_value(raw)
        if self.unsupported_fails and (av is None or (not self.list_types and av[0].endswith("s"))):
            raise _UnsupportedValue(f"device {dev.id}: unsupported attribute value for {self.attribute}")
        if self.versions_ignore_build and av is not None:
            if av[0] == "version":
                return "version", cast(str, av[1]).split("+", 1)[0]
            if av[0] == "versions":
                return "versions", frozenset(v.split("+", 1)[0] for v in cast(frozenset[str], av[1]))
        return av

    def applies(self, rd: ReqData) -> bool:
        if not self.request_names:
            return True
        if rd.parent_name is None:
            return rd.name in self.request_names
        return rd.parent_name in self.request_names or rd.full_name in self.request_names

    def add(self, rd: ReqData, dev: DeviceEntry) -> bool:
        raise NotImplementedError

    def remove(self, rd: ReqData, dev: DeviceEntry) -> None:
        raise NotImplementedError


def _intersect(a: tuple[str, Any], b: tuple[str, Any]) -> tuple[str, Any] | None:
    if a[0].rstrip("s") != b[0].rstrip("s"):
        return None
    inter = a[1] & b[1]
    return (a[0], inter) if inter else None


def _as_set(av: tuple[str, Any]) -> tuple[str, frozenset[Any]]:
    kind, value = av
    if kind.endswith("s"):
        return kind, value
    return kind + "s", frozenset((value,))


class MatchAttribute(_Constraint):
    """All devices of the named requests share the attribute's value (or, with DRAListTypeAttributes,
    have a common element)."""

    def __init__(self, request_names: Sequence[str], attribute: str, list_types: bool) -> None:
        super().__init__(request_names, attribute, list_types)
        self.first: tuple[str, Any] | None = None
        self.stack: list[tuple[str, Any]] = []
        self.num = 0

    def add(self, rd: ReqData, dev: DeviceEntry) -> bool:
        if self.request_names and not self.applies(rd):
            return True
        raw = self.value_of(rd, dev)
        if raw is None:
            return False
        av = self.comparable(raw, dev)
        if self.num == 0:
            if self.list_types:
                if av is None:
                    return False
                self.stack.append(_as_set(av))
            else:
                self.first = av
            self.num = 1
            return True
        if self.list_types:
            if av is None:
                return False
            narrowed = _intersect(self.stack[-1], _as_set(av))
            if narrowed is None:
                return False
            self.stack.append(narrowed)
        else:
            if av is None or av[0].endswith("s") or self.first is None:
                return False
            if self.first[0] != av[0] or self.first[1] != av[1]:
                return False
        self.num += 1
        return True

    def remove(self, rd: ReqData, dev: DeviceEntry) -> None:
        if self.request_names and not self.applies(rd):
            return
        self.num -= 1
        if self.list_types:
            del self.stack[self.num :]

    def value_matches(self, dev: DeviceEntry) -> bool:
        """Whether `add` would accept the device now (the constraint already holds a device)."""
        raw = dev.attribute(self.attribute)
        if raw is None:
            return False
        try:
            av = self.comparable(raw, dev)
        except _UnsupportedValue:
            return True  # `add` fails the attempt with it
        if av is None:
            return False
        if self.list_types:
            return _intersect(self.stack[-1], _as_set(av)) is not None
        return not av[0].endswith("s") and self.first is not None and self.first == av


class DistinctAttribute(_Constraint):
    """The attribute's values differ across the devices of the named requests.

    kube-scheduler 1.36 remembers one value per request name (the device added last; removing a device
    forgets the request's entry), so with count > 1 a device is not compared with every earlier device
    of its own request. 1.37 compares each new device with every device added before
    (`per_request=False`)."""

    def __init__(
        self, request_names: Sequence[str], attribute: str, list_types: bool, per_request: bool = False
    ) -> None:
        super().__init__(request_names, attribute, list_types)
        self.per_request = per_request
        self.values: dict[str, tuple[str, Any] | None] = {}  # 1.36: per request name
        self.stack: list[tuple[str, Any] | None] = []  # 1.37: every device added

    def add(self, rd: ReqData, dev: DeviceEntry) -> bool:
        if self.request_names and not self.applies(rd):
            return True
        raw = self.value_of(rd, dev)
        if raw is None:
            return False
        av = self.comparable(raw, dev)
        earlier = self.values.values() if self.per_request else self.stack
        if self.list_types:
            if av is None:
                return False
            new = _as_set(av)
            for old in earlier:
                if old is not None and _intersect(new, _as_set(old)) is not None:
                    return False
        else:
            for old in earlier:
                if av is None or av[0].endswith("s"):
                    return False  # upstream: unknown (or list) value type cannot be compared
                if old is not None and old[0] == av[0] and old[1] == av[1]:
                    return False
        if self.per_request:
            self.values[rd.base_name] = av
        else:
            self.stack.append(av)
        return True

    def remove(self, rd: ReqData, dev: DeviceEntry) -> None:
        if self.request_names and not self.applies(rd):
            return
        if self.per_request:
            self.values.pop(rd.base_name, None)
        else:
            self.stack.pop()


# ---------------------------------------------------------------------------------------------
# Taints
# ---------------------------------------------------------------------------------------------


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """resourceclaim.ToleratesTaint."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    op = toleration.get("operator") or "Equal"
    if op == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return op == "Exists"


def blocking_taint(dev: DeviceEntry, tolerations: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The first NoSchedule/NoExecute taint no toleration tolerates (other effects never block)."""
    for taint in dev.taints:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not any(
            tolerates(t, taint) for t in tolerations
        ):
            return taint
    return None


# ---------------------------------------------------------------------------------------------
# Outcome
# ---------------------------------------------------------------------------------------------


class AllocationOutcome:
    """`allocations`: one status.allocation dict per claim in claim order, or None when the claims
    do not fit on the node. `explanation` says why: only on failure, and computed on first access
    (`lazy_explanation` hands it on without computing it)."""

    __slots__ = ("_explanation", "allocations", "gave_up", "lazy_explanation", "node", "steps")

    def __init__(
        self,
        node: str,
        allocations: list[dict[str, Any]] | None,
        explanation: Explanation | None = None,
        steps: int = 0,
        *,
        lazy_explanation: LazyExplanation | None = None,
        gave_up: bool = False,
    ) -> None:
        self.node = node
        self.allocations = allocations
        self.steps = steps
        self.gave_up = gave_up  # the search budget ran out: not proven not to fit
        self._explanation = explanation
        self.lazy_explanation = lazy_explanation

    @property
    def explanation(self) -> Explanation | None:
        if self._explanation is None and self.lazy_explanation is not None:
            self._explanation = self.lazy_explanation.get()
        return self._explanation

    @property
    def success(self) -> bool:
        return self.allocations is not None

    def __repr__(self) -> str:
        return f"AllocationOutcome(node={self.node!r}, allocations={self.allocations!r}, steps={self.steps})"


@dataclass(slots=True)
class _Result:
    rd: ReqData
    dev: DeviceEntry
    pool_index: int
    share: bool  # a share of a device with allowMultipleAllocations (gets a shareID)
    consumed: dict[str, Quantity] | None


# ---------------------------------------------------------------------------------------------
# The allocator
# ---------------------------------------------------------------------------------------------


class Allocator:
    """Allocates claims on one node at a time; reusable for many nodes, cycles and changes of its
    `AllocatedState` (what it derives from the state is recomputed when `state.version` changes; call
    `new_cycle` when a pod's scheduling cycle starts, where upstream builds a new Allocator).
    Thread-compatible only per call: one `allocate` at a time.

    `share_id`: None (default) gives `deterministic_share_id`; otherwise a function without arguments
    called once per share of a successful allocation, in result order (`random_share_id` for
    kube-scheduler's fresh uuid4s).

    `prefer`: an opt-in DevicePreference (kdra.allocator.preference) that orders each request's
    candidates; None (default) is upstream's first fit."""

    def __init__(
        self,
        classes: Mapping[str, Mapping[str, Any]] | Iterable[Mapping[str, Any]] | None = None,
        slices: Iterable[Mapping[str, Any]] = (),
        allocated_claims: Iterable[Mapping[str, Any]] = (),
        features: FeatureGates | None = None,
        *,
        index: AllocatorIndex | None = None,
        state: AllocatedState | None = None,
        slice_cache: SliceCache | None = None,
        max_steps: int = DEFAULT_MAX_STEPS,
        share_id: Callable[[], str] | None = None,
        prune: bool = True,
        prefer: DevicePreference | None = None,
        taint_rules: Iterable[Mapping[str, Any]] = (),
    ) -> None:
        if index is None:
            index = AllocatorIndex(
                classes or {}, slices, features, slice_cache=slice_cache, taint_rules=taint_rules
            )
        self.index = index
        self.features = index.features
        # What the (immutable) gates decide for every run, worked out once.
        self.cap_rules = CapacityRules.of(self.features)
        self.experimental = self.features.variant == self.features.alpha_variant
        self.compat_groups = self.experimental and self.features.compatibility_groups
        self.state = (
            state if state is not None else AllocatedState.from_claims(allocated_claims, self.features)
        )
        self.max_steps = max_steps
        self.prune = prune
        self.prefer = prefer
        self._share_id = share_id
        # Available counters per pool (counter sets minus what allocated devices consume), computed once
        # per state version.
        self._available: dict[Any, tuple[dict[str, dict[str, int]], bool, Pool]] = {}
        self._available_version = self.state.version

    @classmethod
    def from_index(
        cls,
        index: AllocatorIndex,
        state: AllocatedState | None = None,
        *,
        max_steps: int = DEFAULT_MAX_STEPS,
        share_id: Callable[[], str] | None = None,
        prune: bool = True,
        prefer: DevicePreference | None = None,
    ) -> Allocator:
        return cls(
            index=index,
            state=state or AllocatedState(),
            max_steps=max_steps,
            share_id=share_id,
            prune=prune,
            prefer=prefer,
        )

    def allocate(self, node: Mapping[str, Any], claims: Sequence[Mapping[str, Any]]) -> AllocationOutcome:
        view = self.index.node_view(node)
        claims = list(claims)
        run = _Run(self, view, claims)
        # Stage 1: a short plain search, so the usual case (a solution found quickly, or no candidates
        # at all) pays nothing for pruning. Stage 2, only when that was not enough: the exact early
        # checks, then the search again with the full budget.
        quick = min(self.max_steps, QUICK_SEARCH_STEPS) if self.prune else self.max_steps
        ok: bool | None
        try:
            ok = run.search(quick)
        except SearchLimitExceeded:
            ok = None
        if ok is None and quick < self.max_steps:
            spent = run.steps
            run = _Run(self, view, claims)
            run.validate()
            if run._hopeless():
                ok = False
            else:
                try:
                    ok = run.search(self.max_steps - spent)
                except SearchLimitExceeded:
                    ok = None
            run.steps += spent
        if ok:
            return AllocationOutcome(view.node_name, run.build_results(), None, run.steps)
        if ok is None and self.prefer is not None:  # budget spent in the preferred order: upstream's
            return Allocator.from_index(
                self.index, self.state, max_steps=self.max_steps, share_id=self._share_id, prune=self.prune
            ).allocate(node, claims)
        # Explaining costs more than most failed searches and few callers print it: it is computed on
        # first access, from the run (its validated requests and cached candidates) paired with a copy
        # of the state restricted to this node's devices, so later state changes do not leak in.
        snapshot = self._snapshot(view)
        run.owner = snapshot
        run.state = snapshot.state
        lazy = LazyExplanation(lambda: _explain_run(run, ok is None))
        if ok is False and any(pool.invalid for pool in view.pools):
            # Upstream's text exactly; which pools and why travel on the exception.
            err = NodeAllocationError("invalid resource pools were encountered")
            err.invalid_pools = {p.id: p.invalid_reason for p in view.pools if p.invalid}
            err.lazy_explanation = lazy
            raise err
        return AllocationOutcome(
            view.node_name, None, steps=run.steps, lazy_explanation=lazy, gave_up=ok is None
        )

    def explain(self, node: Mapping[str, Any], claims: Sequence[Mapping[str, Any]]) -> LazyExplanation:
        """Why `claims` do not fit on `node` under the current state, computed on first use: for a
        caller that ruled the node out itself (a cheaper necessary check) and may never print it."""
        view = self.index.node_view(node)
        snapshot = self._snapshot(view)
        claims = list(claims)
        return LazyExplanation(lambda: snapshot._explain_now(view, node, claims))

    def _snapshot(self, view: NodeView) -> Allocator:
        """An allocator over a copy of the state restricted to the devices `view` can see."""
        return Allocator(
            index=self.index,
            state=self.state._restricted(view.device_keys()),
            max_steps=self.max_steps,
            share_id=self._share_id,
            prune=self.prune,
        )

    def _explain_now(
        self, view: NodeView, node: Mapping[str, Any], claims: list[Mapping[str, Any]]
    ) -> Explanation:
        from kdra.allocator.explain import Explanation

        try:
            outcome = self.allocate(node, claims)
        except NodeAllocationError as err:
            return err.explanation or Explanation(view.node_name, reasons=[str(err)])
        except AllocationError as err:
            return Explanation(view.node_name, reasons=[str(err)])
        if outcome.explanation is not None:
            return outcome.explanation
        return Explanation(view.node_name, reasons=["the claims fit on this node"])

    # -- share IDs --------------------------------------------------------------------------------
    def _make_share_id(
        self, claim: Mapping[str, Any], ci: int, request: str, dev: DeviceEntry, i: int
    ) -> str:
        if self._share_id is not None:
            return self._share_id()
        meta = claim.get("metadata") or {}
        if not meta.get("uid") and not meta.get("name"):
            claim = {"metadata": {"name": f"#{ci}", "namespace": meta.get("namespace") or ""}}
        return deterministic_share_id(claim, request, dev.id, i)

    def new_cycle(self) -> None:
        """A new scheduling cycle: upstream builds a new Allocator (NewAllocator, in DynamicResources'
        PreFilter once per pod, in the oracle once per group). What upstream keeps for an Allocator's
        life must not outlive the cycle here: Kubernetes 1.36's available counters per pool name (see
        available_counters), which a cycle that placed nothing (the state unchanged) would otherwise
        hand to the next pod, whose first-looked-at pool may be another driver's."""
        if self.features.v1_36:
            self._available.clear()

    # -- counters ---------------------------------------------------------------------------------
    def available_counters(self, pool: Pool) -> tuple[dict[str, dict[str, int]], bool]:
        """(available counters per set, whether any is already negative) for a pool.

        Kubernetes 1.36 keys these by pool name alone: the first pool of a name whose counters are
        looked at decides them for every pool of that name (another driver's included), as long as the
        state does not change and for one scheduling cycle at most (upstream: for the Allocator's life;
        `new_cycle` starts the next)."""
        if self._available_version != self.state.version:
            self._available.clear()
            self._available_version = self.state.version
        key: Any = ("name", pool.name) if self.features.v1_36 else id(pool)
        hit = self._available.get(key)
        if hit is not None and (hit[2] is pool or self.features.v1_36):
            return hit[0], hit[1]
        avail = {name: dict(counters) for name, counters in (pool.counter_sets or {}).items()}
        state = self.state
        for slices in (pool.slices, pool.other_slices):
            for s in slices:
                for d in s.devices:
                    if not d.consumes or not state.is_allocated(d.key):
                        continue
                    for set_name, counters in d.consumes:
                        cs = avail.get(set_name)
                        if cs is None:
                            continue
                        for cname, amount in counters:
                            if cname in cs:
                                cs[cname] -= amount
        broken = any(v < 0 for cs in avail.values() for v in cs.values())
        self._available[key] = (avail, broken, pool)
        return avail, broken

    def counters_exact(self, pool: Pool) -> bool:
        """Whether pruning may use this pool's counters: not in 1.36 when another driver has a pool of
        the same name with counters (which of them decides the shared counters depends on search order)."""
        return not (self.features.v1_36 and pool.name in self.index.pool_names_shared_by_drivers())


OPTIONAL_NODE_OPERATIONS_FEATURE = "DRAOptionalNodeOperations"  # a Node's status.declaredFeatures entry


@dataclass(frozen=True, slots=True)
class _Compat:
    """compatibilityGroupIntersection: the devices on one counter set so far. A device without groups
    only goes with other devices without groups; otherwise the groups must keep a common element."""

    has_members: bool = False
    all_empty: bool = False
    groups: frozenset[str] = frozenset()

    def admits(self, groups: frozenset[str]) -> bool:
        if not self.has_members:
            return True
        if not groups:
            return self.all_empty
        if self.all_empty:
            return False
        return bool(self.groups & groups)

    def add(self, groups: frozenset[str]) -> _Compat:
        if not self.has_members:
            return _Compat(True, not groups, groups)
        if self.all_empty or not groups:
            return self
        return _Compat(True, False, self.groups & groups)


_NO_MEMBERS = _Compat()


class _Run:
    """One Allocate call (upstream's internal `allocator`)."""

    def __init__(self, owner: Allocator, view: NodeView, claims: list[Mapping[str, Any]]) -> None:
        self.owner = owner
        self.features = owner.features
        self.index = owner.index
        self.state = owner.state
        self.view = view
        self.claims = claims
        self.requests: dict[tuple[int, int, int], ReqData] = {}
        self.constraints: list[list[_Constraint]] = []
        self.results: list[list[_Result]] = [[] for _ in claims]
        self.allocating: dict[DeviceKey, set[int]] = {}
        self.allocating_capacity: dict[DeviceKey, dict[str, int]] = {}
        # Counters left in this run, per pool (1.36: per pool name, see Allocator.available_counters).
        self.remaining: dict[Any, dict[str, dict[str, int]]] = {}
        self.steps = 0
        self.budget = owner.max_steps
        self.validated = False
        self.prefer = owner.prefer
        self.cap_rules = owner.cap_rules
        # The allocator of the release's alpha features (1.37: experimental, 1.38: incubating; an
        # alpha gate or DRAListTypeAttributes selects it) checks optional node operations and, with
        # their gate, compatibility groups.
        self.experimental = owner.experimental
        self.compat_groups = owner.compat_groups
        self._compat: dict[int, dict[str, _Compat]] = {}  # per pool and counter set, this run
        self.has_derived = False  # some request defines derived attributes (no pruning then)
        self._derived_values: dict[tuple[DeviceKey, str], Any] = {}
        self._compat_base: dict[int, dict[str, _Compat]] = {}
        self._claim_prunable: dict[int, bool] = {}
        self._error_free_after: dict[tuple[int, int], bool] = {}

    # -- validation (upstream: the loop at the top of Allocate and validateDeviceRequest) ----------
    def validate(self) -> None:
        if self.validated:
            return
        f = self.features
        for ci, claim in enumerate(self.claims):
            ref = claim_ref(claim)
            devices = ((claim.get("spec") or {}).get("devices")) or {}
            min_per_claim = 0
            for ri, request in enumerate(devices.get("requests") or []):
                name = request.get("name", "")
                subs = request.get("firstAvailable") or []
                if not f.prioritized_list and subs:
                    raise AllocationError(
                        f"claim {ref}, request {name}: has subrequests, "
                        "but the DRAPrioritizedList feature is disabled"
                    )
                exactly = request.get("exactly")
                if not f.consumable_capacity:
                    if exactly is not None and exactly.get("capacity") is not None:
                        raise AllocationError(
                            f"claim {ref}, request {name}: has capacity requests, "
                            "but the DRAConsumableCapacity feature is disabled"
                        )
                    for sub in subs:
                        if sub.get("capacity") is not None:
                            raise AllocationError(
                                f"claim {ref}, subrequest {sub.get('name', '')}: has capacity requests, "
                                "but the DRAConsumableCapacity feature is disabled"
                            )
                if subs:
                    min_req = None
                    for si, sub in enumerate(subs):
                        rd = ReqData(sub, name, ci, ri, si)
                        self._validate_request(rd, ref)
                        self.requests[(ci, ri, si)] = rd
                        if min_req is None or rd.num_devices < min_req:
                            min_req = rd.num_devices
                    min_req = min_req or 0
                else:
                    rd = ReqData(exactly or {"name": name}, None, ci, ri, 0)
                    rd.name = name
                    rd.admin = bool((exactly or {}).get("adminAccess"))
                    self._validate_request(rd, ref, admin_set=(exactly or {}).get("adminAccess") is not None)
                    self.requests[(ci, ri, 0)] = rd
                    min_req = rd.num_devices
                if not f.v1_36 and min_req > ALLOCATION_RESULTS_MAX_SIZE - min_per_claim:
                    # 1.37 checks the limit request by request, before validating the next one.
                    raise AllocationError(
                        f"claim {ref}, request {name}: adding {min_req} devices exceeds the claim limit of "
                        f"{ALLOCATION_RESULTS_MAX_SIZE}, with {min_per_claim} already accounted for"
                    )
                min_per_claim += min_req
            if min_per_claim > ALLOCATION_RESULTS_MAX_SIZE:
                raise AllocationError(
                    f"claim {ref}: number of requested devices {min_per_claim} exceeds the claim limit of "
                    f"{ALLOCATION_RESULTS_MAX_SIZE}"
                )
            constraints: list[_Constraint] = []
            for i, c in enumerate(devices.get("constraints") or []):
                names = c.get("requests") or []
                constraint: _Constraint
                if c.get("matchAttribute") is not None:
                    constraint = MatchAttribute(names, c["matchAttribute"], f.list_type_attributes)
                elif c.get("distinctAttribute") is not None and (
                    f.variant != "stable" or f.stable_distinct_attribute
                ):
                    constraint = DistinctAttribute(
                        names, c["distinctAttribute"], f.list_type_attributes, per_request=f.v1_36
                    )
                else:
                    raise AllocationError(
                        f"claim {ref}, constraint #{i}: empty constraint (unsupported constraint type?)"
                    )
                constraint.unsupported_fails = f.unsupported_attribute_fails
                constraint.versions_ignore_build = f.semver_constraints
                constraints.append(constraint)
            self.constraints.append(constraints)
        if self.has_derived:
            for constraints in self.constraints:
                for c in constraints:
                    c.lookup = self._lookup_attribute
        self.validated = True

    def _lookup_attribute(self, rd: ReqData, dev: DeviceEntry, name: str) -> Any:
        """lookupAttribute: the request's derived attribute of that name, else the device's own."""
        expr = rd.derived.get(name)
        if expr is None:
            return dev.attribute(name)
        key = (dev.key, expr)
        if key in self._derived_values:
            return self._derived_values[key]
        f = self.features
        try:
            program = compile_derived_attribute(
                expr,
                consumable_capacity=f.consumable_capacity,
                list_type_attributes=f.cel_list_type_attributes,
                stored_expressions=True,
            )
        except CELCompileError as err:
            raise AllocationError(f"compile derived attribute {name} failed: {err}") from None
        try:
            value = program.attribute(dev.cel_input())
        except CELRuntimeError as err:
            raise AllocationError(
                f"evaluate derived attribute {name} on device {dev.id} failed: {err}"
            ) from None
        self._derived_values[key] = value
        return value

    def _validate_request(self, rd: ReqData, ref: str, admin_set: bool = False) -> None:
        if rd.derived and not self.features.v1_36:
            if not (self.experimental and self.features.derived_attributes):
                raise AllocationError(
                    f"claim {ref}, request {rd.name}: cannot handle request with derived attributes, "
                    "the feature is disabled"
                )
            self.has_derived = True
        sels = []
        for i, sel in enumerate(rd.raw.get("selectors") or []):
            cel = (sel or {}).get("cel")
            if cel is None:
                raise AllocationError(
                    f"claim {ref}, request {rd.name}, selector #{i}: "
                    "CEL expression empty (unsupported selector type?)"
                )
            sels.append(cel.get("expression") or "")
        rd.request_selectors = tuple(sels)
        if not self.features.admin_access and admin_set:
            raise AllocationError(
                f"claim {ref}, request {rd.name}: admin access is requested, but the feature is disabled"
            )
        if not rd.class_name:
            raise AllocationError(
                f"claim {ref}, request {rd.name}: missing device class name (unsupported request type?)"
            )
        cls = self.index.classes.get(rd.class_name)
        if cls is None:
            err = AllocationError(
                f"claim {ref}, request {rd.name}: could not retrieve device class {rd.class_name}: "
                f'deviceclass.resource.k8s.io "{rd.class_name}" not found'
            )
            known = sorted(self.index.classes)
            err.hint = (
                f"the DeviceClasses are {', '.join(known)}" if known else "the input has no DeviceClass"
            ) + " (kdra cluster attributes -c FLEET lists a fleet's classes and the devices each selects)"
            raise err
        rd.class_obj = cls
        rd.class_selectors = self.index.class_selectors(rd.class_name)
        if rd.mode == "ExactCount":
            count = rd.raw.get("count")
            if count is not None and (not isinstance(count, int) or isinstance(count, bool)):
                raise InputError(f"claim {ref}, request {rd.name}: count must be an integer, got {count!r}")
            rd.num_devices = rd.count = 1 if count is None else count
        elif rd.mode == "All":
            self._collect_all(rd, ref)
            rd.num_devices = len(rd.all_devices)
        else:
            raise AllocationError(f"claim {ref}, request {rd.name}: unsupported count mode {rd.mode}")

    def _collect_all(self, rd: ReqData, ref: str) -> None:
        consumable = self.features.consumable_capacity
        # From 1.38 such a pool rules out this node only (the error wraps ErrFailedAllocationOnNode).
        bad_pool = NodeAllocationError if self.features.all_on_bad_pool_fails_node else AllocationError
        for pi, pool in enumerate(self.view.pools):
            if pool.incomplete:
                raise bad_pool(
                    f"claim {ref}, request {rd.name}: asks for all devices, but resource pool {pool.id} is "
                    "currently being updated"
                )
            if pool.invalid:
                raise bad_pool(
                    f"claim {ref}, request {rd.name}: asks for all devices, but resource pool {pool.id} is "
                    "currently invalid"
                )
            for s in pool.slices:
                for dev in s.devices:
                    if not self._selectable(
                        rd, dev, self.view.all_node_ok.get(id(dev), True), raise_errors=True
                    ):
                        continue
                    # 1.36 leaves out devices without enough capacity left; 1.37 only those whose
                    # capacity could never serve the request (the rest make All fail when reached).
                    allocated = self.state.consumed.get(dev.key) if self.features.v1_36 else None
                    if consumable:
                        try:
                            why = check_capacity(
                                rd.capacity_requests,
                                dev.capacity,
                                allocated,
                                None,
                                self.cap_rules,
                                dev.driver,
                            )
                        except CapacityError as err:
                            raise AllocationError(
                                f"claim {ref}, request {rd.name}: checking capacity for device "
                                f"{dev.name}: {err}"
                            ) from None
                        if why:
                            continue
                    rd.all_devices.append((dev, pi))

    # -- selection --------------------------------------------------------------------------------
    def _selector_error(
        self, rd: ReqData, err: SelectorError, is_class: bool, dev: DeviceEntry
    ) -> AllocationError:
        """selectorsMatch's error text. 1.37 names the device of a runtime error and adds a hint to
        "no such key" (cel.EnhanceRuntimeError)."""
        who = f"class {rd.class_name}" if is_class else f"claim {claim_ref(self.claims[rd.claim_index])}"
        if err.compile_error:
            message = err.message if self.features.cel_container_note else without_container_note(err.message)
            return AllocationError(f"{who}: selector #{err.index}: CEL compile error: {message}")
        if self.features.v1_36:
            return AllocationError(f"{who}: selector #{err.index}: CEL runtime error: {err.message}")
        message = err.message
        if "no such key:" in message:
            message += (
                ". consider using CEL optional chaining (.? followed by orValue()) or guarding the check "
                "with has() for optional fields"
            )
        return _device_error(
            f"{who}: selector #{err.index} on device {dev.id}: CEL runtime error: {message}", dev
        )

    def _selectable(self, rd: ReqData, dev: DeviceEntry, node_ok: bool, raise_errors: bool) -> bool | str:
        """isSelectable: True, False, or (raise_errors=False) the error text to raise when reached."""
        if not self.features.device_binding_and_status and dev.binding_conditions:
            return False
        f = self.features
        consumable = f.consumable_capacity
        lists = f.cel_list_type_attributes
        res = evaluate_selectors(dev, rd.class_selectors, consumable, lists, f.cel_lazy_attributes)
        if isinstance(res, SelectorError):
            exc = self._selector_error(rd, res, True, dev)
            if raise_errors:
                raise exc
            return str(exc)
        if res != MATCH:
            return False
        res = evaluate_selectors(dev, rd.request_selectors, consumable, lists, f.cel_lazy_attributes)
        if isinstance(res, SelectorError):
            exc = self._selector_error(rd, res, False, dev)
            if raise_errors:
                raise exc
            return str(exc)
        if res != MATCH:
            return False
        return node_ok

    def candidates(self, rd: ReqData) -> list[tuple[DeviceEntry, int, str | None]]:
        """Selectable devices for an ExactCount request in search order, as (device, pool, error).

        Selector evaluation errors are kept, not raised: upstream evaluates lazily, so an error only
        aborts the allocation when the search actually reaches that device."""
        cached = rd.candidates
        if cached is not None:
            return cached
        f = self.features
        view = self.view
        key = (
            rd.class_selectors,
            rd.request_selectors,
            f.consumable_capacity,
            f.cel_list_type_attributes,
            f.device_binding_and_status,
        )
        entry = view.candidates.get(key)
        if entry is None:
            shared: list[tuple[DeviceEntry, int, tuple[SelectorError, bool] | None]] = []
            lists = f.cel_list_type_attributes
            consumable = f.consumable_capacity
            gate_binding = not f.device_binding_and_status
            for dev, pi, ok in zip(view.devices, view.device_pool, view.node_ok, strict=True):
                if gate_binding and dev.binding_conditions:
                    continue
                res = evaluate_selectors(dev, rd.class_selectors, consumable, lists, f.cel_lazy_attributes)
                if isinstance(res, SelectorError):
                    shared.append((dev, pi, (res, True)))
                    continue
                if res != MATCH:
                    continue
                res = evaluate_selectors(dev, rd.request_selectors, consumable, lists, f.cel_lazy_attributes)
                if isinstance(res, SelectorError):
                    shared.append((dev, pi, (res, False)))
                    continue
                if res == MATCH and ok:
                    shared.append((dev, pi, None))
            if len(view.candidates) >= MAX_CACHED_SELECTOR_SETS:
                view.candidates.clear()
            entry = (shared, any(err is not None for _, _, err in shared))
            view.candidates[key] = entry
        shared, has_errors = entry
        cands: list[tuple[DeviceEntry, int, str | None]]
        if not has_errors:
            cands = cast(list[tuple[DeviceEntry, int, str | None]], shared)  # no error entries: reuse
        else:
            cands = [
                (dev, pi, str(self._selector_error(rd, err[0], err[1], dev)) if err is not None else None)
                for dev, pi, err in shared
            ]
        if f.consumable_capacity and rd.capacity_requests:
            cands = self._with_capacity_errors(rd, cands)
        rd.candidates = cands
        return cands

    def _with_capacity_errors(
        self, rd: ReqData, cands: list[tuple[DeviceEntry, int, str | None]]
    ) -> list[tuple[DeviceEntry, int, str | None]]:
        """1.37 aborts on a capacity request a device's range arithmetic cannot represent (it does not
        depend on what is in use): such candidates carry that error, raised when the search reaches
        them, like a selector error."""
        if self.features.v1_36:
            return cands
        out: list[tuple[DeviceEntry, int, str | None]] | None = None
        for k, (dev, pi, err) in enumerate(cands):
            if err:
                continue
            try:
                check_capacity(rd.capacity_requests, dev.capacity, None, None, self.cap_rules, dev.driver)
            except CapacityError as exc:
                if out is None:
                    out = list(cands)
                ref = claim_ref(self.claims[rd.claim_index])
                out[k] = (
                    dev,
                    pi,
                    f"claim {ref}, request {rd.name}: checking capacity for device {dev.id}: {exc}",
                )
        return out if out is not None else cands

    # -- in-use -----------------------------------------------------------------------------------
    def device_in_use(self, key: DeviceKey) -> bool:
        return key in self.state.dedicated or bool(self.allocating.get(key))

    def capacity_in_use(self, key: DeviceKey) -> bool:
        """Whether a shareable device already has a share (its counters are then already taken). 1.37
        also counts a persisted share that reported no consumedCapacity."""
        return key in self.allocating_capacity or self.shared_in_state(key)

    def shared_in_state(self, key: DeviceKey) -> bool:
        """The allocated state holds a share of the device (deviceCapacityInUse without this run)."""
        if key in self.state.consumed:
            return True
        return not self.features.v1_36 and key in self.state.shared

    def capacity_fits(self, rd: ReqData, dev: DeviceEntry) -> bool:
        if (
            rd.capacity_requests is None
            and not dev.has_policy
            and dev.key not in self.state.consumed
            and dev.key not in self.allocating_capacity
        ):
            return True  # nothing requested, nothing consumed: each capacity is taken whole and fits
        try:
            return not check_capacity(
                rd.capacity_requests,
                dev.capacity,
                self.state.consumed.get(dev.key),
                self.allocating_capacity.get(dev.key),
                self.cap_rules,
                dev.driver,
            )
        except CapacityError:
            return False  # reported where the candidate is reached (candidates())

    def capacity_alone(self, rd: ReqData, dev: DeviceEntry) -> str:
        """Why the device's capacity cannot serve the request beside what the cluster's claims already
        consume ("" if it can)."""
        try:
            return check_capacity(
                rd.capacity_requests,
                dev.capacity,
                self.state.consumed.get(dev.key),
                None,
                self.cap_rules,
                dev.driver,
            )
        except CapacityError as err:
            return str(err)

    def blocked_alone(self, rd: ReqData, dev: DeviceEntry, pi: int) -> str:
        """Why the device cannot serve the request even with nothing else allocated ("" if it can)."""
        f = self.features
        if f.consumable_capacity and self.capacity_alone(rd, dev):
            return "capacity"
        if dev.consumes:
            if not f.partitionable_devices:
                return "counters"
            pool = self.view.pools[pi]
            if not (
                f.consumable_capacity and dev.allow_multi and self.shared_in_state(dev.key)
            ) and self.owner.counters_exact(pool):
                avail, broken = self.owner.available_counters(pool)
                if broken:
                    return "counters"
                for set_name, counters in dev.consumes:
                    cs = avail.get(set_name)
                    if cs is None:
                        continue
                    for cname, amount in counters:
                        if cname in cs and cs[cname] < amount:
                            return "counters"
        if f.device_taints and blocking_taint(dev, rd.tolerations) is not None:
            return "taints"
        return ""

    # -- counters ---------------------------------------------------------------------------------
    def _counter_key(self, pi: int) -> Any:
        return self.view.pools[pi].name if self.features.v1_36 else pi

    def _reserve_counters(self, dev: DeviceEntry, pi: int) -> bool:
        pool = self.view.pools[pi]
        key = self._counter_key(pi)
        rem = self.remaining.get(key)
        if rem is None:
            avail, broken = self.owner.available_counters(pool)
            if broken:
                return False
            rem = {name: dict(c) for name, c in avail.items()}
            self.remaining[key] = rem
        ok = True
        touched: list[tuple[dict[str, int], str, int]] = []
        for set_name, counters in dev.consumes:
            cs = rem.get(set_name)
            if cs is None:
                continue
            for cname, amount in counters:
                if cname not in cs:
                    continue
                cs[cname] -= amount
                touched.append((cs, cname, amount))
                if cs[cname] < 0:
                    ok = False
        if not ok:
            for cs, cname, amount in touched:
                cs[cname] += amount
        return ok

    def _release_counters(self, dev: DeviceEntry, pi: int) -> None:
        rem = self.remaining[self._counter_key(pi)]
        for set_name, counters in dev.consumes:
            cs = rem.get(set_name)
            if cs is None:
                continue
            for cname, amount in counters:
                if cname in cs:
                    cs[cname] += amount

    # -- the search -------------------------------------------------------------------------------
    def search(self, budget: int) -> bool:
        """Validate, then search with at most `budget` device attempts (SearchLimitExceeded beyond)."""
        self.validate()
        self.budget = budget
        # The search recurses once per device, request and claim (as upstream does); make room for
        # pods with many devices instead of failing with RecursionError.
        depth = 3 * sum(min(max(rd.num_devices, 1), 64) for rd in self.requests.values()) + 4 * len(
            self.claims
        )
        if sys.getrecursionlimit() < depth + 1000:
            sys.setrecursionlimit(depth + 1000)
        return self.allocate_one(0, 0, 0, 0, False, 0)

    def _hopeless(self) -> bool:
        """Cheap necessary conditions, checked before searching (avoids exhaustive searches such as
        kubernetes#131730). Exact: never rejects a solvable input and never hides an error the
        search would report (requests whose candidates include a CEL error are left to the search)."""
        if self.has_derived:
            return False  # derived attributes may fail to evaluate: only the search knows where
        has_all = any(rd.mode == "All" for rd in self.requests.values())
        if has_all and any(self.constraints):
            return False  # the search may have to report an All-constraint error
        groups: dict[tuple[int, ...], int] = {}
        union: set[int] = set()
        total = 0
        shareable = False
        demand: dict[tuple[int, str, str], int] = {}  # (pool, counter set, counter) -> least consumption
        for ci, claim in enumerate(self.claims):
            reqs = ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []
            per_request: list[list[tuple[ReqData, list[DeviceEntry]]]] = []
            for ri in range(len(reqs)):
                subs: list[ReqData] = []
                si = 0
                while (ci, ri, si) in self.requests:
                    subs.append(self.requests[(ci, ri, si)])
                    si += 1
                feasible = False
                alts: list[tuple[ReqData, list[DeviceEntry]]] = []
                for rd in subs:
                    if rd.mode == "All":
                        feasible = True
                        alts.append((rd, [d for d, _ in rd.all_devices]))
                        continue
                    usable, errors = request_candidates(self, rd)
                    if errors:
                        return False
                    if len(usable) >= rd.num_devices:
                        feasible = True
                    alts.append((rd, [d for d, _ in usable]))
                    if len(subs) == 1:
                        self._add_counter_demand(rd, usable, demand)
                    if len(subs) == 1 and not rd.admin:
                        if self.features.consumable_capacity and any(d.allow_multi for d, _ in usable):
                            shareable = True
                        ids = tuple(sorted(id(d) for d, _ in usable))
                        groups[ids] = groups.get(ids, 0) + rd.num_devices
                        union.update(ids)
                        total += rd.num_devices
                if not feasible:
                    return True
                per_request.append(alts)
            if not self._constraints_satisfiable(ci, per_request):
                return True
        for (pi, set_name, cname), amount in demand.items():
            if not self.owner.counters_exact(self.view.pools[pi]):
                continue
            avail, _ = self.owner.available_counters(self.view.pools[pi])
            if amount > avail.get(set_name, {}).get(cname, amount):
                return True
        if shareable or has_all:
            return False
        if total > len(union):
            return True
        return any(need > len(ids) for ids, need in groups.items())

    def _add_counter_demand(
        self, rd: ReqData, usable: list[tuple[DeviceEntry, int]], demand: dict[tuple[int, str, str], int]
    ) -> None:
        """Least counter consumption of a request whose every candidate draws on the same counter.

        Necessary condition: summed over requests, it cannot exceed what the counter has left.
        Requests that could take a shared device (which may skip the counter check) are ignored."""
        if not usable or rd.num_devices <= 0 or not self.features.partitionable_devices:
            return
        if self.features.consumable_capacity and any(d.allow_multi for d, _ in usable):
            return
        per_counter: dict[tuple[int, str, str], list[int]] = {}
        for i, (dev, pi) in enumerate(usable):
            seen: dict[tuple[int, str, str], int] = {}
            for set_name, counters in dev.consumes:
                for cname, amount in counters:
                    key = (pi, set_name, cname)
                    seen[key] = seen.get(key, 0) + amount
            if i == 0:
                per_counter = {k: [v] for k, v in seen.items()}
            else:
                per_counter = {k: [*v, seen[k]] for k, v in per_counter.items() if k in seen}
            if not per_counter:
                return
        for key, amounts in per_counter.items():
            if len(amounts) < rd.num_devices:
                continue
            least = sum(sorted(amounts)[: rd.num_devices])
            if least > 0:
                demand[key] = demand.get(key, 0) + least

    def _constraints_satisfiable(
        self, ci: int, per_request: list[list[tuple[ReqData, list[DeviceEntry]]]]
    ) -> bool:
        """Necessary condition per constraint: enough usable devices share a value (matchAttribute) or
        have different values (distinctAttribute) for the requests it covers. `per_request` holds, per
        request of the claim, its alternatives (one unless firstAvailable) with their usable devices.
        A request counts with the fewest devices any of its alternatives takes (none if some
        alternative is not covered); constraints over a request in All mode are left to the search."""
        constraints = self.constraints[ci]
        if not constraints:
            return True
        for c in constraints:
            contributions: list[int] = []
            devices: dict[int, DeviceEntry] = {}
            skip = False
            for alts in per_request:
                covered = [(rd, devs) for rd, devs in alts if c.applies(rd)]
                if not covered:
                    continue
                if any(rd.mode == "All" for rd, _ in alts):
                    skip = True
                    break
                for _, devs in covered:
                    for dev in devs:
                        devices[id(dev)] = dev
                contributions.append(0 if len(covered) < len(alts) else min(rd.num_devices for rd, _ in alts))
            need = sum(contributions)
            if skip or need < 2:
                continue
            if (
                isinstance(c, MatchAttribute)
                and self.features.consumable_capacity
                and any(d.allow_multi for d in devices.values())
            ):
                continue  # one shared device may serve several requests (a distinct value only one)
            counts: dict[Any, int] = {}
            for dev in devices.values():
                raw = dev.attribute(c.attribute)
                if raw is None:
                    continue
                av = attribute_value(raw)
                if av is None:
                    # No value upstream can compare: as the first device of a distinctAttribute it still
                    # passes, so count it as a value of its own.
                    counts[("?", id(dev))] = 1
                    continue
                if c.list_types:
                    for v in _as_set(av)[1]:
                        k = (av[0].rstrip("s"), v)
                        counts[k] = counts.get(k, 0) + 1
                else:
                    counts[av] = counts.get(av, 0) + 1
            if isinstance(c, MatchAttribute):
                if max(counts.values(), default=0) < need:
                    return False
            elif isinstance(c, DistinctAttribute):
                # 1.37 compares every pair of devices. 1.36 keeps one value per request, so the values
                # the requests end with are pairwise distinct, and a request with several devices
                # needs two values at least (consecutive devices are compared).
                if c.per_request:
                    # When request r adds its second device, it is compared with the final values of
                    # the requests before it and with its own first one: that takes (requests before
                    # r) + 2 distinct values.
                    need = before = 0
                    for n in contributions:
                        if n > 0:
                            need = max(need, before + min(n, 2))
                            before += 1
                if len(counts) < need:
                    return False
        return True

    def _step(self) -> None:
        self.steps += 1
        if self.steps > self.budget:
            raise SearchLimitExceeded

    def allocate_one(self, ci: int, ri: int, si: int, di: int, in_sub: bool, start: int) -> bool:
        self._step()
        if ci >= len(self.claims):
            return True
        claim = self.claims[ci]
        nreq = len(((claim.get("spec") or {}).get("devices") or {}).get("requests") or [])
        if ri >= nreq:
            try:
                return self.allocate_one(ci + 1, 0, 0, 0, False, 0)
            except _MaxSizeExceeded:
                return False
        rd = self.requests[(ci, ri, si)]
        if not in_sub and rd.parent_name is not None:
            all_exceeded = True
            sub = 0
            while (ci, ri, sub) in self.requests:
                try:
                    ok = self.allocate_one(ci, ri, sub, 0, True, 0)
                except _MaxSizeExceeded:
                    sub += 1
                    continue
                all_exceeded = False
                if ok:
                    self.requests[(ci, ri, 0)].selected_sub = sub
                    return True
                sub += 1
            if all_exceeded:
                raise _MaxSizeExceeded
            return False

        do_all = rd.mode == "All"
        if do_all and not rd.all_devices:
            return False
        if di >= rd.num_devices:
            return self.allocate_one(ci, ri + 1, 0, 0, False, 0)
        if len(self.results[ci]) + rd.num_devices - di > ALLOCATION_RESULTS_MAX_SIZE:
            raise _MaxSizeExceeded

        if do_all:
            dev, pi = rd.all_devices[di]
            undo = self.allocate_device(rd, dev, pi, must=True)
            if undo is None:
                return False
            try:
                done = self.allocate_one(ci, ri, si, di + 1, in_sub, 0)
            except Exception:
                undo()
                raise
            if not done:
                undo()
            return done

        cands = self.candidates(rd)
        if self.prefer is not None:
            if di == 0:
                rd.ordered = preferred_order(self, rd, cands)
            cands = rd.ordered
        admin = rd.admin
        dedicated = self.state.dedicated
        allocating = self.allocating
        consumable = self.features.consumable_capacity
        # Exact cut: fewer candidates left than devices still needed, and none of them could raise an
        # error when reached (upstream would scan them and fail).
        prune = self.owner.prune and self._prunable(ci)
        if prune and len(cands) - start < rd.num_devices - di and self._last_error(rd) < start:
            return False
        for k in range(start, len(cands)):
            self.steps += 1
            dev, pi, err = cands[k]
            key = dev.key
            if admin:
                holders = allocating.get(key)
                if holders and ci in holders:
                    continue
            elif key in dedicated or allocating.get(key):
                continue
            if err:
                raise _device_error(err, dev)
            if consumable and not self.capacity_fits(rd, dev):
                continue
            undo = self.allocate_device(rd, dev, pi, must=False)
            if undo is None:
                continue
            if prune and self._match_dead_end(rd, ri, di, k):
                undo()
                continue
            try:
                done = self.allocate_one(ci, ri, si, di + 1, in_sub, k + 1)
            except _MaxSizeExceeded:
                undo()
                raise
            if done:
                return True
            undo()
        return False

    # -- compatibility groups (DRADeviceCompatibilityGroups, 1.37 experimental) -------------------
    def _compat_baseline(self, pi: int) -> dict[str, _Compat]:
        """Per counter set of the pool: the intersection the already-allocated devices contribute."""
        base = self._compat_base.get(pi)
        if base is None:
            base = {}
            pool = self.view.pools[pi]
            for slices in (pool.slices, pool.other_slices):
                for s in slices:
                    for d in s.devices:
                        if not d.consumes or not self.state.is_allocated(d.key):
                            continue
                        for i, (set_name, _) in enumerate(d.consumes):
                            groups = d.compat_groups[i] if d.compat_groups else frozenset()
                            base[set_name] = base.get(set_name, _NO_MEMBERS).add(groups)
            self._compat_base[pi] = base
        return base

    def _consume_compat_groups(self, dev: DeviceEntry, pi: int) -> Callable[[], None] | None:
        """checkAndConsumeCompatibilityGroups: None if the device's groups do not intersect those of the
        devices already on one of its counter sets, else the function that undoes folding them in."""
        running = self._compat.setdefault(pi, {})
        baseline = self._compat_baseline(pi)
        saved: list[tuple[str, _Compat | None]] = []

        def restore() -> None:
            for set_name, prev in reversed(saved):
                if prev is None:
                    running.pop(set_name, None)
                else:
                    running[set_name] = prev

        for i, (set_name, _) in enumerate(dev.consumes):
            prev = running.get(set_name)
            cur = prev if prev is not None else baseline.get(set_name, _NO_MEMBERS)
            groups = dev.compat_groups[i] if dev.compat_groups else frozenset()
            if not cur.admits(groups):
                restore()
                return None
            saved.append((set_name, prev))
            running[set_name] = cur.add(groups)
        return restore

    # -- exact pruning during the search ----------------------------------------------------------
    # A cut is allowed only where upstream's search, continuing from the same point, would neither
    # find an allocation nor raise an error; the search order is untouched, so the first allocation
    # found (the answer) is the same.

    def _last_error(self, rd: ReqData) -> int:
        """Index of the last candidate whose selectors fail to evaluate (-1 if none)."""
        last = rd.last_error
        if last is None:
            last = -1
            for k, (_, _, err) in enumerate(self.candidates(rd)):
                if err:
                    last = k
            rd.last_error = last
        return last

    def _prunable(self, ci: int) -> bool:
        """Cuts inside claim `ci` cannot change which errors upstream reports or how it backtracks:
        the claim can never exceed the result limit (upstream's aggressive backtracking), and no request
        is in All mode (its constraint error)."""
        if self.has_derived:
            return False  # a derived attribute may fail to evaluate on a device the search skipped
        ok = self._claim_prunable.get(ci)
        if ok is None:
            total = 0
            ok = True
            ri = 0
            while (ci, ri, 0) in self.requests:
                most = 0
                si = 0
                while (ci, ri, si) in self.requests:
                    alt = self.requests[(ci, ri, si)]
                    if alt.mode == "All":
                        ok = False
                    most = max(most, alt.num_devices)
                    si += 1
                total += most
                ri += 1
            ok = ok and total <= ALLOCATION_RESULTS_MAX_SIZE
            self._claim_prunable[ci] = ok
        return ok

    def _later_requests_error_free(self, ci: int, ri: int) -> bool:
        key = (ci, ri)
        ok = self._error_free_after.get(key)
        if ok is None:
            ok = True
            r = ri + 1
            while ok and (ci, r, 0) in self.requests:
                si = 0
                while (ci, r, si) in self.requests:
                    if self._last_error(self.requests[(ci, r, si)]) >= 0:
                        ok = False
                        break
                    si += 1
                r += 1
            self._error_free_after[key] = ok
        return ok

    def _match_dead_end(self, rd: ReqData, ri: int, di: int, k: int) -> bool:
        """After `rd` took candidate `k` as its device `di`: whether some matchAttribute constraint of
        the claim, whose value is now fixed, leaves too few devices with that value for the rest of its
        requests in this claim (this request's later candidates and the later requests without
        alternatives), counting only devices not in use. Devices that allow multiple allocations could
        serve several requests, so their presence disables the cut."""
        ci = rd.claim_index
        constraints = self.constraints[ci]
        if not constraints or self._last_error(rd) > k or not self._later_requests_error_free(ci, ri):
            return False
        for c in constraints:
            if not isinstance(c, MatchAttribute) or c.num == 0 or not c.applies(rd):
                continue
            needs: list[tuple[ReqData, int, int]] = []
            if rd.num_devices - di - 1 > 0:
                needs.append((rd, rd.num_devices - di - 1, k + 1))
            r = ri + 1
            while (ci, r, 0) in self.requests:
                later = self.requests[(ci, r, 0)]
                if later.parent_name is None and later.mode != "All" and c.applies(later):
                    needs.append((later, later.num_devices, 0))
                r += 1
            if not needs:
                continue
            union: set[int] = set()
            total = 0
            for req, need, start in needs:
                supply = 0
                # `start` indexes the list the search walks: a device preference's order when one is on.
                walked = req.ordered if self.prefer is not None and req.ordered else self.candidates(req)
                for dev, _, _ in walked[start:]:
                    if self._taken_for(req, dev):
                        continue
                    if not c.value_matches(dev):
                        continue
                    if self.features.consumable_capacity and dev.allow_multi:
                        return False
                    supply += 1
                    union.add(id(dev))
                if supply < need:
                    return True
                total += need
            if len(union) < total:
                return True
        return False

    def _taken_for(self, rd: ReqData, dev: DeviceEntry) -> bool:
        key = dev.key
        if rd.admin:
            holders = self.allocating.get(key)
            return bool(holders and rd.claim_index in holders)
        return key in self.state.dedicated or bool(self.allocating.get(key))

    def allocate_device(
        self, rd: ReqData, dev: DeviceEntry, pi: int, must: bool
    ) -> Callable[[], None] | None:
        """Check availability, counters, taints and constraints; on success record the device and
        return the function that undoes it (upstream allocateDevice + rollbackDevice)."""
        f = self.features
        ci = rd.claim_index
        key = dev.key
        allow_multi = f.consumable_capacity and dev.allow_multi
        if not allow_multi and rd.admin:
            holders = self.allocating.get(key)
            if holders and ci in holders:
                return None
        if not rd.admin and self.device_in_use(key):
            return None
        if not rd.admin and not allow_multi and f.share_blocks_exclusive and self.capacity_in_use(key):
            return None  # a live share (the device allowed multiple allocations before) blocks it
        if (
            self.experimental
            and dev.slice.skip_node_ops
            and (
                not f.optional_node_operations
                or OPTIONAL_NODE_OPERATIONS_FEATURE not in self.view.declared_features
            )
        ):
            return None  # the node must declare the DRAOptionalNodeOperations feature
        if not f.partitionable_devices and dev.consumes:
            return None
        skip_counters = allow_multi and self.capacity_in_use(key)
        compat_undo: Callable[[], None] | None = None
        if self.compat_groups and not skip_counters and dev.consumes:
            compat_undo = self._consume_compat_groups(dev, pi)
            if compat_undo is None:
                return None
        counters_reserved = False
        if not skip_counters and dev.consumes:
            if not self._reserve_counters(dev, pi):
                if compat_undo is not None:
                    compat_undo()
                return None
            counters_reserved = True
        if f.device_taints and blocking_taint(dev, rd.tolerations) is not None:
            self._roll_back(rd, dev, pi, 0, counters_reserved, compat_undo)
            return None
        constraints = self.constraints[ci]
        added = 0
        for c in constraints:
            failure: _UnsupportedValue | None = None
            try:
                ok = c.add(rd, dev)
            except _UnsupportedValue as err:
                ok, failure = False, err
            if not ok:
                self._roll_back(rd, dev, pi, added, counters_reserved, compat_undo)
                if failure is not None:
                    # The stable allocator names the claim and request; the incubating one does not.
                    if f.variant != "stable":
                        raise _device_error(str(failure), dev)
                    raise _device_error(
                        f"claim {claim_ref(self.claims[ci])}, request {rd.name}: {failure}", dev
                    )
                if must:
                    raise AllocationError(
                        f"claim {claim_ref(self.claims[ci])}, request {rd.name}: cannot add device {dev.id} "
                        "because a claim constraint would not be satisfied"
                    )
                return None
            added += 1
        marked = False
        if not allow_multi:
            self.allocating.setdefault(key, set()).add(ci)
            marked = True
        consumed: dict[str, Quantity] | None = None
        cap_inserted = False
        cap_existed = False
        if f.consumable_capacity:
            if not self.capacity_fits(rd, dev):
                if marked:
                    self.allocating[key].discard(ci)
                self._roll_back(rd, dev, pi, added, counters_reserved, compat_undo)
                return None
            if allow_multi:
                try:
                    consumed = consumed_capacity(
                        rd.capacity_requests, dev.capacity, self.cap_rules, dev.driver
                    )
                except CapacityError as err:
                    raise AllocationError(
                        f"claim {claim_ref(self.claims[ci])}, request {rd.name}: computing consumed capacity "
                        f"for device {dev.id}: {err}"
                    ) from None
                cap_existed = key in self.allocating_capacity
                agg = self.allocating_capacity.setdefault(key, {})
                for name, q in consumed.items():
                    agg[name] = agg.get(name, 0) + q.nanos
                cap_inserted = True
        results = self.results[ci]
        results.append(_Result(rd, dev, pi, allow_multi, consumed or None))

        def undo() -> None:
            results.pop()
            if cap_inserted and consumed is not None:
                agg = self.allocating_capacity.get(key)
                if agg is not None:
                    for name, q in consumed.items():
                        if name in agg:
                            agg[name] -= q.nanos
                    if all(v == 0 for v in agg.values()) and not cap_existed:
                        del self.allocating_capacity[key]
            if marked:
                self.allocating[key].discard(ci)
            self._roll_back(rd, dev, pi, added, counters_reserved, compat_undo)

        return undo

    def _roll_back(
        self,
        rd: ReqData,
        dev: DeviceEntry,
        pi: int,
        added: int,
        counters_reserved: bool,
        compat_undo: Callable[[], None] | None,
    ) -> None:
        """Take back the constraints a device was added to (the first `added`, last first), its counters and
        its compatibility groups, in the reverse order allocate_device took them (upstream rollbackDevice)."""
        constraints = self.constraints[rd.claim_index]
        for j in range(added - 1, -1, -1):
            constraints[j].remove(rd, dev)
        if counters_reserved:
            self._release_counters(dev, pi)
        if compat_undo is not None:
            compat_undo()

    # -- results ----------------------------------------------------------------------------------
    def build_results(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for ci, claim in enumerate(self.claims):
            out.append(self._build_one(ci, claim))
        return out

    def _selected(self, ci: int, ri: int) -> ReqData:
        rd = self.requests[(ci, ri, 0)]
        if rd.parent_name is not None:
            rd = self.requests[(ci, ri, rd.selected_sub)]
        return rd

    def _build_one(self, ci: int, claim: Mapping[str, Any]) -> dict[str, Any]:
        f = self.features
        spec_devices = ((claim.get("spec") or {}).get("devices")) or {}
        requests = spec_devices.get("requests") or []
        results: list[dict[str, Any]] = []
        for i, r in enumerate(self.results[ci]):
            item: dict[str, Any] = {
                "request": r.rd.full_name,
                "driver": r.dev.driver,
                "pool": r.dev.pool,
                "device": r.dev.name,
            }
            if r.rd.admin:
                item["adminAccess"] = True
            if r.rd.tolerations:
                item["tolerations"] = [_defaulted_toleration(t) for t in r.rd.tolerations]
            if f.device_binding_and_status:
                if r.dev.binding_conditions:
                    item["bindingConditions"] = list(r.dev.binding_conditions)
                if r.dev.binding_failure_conditions:
                    item["bindingFailureConditions"] = list(r.dev.binding_failure_conditions)
            if self.experimental and r.dev.slice.skip_node_ops:
                item["skipNodeOperations"] = list(r.dev.slice.skip_node_ops)
            if r.share:
                item["shareID"] = self.owner._make_share_id(claim, ci, r.rd.full_name, r.dev, i)
            if r.consumed:
                item["consumedCapacity"] = {k: str(v) for k, v in r.consumed.items()}
            results.append(item)

        config: list[dict[str, Any]] = []
        class_ranges: dict[str, tuple[int, int]] = {}
        for ri in range(len(requests)):
            rd = self._selected(ci, ri)
            cls = rd.class_obj
            if cls is None:
                continue
            cname = rd.class_name
            if cname in class_ranges:
                start, end = class_ranges[cname]
                for i in range(start, end):
                    config[i]["requests"].append(rd.full_name)
                continue
            start = len(config)
            for c in (cls.get("spec") or {}).get("config") or []:
                entry = {"source": "FromClass", "requests": [rd.full_name]}
                entry.update({k: v for k, v in c.items() if k not in ("source", "requests")})
                config.append(entry)
            class_ranges[cname] = (start, len(config))
        v1_36 = f.v1_36
        for c in spec_devices.get("config") or []:
            names = c.get("requests") or []
            body = {k: v for k, v in c.items() if k != "requests"}
            if not names:
                config.append({"source": "FromClaim", **body})
                continue
            # 1.36 adds the config once per request it names (a config naming two requests appears
            # twice); 1.37 once.
            for ri, request in enumerate(requests):
                if request.get("name") in names:
                    config.append({"source": "FromClaim", "requests": list(names), **body})
                    if v1_36:
                        continue
                    break
                rd0 = self.requests[(ci, ri, 0)]
                if rd0.parent_name is None:
                    continue
                if self._selected(ci, ri).full_name in names:
                    config.append({"source": "FromClaim", "requests": list(names), **body})
                    if not v1_36:
                        break
        if not v1_36:
            # 1.37: a config that applies to every request gets no list ("empty means all").
            for entry in config:
                names = entry.get("requests")
                if names and all(
                    request.get("name") in names or self._selected(ci, ri).full_name in names
                    for ri, request in enumerate(requests)
                ):
                    del entry["requests"]
        allocation: dict[str, Any] = {"devices": {"results": results}}
        if config:
            allocation["devices"]["config"] = config
        node_selector = self._node_selector(ci, claim)
        if node_selector is not None:
            allocation["nodeSelector"] = node_selector
        return allocation

    def _node_selector(self, ci: int, claim: Mapping[str, Any]) -> dict[str, Any] | None:
        fields: list[dict[str, Any]] = []
        exprs: list[dict[str, Any]] = []
        for r in self.results[ci]:
            s = r.dev.slice
            if s.per_device:
                node_name, selector = r.dev.node_name, r.dev.node_selector
            else:
                node_name, selector = s.node_name, s.node_selector
            if node_name or r.dev.binds_to_node:
                return {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [self.view.node_name]}
                            ]
                        }
                    ]
                }
            if selector is not None:
                terms = selector.get("nodeSelectorTerms") or []
                if len(terms) == 1:
                    _add_requirements(terms[0].get("matchFields") or [], fields)
                    _add_requirements(terms[0].get("matchExpressions") or [], exprs)
                elif len(terms) > 1:
                    name = (claim.get("metadata") or {}).get("name", "")
                    raise AllocationError(
                        f"create NodeSelector for claim {name}: unsupported ResourceSlice.NodeSelector with "
                        f"{len(terms)} terms"
                    )
        if not fields and not exprs:
            return None
        term: dict[str, Any] = {}
        if exprs:
            term["matchExpressions"] = exprs
        if fields:
            term["matchFields"] = fields
        return {"nodeSelectorTerms": [term]}


def _explain_run(run: _Run, limit_hit: bool) -> Explanation:
    from kdra.allocator.explain import Explanation, explain

    try:
        return explain(run, limit_hit=limit_hit)
    except Exception as exc:  # the verdict stands even if explaining it fails
        return Explanation(
            run.view.node_name, reasons=[f"cannot allocate all claims (no explanation: {exc!r})"]
        )


def request_candidates(run: _Run, rd: ReqData) -> tuple[list[tuple[DeviceEntry, int]], bool]:
    """Devices an ExactCount request could take if nothing else were being allocated, and whether
    any selector evaluation among the devices not in use failed."""
    usable: list[tuple[DeviceEntry, int]] = []
    errors = False
    dedicated = run.state.dedicated
    for dev, pi, err in run.candidates(rd):
        if not rd.admin and dev.key in dedicated:
            continue
        if err:
            errors = True
            continue
        if run.blocked_alone(rd, dev, pi):
            continue
        usable.append((dev, pi))
    return usable, errors


def _device_error(message: str, dev: DeviceEntry) -> AllocationError:
    """An error about one device; a CEL "no such key" gets a hint: the names the device does publish
    (a selector read `.index`, which NVIDIA's driver publishes and a fleet may not)."""
    err = AllocationError(message)
    if "no such key:" in message:
        names = sorted({*dev.attributes, *dev.capacity_raw})
        shown = ", ".join(names[:12]) + (f" and {len(names) - 12} more" if len(names) > 12 else "")
        err.hint = (
            f"device {dev.id} publishes {shown or 'no attributes or capacity'}; kdra cluster attributes -c "
            "FLEET lists every name a fleet's devices publish, per driver, with a CEL selector for each"
        )
    return err


def _defaulted_toleration(t: Mapping[str, Any]) -> dict[str, Any]:
    """A request's toleration as the API server stores it (operator defaults to Equal), which is what
    upstream copies into the result."""
    out = dict(t)
    if not out.get("operator"):
        out["operator"] = "Equal"
    return out


def _add_requirements(src: Iterable[Mapping[str, Any]], dst: list[dict[str, Any]]) -> None:
    for req in src:
        values = set(req.get("values") or [])
        if any(
            e.get("key") == req.get("key")
            and e.get("operator") == req.get("operator")
            and set(e.get("values") or []) == values
            for e in dst
        ):
            continue
        dst.append(dict(req))
