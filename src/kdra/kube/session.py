"""The scheduling session's seams on a live cluster (kdra.scheduler.seams): evictions through the Eviction
API and status written through the API.

`KubeEvictor` evicts a preemption's or reclaim's victims (or a stale gang) with policy/v1 Evictions, so
PodDisruptionBudgets are respected: first a dry run of every victim (one refusal and nothing is evicted:
a gang is evicted whole or not at all), then the evictions. The API server marks an evicted pod with
DisruptionTarget; kdra's patch then gives it kube-scheduler's reason (PreemptionByScheduler) and says who
preempted it, and a `Preempted` Event goes to the victim. Where the Eviction API is not allowed (403,
404, 405), the victim is deleted with that DisruptionTarget condition, as kube-scheduler preempts. The
victims terminate gracefully (their kubelet, KWOK in the tests, finishes them); kube-controller-manager
releases their claims. A refusal (429, the budget) is reported and the victim is not counted as freed.

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kdra.api.types import Obj
from kdra.cluster.store import InvalidObjectError, NotFoundError, StoreError
from kdra.kube.binder import STATUS_RETRY_INITIAL, STATUS_RETRY_MAX, KubeBinder
from kdra.kube.client import FencedError
from kdra.kube.events import now_rfc3339, object_event
from kdra.kube.store import KubeStore
from kdra.scheduler.seams import DISRUPTION_TARGET, PREEMPTION_BY_SCHEDULER, EvictionOutcome

log = logging.getLogger("kdra.kube.session")

EVICTION_NOT_ALLOWED = (403, 404, 405)  # the Eviction API is forbidden to kdra or not there: delete instead
LAST_EVENTS_KEPT = 10_000  # objects whose last Event is remembered, not to post it again


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


class KubeStatusWriter:
    """With a binder (`use`), writes go out on its binding loop, so the scheduling loop never waits for
    them: `write_status` queues the fields (True: they will be written, tried again with backoff until they
    land, the object is gone or the write is refused as invalid or fenced off), one write per object at a
    time, later fields folded into the waiting ones; until the cache has the written object, `status_of`
    answers with the fields asked for, so the next write builds on them (a conditions list computed from
    the cached object alone would undo a condition set a moment before). An Event about an object with a
    write waiting is posted after it lands, others at once (best effort). An Event identical to the last
    one about the same object is not posted again (client-go's event correlator counts such repeats
    instead). Without a binder, writes are synchronous."""

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
        with self._lock:
            w = self._pending.get(key)
            if w is not None:
                w.fields.update(status)
                w.ahead.update(status)
                return True
            w = self._pending[key] = _ObjectWrite(
                key[0], key[2], meta.get("namespace") or None, obj.get("apiVersion"), dict(status)
            )
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
    def __init__(self, store: KubeStore, component: str = "kdra", instance: str = "") -> None:
        self.store = store
        self.component = component
        self.instance = instance
        self.evictions = 0
        self.refused = 0  # evictions refused (dry runs included)

    def _dry_run(self, pods: Sequence[Obj], fallback: set[str]) -> dict[str, str]:
        """Dry-run evictions (the API server checks the budgets, nothing is evicted); pods the Eviction
        API is not allowed for go to `fallback`."""
        refused = {}
        for pod in pods:
            meta = pod["metadata"]
            if meta.get("deletionTimestamp"):
                continue
            key = f"{meta.get('namespace') or 'default'}/{meta['name']}"
            try:
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
        return refused

    def refusals(self, pods: Sequence[Obj]) -> dict[str, str]:
        refused = self._dry_run(pods, set())
        self.refused += len(refused)
        return refused

    def evict(self, pods: Sequence[Obj], message: str, *, dry_run_first: bool = True) -> EvictionOutcome:
        client = self.store.client
        out = EvictionOutcome(released=False)
        live = []
        for pod in pods:
            meta = pod["metadata"]
            ns, name = meta.get("namespace") or "default", meta["name"]
            if meta.get("deletionTimestamp"):
                out.evicted.append(f"{ns}/{name}")  # already going
                continue
            live.append(pod)
        fallback: set[str] = set()
        if dry_run_first:
            out.refused = self._dry_run(live, fallback)
            if out.refused:
                self.refused += len(out.refused)
                return out
        for pod in live:
            meta = pod["metadata"]
            ns, name = meta.get("namespace") or "default", meta["name"]
            key = f"{ns}/{name}"
            try:
                if key in fallback:
                    self._mark(ns, name, message)
                    client.delete("Pod", name, ns, missing_ok=True)
                else:
                    try:
                        client.evict(ns, name, uid=meta.get("uid"))
                    except StoreError as e:
                        if e.code not in EVICTION_NOT_ALLOWED:
                            raise
                        self._mark(ns, name, message)
                        client.delete("Pod", name, ns, missing_ok=True)
                    else:
                        self._mark(ns, name, message)
            except NotFoundError:
                out.evicted.append(key)
                continue
            except StoreError as e:
                out.refused[key] = _reason(e)
                self.refused += 1
                continue
            self.evictions += 1
            out.evicted.append(key)
            node = (pod.get("spec") or {}).get("nodeName") or ""
            with contextlib.suppress(StoreError):
                client.create(
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

    def _mark(self, ns: str, name: str, message: str) -> None:
        """DisruptionTarget=True, reason PreemptionByScheduler, with who and why (kube-scheduler's patch)."""
        cond = {
            "type": DISRUPTION_TARGET,
            "status": "True",
            "reason": PREEMPTION_BY_SCHEDULER,
            "message": message[:4096],
            "lastTransitionTime": now_rfc3339(),
        }
        try:
            self.store.client.patch(
                "Pod", name, {"status": {"conditions": [cond]}}, ns, "status", patch_type="strategic"
            )
        except StoreError as e:
            log.info("DisruptionTarget on %s/%s: %s", ns, name, e)


def evict_pod(client: Any, pod: Obj) -> None:
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
    from kdra.kube.store import SCHEDULER_KINDS, SESSION_SOURCES
    from kdra.scheduler.gangqueues import GangQueues
    from kdra.scheduler.scheduler import SchedulerConfig

    config = config or SchedulerConfig(scheduler_name="kdra")
    identity = identity or default_identity()
    store = KubeStore(client, SCHEDULER_KINDS, sources=SESSION_SOURCES, relist_period=resync).start()
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
    sched.binder.victim_wait = preemption_wait
    return store, gq, sched
