"""Devices allocated to more claims than they can serve: found, reported, and kdra's side repaired.

Two schedulers over the same devices race: kdra and kube-scheduler each count only
the allocations they have seen, the API server checks nothing across claims, so both can write the same
GPU into two claims a few milliseconds apart. A supported partition prevents it (kdra.kube.partition);
this module is the safety net for clusters without one, and for the rare write kdra itself cannot take
back (a stale leader's write the fence was too late for, a write whose outcome was unknown).

`ConflictDetector` keeps, from the scheduler's informer (no extra watch), which claims hold which device.
A device is over-allocated when two claims hold it and the slice does not allow several allocations, or
when shares of a device that does consume more of a capacity than it has (admin-access results do not
count). For each new conflict it

- reports it: a Warning Event `ConflictingAllocation` on every pod reserving one of the claims, naming
  the device and each claim with its pod and scheduler; the gauge `kdra_conflicting_allocations`
  (devices over-allocated now) and the counters `kdra_conflicting_allocations_detected_total` and
  `..._repaired_total` (`kdra scheduler --metrics-listen`);
- repairs kdra's side while its pod is not running yet: kdra's claim is deallocated (allocation and
  reservedFor cleared in one conditional status write); a pod not bound yet is simply scheduled again;
  a pod already bound gets other devices on its node through the same DynamicResources plugin
  (PreFilter, Filter on that node, Reserve, PreBind), or, when the node has none free, it is evicted
  (Eviction API, so its budget is respected): a bound pod whose claim is gone would never start, while
  its owner recreates an evicted pod and the new one is scheduled wherever devices are free (a pod
  without an owner is gone; it had not started). An eviction its budget refuses is tried again with
  backoff, each time after looking for a free device on its node once more. The other scheduler's claim
  is never touched. When every claim is kdra's, the one written first (lowest
  resourceVersion) or whose pod runs is kept.

Releasing a device another claim still holds has a side effect on kube-scheduler (1.36): its tracker of
allocated devices is a set, not a count, so when any claim holding a device releases it kube-scheduler
takes the device for free, although the other claim holds it, and gives it to its next pod. So before it
deallocates its claim kdra quarantines each such device: a DeviceTaintRule (NoSchedule, key
`kdra.dev/conflict`, label `kdra.dev/quarantined-by=<scheduler name>`) keeps every scheduler from
allocating it anew, and is deleted once no claim holds the device any more (also after a restart: kdra
picks its rules up at start). It cannot end sooner: kube-scheduler's tracker (allocateddevices.go, a set
in 1.36 to 1.38) has lost the device for good while the other claim holds it; only that claim's release,
or kube-scheduler's restart, makes it right again. Where the DeviceTaintRule API (resource.k8s.io/v1beta2,
feature DRADeviceTaintRules) is not served, kdra repairs all the same and warns that kube-scheduler may
hand the device out again until it restarts.

Which side is kdra's: a claim is kdra's when a pod reserving it has kdra's schedulerName. A pod that
runs (phase Running or later, or a container started) is never repaired: its devices may be in use;
the Event says so and the conflict stays counted until someone acts.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kdra.api.quantity import Quantity
from kdra.api.types import Obj
from kdra.cluster.store import (
    AlreadyExistsError,
    ConflictError,
    NotFoundError,
    StoreError,
    WatchEvent,
    copy_for_update,
)
from kdra.kube.events import pod_event
from kdra.scheduler.dra import DELETE_PROTECTION_FINALIZER, device_ids
from kdra.scheduler.framework import CycleState, error
from kdra.scheduler.podinfo import PodInfo

if TYPE_CHECKING:
    from kdra.kube.scheduler import KubeScheduler

log = logging.getLogger("kdra.kube.conflicts")

DeviceKey = tuple[str, str, str]

CONFLICT_EVENT = "ConflictingAllocation"
REPAIRED_EVENT = "ConflictRepaired"
NOT_REPAIRED_EVENT = "ConflictNotRepaired"
QUARANTINE_LABEL = "kdra.dev/quarantined-by"
QUARANTINE_DEVICE_ANNOTATION = "kdra.dev/device"
QUARANTINE_TAINT_KEY = "kdra.dev/conflict"
# How long a quarantine rule exists before kdra releases the device, so that kube-scheduler's informer
# has it when it sees the release.
QUARANTINE_SETTLE = 0.5
# An eviction of an unrepairable pod its budget refused: tried again after this, doubling up to the cap.
EVICTION_RETRY = (2.0, 60.0)


def quarantine_rule_name(key: DeviceKey) -> str:
    return "kdra-quarantine-" + hashlib.sha256("/".join(key).encode()).hexdigest()[:16]


def _claim_key(claim: Mapping[str, Any]) -> str:
    meta = claim.get("metadata") or {}
    return f"{meta.get('namespace', 'default')}/{meta.get('name')}"


def _results(claim: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    alloc = (claim.get("status") or {}).get("allocation") or {}
    return [r for r in (alloc.get("devices") or {}).get("results") or [] if not r.get("adminAccess")]


def pod_running(pod: Mapping[str, Any]) -> bool:
    """Whether a pod may be using its devices: phase Running or later, or a container that started."""
    st = pod.get("status") or {}
    if st.get("phase") in ("Running", "Succeeded", "Failed"):
        return True
    for cs in (st.get("containerStatuses") or []) + (st.get("initContainerStatuses") or []):
        state = cs.get("state") or {}
        if "running" in state or "terminated" in state:
            return True
    return False


@dataclass
class _Held:
    claim: Obj
    devices: tuple[DeviceKey, ...]


@dataclass
class _Stranded:
    """A bound pod whose claim kdra deallocated and could not allocate again on its node: to evict."""

    namespace: str
    claim: str
    pod: str
    pod_uid: str
    node: str
    next_try: float = 0.0
    delay: float = EVICTION_RETRY[0]
    refused: str = ""  # the last refusal said on the pod (said once)


@dataclass
class ConflictDetector:
    sched: KubeScheduler
    repair: bool = True
    # device -> claim uid -> the claim's results for that device (several: shares of one device)
    holders: dict[DeviceKey, dict[str, list[Mapping[str, Any]]]] = field(default_factory=dict)
    held: dict[str, _Held] = field(default_factory=dict)  # claim uid -> what it holds
    conflicts: dict[DeviceKey, frozenset[str]] = field(default_factory=dict)  # now over-allocated
    detected_total: int = 0
    repaired_total: int = 0
    evicted_total: int = 0  # bound pods evicted because their node had no device left for them
    observers: list[Callable[[int, int, int], None]] = field(default_factory=list)
    _dirty: set[DeviceKey] = field(default_factory=set)
    _pending_repair: set[str] = field(default_factory=set)  # claim uids of kdra's side still to repair
    # claim uid -> its bound pod, to evict (a free device on its node is looked for first)
    _stranded: dict[str, _Stranded] = field(default_factory=dict)
    # device -> (DeviceTaintRule name, when created on the monotonic clock): kept from every scheduler
    quarantine: dict[DeviceKey, tuple[str, float]] = field(default_factory=dict)
    # device -> when kdra's own watch first delivered its rule (monotonic clock)
    _in_force: dict[DeviceKey, float] = field(default_factory=dict)
    quarantine_api: bool = True  # False once the API server said it does not serve DeviceTaintRules

    def __post_init__(self) -> None:
        store = self.sched.kstore
        for claim in store.list("ResourceClaim"):
            self._on_claim(claim, deleted=False)
        store.watch(self._on_event, kinds=("ResourceClaim",))
        self._load_quarantine()

    def _load_quarantine(self) -> None:
        """Pick up the quarantine rules an earlier run of this scheduler left (deleted by step once the
        device is free)."""
        try:
            rules = self.sched.kstore.client.list(
                "DeviceTaintRule", labelSelector=f"{QUARANTINE_LABEL}={self.sched.config.scheduler_name}"
            )
        except NotFoundError:
            self.quarantine_api = False
            return
        except StoreError as e:
            log.warning("listing quarantine DeviceTaintRules: %s", e)
            return
        for rule in rules:
            device = (rule["metadata"].get("annotations") or {}).get(QUARANTINE_DEVICE_ANNOTATION, "")
            parts = tuple(device.split("/", 2))
            if len(parts) == 3:
                self.quarantine[(parts[0], parts[1], parts[2])] = (rule["metadata"]["name"], 0.0)

    # -- the index -------------------------------------------------------------------------------------
    def _on_event(self, ev: WatchEvent) -> None:
        self._on_claim(ev.object, deleted=ev.type == "DELETED")

    def _on_claim(self, claim: Obj, *, deleted: bool) -> None:
        uid = claim["metadata"].get("uid", "")
        old = self.held.pop(uid, None)
        if old is not None:
            for key in old.devices:
                hs = self.holders.get(key)
                if hs is not None:
                    hs.pop(uid, None)
                    if not hs:
                        del self.holders[key]
                self._dirty.add(key)
        if deleted:
            self._pending_repair.discard(uid)
            self._stranded.pop(uid, None)
            return
        results = _results(claim)
        if not results and old is None:
            return
        keys: dict[DeviceKey, None] = {}
        for r in results:
            key = (str(r.get("driver", "")), str(r.get("pool", "")), str(r.get("device", "")))
            if key not in keys:
                self.holders.setdefault(key, {})[uid] = []
                keys[key] = None
            self.holders[key][uid].append(r)
            self._dirty.add(key)
        if keys:
            self.held[uid] = _Held(claim, tuple(keys))

    def _device(self, key: DeviceKey) -> Any:
        for s in self.sched.dra.index.slices_by_pool.get((key[0], key[1])) or []:
            for d in s.devices:
                if d.name == key[2]:
                    return d
        return None

    def over_allocated(self, key: DeviceKey) -> bool:
        hs = self.holders.get(key) or {}
        if len(hs) < 2:
            return False
        dev = self._device(key)
        if dev is None or not dev.allow_multi:
            return True  # an exclusive device (or one no slice publishes any more) in two claims
        used: dict[str, Quantity] = {}
        for results in hs.values():
            for r in results:
                for cap, q in (r.get("consumedCapacity") or {}).items():
                    used[cap] = used.get(cap, Quantity.parse(0)) + Quantity.parse(q)
        for cap, total in used.items():
            have = (dev.capacity_raw.get(cap) or {}).get("value")
            if have is not None and total > Quantity.parse(have):
                return True
        return False

    # -- the loop's turn -------------------------------------------------------------------------------
    def step(self) -> None:
        """Look at the devices whose holders changed; report and repair new conflicts (loop thread)."""
        before = (len(self.conflicts), self.detected_total, self.repaired_total)
        if self._dirty:
            dirty, self._dirty = self._dirty, set()
            for key in sorted(dirty):
                if self.over_allocated(key):
                    uids = frozenset(self.holders[key])
                    if self.conflicts.get(key) != uids:
                        self.conflicts[key] = uids
                        self._new_conflict(key, uids)
                else:
                    self.conflicts.pop(key, None)
        if self.repair and (self._pending_repair or self._stranded):
            self._repair_all()
        if self.quarantine:
            self._release_quarantine()
        after = (len(self.conflicts), self.detected_total, self.repaired_total)
        if after != before:
            for observe in self.observers:
                observe(*after)

    # -- reporting -------------------------------------------------------------------------------------
    def _pods_of(self, claim: Mapping[str, Any]) -> list[Obj]:
        ns = claim["metadata"].get("namespace", "default")
        out = []
        for r in (claim.get("status") or {}).get("reservedFor") or []:
            if r.get("resource", "pods") != "pods":
                continue
            pod = self.sched.store.try_get("Pod", r.get("name", ""), ns)
            if pod is not None and pod["metadata"].get("uid") == r.get("uid"):
                out.append(pod)
        return out

    def _is_kdras(self, claim: Mapping[str, Any]) -> bool:
        name = self.sched.config.scheduler_name
        return any((p.get("spec") or {}).get("schedulerName") == name for p in self._pods_of(claim))

    def _describe(self, claim: Mapping[str, Any]) -> str:
        pods = self._pods_of(claim)
        who = ", ".join(
            f"pod {p['metadata']['name']}, scheduler "
            + ((p.get("spec") or {}).get("schedulerName") or "default-scheduler")
            for p in pods
        )
        return f"ResourceClaim {_claim_key(claim)} ({who or 'no pod'})"

    def _new_conflict(self, key: DeviceKey, uids: frozenset[str]) -> None:
        self.detected_total += 1
        claims = [self.held[u].claim for u in sorted(uids, key=lambda u: _claim_key(self.held[u].claim))]
        text = f"device {'/'.join(key)} is allocated to more claims than it can serve: " + "; ".join(
            self._describe(c) for c in claims
        )
        log.warning("%s", text)
        for c in claims:
            for pod in self._pods_of(c):
                self._event(pod, CONFLICT_EVENT, text, "Warning")
        mine = [c for c in claims if self._is_kdras(c)]
        if not mine:
            return  # two other schedulers' claims: reported, not ours to change
        if len(mine) == len(claims):
            # All kdra's (a stale write): keep one whose pod runs, else the one written first.
            keep = min(
                mine,
                key=lambda c: (
                    not any(pod_running(p) for p in self._pods_of(c)),
                    int(c["metadata"].get("resourceVersion") or 0),
                ),
            )
            mine = [c for c in mine if c is not keep]
        for c in mine:
            self._pending_repair.add(c["metadata"]["uid"])

    def _event(self, pod: Obj, reason: str, message: str, etype: str) -> None:
        try:
            self.sched.kstore.client.create(
                pod_event(pod, reason, message, etype, self.sched.config.scheduler_name, self.sched.identity)
            )
        except StoreError as e:
            log.info("event %s on %s: %s", reason, pod["metadata"].get("name"), e)

    # -- repair ----------------------------------------------------------------------------------------
    def _repair_all(self) -> None:
        for uid in sorted(self._pending_repair):
            held = self.held.get(uid)
            if held is None or not any(k in self.conflicts for k in held.devices):
                self._pending_repair.discard(uid)  # resolved meanwhile (deallocated, deleted)
                continue
            if self._repair(held.claim):
                self._pending_repair.discard(uid)
        now = time.monotonic()
        for uid, st in sorted(self._stranded.items()):
            if st.next_try > now:
                continue
            pod = self.sched.store.try_get("Pod", st.pod, st.namespace)
            claim = self.sched.store.try_get("ResourceClaim", st.claim, st.namespace)
            if (
                pod is None
                or pod["metadata"].get("uid") != st.pod_uid
                or pod["metadata"].get("deletionTimestamp")
                or pod_running(pod)
                or claim is None
                or claim["metadata"].get("uid") != uid
                or (claim.get("status") or {}).get("allocation")
            ):
                self._stranded.pop(uid, None)
                continue
            ok, got = self._reallocate(pod, st.node)
            if ok:
                self._stranded.pop(uid, None)
                self._event(
                    pod,
                    REPAIRED_EVENT,
                    f"kdra allocated ResourceClaim {st.namespace}/{st.claim} on {st.node} once devices "
                    f"freed up: {got}",
                    "Normal",
                )
            elif self._evict(pod, st):
                self._stranded.pop(uid, None)

    def _evict(self, pod: Obj, st: _Stranded) -> bool:
        """Evict a bound pod that cannot get devices on its node; False when refused (tried again later)."""
        from kdra.kube.session import evict_pod

        try:
            evict_pod(self.sched.kstore.client, pod)
        except NotFoundError:
            return True
        except StoreError as e:
            why = str((e.status or {}).get("message") or e)
            if why != st.refused:
                st.refused = why
                self._event(
                    pod,
                    NOT_REPAIRED_EVENT,
                    f"kdra could not evict the pod ({why}); it tries again while no device frees up on "
                    f"{st.node}",
                    "Warning",
                )
            st.next_try = time.monotonic() + st.delay
            st.delay = min(st.delay * 2, EVICTION_RETRY[1])
            return False
        self.evicted_total += 1
        return True

    def _quarantined(self, keys: list[DeviceKey]) -> bool:
        """Quarantine `keys` (DeviceTaintRules); True once every rule has been in force for QUARANTINE_SETTLE
        seconds, or when the API server has no DeviceTaintRules (nothing to wait for)."""
        if not self.quarantine_api:
            return True
        now = time.monotonic()
        ready = True
        for key in keys:
            got = self.quarantine.get(key)
            if got is None:
                name = quarantine_rule_name(key)
                rule = {
                    "apiVersion": "resource.k8s.io/v1beta2",
                    "kind": "DeviceTaintRule",
                    "metadata": {
                        "name": name,
                        "labels": {QUARANTINE_LABEL: self.sched.config.scheduler_name},
                        "annotations": {QUARANTINE_DEVICE_ANNOTATION: "/".join(key)},
                    },
                    "spec": {
                        "deviceSelector": {"driver": key[0], "pool": key[1], "device": key[2]},
                        "taint": {
                            "key": QUARANTINE_TAINT_KEY,
                            "value": self.sched.config.scheduler_name,
                            "effect": "NoSchedule",
                        },
                    },
                }
                try:
                    self.sched.kstore.client.create(rule)
                except AlreadyExistsError:
                    pass
                except NotFoundError:
                    self.quarantine_api = False
                    log.warning(
                        "the API server serves no DeviceTaintRules (resource.k8s.io/v1beta2): kdra cannot "
                        "keep kube-scheduler from giving out again a device it releases from a conflict"
                    )
                    return True
                except StoreError as e:
                    log.warning("quarantining device %s: %s", "/".join(key), e)
                    return False
                # Counted from the API's answer: the rule exists from then on, not from the request
                # (a loaded API server can take most of the settle time to answer).
                got = self.quarantine[key] = (name, time.monotonic())
            since = self._in_force_since(key, got)
            if since is None or now - since < QUARANTINE_SETTLE:
                ready = False
        return ready

    def _in_force_since(self, key: DeviceKey, got: tuple[str, float]) -> float | None:
        """Since when a quarantine rule is known to be in force: from when kdra's own watch delivered it
        (kube-scheduler's informer is fed by the same API server: a watch that lags under load delays the
        release as much), or, where kdra does not inform DeviceTaintRules, from the API's answer."""
        kstore = self.sched.kstore
        served = getattr(kstore, "served", None)
        if served is None or not served("DeviceTaintRule"):
            return got[1]
        since = self._in_force.get(key)
        if since is None and kstore.try_get("DeviceTaintRule", got[0]) is not None:
            since = self._in_force[key] = time.monotonic()
        return since

    def _release_quarantine(self) -> None:
        for key, (name, _since) in sorted(self.quarantine.items()):
            if self.holders.get(key):
                continue  # still held by a claim: kube-scheduler may take it for free
            try:
                self.sched.kstore.client.delete("DeviceTaintRule", name, missing_ok=True)
            except StoreError as e:
                log.info("releasing the quarantine of %s: %s", "/".join(key), e)
                continue
            del self.quarantine[key]
            self._in_force.pop(key, None)

    def _repair(self, claim: Obj) -> bool:
        """Deallocate kdra's conflicting claim and give its pod other devices; True when done with it
        (repaired, or found not repairable), False to try again on a later turn."""
        pods = self._pods_of(claim)
        key = _claim_key(claim)
        held = ", ".join(device_ids(_results(claim)))
        if any(pod_running(p) for p in pods):
            for p in pods:
                self._event(
                    p,
                    NOT_REPAIRED_EVENT,
                    f"kdra did not re-allocate ResourceClaim {key} ({held}): its pod is already running",
                    "Warning",
                )
            return True
        if any(p["metadata"].get("uid") in self.sched.inflight for p in pods):
            return False  # its binding cycle is still writing: look again once it reported back
        shared = [
            k for k in self.held[claim["metadata"]["uid"]].devices if len(self.holders.get(k) or {}) > 1
        ]
        if not self._quarantined(shared):
            return False  # the quarantine is not in place (or not settled) yet: on a later turn
        try:
            claim = self._deallocate(claim)
        except ConflictError:
            return False  # changed meanwhile: the next event decides again
        except NotFoundError:
            return True
        except StoreError as e:
            log.warning("repairing ResourceClaim %s: %s", key, e)
            return False
        self.repaired_total += 1
        for p in pods:
            node = (p.get("spec") or {}).get("nodeName")
            if not node:
                self._event(
                    p,
                    REPAIRED_EVENT,
                    f"kdra deallocated ResourceClaim {key} ({held}); scheduling the pod again",
                    "Normal",
                )
                self._drop_finalizer(claim)
                self._requeue(p)
                continue
            ok, got = self._reallocate(p, node)
            if ok:
                self._event(
                    p,
                    REPAIRED_EVENT,
                    f"kdra re-allocated ResourceClaim {key} on {node}: {held} -> {got}",
                    "Normal",
                )
            else:
                self._drop_finalizer(claim)
                meta = claim["metadata"]
                st = _Stranded(
                    meta.get("namespace", "default"),
                    meta["name"],
                    p["metadata"]["name"],
                    p["metadata"].get("uid", ""),
                    node,
                )
                self._event(
                    p,
                    NOT_REPAIRED_EVENT,
                    f"kdra deallocated ResourceClaim {key} ({held}) and found no free device on {node} "
                    f"({got}); a pod without its devices cannot start, so kdra evicts it (its owner "
                    "recreates it and the new pod is scheduled where devices are free)",
                    "Warning",
                )
                if not self._evict(p, st):
                    self._stranded[meta["uid"]] = st
        return True

    def _deallocate(self, claim: Obj) -> Obj:
        upd = copy_for_update(claim)
        st = dict(upd.get("status") or {})
        st.pop("allocation", None)
        st.pop("reservedFor", None)
        upd["status"] = st
        return self.sched.kstore.update(dict(upd, kind="ResourceClaim"), subresource="status")

    def _drop_finalizer(self, claim: Obj) -> None:
        meta = claim["metadata"]
        if DELETE_PROTECTION_FINALIZER not in (meta.get("finalizers") or []):
            return

        def drop(c: Obj) -> None:
            c["metadata"]["finalizers"] = [
                f for f in c["metadata"].get("finalizers") or [] if f != DELETE_PROTECTION_FINALIZER
            ]

        try:
            self.sched.kstore.update_with_retry(
                "ResourceClaim", meta["name"], meta.get("namespace", "default"), drop
            )
        except StoreError as e:
            log.info("dropping the finalizer of %s: %s", _claim_key(claim), e)

    def _requeue(self, pod: Obj) -> None:
        # A pod in the queue moves on the claim's deallocation (EV_CLAIM_CHANGE) or after its backoff.
        if pod["metadata"].get("uid") not in self.sched.queue.pods:
            self.sched.queue.add(PodInfo(pod), self.sched.clock())

    def _reallocate(self, pod: Obj, node: str) -> tuple[bool, str]:
        """Allocate a bound pod's unallocated claims on its node, as a scheduling cycle pinned to that
        node would (DynamicResources only: the pod's cpu and memory are already counted there)."""
        from kdra.scheduler.plugins.dynamicresources import DynamicResources

        dr = next((p for p in self.sched.profile.plugins if isinstance(p, DynamicResources)), None)
        ni = self.sched.cache.node_by_name.get(node)
        if dr is None or ni is None:
            return False, f"node {node} is not known"
        pi = PodInfo(pod)
        state = CycleState()
        st = dr.pre_filter(state, pi)
        if st.ok:
            st = dr.filter(state, pi, ni)
        if st.ok:
            st = dr.reserve(state, pi, node)
            if st.ok:
                try:
                    st = DynamicResources.pre_bind(dr, state, pi, node)  # in the loop, not deferred
                except StoreError as e:
                    st = error(str(e))
                if not st.ok:
                    dr.unreserve(state, pi, node)
        if not st.ok:
            return False, st.message or "cannot allocate all claims"
        got = [
            r
            for _c, a in state.get("dra_allocations") or []
            for r in (a.get("devices") or {}).get("results") or []
        ]
        return True, ", ".join(device_ids(got))

    # -- reading ---------------------------------------------------------------------------------------
    def conflicting_claims(self) -> list[tuple[DeviceKey, list[str]]]:
        """Each over-allocated device with the claims (namespace/name) that hold it."""
        return [
            (k, sorted(_claim_key(self.held[u].claim) for u in uids if u in self.held))
            for k, uids in sorted(self.conflicts.items())
        ]
