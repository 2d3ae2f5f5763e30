"""`kdra scheduler` against a real API server: kdra's scheduling cycle over a `KubeStore`.

What changes from the embedded mode, and nothing else:
- the real kube-controller-manager creates claims from templates and releases them, so kdra runs no
  claim controller of its own (`run_controllers=False`);
- binding goes through the pods/binding subresource (a scheduler may not write spec.nodeName), retried
  while the API server is unreachable; the API server sets PodScheduled=True;
- PreBind's claim writes (finalizer, then status.allocation and reservedFor, each conditional on the
  resourceVersion and retried on conflict) turn API errors into an error status, so the pod is
  unreserved and retried after backoff instead of crashing the loop;
- an unschedulable pod gets its PodScheduled=False condition through a strategic-merge patch (no
  conflict with the kubelet-side writers) and a FailedScheduling Event, both carrying kdra's
  explanation, the Event only when the text changed;
- the binder seam of the scheduling session (kdra.scheduler.session, given as the config's actions): the
  binds a job decides are committed as one group (`_commit_group`): a gang as one two-phase
  `GroupBindJob` (kdra.kube.binder), and binds whose devices other claims still hold in the API (an
  evicted victim's, until it terminates) parked, assumed and nominated, until those claims are gone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from kdra.cluster.clock import WallClock
from kdra.cluster.store import ConflictError, InvalidObjectError, NotFoundError, StoreError, WatchEvent
from kdra.kube.binder import BindJob, GroupBindJob
from kdra.kube.client import FencedError, UnavailableError
from kdra.kube.events import now_rfc3339, pod_event
from kdra.kube.explain import unschedulable_messages
from kdra.kube.memory import HeapTrimmer
from kdra.kube.partition import Partition, owner_toleration
from kdra.kube.store import KubeStore
from kdra.scheduler.dra import EXTENDED_RESOURCE_CLAIM_ANNOTATION
from kdra.scheduler.framework import SUCCESS, Code, CycleState, Profile, Status, error
from kdra.scheduler.plugins.basic import TaintToleration
from kdra.scheduler.plugins.dynamicresources import STATE_KEY, DynamicResources, reserved_for_pod
from kdra.scheduler.podinfo import PodInfo
from kdra.scheduler.scheduler import (
    AllocateAction,
    BindGroup,
    CycleResult,
    Scheduler,
    SchedulerConfig,
    claim_with_allocation,
)

log = logging.getLogger("kdra.kube.scheduler")


def default_identity() -> str:
    return f"{socket.gethostname()}_{os.getpid()}"


class _BindFailed(Exception):
    pass


@dataclass
class _Parked:
    """Binds waiting until the claims in `waits` (uid -> namespace, name) no longer hold their devices."""

    unit: BindJob | GroupBindJob
    jobs: list[BindJob]
    waits: dict[str, tuple[str, str]]
    deadline: float
    name: str


# Backoff of a pending pod's status writes (condition and Event) that failed: 1 s doubling to 30 s.
STATUS_RETRY_INITIAL = 1.0
STATUS_RETRY_MAX = 30.0


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


class KubeDynamicResources(DynamicResources):
    """DynamicResources whose PreBind, with asynchronous binding, only records what to write (the
    binding cycle writes it, kdra.kube.binder) and otherwise reports API errors as an error status."""

    sched: KubeScheduler | None = None

    def pre_bind(self, state: CycleState, pi: PodInfo, node: str) -> Status:
        sched = self.sched
        allocs = list(state.get("dra_allocations") or [])
        special = any(
            (c["metadata"].get("annotations") or {}).get(EXTENDED_RESOURCE_CLAIM_ANNOTATION) == "true"
            for c, _ in allocs
        )
        if sched is not None and (sched.bind_workers or sched._group is not None) and not special:
            pc = state[STATE_KEY]
            reserve = [c for c in pc.allocated if not reserved_for_pod(c, pi.uid)]
            sched._deferred[pi.uid] = (allocs, reserve)
            return SUCCESS
        try:
            return super().pre_bind(state, pi, node)
        except StoreError as e:
            log.warning("prebind %s: %s", pi.key, e)
            return error(f"writing ResourceClaim status: {e}")


class KubeScheduler(Scheduler):
    def __init__(
        self,
        store: KubeStore,
        config: SchedulerConfig | None = None,
        *,
        identity: str | None = None,
        batch: int = 64,
        bind_timeout: float = 60.0,
        bind_workers: int = 16,
        partition: Partition | None = None,
    ) -> None:
        self.kstore = store
        self.partition = partition or Partition()
        # Asynchronous binding (0: bind in the loop): pods whose binding cycle is running, by uid.
        self.bind_workers = bind_workers
        self.inflight: dict[str, BindJob] = {}
        self._deferred: dict[str, tuple[list[Any], list[Any]]] = {}
        self._done: queue.Queue[BindJob] = queue.Queue()
        self._pool = ThreadPoolExecutor(bind_workers, "kdra-bind") if bind_workers else None
        # A gang's members write and bind side by side here (not on _pool, where their GroupBindJob runs).
        self._member_pool = ThreadPoolExecutor(bind_workers, "kdra-bind-member") if bind_workers else None
        self.max_inflight = 4 * max(1, bind_workers)
        self.bind_failures = 0
        self.identity = identity or default_identity()
        self.bind_timeout = bind_timeout
        self.events_posted = 0
        self._event_text: dict[str, str] = {}
        # The binder seam's group commits (kdra.scheduler.scheduler.BindGroup): binds decided while a group
        # is open, and groups parked until devices they take are no longer allocated to other claims.
        self._group_jobs: list[BindJob] = []
        self.parked: list[_Parked] = []
        self.victim_wait = 120.0  # seconds a preemptor waits for its victims' devices before retrying
        self.group_binds = 0
        self._counter_sets: tuple[Any, dict[tuple[str, str, str], tuple[tuple[str, ...], ...]]] | None = None
        cfg = config or SchedulerConfig()
        self._status_retry: dict[str, _PendingStatus] = {}  # pod uid -> status write to try again
        self.stopped = False  # leadership ended: nothing more is scheduled or bound (stop_binding)
        super().__init__(
            store,
            cfg,
            # The session's actions when the config has them (gangs, queues...), else kube-scheduler's loop.
            actions=None if cfg.actions is not None else [AllocateAction(max_pods=batch)],
            run_controllers=False,
            clock=WallClock(),
        )
        self.yield_on_cel_budget = True  # take in watch events between chunks of expensive CEL work
        from kdra.kube.conflicts import ConflictDetector

        # Devices in more claims than they can serve (another scheduler, a stale write): reported and
        # kdra's side repaired (kdra.kube.conflicts).
        self.conflicts = ConflictDetector(self)
        self.trimmer = HeapTrimmer()  # memory back to the system after a burst went (kdra.kube.memory)

    def default_profile(self) -> Profile:
        prof = super().default_profile()
        plugins = []
        for p in prof.plugins:
            if type(p) is DynamicResources:
                p = KubeDynamicResources(self.store, self.dra)
                p.sched = self
            elif isinstance(p, TaintToleration):  # the taint that reserves nodes for this scheduler
                p.implied = (owner_toleration(self.config.scheduler_name),)
            plugins.append(p)
        prof.plugins = plugins + self.partition.plugins()  # after DynamicResources: it reads its claims
        return prof

    def _on_pod(self, ev: WatchEvent, now: float) -> None:
        uid = ev.object["metadata"].get("uid", "")
        if ev.type == "DELETED" or (ev.object.get("spec") or {}).get("nodeName"):
            # Nothing more to explain about it (kept otherwise: ~1 KB per pod deleted while pending).
            self._event_text.pop(uid, None)
            self._status_retry.pop(uid, None)
        if ev.type == "DELETED":  # nor to wait for: a claim it waited for may never come
            from kdra.scheduler.plugins.dynamicresources import pod_claim_name

            ns = ev.object["metadata"].get("namespace", "default")
            for entry in (ev.object.get("spec") or {}).get("resourceClaims") or []:
                name, _ = pod_claim_name(ev.object, entry)
                waiting = self._waiting_claims.get((ns, name or ""))
                if waiting is not None:
                    waiting.discard(uid)
                    if not waiting:
                        del self._waiting_claims[(ns, name or "")]
        # A pod whose binding cycle runs is not pending again because its status changed meanwhile.
        if (
            ev.type != "DELETED"
            and uid in self.inflight
            and not (ev.object.get("spec") or {}).get("nodeName")
        ):
            return
        super()._on_pod(ev, now)

    # -- the cycle -------------------------------------------------------------------------------------
    def schedule_one(self, pi: PodInfo, now: float) -> CycleResult:
        if self.stopped:  # the rest of a batch after leadership ended: decide nothing
            self.queue.add_unschedulable(pi, now, set())
            return CycleResult(pi.key, None, Status(Code.ERROR, ("not leading",)), "not leading")
        try:
            return super().schedule_one(pi, now)
        except (_BindFailed, StoreError) as e:
            # The claims stay allocated and reserved for the pod: its next attempt sees them allocated
            # and lands on the same node (their node selector); if the pod is gone, the controller
            # manager releases them.
            log.warning("scheduling %s: %s", pi.key, e)
            node = self.cache.assigned.get(pi.uid, "")
            self.cache.forget(pi.uid)
            self.released(pi.pod, node)  # parked pods may fit in what it held (queueing hints)
            self.queue.add_unschedulable(pi, now, set())
            return CycleResult(pi.key, None, Status(Code.ERROR, (str(e),)), str(e))

    def _scheduled_message(self, pi: PodInfo, node: str) -> str:
        """kube-scheduler's Scheduled message; with a device preference, what decided the devices."""
        msg = f"Successfully assigned {pi.key} to {node}"
        choice = self.dra.choices.pop(pi.key, None)
        if choice is not None:
            from kdra.scheduler.devicepref import describe_choice

            msg += f"; {describe_choice(choice)}"
        return msg

    def _bind(self, pi: PodInfo, node: str, now: float) -> None:
        deferred = self._deferred.pop(pi.uid, None)
        if self.stopped:
            raise _BindFailed(f"binding {pi.key}: this scheduler no longer leads")
        if deferred is not None and (self._pool is not None or self._group is not None):
            job = BindJob(pi, node, deferred[0], deferred[1], self.bind_timeout)
            job.scheduled_event = pod_event(
                pi.pod,
                "Scheduled",
                self._scheduled_message(pi, node),
                "Normal",
                self.config.scheduler_name,
                self.identity,
            )
            self.inflight[pi.uid] = job
            if self._group is not None:
                self._group_jobs.append(job)  # committed with its group (_commit_group)
                return
            try:
                self._submit(job)
            except _BindFailed:
                self.inflight.pop(pi.uid, None)
                raise
            return
        deadline = time.monotonic() + self.bind_timeout
        delay = 0.2
        while True:
            try:
                self.kstore.bind(pi.namespace, pi.name, pi.uid, node)
                self._event_text.pop(pi.uid, None)
                with contextlib.suppress(StoreError):
                    self.kstore.client.create(
                        pod_event(
                            pi.pod,
                            "Scheduled",
                            self._scheduled_message(pi, node),
                            "Normal",
                            self.config.scheduler_name,
                            self.identity,
                        )
                    )
                return
            except NotFoundError:
                raise _BindFailed(f"pod {pi.key} is gone") from None
            except ConflictError as e:  # already bound, or a pod of the same name with another uid
                raise _BindFailed(f"binding {pi.key}: {e}") from None
            except UnavailableError as e:
                if time.monotonic() > deadline:
                    raise _BindFailed(f"binding {pi.key}: {e}") from None
                time.sleep(delay)
                delay = min(delay * 2, 2.0)

    def _fail(
        self, pi: PodInfo, now: float, st: Status, message: str, plugins: set[str], explanation: Any
    ) -> CycleResult:
        self.queue.add_unschedulable(pi, now, plugins)
        text, event_text = unschedulable_messages(message, explanation)
        reason = "SchedulerError" if st.code == Code.ERROR else "Unschedulable"
        pending = _PendingStatus(pi.namespace, pi.name, pi.uid, reason, text, event_text)
        self._status_retry.pop(pi.uid, None)
        self._record_status(pending, now)
        return CycleResult(pi.key, None, st, message, explanation)

    def _record_status(self, ps: _PendingStatus, now: float) -> None:
        """Write why a pod is pending (PodScheduled=False, then the FailedScheduling Event when the text
        changed). A write that fails is never dropped: it is tried again with backoff (step) until it
        lands, the pod is gone or bound, or a newer explanation replaces it; only a write the API server
        refuses as invalid, or one fenced off, is given up (with a warning)."""
        current = self.store.try_get("Pod", ps.name, ps.namespace)
        if (
            current is None
            or current["metadata"].get("uid") != ps.uid
            or (current.get("spec") or {}).get("nodeName")
            or current["metadata"].get("deletionTimestamp")
        ):
            return
        conds = (current.get("status") or {}).get("conditions") or []
        old = next((c for c in conds if c.get("type") == "PodScheduled"), None)
        try:
            if old is None or old.get("message") != ps.text or old.get("reason") != ps.reason:
                cond = {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": ps.reason,
                    "message": ps.text,
                    "lastTransitionTime": now_rfc3339(),
                }
                current = self.kstore._written(
                    "Pod",
                    self.kstore.client.patch(
                        "Pod",
                        ps.name,
                        {"status": {"conditions": [cond]}},
                        ps.namespace,
                        "status",
                        patch_type="strategic",
                    ),
                )
            if self._event_text.get(ps.uid) != ps.text:
                self._post_event(current, "FailedScheduling", ps.event_text)
                self._event_text[ps.uid] = ps.text
        except (NotFoundError, FencedError):
            return  # the pod is gone, or this replica no longer leads
        except InvalidObjectError as e:
            log.warning("recording why %s/%s is pending: refused: %s", ps.namespace, ps.name, e)
            return
        except StoreError as e:
            ps.attempts += 1
            ps.due = now + min(STATUS_RETRY_MAX, STATUS_RETRY_INITIAL * 2 ** (ps.attempts - 1))
            self._status_retry[ps.uid] = ps
            log.warning(
                "recording why %s/%s is pending (attempt %d; again in %.0fs): %s",
                ps.namespace,
                ps.name,
                ps.attempts,
                ps.due - now,
                e,
            )
            return
        if ps.attempts:
            log.info(
                "recorded why %s/%s is pending after %d failed attempts", ps.namespace, ps.name, ps.attempts
            )

    def retry_status_writes(self, now: float) -> int:
        """Try again the pending-pod status writes whose backoff ran out; returns how many were tried."""
        due = [ps for ps in self._status_retry.values() if ps.due <= now]
        for ps in due:
            del self._status_retry[ps.uid]
            self._record_status(ps, now)
        return len(due)

    def _post_event(self, pod: dict[str, Any], reason: str, message: str) -> None:
        self.kstore.client.create(
            pod_event(pod, reason, message, "Warning", self.config.scheduler_name, self.identity)
        )
        self.events_posted += 1

    def _submit(self, unit: BindJob | GroupBindJob) -> None:
        """Run a binding cycle (a gang's: one job for all members) on the pool, or here without one.
        _BindFailed when the pool was shut down (stop_binding, from another thread)."""
        done = self._done
        if self._pool is None:
            done.put(unit.run(self.kstore.client))  # type: ignore[arg-type]
            return
        try:
            fut = self._pool.submit(unit.run, self.kstore.client)
        except RuntimeError:
            raise _BindFailed("binding: this scheduler no longer leads") from None

        def report(f: Any, unit: BindJob | GroupBindJob = unit) -> None:
            if f.cancelled():  # never ran (stop_binding): nothing was written
                for job in unit.jobs if isinstance(unit, GroupBindJob) else [unit]:
                    job.error = job.error or "binding cycle cancelled: this scheduler no longer leads"
            done.put(unit)  # type: ignore[arg-type]

        fut.add_done_callback(report)

    def _submit_or_fail(self, unit: BindJob | GroupBindJob, jobs: list[BindJob]) -> None:
        try:
            self._submit(unit)
        except _BindFailed as e:
            for job in jobs:
                job.error = str(e)
                self._finish_one(job, time.time())

    def _commit_group(self, group: BindGroup) -> None:
        """Binds decided in the group: cancelled (forgotten, pods retried), parked until the devices they
        take are no longer allocated to other claims in the API (a preemptor waits for its victims, with
        status.nominatedNodeName), or submitted as one job (a gang: two-phase, kdra.kube.binder)."""
        jobs, self._group_jobs = self._group_jobs, []
        if not jobs:
            return
        if group.cancelled:
            for job in jobs:
                job.error = f"binding cancelled: {group.cancelled}"
                self._finish_one(job, time.time())
            return
        unit: BindJob | GroupBindJob = (
            jobs[0] if len(jobs) == 1 else GroupBindJob(jobs, pool=self._member_pool)
        )
        if len(jobs) > 1:
            self.group_binds += 1
        waits = self._held_elsewhere(jobs)
        if waits:
            self.parked.append(_Parked(unit, jobs, waits, time.monotonic() + self.victim_wait, group.name))
            self._nominate(jobs)
            return
        self._submit_or_fail(unit, jobs)

    def _held_elsewhere(self, jobs: list[BindJob]) -> dict[str, tuple[str, str]]:
        """Claims still allocated, in the API, what these binds are about to allocate: the binder holds it
        for them (it stays assumed) and writes only once those claims are gone. "What" is physical: the
        same device, or a device drawing on the same shared counters (a MIG partition and the whole GPU, or
        another partition of it). Evicted victims' claims (which kdra already counts as released) are waited
        for on both; another claim on the very same device only if it cannot be shared. Which claim holds
        which device in the API is the conflict detector's index (kdra.kube.conflicts)."""
        holders, held = self.conflicts.holders, self.conflicts.held
        mine: set[tuple[str, ...]] = set()
        out: dict[str, tuple[str, str]] = {}

        def name(uid: str) -> tuple[str, str]:
            meta = held[uid].claim["metadata"]
            return (meta.get("namespace") or "default", meta.get("name", ""))

        for job in jobs:
            for claim, alloc in job.allocate:
                own = claim["metadata"].get("uid", "")
                for r in (alloc.get("devices") or {}).get("results") or []:
                    if r.get("adminAccess"):
                        continue
                    key = (r.get("driver", ""), r.get("pool", ""), r.get("device", ""))
                    mine |= self._physical(key)
                    if r.get("shareID"):
                        continue
                    for holder in holders.get(key, {}):
                        if holder != own and holder in held:
                            out[holder] = name(holder)
        for uid in self.dra.released:
            h = held.get(uid)
            if h is not None and uid not in out and any(mine & self._physical(k) for k in h.devices):
                out[uid] = name(uid)
        return out

    def _physical(self, key: tuple[str, str, str]) -> set[tuple[str, ...]]:
        """A device and the counter sets it draws on, as comparable tokens."""
        index = self.dra.index
        if self._counter_sets is None or self._counter_sets[0] is not index:
            table: dict[tuple[str, str, str], tuple[tuple[str, ...], ...]] = {}
            for sl in index.slices:
                for d in sl.devices:
                    if d.consumes:
                        table[d.key] = tuple(("counters", d.driver, d.pool, cs) for cs, _ in d.consumes)
            self._counter_sets = (index, table)
        return {("device", *key), *self._counter_sets[1].get(key, ())}

    def _nominate(self, jobs: list[BindJob]) -> None:
        """status.nominatedNodeName, as kube-scheduler marks a preemptor waiting for its victims."""
        for job in jobs:
            try:
                self.kstore._written(
                    "Pod",
                    self.kstore.client.patch(
                        "Pod",
                        job.pi.name,
                        {"status": {"nominatedNodeName": job.node}},
                        job.pi.namespace,
                        "status",
                        patch_type="strategic",
                    ),
                )
            except StoreError as e:
                log.info("nominating %s: %s", job.pi.key, e)

    def release_parked(self) -> None:
        """Submit parked groups whose devices are free in the API now; give up on those past the deadline."""
        if not self.parked:
            return
        still = []
        for p in self.parked:
            if not any(uid in self.conflicts.held for uid in p.waits):
                log.info("binding %s: the devices it takes are released", p.name)
                self._submit_or_fail(p.unit, p.jobs)
            elif time.monotonic() > p.deadline:
                held = ", ".join(f"{ns}/{n}" for ns, n in sorted(p.waits.values()))
                for job in p.jobs:
                    job.error = f"claims {held} still hold the devices after {self.victim_wait:.0f}s"
                    self._finish_one(job, time.time())
            else:
                still.append(p)
        self.parked = still

    def finish_binds(self, now: float) -> int:
        """Apply what finished binding cycles did (loop thread)."""
        n = 0
        while True:
            try:
                unit = self._done.get_nowait()
            except queue.Empty:
                return n
            n += 1
            for job in unit.jobs if isinstance(unit, GroupBindJob) else [unit]:
                self._finish_one(job, now)

    def _finish_one(self, job: BindJob, now: float) -> None:
        uid = job.pi.uid
        self.inflight.pop(uid, None)
        for obj in job.written:
            self.kstore._written("ResourceClaim", obj)
        if not job.error:
            self._event_text.pop(uid, None)
            return
        self.bind_failures += 1
        log.warning("binding cycle of %s: %s", job.pi.key, job.error)
        node = self.cache.assigned.get(uid, "")
        self.cache.forget(uid)
        self._unbound(uid)
        freed = []
        for claim, alloc in job.allocate:
            cuid = claim["metadata"].get("uid", "")
            if cuid not in self.dra.allocated:  # not written, or rolled back
                self.dra.forget_assumed(cuid)
                freed.append(claim_with_allocation(claim, alloc))
        self.released(job.pi.pod, node, freed)  # parked pods may fit in what it held (queueing hints)
        if job.gone:
            return
        current = self.store.try_get("Pod", job.pi.name, job.pi.namespace)
        if current is None or (current.get("spec") or {}).get("nodeName"):
            return
        if current["metadata"].get("uid") != uid or current["metadata"].get("deletionTimestamp"):
            return
        pi = PodInfo(current)
        pi.attempts, pi.initial_attempt = job.pi.attempts, job.pi.initial_attempt  # backoff grows
        self.queue.add(pi, now)
        # As kube-scheduler's binding-cycle failure handler: SchedulerError condition and Event, and
        # the pod retried after backoff.
        self._fail(self.queue.pods[uid], now, Status(Code.ERROR, (job.error,)), job.error, set(), None)

    def drop_caches(self) -> None:
        """Forget answers derived for pods (per pod shape and node): rebuilt on demand by the next pods."""
        self._sig.clear()
        for p in self.profile.plugins:
            if isinstance(p, DynamicResources):
                p._results.clear()

    def stop_binding(self) -> None:
        """Leadership ended (any thread may call this): binding cycles not started yet never start and the
        loop schedules nothing more. Cycles already running are stopped by the client's write fence at
        their next write (kdra.kube.leader)."""
        self.stopped = True
        for pool in (self._pool, self._member_pool):
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)

    def close(self, wait: bool = True) -> None:
        """Let running binding cycles finish."""
        if self._pool is not None:
            self._pool.shutdown(wait=wait)  # group jobs finish first: they wait on the member pool
            self.finish_binds(time.time())
        if self._member_pool is not None:
            self._member_pool.shutdown(wait=wait)

    # -- the loop --------------------------------------------------------------------------------------
    def next_timeout(self, now: float, ceiling: float = 1.0) -> float:
        """How long the loop may wait for events before scheduling again."""
        if len(self.inflight) - sum(len(p.jobs) for p in self.parked) >= self.max_inflight:
            return min(ceiling, 0.02)
        if self.queue._active:
            return 0.0
        wake = self.queue.next_wakeup()
        if self._status_retry:
            retry = min(ps.due for ps in self._status_retry.values())
            wake = retry if wake is None else min(wake, retry)
        if wake is None:
            return ceiling
        return max(0.0, min(ceiling, wake - now))

    def step(self, wait: float = 1.0) -> list[CycleResult]:
        """Deliver what the watches brought (waiting up to the queue's next wake-up, at most `wait`)
        and run one batch of scheduling cycles."""
        now = time.time()
        self.finish_binds(now)
        self.kstore.process_events(timeout=self.next_timeout(now, 0.2 if self.parked else wait))
        now = time.time()
        self.release_parked()
        self.finish_binds(now)
        if self.stopped:
            return []
        self.conflicts.step()
        if len(self.inflight) - sum(len(p.jobs) for p in self.parked) >= self.max_inflight:
            return []
        idle = not self.inflight and not self.queue._active
        self.trimmer.note(sum(self.kstore.count(k) for k in self.kstore.kinds), idle, self.drop_caches)
        if self._status_retry:
            self.retry_status_writes(now)
        self.queue.flush_unschedulable_leftover(now)
        return self.run(now)
