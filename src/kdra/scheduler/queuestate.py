"""Queues as the session sees them: the Queue and Topology objects, what bound pods hold per queue, the
cluster's capacity and fair shares (KAI's proportion plugin).

`QueueObjects` follows the Queue and Topology objects (the tree, invalid queues and why, topology levels);
it needs only the store. `QueueState` works out, with the scheduler's view, what a bound pod holds (cores,
memory, devices and their capacities: kdra.scheduler.accounting keeps the totals), the cluster's capacity,
fair shares over what queues hold and what waits, and what it contributes to each session: the order of
queues, the admission check (limits, deserved quota of non-preemptible jobs), fair shares and the reclaim
verdict (KAI's strategies).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kdra.allocator.index import CelBudgetExhausted, cel_budget
from kdra.allocator.preference import SortKey
from kdra.api.pods import entry_claim_names, pod_claim_names, reserved_for
from kdra.api.types import Obj
from kdra.api.workloadapi import claims_enabled, group_claim_name, pod_group_claims, pod_group_name
from kdra.cluster.clock import parser
from kdra.cluster.store import WatchEvent
from kdra.errors import InputError
from kdra.scheduler.accounting import PodUsage, QueueAccounting
from kdra.scheduler.gang import NON_PREEMPTIBLE, GangRegistry, GangSpec, pod_queue
from kdra.scheduler.preemption import reclaim_verdict
from kdra.scheduler.queuetree import (
    QueueTree,
    Vector,
    add,
    allocation_usage,
    check_deserved,
    check_limits,
    claim_demand,
    parse_queue,
    pod_core_usage,
    queue_order_key,
)
from kdra.scheduler.topology import TopologyLevels

if TYPE_CHECKING:
    from kdra.scheduler.jobs import Job
    from kdra.scheduler.podinfo import PodInfo
    from kdra.scheduler.scheduler import Scheduler
    from kdra.scheduler.session import SessionOpening


class QueueObjects:
    """The Queue and Topology objects: the queue tree (invalid queues left out, with why), the topology
    levels, and the latest problems with the objects (bounded)."""

    def __init__(self, gpu_class: str, accounting: QueueAccounting) -> None:
        self.gpu_class = gpu_class
        self.accounting = accounting
        self.queue_objs: dict[str, Obj] = {}
        self.topology_objs: dict[str, Obj] = {}
        self.tree = QueueTree()
        self.levels = TopologyLevels()
        self.errors: list[str] = []  # the latest problems of Queue/Topology objects (bounded)
        self.invalid_queues: dict[str, str] = {}  # queue name -> why its object is not usable

    def on_event(self, ev: WatchEvent) -> None:
        if ev.kind == "Queue":
            _set_obj(self.queue_objs, ev)
            if not _same_queue(ev):
                self._rebuild_tree()
        elif ev.kind == "Topology":
            _set_obj(self.topology_objs, ev)
            try:
                self.levels = TopologyLevels.from_objects(self.topology_objs.values())
            except InputError as exc:
                self.note_error(str(exc))

    def note_error(self, msg: str) -> None:
        if msg not in self.errors:
            self.errors.append(msg)
            del self.errors[:-64]

    def _rebuild_tree(self) -> None:
        specs = []
        self.invalid_queues = {}
        for name in sorted(self.queue_objs):
            try:
                specs.append(parse_queue(self.queue_objs[name], self.gpu_class))
            except InputError as exc:
                self.invalid_queues[name] = str(exc)
                self.note_error(str(exc))
        names = {sp.name for sp in specs}
        for sp in specs:
            if sp.parent and sp.parent not in names and sp.parent not in self.invalid_queues:
                msg = f"Queue {sp.name}: spec.parentQueue: Not found: {sp.parent!r} (no Queue of that name)"
                self.invalid_queues[sp.name] = msg
                self.note_error(msg)
        # A queue under an invalid one is unusable too: its quota would be charged nowhere.
        changed = True
        while changed:
            changed = False
            for sp in specs:
                if sp.name not in self.invalid_queues and sp.parent in self.invalid_queues:
                    self.invalid_queues[sp.name] = f"Queue {sp.name}: its parent Queue {sp.parent} is invalid"
                    changed = True
        specs = [sp for sp in specs if sp.name not in self.invalid_queues]
        self.tree = QueueTree(specs)
        self.accounting.retree(self.tree)

    def job_queue(self, pod: Mapping[str, Any], gang: GangSpec | None) -> str:
        q = (gang.queue if gang is not None else None) or pod_queue(pod)
        return self.tree.leaf_or_default(q)


def _set_obj(table: dict[str, Obj], ev: WatchEvent) -> None:
    name = ev.object["metadata"].get("name", "")
    if ev.type == "DELETED":
        table.pop(name, None)
    else:
        table[name] = ev.object


def _same_queue(ev: WatchEvent) -> bool:
    """A Queue update that changes nothing parse_queue reads (its status, written by the report)."""
    old, new = ev.old, ev.object
    if ev.type != "MODIFIED" or old is None:
        return False
    om, nm = old.get("metadata") or {}, new.get("metadata") or {}
    return (
        old.get("spec") == new.get("spec")
        and old.get("apiVersion") == new.get("apiVersion")
        and om.get("creationTimestamp") == nm.get("creationTimestamp")
    )


def requested_queue(pod: Mapping[str, Any], gang: GangSpec | None) -> str | None:
    return (gang.queue if gang is not None else None) or pod_queue(pod)


class QueueState:
    """What bound pods hold (kept in `accounting`), the cluster's capacity and fair shares, with the
    scheduler's view. Bound pods count from the first session on (those bound before it are counted when
    it opens, at its time)."""

    def __init__(
        self,
        sched: Scheduler,
        objects: QueueObjects,
        accounting: QueueAccounting,
        gangs: GangRegistry,
        capacity_dims: Sequence[str],
        reclaim_strategies: Sequence[str],
    ) -> None:
        self.sched = sched
        self.objects = objects
        self.accounting = accounting
        self.gangs = gangs
        self.capacity_dims = capacity_dims
        self.reclaim_strategies = reclaim_strategies
        self.now = 0.0
        self.opened = False
        self._capacity: tuple[Any, Vector] | None = None
        # The session has pods to place other than those cut short by their CEL budget (set by allocate).
        self.pods_waiting = False
        self._dev_caps: tuple[Any, dict[tuple[str, str, str], dict[str, float]]] | None = None
        self._estimates: dict[str, tuple[Any, str, Vector]] = {}
        # A PodGroup's claim (KEP-5729, reserved for the group, not a pod) counts for the first member
        # accounted while it is allocated, as a shared claim counts for its first consumer: claim uid -> pod.
        self._group_claim_counted_for: dict[str, str] = {}
        sched.bind_listeners.append(self._on_bound)
        sched.unbind_listeners.append(self._on_unbound)

    @property
    def tree(self) -> QueueTree:
        return self.objects.tree

    @property
    def allocated(self) -> dict[str, Vector]:
        return self.accounting.allocated

    # -- the session ---------------------------------------------------------------------------------
    def open_session(self, opening: SessionOpening) -> None:
        self.now = opening.now
        if not self.opened:
            self.opened = True
            sched = self.sched
            for uid, node in list(sched.cache.assigned.items()):
                ni = sched.cache.node_by_name.get(node)
                pi = ni.pods.get(uid) if ni is not None else None
                if pi is None or uid in self.accounting:
                    continue
                pod = sched.store.try_get("Pod", pi.name, pi.namespace) or pi.pod
                if pod["metadata"].get("deletionTimestamp"):
                    continue  # terminating: no longer its queue's (as on_pod has it)
                self.account(pod, self._bound_at(pod))
        opening.fair_shares = self.fair_shares
        opening.queue_order = self.queue_order
        opening.admit = self.admit
        opening.reclaimable = self.reclaimable

    def queue_order(self, queue: str, fair: Mapping[str, Vector], first: Job) -> SortKey:
        """KAI's queue order: the next job comes from the queue with the smallest key."""
        return queue_order_key(
            self.tree, queue, self.allocated.get(queue, {}), fair.get(queue, {}), first.need
        )

    def admit(self, job: Job, fair: Mapping[str, Vector]) -> str | None:
        """Queue checks before placing: limit (queue and parents), deserved quota for non-preemptible."""
        asked = requested_queue(job.members[0].pod, job.gang) if job.members else None
        if asked is not None and asked in self.objects.invalid_queues:
            return f"{job.label} waits: its queue is invalid: {self.objects.invalid_queues[asked]}"
        verdict = check_limits(self.tree, job.queue, self.allocated, job.need)
        if not verdict.ok:
            return f"{job.label} waits: {verdict}"
        if not job.preemptible:
            v2 = check_deserved(self.tree, job.queue, self.allocated, job.need)
            if not v2.ok:
                return f"{job.label} waits: {NON_PREEMPTIBLE} jobs only use deserved quota: {v2}"
        return None

    def reclaimable(
        self, fair: Mapping[str, Vector], reclaimer: str, need: Vector, victim_queue: str, take: Vector
    ) -> tuple[bool, list[str]]:
        """May `victim_queue` lose `take` so that `reclaimer` gets `need` (KAI's strategies)? And if not,
        why, per strategy."""
        return reclaim_verdict(
            self.tree, fair, self.allocated, reclaimer, need, victim_queue, take, self.reclaim_strategies
        )

    # -- accounting ------------------------------------------------------------------------------------
    def on_pod(self, ev: WatchEvent) -> None:
        pod = ev.object
        uid = pod["metadata"].get("uid", "")
        phase = (pod.get("status") or {}).get("phase")
        if ev.type == "DELETED" or phase in ("Succeeded", "Failed"):
            self.accounting.unaccount(uid)
            self._estimates.pop(uid, None)
        elif pod["metadata"].get("deletionTimestamp"):
            self.accounting.unaccount(uid)  # terminating (evicted, deleted): no longer its queue's
        elif (pod.get("spec") or {}).get("nodeName") and uid not in self.accounting and self.opened:
            self.account(pod, self._bound_at(pod))  # bound before (a restart) or by another scheduler

    def _on_bound(self, pi: PodInfo, node: str) -> None:
        """The scheduler decided to bind `pi`: it counts for its queue and gang from now on, before the
        bind is confirmed (a live cluster confirms it later, through the watch)."""
        gk = self.gangs.gang_of(pi.uid)
        if gk is not None:
            self.gangs.bound.setdefault(gk, set()).add(pi.uid)
        if pi.uid not in self.accounting:
            self.account(pi.pod)

    def _on_unbound(self, uid: str) -> None:
        """A decided bind did not happen (the API refused it): the pod is pending again."""
        self.accounting.unaccount(uid)
        gk = self.gangs.gang_of(uid)
        if gk is not None:
            self.gangs.bound.get(gk, set()).discard(uid)

    def device_capacity(self, key: tuple[str, str, str]) -> dict[str, float]:
        index = self.sched.dra.index
        if self._dev_caps is None or self._dev_caps[0] is not index:
            caps: dict[tuple[str, str, str], dict[str, float]] = {}
            for s in index.slices:
                for d in s.devices:
                    caps[d.key] = {n: float(c.value.value()) for n, c in d.capacity.items()}
            self._dev_caps = (index, caps)
        return self._dev_caps[1].get(key, {})

    def pod_usage(self, pod: Mapping[str, Any]) -> Vector:
        """What a pod holds, in queue resources (its cpu and memory, its allocated claims' devices)."""
        from kdra.scheduler.podinfo import PodInfo

        return self._pod_usage(pod, PodInfo(pod).requests)

    def _pod_usage(self, pod: Mapping[str, Any], requests: Mapping[str, int]) -> Vector:
        out = pod_core_usage(requests)
        ns = pod["metadata"].get("namespace") or "default"
        uid = pod["metadata"].get("uid", "")
        dra = self.sched.dra
        group = self._group_claim_names(pod, ns)
        for name in pod_claim_names(pod):
            claim = self.sched.cache.claims.get((ns, name))
            if not claim:
                continue
            cuid = claim["metadata"].get("uid", "")
            alloc = (claim.get("status") or {}).get("allocation")
            if not alloc:  # decided, not written yet (asynchronous binding)
                alloc = ((dra.assumed.get(cuid) or {}).get("status") or {}).get("allocation")
            if not alloc:
                continue
            if name in group:
                # Its PodGroup's claim counts for the first member accounted while it is allocated.
                counted = self._group_claim_counted_for.get(cuid)
                if counted not in (None, uid) and counted in self.accounting:
                    continue
                self._group_claim_counted_for[cuid] = uid
            else:
                rf = reserved_for(claim)
                first = rf[0].get("uid") if rf else dra.assumed_by.get(cuid, uid)
                if first != uid:
                    continue  # a shared claim counts for its first consumer (in flight: the pod deciding it)
            add(out, allocation_usage(claim, alloc, self.device_capacity, self.capacity_dims))
        return out

    def _group_claim_names(self, pod: Mapping[str, Any], ns: str) -> set[str]:
        """The claims of the pod's scheduling.k8s.io PodGroup (KEP-5729), when the gate is on."""
        group = pod_group_name(pod)
        pg = self.sched.cache.pod_groups.get((ns, group)) if group else None
        if pg is None or not claims_enabled(self.sched.dra.features):
            return set()
        return {n for n in (group_claim_name(pg, c) for c in pod_group_claims(pg)) if n}

    def add_usage(self, into: Vector, claims: Sequence[tuple[Obj, Obj]]) -> None:
        """Add what allocations (claim, allocation) hold, in queue resources, to `into`."""
        for claim, alloc in claims:
            add(into, allocation_usage(claim, alloc, self.device_capacity, self.capacity_dims))

    def _bound_at(self, pod: Mapping[str, Any]) -> float:
        """When a pod the scheduler did not just bind was bound, from its PodScheduled condition (else its
        start): victims are chosen newest first, across a restart too."""
        st = pod.get("status") or {}
        when = next(
            (
                c.get("lastTransitionTime")
                for c in st.get("conditions") or []
                if c.get("type") == "PodScheduled" and c.get("status") == "True"
            ),
            None,
        ) or st.get("startTime")
        if when:
            try:
                return min(self.now, parser(self.sched.clock)(str(when)))
            except ValueError:
                pass
        return self.now

    def account(self, pod: Mapping[str, Any], start: float | None = None) -> None:
        from kdra.scheduler.podinfo import PodInfo

        uid = pod["metadata"].get("uid", "")
        gk = self.gangs.gang_of(uid)
        gang = self.gangs.spec(gk) if gk else None
        queue = self.objects.job_queue(pod, gang)
        pi = PodInfo(pod)
        prio = gang.priority if gang is not None and gang.priority is not None else pi.priority
        pre = not (gang is not None and gang.preemptible is False)
        u = PodUsage(
            queue,
            self._pod_usage(pod, pi.requests),
            self.now if start is None else start,
            gk or f"pod:{pi.key}",
            prio,
            pre,
            pi.key,
        )
        self.accounting.account(uid, u)

    # -- capacity and fair share -----------------------------------------------------------------------
    def capacity(self) -> Vector:
        """Cluster totals per resource: cpu and memory of nodes, devices and capacities per DeviceClass."""
        sched = self.sched
        index = sched.dra.index
        key = (index, len(sched.cache.nodes), sched.cache.node_updates)
        # An incomplete answer (a class cut short by its CEL budget) holds for the rest of this session.
        if self._capacity is not None and self._capacity[0] in (key, (key, self.now)):
            return self._capacity[1]
        out: Vector = {}
        for ni in sched.cache.nodes:
            if ni.unschedulable and not ni.allocatable:
                continue
            out["cpu"] = out.get("cpu", 0.0) + ni.allocatable.get("cpu", 0) / 1000.0
            out["memory"] = out.get("memory", 0.0) + float(ni.allocatable.get("memory", 0))
        complete = True
        for cls in sorted(index.classes):
            # A class's selectors over every device in the cluster: bounded CEL work like a scheduling
            # attempt, charged to the session's budget (an expensive class would stall every job
            # otherwise). A class cut short counts no devices for now; its results stay memoised, so the
            # next session goes on where this one stopped. Once its selectors proved expensive, it goes on
            # only in sessions where no other pod waits: counting devices for the queues' shares must not
            # delay pods (upstream does no such work).
            if self.pods_waiting and sched.cel_limit() is not None and index.class_pending_expensive(cls):
                complete = False
                continue
            try:
                with cel_budget(sched.cel_limit()) as budget:
                    try:
                        devices = index.devices_of_class(cls)
                    finally:
                        if budget is not None:
                            sched.cel_run_spent += budget.spent
            except CelBudgetExhausted:
                complete = False
                continue
            for d in devices:
                out[f"deviceclass/{cls}"] = out.get(f"deviceclass/{cls}", 0.0) + 1
                for dim in self.capacity_dims:
                    c = d.capacity.get(dim)
                    if c is not None:
                        k = f"{dim}.deviceclass/{cls}"
                        out[k] = out.get(k, 0.0) + float(c.value.value())
        self._capacity = (key if complete else (key, self.now), out)
        return out

    def estimate(self, pi: PodInfo) -> Vector:
        """What a pending pod would hold: its cores and memory, its claims' demand (whole devices at the
        class's mean device capacity)."""
        out = pod_core_usage(pi.requests)
        for name in entry_claim_names(pi.pod):
            claim = self.sched.cache.claims.get((pi.namespace, name))
            if claim is not None and not (claim.get("status") or {}).get("allocation"):
                add(out, claim_demand(claim, self.capacity_dims))
        # Whole devices hold their whole capacity: estimate it by the class's mean device capacity.
        cap = self.capacity()
        for r, n in list(out.items()):
            if not r.startswith("deviceclass/") or not cap.get(r):
                continue
            for dim in self.capacity_dims:
                k = f"{dim}.{r}"
                if k not in out and cap.get(k):
                    out[k] = n * cap[k] / cap[r]
        return out

    def fair_shares(self, jobs: Sequence[Job] = ()) -> dict[str, Vector]:
        """Fair shares over what queues hold plus every pending pod's estimate (not only this session's)."""
        sched = self.sched
        requested = self.accounting.requested()
        seen: set[str] = set()
        for j in jobs:
            add(requested.setdefault(j.queue, {}), j.need)
            seen.update(m.uid for m in j.members)
        for uid, pi in sched.queue.pods.items():
            if uid in seen or uid in self.accounting:
                continue
            est = self._estimates.get(uid)
            if est is None or est[0] is not pi:
                gk = self.gangs.gang_of(uid)
                est = self._estimates[uid] = (
                    pi,
                    self.objects.job_queue(pi.pod, self.gangs.spec(gk) if gk else None),
                    self.estimate(pi),
                )
            add(requested.setdefault(est[1], {}), est[2])
        if len(self._estimates) > 4 * len(sched.queue.pods) + 1024:
            self._estimates = {u: e for u, e in self._estimates.items() if u in sched.queue.pods}
        return self.tree.fair_share(self.capacity(), requested)

    def queue_report(self, failed: Sequence[Job]) -> list[dict[str, Any]]:
        """Per queue: allocated, deserved (quota), fair share and limit, for reports and explanations."""
        fair = self.fair_shares(failed)
        out = []
        for name in sorted(self.tree.specs):
            spec = self.tree.specs[name]
            out.append(
                {
                    "queue": name,
                    "parent": spec.parent,
                    "allocated": dict(sorted(self.allocated.get(name, {}).items())),
                    "fairShare": dict(sorted(fair.get(name, {}).items())),
                    "quota": dict(sorted(spec.quota.items())),
                    "limit": dict(sorted(spec.limit.items())),
                }
            )
        return out
