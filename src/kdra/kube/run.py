"""`kdra scheduler`'s process, as kube-scheduler's app/server.go Run: wait for the leader lease (when
elected), start the session scheduler, run its loop until a signal or the loss of the lease, then let the
binding cycles finish and step down.

A lost lease ends the process at once with status 1, as kube-scheduler does: the lease's fence already
refuses every write, and the binding pool was stopped from the elector's thread.

Without leader election the same Lease is claimed (kdra.kube.leader's claim mode): a second scheduler with
the same name, started by hand, from a second Deployment or as a second replica without --leader-elect,
exits 1 naming the one that runs, instead of binding the same pods a second time. kube-scheduler does not
detect this; a platform engineer is better served by one clear error than by pods bound twice.
"""

from __future__ import annotations

import cProfile
import json
import logging
import os
import resource
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any, Protocol

from kdra.errors import KdraError
from kdra.kube import memory
from kdra.kube.client import KubeClient
from kdra.kube.leader import LeaderElector
from kdra.kube.partition import Partition, startup_warnings
from kdra.kube.scheduler import KubeScheduler
from kdra.kube.session import start_session_scheduler
from kdra.kube.store import KubeStore
from kdra.scheduler.gangqueues import GangQueueOptions
from kdra.scheduler.scheduler import SchedulerConfig

PROFILE_ENV = "KDRA_PROFILE"  # a cProfile of the loop, written there at exit (benchmarks)
STATS_ENV = "KDRA_STATS"  # the loop's figures as JSON, written there at exit and on SIGUSR1 (benchmarks)


class Endpoint(Protocol):
    """The metrics and probe endpoint beside the loop (kdra.observe.sources.SchedulerEndpoint)."""

    role: str  # starting | standby | leading
    elector: Any

    def attach(self, store: KubeStore, sched: KubeScheduler) -> None: ...

    def tick(self) -> None: ...

    def shutdown(self) -> None: ...

    def server_close(self) -> None: ...


class DuplicateSchedulerError(KdraError):
    """Another process serves the same scheduler name (it renews the Lease): exit 1, the cluster's state."""

    exit_code = 1


def _duplicate(elector: LeaderElector, scheduler_name: str) -> str:
    return (
        f"another scheduler serves schedulerName {scheduler_name}: {elector.rival} holds the Lease "
        f"{elector.namespace}/{elector.name}; stop it, or run every replica with --leader-elect"
    )


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run_scheduler(
    client: KubeClient,
    config: SchedulerConfig,
    session_options: GangQueueOptions,
    *,
    identity: str,
    partition: Partition,
    bind_workers: int,
    resync: float,
    preemption_wait: float,
    elector: LeaderElector | None = None,
    endpoint: Endpoint | None = None,
    say: Callable[[str], None] = _stderr,
) -> int:
    """Run the scheduler until SIGTERM or SIGINT (0), or until the lease is lost (the process exits 1).
    `say` gets the lines a user reads on stderr (waiting, leading, warnings, what is served)."""
    stopping = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    # The handlers are the process's: put back on return (a caller that goes on, as the tests do, must not
    # keep handlers that only set this run's event: a process forked later would ignore SIGTERM).
    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        sched: KubeScheduler | None = None
        if elector is not None and elector.claim:
            elector.on_lost.append(lambda: sched.stop_binding() if sched is not None else None)
            elector.start()
            told = False
            while not elector.is_leader:
                if elector.rival:
                    elector.stop(release=False)
                    raise DuplicateSchedulerError(_duplicate(elector, config.scheduler_name))
                if elector.problem:  # no RBAC for the Lease, no namespace: said here, once; serve anyway
                    say(
                        f"kdra scheduler {identity}: warning: cannot tell whether another scheduler serves "
                        f"schedulerName {config.scheduler_name} (without --leader-elect it claims the Lease "
                        f"{elector.namespace}/{elector.name}): {elector.problem}"
                    )
                    break
                if stopping.is_set():
                    elector.stop(release=False)
                    return 0
                if not told and elector.holder and elector.holder != identity:
                    # A holder that has not renewed yet: alive (then this one exits) or gone without
                    # releasing the Lease (then it expires): only its next renewal, or none, tells, on this
                    # host's clock.
                    told = True
                    say(
                        f"kdra scheduler {identity}: the Lease {elector.namespace}/{elector.name} is held by "
                        f"{elector.holder}; waiting up to {elector.lease_duration:g} s to see whether it "
                        f"still serves schedulerName {config.scheduler_name}"
                    )
                time.sleep(0.1)
        elif elector is not None:
            # Every write of this process (scheduling loop, binding workers, status patches, Events) is
            # refused from the moment the lease deadline passes, before it is sent; a lost lease stops the
            # binding pool at once, from the elector's thread, while the loop may still be asleep.
            elector.install_fence(client)
            elector.on_lost.append(lambda: sched.stop_binding() if sched is not None else None)
            elector.start()
            if endpoint is not None:
                endpoint.elector = elector
                endpoint.role = "standby"
            say(f"kdra scheduler {identity}: waiting for the leader lease")
            while not elector.is_leader:
                if stopping.is_set():
                    elector.stop(release=False)
                    return 0
                time.sleep(0.1)
            if endpoint is not None:
                # not ready until its initial lists are done (docs/kube-commands.md)
                endpoint.role = "starting"
            say(f"kdra scheduler {identity}: leading")
        # One session, two worlds: the session `kdra simulate` runs, with the Kubernetes seams.
        store, gq, sched = start_session_scheduler(
            client,
            config,
            session_options,
            identity=identity,
            bind_workers=bind_workers,
            resync=resync,
            preemption_wait=preemption_wait,
            partition=partition,
        )
        memory.settle()  # the initial lists are in: what is alive now lives long (kdra.kube.memory)
        if partition.nodes is not None:
            for scorer in gq.scorers:  # a placement policy's fleet is the nodes this scheduler places on
                if hasattr(scorer, "owned"):
                    scorer.owned = partition.nodes.matches
        groups = ", ".join(sorted(store.served("PodGroup"))) or "no PodGroups"
        for warning in startup_warnings(partition, config.scheduler_name, sched.dra.index, sched.cache.nodes):
            say(f"kdra scheduler {identity}: warning: {warning}")
        say(
            f"kdra scheduler {identity}: serving schedulerName {config.scheduler_name} "
            f"({len(sched.cache.nodes)} nodes, {len(sched.queue)} pending pods, placement "
            f"{gq.options.placement}; gangs from {groups})"
        )
        code = 0
        profile = None
        if os.environ.get(STATS_ENV):  # at exit, and on SIGUSR1 (a benchmark window's start and end)
            stats_path = os.environ[STATS_ENV]
            previous[signal.SIGUSR1] = signal.signal(
                signal.SIGUSR1, lambda *_: write_stats(stats_path, sched, client)
            )
        if os.environ.get(PROFILE_ENV):
            profile = cProfile.Profile()
            profile.enable()
        try:
            if endpoint is not None:  # the exporter beside the scheduler (kdra.observe), now synced
                endpoint.attach(store, sched)
            while not stopping.is_set():
                if elector is not None and elector.claim and elector.rival:
                    sched.stop_binding()
                    say(f"kdra scheduler {identity}: {_duplicate(elector, config.scheduler_name)}; exiting")
                    os._exit(1)
                if elector is not None and elector.lost:
                    # Exit at once, as kube-scheduler does (the fence already refuses every write).
                    sched.stop_binding()
                    elector.wait_sent()  # a write paused between the fence and the send is reported first
                    late = (
                        f", {elector.raced_writes} sent after the lease ran out"
                        if elector.raced_writes
                        else ""
                    )
                    say(
                        f"kdra scheduler {identity}: leader lease lost, exiting "
                        f"({elector.fenced_writes} writes refused{late})"
                    )
                    os._exit(1)
                if endpoint is not None:
                    endpoint.tick()
                for r in sched.step(wait=0.5):
                    if r.node:
                        logging.getLogger("kdra.kube.scheduler").info("bound %s to %s", r.pod, r.node)
        finally:
            if profile is not None:
                profile.disable()
                profile.dump_stats(os.environ[PROFILE_ENV])
            sched.close(wait=True)  # let running binding cycles finish (SIGTERM)
            if os.environ.get(STATS_ENV):
                write_stats(os.environ[STATS_ENV], sched, client)
            if endpoint is not None:
                endpoint.shutdown()
                endpoint.server_close()
            store.stop()
            if elector is not None:
                elector.stop(release=code == 0)
        return code
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def write_stats(path: str, sched: KubeScheduler, client: KubeClient) -> None:
    """The loop's figures (sessions, CPU, API requests and writes, bind failures) as JSON at `path`."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    stats = {
        "sessions": sched.sessions,
        "session_cpu_s": round(sched.session_cpu, 3),
        "cycles": sched.cycles,
        "process_cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
        "api_requests": client.requests,
        "api_writes": client.writes,
        "bind_failures": sched.bind_failures,
        "events_posted": sched.binder.scheduled_events.posted,
        "events_dropped": sched.binder.scheduled_events.dropped,
        "written_at": time.time(),
    }
    try:
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(stats, f)
        os.replace(path + ".tmp", path)  # whole, for a reader polling it
    except OSError as e:
        print(f"{STATS_ENV}={path}: {e.strerror or e}", file=sys.stderr)
