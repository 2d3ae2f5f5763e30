"""The scheduling cycle (kube-scheduler's scheduleOne over a framework profile), run as KAI-style actions.

`Scheduler.run(now)` opens a `Session` (kdra.scheduler.session) and runs its actions in order
(kdra.scheduler.actions): by default `AllocateAction`, which pops pods from the queue and schedules them
one at a time; with gangs and queues (kdra.scheduler.gangqueues) allocate, stale gangs, reclaim, preempt
and report. Every action schedules a pod through `schedule_one`; what a cycle decides reaches the world
through the binder seam (kdra.scheduler.seams).

One cycle: PreFilter -> Filter on every node and Score (kdra.scheduler.nodesearch) -> Reserve -> Permit ->
PreBind -> Bind (the binder).
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kdra.allocator.index import CelBudget, CelBudgetExhausted, cel_budget
from kdra.allocator.taintrules import tainted_slices
from kdra.api.features import FeatureGates
from kdra.api.pods import entry_claim_names, reserved_for
from kdra.api.types import Obj
from kdra.cluster.clock import formatter
from kdra.cluster.store import NotFoundError, Store, WatchEvent
from kdra.errors import InputError
from kdra.scheduler.cache import SchedulerCache, is_terminal
from kdra.scheduler.claimcontroller import ResourceClaimController
from kdra.scheduler.dra import DraState
from kdra.scheduler.framework import (
    EV_CLAIM_CHANGE,
    EV_CLASS_CHANGE,
    EV_NODE_ADD,
    EV_NODE_UPDATE,
    EV_POD_DELETE,
    EV_SLICE_CHANGE,
    ClusterEvent,
    Code,
    CycleState,
    FilterPlugin,
    PermitPlugin,
    Plugin,
    PostFilterPlugin,
    PreBindPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    Profile,
    QueueSortPlugin,
    ReservePlugin,
    ScorePlugin,
    Status,
)
from kdra.scheduler.nodefit import node_plugins
from kdra.scheduler.nodesearch import NodeSearch, SigEntry
from kdra.scheduler.owntext import OwnNames
from kdra.scheduler.plugins.basic import PrioritySort, SchedulingGates
from kdra.scheduler.plugins.dynamicresources import DynamicResources
from kdra.scheduler.plugins.noderesources import ScoringStrategy
from kdra.scheduler.podinfo import PodInfo
from kdra.scheduler.scheduling_queue import SchedulingQueue
from kdra.scheduler.seams import Binder, BindFailed, BindGroup, StoreBinder
from kdra.scheduler.session import Action, SessionOpening, SessionPlugin

SCHEDULER_NAME = "default-scheduler"
EXPLANATION_ANNOTATION = "kdra.dev/unschedulable-explanation"


FILTER_ERROR_MODES = ("fail-pod", "skip-node")


@dataclass
class SchedulerConfig:
    scoring: ScoringStrategy = field(default_factory=ScoringStrategy)
    features: FeatureGates = field(default_factory=FeatureGates)
    scheduler_name: str = SCHEDULER_NAME
    # Extra plugins appended to the default profile (topology, fragmentation, queues, a partition's...).
    extra_plugins: Sequence[Plugin] = ()
    # Tolerations every pod this scheduler places has, besides its own (TaintToleration.implied).
    implied_tolerations: Sequence[Mapping[str, Any]] = ()
    # The session's actions when the Scheduler is not given any (None: [AllocateAction()]); the gang,
    # queue, reclaim and preempt actions (kdra.scheduler.gangqueues) come in through here.
    actions: Sequence[Action] | None = None
    # Started with the scheduler, opened with every session: what they contribute to it
    # (kdra.scheduler.session; the gangs-and-queues machinery).
    session_plugins: Sequence[SessionPlugin] = ()
    # Opt-in device preference for the allocator's search: a name from
    # kdra.scheduler.devicepref.DEVICE_PREFERENCES or a DevicePreference; None is upstream's first fit.
    device_preference: Any = None
    # Queueing hints (kdra.scheduler.scheduling_queue): parked pods are retried only on events that may
    # help them. False: on every event their plugins registered for, and every 5 minutes (for tests).
    queueing_hints: bool = True
    # CEL work (cost units, plus one per evaluation) on selector results not memoised yet that one
    # scheduling attempt, and one run of the actions, may spend (kdra.allocator.index.cel_budget). An
    # attempt that runs out goes back to the queue behind the pods waiting now and continues where it
    # stopped; an attempt always gets at least `cel_attempt_floor`. None: unbounded. One 300 x 300 nested
    # comprehension costs ~0.9 million units per device (~60-80 ms on a 2-core machine).
    cel_attempt_budget: int | None = 2_000_000
    cel_run_budget: int | None = 4_000_000
    cel_attempt_floor: int = 100_000
    # A Filter error on any node (e.g. a CEL runtime error in a class selector on some devices):
    # "fail-pod" fails the pod's scheduling attempt (SchedulerError), as kube-scheduler does;
    # "skip-node" rules out only the nodes that failed and places the pod elsewhere (an option).
    filter_errors: str = "fail-pod"

    def __post_init__(self) -> None:
        if self.filter_errors not in FILTER_ERROR_MODES:
            raise InputError(
                f"--filter-errors: Unsupported value: {self.filter_errors!r}: "
                f"supported values: {', '.join(FILTER_ERROR_MODES)}"
            )


@dataclass
class CycleResult:
    pod: str
    node: str | None
    status: Status
    message: str = ""
    explanation: Any = None


@dataclass
class WaitingPod:
    """A pod Permit holds: reserved and assumed on `node`, not bound yet (kube-scheduler's waitingPod)."""

    pi: PodInfo
    node: str
    state: CycleState


def _claim_keys(pi: PodInfo) -> list[tuple[str, str]]:
    """(namespace, claim name) of every claim the pod references (known so far)."""
    return [(pi.namespace, name) for name in entry_claim_names(pi.pod)]


def claim_with_allocation(claim: Obj, allocation: Obj) -> Obj:
    """The claim as it would read with `allocation` written (for events about an in-flight allocation)."""
    return {**claim, "status": {**(claim.get("status") or {}), "allocation": allocation}}


def _preference(config: SchedulerConfig) -> Any:
    pref = config.device_preference
    if isinstance(pref, str):
        from kdra.scheduler.devicepref import make_device_preference

        return make_device_preference(pref)
    return pref


def default_plugins(store: Store, dra: DraState, config: SchedulerConfig) -> list[Plugin]:
    """The default profile's plugins, in kube-scheduler's order (the offline placement uses them too)."""
    return [
        PrioritySort(),
        SchedulingGates(),
        *node_plugins(config.implied_tolerations, config.scoring),
        DynamicResources(store, dra),
        *config.extra_plugins,
    ]


class Scheduler:
    def __init__(
        self,
        store: Store,
        config: SchedulerConfig | None = None,
        *,
        profile: Profile | None = None,
        actions: Sequence[Action] | None = None,
        run_controllers: bool = True,
        clock: Callable[[], float] | None = None,
        binder: Binder | None = None,
    ) -> None:
        self.store = store
        self.config = config or SchedulerConfig()
        self.clock = clock or (lambda: 0.0)
        self.format_time = formatter(self.clock)  # timestamps written into objects, from the same clock
        # PreBind and bind, group commits, and pending pods' conditions (kdra.scheduler.seams)
        self.binder: Binder = binder or StoreBinder(store, self.format_time)
        self.controller = ResourceClaimController(store, self.config.features) if run_controllers else None
        self.cache = SchedulerCache(store)
        self.dra = DraState(self.cache, self.config.features, preference=_preference(self.config))
        self.profile = profile or self.default_profile()
        for p in self.profile.plugins:
            p.bind_cache(self.cache)
        sorters = self.profile.at(QueueSortPlugin)
        sort_key = sorters[0].sort_key if sorters else PrioritySort().sort_key
        self.queue = SchedulingQueue(
            sort_key,
            pre_enqueue=self.profile.at(PreEnqueuePlugin),
            plugin_events={p.name: p.events for p in self.profile.plugins},
            plugins=self.profile.plugins,
            park_keys=_claim_keys,
            use_hints=self.config.queueing_hints,
        )
        if actions is None:
            actions = self.config.actions
        if actions is None:
            from kdra.scheduler.actions import AllocateAction

            actions = [AllocateAction()]
        self.actions: list[Action] = list(actions)
        self.session_plugins: list[SessionPlugin] = list(self.config.session_plugins)
        self._permit: list[PermitPlugin] = self.profile.at(PermitPlugin)
        self.waiting: dict[str, WaitingPod] = {}  # pod uid -> held by Permit
        # Inside `one_explanation_per_pod`: the last explanation each pod got, written when it ends.
        self._held_explanations: dict[str, tuple[PodInfo, float, Status, str, Any]] | None = None
        self._pre_filter: list[PreFilterPlugin] = self.profile.at(PreFilterPlugin)
        filters: list[FilterPlugin] = self.profile.at(FilterPlugin)
        filters.sort(key=lambda p: not p.filter_first)  # stable: profile order otherwise
        scorers = [p for p in self.profile.at(ScorePlugin) if p.weight]
        self.node_search = NodeSearch(self.cache, filters, scorers)
        self._reserve: list[ReservePlugin] = self.profile.at(ReservePlugin)
        self._pre_bind: list[PreBindPlugin] = self.profile.at(PreBindPlugin)
        self._post_filter: list[PostFilterPlugin] = self.profile.at(PostFilterPlugin)
        self._sig = self.node_search.entries  # pod signature -> its answers
        self._waiting_claims: dict[tuple[str, str], set[str]] = {}
        self.cycles = 0
        self.cel_deferrals = 0  # attempts cut short by their CEL budget
        self.cel_run_spent = 0  # CEL units spent on new selector results in the current run
        # Kubernetes mode: end a run once its CEL budget is spent, so that watch events (new pods) are
        # taken in before the expensive pod continues. The embedded mode has no events meanwhile.
        self.yield_on_cel_budget = False
        self.sessions = 0  # run() calls, and the CPU seconds of the calling thread in them (benchmarks)
        self.session_cpu = 0.0
        # Called after every scheduling attempt with its result and wall seconds (kdra exporter's
        # scheduler_attempt_duration histogram); empty by default, so attempts are not timed.
        self.attempt_observers: list[Callable[[CycleResult, float], None]] = []
        # Called with (pod, node) when the scheduler decides to bind a pod, and with its uid when such a
        # decision is undone (an asynchronous binding failed): the session's queue accounting follows them.
        self.bind_listeners: list[Callable[[PodInfo, str], None]] = []
        self.unbind_listeners: list[Callable[[str], None]] = []
        self._group: BindGroup | None = None
        store.watch(
            self._on_event,
            kinds=("Pod", "ResourceClaim", "Node", "ResourceSlice", "DeviceClass", "DeviceTaintRule"),
        )
        now = self.clock()
        for pod in store.list("Pod"):
            self._on_pod(WatchEvent("ADDED", "Pod", pod, None), now)
        for sp in self.session_plugins:
            sp.start(self)

    def default_profile(self) -> Profile:
        return Profile(SCHEDULER_NAME, default_plugins(self.store, self.dra, self.config))

    # -- events -> queue -------------------------------------------------------------------------

    def _responsible(self, pod: Obj) -> bool:
        return ((pod.get("spec") or {}).get("schedulerName") or SCHEDULER_NAME) == self.config.scheduler_name

    def _on_event(self, ev: WatchEvent) -> None:
        now = self.clock()
        if ev.kind == "Pod":
            self._on_pod(ev, now)
        elif ev.kind == "ResourceClaim":
            meta = ev.object["metadata"]
            key = (meta.get("namespace", "default"), meta["name"])
            if ev.type == "ADDED":
                waiting = self._waiting_claims.pop(key, None)
                if waiting:
                    self.queue.recheck_gated(sorted(waiting), now)
            old_alloc = ev.old is not None and bool((ev.old.get("status") or {}).get("allocation"))
            new_alloc = ev.type != "DELETED" and bool((ev.object.get("status") or {}).get("allocation"))
            old_rf = len(reserved_for(ev.old or {}))
            new_rf = len(reserved_for(ev.object)) if ev.type != "DELETED" else 0
            new = None if ev.type == "DELETED" else ev.object
            change = ClusterEvent(EV_CLAIM_CHANGE, ev.old, new)
            if (old_alloc and not new_alloc) or new_rf < old_rf:
                self.queue.on_event(change, now)  # devices or a reservedFor slot freed: anyone may gain
            else:  # any other change matters to the pods that use this claim (upstream's PreQueueingHint)
                parked = self.queue.parked_with(key)
                if parked:
                    self.queue.on_event(change, now, uids=parked)
        elif ev.kind == "Node":
            name = ev.object["metadata"].get("name", "")
            if ev.type == "ADDED":
                self.queue.on_event(ClusterEvent(EV_NODE_ADD, None, ev.object, node=name), now)
            else:
                new = None if ev.type == "DELETED" else ev.object
                self.queue.on_event(ClusterEvent(EV_NODE_UPDATE, ev.old, new, node=name), now)
        elif ev.kind in ("ResourceSlice", "DeviceClass"):
            new = None if ev.type == "DELETED" else ev.object
            name = EV_SLICE_CHANGE if ev.kind == "ResourceSlice" else EV_CLASS_CHANGE
            self.queue.on_event(ClusterEvent(name, ev.old, new), now)
        elif ev.kind == "DeviceTaintRule":
            # kube-scheduler's slice tracker reports a rule's change as updates of the slices whose
            # devices it taints (before or after); one per pool, which is what the hints look at.
            rules = [o for o in (ev.old, ev.object) if o is not None]
            pools: dict[str, Mapping[str, Any]] = {}
            for s in tainted_slices(rules, self.cache.slices.values(), self.config.features):
                pools.setdefault(((s.get("spec") or {}).get("pool") or {}).get("name", ""), s)
            for _, s in sorted(pools.items()):
                self.queue.on_event(ClusterEvent(EV_SLICE_CHANGE, s, s), now)

    def _on_pod(self, ev: WatchEvent, now: float) -> None:
        pod = ev.object
        uid = pod["metadata"].get("uid", "")
        node = (pod.get("spec") or {}).get("nodeName")
        if ev.type == "DELETED":  # nor to wait for: a claim it waited for may never come
            self._forget_gated(pod)
        elif not node and self.binder.in_flight(uid):
            return  # its binding cycle runs: a status change meanwhile does not make it pending again
        self._track_nomination(ev, pod, uid, node)
        if ev.type == "DELETED" or is_terminal(pod):
            self.queue.delete(uid)
            if node:
                self.queue.on_event(ClusterEvent(EV_POD_DELETE, pod, None, node=node), now)
            return
        if node or not self._responsible(pod) or pod["metadata"].get("deletionTimestamp"):
            self.queue.delete(uid)
            return
        if ev.type == "MODIFIED" and ev.old is not None and ev.old.get("spec") is pod.get("spec"):
            # A status-only update: re-check PreEnqueue when the claim statuses changed.
            old_st = (ev.old.get("status") or {}).get("resourceClaimStatuses")
            new_st = (pod.get("status") or {}).get("resourceClaimStatuses")
            if old_st == new_st:
                return
            gated = self.queue.gated.get(uid)
            if gated is not None:
                held = gated[0]
                same = held.pod.get("spec") is pod.get("spec")
                self.queue.add(held.with_pod(pod) if same else PodInfo(pod), now)
                self._track_gated(uid)
            return
        self.queue.add(PodInfo(pod), now)
        self._track_gated(uid)

    def _track_nomination(self, ev: WatchEvent, pod: Obj, uid: str, node: str | None) -> None:
        """kube-scheduler's nominator: a pending pod of this scheduler's with status.nominatedNodeName is
        counted there against pods of no higher priority until it is bound, deleted or nominated no more."""
        nominated = (pod.get("status") or {}).get("nominatedNodeName")
        if (
            nominated
            and ev.type != "DELETED"
            and not node
            and not is_terminal(pod)
            and not pod["metadata"].get("deletionTimestamp")
            and self._responsible(pod)
        ):
            self.cache.nominate(PodInfo(pod), nominated)
        else:
            self.cache.unnominate(uid)

    def _undo(
        self,
        state: CycleState,
        pi: PodInfo,
        node: str,
        plugins: Sequence[ReservePlugin] | None = None,
        assumed: bool = True,
    ) -> None:
        """Unreserve (in reverse order), forget the assumed pod, and tell the queue what was given back."""
        allocations = list(state.get("dra_allocations") or [])
        for q in reversed(self._reserve if plugins is None else plugins):
            q.unreserve(state, pi, node)
        if assumed:
            self.cache.forget(pi.uid)
        self.released(pi.pod, node, [claim_with_allocation(c, a) for c, a in allocations])

    def released(self, pod: Mapping[str, Any], node: str, claims: Iterable[Obj] = ()) -> None:
        """Resources the scheduler had assumed were given back without an API event (a failed Permit,
        PreBind or binding): tell the queue, as the deletion of an assigned pod and the deallocation of its
        claims would, so that pods parked behind them are retried."""
        now = self.clock()
        self.queue.on_event(ClusterEvent(EV_POD_DELETE, pod, None, node=node), now)
        for claim in claims:
            self.queue.on_event(ClusterEvent(EV_CLAIM_CHANGE, claim, None), now)

    def _forget_gated(self, pod: Obj) -> None:
        uid = pod["metadata"].get("uid", "")
        ns = pod["metadata"].get("namespace", "default")
        for name in entry_claim_names(pod):
            waiting = self._waiting_claims.get((ns, name))
            if waiting is not None:
                waiting.discard(uid)
                if not waiting:
                    del self._waiting_claims[(ns, name)]

    def _track_gated(self, uid: str) -> None:
        item = self.queue.gated.get(uid)
        if item is None:
            return
        pi = item[0]
        for name in entry_claim_names(pi.pod):
            self._waiting_claims.setdefault((pi.namespace, name), set()).add(uid)

    # -- running ---------------------------------------------------------------------------------

    def run(self, now: float | None = None) -> list[CycleResult]:
        """Open a session over the current state and run every action once in it; returns what each
        scheduled pod got."""
        t0 = time.thread_time()
        opening = SessionOpening(self.clock() if now is None else now)
        for sp in self.session_plugins:
            sp.open_session(opening)
        session = opening.session(self)
        for p in self.profile.plugins:
            p.open_session(session)
        self.cel_run_spent = 0
        for action in self.actions:
            action.execute(session)
        self.sessions += 1
        self.session_cpu += time.thread_time() - t0
        return session.results

    def schedule_one(self, pi: PodInfo, now: float) -> CycleResult:
        why = self.binder.refusing()
        if why:  # the rest of a batch after leadership ended: decide nothing
            self.queue.add_unschedulable(pi, now, set())
            return CycleResult(pi.key, None, Status(Code.ERROR, (why,)), why)
        if not self.attempt_observers:
            return self._attempt(pi, now)
        t0 = time.perf_counter()
        result = self._attempt(pi, now)
        elapsed = time.perf_counter() - t0
        for observe in self.attempt_observers:
            observe(result, elapsed)
        return result

    def _attempt(self, pi: PodInfo, now: float) -> CycleResult:
        try:
            return self._schedule_one(pi, now)
        except BindFailed as e:
            # The claims stay allocated and reserved for the pod: its next attempt sees them allocated
            # and lands on the same node (their node selector); if the pod is gone, they are released.
            node = self.cache.assigned.get(pi.uid, "")
            self.cache.forget(pi.uid)
            self.released(pi.pod, node)  # parked pods may fit in what it held (queueing hints)
            self.queue.add_unschedulable(pi, now, set())
            return CycleResult(pi.key, None, Status(Code.ERROR, (str(e),)), str(e))

    @property
    def node_evaluations(self) -> int:
        return self.node_search.evaluations

    def cel_run_spent_up(self) -> bool:
        limit = self.config.cel_run_budget
        return limit is not None and self.cel_run_spent >= limit

    def cel_limit(self) -> int | None:
        """The CEL budget of the next attempt: the attempt budget within what is left of the run's."""
        cfg = self.config
        if cfg.cel_attempt_budget is None:
            return None
        left = cfg.cel_attempt_budget
        if cfg.cel_run_budget is not None:
            left = min(left, cfg.cel_run_budget - self.cel_run_spent)
        return max(cfg.cel_attempt_floor, left)

    def _schedule_one(self, pi: PodInfo, now: float) -> CycleResult:
        self.cycles += 1
        pi.last_attempt = now
        state = CycleState()
        failed: tuple[Status, str] | None = None
        node: str | None = None
        statuses: dict[int, tuple[int, Status | None, int]] = {}
        try:
            with cel_budget(self.cel_limit()) as budget:
                try:
                    for p in self._pre_filter:
                        st = p.pre_filter(state, pi)
                        if not st.ok:
                            failed = (st.with_plugin(p.name), p.name)
                            break
                    if failed is None:
                        node, statuses = self.node_search.find(state, pi)
                finally:
                    if budget is not None:
                        self.cel_run_spent += budget.spent
        except CelBudgetExhausted as exc:
            return self._defer(state, pi, now, exc.budget)
        if failed is not None:
            st, plugin = failed
            return self._fail(
                pi,
                now,
                st,
                f"0/{len(self.cache.nodes)} nodes are available: {st.message}.",
                {plugin},
                st.explanation,
            )
        if node is not None and self.config.filter_errors == "fail-pod":
            # kube-scheduler's findNodesThatPassFilters: an error on any node ends the attempt.
            entry: SigEntry = state["_sig_entry"]
            if entry.errors:
                failed_status = statuses[min(entry.errors)][1]
                assert failed_status is not None
                own: OwnNames = state["_own_names"]
                message = own.personal(failed_status.message)
                return self._fail(pi, now, failed_status, message, set(), None)
        if node is None:
            return self._unschedulable(state, pi, now, statuses)
        ni = self.cache.node_by_name[node]
        for i, rp in enumerate(self._reserve):
            st = rp.reserve(state, pi, node)
            if not st.ok:
                self._undo(state, pi, node, self._reserve[: i + 1], assumed=False)
                return self._fail(pi, now, st.with_plugin(rp.name), st.message, set(), st.explanation)
        self.cache.assume(pi, node)
        for pp in self._permit:
            st = pp.permit(state, pi, node)
            if st.code == Code.WAIT:
                self.waiting[pi.uid] = WaitingPod(pi, node, state)
                return CycleResult(pi.key, None, st.with_plugin(pp.name), "waiting on permit")
            if not st.ok:
                self._undo(state, pi, node)
                return self._fail(pi, now, st.with_plugin(pp.name), st.message, {pp.name}, st.explanation)
        del ni
        return self._bind_placed(state, pi, node, now)

    def _defer(self, state: CycleState, pi: PodInfo, now: float, budget: CelBudget) -> CycleResult:
        """The attempt used up its CEL budget: say so on the pod (once: the text does not change) and put
        it back at the end of activeQ; what was evaluated stays memoised, so the next attempt goes on."""
        entry: SigEntry | None = state.get("_sig_entry")
        if entry is not None:
            entry.epoch = -1  # its node walk was cut short: walk again (cheap, the results are memoised)
        self.cel_deferrals += 1
        limit = self.config.cel_attempt_budget or budget.limit  # the configured figure: a stable text
        msg = (
            f"0/{len(self.cache.nodes)} nodes are available: the CEL selectors of its claims are expensive "
            f"to evaluate; kdra spends at most {limit:,} cost units on new selector results per "
            "scheduling attempt, so that other pods keep being scheduled, and goes on with the next attempt."
        )
        st = Status(Code.UNSCHEDULABLE, (msg,), DynamicResources.name)
        result = self._fail(pi, now, st, msg, {DynamicResources.name}, None)
        self.queue.requeue(pi, now)
        return result

    def allow_waiting(self, uid: str, now: float) -> CycleResult:
        """Permit approved a waiting pod: PreBind and bind it as schedule_one would have."""
        wp = self.waiting.pop(uid)
        return self._bind_placed(wp.state, wp.pi, wp.node, now)

    def _bind_placed(self, state: CycleState, pi: PodInfo, node: str, now: float) -> CycleResult:
        """The binding cycle of a pod reserved and permitted on `node`: the binder's PreBind and bind; on
        failure everything reserved is undone and the pod is retried."""
        st = self.binder.bind(self, state, pi, node, now, self._pre_bind, self._group)
        if not st.ok:
            self._undo(state, pi, node)
            return self._fail(pi, now, st, st.message, set(), st.explanation)
        self.queue.done(pi.uid)
        self._bound(pi, node)
        return CycleResult(pi.key, node, Status())

    def reject_waiting(
        self, uid: str, now: float, status: Status, message: str, explanation: object = None
    ) -> CycleResult:
        """Permit rejected a waiting pod: release its reservation and park it as unschedulable."""
        wp = self.waiting.pop(uid)
        self._undo(wp.state, wp.pi, wp.node)
        plugins = {status.plugin} if status.plugin else set()
        return self._fail(wp.pi, now, status, message, plugins, explanation)

    def mark_unschedulable(
        self, pi: PodInfo, now: float, status: Status, message: str, explanation: object = None
    ) -> CycleResult:
        """A pod an action decided not to try (queue quota, gang timeout): condition + unschedulable pool."""
        return self._fail(pi, now, status, message, {status.plugin} if status.plugin else set(), explanation)

    # -- the binder seam ---------------------------------------------------------------------------
    # The binder (kdra.scheduler.seams) makes the binds: in memory at once, on a live cluster on worker
    # threads, a gang as one two-phase job. What the session needs from either is here: a group of binds
    # committed together (`bind_group`), a hook per decided bind (`bind_listeners`, and `unbind_listeners`
    # when a decided bind is undone), and releasing the claims a pending pod holds (`release_claims`).

    @contextlib.contextmanager
    def bind_group(self, name: str) -> Iterator[BindGroup]:
        """Binds decided inside are committed together on exit (by the binder); nested groups join the
        outer one."""
        if self._group is not None:
            yield self._group
            return
        group = self._group = BindGroup(name)
        try:
            yield group
        finally:
            self._group = None
            self.binder.commit_group(self, group)

    def _bound(self, pi: PodInfo, node: str) -> None:
        if self._group is not None:
            self._group.pods.append((pi, node))
        for listener in self.bind_listeners:
            listener(pi, node)

    def _unbound(self, uid: str) -> None:
        for listener in self.unbind_listeners:
            listener(uid)

    def bind_failed(
        self, pi: PodInfo, error: str, allocate: Sequence[tuple[Obj, Obj]], gone: bool, now: float
    ) -> None:
        """A binding cycle that ran apart from the loop (the Kubernetes binder's workers) failed: the pod is
        no longer assumed, nor are the claims of `allocate` (claim, allocation) that were not written or
        were rolled back, and pods parked behind what it held are retried. Unless it is `gone`, the pod is
        pending again and retried after backoff with a SchedulerError condition, as kube-scheduler's
        binding-cycle failure handler does."""
        uid = pi.uid
        node = self.cache.assigned.get(uid, "")
        self.cache.forget(uid)
        self._unbound(uid)
        for claim in self.dra.unrelease_for(uid):
            self._count_victim_again(claim)
        freed = []
        for claim, alloc in allocate:
            cuid = claim["metadata"].get("uid", "")
            if cuid not in self.dra.allocated:  # not written, or rolled back
                self.dra.forget_assumed(cuid)
                freed.append(claim_with_allocation(claim, alloc))
        self.released(pi.pod, node, freed)
        if gone:
            return
        current = self.store.try_get("Pod", pi.name, pi.namespace)
        if current is None or (current.get("spec") or {}).get("nodeName"):
            return
        if current["metadata"].get("uid") != uid or current["metadata"].get("deletionTimestamp"):
            return
        again = PodInfo(current)
        again.attempts, again.initial_attempt = pi.attempts, pi.initial_attempt  # backoff grows
        self.queue.add(again, now)
        self._fail(self.queue.pods[uid], now, Status(Code.ERROR, (error,)), error, set(), None)

    def _count_victim_again(self, claim: Obj) -> None:
        """A victim's claim a failed placement counted on: while a pod it is reserved for has not ended
        (it terminates), the claim and that pod count again, as they are in the API, so that no other pod
        takes what the preemption was for; the preemptor's next attempt finds them as its victims. A claim
        whose pods are all gone stays released (the controller manager frees it); one reserved for a
        consumer that is not a pod counts again (whoever manages it frees it)."""
        ns = claim["metadata"].get("namespace") or "default"
        pods = []
        others = False
        for r in reserved_for(claim):
            if r.get("resource", "pods") != "pods":
                others = True
                continue
            pod = self.store.try_get("Pod", r.get("name", ""), ns)
            if pod is not None and pod["metadata"].get("uid") == r.get("uid") and not is_terminal(pod):
                pods.append(pod)
        if not pods and not others:
            return
        self.dra.count_again(claim)
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName")
            if node:
                self.cache.assume(PodInfo(pod), node)

    def drop_caches(self) -> None:
        """Forget answers derived for pods (per pod shape and node): rebuilt on demand by the next pods."""
        self._sig.clear()
        for p in self.profile.plugins:
            p.drop_caches()

    def release_claims(self, holder: str, claims: Sequence[Obj]) -> list[str]:
        """Give back what a pod (or a PodGroup) that stays pending holds: take the uid `holder` out of each
        claim's reservedFor and deallocate a claim nobody else reserves (kube-scheduler's Unreserve,
        PostFilter and PodGroupPostFilter do the same). Returns the names of the claims released."""
        from kdra.scheduler.dra import DELETE_PROTECTION_FINALIZER

        out = []
        for claim in claims:
            meta = claim["metadata"]

            def unreserve(c: Obj) -> None:
                st = c.setdefault("status", {})
                st["reservedFor"] = [r for r in st.get("reservedFor") or [] if r.get("uid") != holder]
                if not st["reservedFor"]:
                    st.pop("reservedFor")
                    st.pop("allocation", None)

            try:
                upd = self.store.update_with_retry(
                    "ResourceClaim",
                    meta["name"],
                    meta.get("namespace", "default"),
                    unreserve,
                    subresource="status",
                )
                if not (upd.get("status") or {}).get("allocation") and DELETE_PROTECTION_FINALIZER in (
                    upd["metadata"].get("finalizers") or []
                ):

                    def drop(c: Obj) -> None:
                        c["metadata"]["finalizers"] = [
                            f
                            for f in c["metadata"].get("finalizers") or []
                            if f != DELETE_PROTECTION_FINALIZER
                        ]

                    self.store.update_with_retry(
                        "ResourceClaim", meta["name"], meta.get("namespace", "default"), drop
                    )
            except NotFoundError:
                continue
            out.append(meta["name"])
        return out

    # -- failures --------------------------------------------------------------------------------

    def _unschedulable(
        self, state: CycleState, pi: PodInfo, now: float, results: dict[int, tuple[int, Status | None, int]]
    ) -> CycleResult:
        entry: SigEntry | None = state.get("_sig_entry")
        if entry is not None and entry.summary is not None and entry.summary[0] == entry.version:
            counts, plugins, explanation, has_error = entry.summary[1]
        else:
            counts = Counter()
            plugins = set()
            explanation = None
            has_error = None
            for idx in sorted(results):
                st = results[idx][1]
                if st is None:
                    continue
                if st.code == Code.ERROR and has_error is None:
                    has_error = st
                plugins.add(st.plugin)
                for r in st.reasons:
                    counts[r] += 1
                if explanation is None and st.explanation is not None:
                    explanation = st.explanation
            if explanation is not None:  # every node's verdict, for messages that group nodes by reason
                from kdra.scheduler.nodefit import FitFailure

                nodes = self.cache.nodes
                explanation = FitFailure(
                    explanation,
                    [
                        (nodes[i].name, st)
                        for i in sorted(results)
                        if i < len(nodes) and (st := results[i][1]) is not None
                    ],
                )
            if entry is not None:
                entry.summary = (entry.version, (counts, plugins, explanation, has_error))
        plugins = set(plugins)
        n = len(self.cache.nodes)
        own: OwnNames = state.get("_own_names") or OwnNames(())
        if has_error is not None:
            return self._fail(pi, now, has_error, own.personal(has_error.message), set(), None)
        for p in self._post_filter:
            p.post_filter(state, pi, {})
        # FitError.Error(): "<count> <reason>" strings sorted as strings (sortReasonsHistogram).
        reasons = ", ".join(sorted(f"{c} {r}" for r, c in counts.items()))
        msg = f"0/{n} nodes are available: {reasons}." if reasons else f"0/{n} nodes are available."
        st = Status(Code.UNSCHEDULABLE, tuple(own.personal(r) for r in sorted(counts)), "")
        if explanation is not None and own:
            explanation = explanation.for_pod(own.names)
        return self._fail(pi, now, st, own.personal(msg), plugins, explanation)

    def _fail(
        self, pi: PodInfo, now: float, st: Status, message: str, plugins: set[str], explanation: Any
    ) -> CycleResult:
        self.queue.add_unschedulable(pi, now, plugins)
        held = self._held_explanations
        if held is None:
            self.binder.record_unschedulable(pi, now, st, message, explanation)
        else:
            held.pop(pi.uid, None)
            held[pi.uid] = (pi, now, st, message, explanation)
        return CycleResult(pi.key, None, st, message, explanation)

    @contextlib.contextmanager
    def one_explanation_per_pod(self, write: bool = True) -> Iterator[None]:
        """Why pods stay pending is written once, on exit: each pod's last explanation, unless the pod was
        placed meanwhile (none with `write` False: a trial whose texts are not the last word). A gang's
        attempt fails a member with its own text, then parks every member with the gang's verdict: written
        as they came, every retry wrote each member's condition and Event twice, and a reader between the
        two saw the member's text instead of the gang's."""
        if self._held_explanations is not None:
            yield
            return
        held = self._held_explanations = {}
        try:
            yield
        finally:
            self._held_explanations = None
            for uid, (pi, now, st, message, explanation) in held.items() if write else ():
                if uid not in self.cache.assigned and uid not in self.waiting:
                    self.binder.record_unschedulable(pi, now, st, message, explanation)
