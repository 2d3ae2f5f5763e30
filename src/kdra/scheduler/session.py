"""A KAI-style scheduling session for gangs and queues: actions allocate, reclaim and preempt.

`GangQueues(store, options)` holds what the actions share (gangs, queues, topology, queue usage) and gives
the scheduler its plugins and actions:

    gq = GangQueues(store, GangQueueOptions(placement="fragmentation"))
    sched = Scheduler(store, gq.config(SchedulerConfig()))

Each session drains the scheduling queue and groups the pods into jobs: a gang (all its pending members,
wherever they wait in the queue) or a single pod. Jobs are taken queue by queue in KAI's queue order (under
fair share first, then under deserved quota, priority, dominant resource share); inside a queue by priority,
then age. A job is placed all or nothing: every member goes through the normal cycle (PreFilter .. Reserve)
and waits at Permit; when min-count members hold reservations at once, all of them bind, else every
reservation is released and the members are parked with the gang's explanation. Then `reclaim` (jobs of
queues below their fair share take resources from queues above theirs, under KAI's strategies) and
`preempt` (a higher-priority job takes from lower-priority jobs of its own queue) retry the jobs that did
not fit, evicting victims only when a trial with the victims virtually removed places the job.

Every decision that leaves a job pending says why on the pods' PodScheduled condition (what `kdra simulate`
prints) and in `GangQueues.reasons`: the member that fits nowhere and the allocator's explanation, the
topology level that is too full, the queue limit or deserved quota it would exceed, which reclaim strategy
blocked which victim.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kdra.allocator.index import CelBudgetExhausted, cel_budget
from kdra.cluster.store import Obj, Store, WatchEvent
from kdra.errors import InputError
from kdra.scheduler.accounting import PodUsage, QueueAccounting
from kdra.scheduler.claimcontroller import pod_claim_names
from kdra.scheduler.framework import (
    EV_POD_DELETE,
    SUCCESS,
    Code,
    CycleState,
    PermitPlugin,
    Plugin,
    Status,
)
from kdra.scheduler.gang import (
    NON_PREEMPTIBLE,
    GangRegistry,
    GangSpec,
    group_condition_type,
    is_upstream,
    pod_queue,
)
from kdra.scheduler.groupconstraints import GroupConstraints
from kdra.scheduler.preemption import (
    STRATEGIES,
    RunningJob,
    VirtualEviction,
    covers,
    frees_any,
    order_victims,
    reclaim_verdict,
)
from kdra.scheduler.queues import (
    EPS,
    QueueTree,
    Vector,
    add,
    allocation_usage,
    check_deserved,
    check_limits,
    claim_demand,
    dominant_share,
    fmt,
    parse_queue,
    pod_core_usage,
    queue_order_key,
)
from kdra.scheduler.seams import (
    EvictionOutcome,
    Evictor,
    StatusWriter,
    StoreEvictor,
    StoreStatusWriter,
    set_condition,
)
from kdra.scheduler.topology import DomainRoom, GangTopology, TopologyLevels, domains

if TYPE_CHECKING:
    from kdra.scheduler.podinfo import PodInfo
    from kdra.scheduler.scheduler import CycleResult, Scheduler, SchedulerConfig, Session

GANG_PLUGIN = "Gang"
QUEUE_PLUGIN = "Queue"


@dataclass
class GangQueueOptions:
    placement: str = "upstream"  # a name of kdra.scheduler.fragmentation.PLACEMENT_POLICIES
    fragmentation_shapes: Mapping[float, float] | None = None  # FGD target workload (None: pods seen)
    device_locality: bool = False  # prefer nodes where a pod's devices share a PCIe root / NUMA node
    gang_timeout: float | None = None  # default scheduleTimeout for gangs that do not set one
    reclaim: bool = True
    preempt: bool = True
    reclaim_strategies: Sequence[str] = STRATEGIES
    gpu_class: str = "gpu.nvidia.com"  # what a KAI Queue's `gpu` counts
    capacity_dims: Sequence[str] = ("memory",)  # device capacities counted as <dim>.deviceclass/<class>
    max_domain_trials: int = 6
    max_victim_trials: int = 4
    max_victim_searches: int = 64  # jobs per session that reclaim (and, apart, preempt) look for victims for
    # Gang-wide device search (kdra.scheduler.gangsearch): re-assign earlier members' devices when a later
    # member fits nowhere; bounded per gang placement by nodes per member and allocator steps. Opt-in.
    gang_device_search: bool = False
    # The allocator's device preference (kdra.scheduler.devicepref) when the SchedulerConfig has none.
    device_preference: str | None = None
    gang_search_nodes: int = 8
    gang_search_steps: int = 200_000
    # A gang running below its minimum (a member failed to bind, or was deleted, and the rest cannot be
    # placed) is evicted whole after this many seconds (KAI's stale-gang eviction), so it never holds
    # devices half-running; its owner recreates the pods and the gang is placed again all or nothing.
    stale_gang_grace: float = 60.0
    status_interval: float = 5.0  # seconds between Queue status writes (each written only when changed)


def options_from_shard(obj: Mapping[str, Any], base: GangQueueOptions | None = None) -> GangQueueOptions:
    """A SchedulingShard (KAI's kai.scheduler/v1 shape; kdra.dev/v1alpha1 adds fields) as options:
    `placementStrategy.gpu` (binpack | spread | fragmentation | kdra | upstream), and kdra's `gangTimeout`,
    `staleGangGrace`, `reclaim`, `preempt`, `reclaimStrategies`, `fragmentationShapes` ({"1": 3, "8": 1}:
    GPUs -> how often), `gangDeviceSearch` (true: kdra.scheduler.gangsearch) and `devicePreference`
    (fragmentation | binpack | spread | topology: kdra.scheduler.devicepref)."""
    from kdra.scheduler.fragmentation import PLACEMENT_POLICIES
    from kdra.scheduler.gang import parse_duration
    from kdra.scheduler.preemption import STRATEGIES

    opts = dataclasses.replace(base or GangQueueOptions())
    name = (obj.get("metadata") or {}).get("name", "")
    where = f"SchedulingShard {name}: spec"
    spec = obj.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise InputError(f"{where}: Invalid value: must be an object")
    gpu = (spec.get("placementStrategy") or {}).get("gpu")
    if gpu is not None:
        if gpu not in PLACEMENT_POLICIES:
            raise InputError(
                f"{where}.placementStrategy.gpu: Unsupported value: {gpu!r}: supported values: "
                + ", ".join(f'"{p}"' for p in PLACEMENT_POLICIES)
            )
        opts.placement = gpu
    if spec.get("gangTimeout") is not None:
        opts.gang_timeout = parse_duration(spec["gangTimeout"], f"{where}.gangTimeout")
    if spec.get("staleGangGrace") is not None:
        opts.stale_gang_grace = parse_duration(spec["staleGangGrace"], f"{where}.staleGangGrace")
    for key, attr in (
        ("reclaim", "reclaim"),
        ("preempt", "preempt"),
        ("deviceLocality", "device_locality"),
        ("gangDeviceSearch", "gang_device_search"),
    ):
        if spec.get(key) is not None:
            if not isinstance(spec[key], bool):
                raise InputError(f"{where}.{key}: Invalid value: {spec[key]!r}: must be true or false")
            setattr(opts, attr, spec[key])
    if spec.get("reclaimStrategies") is not None:
        bad = [x for x in spec["reclaimStrategies"] if x not in STRATEGIES]
        if bad:
            raise InputError(
                f"{where}.reclaimStrategies: Unsupported value: {bad[0]!r}: supported values: "
                + ", ".join(f'"{x}"' for x in STRATEGIES)
            )
        opts.reclaim_strategies = tuple(spec["reclaimStrategies"])
    pref = spec.get("devicePreference")
    if pref is not None:
        from kdra.scheduler.devicepref import DEVICE_PREFERENCES

        if pref not in DEVICE_PREFERENCES:
            raise InputError(
                f"{where}.devicePreference: Unsupported value: {pref!r}: supported values: "
                + ", ".join(f'"{p}"' for p in DEVICE_PREFERENCES)
            )
        opts.device_preference = pref
    shapes = spec.get("fragmentationShapes")
    if shapes is not None:
        try:
            opts.fragmentation_shapes = {float(k): float(v) for k, v in dict(shapes).items()}
        except (TypeError, ValueError):
            raise InputError(
                f"{where}.fragmentationShapes: Invalid value: {shapes!r}: GPUs per pod -> popularity"
            ) from None
    return opts


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


class GangPermit(PermitPlugin):
    """Holds members of the gang being placed at Permit until the action allows or rejects them."""

    name = GANG_PLUGIN

    def __init__(self, gang_of: Any) -> None:
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
    events = frozenset({EV_POD_DELETE})


class GangQueues:
    """The session's state and actions. `evictor` and `status` are the seams to the world (in memory by
    default; `kdra.kube.session` has the Kubernetes ones); the clock is the scheduler's."""

    def __init__(
        self,
        store: Store,
        options: GangQueueOptions | None = None,
        *,
        evictor: Evictor | None = None,
        status: StatusWriter | None = None,
    ) -> None:
        from kdra.scheduler.fragmentation import placement_plugins

        self.store = store
        self.evictor: Evictor = evictor or StoreEvictor(store)
        self.status: StatusWriter = status or StoreStatusWriter(store)
        self.options = options or GangQueueOptions()
        shards = store.list("SchedulingShard")
        if shards:  # read once, at start (the first by namespace/name)
            self.options = options_from_shard(shards[0], self.options)
        self.gangs = GangRegistry(store)
        self.topology_plugin = GangTopology(self.gangs.gang_of)
        self.group_constraints = GroupConstraints(self)  # PodGroup deviceConstraints across members
        self.permit = GangPermit(self.gangs.gang_of)
        self.queue_gate = QueueGate()
        self.scorers = placement_plugins(self.options.placement, self.options.fragmentation_shapes)
        if self.options.device_locality:
            from kdra.scheduler.fragmentation import DeviceLocality

            self.scorers.append(DeviceLocality())
        self.queue_objs: dict[str, Obj] = {}
        self.topology_objs: dict[str, Obj] = {}
        self.tree = QueueTree()
        self.levels = TopologyLevels()
        self.errors: list[str] = []  # the latest problems of Queue/Topology objects (bounded)
        self.invalid_queues: dict[str, str] = {}  # queue name -> why its object is not usable
        self._reported: dict[tuple[str, str], str] = {}  # (kind, name) -> problem last reported on the object
        self.stale_since: dict[str, float] = {}  # gang key -> when it was first seen running below minimum
        self._queue_status: dict[str, Any] = {}  # queue -> status last written
        self._queue_status_at = -1e18
        self.format_time: Any = None
        self.accounting = QueueAccounting(self.tree)  # what bound pods hold, per queue
        self.first_attempt: dict[str, float] = {}
        self.timed_out: set[str] = set()
        self.reasons: dict[str, str] = {}  # job key -> why it waits (latest)
        self.evicted: list[str] = []  # ns/name of evicted pods, in order
        self.sched: Scheduler | None = None
        self.now = 0.0
        self._capacity: tuple[Any, Vector] | None = None
        self._dev_caps: tuple[Any, dict[tuple[str, str, str], dict[str, float]]] | None = None
        self.failed: list[Job] = []
        self._estimates: dict[str, tuple[Any, str, Vector]] = {}
        self._fits_memo: dict[Any, dict[int, tuple[int, int]]] = {}
        self._domains: dict[Any, dict[str, list[Any]]] = {}
        self.rooms: DomainRoom = DomainRoom(None)
        self.dynres: Any = None
        store.watch(self._on_event, kinds=("Queue", "Topology", "Pod", "ResourceClaim"))
        for kind in ("Queue", "Topology"):
            for obj in store.list(kind):
                self._on_event(WatchEvent("ADDED", kind, obj, None))

    # -- wiring ----------------------------------------------------------------------------------

    def plugins(self) -> list[Plugin]:
        return [self.topology_plugin, self.permit, self.queue_gate, *self.scorers]

    def actions(self) -> list[Any]:
        acts: list[Any] = [AllocateJobs(self)]
        if self.options.reclaim:
            acts.append(Reclaim(self))
        if self.options.preempt:
            acts.append(Preempt(self))
        acts.append(Report(self))
        return acts

    def config(self, base: SchedulerConfig | None = None) -> SchedulerConfig:
        from kdra.scheduler.fragmentation import placement_preference
        from kdra.scheduler.scheduler import SchedulerConfig

        base = base or SchedulerConfig()
        return dataclasses.replace(
            base,
            extra_plugins=[*base.extra_plugins, *self.plugins()],
            actions=self.actions(),
            # A SchedulingShard's devicePreference wins over the flag (as its other fields do); without
            # either, a placement policy that chooses GPUs too (placement kdra) brings its own.
            device_preference=self.options.device_preference
            or base.device_preference
            or placement_preference(self.scorers),
        )

    def attach(self, sched: Scheduler, now: float) -> None:
        from kdra.scheduler.plugins.dynamicresources import DynamicResources

        self.now = now
        if isinstance(self.evictor, StoreEvictor):
            self.evictor.now = now
        if self.sched is sched:
            return
        self.sched = sched
        self.rooms = DomainRoom(sched.cache)
        self.format_time = sched.format_time
        if isinstance(self.evictor, StoreEvictor):
            self.evictor.format_time = sched.format_time
        sched.bind_listeners.append(self._on_bound)
        sched.unbind_listeners.append(self._on_unbound)
        dynres = next((p for p in sched.profile.plugins if isinstance(p, DynamicResources)), None)
        for s in self.scorers:
            s.dynres = dynres  # type: ignore[attr-defined]
        self.dynres = dynres
        if dynres is not None:
            dynres.claim_rewriter = self.group_constraints.rewrite
        for uid, node in list(sched.cache.assigned.items()):
            ni = sched.cache.node_by_name.get(node)
            pi = ni.pods.get(uid) if ni is not None else None
            if pi is not None and uid not in self.usage:
                self._account(pi.pod)

    # -- events ----------------------------------------------------------------------------------

    def _on_event(self, ev: WatchEvent) -> None:
        if ev.kind == "Queue":
            self._set_obj(self.queue_objs, ev)
            if not _same_queue(ev):
                self._rebuild_tree()
        elif ev.kind == "Topology":
            self._set_obj(self.topology_objs, ev)
            try:
                self.levels = TopologyLevels.from_objects(self.topology_objs.values())
            except InputError as exc:
                self._note_error(str(exc))
        elif ev.kind == "Pod":
            pod = ev.object
            uid = pod["metadata"].get("uid", "")
            phase = (pod.get("status") or {}).get("phase")
            if ev.type == "DELETED" or phase in ("Succeeded", "Failed"):
                self._unaccount(uid)
                self.reasons.pop(f"pod:{uid}", None)
                self._estimates.pop(uid, None)
            elif pod["metadata"].get("deletionTimestamp"):
                self._unaccount(uid)  # terminating (evicted, deleted): no longer its queue's
            elif (pod.get("spec") or {}).get("nodeName") and uid not in self.usage and self.sched is not None:
                self._account(pod)

    def _on_bound(self, pi: PodInfo, node: str) -> None:
        """The scheduler decided to bind `pi`: it counts for its queue and gang from now on, before the
        bind is confirmed (a live cluster confirms it later, through the watch)."""
        gk = self.gangs.gang_of(pi.uid)
        if gk is not None:
            self.gangs.bound.setdefault(gk, set()).add(pi.uid)
        if pi.uid not in self.usage:
            self._account(pi.pod)

    def _on_unbound(self, uid: str) -> None:
        """A decided bind did not happen (the API refused it): the pod is pending again."""
        self._unaccount(uid)
        gk = self.gangs.gang_of(uid)
        if gk is not None:
            self.gangs.bound.get(gk, set()).discard(uid)

    def _note_error(self, msg: str) -> None:
        if msg not in self.errors:
            self.errors.append(msg)
            del self.errors[:-64]

    @staticmethod
    def _set_obj(table: dict[str, Obj], ev: WatchEvent) -> None:
        name = ev.object["metadata"].get("name", "")
        if ev.type == "DELETED":
            table.pop(name, None)
        else:
            table[name] = ev.object

    def _rebuild_tree(self) -> None:
        specs = []
        self.invalid_queues = {}
        for name in sorted(self.queue_objs):
            try:
                specs.append(parse_queue(self.queue_objs[name], self.options.gpu_class))
            except InputError as exc:
                self.invalid_queues[name] = str(exc)
                self._note_error(str(exc))
        names = {sp.name for sp in specs}
        for sp in specs:
            if sp.parent and sp.parent not in names and sp.parent not in self.invalid_queues:
                msg = f"Queue {sp.name}: spec.parentQueue: Not found: {sp.parent!r} (no Queue of that name)"
                self.invalid_queues[sp.name] = msg
                self._note_error(msg)
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

    # -- accounting ------------------------------------------------------------------------------

    @property
    def usage(self) -> dict[str, PodUsage]:
        """Bound pod uid -> what it holds."""
        return self.accounting.usage

    @property
    def allocated(self) -> dict[str, Vector]:
        """Queue (leaves and parents) -> what its bound pods hold."""
        return self.accounting.allocated

    def job_queue(self, pod: Mapping[str, Any], gang: GangSpec | None) -> str:
        q = (gang.queue if gang is not None else None) or pod_queue(pod)
        return self.tree.leaf_or_default(q)

    def requested_queue(self, pod: Mapping[str, Any], gang: GangSpec | None) -> str | None:
        return (gang.queue if gang is not None else None) or pod_queue(pod)

    def device_capacity(self, key: tuple[str, str, str]) -> dict[str, float]:
        assert self.sched is not None
        index = self.sched.dra.index
        if self._dev_caps is None or self._dev_caps[0] is not index:
            caps: dict[tuple[str, str, str], dict[str, float]] = {}
            for s in index.slices:
                for d in s.devices:
                    caps[d.key] = {n: float(c.value.value()) for n, c in d.capacity.items()}
            self._dev_caps = (index, caps)
        return self._dev_caps[1].get(key, {})

    def _pod_usage(self, pod: Mapping[str, Any], requests: Mapping[str, int]) -> Vector:
        assert self.sched is not None
        out = pod_core_usage(requests)
        ns = pod["metadata"].get("namespace") or "default"
        names = pod_claim_names(pod)
        assumed = self.sched.dra.assumed
        for name in names:
            claim = self.sched.cache.claims.get((ns, name))
            alloc = ((claim or {}).get("status") or {}).get("allocation")
            if claim and not alloc:  # decided, not written yet (asynchronous binding)
                pseudo = assumed.get(claim["metadata"].get("uid", ""))
                alloc = ((pseudo or {}).get("status") or {}).get("allocation")
            if not claim or not alloc:
                continue
            rf = (claim.get("status") or {}).get("reservedFor") or []
            if rf and rf[0].get("uid") != pod["metadata"].get("uid"):
                continue  # a shared claim counts for its first consumer
            add(out, allocation_usage(claim, alloc, self.device_capacity, self.options.capacity_dims))
        return out

    def _account(self, pod: Mapping[str, Any]) -> None:
        from kdra.scheduler.podinfo import PodInfo

        uid = pod["metadata"].get("uid", "")
        gk = self.gangs.gang_of(uid)
        gang = self.gangs.spec(gk) if gk else None
        queue = self.job_queue(pod, gang)
        pi = PodInfo(pod)
        prio = gang.priority if gang is not None and gang.priority is not None else pi.priority
        pre = not (gang is not None and gang.preemptible is False)
        u = PodUsage(
            queue, self._pod_usage(pod, pi.requests), self.now, gk or f"pod:{pi.key}", prio, pre, pi.key
        )
        self.accounting.account(uid, u)

    def _unaccount(self, uid: str) -> None:
        self.accounting.unaccount(uid)

    def capacity(self) -> Vector:
        """Cluster totals per resource: cpu and memory of nodes, devices and capacities per DeviceClass."""
        assert self.sched is not None
        index = self.sched.dra.index
        key = (index, len(self.sched.cache.nodes), self.sched.cache.node_updates)
        # An incomplete answer (a class cut short by its CEL budget) holds for the rest of this session.
        if self._capacity is not None and self._capacity[0] in (key, (key, self.now)):
            return self._capacity[1]
        out: Vector = {}
        for ni in self.sched.cache.nodes:
            if ni.unschedulable and not ni.allocatable:
                continue
            out["cpu"] = out.get("cpu", 0.0) + ni.allocatable.get("cpu", 0) / 1000.0
            out["memory"] = out.get("memory", 0.0) + float(ni.allocatable.get("memory", 0))
        complete = True
        sched = self.sched
        for cls in sorted(index.classes):
            # A class's selectors over every device in the cluster: bounded CEL work like a scheduling
            # attempt, charged to the session's budget (an expensive class would stall every job
            # otherwise). A class cut short counts no devices for now; its results stay memoised, so the
            # next session goes on where this one stopped.
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
                for dim in self.options.capacity_dims:
                    c = d.capacity.get(dim)
                    if c is not None:
                        k = f"{dim}.deviceclass/{cls}"
                        out[k] = out.get(k, 0.0) + float(c.value.value())
        self._capacity = (key if complete else (key, self.now), out)
        return out

    def fair_shares(self, jobs: Sequence[Job] = ()) -> dict[str, Vector]:
        """Fair shares over what queues hold plus every pending pod's estimate (not only this session's)."""
        assert self.sched is not None
        requested = self.accounting.requested()
        seen: set[str] = set()
        for j in jobs:
            add(requested.setdefault(j.queue, {}), j.need)
            seen.update(m.uid for m in j.members)
        for uid, pi in self.sched.queue.pods.items():
            if uid in seen or uid in self.usage:
                continue
            est = self._estimates.get(uid)
            if est is None or est[0] is not pi:
                gk = self.gangs.gang_of(uid)
                est = self._estimates[uid] = (
                    pi,
                    self.job_queue(pi.pod, self.gangs.spec(gk) if gk else None),
                    self._estimate(pi),
                )
            add(requested.setdefault(est[1], {}), est[2])
        if len(self._estimates) > 4 * len(self.sched.queue.pods) + 1024:
            self._estimates = {u: e for u, e in self._estimates.items() if u in self.sched.queue.pods}
        return self.tree.fair_share(self.capacity(), requested)

    def queue_report(self) -> list[dict[str, Any]]:
        """Per queue: allocated, deserved (quota), fair share and limit, for reports and explanations."""
        fair = self.fair_shares(self.failed)
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

    # -- jobs ------------------------------------------------------------------------------------

    def _estimate(self, pi: PodInfo) -> Vector:
        assert self.sched is not None
        from kdra.scheduler.plugins.dynamicresources import pod_claim_name

        out = pod_core_usage(pi.requests)
        for entry in pi.claim_refs:
            name, _ = pod_claim_name(pi.pod, entry)
            claim = self.sched.cache.claims.get((pi.namespace, name)) if name else None
            if claim is not None and not (claim.get("status") or {}).get("allocation"):
                add(out, claim_demand(claim, self.options.capacity_dims))
        # Whole devices hold their whole capacity: estimate it by the class's mean device capacity.
        cap = self.capacity()
        for r, n in list(out.items()):
            if not r.startswith("deviceclass/") or not cap.get(r):
                continue
            for dim in self.options.capacity_dims:
                k = f"{dim}.{r}"
                if k not in out and cap.get(k):
                    out[k] = n * cap[k] / cap[r]
        return out

    def build_jobs(self, popped: Sequence[PodInfo]) -> list[Job]:
        assert self.sched is not None
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
                key, gang, members, self.job_queue(pi.pod, gang), prio, min(m.queued_at for m in members), pre
            )
            if gang is not None:
                bound = len(self.gangs.bound.get(gang.key, ()))
                job.needed = max(0, gang.min_count - bound)
            for m in members[: max(1, job.needed)]:
                add(job.need, self._estimate(m))
            jobs[key] = job
        return list(jobs.values())

    # -- placing a job ---------------------------------------------------------------------------

    def park(
        self,
        job: Job,
        message: str,
        plugin: str,
        results: list[CycleResult],
        group_message: str | None = None,
    ) -> None:
        """The job's pods wait with `message` (PodScheduled, and an Event when it changed); its group object
        says `group_message` (default the same)."""
        assert self.sched is not None
        self.reasons[job.key] = message
        st = Status(Code.UNSCHEDULABLE, (message.split("\n", 1)[0],), plugin)
        for m in job.members:
            if m.uid in self.sched.queue.pods and m.uid not in self.sched.waiting:
                results.append(self.sched.mark_unschedulable(m, self.now, st, message))
        gang = job.gang
        if gang is not None and gang.obj is not None and gang.key not in self.timed_out:
            reason = "Unschedulable" if plugin == GANG_PLUGIN else "QueueWait"
            self._set_group_condition(gang, "False", reason, group_message or message)

    def admit(self, job: Job, fair: Mapping[str, Vector]) -> str | None:
        """Queue checks before placing: limit (queue and parents), deserved quota for non-preemptible."""
        asked = self.requested_queue(job.members[0].pod, job.gang) if job.members else None
        if asked is not None and asked in self.invalid_queues:
            return f"{job.label} waits: its queue is invalid: {self.invalid_queues[asked]}"
        verdict = check_limits(self.tree, job.queue, self.allocated, job.need)
        if not verdict.ok:
            return f"{job.label} waits: {verdict}"
        if not job.preemptible:
            v2 = check_deserved(self.tree, job.queue, self.allocated, job.need)
            if not v2.ok:
                return f"{job.label} waits: {NON_PREEMPTIBLE} jobs only use deserved quota: {v2}"
        return None

    def try_job(self, job: Job, results: list[CycleResult], final: bool = True) -> bool:
        """All or nothing: place the job (trying topology domains in turn); True when it bound."""
        assert self.sched is not None
        gang = job.gang
        if gang is not None:
            if gang.key in self.timed_out:
                for m in job.members:  # a pod of a timed-out gang came back (updated): not tried again
                    self.sched.queue.delete(m.uid)
                return False
            if gang.min_count < 0:
                if final:
                    problem = self.gangs.errors.get(gang.key)
                    why = (
                        f"its group object is invalid: {problem}"
                        if problem
                        else "waiting for its PodGroup/Workload object"
                    )
                    self.park(job, f"{job.label}: {why}", GANG_PLUGIN, results)
                return False
            have = len(self.gangs.members.get(gang.key, ()))
            if have < gang.min_count:
                if final:
                    # The pods' text does not count the members: it would change with every member that
                    # arrives, rewriting every waiting member's condition and Event each time (O(n^2)
                    # writes on a live cluster); the group object counts them.
                    self.park(
                        job,
                        f"{job.label} waits for members: fewer than minCount {gang.min_count} pods exist",
                        GANG_PLUGIN,
                        results,
                        f"{job.label} waits for members: {have} of minCount {gang.min_count} pods exist",
                    )
                return False
            first = self.first_attempt.setdefault(gang.key, self.now)
            timeout = gang.timeout if gang.timeout is not None else self.options.gang_timeout
            if timeout is not None and self.now - first > timeout and job.needed > 0:
                self._time_out(job, timeout, results)
                return False
        if not job.members:
            return False
        plan, topo_note = self.plan(job)
        failure: str | None = None
        # A PodGroup matchAttribute across members: the values to try, most free devices first.
        trials = self.group_constraints.trials(gang, self.group_constraints.claims_of(job.members))
        tried: list[str] = []
        for pins in trials:
            if gang is not None and pins:
                self.group_constraints.pins[gang.key] = pins
            try:
                for restriction in plan:
                    last = restriction is plan[-1] and pins is trials[-1]
                    # The binder seam commits the members' binds together: in memory they are made at
                    # once; on a live cluster as one two-phase job (every member's claims written, then
                    # every pod bound).
                    with self.sched.bind_group(job.label):
                        ok, failure = self._place(job, restriction, results, final and last)
                    if ok:
                        self.reasons.pop(job.key, None)
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
                self.reasons[job.key] = failure
            return False  # the cycle itself parked the pod with its plugins' reasons
        if final:
            msg = failure or f"{job.label}: no placement"
            if topo_note:
                msg = f"{msg}\n{topo_note}" if failure else topo_note
            released = self.release_held(job)
            if released:
                msg += f"\nreleased the claims its pending members held: {', '.join(released)}"
            self.park(job, msg, GANG_PLUGIN if gang is not None else QUEUE_PLUGIN, results)
        return False

    def release_held(self, job: Job) -> list[str]:
        """Claims allocated and reserved only for pending members of a gang that cannot be placed (left by
        a binding cut short: a crash, an API error) go back, so the waiting gang holds no devices."""
        assert self.sched is not None
        if job.gang is None:
            return []
        out: list[str] = []
        for m in job.members:
            held = []
            for name in pod_claim_names(m.pod):
                claim = self.sched.cache.claims.get((m.namespace, name))
                st = (claim or {}).get("status") or {}
                rf = st.get("reservedFor") or []
                if (
                    claim is not None
                    and st.get("allocation")
                    and rf
                    and all(r.get("uid") == m.uid for r in rf)
                ):
                    held.append(claim)
            if held:
                out.extend(f"{m.namespace}/{n}" for n in self.sched.release_claims(m, held))
        return out

    def _time_out(self, job: Job, timeout: float, results: list[CycleResult]) -> None:
        assert self.sched is not None and job.gang is not None
        gang = job.gang
        last = self.reasons.get(job.key, "no placement found")
        msg = (
            f"{job.label} is unschedulable: not placed within its scheduleTimeout ({timeout:g}s); "
            f"last reason: {last}"
        )
        self.park(job, msg, GANG_PLUGIN, results)
        self.timed_out.add(gang.key)
        for m in job.members:
            self.sched.queue.delete(m.uid)
        if gang.obj is not None:
            self._set_group_condition(gang, "False", "GangScheduleTimeout", msg)

    def _set_group_condition(self, gang: GangSpec, status: str, reason: str, message: str) -> None:
        """The gang's verdict on its object (status writer seam): PodGroupScheduled (upstream v1beta1:
        PodGroupInitiallyScheduled) with kdra's reason and message; kdra-shaped groups also get `phase` and
        `scheduled` (members bound). An Event on the object when the condition changes."""
        assert gang.obj is not None and self.format_time is not None
        obj = gang.obj
        ctype = group_condition_type(obj)
        cur_status = obj.get("status") or {}
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
            self.format_time(self.now),
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
        if not changed or not self.status.write_status(obj, fields):
            return  # a failed write is tried again the next time the gang is (its object is unchanged)
        if old is None or (old.get("status"), old.get("reason"), old.get("message")) != (
            status,
            reason,
            message,
        ):
            etype = "Normal" if status == "True" else "Warning"
            self.status.event(obj, etype, reason, message.split("\n", 1)[0] if status == "True" else message)

    def _member_capacity(self, job: Job) -> tuple[Any, Any]:
        """A cheap estimate of how many members a node can still host, and the key it is memoised under
        (None, None: no estimate)."""
        assert self.sched is not None
        if self.dynres is None:
            return None, None
        state = CycleState()
        if not self.dynres.pre_filter(state, job.members[0]).ok:
            return None, None
        demand = state["DynamicResources"].demand.exact
        dra = self.sched.dra
        req = job.members[0].requests
        # Per node, cached by node generation (it changes with every pod and claim the node gets or loses).
        key = (tuple(sorted(demand.items())), req.get("cpu", 0), req.get("memory", 0), self.sched.cache.epoch)
        memo = self._fits_memo.get(key)
        if memo is None:
            if len(self._fits_memo) > 64:
                self._fits_memo.clear()
            memo = self._fits_memo[key] = {}

        def fits(ni: Any) -> int:
            hit = memo.get(ni.idx)
            if hit is not None and hit[0] == ni.generation:
                return hit[1]
            n = 1 << 30
            for cls, k in demand.items():
                if k:
                    n = min(n, dra.free_devices(ni.name, cls) // k)
            for res in ("cpu", "memory"):
                want = req.get(res, 0)
                if want:
                    n = min(n, max(0, ni.allocatable.get(res, 0) - ni.requested.get(res, 0)) // want)
            n = 0 if ni.unschedulable else n
            memo[ni.idx] = (ni.generation, n)
            return n

        return key, fits

    def plan(self, job: Job) -> tuple[list[tuple[str, str] | None], str]:
        """The domain restrictions to try in order, and a note on levels that are too full."""
        assert self.sched is not None
        tc = job.gang.topology if job.gang is not None else None
        if not tc:
            return [None], ""
        req = self.levels.resolve(tc.required) if tc.required else None
        pref = self.levels.resolve(tc.preferred) if tc.preferred else None
        labels = ([pref, *self.levels.coarser(pref, up_to=req)] if pref else []) or ([req] if req else [])
        if req and req not in labels:
            labels.append(req)
        fits_key, fits = self._member_capacity(job)
        need = max(1, job.needed)
        out: list[tuple[str, str] | None] = []
        notes = []
        for label in labels:
            cache = self.sched.cache
            dkey = (label, len(cache.nodes), cache.node_updates)
            doms = self._domains.get(dkey)
            if doms is None:
                if len(self._domains) > 32:
                    self._domains.clear()
                doms = self._domains[dkey] = dict(sorted(domains(cache.nodes, label).items()))
            if fits is not None:
                room = self.rooms.room((fits_key, dkey, need), doms, lambda ni: min(fits(ni), need))
                ranked = [(room[value], value) for value in doms]
            else:
                ranked = [(need, value) for value in doms]
            roomy = sorted((c, v) for c, v in ranked if c >= need)
            for _c, v in roomy[: self.options.max_domain_trials]:
                out.append((label, v))
            if not roomy:
                best = max(ranked, default=(0, "-"))
                largest = max((len(v) for v in doms.values()), default=0)
                notes.append(
                    f"topology: no {label} has room for {need} members ({len(doms)} domains of at most "
                    f"{largest} nodes; the roomiest now, {best[1]}, fits about {best[0]})"
                )
        if not req:
            out.append(None)
        if not out:
            return [], "; ".join(notes) or f"topology: no node has the label {req}"
        return out, "; ".join(notes)

    def _place(
        self, job: Job, restriction: tuple[str, str] | None, results: list[CycleResult], final: bool
    ) -> tuple[bool, str | None]:
        assert self.sched is not None
        sched = self.sched
        gang = job.gang
        gk = gang.key if gang is not None else None
        if gk is not None:
            self.permit.holding.add(gk)
            if restriction is not None:
                self.topology_plugin.restrict[gk] = restriction
        waiting: list[PodInfo] = []
        first_fail: CycleResult | None = None
        members = job.members
        needed = job.needed if gang is not None else 1
        search = None
        if gang is not None and self.options.gang_device_search:
            from kdra.scheduler.gangsearch import GangSearch

            search = GangSearch(self.options.gang_search_nodes, self.options.gang_search_steps)
        try:
            for i, pi in enumerate(members):
                res = sched.schedule_one(pi, self.now)
                if search is not None and waiting and res.node is None and res.status.code != Code.WAIT:
                    res = search.retry(sched, self.dynres, waiting, pi, self.now) or res
                if res.status.code == Code.WAIT:
                    waiting.append(pi)
                elif res.node is not None:
                    results.append(res)  # bound directly (no gang)
                    return True, None
                else:
                    if first_fail is None:
                        first_fail = res
                    if len(waiting) + (len(members) - i - 1) < needed:
                        break
        finally:
            if gk is not None:
                self.permit.holding.discard(gk)
                self.topology_plugin.restrict.pop(gk, None)
        where = f" in {restriction[0]}={restriction[1]}" if restriction else ""
        if gang is not None and len(waiting) >= needed:
            broken = self.group_constraints.violation(gang) if gang.device_constraints else None
            usage: Vector = {}
            for pi in waiting:
                add(usage, pod_core_usage(pi.requests))
                for claim, alloc in sched.waiting[pi.uid].state.get("dra_allocations") or []:
                    add(
                        usage,
                        allocation_usage(claim, alloc, self.device_capacity, self.options.capacity_dims),
                    )
            verdict = check_limits(self.tree, job.queue, self.allocated, usage)
            if verdict.ok and broken is None:
                for pi in waiting:
                    results.append(sched.allow_waiting(pi.uid, self.now))
                if gang.obj is not None:
                    note = ""
                    if search is not None and search.reassigned:
                        note = f"; gang-wide device search re-assigned {search.reassigned} member(s)' devices"
                    self._set_group_condition(
                        gang, "True", "Scheduled", f"{len(waiting)} members placed{where}{note}"
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
        for pi in waiting:
            res = sched.reject_waiting(pi.uid, self.now, st, msg)
            if final:
                results.append(res)
        return False, msg

    # -- running jobs (victims) ------------------------------------------------------------------

    def running_jobs(self) -> list[RunningJob]:
        return self.accounting.running_jobs()

    def evict_jobs(
        self, victims: Sequence[RunningJob], why: str, *, dry_run_first: bool = True
    ) -> EvictionOutcome:
        """Evict the victims' pods through the evictor seam (all of them or, where it refuses one, none
        if it can tell in advance); evicted pods stop counting for their queues at once."""
        pods, uids = [], {}
        for v in victims:
            for uid, name in zip(v.pods, v.names, strict=True):
                ns, pname = name.split("/", 1)
                pod = self.store.try_get("Pod", pname, ns)
                if pod is not None:
                    pods.append(pod)
                    uids[name] = uid
        outcome = self.evictor.evict(pods, why, dry_run_first=dry_run_first)
        for name in outcome.evicted:
            self.evicted.append(name)
            self._unaccount(uids.get(name, ""))
        return outcome

    def try_with_victims(
        self, job: Job, victims: Sequence[RunningJob], why: str, results: list[CycleResult]
    ) -> bool:
        """Place `job` as if the victims were gone; only if that works are they evicted. The job's binds
        are committed once the evictions are accepted (on a live cluster its claims are written when the
        victims' devices are released; the binder holds them for it meanwhile). A refused eviction (a
        PodDisruptionBudget) frees nothing: the job's binds are cancelled and it says why."""
        assert self.sched is not None
        pods = []
        for v in victims:
            for name in v.names:
                ns, pname = name.split("/", 1)
                pod = self.store.try_get("Pod", pname, ns)
                if pod is not None:
                    pods.append(pod)
        refusals = self.evictor.refusals(pods)  # a dry run first: what a budget protects is not a victim
        if refusals:
            self._explain_refusals(job, why, refusals, results)
            return False
        trial = VirtualEviction(self.sched, victims)
        got: list[CycleResult] = []
        refused: EvictionOutcome | None = None
        with self.sched.bind_group(job.label) as group:
            placed = self.try_job(job, got, final=False)
            if placed:
                spared = trial.spare(victims, {r.node for r in got if r.node})
                victims = [v for v in victims if v not in spared]
                outcome = self.evict_jobs(victims, why, dry_run_first=False)
                if not outcome.ok:  # a race with the dry run (a budget changed): keep nothing of it
                    refused = outcome
                    group.cancel("a victim's eviction was refused")
        if placed and refused is None:
            results.extend(got)
            return True
        trial.restore()
        if refused is not None:
            self._explain_refusals(job, why, refused.refused, results)
        return False

    def _explain_refusals(
        self, job: Job, why: str, refused: Mapping[str, str], results: list[CycleResult]
    ) -> None:
        """The job waits; its pods say which victim's eviction was refused and the API's reason."""
        notes = "; ".join(f"eviction of pod {n} refused: {w}" for n, w in sorted(refused.items()))
        prev = self.reasons.get(job.key, "")
        what = why.split(" for ")[0]
        self.park(job, (prev + "\n" if prev else "") + f"{what}: {notes}", QUEUE_PLUGIN, results)

    # -- gangs running below their minimum -------------------------------------------------------------

    def check_stale(self, results: list[CycleResult]) -> None:
        """A gang with members bound but fewer than its minimum (counting members that completed) that
        stays so for `stale_gang_grace` is evicted whole: binding never leaves a gang half-running holding
        devices. Evicted pods are recreated by their owner and the gang is placed again all or nothing."""
        for gk in sorted(self.gangs.bound):
            bound = self.gangs.bound[gk]
            spec = self.gangs.spec(gk)
            if (
                not bound
                or spec is None
                or len(bound) + len(self.gangs.succeeded.get(gk, ())) >= spec.min_count
            ):
                self.stale_since.pop(gk, None)
                continue
            since = self.stale_since.setdefault(gk, self.now)
            if self.now - since < self.options.stale_gang_grace:
                continue
            names = sorted(u.name for uid in bound if (u := self.usage.get(uid)) is not None)
            victim = RunningJob(gk, "", 0, since, True)
            victim.pods = [uid for uid in sorted(bound) if uid in self.usage]
            victim.names = [self.usage[uid].name for uid in victim.pods]
            msg = (
                f"{spec.source} ran {len(bound)} of minCount {spec.min_count} members for "
                f"{self.now - since:.0f}s (stale gang): evicting {', '.join(names)} to place it again whole"
            )
            outcome = self.evict_jobs([victim], msg)
            if outcome.evicted:
                self.stale_since.pop(gk, None)
            if spec.obj is not None:
                refused = "; ".join(
                    f"eviction of {n} refused: {w}" for n, w in sorted(outcome.refused.items())
                )
                self._set_group_condition(
                    spec, "False", "GangBelowMinimum", msg + (f"; {refused}" if refused else "")
                )

    # -- status of queues and of objects kdra cannot use ----------------------------------------------

    def report(self) -> None:
        """Queue status (allocated, deserved, fair share, limit per resource, and why jobs wait), every
        `status_interval` seconds and only where it changed; invalid Queue and PodGroup objects get a
        condition and a Warning Event naming the field and the rule, once per problem."""
        assert self.format_time is not None
        for rkey in [
            k
            for k in self._reported
            if (k[1] not in self.invalid_queues if k[0] == "Queue" else k[1] not in self.gangs.errors)
        ]:
            del self._reported[rkey]
        for name, msg in sorted(self.invalid_queues.items()):
            obj = self.queue_objs.get(name)
            if obj is not None and self._reported.get(("Queue", name)) != msg:
                conds, _ = set_condition(
                    (obj.get("status") or {}).get("conditions"),
                    "Valid",
                    "False",
                    "InvalidSpec",
                    msg,
                    self.format_time(self.now),
                )
                if self.status.write_status(obj, {"conditions": conds}):
                    self._reported[("Queue", name)] = msg
                    self.status.event(obj, "Warning", "InvalidSpec", msg)
        for key, msg in sorted(self.gangs.errors.items()):
            obj = self.gangs.invalid.get(key)
            if obj is not None and self._reported.get(("PodGroup", key)) != msg:
                conds, _ = set_condition(
                    (obj.get("status") or {}).get("conditions"),
                    group_condition_type(obj),
                    "False",
                    "InvalidSpec",
                    msg,
                    self.format_time(self.now),
                    (obj.get("metadata") or {}).get("generation") if is_upstream(obj) else None,
                )
                if self.status.write_status(obj, {"conditions": conds}):
                    self._reported[("PodGroup", key)] = msg
                    self.status.event(obj, "Warning", "InvalidSpec", msg)
        if self.now - self._queue_status_at < self.options.status_interval:
            return
        self._queue_status_at = self.now
        # Every pending job of the queue (not only those tried this session), with the latest reason.
        assert self.sched is not None
        jobs: dict[str, dict[str, str]] = {}
        for uid, pi in self.sched.queue.pods.items():
            gk = self.gangs.gang_of(uid)
            key = gk if gk is not None else f"pod:{uid}"
            q = self.job_queue(pi.pod, self.gangs.spec(gk) if gk is not None else None)
            reason = self.reasons.get(key) or ""
            if key not in jobs.setdefault(q, {}) or reason:
                jobs[q][key] = reason.split("\n", 1)[0]
        waiting: dict[str, list[str]] = {
            q: [r or "not tried yet" for _k, r in sorted(js.items(), key=lambda kv: (not kv[1], kv[0]))]
            for q, js in jobs.items()
        }
        pending = {k for js in jobs.values() for k in js}
        for key in [k for k in self.reasons if k not in pending]:
            del self.reasons[key]  # jobs that are gone (their pods deleted, bound, timed out)
        for row in self.queue_report():
            name = row["queue"]
            obj = self.queue_objs.get(name)
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
            cur_conds = (obj.get("status") or {}).get("conditions")
            if why:
                conds, _ = set_condition(
                    cur_conds, "JobsWaiting", "True", "Waiting", why[0][:4096], self.format_time(self.now)
                )
            else:
                conds, _ = set_condition(
                    cur_conds, "JobsWaiting", "False", "NoneWaiting", "", self.format_time(self.now)
                )
            if name not in self.invalid_queues:
                conds = [c for c in conds if c.get("type") != "Valid"]
            if self.status.write_status(obj, dict(status, conditions=conds)):
                self._queue_status[name] = (status, why[:1])  # else written again at the next report


# -- actions ---------------------------------------------------------------------------------------


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


class _GQAction:
    name = "gq"

    def __init__(self, gq: GangQueues) -> None:
        self.gq = gq
        self.evicted_at_start = 0


class AllocateJobs(_GQAction):
    """Drain the queue into jobs and place them in queue order, all or nothing."""

    name = "allocate"

    def execute(self, session: Session) -> None:
        gq = self.gq
        sched = session.scheduler
        gq.attach(sched, session.now)
        popped = []
        while (pi := sched.queue.pop(session.now)) is not None:
            popped.append(pi)
        jobs = gq.build_jobs(popped)
        gq.failed = []
        if not jobs:
            gq.check_stale(session.results)
            return
        fair = gq.fair_shares(jobs)
        by_queue: dict[str, list[Job]] = {}
        # Jobs whose last attempt ran out of CEL budget go on after every other job (as in activeQ).
        for j in sorted(
            jobs, key=lambda j: (any(m.continuing for m in j.members), -j.priority, j.created, j.order_name)
        ):
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
            q = min(
                by_queue,
                key=lambda q: queue_order_key(
                    gq.tree, q, gq.allocated.get(q, {}), fair.get(q, {}), by_queue[q][0].need
                ),
            )
            job = by_queue[q].pop(0)
            if not by_queue[q]:
                del by_queue[q]
            why = gq.admit(job, fair)
            if why is not None:
                gq.park(job, why, QUEUE_PLUGIN, results)
                continue
            timed_out = job.gang is not None and job.gang.key in gq.timed_out
            deferred = sched.cel_deferrals
            if not gq.try_job(job, results) and not timed_out and sched.cel_deferrals == deferred:
                gq.failed.append(job)  # (a job cut short by its CEL budget is no reason to preempt)
        gq.check_stale(results)


class Reclaim(_GQAction):
    """Jobs of queues below their fair share take from queues above theirs (KAI's reclaim)."""

    name = "reclaim"

    def execute(self, session: Session) -> None:
        gq = self.gq
        if not gq.failed:
            return
        fair = gq.fair_shares(gq.failed)
        still = []
        running = gq.running_jobs()
        budget = gq.options.max_victim_searches
        self.evicted_at_start = len(gq.evicted)
        for job in gq.failed:
            if budget <= 0:
                still.append(job)
                continue
            if not self._below_share(job, fair):
                still.append(job)
                if gq.tree.view(job.need) and any(v.queue != job.queue for v in running):
                    _ok, why = reclaim_verdict(
                        gq.tree,
                        fair,
                        gq.allocated,
                        job.queue,
                        job.need,
                        job.queue,
                        {},
                        gq.options.reclaim_strategies,
                    )
                    prev = gq.reasons.get(job.key, "")
                    note = "reclaim blocked: " + "; ".join(why)
                    gq.park(job, (prev + "\n" if prev else "") + note, QUEUE_PLUGIN, session.results)
                continue
            budget -= 1
            if self._reclaim(job, fair, session, running):
                running = gq.running_jobs()
            else:
                still.append(job)
        gq.failed = still

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
        rq = job.queue
        if gq.admit(job, fair) is not None:
            return False
        if len(gq.evicted) > self.evicted_at_start and gq.try_job(job, session.results, final=False):
            return True  # what earlier victims freed (beyond their reclaimer's need) is enough
        others = [
            v for v in running if v.queue != rq and v.preemptible and rq not in gq.tree.ancestors(v.queue)
        ]
        if not others:
            return False
        saturation = {
            q: dominant_share(gq.allocated.get(q, {}), fair.get(q, {})) for q in {v.queue for v in others}
        }
        chosen: list[RunningJob] = []
        take: dict[str, Vector] = {}  # per victim queue
        total: Vector = {}  # all of them
        blocked: list[str] = []
        protected = 0
        trials = 0
        for v in order_victims(others, saturation, session.now):
            spec = gq.tree.specs[v.queue]
            if session.now - v.start < spec.reclaim_min_runtime:
                protected += 1
                continue
            if not frees_any(v.usage, total, job.need):
                continue
            t = dict(take.get(v.queue, {}))
            add(t, v.usage)
            ok, why = reclaim_verdict(
                gq.tree, fair, gq.allocated, rq, job.need, v.queue, t, gq.options.reclaim_strategies
            )
            if not ok:
                blocked.extend(w for w in why if w not in blocked)
                continue
            chosen.append(v)
            take[v.queue] = t
            add(total, v.usage)
            if covers(total, job.need):
                trials += 1
                msg = f"reclaimed by queue {rq} for {job.label}"
                if gq.try_with_victims(job, chosen, msg, session.results):
                    gq.reasons.pop(job.key, None)
                    return True
                if trials >= gq.options.max_victim_trials:
                    break
        notes = []
        if blocked:
            notes.append("reclaim blocked: " + "; ".join(blocked[:4]))
        if protected:
            notes.append(f"{protected} running job(s) of other queues are within reclaimMinRuntime")
        if notes:
            prev = gq.reasons.get(job.key, "")
            gq.park(job, (prev + "\n" if prev else "") + "; ".join(notes), QUEUE_PLUGIN, session.results)
        return False


class Preempt(_GQAction):
    """A job takes from lower-priority jobs of its own queue."""

    name = "preempt"

    def execute(self, session: Session) -> None:
        gq = self.gq
        still = []
        running = gq.running_jobs()
        budget = gq.options.max_victim_searches
        self.evicted_at_start = len(gq.evicted)
        for job in gq.failed:
            # What earlier preemptors of this session evicted beyond their own need may already be enough,
            # with no lower-priority job left running.
            freed = len(gq.evicted) > self.evicted_at_start
            lower = any(v.queue == job.queue and v.priority < job.priority for v in running)
            if budget <= 0 or not (lower or freed):
                still.append(job)
                continue
            budget -= 1
            if self._preempt(job, session, running, freed):
                running = gq.running_jobs()
            else:
                still.append(job)
        gq.failed = still

    def _preempt(self, job: Job, session: Session, running: Sequence[RunningJob], freed: bool) -> bool:
        gq = self.gq
        spec = gq.tree.specs[job.queue]
        if freed and gq.try_job(job, session.results, final=False):
            return True
        cands = [v for v in running if v.queue == job.queue and v.preemptible and v.priority < job.priority]
        protected = [v for v in cands if session.now - v.start < spec.preempt_min_runtime]
        cands = sorted((v for v in cands if v not in protected), key=lambda j: (j.priority, -j.start, j.key))
        chosen: list[RunningJob] = []
        total: Vector = {}
        trials = 0
        for v in cands:
            if not frees_any(v.usage, total, job.need):
                continue  # other classes only (a MIG partition's pod, for a whole GPU): the node search below
            chosen.append(v)
            add(total, v.usage)
            if covers(total, job.need):
                trials += 1
                if gq.try_with_victims(
                    job, chosen, f"preempted by {job.label} (priority {job.priority})", session.results
                ):
                    gq.reasons.pop(job.key, None)
                    return True
                if trials >= gq.options.max_victim_trials:
                    break
        if trials == 0 and cands and self._preempt_on_a_node(job, session, cands):
            return True
        if protected:
            prev = gq.reasons.get(job.key, "")
            note = (
                f"preemption: {len(protected)} lower-priority job(s) of queue {job.queue} "
                "are within preemptMinRuntime"
            )
            gq.park(job, (prev + "\n" if prev else "") + note, QUEUE_PLUGIN, session.results)
        return False

    def _preempt_on_a_node(self, job: Job, session: Session, cands: Sequence[RunningJob]) -> bool:
        """When no set of victims covers the job's need class by class (a MIG partition and a full GPU are
        different DeviceClasses of one physical GPU), look node by node, as kube-scheduler's
        DefaultPreemption does: the fewest lowest-priority victims on one node whose removal lets the job
        fit there. Single-pod jobs; a victim gang is evicted whole."""
        gq = self.gq
        assert gq.sched is not None
        if job.gang is not None:
            return False
        assigned = gq.sched.cache.assigned
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
                if gq.try_with_victims(
                    job, victims[:k], f"preempted by {job.label} (priority {job.priority})", session.results
                ):
                    gq.reasons.pop(job.key, None)
                    return True
        return False


class Report(_GQAction):
    """Last in a session: Queue status and the conditions of objects kdra cannot use (status writer)."""

    name = "report"

    def execute(self, session: Session) -> None:
        if self.gq.sched is not None:
            self.gq.report()


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


def fmt_vector(v: Mapping[str, float]) -> str:
    return ", ".join(f"{r}={fmt(r, x)}" for r, x in sorted(v.items()) if abs(x) > EPS)
