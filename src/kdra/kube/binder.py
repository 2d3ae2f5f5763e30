"""The binder seam on a live cluster (kdra.scheduler.seams.Binder): binding cycles on worker threads.

What changes from the in-memory binder:
- the claims' writes (finalizer, then status.allocation and reservedFor, each conditional on the
  resourceVersion and retried on conflict) and pods/binding run as a `BindJob` (kdra.kube.bindjob), a
  coroutine on the binder's event loop (kdra.kube.bindloop; at most `bind_workers` at once), while the
  loop schedules the next pods; the loop applies what finished (`finish_binds`): written claims into the
  cache, a failure back to the scheduler (`bind_failed`);
- without workers (`bind_workers=0`), and for a pod with an extended-resource claim (created in PreBind),
  PreBind runs in the loop and API errors become an error status; the bind goes through pods/binding,
  retried while the API server is unreachable; the API server sets PodScheduled=True;
- the Scheduled Event is posted once the pod is bound, off the binding's path (kdra.kube.bindloop's
  EventPoster, as kube-scheduler's event broadcaster);
- the binds a session commits together (a BindGroup) are one unit: a gang one two-phase `GroupBindJob`;
  binds whose devices other claims still hold in the API (an evicted victim's, until it terminates) are
  parked, assumed and nominated, until those claims are gone;
- an unschedulable pod gets its PodScheduled=False condition through a strategic-merge patch (no conflict
  with the kubelet-side writers) and a FailedScheduling Event, both carrying kdra's explanation, the Event
  only when the text changed, written on the binding loop (one write per pod at a time, and before that
  pod's binding cycle); a write that fails is tried again with backoff.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import queue
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from kdra.api.types import Obj
from kdra.cluster.store import (
    ConflictError,
    InvalidObjectError,
    NotFoundError,
    StoreError,
    WatchEvent,
)
from kdra.kube.bindjob import BindJob, GroupBindJob
from kdra.kube.bindloop import BindLoop
from kdra.kube.client import FencedError, UnavailableError
from kdra.kube.events import now_rfc3339, pod_event
from kdra.kube.explain import unschedulable_messages
from kdra.kube.store import KubeStore
from kdra.scheduler.dra import EXTENDED_RESOURCE_CLAIM_ANNOTATION
from kdra.scheduler.framework import SUCCESS, Code, CycleState, PreBindPlugin, Status, error
from kdra.scheduler.plugins.dynamicresources import DynamicResources, claim_ref_for
from kdra.scheduler.podinfo import PodInfo
from kdra.scheduler.seams import BindFailed, BindGroup

if TYPE_CHECKING:
    from kdra.scheduler.scheduler import Scheduler

log = logging.getLogger("kdra.kube.scheduler")

# Backoff of a pending pod's status writes (condition and Event) that failed: 1 s doubling to 30 s.
STATUS_RETRY_INITIAL = 1.0
STATUS_RETRY_MAX = 30.0
# A pending pod's explanation changed below its first line only (the same verdict, other details: a note
# that comes and goes between sessions) is written again this long after the last such change at the
# earliest (the latest then): a scheduling loop that runs often would otherwise rewrite it at every session
# (kube-scheduler's attempts at a pending pod are 1 to 10 s apart, its backoff). A new verdict: at once.
STATUS_DETAIL_INTERVAL = 10.0


def first_line(text: str) -> str:
    return text.split("\n", 1)[0]


class ApiHolds(Protocol):
    """Which claims hold, in the API, the devices binds are about to take (kdra.kube.conflicts' index)."""

    def held_elsewhere(self, sched: Scheduler, jobs: list[BindJob]) -> dict[str, tuple[str, str]]:
        """Claim uid -> (namespace, name) of the claims still holding what `jobs` allocate."""
        ...

    def still_held(self, claim_uid: str) -> bool: ...


@dataclass
class _Parked:
    """Binds waiting until the claims in `waits` (uid -> namespace, name) no longer hold their devices."""

    unit: BindJob | GroupBindJob
    jobs: list[BindJob]
    waits: dict[str, tuple[str, str]]
    deadline: float
    name: str


@dataclass
class _PendingStatus:
    """Why a pod is pending, still to be written to its PodScheduled condition and Event."""

    namespace: str
    name: str
    uid: str
    reason: str
    text: str  # the condition's message
    event_text: str  # the Event's (cut to what an Event holds)
    attempts: int = 0
    due: float = 0.0


@dataclass
class _StatusWrite:
    """A pending pod's status write on the binding loop, and what came of it."""

    status: _PendingStatus
    pod: Obj  # as cached when it was decided
    condition: Obj | None  # the PodScheduled=False condition to patch, if it changed
    event: bool  # the FailedScheduling Event to post (its text changed)
    written: Obj | None = None
    event_posted: bool = False
    error: StoreError | None = None
    future: concurrent.futures.Future[None] | None = None
    finished: bool = False  # taken in by the loop thread (_finish_status)


class KubeBinder:
    def __init__(
        self,
        store: KubeStore,
        holds: ApiHolds,
        *,
        scheduler_name: str,
        identity: str,
        bind_workers: int = 128,
        bind_timeout: float = 60.0,
    ) -> None:
        self.kstore = store
        self.holds = holds
        self.scheduler_name = scheduler_name
        self.identity = identity
        # Asynchronous binding (0: bind in the loop): pods whose binding cycle is running, by uid.
        self.bind_workers = bind_workers
        self.inflight: dict[str, BindJob] = {}
        # Finished binding cycles, and what other writes on the binding loop left for the loop thread
        # (a callable of `now`), for finish_binds.
        self._done: queue.Queue[BindJob | GroupBindJob | Callable[[float], None]] = queue.Queue()
        # Binding cycles (a gang's too, without workers: the scheduling loop waits for it) and Events.
        self._loop = BindLoop(store.client, bind_workers)
        self.scheduled_events = self._loop.events  # posted, failed, dropped: counted
        self.max_inflight = 4 * max(1, bind_workers)
        self.bind_failures = 0
        self.bind_timeout = bind_timeout
        self.events_posted = 0
        self._event_text: dict[str, str] = {}
        self.parked: list[_Parked] = []  # groups waiting until devices they take are free in the API
        self.victim_wait = 120.0  # seconds a preemptor waits for its victims' devices before retrying
        self.group_binds = 0
        self._status_retry: dict[str, _PendingStatus] = {}  # pod uid -> status write to try again
        self._status_writes: dict[str, _StatusWrite] = {}  # pod uid -> its status write in flight
        self._status_next: dict[str, _PendingStatus] = {}  # pod uid -> what to write once that is done
        self._status_at: dict[str, float] = {}  # pod uid -> when a change of details only was last sent
        self.stopped = False  # leadership ended: nothing more is bound (stop)
        store.watch(self._on_pod, kinds=("Pod",))

    def _on_pod(self, ev: WatchEvent) -> None:
        if ev.type == "DELETED" or (ev.object.get("spec") or {}).get("nodeName"):
            # Nothing more to explain about it (kept otherwise: ~1 KB per pod deleted while pending).
            uid = ev.object["metadata"].get("uid", "")
            self._event_text.pop(uid, None)
            self._status_retry.pop(uid, None)
            self._status_next.pop(uid, None)
            self._status_at.pop(uid, None)

    # -- the seam --------------------------------------------------------------------------------------
    def refusing(self) -> str:
        return "not leading" if self.stopped else ""

    def in_flight(self, uid: str) -> bool:
        return uid in self.inflight

    @property
    def waiting_binds(self) -> int:
        """Binds decided and not finished, less those parked behind other claims' devices."""
        return len(self.inflight) - sum(len(p.jobs) for p in self.parked)

    def bind(
        self,
        sched: Scheduler,
        state: CycleState,
        pi: PodInfo,
        node: str,
        now: float,
        pre_bind: Sequence[PreBindPlugin],
        group: BindGroup | None,
    ) -> Status:
        allocs = list(state.get("dra_allocations") or [])
        special = any(
            (c["metadata"].get("annotations") or {}).get(EXTENDED_RESOURCE_CLAIM_ANNOTATION) == "true"
            for c, _ in allocs
        )
        deferred: tuple[list[Any], list[Any], dict[str, dict[str, str]]] | None = None
        for bp in pre_bind:
            if isinstance(bp, DynamicResources):
                if (self.bind_workers or group is not None) and not special:
                    # The claims' writes are the binding cycle's (a BindJob), not the loop's.
                    pending = list(state.get("dra_pending") or [])
                    refs = {
                        c["metadata"].get("uid", ""): claim_ref_for(state, pi, c)
                        for c in [*(c for c, _ in allocs + pending), *bp.to_reserve(state, pi)]
                    }
                    deferred = (allocs + pending, bp.to_reserve(state, pi), refs)
                    continue
                try:
                    st = bp.pre_bind(state, pi, node)
                except StoreError as e:
                    log.warning("prebind %s: %s", pi.key, e)
                    st = error(f"writing ResourceClaim status: {e}")
            else:
                st = bp.pre_bind(state, pi, node)
            if not st.ok:
                return st.with_plugin(bp.name)
        try:
            self._bind(sched, pi, node, deferred, group)
        except BindFailed as e:
            log.warning("scheduling %s: %s", pi.key, e)
            raise
        except StoreError as e:
            log.warning("scheduling %s: %s", pi.key, e)
            raise BindFailed(str(e)) from None
        return SUCCESS

    def _bind(
        self,
        sched: Scheduler,
        pi: PodInfo,
        node: str,
        deferred: tuple[list[Any], list[Any], dict[str, dict[str, str]]] | None,
        group: BindGroup | None,
    ) -> None:
        if self.stopped:
            raise BindFailed(f"binding {pi.key}: this scheduler no longer leads")
        if deferred is not None and (self.bind_workers or group is not None):
            job = BindJob(pi, node, deferred[0], deferred[1], self.bind_timeout, refs=deferred[2])
            job.scheduled_event = self._scheduled_event(sched, pi, node)
            self.inflight[pi.uid] = job
            if group is not None:
                group.pending.append(job)  # committed with its group (commit_group)
                return
            try:
                self._submit(job)
            except BindFailed:
                self.inflight.pop(pi.uid, None)
                raise
            return
        # In the loop: pods/binding, retried while the API server is unreachable; the Scheduled Event.
        self._status_next.pop(pi.uid, None)  # being bound: nothing more to explain
        w = self._status_writes.get(pi.uid)
        if w is not None and w.future is not None:
            w.future.result()  # a status write still in flight lands first, never after the binding
            self._finish_status(w, time.time())
        deadline = time.monotonic() + self.bind_timeout
        delay = 0.2
        while True:
            try:
                self.kstore.bind(pi.namespace, pi.name, pi.uid, node)
                self._bound(pi.uid)
                self._loop.events.post(self._scheduled_event(sched, pi, node))
                return
            except NotFoundError:
                raise BindFailed(f"pod {pi.key} is gone") from None
            except ConflictError as e:  # already bound, or a pod of the same name with another uid
                raise BindFailed(f"binding {pi.key}: {e}") from None
            except UnavailableError as e:
                if time.monotonic() > deadline:
                    raise BindFailed(f"binding {pi.key}: {e}") from None
                time.sleep(delay)
                delay = min(delay * 2, 2.0)

    def _scheduled_event(self, sched: Scheduler, pi: PodInfo, node: str) -> Obj:
        """kube-scheduler's Scheduled Event; with a device preference its message says what decided the
        devices."""
        msg = f"Successfully assigned {pi.key} to {node}"
        choice = sched.dra.choices.pop(pi.key, None)
        if choice is not None:
            from kdra.scheduler.devicepref import describe_choice

            msg += f"; {describe_choice(choice)}"
        return pod_event(pi.pod, "Scheduled", msg, "Normal", self.scheduler_name, self.identity)

    def commit_group(self, sched: Scheduler, group: BindGroup) -> None:
        """Binds decided in the group: cancelled (forgotten, pods retried), parked until the devices they
        take are no longer allocated to other claims in the API (a preemptor waits for its victims, with
        status.nominatedNodeName), or submitted as one job (a gang: two-phase, kdra.kube.bindjob)."""
        jobs: list[BindJob] = list(group.pending)
        group.pending.clear()
        if not jobs:
            return
        if group.cancelled:
            for job in jobs:
                job.error = f"binding cancelled: {group.cancelled}"
                self._finish_one(sched, job, time.time())
            return
        unit: BindJob | GroupBindJob = jobs[0] if len(jobs) == 1 else GroupBindJob(jobs)
        if len(jobs) > 1:
            self.group_binds += 1
        waits = self.holds.held_elsewhere(sched, jobs)
        if waits:
            self.parked.append(_Parked(unit, jobs, waits, time.monotonic() + self.victim_wait, group.name))
            self._nominate(jobs)
            return
        self._submit_or_fail(sched, unit, jobs)

    def record_unschedulable(
        self, pi: PodInfo, now: float, status: Status, message: str, explanation: object
    ) -> None:
        text, event_text = unschedulable_messages(message, explanation)
        reason = "SchedulerError" if status.code == Code.ERROR else "Unschedulable"
        pending = _PendingStatus(pi.namespace, pi.name, pi.uid, reason, text, event_text)
        refused = self._status_retry.pop(pi.uid, None)
        if refused is not None:  # a newer explanation replaces the one waiting to be tried again: its
            pending.attempts = refused.attempts  # failures still count, so its landing is reported
        self._record_status(pending, now)

    # -- pending pods' status --------------------------------------------------------------------------
    def _record_status(self, ps: _PendingStatus, now: float) -> None:
        """Write why a pod is pending (PodScheduled=False, then the FailedScheduling Event when the text
        changed), on the binding loop: the scheduling loop decides, never waits for the round trips.
        One write per pod at a time, in order: a newer explanation waits for the one in flight (and
        replaces any other waiting). A write that fails is never dropped: it is tried again with backoff
        (step) until it lands, the pod is gone or bound, or a newer explanation replaces it; only a write
        the API server refuses as invalid, or one fenced off, is given up (with a warning)."""
        current = self.kstore.try_get("Pod", ps.name, ps.namespace)
        if (
            current is None
            or current["metadata"].get("uid") != ps.uid
            or (current.get("spec") or {}).get("nodeName")
            or current["metadata"].get("deletionTimestamp")
            or ps.uid in self.inflight  # being bound: nothing pending to explain
        ):
            return
        if ps.uid in self._status_writes:
            self._status_next[ps.uid] = ps
            return
        conds = (current.get("status") or {}).get("conditions") or []
        old = next((c for c in conds if c.get("type") == "PodScheduled"), None)
        cond = None
        if old is None or old.get("message") != ps.text or old.get("reason") != ps.reason:
            cond = {
                "type": "PodScheduled",
                "status": "False",
                "reason": ps.reason,
                "message": ps.text,
                "lastTransitionTime": now_rfc3339(),
            }
        event = self._event_text.get(ps.uid) != ps.text
        if cond is None and not event:
            return
        details_only = (
            old is not None
            and old.get("reason") == ps.reason
            and first_line(old.get("message") or "") == first_line(ps.text)
        )
        last = self._status_at.get(ps.uid)
        if details_only and last is not None and now < last + STATUS_DETAIL_INTERVAL:
            ps.due = last + STATUS_DETAIL_INTERVAL  # the latest details, when due
            self._status_retry[ps.uid] = ps
            return
        write = _StatusWrite(ps, current, cond, event)
        try:
            write.future = self._loop.submit(self._write_status(write))
        except RuntimeError:  # the binding loop is closed: this process is done scheduling
            return
        self._status_writes[ps.uid] = write
        if details_only:
            self._status_at[ps.uid] = now

    async def _write_status(self, w: _StatusWrite) -> None:
        ps, client = w.status, self.kstore.client
        try:
            if w.condition is not None:
                w.written = await client.apatch(
                    "Pod",
                    ps.name,
                    {"status": {"conditions": [w.condition]}},
                    ps.namespace,
                    "status",
                    patch_type="strategic",
                )
            if w.event:
                pod = w.written or w.pod
                await client.acreate(
                    pod_event(
                        pod, "FailedScheduling", ps.event_text, "Warning", self.scheduler_name, self.identity
                    )
                )
                w.event_posted = True
        except StoreError as e:
            w.error = e
        except Exception as e:  # a write must always report back
            w.error = StoreError(f"{type(e).__name__}: {e}")
        finally:
            self._hand_back(functools.partial(self._finish_status, w))

    def _finish_status(self, w: _StatusWrite, now: float) -> None:
        """Apply a pending pod's status write (loop thread): the written pod into the cache, the Event's
        text remembered, a failure tried again after backoff; then the explanation that waited for it."""
        if w.finished:
            return
        w.finished = True
        ps = w.status
        self._status_writes.pop(ps.uid, None)
        if w.written is not None:
            self.kstore.apply_written("Pod", w.written)
        if w.event_posted:
            self._event_text[ps.uid] = ps.text
            self.events_posted += 1
        err = w.error
        if isinstance(err, NotFoundError | FencedError):
            pass  # the pod is gone, or this replica no longer leads
        elif isinstance(err, InvalidObjectError):
            log.warning("recording why %s/%s is pending: refused: %s", ps.namespace, ps.name, err)
        elif err is not None:
            ps.attempts += 1
            ps.due = now + min(STATUS_RETRY_MAX, STATUS_RETRY_INITIAL * 2 ** (ps.attempts - 1))
            self._status_retry[ps.uid] = ps
            log.warning(
                "recording why %s/%s is pending (attempt %d; again in %.0fs): %s",
                ps.namespace,
                ps.name,
                ps.attempts,
                ps.due - now,
                err,
            )
        elif ps.attempts:
            log.info(
                "recorded why %s/%s is pending after %d failed attempts", ps.namespace, ps.name, ps.attempts
            )
        waiting = self._status_next.pop(ps.uid, None)
        if waiting is not None:
            if self._status_retry.pop(ps.uid, None) is not None:
                waiting.attempts = max(waiting.attempts, ps.attempts)
            self._record_status(waiting, now)

    def retry_status_writes(self, now: float) -> int:
        """Try again the pending-pod status writes whose backoff ran out; returns how many were tried."""
        due = [ps for ps in self._status_retry.values() if ps.due <= now]
        for ps in due:
            del self._status_retry[ps.uid]
            self._record_status(ps, now)
        return len(due)

    def next_status_retry(self) -> float | None:
        """When the first status write waiting for its backoff is due (None: none waits)."""
        return min((ps.due for ps in self._status_retry.values()), default=None)

    # -- other writes off the loop (kdra.kube.session's status writer) -------------------------------------
    def submit(self, coro: Coroutine[object, None, None], *, background: bool = False) -> None:
        """Run `coro` on the binding loop (RuntimeError once it is closed); a `background` one is cancelled
        at close instead of waited for (it may be retrying for as long as the API server is away)."""
        self._loop.submit(coro, background=background)

    def in_loop_thread(self, fn: Callable[[float], None]) -> None:
        """Have the scheduling loop call fn(now) (finish_binds): what a write on the binding loop leaves to
        apply to the cache."""
        self._hand_back(fn)

    def post_event(self, event: Obj) -> None:
        """Post an Event off the loop (best effort, kdra.kube.bindloop.EventPoster)."""
        self._loop.events.post(event)

    # -- binding cycles --------------------------------------------------------------------------------
    def _submit(self, unit: BindJob | GroupBindJob) -> None:
        """Start a binding cycle (a gang's: one job for all members) on the binding loop; without workers,
        wait for it here. BindFailed once this scheduler stopped leading (stop, from another thread)."""
        if self.stopped:
            raise BindFailed("binding: this scheduler no longer leads")
        try:
            fut = self._loop.submit(self._cycle(unit))
        except RuntimeError:
            raise BindFailed("binding: this scheduler no longer leads") from None
        if not self.bind_workers:
            fut.result()

    async def _cycle(self, unit: BindJob | GroupBindJob) -> None:
        """One binding cycle, once a slot is free; its outcome to `finish_binds`, then its Scheduled
        Events to the poster. Cycles that had not started when leadership ended never do."""
        jobs = unit.jobs if isinstance(unit, GroupBindJob) else [unit]
        try:
            for job in jobs:  # a status write still in flight lands first, never after the binding
                w = self._status_writes.get(job.pi.uid)
                if w is not None and w.future is not None:
                    await asyncio.wrap_future(w.future)
            async with self._loop.slots:
                if self.stopped:  # nothing was written
                    for job in jobs:
                        job.error = job.error or "binding cycle cancelled: this scheduler no longer leads"
                else:
                    await unit.run(self.kstore.client)
        finally:
            self._hand_back(unit)
        for job in jobs:
            if not job.error and job.scheduled_event is not None:
                self._loop.events.post(job.scheduled_event)

    def _submit_or_fail(self, sched: Scheduler, unit: BindJob | GroupBindJob, jobs: list[BindJob]) -> None:
        try:
            self._submit(unit)
        except BindFailed as e:
            for job in jobs:
                job.error = str(e)
                self._finish_one(sched, job, time.time())

    def _nominate(self, jobs: list[BindJob]) -> None:
        for job in jobs:
            nominate_pod(self.kstore, job.pi.namespace, job.pi.name, job.node)

    def release_parked(self, sched: Scheduler) -> None:
        """Submit parked groups whose devices are free in the API now; give up on those past the deadline."""
        if not self.parked:
            return
        still = []
        for p in self.parked:
            if not any(self.holds.still_held(uid) for uid in p.waits):
                log.info("binding %s: the devices it takes are released", p.name)
                self._submit_or_fail(sched, p.unit, p.jobs)
            elif time.monotonic() > p.deadline:
                held = ", ".join(f"{ns}/{n}" for ns, n in sorted(p.waits.values()))
                for job in p.jobs:
                    job.error = f"claims {held} still hold the devices after {self.victim_wait:.0f}s"
                    self._finish_one(sched, job, time.time())
            else:
                still.append(p)
        self.parked = still

    def _hand_back(self, item: BindJob | GroupBindJob | Callable[[float], None]) -> None:
        """Leave what the binding loop did to the scheduling loop, and wake it: the watch event of the same
        write may have woken it already, before this was there to take in."""
        self._done.put(item)
        self.kstore.wake()

    def finish_binds(self, sched: Scheduler, now: float) -> int:
        """Apply what finished binding cycles (and other writes on the binding loop) did (loop thread)."""
        n = 0
        while True:
            try:
                unit = self._done.get_nowait()
            except queue.Empty:
                return n
            n += 1
            if isinstance(unit, BindJob | GroupBindJob):
                for job in unit.jobs if isinstance(unit, GroupBindJob) else [unit]:
                    self._finish_one(sched, job, now)
            else:
                unit(now)

    def _finish_one(self, sched: Scheduler, job: BindJob, now: float) -> None:
        uid = job.pi.uid
        self.inflight.pop(uid, None)
        for obj in job.written:
            self.kstore.apply_written("ResourceClaim", obj)
        if not job.error:
            self._bound(uid)
            return
        self.bind_failures += 1
        log.warning("binding cycle of %s: %s", job.pi.key, job.error)
        sched.bind_failed(job.pi, job.error, job.allocate, job.gone, now)

    def _bound(self, uid: str) -> None:
        """The pod is bound: nothing pending to explain any more (the cache may not show its node yet)."""
        self._event_text.pop(uid, None)
        self._status_retry.pop(uid, None)
        self._status_next.pop(uid, None)
        self._status_at.pop(uid, None)

    def stop(self) -> None:
        """Leadership ended (any thread may call this): binding cycles not started yet never start and
        nothing more is bound. Cycles already running are stopped by the client's write fence at their
        next write (kdra.kube.leader)."""
        self.stopped = True

    def close(self, sched: Scheduler, wait: bool = True) -> None:
        """Let running binding cycles finish (and post their Events)."""
        self._loop.close(wait)
        self.finish_binds(sched, time.time())


def nominate_pod(store: KubeStore, namespace: str, name: str, node: str) -> None:
    """status.nominatedNodeName, as kube-scheduler marks a preemptor waiting for its victims (no write when
    it is nominated there already); "" clears it. A failed write is logged: the decision goes on without
    its record."""
    pod = store.try_get("Pod", name, namespace)
    if pod is None or ((pod.get("status") or {}).get("nominatedNodeName") or "") == node:
        return
    try:
        store.apply_written(
            "Pod",
            store.client.patch(
                "Pod",
                name,
                {"status": {"nominatedNodeName": node or None}},
                namespace,
                "status",
                patch_type="strategic",
            ),
        )
    except StoreError as e:
        log.info("nominating %s/%s: %s", namespace, name, e)
