"""Victims: running jobs taken so that a job can be placed (reclaim, preemption) or a stale gang evicted.

A job is placed as if its victims were gone (a `Statement` takes them out of the view); only if that
places it are they evicted, through the evictor seam (kdra.scheduler.seams), and the job's binds are
committed once the evictions are accepted (on a live cluster its claims are written when the victims'
devices are released: the binder holds them for it meanwhile). A refused eviction (a
PodDisruptionBudget) frees nothing: the job's binds are cancelled and it says why.

What outlives the process is on the API before any victim is evicted: each victim carries the uid of the
pod it makes room for (seams.EVICTED_FOR_ANNOTATION) and the preemptor its status.nominatedNodeName (the
one record left once the victims are gone). `EvictionRecords` reads them from the store, so a restarted
scheduler resumes: the job is placed first, as if its recorded victims were gone (those still running are
evicted now, the terminating ones not asked for again), and its binds wait for their devices as before the
restart; only what they do not free is taken from new victims. The same records finish a gang's eviction
that started (actions/stale.py).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kdra.cluster.store import WatchEvent
from kdra.scheduler.jobstatus import JobStatus
from kdra.scheduler.preemption import RunningJob
from kdra.scheduler.seams import EVICTED_FOR_ANNOTATION, EvictionOutcome
from kdra.scheduler.statement import Statement

if TYPE_CHECKING:
    from kdra.scheduler.accounting import QueueAccounting
    from kdra.scheduler.gangqueues import GangQueues
    from kdra.scheduler.jobplacer import JobPlacer
    from kdra.scheduler.jobs import Job
    from kdra.scheduler.scheduler import CycleResult, Scheduler


def victim_message(preemptor_uid: str, priority: int, reclaimer: str | None = None) -> str:
    """What a victim reads (its DisruptionTarget and Preempted Event): the pod it makes room for by uid,
    as kube-scheduler's "Preempted by pod <uid>" names it, never by name (it may be another namespace's)."""
    if reclaimer is None:
        return f"preempted by pod {preemptor_uid} (priority {priority})"
    return f"reclaimed by queue {reclaimer} for pod {preemptor_uid} (priority {priority})"


log = logging.getLogger("kdra.scheduler.victims")


class EvictionRecords:
    """Victims' records on the API (seams.EVICTED_FOR_ANNOTATION), kept from the scheduler's pod events:
    pod uid -> (the uid it was evicted for, ns/name), and the reverse."""

    def __init__(self) -> None:
        self.by_pod: dict[str, tuple[str, str]] = {}
        self.by_for: dict[str, set[str]] = {}

    def on_pod(self, pod: Mapping[str, Any], deleted: bool) -> None:
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        wanted = (meta.get("annotations") or {}).get(EVICTED_FOR_ANNOTATION)
        terminal = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        old = self.by_pod.pop(uid, None)
        if old is not None:
            self.by_for.get(old[0], set()).discard(uid)
            if not self.by_for.get(old[0]):
                self.by_for.pop(old[0], None)
        if deleted or terminal or not wanted:
            return
        self.by_pod[uid] = (str(wanted), f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}")
        self.by_for.setdefault(str(wanted), set()).add(uid)

    def of(self, uids: Iterable[str]) -> set[str]:
        """The recorded victims of these pods (uids)."""
        out: set[str] = set()
        for u in uids:
            out |= self.by_for.get(u, set())
        return out


class Victims:
    def __init__(
        self,
        sched: Scheduler,
        seams: GangQueues,
        accounting: QueueAccounting,
        placer: JobPlacer,
        status: JobStatus,
    ) -> None:
        self.sched = sched
        self.seams = seams  # its evictor, read when evicting
        self.accounting = accounting
        self.placer = placer
        self.status = status
        self.now = 0.0
        self.evicted: list[str] = []  # ns/name of evicted pods, in order
        self.records = EvictionRecords()
        for pod in sched.store.list("Pod"):
            self.records.on_pod(pod, False)

    def on_pod(self, ev: WatchEvent) -> None:
        self.records.on_pod(ev.object, ev.type == "DELETED")

    # -- decisions on the API --------------------------------------------------------------------------
    def recorded(self, job: Job) -> list[RunningJob]:
        """The victims the API records for the job (a decision made before a restart): running jobs with
        a member marked for it (a gang whole), and marked pods terminating still on their node."""
        marked = self.records.of(m.uid for m in job.members)
        if not marked:
            return []
        running = {u: rj for rj in self.running_jobs() for u in rj.pods}
        out: list[RunningJob] = []
        seen: set[str] = set()
        store = self.sched.store
        for uid in sorted(marked):
            rj = running.get(uid)
            if rj is not None:
                if rj.key not in seen:
                    seen.add(rj.key)
                    out.append(rj)
                continue
            name = self.records.by_pod[uid][1]
            ns, pname = name.split("/", 1)
            pod = store.try_get("Pod", pname, ns)
            if pod is None or uid not in self.sched.cache.assigned:
                continue  # gone: what it held is free already
            gone = RunningJob(f"pod:{name}", "", 0, 0.0, True, [uid], [name])
            gone.usage = self.placer.queues.pod_usage(pod)
            out.append(gone)
        return out

    def resumable(self, job: Job) -> bool:
        """Whether the job has a decision on the API: recorded victims, or a member nominated to a node."""
        if self.records.of(m.uid for m in job.members):
            return True
        return any((m.pod.get("status") or {}).get("nominatedNodeName") for m in job.members)

    def resume(self, job: Job, results: list[CycleResult]) -> bool:
        """Place a job whose decision is on the API as it was decided: as if its recorded victims were gone
        (those still running are evicted, the others are not asked for again), its binds waiting for their
        devices; else as any job (its nomination puts it first), parked with why when it does not fit."""
        recorded = self.recorded(job)
        log.info(
            "resuming %s: victims on record %s",
            job.label,
            ", ".join(n for v in recorded for n in v.names) or "none",
        )
        if recorded and self.try_with_victims(job, recorded, results):
            return True
        return self.placer.try_job(job, results)  # a job that does not fit waits, explained, as any

    def withdraw_nominations(self, job: Job) -> None:
        """Preemption cannot place the job: its members' nominations are cleared (kube-scheduler's
        clearNominatedNode when Preempt finds no candidate), so that the job is no longer resumed first
        and lower-priority jobs stop waiting for it. Kept while victims recorded for it are still on
        their nodes, as upstream keeps it while the nominated node's victims terminate
        (PodEligibleToPreemptOthers)."""
        if self.recorded(job):
            return
        store = self.sched.store
        for m in job.members:
            pod = store.try_get("Pod", m.name, m.namespace)
            if pod is not None and (pod.get("status") or {}).get("nominatedNodeName"):
                log.info("%s: preemption cannot place it; nominated node cleared", m.key)
                self.seams.evictor.withdraw_nomination(pod)

    def running_jobs(self) -> list[RunningJob]:
        return self.accounting.running_jobs()

    def evict(
        self,
        victims: Sequence[RunningJob],
        why: str,
        *,
        dry_run_first: bool = True,
        evicted_for: str = "",
        nominate: Mapping[str, str] | None = None,
    ) -> EvictionOutcome:
        """Evict the victims' pods through the evictor seam (all of them or, where it refuses one, none
        if it can tell in advance); evicted pods stop counting for their queues at once. `evicted_for`:
        the uid of the pod they make room for, recorded on each (seams.EVICTED_FOR_ANNOTATION);
        `nominate`: the pods they make room for (ns/name -> node), nominated before any is evicted."""
        pods, uids = [], {}
        store = self.sched.store
        for v in victims:
            for uid, name in zip(v.pods, v.names, strict=True):
                ns, pname = name.split("/", 1)
                pod = store.try_get("Pod", pname, ns)
                if pod is not None:
                    pods.append(pod)
                    uids[name] = uid
        outcome = self.seams.evictor.evict(
            pods, why, dry_run_first=dry_run_first, evicted_for=evicted_for, nominate=nominate
        )
        for name in outcome.evicted:
            self.evicted.append(name)
            self.accounting.unaccount(uids.get(name, ""))
        return outcome

    def try_with_victims(
        self,
        job: Job,
        victims: Sequence[RunningJob],
        results: list[CycleResult],
        reclaimer: str | None = None,
    ) -> bool:
        """Place `job` as if the victims were gone; only if that works are they evicted (those the
        placement did not need are spared first). A preemption, or a reclaim by queue `reclaimer`; what
        a victim reads names the job by its first member's uid, never by name (another namespace's)."""
        lead = job.members[0]
        why = victim_message(lead.uid, job.priority, reclaimer)
        action = "preemption" if reclaimer is None else f"reclaim by queue {reclaimer}"
        sched = self.sched
        store = sched.store
        pods = []
        for v in victims:
            for name in v.names:
                ns, pname = name.split("/", 1)
                pod = store.try_get("Pod", pname, ns)
                if pod is not None:
                    pods.append(pod)
        refusals = self.seams.evictor.refusals(pods)  # what a budget protects is not a victim
        if refusals:
            self._explain_refusals(job, action, refusals, results)
            return False
        stmt = Statement(sched, self.now)
        trial = stmt.evict(victims)
        got: list[CycleResult] = []
        refused: EvictionOutcome | None = None
        with sched.bind_group(job.label) as group:
            placed = self.placer.try_job(job, got, final=False)
            if placed:
                spared = trial.spare(victims, {r.node for r in got if r.node})
                victims = [v for v in victims if v not in spared]
                nominate = {r.pod: r.node for r in got if r.node}
                outcome = self.evict(
                    victims, why, dry_run_first=False, evicted_for=lead.uid, nominate=nominate
                )
                if not outcome.ok:  # a race with the dry run (a budget changed): keep nothing of it
                    refused = outcome
                    group.cancel("a victim's eviction was refused")
                else:  # before the group's binds are committed: one may fail at once
                    sched.dra.count_on_released(trial.claims, [m.uid for m in job.members])
        if placed and refused is None:
            stmt.commit()
            results.extend(got)
            return True
        stmt.discard()
        if refused is not None:
            self._explain_refusals(job, action, refused.refused, results)
        return False

    def _explain_refusals(
        self, job: Job, action: str, refused: Mapping[str, str], results: list[CycleResult]
    ) -> None:
        """The job waits; its pods say which victim's eviction was refused and the API's reason (a victim
        of another namespace unnamed)."""
        ns = job.members[0].namespace
        notes = []
        for n, w in sorted(refused.items()):
            who = f"pod {n}" if n.split("/", 1)[0] == ns else "a pod of another namespace"
            notes.append(f"eviction of {who} refused: {w}")
        self.status.add_reason(job, f"{action}: {'; '.join(notes)}", results)
