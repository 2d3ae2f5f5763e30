"""stale gangs: a gang with members bound but fewer than its minimum (counting members that completed)
that stays so for `stale_gang_grace` is evicted whole (KAI's stale-gang eviction): binding never leaves a
gang half-running holding devices. Evicted pods are recreated by their owner and the gang is placed again
all or nothing.

A gang whose eviction started (a member still running carries the record every victim gets before any is
evicted, kdra.scheduler.victims) is evicted whole at once, with the same record: a restart in the middle
of an eviction leaves no member running alone until the grace runs out."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kdra.scheduler.preemption import RunningJob
from kdra.scheduler.session import Action, Session

if TYPE_CHECKING:
    from kdra.scheduler.gangqueues import GangQueues


class StaleGangs(Action):
    name = "stale-gangs"

    def __init__(self, gq: GangQueues) -> None:
        self.gq = gq
        self.since: dict[str, float] = {}  # gang key -> when it was first seen running below minimum

    def execute(self, session: Session) -> None:
        gq = self.gq
        rt = gq.runtime
        gangs = gq.gangs
        usage = gq.accounting.usage
        now = session.now
        records = rt.victims.records.by_pod
        for gk in sorted(gangs.bound):
            bound = gangs.bound[gk]
            spec = gangs.spec(gk)
            started = sorted(u for u in bound if u in records)
            if started and spec is not None:
                self._finish(gk, spec, [u for u in sorted(bound) if u in usage], records[started[0]][0])
                continue
            if not bound or spec is None or len(bound) + len(gangs.succeeded.get(gk, ())) >= spec.min_count:
                self.since.pop(gk, None)
                continue
            since = self.since.setdefault(gk, now)
            if now - since < gq.options.stale_gang_grace:
                continue
            names = sorted(u.name for uid in bound if (u := usage.get(uid)) is not None)
            victim = RunningJob(gk, "", 0, since, True)
            victim.pods = [uid for uid in sorted(bound) if uid in usage]
            victim.names = [usage[uid].name for uid in victim.pods]
            msg = (
                f"{spec.source} ran {len(bound)} of minCount {spec.min_count} members for "
                f"{now - since:.0f}s (stale gang): evicting {', '.join(names)} to place it again whole"
            )
            outcome = rt.victims.evict([victim], msg)
            if outcome.evicted:
                self.since.pop(gk, None)
            if spec.obj is not None:
                refused = "; ".join(
                    f"eviction of {n} refused: {w}" for n, w in sorted(outcome.refused.items())
                )
                rt.status.set_group_condition(
                    spec, "False", "GangBelowMinimum", msg + (f"; {refused}" if refused else "")
                )

    def _finish(self, gk: str, spec: Any, uids: list[str], evicted_for: str) -> None:
        """Evict the rest of a gang whose eviction started, for what it was started for."""
        rt = self.gq.runtime
        usage = self.gq.accounting.usage
        if not uids:
            return
        victim = RunningJob(gk, "", 0, 0.0, True)
        victim.pods = uids
        victim.names = [usage[u].name for u in uids]
        msg = (
            f"{spec.source}: finishing an eviction that started before a restart: evicting "
            f"{', '.join(sorted(victim.names))}"
        )
        rt.victims.evict([victim], msg, dry_run_first=False, evicted_for=evicted_for)
        self.since.pop(gk, None)
