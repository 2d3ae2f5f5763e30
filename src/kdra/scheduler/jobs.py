"""Jobs: what the session places all or nothing. A gang (all its pending members, wherever they wait in the
scheduling queue) or a single pod; its queue, priority, age, whether it may be preempted, and an estimate
of what its members still needed at once would hold.

`JobBuilder` groups the pods a session drained from the scheduling queue into jobs and contributes the
order of jobs inside a queue to the session (KAI's priority plugin: priority, then age, then name).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kdra.scheduler.gang import GangRegistry, GangSpec
from kdra.scheduler.queuetree import Vector, add

if TYPE_CHECKING:
    from kdra.scheduler.podinfo import PodInfo
    from kdra.scheduler.preemption import RunningJob
    from kdra.scheduler.queuestate import QueueObjects, QueueState
    from kdra.scheduler.scheduler import Scheduler
    from kdra.scheduler.session import SessionOpening


@dataclass
class Job:
    key: str
    gang: GangSpec | None
    members: list[PodInfo]
    queue: str
    priority: int
    created: float
    preemptible: bool
    need: Vector = field(default_factory=dict)  # estimate for min-count members (pending ones)
    needed: int = 1  # members that must fit at once

    @property
    def label(self) -> str:
        return self.gang.source if self.gang is not None else f"pod {self.members[0].key}"

    @property
    def order_name(self) -> str:
        """The last tie-break of job order: names, never uids, so both worlds order alike."""
        return self.gang.key if self.gang is not None else self.members[0].key


def job_order(job: Job) -> tuple[bool, int, float, str]:
    """Jobs whose last attempt ran out of CEL budget after every other (as in activeQ); then higher
    priority first, older first, by name."""
    return (any(m.continuing for m in job.members), -job.priority, job.created, job.order_name)


def preemptable(job: Job, victim: RunningJob) -> bool:
    """A running job the job may preempt: of its queue, preemptible and of lower priority."""
    return victim.queue == job.queue and victim.preemptible and victim.priority < job.priority


class JobBuilder:
    def __init__(
        self, sched: Scheduler, gangs: GangRegistry, objects: QueueObjects, queues: QueueState
    ) -> None:
        self.sched = sched
        self.gangs = gangs
        self.objects = objects
        self.queues = queues

    def open_session(self, opening: SessionOpening) -> None:
        opening.job_order = job_order
        opening.preemptable = preemptable

    def build(self, popped: Sequence[PodInfo]) -> list[Job]:
        queue = self.sched.queue
        jobs: dict[str, Job] = {}
        for pi in popped:
            gk = self.gangs.gang_of(pi.uid)
            key = gk if gk is not None else f"pod:{pi.uid}"
            if key in jobs:
                continue
            gang = self.gangs.spec(gk) if gk is not None else None
            if gk is not None:
                members = []
                for uid in sorted(self.gangs.members.get(gk, ())):
                    m = queue.pods.get(uid)
                    if m is not None and uid not in self.sched.waiting and uid not in queue.gated:
                        members.append(m)
                members.sort(key=lambda m: m.name)
            else:
                members = [pi]
            if gang is None and gk is not None:
                gang = GangSpec(gk, f"gang {gk}", -1)  # its group object does not exist (yet)
            prio = (
                gang.priority
                if gang is not None and gang.priority is not None
                else max(m.priority for m in members)
            )
            pre = not (gang is not None and gang.preemptible is False)
            job = Job(
                key,
                gang,
                members,
                self.objects.job_queue(pi.pod, gang),
                prio,
                min(m.queued_at for m in members),
                pre,
            )
            if gang is not None:
                bound = len(self.gangs.bound.get(gang.key, ()))
                job.needed = max(0, gang.min_count - bound)
            for m in members[: max(1, job.needed)]:
                add(job.need, self.queues.estimate(m))
            jobs[key] = job
        return list(jobs.values())
