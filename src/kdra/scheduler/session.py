"""The scheduling session (KAI-Scheduler's framework.Session): one per cycle, handed to every action.

`Scheduler.run(now)` opens a session: each session plugin (`SchedulerConfig.session_plugins`; the gang
and queue machinery, kdra.scheduler.gangqueues) contributes its functions to a `SessionOpening` — the
order of jobs, the order of queues, the admission check, fair shares, the reclaim verdict, which running
jobs a job may preempt, the rewriter of claims and the gang of a pod for DynamicResources — and the
opening becomes the `Session`, fixed while it is open (actions only add results). The profile's plugins
then read what they need from it (`Plugin.open_session`), and the actions run in order against it
(kdra.scheduler.actions).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from kdra.scheduler.jobs import Job
    from kdra.scheduler.podinfo import PodInfo
    from kdra.scheduler.preemption import RunningJob
    from kdra.scheduler.queuetree import Vector
    from kdra.scheduler.scheduler import CycleResult, Scheduler

P = TypeVar("P")

JobOrder = Callable[["Job"], Any]
QueueOrder = Callable[[str, "Mapping[str, Vector]", "Job"], Any]
Admit = Callable[["Job", "Mapping[str, Vector]"], "str | None"]
FairShares = Callable[["Sequence[Job]"], "dict[str, Vector]"]
Reclaimable = Callable[["Mapping[str, Vector]", str, "Vector", str, "Vector"], "tuple[bool, list[str]]"]
Preemptable = Callable[["Job", "RunningJob"], bool]
ClaimRewriter = Callable[["PodInfo", "Mapping[str, Any]"], "tuple[Mapping[str, Any], Any]"]
GangOf = Callable[[str], "str | None"]


def _no_session_plugin(*_: Any) -> Any:
    raise RuntimeError("no session plugin contributed this function (SchedulerConfig.session_plugins)")


@dataclass
class SessionOpening:
    """What session plugins contribute while a session opens."""

    now: float
    job_order: JobOrder = _no_session_plugin
    queue_order: QueueOrder = _no_session_plugin
    admit: Admit = _no_session_plugin
    fair_shares: FairShares = _no_session_plugin
    reclaimable: Reclaimable = _no_session_plugin
    preemptable: Preemptable = _no_session_plugin
    claim_rewriter: ClaimRewriter | None = None
    gang_of: GangOf | None = None

    def session(self, scheduler: Scheduler) -> Session:
        return Session(
            scheduler,
            self.now,
            job_order=self.job_order,
            queue_order=self.queue_order,
            admit=self.admit,
            fair_shares=self.fair_shares,
            reclaimable=self.reclaimable,
            preemptable=self.preemptable,
            claim_rewriter=self.claim_rewriter,
            gang_of=self.gang_of,
        )


@dataclass(frozen=True)
class Session:
    scheduler: Scheduler
    now: float
    results: list[CycleResult] = field(default_factory=list)
    # sort key of jobs inside a queue (KAI's JobOrderFn)
    job_order: JobOrder = _no_session_plugin
    # (queue, fair shares, its first job) -> key: the next job comes from the queue with the smallest
    queue_order: QueueOrder = _no_session_plugin
    # (job, fair shares) -> why it may not be placed now (None: it may)
    admit: Admit = _no_session_plugin
    # jobs of this session -> fair share per queue and resource
    fair_shares: FairShares = _no_session_plugin
    # (fair shares, reclaiming queue, its need, victim queue, what it would lose) -> (ok, why not)
    reclaimable: Reclaimable = _no_session_plugin
    # (job, running job) -> whether the job may preempt it
    preemptable: Preemptable = _no_session_plugin
    # (pod, claim) -> (the claim to allocate, a key part): DynamicResources asks it for every claim
    claim_rewriter: ClaimRewriter | None = None
    # pod uid -> the gang it belongs to: DynamicResources lets a gang's members share a claim one of them
    # is allocating (upstream: within one PodGroup scheduling cycle)
    gang_of: GangOf | None = None

    def plugin(self, cls: type[P]) -> P | None:
        """The profile's plugin of this class (the first), if any."""
        return next((p for p in self.scheduler.profile.plugins if isinstance(p, cls)), None)


class SessionPlugin(Protocol):
    """What SchedulerConfig.session_plugins are: started once with the scheduler, opened every cycle."""

    def start(self, sched: Scheduler) -> None: ...

    def open_session(self, opening: SessionOpening) -> None: ...


class Action:
    """One step of a session (KAI's actions: allocate, reclaim, preempt ...)."""

    name = "action"

    def execute(self, session: Session) -> None:
        raise NotImplementedError
