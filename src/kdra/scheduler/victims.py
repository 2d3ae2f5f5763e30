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
        self, victims: Sequence[RunningJob], why: str, *, dry_run_first: bool = True
    ) -> EvictionOutcome:
        """Evict the victims' pods through the evictor seam (all of them or, where it refuses one, none
        if it can tell in advance); evicted pods stop counting for their queues at once."""
        pods, uids = [], {}
        store = self.sched.store
        for v in victims:
            for uid, name in zip(v.pods, v.names, strict=True):
                ns, pname = name.split("/", 1)
                pod = store.try_get("Pod", pname, ns)
                if pod is not None:
                    pods.append(pod)
                    uids[name] = uid
        outcome = self.seams.evictor.evict(pods, why, dry_run_first=dry_run_first)
        for name in outcome.evicted:
            self.evicted.append(name)
            self.accounting.unaccount(uids.get(name, ""))
        return outcome

    def try_with_victims(
        self, job: Job, victims: Sequence[RunningJob], why: str, results: list[CycleResult]
    ) -> bool:
        """Place `job` as if the victims were gone; only if that works are they evicted (those the
        placement did not need are spared first)."""
        sched = self.sched
        store = sched.store
        pods = []
        for v in victims:
            for name in v.names:
                ns, pname = name.split("/", 1)
                pod = store.try_get("Pod", pname, ns)
                if pod is not None:
                    pods.append(pod)
        refusals = self.seams.evictor.refusals(
            pods
        )  # a dry run first: what a budget protects is not a victim
        if refusals:
            self._explain_refusals(job, why, refusals, results)
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
                outcome = self.evict(victims, why, dry_run_first=False)
                if not outcome.ok:  # a race with the dry run (a budget changed): keep nothing of it
                    refused = outcome
                    group.cancel("a victim's eviction was refused")
        if placed and refused is None:
            stmt.commit()
            results.extend(got)
            return True
        stmt.discard()
        if refused is not None:
            self._explain_refusals(job, why, refused.refused, results)
        return False

    def _explain_refusals(
        self, job: Job, why: str, refused: Mapping[str, str], results: list[CycleResult]
    ) -> None:
        """The job waits; its pods say which victim's eviction was refused and the API's reason."""
        notes = "; ".join(f"eviction of pod {n} refused: {w}" for n, w in sorted(refused.items()))
        what = why.split(" for ")[0]
        self.status.add_reason(job, f"{what}: {notes}", results)
