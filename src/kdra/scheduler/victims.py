"""Victims: running jobs taken so that a job can be placed (reclaim, preemption) or a stale gang evicted.

A job is placed as if its victims were gone (a `Statement` takes them out of the view); only if that
places it are they evicted, through the evictor seam (kdra.scheduler.seams), and the job's binds are
committed once the evictions are accepted (on a live cluster its claims are written when the victims'
devices are released: the binder holds them for it meanwhile). A refused eviction (a
PodDisruptionBudget) frees nothing: the job's binds are cancelled and it says why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from kdra.scheduler.jobstatus import JobStatus
from kdra.scheduler.preemption import RunningJob
from kdra.scheduler.seams import EvictionOutcome
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

    def running_jobs(self) -> list[RunningJob]:
        return self.accounting.running_jobs()

    def evict(
        self, victims: Sequence[RunningJob], why: str, *, dry_run_first: bool = True, evicted_for: str = ""
    ) -> EvictionOutcome:
        """Evict the victims' pods through the evictor seam (all of them or, where it refuses one, none
        if it can tell in advance); evicted pods stop counting for their queues at once. `evicted_for`:
        the uid of the pod they make room for, recorded on each (seams.EVICTED_FOR_ANNOTATION)."""
        pods, uids = [], {}
        store = self.sched.store
        for v in victims:
            for uid, name in zip(v.pods, v.names, strict=True):
                ns, pname = name.split("/", 1)
                pod = store.try_get("Pod", pname, ns)
                if pod is not None:
                    pods.append(pod)
                    uids[name] = uid
        outcome = self.seams.evictor.evict(pods, why, dry_run_first=dry_run_first, evicted_for=evicted_for)
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
                outcome = self.evict(victims, why, dry_run_first=False, evicted_for=lead.uid)
                if not outcome.ok:  # a race with the dry run (a budget changed): keep nothing of it
                    refused = outcome
                    group.cancel("a victim's eviction was refused")
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
