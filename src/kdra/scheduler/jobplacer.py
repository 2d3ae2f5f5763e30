"""Placing a job all or nothing.

Every member goes through the normal cycle (PreFilter .. Reserve) and `GangPermit` holds it at Permit (a
`Statement`, kdra.scheduler.statement); when the members the gang still needs hold reservations at once,
and the queue's limits and the gang's device constraints allow it, all of them go on to bind (one bind
group: kdra.scheduler.seams), else every reservation is released and the members are parked with the
gang's explanation. A gang with a topology constraint is tried domain by domain (kdra.scheduler.topology),
a PodGroup matchAttribute value by value (kdra.scheduler.groupconstraints). A gang not placed within its
scheduleTimeout is given up.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kdra.api.pods import pod_claim_names, reserved_for
from kdra.api.workloadapi import group_claim_name, pod_group_claims
from kdra.scheduler.framework import (
    ALL_EVENTS,
    EV_GROUP_CHANGE,
    EV_POD_DELETE,
    EV_QUEUE_CHANGE,
    SUCCESS,
    Code,
    CycleState,
    PermitPlugin,
    Plugin,
    Status,
)
from kdra.scheduler.jobstatus import GANG_PLUGIN, QUEUE_PLUGIN, JobStatus
from kdra.scheduler.queuetree import Vector, add, check_limits, pod_core_usage
from kdra.scheduler.statement import Statement
from kdra.scheduler.topology import LABEL_HOST

if TYPE_CHECKING:
    from kdra.scheduler.gang import GangRegistry
    from kdra.scheduler.gangqueues import GangQueueOptions
    from kdra.scheduler.groupconstraints import GroupConstraints
    from kdra.scheduler.jobs import Job
    from kdra.scheduler.plugins.dynamicresources import DynamicResources
    from kdra.scheduler.podinfo import PodInfo
    from kdra.scheduler.queuestate import QueueState
    from kdra.scheduler.scheduler import CycleResult, Scheduler
    from kdra.scheduler.topology import GangTopology, TopologyPlanner


class GangPermit(PermitPlugin):
    """Holds members of the gang being placed at Permit until the placement allows or rejects them."""

    name = GANG_PLUGIN
    events = ALL_EVENTS | {EV_GROUP_CHANGE}  # members wait for their group object (jobplacer.try_job)

    def __init__(self, gang_of: Callable[[str], str | None]) -> None:
        self.gang_of = gang_of
        self.holding: set[str] = set()

    def permit(self, state: CycleState, pi: PodInfo, node: str) -> Status:
        gk = self.gang_of(pi.uid)
        if gk is not None and gk in self.holding:
            return Status(Code.WAIT, ("waiting for the gang's other members",))
        return SUCCESS


class QueueGate(Plugin):
    """Names queue decisions in pod statuses; a pod parked for its queue's quota wakes when a pod ends."""

    name = QUEUE_PLUGIN
    events = frozenset({EV_POD_DELETE, EV_QUEUE_CHANGE})


class JobPlacer:
    def __init__(
        self,
        sched: Scheduler,
        options: GangQueueOptions,
        gangs: GangRegistry,
        queues: QueueState,
        status: JobStatus,
        planner: TopologyPlanner,
        permit: GangPermit,
        topology: GangTopology,
        group_constraints: GroupConstraints,
    ) -> None:
        self.sched = sched
        self.options = options
        self.gangs = gangs
        self.queues = queues
        self.status = status
        self.planner = planner
        self.permit = permit
        self.topology = topology
        self.group_constraints = group_constraints
        self.now = 0.0
        self.dynres: DynamicResources | None = None  # the profile's DynamicResources plugin
        self.first_attempt: dict[str, float] = {}

    def try_job(self, job: Job, results: list[CycleResult], final: bool = True) -> bool:
        """All or nothing: place the job (trying topology domains in turn); True when it bound. Each pod
        that stays pending is explained once (the gang's verdict, not its own attempt's before it); not
        at all by an attempt that is not `final` (a preemption trial: the verdict it had stays)."""
        with self.sched.one_explanation_per_pod(write=final):
            return self._try_job(job, results, final)

    def _try_job(self, job: Job, results: list[CycleResult], final: bool) -> bool:
        sched = self.sched
        gang = job.gang
        status = self.status
        if gang is not None:
            if gang.key in status.timed_out:
                for m in job.members:  # a pod of a timed-out gang came back (updated): not tried again
                    sched.queue.delete(m.uid)
                return False
            if gang.min_count < 0:
                if final:
                    problem = self.gangs.errors.get(gang.key)
                    why = (
                        f"its group object is invalid: {problem}"
                        if problem
                        else "waiting for its PodGroup/Workload object"
                    )
                    status.park(job, f"{job.label}: {why}", GANG_PLUGIN, results)
                return False
            have = len(self.gangs.members.get(gang.key, ()))
            if have < gang.min_count:
                if final:
                    self._wait_for_members(job, have, results, release=False)
                return False
            first = self.first_attempt.setdefault(gang.key, self.now)
            timeout = gang.timeout if gang.timeout is not None else self.options.gang_timeout
            if timeout is not None and self.now - first > timeout and job.needed > 0:
                self._time_out(job, timeout, results)
                return False
            if len(job.members) < job.needed:
                # Members exist but are not ready for scheduling (PreEnqueue: their ResourceClaims not
                # created yet, scheduling gates): the gang cannot be placed whole, and no placement says
                # why better than that (upstream's GangScheduling waits for them at Permit, quietly).
                if final:
                    self._wait_for_members(job, have, results, release=True)
                return False
        if not job.members:
            return False
        plan, topo_note = self.planner.plan(
            gang.topology if gang is not None else None, job.members, job.needed, self.dynres
        )
        failure: str | None = None
        # A PodGroup matchAttribute across members: the values to try, most free devices first.
        trials = self.group_constraints.trials(gang, self.group_constraints.claims_of(job.members))
        tried: list[str] = []
        # Where the members one by one fit no domain, unlike members get a second try per domain, heaviest
        # first, each on the node the planner's search gives it (TopologyPlanner.packing, .assign): the
        # placements the first try finds are kept as they were. One PreFilter per member shape, as plan's.
        domains_tried = gang is not None and any(r is not None for r in plan)
        packing = self.planner.packing(self.dynres, job.members) if domains_tried else None
        attempts: list[tuple[tuple[str, str] | None, list[tuple[PodInfo, dict[Any, int]]] | None]] = [
            (r, None) for r in plan
        ]
        if packing is not None:
            attempts += [(r, packing) for r in plan if r is not None]
        for pins in trials:
            if gang is not None and pins:
                self.group_constraints.pins[gang.key] = pins
            try:
                for n_attempt, (restriction, packed) in enumerate(attempts):
                    last = n_attempt == len(attempts) - 1 and pins is trials[-1]
                    # The binder commits the members' binds together: in memory they are made at once; on
                    # a live cluster as one two-phase job (every member's claims written, then every pod
                    # bound).
                    hosts: list[str] | None = None
                    if packed is not None and restriction is not None:
                        hosts = self.planner.assign(packed, restriction)
                        if hosts == [] and not last:
                            continue  # no node per member has room for it: no placement in this domain
                    with sched.bind_group(job.label):
                        ok, failure = self._place(job, restriction, results, final and last, packed, hosts)
                    if ok:
                        status.reasons.pop(job.key, None)
                        if gang is not None:
                            self.first_attempt.pop(gang.key, None)
                        return True
            finally:
                if gang is not None:
                    self.group_constraints.pins.pop(gang.key, None)
            if gang is not None and pins:
                tried.append(self.group_constraints.describe_trial(gang, pins, failure))
        if tried and gang is not None:
            failure = self.group_constraints.explain(gang, tried, failure)
        if gang is None:
            if failure:
                status.reasons[job.key] = failure
            return False  # the cycle itself parked the pod with its plugins' reasons
        if final:
            msg = failure or f"{job.label}: no placement"
            if topo_note:
                msg = f"{msg}\n{topo_note}" if failure else topo_note
            released = self.release_held(job)
            if released:
                msg += f"\nreleased the claims its pending members held: {', '.join(released)}"
            status.park(job, msg, GANG_PLUGIN if gang is not None else QUEUE_PLUGIN, results)
        return False

    def waits_for_members(self, job: Job) -> bool:
        """A gang with fewer than minCount members, or fewer ready for scheduling than it still needs: no
        placement helps it, nor victims (KAI's reclaim and preempt consider only jobs whose pending pods
        reach minAvailable)."""
        gang = job.gang
        if gang is None or gang.min_count < 0:
            return False
        return len(self.gangs.members.get(gang.key, ())) < gang.min_count or len(job.members) < job.needed

    def _wait_for_members(self, job: Job, have: int, results: list[CycleResult], release: bool) -> None:
        """Park a gang that has fewer than its members still needed ready for scheduling (`release`: what
        its pending members hold goes back, as after a failed placement). The pods' text
        does not count the members: it would change with every member that arrives, rewriting every
        waiting member's condition and Event each time (O(n^2) writes on a live cluster); the group object
        counts them, below the verdict (a detail: no Event, and on a live cluster not rewritten at every
        arrival)."""
        gang = job.gang
        assert gang is not None
        queue = self.sched.queue
        waits = (
            f"{job.label} waits for members: fewer than minCount {gang.min_count} pods exist and are ready "
            "for scheduling"
        )
        detail = f"{have} of minCount {gang.min_count} pods exist"
        unready = sum(1 for uid in self.gangs.members.get(gang.key, ()) if uid in queue.gated)
        if unready:
            detail += f", {unready} not ready for scheduling (their ResourceClaims not created yet, or gated)"
        released = self.release_held(job) if release else []
        if released:
            detail += f"\nreleased the claims its pending members held: {', '.join(released)}"
        self.status.park(job, waits, GANG_PLUGIN, results, f"{waits}\n{detail}")

    def release_held(self, job: Job) -> list[str]:
        """Claims allocated and reserved only for pending members of a gang that cannot be placed (left by
        a binding cut short: a crash, an API error) go back, so the waiting gang holds no devices. So do
        its PodGroup's claims (KEP-5729) while no member is bound: upstream's PodGroupPostFilter
        deallocates them (in two steps: unreserve, then deallocate what a member could not use), so that
        the next attempt may find devices elsewhere."""
        if job.gang is None:
            return []
        sched = self.sched
        out: list[str] = self._release_group_claims(job)
        for m in job.members:
            held = []
            for name in pod_claim_names(m.pod):
                claim = sched.cache.claims.get((m.namespace, name))
                st = (claim or {}).get("status") or {}
                rf = reserved_for(claim or {})
                if (
                    claim is not None
                    and st.get("allocation")
                    and rf
                    and all(r.get("uid") == m.uid for r in rf)
                ):
                    held.append(claim)
            if held:
                out.extend(f"{m.namespace}/{n}" for n in sched.release_claims(m.uid, held))
        return out

    def _release_group_claims(self, job: Job) -> list[str]:
        gang = job.gang
        if (
            gang is None
            or self.dynres is None
            or not self.dynres.group_claims
            or self.gangs.bound.get(gang.key)
        ):
            return []
        sched = self.sched
        ns, _, name = gang.key.partition("/")
        pg = sched.cache.pod_groups.get((ns, name))
        if pg is None:
            return []
        uid = pg["metadata"].get("uid", "")
        held = []
        for entry in pod_group_claims(pg):
            claim_name = group_claim_name(pg, entry)
            claim = sched.cache.claims.get((ns, claim_name)) if claim_name else None
            st = (claim or {}).get("status") or {}
            if (
                claim is not None
                and st.get("allocation")
                and all(r.get("uid") == uid for r in st.get("reservedFor") or [])
            ):
                held.append(claim)
        return [f"{ns}/{n}" for n in sched.release_claims(uid, held)] if held else []

    def _time_out(self, job: Job, timeout: float, results: list[CycleResult]) -> None:
        assert job.gang is not None
        gang = job.gang
        status = self.status
        last = status.reasons.get(job.key, "no placement found")
        msg = (
            f"{job.label} is unschedulable: not placed within its scheduleTimeout ({timeout:g}s); "
            f"last reason: {last}"
        )
        status.park(job, msg, GANG_PLUGIN, results)
        status.timed_out.add(gang.key)
        for m in job.members:
            self.sched.queue.delete(m.uid)
        if gang.obj is not None:
            status.set_group_condition(gang, "False", "GangScheduleTimeout", msg)

    def _place_tightest(
        self,
        stmt: Statement,
        gk: str,
        pi: PodInfo,
        demand: dict[Any, int],
        restriction: tuple[str, str],
        host: str | None,
    ) -> CycleResult:
        """The member's cycle on the nodes of `restriction` one at a time: `host` (the planner's node for
        it) first, then the tightest fit first (the first that holds it wins); the cycle restricted to the
        domain where no node is estimated to fit."""
        try:
            order = self.planner.tightest(pi, demand, restriction)
            if host is not None:
                order = [host, *(h for h in order if h != host)]
            for h in order:
                self.topology.restrict[gk] = (LABEL_HOST, h)
                res = stmt.place(pi)
                if res.status.code == Code.WAIT:
                    return res
        finally:
            self.topology.restrict[gk] = restriction
        return stmt.place(pi)

    def _place(
        self,
        job: Job,
        restriction: tuple[str, str] | None,
        results: list[CycleResult],
        final: bool,
        packed: list[tuple[PodInfo, dict[Any, int]]] | None = None,
        hosts: list[str] | None = None,
    ) -> tuple[bool, str | None]:
        sched = self.sched
        gang = job.gang
        gk = gang.key if gang is not None else None
        if gk is not None:
            self.permit.holding.add(gk)
            if restriction is not None:
                self.topology.restrict[gk] = restriction
        stmt = Statement(sched, self.now)
        first_fail: CycleResult | None = None
        members = [pi for pi, _d in packed] if packed is not None else job.members
        needed = job.needed if gang is not None else 1
        search = None
        if gang is not None and self.options.gang_device_search:
            from kdra.scheduler.gangsearch import GangSearch

            search = GangSearch(self.options.gang_search_nodes, self.options.gang_search_steps)
        try:
            for i, pi in enumerate(members):
                if packed is not None and gk is not None and restriction is not None:
                    host = hosts[i] if hosts else None
                    res = self._place_tightest(stmt, gk, pi, packed[i][1], restriction, host)
                else:
                    res = stmt.place(pi)
                if search is not None and stmt.held and res.node is None and res.status.code != Code.WAIT:
                    res = search.retry(stmt, self.dynres, pi) or res
                if res.status.code == Code.WAIT:
                    pass
                elif res.node is not None:
                    results.append(res)  # bound directly (no gang)
                    return True, None
                else:
                    if first_fail is None:
                        first_fail = res
                    if len(stmt.held) + (len(members) - i - 1) < needed:
                        break
        finally:
            if gk is not None:
                self.permit.holding.discard(gk)
                self.topology.restrict.pop(gk, None)
        waiting = stmt.held
        where = f" in {restriction[0]}={restriction[1]}" if restriction else ""
        if gang is not None and len(waiting) >= needed:
            broken = self.group_constraints.violation(gang) if gang.device_constraints else None
            usage: Vector = {}
            for pi in waiting:
                add(usage, pod_core_usage(pi.requests))
                self.queues.add_usage(usage, sched.waiting[pi.uid].state.get("dra_allocations") or [])
            verdict = check_limits(self.queues.tree, job.queue, self.queues.allocated, usage)
            if verdict.ok and broken is None:
                results.extend(stmt.commit())
                if gang.obj is not None:
                    note = ""
                    if search is not None and search.reassigned:
                        note = f"; gang-wide device search re-assigned {search.reassigned} member(s)' devices"
                    # Every member placed so far (an elastic gang's later members join those bound before).
                    placed = len(self.gangs.bound.get(gang.key, ())) + len(
                        self.gangs.succeeded.get(gang.key, ())
                    )
                    self.status.set_group_condition(
                        gang, "True", "Scheduled", f"{max(placed, len(waiting))} members placed{where}{note}"
                    )
                return True, None
            msg = broken or f"{job.label} waits: {verdict}"
        elif gang is None:
            msg = first_fail.message if first_fail is not None else "not placed"
            if first_fail is not None:
                if final:
                    results.append(first_fail)
                if first_fail.explanation is not None:
                    msg = f"{msg}\n{first_fail.explanation}"
            return False, msg
        else:
            bound = gang.min_count - needed
            msg = (
                f"{job.label} (minCount {gang.min_count}, {bound} bound): only {len(waiting)} of the "
                f"{needed} members still needed fit at once{where}"
            )
            if first_fail is not None:
                msg += f"; member {first_fail.pod} fits nowhere: {first_fail.message}"
                if search is not None and search.tried:
                    msg += (
                        f" (gang-wide device search: {search.tried} joint allocation(s) with earlier "
                        f"members' claims, {search.steps} steps, found none)"
                    )
                if first_fail.explanation is not None:
                    msg += f"\n{first_fail.explanation}"
        st = Status(Code.UNSCHEDULABLE, (msg.split("\n", 1)[0],), GANG_PLUGIN)
        rejected = stmt.discard(st, msg)
        if final:
            results.extend(rejected)
        return False, msg
