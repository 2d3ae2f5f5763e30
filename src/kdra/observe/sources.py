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
    """Load what the store holds, then follow its watch (events in write order). A store that informs
    only some kinds (a scheduler's KubeStore: no Queues) gives only those: reading another would be an
    API request the scheduler's RBAC need not allow."""
    informed = getattr(store, "kinds", None)
    kinds = tuple(k for k in KINDS if informed is None or k in informed)
    for kind in kinds:
        state.replace(kind, store.list(kind))
    return store.watch(state.on_event, kinds=kinds)


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


class SchedulerEndpoint:
    """`kdra scheduler --metrics-listen`: metrics, liveness and readiness of a scheduler replica, served
    from start-up (a standby waiting for the lease answers its probes too).

    - /healthz, /livez: `ping`; `scheduling-loop` — the loop has gone round within `stall_after` seconds
      (once it runs); `leader-election` — a replica that led has not lost its lease without exiting.
    - /readyz: `informer-sync` — the informers' initial lists are done, or the replica is a standby
      (ready to take over: both replicas are Ready, as kube-scheduler's are); `shutdown` — not stopping.
    - /metrics: the exporter's metrics from the scheduler's own store (no second set of watches) and the
      per-attempt latency histogram, once the replica leads and its store has synced.
    """

    def __init__(self, address: tuple[str, int], options: Any = None, *, stall_after: float = 60.0) -> None:
        from kdra.observe.server import MetricsServer

        self.state = FleetState()
        self.server = MetricsServer(self.state, address, options=options)
        self.server.ready.set()  # readiness is informer-sync below
        self.stall_after = stall_after
        self.role = "starting"  # starting | standby | leading
        self.synced = False
        self.stopping = False
        self.elector: Any = None
        self._tick: float | None = None
        checks = self.server.checks
        checks.add("healthz", "scheduling-loop", self._loop_check)
        checks.add("healthz", "leader-election", self._lease_check)
        checks.add("readyz", "informer-sync", self._sync_check)
        checks.add("readyz", "shutdown", lambda: "shutting down" if self.stopping else None)
        self.server.serve_in_thread()

    def _loop_check(self) -> str | None:
        if self._tick is None:
            return None
        idle = time.monotonic() - self._tick
        return f"no scheduling loop iteration for {idle:.0f}s" if idle > self.stall_after else None

    def _lease_check(self) -> str | None:
        el = self.elector
        return "the leader lease was lost" if el is not None and getattr(el, "lost", False) else None

    def _sync_check(self) -> str | None:
        if self.role == "standby" or self.synced:
            return None
        return "waiting for the informers' initial lists"

    def attach(self, store: Store, scheduler: Any) -> None:
        attach_store(self.state, store)
        attach_scheduler(self.state, scheduler)
        self.role = "leading"
        self.synced = True
        self.tick()

    def tick(self) -> None:
        self._tick = time.monotonic()

    @property
    def url(self) -> str:
        return str(self.server.url)

    def shutdown(self) -> None:
        self.stopping = True
        self.server.shutdown()

    def server_close(self) -> None:
        self.server.server_close()


def serve_beside_scheduler(store: Store, scheduler: Any, address: tuple[str, int]) -> Any:
    """The endpoint of a scheduler that already leads and has synced (tests, embedding)."""
    endpoint = SchedulerEndpoint(address)
    endpoint.attach(store, scheduler)
    return endpoint


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
        *,
        max_nodes: int | None = None,
        max_pods: int | None = None,
    ) -> None:
        from kdra.fleets import load_fleet, render
        from kdra.fleets.spec import MAX_NODES
        from kdra.sim.engine import DRA, Simulation
        from kdra.sim.runner import load_workload

        self.state = state
        self.speed = speed
        fl = load_fleet(fleet, max_nodes=max_nodes or MAX_NODES)
        objects = render(fl, dra=True, legacy=False)
        wl = load_workload(workload, seed, max_pods, devices=objects)
        self.sim = Simulation(objects, wl, DRA, config=config, seed=seed, dra_objects=objects)
        attach_store(state, self.sim.store)
        attach_scheduler(state, self.sim.scheduler)
        self.done = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_queue_report = 0.0
        self.error: BaseException | None = None
        self.simulated_now = 0.0
        # Called after each simulated instant with its time; returning True ends the run there
        # (`kdra exporter --once --at`: the snapshot is taken by the caller).
        self.on_instant: Callable[[float], bool] | None = None

    def _progress(self, now: float, horizon: float) -> None:
        self.simulated_now = now
        gq = self.sim.gang_queues
        wall = time.monotonic()
        if gq is not None and wall - self._last_queue_report >= 0.5:
            self._last_queue_report = wall
            self.state.set_queue_report(gq.queue_report())
        if self._stop.is_set():
            raise _Stopped()
        if self.on_instant is not None and self.on_instant(now):
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
