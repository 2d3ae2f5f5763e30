"""preempt: a job takes from lower-priority jobs of its own queue.

Victims are the session's preemptable running jobs (of the job's queue, preemptible, lower priority),
lowest priority first, newest first, outside their queue's preemptMinRuntime, taken until they free what
the job needs class by class; when no such set exists (a MIG partition and a whole GPU are different
DeviceClasses of one physical GPU), node by node as kube-scheduler's DefaultPreemption does. The job is
placed as if they were gone (kdra.scheduler.victims), and only if that works are they evicted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from kdra.scheduler.preemption import RunningJob, covers, frees_any
from kdra.scheduler.queuetree import Vector, add
from kdra.scheduler.session import Action, Session

if TYPE_CHECKING:
    from kdra.scheduler.gangqueues import GangQueues
    from kdra.scheduler.jobs import Job


class Preempt(Action):
    name = "preempt"

    def __init__(self, gq: GangQueues) -> None:
        self.gq = gq
        self.evicted_at_start = 0

    def execute(self, session: Session) -> None:
        gq = self.gq
        rt = gq.runtime
        if not rt.failed:
            return
        still = []
        running = rt.victims.running_jobs()
        budget = gq.options.max_victim_searches
        self.evicted_at_start = len(rt.victims.evicted)
        for job in rt.failed:
            # What earlier preemptors of this session evicted beyond their own need may already be enough,
            # with no lower-priority job left running.
            freed = len(rt.victims.evicted) > self.evicted_at_start or bool(rt.victims.recorded(job))
            lower = any(v.queue == job.queue and v.priority < job.priority for v in running)
            if budget <= 0:  # not tried this session: no verdict
                still.append(job)
                continue
            if lower or freed:
                budget -= 1
                if self._preempt(job, session, running, freed):
                    running = rt.victims.running_jobs()
                    continue
            still.append(job)
            rt.victims.withdraw_nominations(job)
        rt.failed = still

    def _preempt(self, job: Job, session: Session, running: Sequence[RunningJob], freed: bool) -> bool:
        gq = self.gq
        rt = gq.runtime
        spec = gq.tree.specs[job.queue]
        if freed and rt.placer.try_job(job, session.results, final=False):
            return True
        # Victims recorded for it before a restart come first: only what they do not free is taken anew.
        chosen: list[RunningJob] = rt.victims.recorded(job)
        total: Vector = {}
        for v in chosen:
            add(total, v.usage)
        taken = {v.key for v in chosen}
        cands = [v for v in running if session.preemptable(job, v) and v.key not in taken]
        protected = [v for v in cands if session.now - v.start < spec.preempt_min_runtime]
        cands = sorted((v for v in cands if v not in protected), key=lambda j: (j.priority, -j.start, j.key))
        # What is free already is tried with fewer victims first (a restart left devices free, or the
        # job's resumed sibling took part of them): victims minimal. Such trials are bounded apart.
        with_free = dict(total)
        add(with_free, self._free())
        trials = early = 0
        for v in cands:
            if not frees_any(v.usage, with_free, job.need):
                continue  # other classes only (a MIG partition's pod, for a whole GPU): the node search below
            chosen.append(v)
            add(total, v.usage)
            add(with_free, v.usage)
            if not covers(with_free, job.need):
                continue
            if covers(total, job.need):
                trials += 1
            elif early < gq.options.max_victim_trials:
                early += 1
            else:
                continue
            if rt.victims.try_with_victims(job, chosen, session.results):
                rt.status.reasons.pop(job.key, None)
                return True
            if trials >= gq.options.max_victim_trials:
                break
        if trials == 0 and cands and self._preempt_on_a_node(job, session, cands):
            return True
        if protected:
            note = (
                f"preemption: {len(protected)} lower-priority job(s) of queue {job.queue} "
                "are within preemptMinRuntime"
            )
            rt.status.add_reason(job, note, session.results)
        return False

    def _free(self) -> Vector:
        """Devices no queue holds (the cluster's capacity less what every queue holds), per DeviceClass."""
        gq = self.gq
        free = {r: v for r, v in gq.runtime.queues.capacity().items() if r.startswith("deviceclass/")}
        for held in gq.allocated.values():
            add(free, held, -1.0)
        return {r: v for r, v in free.items() if v > 0}

    def _preempt_on_a_node(self, job: Job, session: Session, cands: Sequence[RunningJob]) -> bool:
        """The fewest lowest-priority victims on one node whose removal lets the job fit there. Single-pod
        jobs; a victim gang is evicted whole."""
        gq = self.gq
        rt = gq.runtime
        if job.gang is not None:
            return False
        assigned = session.scheduler.cache.assigned
        on_node: dict[str, list[RunningJob]] = {}
        for v in cands:
            for node in sorted({assigned[u] for u in v.pods if u in assigned}):
                on_node.setdefault(node, []).append(v)
        trials = 0
        for node in sorted(on_node, key=lambda n: (len(on_node[n]), n)):
            victims = on_node[node]  # already lowest priority, newest first
            for k in range(1, len(victims) + 1):
                if trials >= gq.options.max_victim_trials:
                    return False
                trials += 1
                if rt.victims.try_with_victims(job, victims[:k], session.results):
                    rt.status.reasons.pop(job.key, None)
                    return True
        return False
