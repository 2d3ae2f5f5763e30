"""The scheduling queue (kube-scheduler's PriorityQueue, pkg/scheduler/backend/queue/scheduling_queue.go).

- activeQ: a heap ordered by the QueueSort plugin (default PrioritySort: higher priority first, FIFO
  within a priority by the time the pod entered activeQ);
- backoffQ: pods that failed and wait out their backoff (1 s doubling to 10 s: podInitialBackoffSeconds,
  podMaxBackoffSeconds) before going back to activeQ;
- unschedulable pods: wait for a cluster event one of the plugins that rejected them registered for, or
  for podMaxInUnschedulablePodsDuration (5 min) to pass;
- gated pods: PreEnqueue said not yet (for DRA: a claim does not exist yet); re-checked on pod updates
  and on the creation of a claim they wait for.

Time is the caller's (a virtual clock in simulations); nothing here sleeps.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from typing import Any

from kdra.scheduler.framework import PreEnqueuePlugin, Status
from kdra.scheduler.podinfo import PodInfo

INITIAL_BACKOFF = 1.0
MAX_BACKOFF = 10.0
MAX_IN_UNSCHEDULABLE = 300.0


class SchedulingQueue:
    def __init__(
        self,
        sort_key: Callable[[PodInfo], tuple[Any, ...]],
        pre_enqueue: Iterable[PreEnqueuePlugin] = (),
        plugin_events: dict[str, frozenset[str]] | None = None,
        initial_backoff: float = INITIAL_BACKOFF,
        max_backoff: float = MAX_BACKOFF,
    ) -> None:
        self._sort_key = sort_key
        self._pre_enqueue = list(pre_enqueue)
        self._plugin_events = plugin_events or {}
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

    def _push_active(self, pi: PodInfo, now: float) -> None:
        self._seq += 1
        pi.seq = self._seq
        heapq.heappush(self._active, (*self._sort_key(pi), self._seq, pi.uid))
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

    def backoff_duration(self, pi: PodInfo) -> float:
        d = self.initial_backoff * (2 ** min(max(0, pi.attempts - 1), 16))
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

    def flush_unschedulable_leftover(self, now: float) -> None:
        stale = [pi for pi, since in self.unschedulable.values() if now - since >= MAX_IN_UNSCHEDULABLE]
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
        if not self.unschedulable:
            return None
        return min(since for _, since in self.unschedulable.values()) + MAX_IN_UNSCHEDULABLE

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

    def on_event(self, event: str, now: float, uids: Iterable[str] | None = None) -> int:
        """Move unschedulable pods rejected by a plugin interested in `event` (all of them, or `uids`)."""
        if uids is not None:
            cands = [self.unschedulable[u][0] for u in uids if u in self.unschedulable]
        else:
            cands = [pi for pi, _ in self.unschedulable.values()]
        moved = 0
        for pi in cands:
            if any(event in self._plugin_events.get(p, frozenset([event])) for p in pi.unschedulable_plugins):
                self._move(pi, now)
                moved += 1
        return moved

    def recheck_gated(self, uids: Iterable[str], now: float) -> None:
        for uid in list(uids):
            item = self.gated.get(uid)
            if item is not None:
                del self.gated[uid]
                self._enqueue(item[0], now)

    def in_flight_or_queued(self, uid: str) -> bool:
        return uid in self.pods
