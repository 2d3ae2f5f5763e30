"""The paper's experiment: policies x seeds, each an inflated, shuffled, never-removing placement.

`run_experiment` runs the cells (optionally in worker processes) and aggregates the unallocated GPU % at
100% arrived workload per policy (mean over seeds) and the mean allocation curve, next to the published
figures (kdra.scheduler.gpupolicies.PUBLISHED_UNALLOCATED_AT_100).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kdra.api.features import FeatureGates
from kdra.replay.engine import PlacementRun, run_placement
from kdra.replay.trace import BUNDLED_NODES, DEFAULT_PODS, Trace
from kdra.scheduler.gpupolicies import PUBLISHED_UNALLOCATED_AT_100, make_policy

CURVE_STEP = 1


@dataclass
class PolicyResult:
    policy: str
    per_seed: dict[int, float] = field(default_factory=dict)  # unallocated GPU % at 100% arrived
    curves: dict[int, list[tuple[int, float]]] = field(default_factory=dict)
    seconds: dict[int, float] = field(default_factory=dict)
    cpu_seconds: dict[int, float] = field(default_factory=dict)
    placed: dict[int, int] = field(default_factory=dict)
    pods: dict[int, int] = field(default_factory=dict)
    arrived: dict[int, float] = field(default_factory=dict)  # GPU request arrived at the 100% point, %
    allocator_calls: int = 0
    allocator_seconds: float = 0.0
    # Whether the published figures are of this experiment (the bundled fleet, the default pod list, 130%):
    # beside a user's own list, a variant or another inflation they compare nothing, and the gap misled.
    reference: bool = True

    @property
    def mean(self) -> float:
        return sum(self.per_seed.values()) / len(self.per_seed) if self.per_seed else float("nan")

    @property
    def published(self) -> float | None:
        return PUBLISHED_UNALLOCATED_AT_100.get(self.policy) if self.reference else None

    def mean_curve(self) -> list[tuple[int, float]]:
        if not self.curves:
            return []
        seeds = sorted(self.curves)
        n = len(seeds)
        first = self.curves[seeds[0]]
        return [(x, round(sum(self.curves[s][i][1] for s in seeds) / n, 3)) for i, (x, _) in enumerate(first)]

    def add(self, run: PlacementRun, until: int) -> None:
        self.per_seed[run.seed] = round(run.unallocated_at(100), 4)
        self.curves[run.seed] = run.curve(CURVE_STEP, until)
        self.seconds[run.seed] = round(run.seconds, 3)
        self.cpu_seconds[run.seed] = round(run.cpu_seconds, 3)
        self.placed[run.seed] = run.placed
        self.pods[run.seed] = run.pods
        self.arrived[run.seed] = round(run.arrived_at(100), 4)
        self.allocator_calls += run.allocator_calls
        self.allocator_seconds += run.allocator_seconds


@dataclass
class Experiment:
    policies: dict[str, PolicyResult]
    seeds: list[int]
    inflate: float
    nodes: int
    gpus: int
    pods_source: str
    nodes_source: str
    wall_seconds: float = 0.0
    processes: int = 1
    reference: bool = True  # the published figures' experiment (PolicyResult.reference)

    def to_dict(self, curves: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "trace": {
                "nodes": self.nodes,
                "gpus": self.gpus,
                "nodesSource": self.nodes_source,
                "podsSource": self.pods_source,
            },
            "seeds": self.seeds,
            "inflate": self.inflate,
            "wallSeconds": round(self.wall_seconds, 2),
            "processes": self.processes,
            "policies": {},
        }
        for name, pr in self.policies.items():
            entry: dict[str, Any] = {
                "unallocated_gpu_pct_at_100": round(pr.mean, 4),
                "published": pr.published,
                "per_seed": {str(s): v for s, v in sorted(pr.per_seed.items())},
                "seconds_per_seed": {str(s): v for s, v in sorted(pr.seconds.items())},
                "cpu_seconds_per_seed": {str(s): v for s, v in sorted(pr.cpu_seconds.items())},
                "pods": {str(s): v for s, v in sorted(pr.pods.items())},
                "placed": {str(s): v for s, v in sorted(pr.placed.items())},
                "arrived_gpu_pct_at_100": {str(s): v for s, v in sorted(pr.arrived.items())},
                "allocator_calls": pr.allocator_calls,
                "allocator_seconds": round(pr.allocator_seconds, 3),
            }
            if curves:
                entry["curve"] = [[x, y] for x, y in pr.mean_curve()]
            out["policies"][name] = entry
        return out


def is_reference(trace: Trace, inflate: float) -> bool:
    """Whether `trace` inflated so is the experiment the published figures are of: the bundled openb fleet,
    the trace's default pod list as it is (no variant), inflated to 130%."""
    return (
        trace.nodes_source == BUNDLED_NODES
        and Path(trace.pods_source).name == DEFAULT_PODS
        and math.isclose(inflate, 1.3)
    )


_TRACE: Trace | None = None


def _init(trace: Trace) -> None:
    global _TRACE
    _TRACE = trace


def _init_worker(trace: Trace) -> None:
    """A forked worker takes SIGTERM's default back: the pool ends its workers with SIGTERM, and a handler
    inherited from the parent (one that only sets a flag) left the worker alive and the parent's join
    waiting for ever."""
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _init(trace)


ONLINE = "-online"  # the suffix of a policy's result when it learned the workload online


def _cell(args: tuple[str, int, float, bool, str, FeatureGates | None, float | None]) -> PlacementRun:
    name, seed, ratio, allocator, ties, features, stop_at = args
    assert _TRACE is not None
    online = name.endswith(ONLINE)
    run = run_placement(
        _TRACE,
        make_policy(name.removesuffix(ONLINE)),
        seed,
        inflate_ratio=ratio,
        use_allocator=allocator,
        tie_break=ties,
        features=features,
        online=online,
        stop_at=stop_at,
    )
    run.policy = name
    return run


def run_experiment(
    trace: Trace,
    policies: Sequence[str],
    seeds: Sequence[int],
    *,
    inflate: float = 1.3,
    processes: int | None = None,
    use_allocator: bool = True,
    tie_break: str = "order",
    progress: Callable[[int, int, str], None] | None = None,
    features: FeatureGates | None = None,
    online: bool = False,
    stop_at: float | None = None,
) -> Experiment:
    """Every (policy, seed) cell; `processes` > 1 runs cells in worker processes (fork). `online`: each
    policy also runs learning the workload from the pods as they arrive (results `<policy>-online`, beside
    the offline ones). `stop_at`: place the pods only until the arrived request reaches this % of capacity
    (run_placement)."""
    import time

    t0 = time.perf_counter()
    if online:
        policies = [q for p in policies for q in (p, p + ONLINE)]
    cells = [(p, s, inflate, use_allocator, tie_break, features, stop_at) for p in policies for s in seeds]
    if processes is None:
        processes = min(2, os.cpu_count() or 1, len(cells))
    reference = is_reference(trace, inflate)
    results: dict[str, PolicyResult] = {p: PolicyResult(p, reference=reference) for p in policies}
    until = max(100, round(inflate * 100))
    done = 0
    if processes > 1 and len(cells) > 1:
        import multiprocessing as mp

        ctx = mp.get_context("fork")
        with ctx.Pool(processes, initializer=_init_worker, initargs=(trace,)) as pool:
            for run in pool.imap_unordered(_cell, cells):
                results[run.policy].add(run, until)
                done += 1
                if progress is not None:
                    progress(done, len(cells), f"{run.policy} seed {run.seed}")
            pool.close()  # every cell answered: the workers end on their own, none is killed mid-task
            pool.join()
    else:
        _init(trace)
        for cell in cells:
            run = _cell(cell)
            results[run.policy].add(run, until)
            done += 1
            if progress is not None:
                progress(done, len(cells), f"{run.policy} seed {run.seed}")
    return Experiment(
        results,
        list(seeds),
        inflate,
        len(trace.nodes),
        trace.gpu_capacity_milli // 1000,
        trace.pods_source,
        trace.nodes_source,
        time.perf_counter() - t0,
        processes,
        reference,
    )
