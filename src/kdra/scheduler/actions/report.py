"""report: last in a session, what users read on the objects (through the status writer seam).

Queue status (allocated, deserved, fair share, limit per resource, and why jobs wait), every
`status_interval` seconds and only where it changed; invalid Queue and PodGroup objects get a condition and
a Warning Event naming the field and the rule, once per problem.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kdra.scheduler.gang import group_condition_type, is_upstream
from kdra.scheduler.queuetree import EPS
from kdra.scheduler.seams import set_condition
from kdra.scheduler.session import Action, Session

if TYPE_CHECKING:
    from kdra.scheduler.gangqueues import GangQueues


def fmt_quantity(resource: str, v: float) -> str:
    """A Queue status value as a Kubernetes quantity string (memory in Gi/Mi, counts and cores plain)."""
    if v == float("inf"):
        return "unlimited"
    if resource == "memory" or resource.startswith("memory."):
        for unit, div in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if v >= div and abs(v / div - round(v / div)) < 1e-6:
                return f"{round(v / div)}{unit}"
        return str(round(v))
    if abs(v - round(v)) < 1e-6:
        return str(round(v))
    return f"{round(v * 1000)}m" if resource == "cpu" else f"{v:.6g}"


class Report(Action):
    name = "report"

    def __init__(self, gq: GangQueues) -> None:
        self.gq = gq
        self._reported: dict[tuple[str, str], str] = {}  # (kind, name) -> problem last reported on it
        self._queue_status: dict[str, Any] = {}  # queue -> status last written
        self._queue_status_at = -1e18

    def execute(self, session: Session) -> None:
        gq = self.gq
        rt = gq.runtime
        now = session.now
        format_time = session.scheduler.format_time
        writer = gq.status
        invalid_queues = gq.objects.invalid_queues
        for rkey in [
            k
            for k in self._reported
            if (k[1] not in invalid_queues if k[0] == "Queue" else k[1] not in gq.gangs.errors)
        ]:
            del self._reported[rkey]
        for name, msg in sorted(invalid_queues.items()):
            obj = gq.objects.queue_objs.get(name)
            if obj is not None and self._reported.get(("Queue", name)) != msg:
                conds, _ = set_condition(
                    writer.status_of(obj).get("conditions"),
                    "Valid",
                    "False",
                    "InvalidSpec",
                    msg,
                    format_time(now),
                )
                if writer.write_status(obj, {"conditions": conds}):
                    self._reported[("Queue", name)] = msg
                    writer.event(obj, "Warning", "InvalidSpec", msg)
        for key, msg in sorted(gq.gangs.errors.items()):
            obj = gq.gangs.invalid.get(key)
            if obj is not None and self._reported.get(("PodGroup", key)) != msg:
                conds, _ = set_condition(
                    writer.status_of(obj).get("conditions"),
                    group_condition_type(obj),
                    "False",
                    "InvalidSpec",
                    msg,
                    format_time(now),
                    (obj.get("metadata") or {}).get("generation") if is_upstream(obj) else None,
                )
                if writer.write_status(obj, {"conditions": conds}):
                    self._reported[("PodGroup", key)] = msg
                    writer.event(obj, "Warning", "InvalidSpec", msg)
        if now - self._queue_status_at < gq.options.status_interval:
            return
        self._queue_status_at = now
        # Every pending job of the queue (not only those tried this session), with the latest reason.
        reasons = rt.status.reasons
        jobs: dict[str, dict[str, str]] = {}
        for uid, pi in session.scheduler.queue.pods.items():
            gk = gq.gangs.gang_of(uid)
            key = gk if gk is not None else f"pod:{uid}"
            q = gq.objects.job_queue(pi.pod, gq.gangs.spec(gk) if gk is not None else None)
            reason = reasons.get(key) or ""
            if key not in jobs.setdefault(q, {}) or reason:
                jobs[q][key] = reason.split("\n", 1)[0]
        waiting: dict[str, list[str]] = {
            q: [r or "not tried yet" for _k, r in sorted(js.items(), key=lambda kv: (not kv[1], kv[0]))]
            for q, js in jobs.items()
        }
        pending = {k for js in jobs.values() for k in js}
        for key in [k for k in reasons if k not in pending]:
            del reasons[key]  # jobs that are gone (their pods deleted, bound, timed out)
        for row in rt.queues.queue_report(rt.failed):
            name = row["queue"]
            obj = gq.objects.queue_objs.get(name)
            if obj is None or str(obj.get("apiVersion", "")).split("/", 1)[0] != "kdra.dev":
                continue  # only kdra's own Queues: KAI's and Volcano's have status schemas of their own
            status: dict[str, Any] = {
                key: {r: fmt_quantity(r, v) for r, v in row[src].items() if abs(v) > EPS}
                for key, src in (
                    ("allocated", "allocated"),
                    ("deserved", "quota"),
                    ("fairShare", "fairShare"),
                    ("limit", "limit"),
                )
            }
            why = waiting.get(name, [])
            status["pendingJobs"] = len(why)
            prev = self._queue_status.get(name)
            if prev is not None and prev[0] == status and prev[1] == why[:1]:
                continue
            cur_conds = writer.status_of(obj).get("conditions")
            if why:
                conds, _ = set_condition(
                    cur_conds, "JobsWaiting", "True", "Waiting", why[0][:4096], format_time(now)
                )
            else:
                conds, _ = set_condition(
                    cur_conds, "JobsWaiting", "False", "NoneWaiting", "", format_time(now)
                )
            if name not in invalid_queues:
                conds = [c for c in conds if c.get("type") != "Valid"]
            if writer.write_status(obj, dict(status, conditions=conds)):
                self._queue_status[name] = (status, why[:1])  # else written again at the next report
