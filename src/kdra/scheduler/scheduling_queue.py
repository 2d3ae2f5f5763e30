"""The scheduling queue (kube-scheduler's PriorityQueue, pkg/scheduler/backend/queue/scheduling_queue.go).

- activeQ: a heap ordered by the QueueSort plugin (default PrioritySort: higher priority first, FIFO
  within a priority by the time the pod entered activeQ);
- backoffQ: pods that failed and wait out their backoff (1 s doubling to 10 s: podInitialBackoffSeconds,
  podMaxBackoffSeconds) before going back to activeQ;
- unschedulable pods: wait for a cluster event one of the plugins that rejected them registered for and,
  asked about that event and pod, says may help (its queueing hint, upstream's QueueingHintFn), or for
  podMaxInUnschedulablePodsDuration (5 min) to pass;
- gated pods: PreEnqueue said not yet (for DRA: a claim does not exist yet); re-checked on pod updates
  and on the creation of a claim they wait for.

Time is the caller's (a virtual clock in simulations); nothing here sleeps.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from kdra.allocator.preference import SortKey
from kdra.scheduler.framework import ClusterEvent, Plugin, PreEnqueuePlugin, Status
from kdra.scheduler.podinfo import PodInfo

INITIAL_BACKOFF = 1.0
MAX_BACKOFF = 10.0
MAX_IN_UNSCHEDULABLE = 300.0


class SchedulingQueue:
    def __init__(
        self,
        sort_key: Callable[[PodInfo], tuple[SortKey, ...]],
        pre_enqueue: Iterable[PreEnqueuePlugin] = (),
        plugin_events: dict[str, frozenset[str]] | None = None,
        initial_backoff: float = INITIAL_BACKOFF,
        max_backoff: float = MAX_BACKOFF,
        plugins: Iterable[Plugin] = (),
        trust_exact_hints: bool = True,
        use_hints: bool = True,
        park_keys: Callable[[PodInfo], Iterable[Hashable]] | None = None,
    ) -> None:
        self._sort_key = sort_key
        self._pre_enqueue = list(pre_enqueue)
        self._plugin_events = dict(plugin_events or {})
        # Plugins by name, for their queueing hints (and the events they registered for).
        self._plugins: dict[str, Plugin] = {p.name: p for p in plugins}
        for p in self._plugins.values():
            self._plugin_events.setdefault(p.name, p.events)
        # Queueing-hint decisions (pod, event) that moved a pod or left it parked: what hints save.
        self.hint_queued = 0
        self.hint_skipped = 0
        # Upstream retries every parked pod after 5 minutes, a safety net for events nobody hinted on.
        # A pod that only plugins with exact hints rejected has nothing to gain from it: any change
        # that could help it is an event they were asked about. False: retry every parked pod (upstream).
        self.trust_exact_hints = trust_exact_hints and use_hints
        # False: every registered event moves every pod its plugins rejected (kdra before hints, and
        # upstream without QueueingHints); kept to prove hints change nothing but the retries.
        self.use_hints = use_hints
        # Parked pods by what they reference (the scheduler: their claims), for events that concern only
        # the pods using one object (upstream's PreQueueingHint): key -> uids, stale uids dropped lazily.
        self._park_keys = park_keys
        self._parked_by: dict[Hashable, set[str]] = {}
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self._active: list[tuple[Any, ...]] = []
        self._backoff: list[tuple[float, int, str]] = []
        self.unschedulable: dict[str, tuple[PodInfo, float]] = {}  # uid -> (pod, time it went there)
        self.gated: dict[str, tuple[PodInfo, Status]] = {}
        self.pods: dict[str, PodInfo] = {}  # every pod the queue holds, by uid
        self._where: dict[str, str] = {}  # uid -> active | backoff | unschedulable | gated | inflight
        self._seq = 0

    # -- adding ----------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.pods)

    def add(self, pi: PodInfo, now: float) -> None:
        """A new pending pod (or an updated one not yet in flight)."""
        old = self.pods.get(pi.uid)
        if old is not None:
            pi.attempts, pi.initial_attempt = old.attempts, old.initial_attempt
            pi.unschedulable_plugins = old.unschedulable_plugins
            pi.queued_at = old.queued_at
            where = self._where.get(pi.uid)
            self.pods[pi.uid] = pi
            if where == "gated":
                self.gated.pop(pi.uid, None)
                self._enqueue(pi, now)
            elif where == "unschedulable":
                self.unschedulable[pi.uid] = (pi, self.unschedulable[pi.uid][1])
                if _pod_updated(old.pod, pi.pod):  # upstream: an updated pod leaves unschedulablePods
                    self._move(pi, now)
            return
        pi.queued_at = now
        self.pods[pi.uid] = pi
        self._enqueue(pi, now)

    def _enqueue(self, pi: PodInfo, now: float) -> None:
        for plugin in self._pre_enqueue:
            status = plugin.pre_enqueue(pi)
            if not status.ok:
                self.gated[pi.uid] = (pi, status.with_plugin(plugin.name))
                self._where[pi.uid] = "gated"
                return
        self._push_active(pi, now)

    def _push_active(self, pi: PodInfo, now: float, continuing: bool = False) -> None:
        # A continuing pod (its attempt ran out of CEL budget) sorts after every other active pod.
        self._seq += 1
        pi.seq = self._seq
        pi.continuing = continuing
        heapq.heappush(self._active, (continuing, *self._sort_key(pi), self._seq, pi.uid))
        self._where[pi.uid] = "active"

    def delete(self, uid: str) -> None:
        """The pod was deleted, bound or finished: forget it (stale heap entries are skipped on pop)."""
        self.pods.pop(uid, None)
        self._where.pop(uid, None)
        self.unschedulable.pop(uid, None)
        self.gated.pop(uid, None)

    # -- popping ---------------------------------------------------------------------------------

    def pop(self, now: float) -> PodInfo | None:
        self.flush_backoff(now)
        while self._active:
            entry = heapq.heappop(self._active)
            uid = entry[-1]
            pi = self.pods.get(uid)
            if pi is None or self._where.get(uid) != "active" or pi.seq != entry[-2]:
                continue
            self._where[uid] = "inflight"
            pi.attempts += 1
            if pi.initial_attempt is None:
                pi.initial_attempt = now
            return pi
        return None

    def done(self, uid: str) -> None:
        """The pod in flight was bound."""
        self.delete(uid)

    def requeue(self, pi: PodInfo, now: float) -> None:
        """Back to activeQ at once, without counting the attempt, but behind every pod that is or becomes
        active meanwhile: the cycle was cut short (its CEL budget ran out) and goes on where it stopped
        when nobody else is waiting."""
        if self.pods.get(pi.uid) is not pi:
            return
        self.unschedulable.pop(pi.uid, None)
        pi.attempts = max(0, pi.attempts - 1)
        self._push_active(pi, now, continuing=True)

    def put_back(self, pi: PodInfo, now: float) -> None:
        """A popped pod that was not tried (its batch ended early): back to activeQ where it was, the
        attempt not counted."""
        if self.pods.get(pi.uid) is not pi or self._where.get(pi.uid) != "inflight":
            return
        pi.attempts = max(0, pi.attempts - 1)
        self._push_active(pi, now, continuing=pi.continuing)

    def add_unschedulable(self, pi: PodInfo, now: float, plugins: set[str]) -> None:
        """The cycle failed: park the pod until an event may help (or in backoff after an error)."""
        if self.pods.get(pi.uid) is not pi:
            return
        pi.unschedulable_plugins = set(plugins)
        if not plugins:  # an error: retry after backoff
            self._push_backoff(pi, now)
            return
        self.unschedulable[pi.uid] = (pi, now)
        self._where[pi.uid] = "unschedulable"
        if self._park_keys is not None:
            for key in self._park_keys(pi):
                self._parked_by.setdefault(key, set()).add(pi.uid)

    def parked_with(self, key: Hashable) -> list[str]:
        """Uids of parked pods registered under `key` (see park_keys), in order."""
        uids = self._parked_by.get(key)
        if not uids:
            return []
        uids.intersection_update(self.unschedulable)
        if not uids:
            del self._parked_by[key]
        return sorted(uids)

    def backoff_duration(self, pi: PodInfo) -> float:
        d = self.initial_backoff * (1 << min(max(0, pi.attempts - 1), 16))
        return min(d, self.max_backoff)

    def _push_backoff(self, pi: PodInfo, now: float) -> None:
        until = now + self.backoff_duration(pi)
        heapq.heappush(self._backoff, (until, pi.seq, pi.uid))
        self._where[pi.uid] = "backoff"

    def flush_backoff(self, now: float) -> None:
        while self._backoff and self._backoff[0][0] <= now:
            _, _, uid = heapq.heappop(self._backoff)
            pi = self.pods.get(uid)
            if pi is not None and self._where.get(uid) == "backoff":
                self._push_active(pi, now)

    def _needs_leftover_flush(self, pi: PodInfo) -> bool:
        if not self.trust_exact_hints:
            return True
        plugins = self._plugins
        return any(p not in plugins or not plugins[p].exact_hints for p in pi.unschedulable_plugins)

    def flush_unschedulable_leftover(self, now: float) -> None:
        stale = [
            pi
            for pi, since in self.unschedulable.values()
            if now - since >= MAX_IN_UNSCHEDULABLE and self._needs_leftover_flush(pi)
        ]
        for pi in stale:
            self._move(pi, now)

    def next_wakeup(self) -> float | None:
        """The earliest time something in backoff becomes active (None if nothing waits in backoff)."""
        while self._backoff:
            until, _, uid = self._backoff[0]
            if self._where.get(uid) == "backoff":
                return until
            heapq.heappop(self._backoff)
        return None

    def next_leftover_flush(self) -> float | None:
        times = [since for pi, since in self.unschedulable.values() if self._needs_leftover_flush(pi)]
        return min(times) + MAX_IN_UNSCHEDULABLE if times else None

    @property
    def has_active(self) -> bool:
        """activeQ holds entries (some may be of pods gone meanwhile: `pop` skips them)."""
        return bool(self._active)

    @property
    def active_count(self) -> int:
        return sum(1 for w in self._where.values() if w == "active")

    # -- events ----------------------------------------------------------------------------------

    def _move(self, pi: PodInfo, now: float) -> None:
        """Out of the unschedulable pool: to backoffQ while the backoff since the last attempt lasts."""
        self.unschedulable.pop(pi.uid, None)
        last = pi.last_attempt
        if last is not None and now < last + self.backoff_duration(pi):
            heapq.heappush(self._backoff, (last + self.backoff_duration(pi), pi.seq, pi.uid))
            self._where[pi.uid] = "backoff"
        else:
            self._push_active(pi, now)

    def on_event(self, event: str | ClusterEvent, now: float, uids: Iterable[str] | None = None) -> int:
        """Move unschedulable pods (all of them, or `uids`) rejected by a plugin that registered for
        `event` and whose queueing hint says the event may help. A bare event name asks no hints."""
        ev = event if isinstance(event, ClusterEvent) else None
        name = ev.name if ev is not None else str(event)
        if uids is not None:
            cands = [self.unschedulable[u][0] for u in uids if u in self.unschedulable]
        else:
            cands = [pi for pi, _ in self.unschedulable.values()]
        moved = 0
        for pi in cands:
            if self._may_help(name, ev, pi):
                self._move(pi, now)
                moved += 1
        return moved

    def _may_help(self, name: str, ev: ClusterEvent | None, pi: PodInfo) -> bool:
        for p in sorted(pi.unschedulable_plugins):  # sorted: the same hints run in the same order
            if name not in self._plugin_events.get(p, frozenset([name])):
                continue
            plugin = self._plugins.get(p)
            if ev is None or plugin is None or not self.use_hints:
                return True
            try:
                helps = plugin.queueing_hint(ev, pi)
            except Exception:  # a failing hint must not strand the pod (upstream: error means Queue)
                helps = True
            if helps:
                self.hint_queued += 1
                return True
            self.hint_skipped += 1
        return False

    def recheck_gated(self, uids: Iterable[str], now: float) -> None:
        for uid in list(uids):
            item = self.gated.get(uid)
            if item is not None:
                del self.gated[uid]
                self._enqueue(item[0], now)

    def in_flight_or_queued(self, uid: str) -> bool:
        return uid in self.pods


def _pod_updated(old: Any, new: Any) -> bool:
    """Whether a pod changed in a way scheduling may care about (upstream isPodUpdated ignores status and
    bookkeeping metadata): its spec, labels or annotations."""
    if old is new:
        return False
    om, nm = old.get("metadata") or {}, new.get("metadata") or {}
    return bool(
        old.get("spec") != new.get("spec")
        or om.get("labels") != nm.get("labels")
        or om.get("annotations") != nm.get("annotations")
    )
