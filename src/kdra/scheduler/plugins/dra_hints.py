"""Queueing hints of DynamicResources: which cluster events may make a pod it rejected schedulable.

kube-scheduler 1.37 (KEP-6132, PreQueueingHints) stopped retrying DRA pods on every unrelated event;
kdra does the same, and more precisely, because its allocator index can tell which devices a pod could
ever use. The rule every hint keeps: say "skip" only when the event cannot change the pod's verdict.

- A claim event (deallocation, a shrinking reservedFor, a deleted allocated claim): helps a pod that
  references the claim; otherwise it only frees devices, and that helps only a pod whose requests select
  a device in a pool the freed devices belong to (the whole pool, not just the freed devices: shared
  counters make a partition of a freed GPU allocatable).
- A ResourceSlice event: helps a pod whose requests select a device in the changed pool, after the
  change (a pool becoming complete or valid makes its other devices usable too).
- A DeviceClass event: helps a pod that names the class.
- Node add, or a Node update that changes labels or allocatable (upstream's UpdateNodeLabel |
  UpdateNodeAllocatable); a pod deletion never does by itself (upstream registers no pod event: the
  release of the deleted pod's claims arrives as claim events).

"Selects" is the class's selectors and then the request's, evaluated with the allocator's memoised
`evaluate_selectors` (an evaluation error counts as a match, as in `devices_of_class`); pools are matched
by name across drivers, which also covers 1.36's counters keyed by pool name alone. Pods that ask for
extended resources backed by DRA (KEP-5004) are always queued.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kdra.allocator.index import DEFAULT_SLICE_CACHE, MATCH, SelectorError, evaluate_selectors
from kdra.api.pods import entry_claim_names
from kdra.api.types import Obj
from kdra.cluster.store import WatchEvent
from kdra.scheduler.cache import SchedulerCache, claim_key
from kdra.scheduler.dra import ClaimDemand, DemandKey
from kdra.scheduler.framework import (
    EV_CLAIM_CHANGE,
    EV_CLASS_CHANGE,
    EV_NODE_ADD,
    EV_NODE_UPDATE,
    EV_POD_DELETE,
    EV_SLICE_CHANGE,
    ClusterEvent,
)
from kdra.scheduler.podinfo import PodInfo

if TYPE_CHECKING:
    from kdra.api.features import FeatureGates


class _PodDemand:
    __slots__ = ("claims", "classes", "keys", "version")

    def __init__(self, version: tuple[Any, ...], claims: set[tuple[str, str]]) -> None:
        self.version = version
        self.claims = claims  # (namespace, name) of every claim the pod references
        self.keys: frozenset[DemandKey] = frozenset()  # what its unallocated claims ask for
        self.classes: frozenset[str] = frozenset()


class DraHints:
    def __init__(self, cache: SchedulerCache, features: FeatureGates) -> None:
        self.cache = cache
        self.features = features
        self._pool_slices: dict[str, set[str]] = {}  # pool name -> slice names (any driver)
        self._demands: dict[str, _PodDemand] = {}
        for name, s in cache.slices.items():
            self._pool_slices.setdefault(_pool(s), set()).add(name)
        cache.listeners.append(self._on_cache_event)

    def _on_cache_event(self, kind: str, ev: WatchEvent) -> None:
        if kind == "ResourceSlice":
            name = ev.object["metadata"]["name"]
            if ev.old is not None:
                self._pool_slices.get(_pool(ev.old), set()).discard(name)
            if ev.type != "DELETED":
                self._pool_slices.setdefault(_pool(ev.object), set()).add(name)
        elif kind == "Pod" and ev.type == "DELETED":
            self._demands.pop(ev.object["metadata"].get("uid", ""), None)

    # -- the hint --------------------------------------------------------------------------------

    def may_help(self, event: ClusterEvent, pi: PodInfo) -> bool:
        name = event.name
        if name == EV_POD_DELETE:
            return False
        if name == EV_NODE_ADD:
            return True
        if name == EV_NODE_UPDATE:
            if event.old is None or event.new is None:
                return event.new is not None
            return _labels(event.old) != _labels(event.new) or _allocatable(event.old) != _allocatable(
                event.new
            )
        if pi.ext_requests:
            return True
        demand = self._demand(pi)
        if name == EV_CLASS_CHANGE:
            obj = event.new if event.new is not None else event.old
            return bool(obj) and obj["metadata"].get("name") in demand.classes
        if name == EV_CLAIM_CHANGE:
            old, new = event.old, event.new
            obj = new if new is not None else old
            if obj is None:
                return True
            meta = obj["metadata"]
            if claim_key(meta.get("namespace", ""), meta["name"]) in demand.claims:
                return True
            freed = _results(old) if not _results(new) else []
            pools = frozenset(r.get("pool", "") for r in freed)
            return bool(pools) and self._pools_offer(event, pools, demand.keys)
        if name == EV_SLICE_CHANGE:
            pools = frozenset(_pool(o) for o in (event.old, event.new) if o is not None)
            return self._pools_offer(event, pools, demand.keys)
        return True

    def _demand(self, pi: PodInfo) -> _PodDemand:
        """What the pod's unallocated claims ask for, recomputed when one of its claims changed."""
        claims = self.cache.claims
        refs = [claim_key(pi.namespace, cname) for cname in entry_claim_names(pi.pod)]
        version = (_rv(pi.pod), *(_rv(claims.get(k)) for k in refs))
        got = self._demands.get(pi.uid)
        if got is not None and got.version == version:
            return got
        got = _PodDemand(version, set(refs))
        demand = ClaimDemand()
        classes: set[str] = set()
        for k in refs:
            claim = claims.get(k)
            if claim is None or (claim.get("status") or {}).get("allocation"):
                continue
            demand.add_claim(claim)
            for req in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
                subs = [req["exactly"]] if req.get("exactly") else list(req.get("firstAvailable") or [])
                classes.update(str(sub.get("deviceClassName", "")) for sub in subs)
        keys = set(demand.exact)
        for alts in demand.alternatives:
            keys.update(k for k, _ in alts)
        got.keys = frozenset(keys)
        got.classes = frozenset(classes)
        if len(self._demands) > 100_000:
            self._demands.clear()
        self._demands[pi.uid] = got
        return got

    def _pools_offer(self, event: ClusterEvent, pools: frozenset[str], keys: frozenset[DemandKey]) -> bool:
        """Whether a device of these pools (now) passes the class and request selectors of one of `keys`.
        Computed once per event and demand."""
        if not keys:
            return False
        memo_key = ("dra", keys)
        got = event.memo.get(memo_key)
        if got is None:
            got = event.memo[memo_key] = self._offer(pools, keys)
        return bool(got)

    def _offer(self, pools: frozenset[str], keys: frozenset[DemandKey]) -> bool:
        classes = self.cache.classes
        consumable = bool(getattr(self.features, "consumable_capacity", True))
        list_types = bool(getattr(self.features, "list_type_attributes", False))
        wanted: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
        for cls, sels in sorted(keys):
            obj = classes.get(cls)
            if obj is None:
                continue  # a missing class selects nothing (its creation is a class event)
            class_sels = tuple(
                ((s.get("cel") or {}).get("expression") or "")
                for s in (obj.get("spec") or {}).get("selectors") or []
            )
            wanted.append((class_sels, sels))
        if not wanted:
            return False
        for pool in sorted(pools):
            for slice_name in sorted(self._pool_slices.get(pool, ())):
                raw = self.cache.slices.get(slice_name)
                if raw is None:
                    continue
                for dev in DEFAULT_SLICE_CACHE.get(raw).devices:
                    for class_sels, sels in wanted:
                        if _selects(evaluate_selectors(dev, class_sels, consumable, list_types)) and _selects(
                            evaluate_selectors(dev, sels, consumable, list_types)
                        ):
                            return True
        return False


def _selects(result: int | SelectorError) -> bool:
    return result == MATCH or isinstance(result, SelectorError)


def _pool(slice_obj: Mapping[str, Any]) -> str:
    return str((((slice_obj.get("spec") or {}).get("pool")) or {}).get("name", ""))


def _results(claim: Obj | None) -> list[Mapping[str, Any]]:
    if claim is None:
        return []
    alloc = (claim.get("status") or {}).get("allocation") or {}
    return list((alloc.get("devices") or {}).get("results") or [])


def _rv(obj: Mapping[str, Any] | None) -> tuple[str, str] | None:
    if obj is None:
        return None
    meta = obj.get("metadata") or {}
    return (str(meta.get("uid", "")), str(meta.get("resourceVersion", "")))


def _labels(node: Mapping[str, Any]) -> object:
    return (node.get("metadata") or {}).get("labels")


def _allocatable(node: Mapping[str, Any]) -> object:
    return (node.get("status") or {}).get("allocatable")
