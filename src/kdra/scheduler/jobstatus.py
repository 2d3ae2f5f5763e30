"""Why a job waits, where users read it: its pods' PodScheduled condition (and Event), its group object's
condition (PodGroupScheduled; upstream v1beta1 PodGroupInitiallyScheduled) through the status writer seam,
and `reasons` (job key -> the latest reason) for the Queue report and explanations."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kdra.scheduler.framework import Code, Status
from kdra.scheduler.gang import GangRegistry, GangSpec, group_condition_type, is_upstream
from kdra.scheduler.seams import set_condition

if TYPE_CHECKING:
    from kdra.scheduler.gangqueues import GangQueues
    from kdra.scheduler.jobs import Job
    from kdra.scheduler.scheduler import CycleResult, Scheduler

GANG_PLUGIN = "Gang"
QUEUE_PLUGIN = "Queue"


class JobStatus:
    def __init__(self, sched: Scheduler, gangs: GangRegistry, seams: GangQueues) -> None:
        self.sched = sched
        self.gangs = gangs
        self.seams = seams  # its status writer, read when writing (it may be replaced)
        self.now = 0.0
        self.reasons: dict[str, str] = {}  # job key -> why it waits (latest)
        self.timed_out: set[str] = set()  # gangs past their scheduleTimeout: not tried again

    def park(
        self,
        job: Job,
        message: str,
        plugin: str,
        results: list[CycleResult],
        group_message: str | None = None,
        group_reason: str | None = None,
    ) -> None:
        """The job's pods wait with `message` (PodScheduled, and an Event when it changed); its group object
        says `group_message` (default the same), with `group_reason` (default the plugin's)."""
        sched = self.sched
        self.reasons[job.key] = message
        st = Status(Code.UNSCHEDULABLE, (message.split("\n", 1)[0],), plugin)
        for m in job.members:
            if m.uid in sched.queue.pods and m.uid not in sched.waiting:
                results.append(sched.mark_unschedulable(m, self.now, st, message))
        gang = job.gang
        if gang is not None and gang.obj is not None and gang.key not in self.timed_out:
            reason = group_reason or ("Unschedulable" if plugin == GANG_PLUGIN else "QueueWait")
            self.set_group_condition(gang, "False", reason, group_message or message)

    def add_reason(self, job: Job, note: str, results: list[CycleResult]) -> None:
        """The job waits for one more reason (after those it already had): parked with both; its group
        object keeps the reason it has (the verdict stays, the note is a detail)."""
        prev = self.reasons.get(job.key, "")
        self.park(
            job,
            (prev + "\n" if prev else "") + note,
            QUEUE_PLUGIN,
            results,
            group_reason=self._group_reason(job),
        )

    def _group_reason(self, job: Job) -> str | None:
        """The reason the job's group object says it waits for, if it says it waits."""
        gang = job.gang
        if gang is None or gang.obj is None:
            return None
        ctype = group_condition_type(gang.obj)
        conds = self.seams.status.status_of(gang.obj).get("conditions") or []
        old = next((c for c in conds if c.get("type") == ctype), None)
        return old.get("reason") if old is not None and old.get("status") == "False" else None

    def set_group_condition(self, gang: GangSpec, status: str, reason: str, message: str) -> None:
        """The gang's verdict on its object (status writer seam): PodGroupScheduled (upstream v1beta1:
        PodGroupInitiallyScheduled) with kdra's reason and message; kdra-shaped groups also get `phase` and
        `scheduled` (members bound). An Event on the object when the verdict changes (status, reason or
        the message's first line: details below it, such as how many members exist, change often)."""
        assert gang.obj is not None
        obj = gang.obj
        ctype = group_condition_type(obj)
        writer = self.seams.status
        cur_status = writer.status_of(obj)  # with what was asked for and is not yet in the cache
        old = next((c for c in cur_status.get("conditions") or [] if c.get("type") == ctype), None)
        if ctype == "PodGroupInitiallyScheduled" and old is not None and old.get("status") == "True":
            return  # terminal once True (scheduling.k8s.io/v1beta1)
        if len(message) > 8192:
            message = message[:8172] + "\n... (truncated)"
        conds, changed = set_condition(
            cur_status.get("conditions"),
            ctype,
            status,
            reason,
            message,
            self.sched.format_time(self.now),
            (obj.get("metadata") or {}).get("generation") if is_upstream(obj) else None,
        )
        fields: dict[str, Any] = {"conditions": conds}
        if not is_upstream(obj):
            scheduled = len(self.gangs.bound.get(gang.key, ())) + len(self.gangs.succeeded.get(gang.key, ()))
            phase = (
                "Unschedulable"
                if reason == "GangScheduleTimeout"
                else ("Scheduled" if status == "True" else "Pending")
            )
            fields.update(phase=phase, scheduled=scheduled)
            changed = changed or cur_status.get("phase") != phase or cur_status.get("scheduled") != scheduled
        if not changed or not writer.write_status(obj, fields):
            return  # a failed write is tried again the next time the gang is (its object is unchanged)
        first = message.split("\n", 1)[0]
        if old is None or (
            old.get("status"),
            old.get("reason"),
            (old.get("message") or "").split("\n", 1)[0],
        ) != (
            status,
            reason,
            first,
        ):
            etype = "Normal" if status == "True" else "Warning"
            writer.event(obj, etype, reason, first if status == "True" else message)
