"""`kdra scheduler` against a real API server: kdra's scheduling cycle over a `KubeStore`.

A composition, nothing overridden: the in-memory `Scheduler` (kdra.scheduler.scheduler) over the
informers' store, with
- no claim controller of its own (the real kube-controller-manager creates claims from templates and
  releases them: `run_controllers=False`) and the wall clock;
- the Kubernetes binder (kdra.kube.binder): binding cycles on worker threads, a gang as one two-phase job,
  binds held back while other claims still hold their devices in the API, pending pods' conditions and
  Events written with backoff;
- the taint that reserves nodes for this scheduler tolerated, and the partition's plugins
  (kdra.kube.partition) after DynamicResources, which they read;
- the conflict detector (kdra.kube.conflicts): devices in more claims than they can serve are reported
  and kdra's side repaired; its index says which claims hold which devices in the API;
- `step`, the loop's round: apply finished binding cycles, take in watch events, release parked binds,
  run the scheduler's actions.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from kdra.cluster.clock import WallClock
from kdra.kube.binder import KubeBinder
from kdra.kube.bindjob import BindJob
from kdra.kube.memory import HeapTrimmer
from kdra.kube.partition import Partition, owner_toleration
from kdra.kube.store import KubeStore
from kdra.scheduler.actions import AllocateAction
from kdra.scheduler.cache import SchedulerCache
from kdra.scheduler.dra import DraState
from kdra.scheduler.framework import Profile
from kdra.scheduler.scheduler import CycleResult, Scheduler, SchedulerConfig
from kdra.scheduler.scheduling_queue import SchedulingQueue


def default_identity() -> str:
    return f"{socket.gethostname()}_{os.getpid()}"


class KubeScheduler:
    def __init__(
        self,
        store: KubeStore,
        config: SchedulerConfig | None = None,
        *,
        identity: str | None = None,
        batch: int = 64,
        bind_timeout: float = 60.0,
        bind_workers: int = 128,
        partition: Partition | None = None,
    ) -> None:
        self.kstore = store
        self.partition = partition or Partition()
        self.identity = identity or default_identity()
        cfg = config or SchedulerConfig()
        cfg = dataclasses.replace(
            cfg,
            # after DynamicResources: they read its claims
            extra_plugins=[*cfg.extra_plugins, *self.partition.plugins()],
            # the taint that reserves nodes for this scheduler
            implied_tolerations=(*cfg.implied_tolerations, owner_toleration(cfg.scheduler_name)),
        )
        self.binder = KubeBinder(
            store,
            self,
            scheduler_name=cfg.scheduler_name,
            identity=self.identity,
            bind_workers=bind_workers,
            bind_timeout=bind_timeout,
        )
        self._counter_sets: tuple[Any, dict[tuple[str, str, str], tuple[tuple[str, ...], ...]]] | None = None
        self.scheduler = Scheduler(
            store,
            cfg,
            # The session's actions when the config has them (gangs, queues...), else kube-scheduler's loop.
            actions=None if cfg.actions is not None else [AllocateAction(max_pods=batch)],
            run_controllers=False,
            clock=WallClock(),
            binder=self.binder,
        )
        self.scheduler.yield_on_cel_budget = True  # take in watch events between chunks of CEL work
        from kdra.kube.conflicts import ConflictDetector

        # Devices in more claims than they can serve (another scheduler, a stale write): reported and
        # kdra's side repaired (kdra.kube.conflicts).
        self.conflicts = ConflictDetector(self)
        self.trimmer = HeapTrimmer()  # memory back to the system after a burst went (kdra.kube.memory)

    # -- what the scheduler and the binder hold, for the loop, the conflict detector and the exporter ----
    @property
    def config(self) -> SchedulerConfig:
        return self.scheduler.config

    @property
    def store(self) -> KubeStore:
        return self.kstore

    @property
    def cache(self) -> SchedulerCache:
        return self.scheduler.cache

    @property
    def queue(self) -> SchedulingQueue:
        return self.scheduler.queue

    @property
    def dra(self) -> DraState:
        return self.scheduler.dra

    @property
    def profile(self) -> Profile:
        return self.scheduler.profile

    @property
    def clock(self) -> Callable[[], float]:
        return self.scheduler.clock

    @property
    def attempt_observers(self) -> list[Callable[[CycleResult, float], None]]:
        return self.scheduler.attempt_observers

    @property
    def cycles(self) -> int:
        return self.scheduler.cycles

    @property
    def sessions(self) -> int:
        return self.scheduler.sessions

    @property
    def session_cpu(self) -> float:
        return self.scheduler.session_cpu

    @property
    def inflight(self) -> dict[str, BindJob]:
        return self.binder.inflight

    @property
    def bind_failures(self) -> int:
        return self.binder.bind_failures

    def run(self, now: float | None = None) -> list[CycleResult]:
        return self.scheduler.run(now)

    # -- which claims hold devices in the API (the binder's ApiHolds) ----------------------------------
    def held_elsewhere(self, sched: Scheduler, jobs: list[BindJob]) -> dict[str, tuple[str, str]]:
        """Claims still allocated, in the API, what these binds are about to allocate: the binder holds it
        for them (it stays assumed) and writes only once those claims are gone. "What" is physical: the
        same device, or a device drawing on the same shared counters (a MIG partition and the whole GPU, or
        another partition of it). Evicted victims' claims (which kdra already counts as released) are waited
        for on both; another claim on the very same device only if it cannot be shared. Which claim holds
        which device in the API is the conflict detector's index (kdra.kube.conflicts)."""
        holders, held = self.conflicts.holders, self.conflicts.held
        mine: set[tuple[str, ...]] = set()
        out: dict[str, tuple[str, str]] = {}

        def name(uid: str) -> tuple[str, str]:
            meta = held[uid].claim["metadata"]
            return (meta.get("namespace") or "default", meta.get("name", ""))

        for job in jobs:
            for claim, alloc in job.allocate:
                own = claim["metadata"].get("uid", "")
                for r in (alloc.get("devices") or {}).get("results") or []:
                    if r.get("adminAccess"):
                        continue
                    key = (r.get("driver", ""), r.get("pool", ""), r.get("device", ""))
                    mine |= self._physical(key)
                    if r.get("shareID"):
                        continue
                    for holder in holders.get(key, {}):
                        if holder != own and holder in held:
                            out[holder] = name(holder)
        for uid in sched.dra.released:
            h = held.get(uid)
            if h is not None and uid not in out and any(mine & self._physical(k) for k in h.devices):
                out[uid] = name(uid)
        return out

    def still_held(self, claim_uid: str) -> bool:
        return claim_uid in self.conflicts.held

    def _physical(self, key: tuple[str, str, str]) -> set[tuple[str, ...]]:
        """A device and the counter sets it draws on, as comparable tokens."""
        index = self.dra.index
        if self._counter_sets is None or self._counter_sets[0] is not index:
            table: dict[tuple[str, str, str], tuple[tuple[str, ...], ...]] = {}
            for sl in index.slices:
                for d in sl.devices:
                    if d.consumes:
                        table[d.key] = tuple(("counters", d.driver, d.pool, cs) for cs, _ in d.consumes)
            self._counter_sets = (index, table)
        return {("device", *key), *self._counter_sets[1].get(key, ())}

    # -- the loop --------------------------------------------------------------------------------------
    def stop_binding(self) -> None:
        """Leadership ended (any thread may call this): binding cycles not started yet never start and the
        loop schedules nothing more."""
        self.binder.stop()

    def close(self, wait: bool = True) -> None:
        """Let running binding cycles finish."""
        self.binder.close(self.scheduler, wait)

    def next_timeout(self, now: float, ceiling: float = 1.0) -> float:
        """How long the loop may wait for events before scheduling again."""
        if self.binder.waiting_binds >= self.binder.max_inflight:
            return min(ceiling, 0.02)
        if self.queue.has_active:
            return 0.0
        wake = self.queue.next_wakeup()
        retry = self.binder.next_status_retry()
        if retry is not None:
            wake = retry if wake is None else min(wake, retry)
        if wake is None:
            return ceiling
        return max(0.0, min(ceiling, wake - now))

    def step(self, wait: float = 1.0) -> list[CycleResult]:
        """Deliver what the watches brought (waiting up to the queue's next wake-up, at most `wait`)
        and run one batch of scheduling cycles."""
        sched, binder = self.scheduler, self.binder
        now = time.time()
        binder.finish_binds(sched, now)
        self.kstore.process_events(timeout=self.next_timeout(now, 0.2 if binder.parked else wait))
        now = time.time()
        binder.release_parked(sched)
        binder.finish_binds(sched, now)
        if binder.stopped:
            return []
        self.conflicts.step()
        if binder.waiting_binds >= binder.max_inflight:
            return []
        idle = not binder.inflight and not self.queue.has_active
        self.trimmer.note(sum(self.kstore.count(k) for k in self.kstore.kinds), idle, sched.drop_caches)
        if binder.next_status_retry() is not None:
            binder.retry_status_writes(now)
        self.queue.flush_unschedulable_leftover(now)
        return sched.run(now)
