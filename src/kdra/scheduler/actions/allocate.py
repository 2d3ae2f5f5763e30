"""allocate: place what waits in the scheduling queue.

`AllocateAction` schedules pending pods one by one in queue order (kube-scheduler's scheduleOne loop).
`AllocateJobs` drains the queue into jobs (kdra.scheduler.jobs) and places them queue by queue in the
session's queue order (under fair share first, then under deserved quota, priority, dominant resource
share), inside a queue in the session's job order; a job the session does not admit (a queue limit, the
deserved quota of a non-preemptible job) waits with why, the others are placed all or nothing
(kdra.scheduler.jobplacer). Jobs whose decision is on the API (a restart since it was made) go first
(kdra.scheduler.victims). Jobs that did not fit go on to reclaim and preempt.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kdra.scheduler.jobstatus import QUEUE_PLUGIN
from kdra.scheduler.session import Action, Session

if TYPE_CHECKING:
    from kdra.scheduler.gangqueues import GangQueues
    from kdra.scheduler.jobs import Job


class AllocateAction(Action):
    """Schedule pending pods one by one in queue order (kube-scheduler's scheduleOne loop)."""

    name = "allocate"

    def __init__(self, max_pods: int | None = None) -> None:
        self.max_pods = max_pods

    def execute(self, session: Session) -> None:
        sched = session.scheduler
        n = 0
        while self.max_pods is None or n < self.max_pods:
            if n and sched.yield_on_cel_budget and sched.cel_run_spent_up():
                break  # let the loop take in new events; the next run goes on
            pi = sched.queue.pop(session.now)
            if pi is None:
                break
            session.results.append(sched.schedule_one(pi, session.now))
            n += 1


class AllocateJobs(Action):
    """Drain the queue into jobs and place them in queue order, all or nothing."""

    name = "allocate"

    def __init__(self, gq: GangQueues) -> None:
        self.gq = gq

    def execute(self, session: Session) -> None:
        rt = self.gq.runtime
        sched = session.scheduler
        popped = []
        while (pi := sched.queue.pop(session.now)) is not None:
            popped.append(pi)
        jobs = rt.jobs.build(popped)
        rt.failed = []
        rt.queues.pods_waiting = any(not m.continuing for j in jobs for m in j.members)
        if not jobs:
            return
        fair = session.fair_shares(jobs)
        # Decisions on the API (a preemptor nominated, victims recorded for it: a restart since) are
        # resumed first, so that nothing else takes what their victims free. One that does not fit goes
        # on to preempt in this session with the lower-priority jobs back in the queue until the next:
        # what is free is its (upstream's nominated pods count against lower priorities, as here).
        resumed = [j for j in jobs if rt.victims.resumable(j)]
        if resumed:
            chosen = {id(j) for j in resumed}  # by identity: a Job compares equal field by field (slow)
            jobs = [j for j in jobs if id(j) not in chosen]
            for job in sorted(resumed, key=session.job_order):
                why = session.admit(job, fair)
                if why is not None:
                    rt.status.park(job, why, QUEUE_PLUGIN, session.results)
                elif not rt.victims.resume(job, session.results):
                    rt.failed.append(job)
            if rt.failed:
                floor = max(j.priority for j in rt.failed)
                for j in jobs:
                    if j.priority < floor:
                        for m in j.members:
                            sched.queue.put_back(m, session.now)
                jobs = [j for j in jobs if j.priority >= floor]
        by_queue: dict[str, list[Job]] = {}
        for j in sorted(jobs, key=session.job_order):
            by_queue.setdefault(j.queue, []).append(j)
        results = session.results
        tried = 0
        while by_queue:
            if tried and sched.yield_on_cel_budget and sched.cel_run_spent_up():
                # The run's CEL budget is spent: let the loop take in new events (pods) first; the
                # jobs not tried go back to the queue as they were.
                for rest in by_queue.values():
                    for j in rest:
                        for m in j.members:
                            sched.queue.put_back(m, session.now)
                break
            tried += 1
            q = min(by_queue, key=lambda q: session.queue_order(q, fair, by_queue[q][0]))
            job = by_queue[q].pop(0)
            if not by_queue[q]:
                del by_queue[q]
            why = session.admit(job, fair)
            if why is not None:
                rt.status.park(job, why, QUEUE_PLUGIN, results)
                continue
            timed_out = job.gang is not None and job.gang.key in rt.status.timed_out
            deferred = sched.cel_deferrals
            if (
                not rt.placer.try_job(job, results)
                and not timed_out
                and sched.cel_deferrals == deferred
                and not rt.placer.waits_for_members(job)
            ):
                rt.failed.append(job)  # (a job cut short by its CEL budget is no reason to preempt)
