"""reclaim: jobs of queues below their fair share take from queues above theirs (KAI's reclaim).

For each job allocate could not place whose queue stays within its fair share (or deserved quota) with
it, running jobs of other queues are taken as victims, most saturated queue first, then lowest priority,
newest first, as long as the session's reclaim verdict (KAI's strategies) allows taking them and until
they free what the job needs; the job is then placed as if they were gone (kdra.scheduler.victims), and
only if that works are they evicted. Jobs within their queue's reclaimMinRuntime are protected.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from kdra.scheduler.preemption import RunningJob, covers, frees_any, order_victims
from kdra.scheduler.queuetree import EPS, Vector, add, dominant_share
from kdra.scheduler.session import Action, Session

if TYPE_CHECKING:
    from kdra.scheduler.gangqueues import GangQueues
    from kdra.scheduler.jobs import Job


class Reclaim(Action):
    name = "reclaim"

    def __init__(self, gq: GangQueues) -> None:
        self.gq = gq
        self.evicted_at_start = 0

    def execute(self, session: Session) -> None:
        gq = self.gq
        rt = gq.runtime
        if not rt.failed:
            return
        fair = session.fair_shares(rt.failed)
        still = []
        running = rt.victims.running_jobs()
        budget = gq.options.max_victim_searches
        self.evicted_at_start = len(rt.victims.evicted)
        for job in rt.failed:
            if budget <= 0:
                still.append(job)
                continue
            if not self._below_share(job, fair):
                still.append(job)
                if gq.tree.view(job.need) and any(v.queue != job.queue for v in running):
                    _ok, why = session.reclaimable(fair, job.queue, job.need, job.queue, {})
                    rt.status.add_reason(job, "reclaim blocked: " + "; ".join(why), session.results)
                continue
            budget -= 1
            if self._reclaim(job, fair, session, running):
                running = rt.victims.running_jobs()
            else:
                still.append(job)
        rt.failed = still

    def _below_share(self, job: Job, fair: Mapping[str, Vector]) -> bool:
        """Reclaim is for queues that stay within their fair share (or deserved quota) with the job."""
        gq = self.gq
        have = gq.allocated.get(job.queue, {})
        need = gq.tree.view(job.need)
        spec = gq.tree.specs[job.queue]
        fs = fair.get(job.queue, {})
        within_fair = all(have.get(r, 0.0) + v <= fs.get(r, 0.0) + EPS for r, v in need.items())
        within_quota = all(have.get(r, 0.0) + v <= spec.quota_of(r) + EPS for r, v in need.items())
        return bool(need) and (within_fair or within_quota)

    def _reclaim(
        self, job: Job, fair: Mapping[str, Vector], session: Session, running: Sequence[RunningJob]
    ) -> bool:
        gq = self.gq
        rt = gq.runtime
        rq = job.queue
        if session.admit(job, fair) is not None:
            return False
        if len(rt.victims.evicted) > self.evicted_at_start and rt.placer.try_job(
            job, session.results, final=False
        ):
            return True  # what earlier victims freed (beyond their reclaimer's need) is enough
        # Victims recorded for it before a restart come first: only what they do not free is taken anew.
        recorded = rt.victims.recorded(job)
        taken_keys = {v.key for v in recorded}
        others = [
            v
            for v in running
            if v.queue != rq
            and v.preemptible
            and rq not in gq.tree.ancestors(v.queue)
            and v.key not in taken_keys
        ]
        if not others and not recorded:
            return False
        saturation = {
            q: dominant_share(gq.allocated.get(q, {}), fair.get(q, {})) for q in {v.queue for v in others}
        }
        chosen: list[RunningJob] = list(recorded)
        take: dict[str, Vector] = {}  # per victim queue
        total: Vector = {}  # all of them
        for v in recorded:
            add(total, v.usage)
        blocked: list[str] = []
        protected = 0
        trials = 0
        # The verdict depends on the victim's queue and what it would lose, not on the victim: victims alike
        # (the same usage) of a queue get the one answered already, as long as nothing is taken from it.
        verdicts: dict[tuple[str, tuple[tuple[str, float], ...]], tuple[bool, list[str]]] = {}
        for v in order_victims(others, saturation, session.now):
            spec = gq.tree.specs[v.queue]
            if session.now - v.start < spec.reclaim_min_runtime:
                protected += 1
                continue
            if not frees_any(v.usage, total, job.need):
                continue
            t = dict(take.get(v.queue, {}))
            add(t, v.usage)
            vkey = (v.queue, tuple(sorted(t.items())))
            verdict = verdicts.get(vkey)
            if verdict is None:
                verdict = verdicts[vkey] = session.reclaimable(fair, rq, job.need, v.queue, t)
            ok, why = verdict
            if not ok:
                blocked.extend(w for w in why if w not in blocked)
                continue
            chosen.append(v)
            take[v.queue] = t
            add(total, v.usage)
            if covers(total, job.need):
                trials += 1
                if rt.victims.try_with_victims(job, chosen, session.results, reclaimer=rq):
                    rt.status.reasons.pop(job.key, None)
                    return True
                verdicts.clear()  # a trial placed and undid the job: answer afresh
                if trials >= gq.options.max_victim_trials:
                    break
        notes = []
        if blocked:
            notes.append("reclaim blocked: " + "; ".join(blocked[:4]))
        if protected:
            notes.append(f"{protected} running job(s) of other queues are within reclaimMinRuntime")
        if notes:
            rt.status.add_reason(job, "; ".join(notes), session.results)
        return False
