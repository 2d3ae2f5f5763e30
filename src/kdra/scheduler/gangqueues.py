"""Gangs and queues, KAI-style: the composition of the session's parts, and what a Scheduler takes.

    gq = GangQueues(store, GangQueueOptions(placement="fragmentation"))
    sched = Scheduler(store, gq.config(SchedulerConfig()))

`config()` gives the scheduler the plugins (gang Permit, topology Filter, queue gate, placement scorers,
the PodGroup device constraints), the actions (kdra.scheduler.actions: allocate jobs, stale gangs, reclaim,
preempt, report) and `GangQueues` itself as a session plugin: started with the scheduler, it builds the
parts that read the scheduler's view, and at every session it contributes their functions (job and queue
order, admission, fair shares, the reclaim verdict, preemptable jobs, the claim rewriter).

The parts, one job each: `QueueObjects` and `QueueState` (kdra.scheduler.queuestate: Queue and Topology
objects, what bound pods hold, capacity, fair share), `JobBuilder` (kdra.scheduler.jobs), `JobStatus`
(kdra.scheduler.jobstatus: why jobs wait, group conditions), `TopologyPlanner`
(kdra.scheduler.topology), `JobPlacer` (kdra.scheduler.jobplacer: all or nothing, through a Statement),
`Victims` (kdra.scheduler.victims: trials with victims out of the view, evictions). What the session does
to the world goes through the seams (kdra.scheduler.seams): the evictor and the status writer given here,
the scheduler's binder.

Every decision that leaves a job pending says why on the pods' PodScheduled condition (what `kdra simulate`
prints) and in `reasons`: the member that fits nowhere and the allocator's explanation, the topology
level that is too full, the queue limit or deserved quota it would exceed, which reclaim strategy blocked
which victim.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kdra.api.wellknown import NVIDIA_GPU_CLASS
from kdra.cluster.store import Store, WatchEvent
from kdra.errors import InputError
from kdra.scheduler.accounting import PodUsage, QueueAccounting
from kdra.scheduler.framework import EV_GROUP_CHANGE, EV_QUEUE_CHANGE, ClusterEvent, Plugin
from kdra.scheduler.gang import GangRegistry
from kdra.scheduler.groupconstraints import GroupConstraints
from kdra.scheduler.jobplacer import GangPermit, JobPlacer, QueueGate
from kdra.scheduler.jobs import Job, JobBuilder
from kdra.scheduler.jobstatus import JobStatus
from kdra.scheduler.preemption import STRATEGIES, RunningJob
from kdra.scheduler.queuestate import QueueObjects, QueueState
from kdra.scheduler.queuetree import EPS, QueueTree, Vector, fmt
from kdra.scheduler.seams import Evictor, StatusWriter, StoreEvictor, StoreStatusWriter
from kdra.scheduler.topology import GangTopology, TopologyLevels, TopologyPlanner
from kdra.scheduler.victims import Victims

if TYPE_CHECKING:
    from kdra.scheduler.scheduler import Scheduler, SchedulerConfig
    from kdra.scheduler.session import Action, SessionOpening


@dataclass
class GangQueueOptions:
    placement: str = "upstream"  # a name of kdra.scheduler.fragmentation.PLACEMENT_POLICIES
    fragmentation_shapes: Mapping[float, float] | None = None  # FGD target workload (None: pods seen)
    device_locality: bool = False  # prefer nodes where a pod's devices share a PCIe root / NUMA node
    gang_timeout: float | None = None  # default scheduleTimeout for gangs that do not set one
    reclaim: bool = True
    preempt: bool = True
    reclaim_strategies: Sequence[str] = STRATEGIES
    gpu_class: str = NVIDIA_GPU_CLASS  # what a KAI Queue's `gpu` counts
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
    from kdra.api.durations import parse_duration
    from kdra.scheduler.fragmentation import PLACEMENT_POLICIES
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


class GangQueues:
    """The gangs-and-queues scheduling of a Scheduler. `evictor` and `status` are the seams to the world
    (in memory by default; `kdra.kube.session` has the Kubernetes ones); the clock is the scheduler's."""

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
        self.accounting = QueueAccounting(QueueTree())  # what bound pods hold, per queue
        self.objects = QueueObjects(self.options.gpu_class, self.accounting)
        self._run: GangRuntime | None = None
        store.watch(
            self._on_event, kinds=("Queue", "Topology", "Pod", "ResourceClaim", "PodGroup", "Workload")
        )
        for kind in ("Queue", "Topology"):
            for obj in store.list(kind):
                self._on_event(WatchEvent("ADDED", kind, obj, None))

    # -- what the scheduler takes ----------------------------------------------------------------------
    def plugins(self) -> list[Plugin]:
        return [self.topology_plugin, self.permit, self.queue_gate, *self.scorers]

    def actions(self) -> list[Action]:
        from kdra.scheduler.actions import AllocateJobs, Preempt, Reclaim, Report, StaleGangs

        acts: list[Action] = [AllocateJobs(self), StaleGangs(self)]
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
            session_plugins=[*base.session_plugins, self],
            # A SchedulingShard's devicePreference wins over the flag (as its other fields do); without
            # either, a placement policy that chooses GPUs too (placement kdra) brings its own.
            device_preference=self.options.device_preference
            or base.device_preference
            or placement_preference(self.scorers),
        )

    # -- the session plugin ----------------------------------------------------------------------------
    def start(self, sched: Scheduler) -> None:
        """The scheduler is built: the parts that read its view."""
        self._run = GangRuntime(self, sched)

    def open_session(self, opening: SessionOpening) -> None:
        self.runtime.open_session(opening)
        opening.claim_rewriter = self.group_constraints.rewrite
        opening.gang_of = self.gangs.gang_of

    @property
    def runtime(self) -> GangRuntime:
        if self._run is None:
            raise RuntimeError("GangQueues: give gq.config() to a Scheduler before scheduling")
        return self._run

    def _on_event(self, ev: WatchEvent) -> None:
        if ev.kind in ("Queue", "Topology"):
            self.objects.on_event(ev)
            if ev.kind == "Queue" and self._run is not None and _spec_changed(ev):
                self._run.sched.queue.on_event(
                    ClusterEvent(EV_QUEUE_CHANGE, ev.old, ev.object), self._run.now()
                )
        elif ev.kind == "Pod" and self._run is not None:
            self._run.on_pod(ev)
        elif ev.kind in ("PodGroup", "Workload") and self._run is not None and _spec_changed(ev):
            self._run.on_group(ev)

    # -- what it holds and decided (reports, tests) ----------------------------------------------------
    @property
    def sched(self) -> Scheduler | None:
        return self._run.sched if self._run is not None else None

    @property
    def tree(self) -> QueueTree:
        return self.objects.tree

    @property
    def levels(self) -> TopologyLevels:
        return self.objects.levels

    @property
    def usage(self) -> dict[str, PodUsage]:
        """Bound pod uid -> what it holds."""
        return self.accounting.usage

    @property
    def allocated(self) -> dict[str, Vector]:
        """Queue (leaves and parents) -> what its bound pods hold."""
        return self.accounting.allocated

    @property
    def evicted(self) -> list[str]:
        """ns/name of evicted pods, in order."""
        return self._run.victims.evicted if self._run is not None else []

    @property
    def timed_out(self) -> set[str]:
        return self._run.status.timed_out if self._run is not None else set()

    @property
    def reasons(self) -> dict[str, str]:
        """Job key -> why it waits (latest)."""
        return self._run.status.reasons if self._run is not None else {}

    @property
    def errors(self) -> list[str]:
        return self.objects.errors

    def running_jobs(self) -> list[RunningJob]:
        return self.accounting.running_jobs()

    def fair_shares(self, jobs: Sequence[Job] = ()) -> dict[str, Vector]:
        return self.runtime.queues.fair_shares(jobs)

    def queue_report(self) -> list[dict[str, Any]]:
        """Per queue: allocated, deserved (quota), fair share and limit, for reports and explanations."""
        return self.runtime.queues.queue_report(self.runtime.failed)


class GangRuntime:
    """The parts that read the scheduler's view, built when the scheduler starts GangQueues."""

    def __init__(self, gq: GangQueues, sched: Scheduler) -> None:
        from kdra.scheduler.plugins.dynamicresources import DynamicResources

        opts = gq.options
        self.gq = gq
        self.sched = sched
        self.queues = QueueState(
            sched, gq.objects, gq.accounting, gq.gangs, opts.capacity_dims, opts.reclaim_strategies
        )
        self.jobs = JobBuilder(sched, gq.gangs, gq.objects, self.queues)
        self.status = JobStatus(sched, gq.gangs, gq)
        self.planner = TopologyPlanner(sched, lambda: gq.objects.levels, opts.max_domain_trials)
        self.placer = JobPlacer(
            sched,
            opts,
            gq.gangs,
            self.queues,
            self.status,
            self.planner,
            gq.permit,
            gq.topology_plugin,
            gq.group_constraints,
        )
        self.placer.dynres = next((p for p in sched.profile.plugins if isinstance(p, DynamicResources)), None)
        self.victims = Victims(sched, gq, gq.accounting, self.placer, self.status)
        self.failed: list[Job] = []  # jobs this session's allocate could not place (reclaim, preempt)
        if isinstance(gq.evictor, StoreEvictor):
            gq.evictor.format_time = sched.format_time

    def open_session(self, opening: SessionOpening) -> None:
        now = opening.now
        if isinstance(self.gq.evictor, StoreEvictor):
            self.gq.evictor.now = now
        self.status.now = self.placer.now = self.victims.now = now
        self.queues.open_session(opening)
        self.jobs.open_session(opening)

    def now(self) -> float:
        return self.sched.clock()

    def on_group(self, ev: WatchEvent) -> None:
        """A gang's group object came or its spec changed (the registry has read it): its members parked
        waiting for it are tried again now, not at the unschedulable pods' periodic flush (upstream's gang
        plugin registers PodGroup and Workload events too). A Workload covers the gangs under it."""
        meta = ev.object.get("metadata") or {}
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"
        members = self.gq.gangs.members
        uids = [u for gk, us in members.items() if gk == key or gk.startswith(key + "/") for u in us]
        if uids:
            self.sched.queue.on_event(ClusterEvent(EV_GROUP_CHANGE, ev.old, ev.object), self.now(), uids)

    def on_pod(self, ev: WatchEvent) -> None:
        self.queues.on_pod(ev)
        self.victims.on_pod(ev)
        pod = ev.object
        if ev.type == "DELETED" or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            self.status.reasons.pop(f"pod:{pod['metadata'].get('uid', '')}", None)


def _spec_changed(ev: WatchEvent) -> bool:
    """Created, deleted, or a new spec (not one of the status writes kdra makes itself)."""
    return ev.old is None or ev.type == "DELETED" or ev.old.get("spec") != ev.object.get("spec")


def fmt_vector(v: Mapping[str, float]) -> str:
    return ", ".join(f"{r}={fmt(r, x)}" for r, x in sorted(v.items()) if abs(x) > EPS)
