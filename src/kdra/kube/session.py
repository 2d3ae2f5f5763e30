"""The scheduling session's seams on a live cluster (kdra.scheduler.seams): evictions through the Eviction
API and status written through the API.

`KubeEvictor` evicts a preemption's or reclaim's victims (or a stale gang). Every victim is marked first,
in one pods/status write each: DisruptionTarget (kube-scheduler's reason, PreemptionByScheduler, and what it
is evicted for) and the record `kdra.dev/evicted-for` (the uid of the pod it makes room for), so the whole
decision is on the API before anything goes. Then a victim no PodDisruptionBudget covers is deleted, as
kube-scheduler preempts; one a budget covers is evicted with a policy/v1 Eviction, so the budget is
respected (the API server then replaces DisruptionTarget with its own, EvictionByEvictionAPI; the record
stays). Which victims a budget
protects kdra reads from the budgets' status (disruptionsAllowed) before it chooses, as kube-scheduler does:
no dry run (one only where the budgets cannot be read). A victim terminating, or asked for by this process
already, is not asked for again. Where the Eviction API is not allowed (403, 404, 405) the victim is deleted.
A refusal (429, the budget changed) is reported, the victim's record cleared, and it is not counted as
freed; a `Preempted` Event goes to each victim evicted. The victims terminate gracefully (their kubelet,
KWOK in the tests, finishes them); kube-controller-manager releases their claims.

`KubeStatusWriter` sets status fields with a merge patch on the object's status subresource (the path
follows the object's apiVersion: kdra, upstream scheduling.k8s.io, KAI or Volcano) and posts Events with
the object as involvedObject, as kube-scheduler reports on pods; in `kdra scheduler` on the binder's
event loop, so the scheduling loop never waits for a round trip.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kdra.api.types import Obj
from kdra.cluster.selectors import from_label_selector
from kdra.cluster.store import InvalidObjectError, NotFoundError, StoreError, WatchEvent
from kdra.errors import InputError
from kdra.kube.binder import (
    STATUS_DETAIL_INTERVAL,
    STATUS_RETRY_INITIAL,
    STATUS_RETRY_MAX,
    KubeBinder,
    first_line,
    nominate_pod,
)
from kdra.kube.client import FencedError, KubeClient
from kdra.kube.events import now_rfc3339, object_event
from kdra.kube.store import KubeStore
from kdra.scheduler.seams import (
    DISRUPTION_TARGET,
    EVICTED_FOR_ANNOTATION,
    EVICTED_WHOLE,
    PREEMPTION_BY_SCHEDULER,
    EvictionOutcome,
)

log = logging.getLogger("kdra.kube.session")

EVICTION_NOT_ALLOWED = (403, 404, 405)  # the Eviction API is forbidden to kdra or not there: delete instead
LAST_EVENTS_KEPT = 10_000  # objects whose last Event is remembered, not to post it again
DETAIL_WAIT_STEP = 0.2  # how often a write of details waiting its turn looks for a new verdict joining it


@dataclass
class _ObjectWrite:
    """Status fields of one object waiting to be written (or being written), and the Events to post once
    they are."""

    kind: str
    name: str
    namespace: str | None
    api_version: str | None
    fields: dict[str, Any] = field(default_factory=dict)
    events: list[Obj] = field(default_factory=list)
    # Every field asked for on this object until the cache has what was written (status_of).
    ahead: dict[str, Any] = field(default_factory=dict)
    not_before: float = 0.0  # monotonic: waiting fields that change details only are written then


def details_only(before: Mapping[str, Any], fields: Mapping[str, Any]) -> bool:
    """`fields` change no more of `before` than conditions' messages below their first line (the same
    verdicts, other details)."""
    for name, value in fields.items():
        if name != "conditions":
            if before.get(name) != value:
                return False
            continue
        old = {c.get("type"): c for c in before.get("conditions") or []}
        if len(old) != len(value):
            return False
        for c in value:
            o = old.get(c.get("type"))
            if o is None or any(o.get(k) != v for k, v in c.items() if k != "message"):
                return False
            if first_line(o.get("message") or "") != first_line(c.get("message") or ""):
                return False
    return True


class KubeStatusWriter:
    """With a binder (`use`), writes go out on its binding loop, so the scheduling loop never waits for
    them: `write_status` queues the fields (True: they will be written, tried again with backoff until they
    land, the object is gone or the write is refused as invalid or fenced off), one write per object at a
    time, later fields folded into the waiting ones; until the cache has the written object, `status_of`
    answers with the fields asked for, so the next write builds on them (a conditions list computed from
    the cached object alone would undo a condition set a moment before). An Event about an object with a
    write waiting is posted after it lands, others at once (best effort). An Event identical to the last
    one about the same object is not posted again (client-go's event correlator counts such repeats
    instead). A write that changes conditions' details only (below the first line of their messages) goes
    STATUS_DETAIL_INTERVAL after the last such write at the earliest, with the latest fields then, as a
    pending pod's explanation does (kdra.kube.binder). Without a binder, writes are synchronous."""

    def __init__(self, store: KubeStore, component: str = "kdra", instance: str = "") -> None:
        self.store = store
        self.component = component
        self.instance = instance
        self.writes = 0
        self.events = 0
        self._binder: KubeBinder | None = None
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, str, str], _ObjectWrite] = {}  # waiting or being written
        self._ahead: dict[tuple[str, str, str], _ObjectWrite] = {}  # the cache not caught up (loop thread)
        self._last_event: dict[tuple[str, str, str], tuple[str, str, str]] = {}
        self._detail_at: dict[tuple[str, str, str], float] = {}  # when details only were last written
        self.detail_interval = STATUS_DETAIL_INTERVAL

    def use(self, binder: KubeBinder) -> None:
        """Write on `binder`'s loop (its submit, in_loop_thread and post_event)."""
        self._binder = binder

    @staticmethod
    def _key(obj: Obj) -> tuple[str, str, str]:
        meta = obj.get("metadata") or {}
        return (str(obj.get("kind") or ""), meta.get("namespace") or "", meta.get("name", ""))

    def status_of(self, obj: Obj) -> Mapping[str, Any]:
        status: Mapping[str, Any] = obj.get("status") or {}
        w = self._ahead.get(self._key(obj))
        return status if w is None else {**status, **w.ahead}

    def write_status(self, obj: Obj, status: Mapping[str, Any]) -> bool:
        if self._binder is None:
            return self._write_now(obj, status)
        key = self._key(obj)
        meta = obj.get("metadata") or {}
        not_before = 0.0
        if details_only(self.status_of(obj), status):
            now = time.monotonic()
            last = self._detail_at.pop(key, None)
            not_before = last + self.detail_interval if last is not None else 0.0
            self._detail_at[key] = max(now, not_before)
            if len(self._detail_at) > LAST_EVENTS_KEPT:
                del self._detail_at[next(iter(self._detail_at))]  # the object longest without such a write
        with self._lock:
            w = self._pending.get(key)
            if w is not None:
                # Details join fields waiting (written with them), or wait their turn; a new verdict goes
                # as soon as the write in flight, if any, has landed.
                w.not_before = (w.not_before if w.fields else not_before) if not_before else 0.0
                w.fields.update(status)
                w.ahead.update(status)
                return True
            w = self._pending[key] = _ObjectWrite(
                key[0], key[2], meta.get("namespace") or None, obj.get("apiVersion"), dict(status)
            )
            w.not_before = not_before
        try:
            self._binder.submit(self._write(self._binder, key, w), background=True)
        except RuntimeError:  # the binding loop is closed: this process is done scheduling
            with self._lock:
                self._pending.pop(key, None)
            return False
        before = self._ahead.get(key)  # an earlier write whose answer the cache has not taken in yet
        w.ahead = {**(before.ahead if before is not None else {}), **status}
        self._ahead[key] = w
        return True

    def _caught_up(self, key: tuple[str, str, str], w: _ObjectWrite) -> None:
        """The cache has what w's writes answered (loop thread, after their apply_written)."""
        if self._ahead.get(key) is w:
            del self._ahead[key]

    def _write_now(self, obj: Obj, status: Mapping[str, Any]) -> bool:
        kind = str(obj.get("kind") or "")
        meta = obj.get("metadata") or {}
        try:
            out = self.store.client.patch(
                kind,
                meta.get("name", ""),
                {"status": dict(status)},
                meta.get("namespace") or None,
                "status",
                api_version=obj.get("apiVersion"),
            )
        except NotFoundError:
            return True
        except StoreError as e:  # refused or unreachable: say so, schedule on; the caller writes it again
            log.warning("status of %s %s: %s", kind, meta.get("name"), e)
            return False
        self.writes += 1
        self.store.apply_written(kind, out)
        return True

    def _applied(self, kind: str, out: Obj, now: float) -> None:
        self.store.apply_written(kind, out)

    async def _write(self, binder: KubeBinder, key: tuple[str, str, str], w: _ObjectWrite) -> None:
        """Write what waits for this object until nothing does (on the binding loop)."""
        client, attempts = self.store.client, 0
        while True:
            wait = w.not_before - time.monotonic()
            if wait > 0:  # details only: their turn comes later (a new verdict may end the wait)
                await asyncio.sleep(min(wait, DETAIL_WAIT_STEP))
                continue
            with self._lock:
                fields, w.fields = w.fields, {}
                events, w.events = w.events, []
                if not fields and not events:
                    del self._pending[key]
                    binder.in_loop_thread(lambda now: self._caught_up(key, w))
                    return
            try:
                if fields:
                    out = await client.apatch(
                        w.kind, w.name, {"status": fields}, w.namespace, "status", api_version=w.api_version
                    )
                    self.writes += 1
                    binder.in_loop_thread(functools.partial(self._applied, w.kind, out))
            except (NotFoundError, FencedError):
                continue  # the object is gone, or this replica no longer leads: nothing to post about
            except InvalidObjectError as e:
                log.warning("status of %s %s: refused: %s", w.kind, w.name, e)
                continue
            except Exception as e:  # StoreError, or anything else: never drop the fields asked for
                attempts += 1
                delay = min(STATUS_RETRY_MAX, STATUS_RETRY_INITIAL * 2 ** (attempts - 1))
                log.warning(
                    "status of %s %s (attempt %d; again in %.0fs): %s", w.kind, w.name, attempts, delay, e
                )
                with self._lock:
                    w.fields = {**fields, **w.fields}
                    w.events = events + w.events
                await asyncio.sleep(delay)
                continue
            attempts = 0
            for ev in events:
                binder.post_event(ev)
                self.events += 1

    def event(self, obj: Obj, etype: str, reason: str, message: str) -> None:
        key = self._key(obj)
        if self._last_event.get(key) == (etype, reason, message):
            return
        self._last_event.pop(key, None)
        self._last_event[key] = (etype, reason, message)
        if len(self._last_event) > LAST_EVENTS_KEPT:
            del self._last_event[next(iter(self._last_event))]  # the object longest without an Event
        ev = object_event(obj, reason, message, etype, self.component, self.instance)
        if self._binder is not None:
            with self._lock:
                w = self._pending.get(key)
                if w is not None:
                    w.events.append(ev)
                    return
            self._binder.post_event(ev)
            self.events += 1
            return
        try:
            self.store.client.create(ev)
            self.events += 1
        except StoreError as e:  # an Event is best effort
            log.info("event on %s %s: %s", obj.get("kind"), (obj.get("metadata") or {}).get("name"), e)


class KubeEvictor:
    """Victims evicted on a live cluster; see the module docstring."""

    def __init__(self, store: KubeStore, component: str = "kdra", instance: str = "") -> None:
        self.store = store
        self.component = component
        self.instance = instance
        self.evictions = 0
        self.refused = 0  # evictions refused (what a budget protects, dry runs included)
        self.dry_runs = 0
        self.deletes = 0  # victims no budget covers, deleted as kube-scheduler preempts
        # uid -> pod key of victims evicted by this process and not gone yet: never asked for twice
        self._sent: dict[str, str] = {}
        store.watch(self._on_pod, kinds=("Pod",))

    def _on_pod(self, ev: WatchEvent) -> None:
        if ev.type == "DELETED":
            self._sent.pop(ev.object["metadata"].get("uid", ""), None)

    # -- budgets ---------------------------------------------------------------------------------------
    def _informed(self) -> bool:
        return bool(self.store.served("PodDisruptionBudget"))

    def _budgets(self, pod: Obj) -> list[Obj]:
        """The PodDisruptionBudgets that select `pod` (policy/v1: an empty selector selects every pod of
        the namespace), skipping those that count it as disrupted already."""
        meta = pod["metadata"]
        labels = meta.get("labels") or {}
        out = []
        for pdb in self.store.list("PodDisruptionBudget", meta.get("namespace") or "default"):
            if meta["name"] in ((pdb.get("status") or {}).get("disruptedPods") or {}):
                continue
            try:
                sel = from_label_selector((pdb.get("spec") or {}).get("selector"))
            except InputError:
                continue
            if sel.matches(labels):
                out.append(pdb)
        return out

    def refusals(self, pods: Sequence[Obj]) -> dict[str, str]:
        """Which victims a budget protects, from the budgets' status (disruptionsAllowed, less the
        victims of this set it already covers), as kube-scheduler's preemption reads them; no API call.
        Without the budgets informed (not served to kdra), a dry-run eviction of each."""
        if not self._informed():
            return self._dry_run(pods, set())
        allowed: dict[tuple[str, str], int] = {}
        refused = {}
        for pod in pods:
            meta = pod["metadata"]
            if meta.get("deletionTimestamp") or meta.get("uid") in self._sent:
                continue
            ns = meta.get("namespace") or "default"
            for pdb in self._budgets(pod):
                key = (ns, pdb["metadata"]["name"])
                left = allowed.get(key, int((pdb.get("status") or {}).get("disruptionsAllowed") or 0))
                allowed[key] = left - 1
                if left <= 0:
                    refused[f"{ns}/{meta['name']}"] = (
                        "Cannot evict pod as it would violate the pod's disruption budget "
                        f"(PodDisruptionBudget {pdb['metadata']['name']} allows {max(0, left)} more)."
                    )
                    break
        self.refused += len(refused)
        return refused

    def _dry_run(self, pods: Sequence[Obj], fallback: set[str]) -> dict[str, str]:
        """Dry-run evictions (the API server checks the budgets, nothing is evicted); pods the Eviction
        API is not allowed for go to `fallback`."""
        refused = {}
        for pod in pods:
            meta = pod["metadata"]
            if meta.get("deletionTimestamp") or meta.get("uid") in self._sent:
                continue
            key = f"{meta.get('namespace') or 'default'}/{meta['name']}"
            try:
                self.dry_runs += 1
                self.store.client.evict(
                    meta.get("namespace") or "default", meta["name"], uid=meta.get("uid"), dry_run=True
                )
            except NotFoundError:
                continue
            except StoreError as e:
                if e.code in EVICTION_NOT_ALLOWED:
                    fallback.add(key)
                    continue
                refused[key] = _reason(e)
        self.refused += len(refused)
        return refused

    # -- evicting --------------------------------------------------------------------------------------
    def evict(
        self,
        pods: Sequence[Obj],
        message: str,
        *,
        dry_run_first: bool = True,
        evicted_for: str = "",
        nominate: Mapping[str, str] | None = None,
    ) -> EvictionOutcome:
        """The pods they make room for are nominated (`nominate`: ns/name -> node) and every victim is
        marked first (one status write each: DisruptionTarget with kube-scheduler's
        reason and `message`, and the record `kdra.dev/evicted-for`), so that the whole decision is on
        the API before anything is evicted; then each is deleted (no budget covers it: as kube-scheduler
        preempts) or evicted (the Eviction API enforces its budget). A victim terminating, or asked for
        by this process already, is not asked for again. With `dry_run_first`, nothing is evicted when a
        budget protects one of them."""
        out = EvictionOutcome(released=False)
        live = []
        for pod in pods:
            meta = pod["metadata"]
            key = f"{meta.get('namespace') or 'default'}/{meta['name']}"
            if meta.get("deletionTimestamp") or meta.get("uid") in self._sent:
                out.evicted.append(key)  # already going
            else:
                live.append(pod)
        if dry_run_first and live:
            out.refused = self.refusals(live)
            if out.refused:
                return out
        informed = self._informed()
        for key, node in sorted((nominate or {}).items()):
            ns, name = key.split("/", 1)
            nominate_pod(self.store, ns, name, node)
        marked = []
        for pod in live:
            recorded = (pod["metadata"].get("annotations") or {}).get(EVICTED_FOR_ANNOTATION)
            if recorded == (evicted_for or EVICTED_WHOLE) or self._mark(pod, message, evicted_for):
                marked.append(pod)  # (marked before a restart: the record stands)
            else:
                out.evicted.append(_key(pod))  # gone meanwhile
        for pod in marked:
            meta = pod["metadata"]
            key = _key(pod)
            covered = not informed or bool(self._budgets(pod))
            try:
                if covered:
                    evict_pod(self.store.client, pod)
                else:
                    self.store.client.delete(
                        "Pod", meta["name"], meta.get("namespace") or "default", uid=meta.get("uid")
                    )
                    self.deletes += 1
            except NotFoundError:
                out.evicted.append(key)
                continue
            except StoreError as e:
                out.refused[key] = _reason(e)
                self.refused += 1
                self._unmark(pod)
                continue
            self.evictions += 1
            self._sent[meta.get("uid", "")] = key
            out.evicted.append(key)
            log.info("%s %s: %s", "evicted" if covered else "deleted", key, message)
            node = (pod.get("spec") or {}).get("nodeName") or ""
            with contextlib.suppress(StoreError):
                self.store.client.create(
                    object_event(
                        pod,
                        "Preempted",
                        f"{message} (on node {node})" if node else message,
                        "Normal",
                        self.component,
                        self.instance,
                    )
                )
        return out

    def withdraw_nomination(self, pod: Obj) -> None:
        meta = pod["metadata"]
        nominate_pod(self.store, meta.get("namespace") or "default", meta["name"], "")

    def _mark(self, pod: Obj, message: str, evicted_for: str) -> bool:
        """DisruptionTarget=True, reason PreemptionByScheduler, with why (kube-scheduler's patch, written
        before the pod is deleted), and the record naming what it is evicted for. False: the pod is gone."""
        meta = pod["metadata"]
        cond = {
            "type": DISRUPTION_TARGET,
            "status": "True",
            "reason": PREEMPTION_BY_SCHEDULER,
            "message": f"{self.component}: {message}"[:4096],
            "lastTransitionTime": now_rfc3339(),
        }
        patch = {
            "metadata": {"annotations": {EVICTED_FOR_ANNOTATION: evicted_for or EVICTED_WHOLE}},
            "status": {"conditions": [cond]},
        }
        try:
            self.store.apply_written(
                "Pod",
                self.store.client.patch(
                    "Pod",
                    meta["name"],
                    patch,
                    meta.get("namespace") or "default",
                    "status",
                    patch_type="strategic",
                ),
            )
        except NotFoundError:
            return False
        except StoreError as e:  # the eviction goes on; only the record is missing
            log.info("DisruptionTarget on %s: %s", _key(pod), e)
        return True

    def _unmark(self, pod: Obj) -> None:
        """A refused victim is not evicted after all: its record goes (the condition turns False)."""
        meta = pod["metadata"]
        cond = {
            "type": DISRUPTION_TARGET,
            "status": "False",
            "reason": "EvictionRefused",
            "message": "the eviction was refused; the pod keeps running",
            "lastTransitionTime": now_rfc3339(),
        }
        patch = {
            "metadata": {"annotations": {EVICTED_FOR_ANNOTATION: None}},
            "status": {"conditions": [cond]},
        }
        try:
            self.store.client.patch(
                "Pod",
                meta["name"],
                patch,
                meta.get("namespace") or "default",
                "status",
                patch_type="strategic",
            )
        except StoreError as e:
            log.info("clearing the eviction record of %s: %s", _key(pod), e)


def _key(pod: Obj) -> str:
    meta = pod["metadata"]
    return f"{meta.get('namespace') or 'default'}/{meta['name']}"


def evict_pod(client: KubeClient, pod: Obj) -> None:
    """Evict one pod with policy/v1 (the API server checks its PodDisruptionBudgets), or delete it where the
    Eviction API is not allowed (403, 404, 405: forbidden to kdra or not served; a pod that is gone is not
    found either way). Raises what refused it (a 429: its budget)."""
    meta = pod["metadata"]
    ns, name = meta.get("namespace") or "default", meta["name"]
    try:
        client.evict(ns, name, uid=meta.get("uid"))
    except StoreError as e:
        if e.code not in EVICTION_NOT_ALLOWED:
            raise
        client.delete("Pod", name, ns, missing_ok=True)


def _reason(e: StoreError) -> str:
    msg = str((e.status or {}).get("message") or e)
    return msg


def start_session_scheduler(
    client: Any,
    config: Any = None,
    options: Any = None,
    *,
    identity: str | None = None,
    bind_workers: int = 128,
    resync: float = 0.0,
    preemption_wait: float = 120.0,
    partition: Any = None,
) -> tuple[KubeStore, Any, Any]:
    """`kdra scheduler`'s stack: informers (the scheduler's kinds and the session's sources), the session
    with the Kubernetes seams, and the KubeScheduler running its actions. Returns (store, session,
    scheduler); the caller steps the scheduler and stops the store."""
    from kdra.kube.scheduler import KubeScheduler, default_identity
    from kdra.kube.store import DEVICE_TAINT_RULES, SCHEDULER_KINDS, SESSION_SOURCES
    from kdra.scheduler.gangqueues import GangQueues
    from kdra.scheduler.scheduler import SchedulerConfig

    config = config or SchedulerConfig(scheduler_name="kdra")
    identity = identity or default_identity()
    sources = (DEVICE_TAINT_RULES, *SESSION_SOURCES)
    store = KubeStore(client, SCHEDULER_KINDS, sources=sources, relist_period=resync).start()
    writer = KubeStatusWriter(store, config.scheduler_name, identity)
    gq = GangQueues(
        store,
        options,
        evictor=KubeEvictor(store, config.scheduler_name, identity),
        status=writer,
    )
    sched = KubeScheduler(
        store, gq.config(config), identity=identity, bind_workers=bind_workers, partition=partition
    )
    writer.use(sched.binder)  # PodGroup and Queue status, and their Events, off the scheduling loop
    # Claims a killed predecessor left half-written (finalizer, no allocation): before any binding cycle.
    from kdra.kube.bindjob import drop_stray_finalizers

    for name in drop_stray_finalizers(store, config.scheduler_name):
        log.info(
            "dropped the delete-protection finalizer of unallocated claim %s (a binding cut short)", name
        )
    sched.binder.victim_wait = preemption_wait
    return store, gq, sched
