"""DRA bookkeeping for the scheduler: the allocator index, what is allocated, and cheap per-node checks.

One `AllocatorIndex` (kdra.allocator) is built per version of the DeviceClasses and ResourceSlices and
reused by every cycle and node, together with one `Allocator`; what is in use is one `AllocatedState`,
changed incrementally (`add_claim`/`remove_claim`, reference-counted) from claim events and from the
scheduler's own assumptions (upstream's in-flight allocations, SignalClaimPendingAllocation), keyed by claim
uid so repeated events never double count.

Before the allocator runs on a node, `free_devices(node, class)` gives an upper bound on the devices of a
class the node can still offer (`AllocatorIndex.devices_of_class` minus those exclusively in use). A node
with fewer than the pod's exact-count demand per class is ruled out without a search: this is only ever a
necessary condition, the allocator decides.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kdra.allocator import AllocatedState, AllocationOutcome, Allocator, LazyExplanation, NodeAllocationError
from kdra.allocator.index import AllocatorIndex
from kdra.api.features import FeatureGates
from kdra.api.pods import MAX_RESERVED_FOR
from kdra.api.types import Obj
from kdra.cluster.store import StoreError, WatchEvent
from kdra.errors import AllocationError

if TYPE_CHECKING:
    from kdra.scheduler.cache import SchedulerCache
    from kdra.scheduler.devicepref import MeasuredPreference

DELETE_PROTECTION_FINALIZER = "resource.kubernetes.io/delete-protection"
POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
EXTENDED_RESOURCE_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
IMPLICIT_EXTENDED_PREFIX = "deviceclass.resource.kubernetes.io/"
UNBOUNDED = 1 << 30
MAX_DEVICES_PER_CLAIM = 32  # the allocator's claim limit (resourceapi.AllocationResultsMaxSize)


class ClaimChangedError(StoreError):
    """A claim changed between the scheduling decision and PreBind's write in a way the decision did not
    see (deleted, allocated with other devices, deallocated, reservedFor full): the pod is unreserved and
    retried, never written over it."""

    reason = "Conflict"


def _result_ids(alloc: Mapping[str, Any]) -> list[tuple[str, str, str, str, str]]:
    results = (alloc.get("devices") or {}).get("results") or []
    return sorted(
        (
            str(r.get("request", "")),
            str(r.get("driver", "")),
            str(r.get("pool", "")),
            str(r.get("device", "")),
            str(r.get("shareID") or ""),
        )
        for r in results
    )


def _results(claim: Mapping[str, Any]) -> Any:
    return (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")


def same_allocation(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """Whether two allocation results name the same devices (and shares) for the same requests on the same
    nodes: what the API server stored for a write, whatever fields it defaulted."""
    if not a or not b:
        return not a and not b
    return _result_ids(a) == _result_ids(b) and json.dumps(
        a.get("nodeSelector"), sort_keys=True
    ) == json.dumps(b.get("nodeSelector"), sort_keys=True)


def claim_status_for_pod(
    current: Mapping[str, Any], ref: Mapping[str, str], allocation: Mapping[str, Any], *, allocate: bool
) -> Obj | None:
    """The status to write so that the claim `current` (as just read) is allocated with `allocation` and
    reserved for the pod `ref`; None when it already is.

    PreBind calls this after every (re-)read, in the loop and in the binding workers, instead of
    re-applying its decision: what changed since the decision is checked, not left to the API server's
    422. Already ours (an earlier write of this scheduler that answered with an error, a 504 or a broken
    connection, had committed): nothing or only the reservation is left to write. Someone else's change
    raises ClaimChangedError. `allocate`: the decision allocated the claim (it was unallocated);
    otherwise it only adds the pod to a claim that was allocated with `allocation` when it was decided."""
    meta = current.get("metadata") or {}
    name = f"{meta.get('namespace', 'default')}/{meta.get('name')}"
    if meta.get("deletionTimestamp"):
        raise ClaimChangedError(f"ResourceClaim {name} is being deleted")
    st = current.get("status") or {}
    have = st.get("allocation")
    rf = list(st.get("reservedFor") or [])
    mine = any(r.get("uid") == ref.get("uid") for r in rf)
    if have:
        if not same_allocation(have, allocation):
            devices = ", ".join(device_ids((have.get("devices") or {}).get("results") or []))
            raise ClaimChangedError(
                f"ResourceClaim {name} was allocated meanwhile by someone else ({devices})"
            )
        if mine:
            return None
        if len(rf) >= MAX_RESERVED_FOR:
            raise ClaimChangedError(f"ResourceClaim {name}: reservedFor is full")
        return dict(st, reservedFor=[*rf, dict(ref)])
    if not allocate:
        raise ClaimChangedError(f"ResourceClaim {name} was deallocated meanwhile")
    return dict(st, allocation=dict(allocation), reservedFor=rf if mine else [*rf, dict(ref)])


def claim_spec_key(claim: Mapping[str, Any]) -> str:
    return json.dumps((claim.get("spec") or {}).get("devices") or {}, sort_keys=True, separators=(",", ":"))


DemandKey = tuple[str, tuple[str, ...]]  # (DeviceClass, the request's CEL selectors)


def _selectors(req: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(((s.get("cel") or {}).get("expression") or "") for s in req.get("selectors") or [])


@dataclass(slots=True)
class ClaimDemand:
    """Per (class, request selectors): the fewest devices the claims need (exact counts; firstAvailable:
    any one alternative)."""

    exact: dict[DemandKey, int] = field(default_factory=dict)
    alternatives: list[list[tuple[DemandKey, int]]] = field(default_factory=list)
    # A claim that can make the allocator raise wherever it finds devices (an All request: the claim
    # limit counts what it finds, its constraints can fail; or more devices than a claim may have).
    may_raise: bool = False

    def add_claim(self, claim: Mapping[str, Any]) -> None:
        devices = 0
        for req in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
            ex = req.get("exactly")
            subs = [ex] if ex is not None else list(req.get("firstAvailable") or [])
            if any(sub.get("allocationMode") == "All" for sub in subs):
                self.may_raise = True
            devices += min((int(sub.get("count") or 1) for sub in subs), default=0)
            if ex is not None:
                cls = (ex.get("deviceClassName", ""), _selectors(ex))
                if ex.get("allocationMode", "ExactCount") == "All":
                    self.exact.setdefault(cls, 0)
                    self.exact[cls] = max(self.exact[cls], 1)
                elif ex.get("capacity") or ex.get("adminAccess"):
                    self.exact[cls] = max(self.exact.get(cls, 0), 1) if not ex.get("adminAccess") else 0
                else:
                    self.exact[cls] = self.exact.get(cls, 0) + int(ex.get("count") or 1)
            elif req.get("firstAvailable"):
                alts = []
                for sub in req["firstAvailable"]:
                    n = (
                        1
                        if sub.get("allocationMode") == "All" or sub.get("capacity")
                        else int(sub.get("count") or 1)
                    )
                    alts.append(((sub.get("deviceClassName", ""), _selectors(sub)), n))
                self.alternatives.append(alts)
        if devices > MAX_DEVICES_PER_CLAIM:
            self.may_raise = True


@dataclass(slots=True)
class DeviceFit:
    """What the claims get on one node: `allocations` (one per claim), or why not."""

    allocations: list[Obj] | None
    reason: str = ""  # kube-scheduler's text for the node
    explanation: Any = None  # the allocator's (lazy) explanation
    exception: AllocationError | None = None  # what the allocator raised
    error: bool = False  # not a verdict on the node: the Filter returns Error (the pod's attempt fails)
    gave_up: bool = False
    steps: int = 0

    @property
    def node_error(self) -> bool:
        """Upstream's ErrFailedAllocationOnNode (invalid pools): only this node is ruled out."""
        return self.exception is not None and not self.error


class DraState:
    """Allocated devices, in-flight allocations and the allocator index, for one scheduler."""

    def __init__(
        self,
        cache: SchedulerCache,
        features: FeatureGates | None = None,
        preference: MeasuredPreference | None = None,
    ) -> None:
        self.cache = cache
        self.features = features or FeatureGates()
        # Opt-in DevicePreference (kdra.scheduler.devicepref) for the allocator's search, and what it
        # decided per pod (namespace/name -> compare_with_first_fit's record), for explanations.
        self.preference = preference
        self.choices: dict[str, dict[str, Any]] = {}
        self._index: AllocatorIndex | None = None
        self._allocator: Allocator | None = None
        # claim uid -> claim dict with status.allocation
        self.allocated: dict[str, Obj] = {}
        self.assumed: dict[str, Obj] = {}  # in-flight: allocation decided, not yet written
        self.assumed_by: dict[str, str] = {}  # in-flight claim uid -> the pod whose Reserve decided it
        # Claims of evicted victims: counted as released from the eviction on, although the API shows them
        # allocated until their pods terminate and the controller manager deallocates or deletes them.
        self.released: set[str] = set()
        # Of those, the ones a committed placement counts on: claim uid -> (claim, the pods placed on it).
        self.released_for: dict[str, tuple[Obj, tuple[str, ...]]] = {}
        self._ext_classes: dict[str, str] | None = None
        # Devices in use by allocated and assumed claims (exclusive ones in `state.dedicated`).
        self.state = AllocatedState()
        self.spec_keys: dict[str, str] = {}  # claim uid -> claim_spec_key (a claim's spec is immutable)
        cache.dra = self
        for claim in list(cache.claims.values()):
            self.on_claim(WatchEvent("ADDED", "ResourceClaim", claim, None))

    # -- index -----------------------------------------------------------------------------------

    def invalidate(self) -> None:
        self._index = None
        self._allocator = None
        self._ext_classes = None

    @property
    def index(self) -> AllocatorIndex:
        if self._index is None:
            self._index = AllocatorIndex(
                dict(self.cache.classes),
                list(self.cache.slices.values()),
                self.features,
                taint_rules=list(self.cache.taint_rules.values()),
            )
        return self._index

    @property
    def allocator(self) -> Allocator:
        """One allocator per index; it follows `state` changes by itself (AllocatedState.version)."""
        if self._allocator is None or self._allocator.index is not self.index:
            self._allocator = Allocator.from_index(self.index, self.state, prefer=self.preference)
        return self._allocator

    def extended_resource_classes(self) -> dict[str, str]:
        """Extended resource name -> DeviceClass (KEP-5004): explicit extendedResourceName (newest class
        wins, ties by name) and the implicit deviceclass.resource.kubernetes.io/<class>."""
        if self._ext_classes is None:
            out: dict[str, str] = {}
            best: dict[str, tuple[str, str]] = {}
            for name, cls in sorted(self.cache.classes.items()):
                out[IMPLICIT_EXTENDED_PREFIX + name] = name
                ern = (cls.get("spec") or {}).get("extendedResourceName")
                if ern:
                    ts = (cls.get("metadata") or {}).get("creationTimestamp") or ""
                    cur = best.get(ern)
                    # Newest creationTimestamp wins; on a tie the lexicographically first name.
                    if cur is None or ts > cur[0]:
                        best[ern] = (ts, name)
            for ern, (_, name) in best.items():
                out[ern] = name
            self._ext_classes = out
        return self._ext_classes

    def has_shared_devices(self, class_name: str) -> bool:
        """Whether the class selects devices not tied to one node by nodeName (the bound does not apply)."""
        return bool(self.index.devices_of_class(class_name, node=""))

    def free_devices(self, node: str, class_name: str | DemandKey, selectors: tuple[str, ...] = ()) -> int:
        """Upper bound on the devices of `class_name` passing `selectors` that `node` can still get
        (node-local devices only; a selector error counts as a match so that the allocator reports it).
        `class_name` may also be a ClaimDemand key (class, selectors)."""
        if isinstance(class_name, tuple):
            class_name, selectors = class_name
        dedicated = self.state.dedicated
        n = 0
        for d in self.index.devices_of_class(class_name, selectors, node=node):
            if d.allow_multi:
                return UNBOUNDED  # one shareable device can serve any number of requests
            if d.key not in dedicated:
                n += 1
        return n

    def prefilter_ok(self, node: str, demand: ClaimDemand) -> tuple[bool, str]:
        for (cls, sels), n in demand.exact.items():
            if n and not self.has_shared_devices(cls) and self.free_devices(node, cls, sels) < n:
                return False, cls
        for alts in demand.alternatives:
            if not any(
                self.has_shared_devices(c) or self.free_devices(node, c, sels) >= n for (c, sels), n in alts
            ):
                return False, alts[0][0][0]
        return True, ""

    # -- allocated state -------------------------------------------------------------------------

    def _mark(self, claim: Obj, delta: int) -> None:
        """Add (+1) or remove (-1) a claim's allocation from the allocated state, touching its nodes."""
        change = self.state.add_result if delta > 0 else self.state.remove_result
        features = self.features
        alloc = (claim.get("status") or {}).get("allocation") or {}
        touched: set[str] = set()
        global_change = False
        for r in (alloc.get("devices") or {}).get("results") or []:
            change(r, features)  # AllocatedState.add_claim/remove_claim, result by result
            if r.get("adminAccess"):
                continue
            node = self._device_node((r.get("driver", ""), r.get("pool", ""), r.get("device", "")))
            if node:
                touched.add(node)
            else:
                global_change = True
        for name in touched:
            ni = self.cache.node_by_name.get(name)
            if ni is not None:
                self.cache.touch(ni)
        if global_change:
            self.cache.bump_epoch()

    def _device_node(self, key: tuple[str, str, str]) -> str:
        """The node of a node-local device ("" for network-attached devices)."""
        _driver, pool, _dev = key
        index = self.index
        slices = index.slices_by_pool.get((key[0], pool))
        if slices:
            for s in slices:
                if s.node_name:
                    return s.node_name
                if s.shared_counters:
                    continue
                return ""
        return ""

    def on_claim(self, ev: WatchEvent) -> None:
        claim = ev.object
        uid = claim["metadata"].get("uid", "")
        has_alloc = ev.type != "DELETED" and bool((claim.get("status") or {}).get("allocation"))
        if uid in self.released:
            if has_alloc:
                return  # still allocated in the API while its pod terminates: not counted again
            self.released.discard(uid)
            self.released_for.pop(uid, None)
        prev = self.allocated.get(uid)
        if has_alloc:
            if prev is None:
                assumed = self.assumed.pop(uid, None)
                self.assumed_by.pop(uid, None)
                self.allocated[uid] = claim
                # The in-flight allocation written as decided changes nothing (no node is touched).
                if assumed is None or _results(assumed) != _results(claim):
                    if assumed is not None:
                        self._mark(assumed, -1)
                    self._mark(claim, +1)
            else:
                self.allocated[uid] = claim
        elif prev is not None:
            del self.allocated[uid]
            self._mark(prev, -1)
        if ev.type == "DELETED":
            self.spec_keys.pop(uid, None)

    def count_on_released(self, claims: Iterable[Obj], pods: Sequence[str]) -> None:
        """A placement over evicted victims was committed: `pods` count on these released claims."""
        for claim in claims:
            uid = claim["metadata"].get("uid", "")
            if uid in self.released:
                self.released_for[uid] = (claim, tuple(pods))

    def unrelease_for(self, pod_uid: str) -> list[Obj]:
        """The placement of `pod_uid` over evicted victims fell through (its bind failed): the released
        claims it counted on, as the API shows them now (still allocated: their victims still terminate),
        for the caller to count again (`count_again`) where their victims are still there."""
        out = []
        for uid, (claim, pods) in list(self.released_for.items()):
            if pod_uid not in pods:
                continue
            del self.released_for[uid]
            meta = claim["metadata"]
            current = self.cache.claims.get((meta.get("namespace", ""), meta["name"]))
            if current is not None and current["metadata"].get("uid") == uid and uid in self.released:
                out.append(current)
        return out

    def count_again(self, claim: Obj) -> None:
        """A released claim counts as allocated again (its victim stays, or the decision fell through)."""
        uid = claim["metadata"].get("uid", "")
        self.released.discard(uid)
        self.released_for.pop(uid, None)
        self.on_claim(WatchEvent("ADDED", "ResourceClaim", claim, None))

    def assume(self, claim: Obj, allocation: Obj, holder: str = "") -> None:
        """Reserve: the allocation is decided but not written yet (in-flight), by the pod `holder`."""
        uid = claim["metadata"].get("uid", "")
        if uid in self.allocated or uid in self.assumed:
            return
        if holder:
            self.assumed_by[uid] = holder
        pseudo = {
            "metadata": claim["metadata"],
            "spec": claim.get("spec"),
            "status": {"allocation": allocation},
        }
        self.assumed[uid] = pseudo
        self._mark(pseudo, +1)

    def forget_assumed(self, claim_uid: str) -> None:
        self.assumed_by.pop(claim_uid, None)
        pseudo = self.assumed.pop(claim_uid, None)
        if pseudo is not None:
            self._mark(pseudo, -1)

    # -- the allocator ---------------------------------------------------------------------------

    def allocated_claims(self) -> list[Obj]:
        return list(self.allocated.values()) + list(self.assumed.values())

    def new_cycle(self) -> None:
        """A pod's scheduling cycle starts (upstream: PreFilter builds a new Allocator)."""
        if self._allocator is not None:
            self._allocator.new_cycle()

    def fit(self, node: Mapping[str, Any], claims: Sequence[Obj], demand: ClaimDemand) -> DeviceFit:
        """DynamicResources' Filter on one node for the claims to allocate there: the free-device bound
        first (`prefilter_ok`), then the allocator; an error is kept, not raised (the caller decides
        whether it ends the pod's attempt)."""
        name = str((node.get("metadata") or {}).get("name", ""))
        ok, _cls = self.prefilter_ok(name, demand)
        if not ok and not self._allocator_may_raise(node, demand):
            # Ruled out without a search; explained only if someone prints the reason.
            return DeviceFit(None, "cannot allocate all claims", self.explain(node, claims))
        try:
            outcome = self.allocate(node, claims)
        except AllocationError as exc:
            if isinstance(exc, NodeAllocationError):
                return DeviceFit(None, str(exc), getattr(exc, "lazy_explanation", None), exception=exc)
            return DeviceFit(None, str(exc), exception=exc, error=True)
        if outcome.allocations is None:
            # A search that ran out of budget says so (kube-scheduler: "timed out trying to allocate").
            reason = "gave up trying to allocate devices (search limit)" if outcome.gave_up else None
            why = reason or "cannot allocate all claims"
            return DeviceFit(None, why, outcome.lazy_explanation, gave_up=outcome.gave_up)
        return DeviceFit(list(outcome.allocations), steps=outcome.steps)

    def _allocator_may_raise(self, node: Mapping[str, Any], demand: ClaimDemand) -> bool:
        """Whether the allocator could answer with an error where the free-device bound says "does not
        fit": claims that can raise wherever devices are (`ClaimDemand.may_raise`), an invalid or
        incomplete pool on the node (upstream's ErrFailedAllocationOnNode, or an All request over a pool
        being updated), an unknown class, or a selector that fails on one of the devices it would
        consider. Upstream has no such bound, so these answers must come from the allocator."""
        if demand.may_raise:
            return True
        index = self.index
        if any(p.invalid or p.incomplete for p in index.node_view(node).pools):
            return True
        name = str((node.get("metadata") or {}).get("name", ""))
        keys = list(demand.exact) + [k for alts in demand.alternatives for k, _n in alts]
        return any(
            cls not in index.classes
            or index.selector_error(cls, sels, node=name)
            or index.selector_error(cls, sels, node="")
            for cls, sels in keys
        )

    def allocate(self, node: Mapping[str, Any], claims: Sequence[Obj]) -> AllocationOutcome:
        """The allocator's outcome for `claims` on `node` (`.allocations` or None; `.lazy_explanation`,
        computed only if someone prints it). ShareIDs are the allocator's deterministic default."""
        return self.allocator.allocate(node, list(claims))

    def record_choice(
        self, pod: str, node: Mapping[str, Any], claims: Sequence[Obj], allocations: Sequence[Obj]
    ) -> dict[str, Any] | None:
        """With a device preference: whether it or the rules decided the pod's devices (against first fit
        under the same state), kept in `choices` for reports and events."""
        if self.preference is None or not claims:
            return None
        from kdra.scheduler.devicepref import compare_with_first_fit

        cmp = compare_with_first_fit(self.preference, self.allocator, node, claims, allocations)
        if len(self.choices) > 100_000:
            self.choices.clear()
        self.choices[pod] = cmp
        return cmp

    def explain(self, node: Mapping[str, Any], claims: Sequence[Obj]) -> LazyExplanation:
        """Why `claims` do not fit on `node` now (for nodes the free-device bound ruled out)."""
        return self.allocator.explain(node, list(claims))


def device_ids(results: Iterable[Mapping[str, Any]]) -> list[str]:
    return [f"{r.get('driver')}/{r.get('pool')}/{r.get('device')}" for r in results]
