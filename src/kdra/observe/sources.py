"""Where the exporter's events come from: a kdra store (a simulation's in-memory store) or a simulation run
in a background thread, paced against the wall clock so that Prometheus sees its fleet change over time."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from kdra.cluster.store import Store
from kdra.observe.model import KINDS, FleetState


def attach_store(state: FleetState, store: Store) -> Any:
    """Load what the store holds, then follow its watch (events in write order)."""
    for kind in KINDS:
        state.replace(kind, store.list(kind))
    return store.watch(state.on_event, kinds=KINDS)


def attach_scheduler(state: FleetState, scheduler: Any) -> None:
    """Time kdra's scheduler's attempts (Scheduler.attempt_observers)."""

    def observe(result: Any, seconds: float) -> None:
        if result.node is not None:
            outcome = "scheduled"
        elif getattr(result.status, "code", None) is not None and str(result.status.code).endswith("ERROR"):
            outcome = "error"
        else:
            outcome = "unschedulable"
        state.observe_attempt(outcome, seconds)

    scheduler.attempt_observers.append(observe)
    conflicts = getattr(scheduler, "conflicts", None)  # kdra.kube.conflicts, in Kubernetes mode
    if conflicts is not None:
        state.set_conflicts(len(conflicts.conflicts), conflicts.detected_total, conflicts.repaired_total)
        conflicts.observers.append(state.set_conflicts)


def serve_beside_scheduler(store: Store, scheduler: Any, address: tuple[str, int]) -> Any:
    """Serve the exporter's metrics from a running kdra scheduler's own store and attempts (`kdra scheduler
    --metrics-listen`): no second set of watches, and the per-attempt latency histogram included."""
    from kdra.observe.server import MetricsServer

    state = FleetState()
    attach_store(state, store)
    attach_scheduler(state, scheduler)
    server = MetricsServer(state, address)
    server.ready.set()
    server.serve_in_thread()
    return server


class SimulationSource:
    """`kdra simulate`'s DRA model on a fleet and workload, its store watched by the exporter.

    `speed` simulated seconds pass per wall second (0: as fast as possible); when the simulation ends its
    final state stays exported. The simulation runs in a daemon thread; `stop()` ends it at the next
    simulated instant."""

    def __init__(
        self,
        state: FleetState,
        fleet: str = "mixed",
        workload: str = "mixed-month",
        seed: int = 0,
        speed: float = 3600.0,
        config: Any = None,
    ) -> None:
        from kdra.fleets import load_fleet, render
        from kdra.sim.engine import DRA, Simulation
        from kdra.sim.runner import load_workload

        self.state = state
        self.speed = speed
        fl = load_fleet(fleet)
        wl = load_workload(workload, seed)
        objects = render(fl, dra=True, legacy=False)
        self.sim = Simulation(objects, wl, DRA, config=config, seed=seed, dra_objects=objects)
        attach_store(state, self.sim.store)
        attach_scheduler(state, self.sim.scheduler)
        self.done = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_queue_report = 0.0
        self.error: BaseException | None = None
        self.simulated_now = 0.0

    def _progress(self, now: float, horizon: float) -> None:
        self.simulated_now = now
        gq = self.sim.gang_queues
        wall = time.monotonic()
        if gq is not None and wall - self._last_queue_report >= 0.5:
            self._last_queue_report = wall
            self.state.set_queue_report(gq.queue_report())
        if self._stop.is_set():
            raise _Stopped()
        if self.speed > 0:
            due = self._t0 + now / self.speed
            while not self._stop.is_set():
                left = due - time.monotonic()
                if left <= 0:
                    break
                self._stop.wait(min(left, 0.5))

    def run(self) -> None:
        self._t0 = time.monotonic()
        try:
            self.sim.run(self._progress)
            if self.sim.gang_queues is not None:
                self.state.set_queue_report(self.sim.gang_queues.queue_report())
        except _Stopped:
            pass
        except BaseException as exc:  # reported by the CLI
            self.error = exc
        finally:
            self.done.set()

    def start(self) -> SimulationSource:
        self._thread = threading.Thread(target=self.run, name="kdra-simulation", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)


class _Stopped(Exception):
    pass


def run_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
