"""Flags and helpers several subcommands share, so they are spelled and behave the same everywhere."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from kdra.errors import InputError

if TYPE_CHECKING:
    from kdra.api.features import FeatureGates


def add_validate_arg(p: argparse.ArgumentParser) -> None:
    from kdra.cli.conventions import add_flag

    add_flag(
        p,
        "--validate",
        default="strict",
        help="unknown fields: strict rejects them (default, as kubectl), warn prints a warning, ignore "
        "accepts them silently",
    )


def validate_mode(args: argparse.Namespace) -> str:
    from kdra.api.fields import parse_validate

    return parse_validate(str(getattr(args, "validate", "strict")))


def add_namespace_args(p: argparse.ArgumentParser, what: str) -> None:
    """-n/--namespace and -A/--all-namespaces, as kubectl spells them."""
    from kdra.cli.conventions import add_flag

    g = p.add_mutually_exclusive_group()
    add_flag(g, "--namespace", default=None, help=f"only {what} of this namespace")
    add_flag(g, "--all-namespaces", action="store_true", help=f"{what} of every namespace (the default)")


def namespace_filter(args: argparse.Namespace) -> str | None:
    """The namespace -n names, or None for every namespace."""
    ns = getattr(args, "namespace", None)
    if ns is not None and not ns:
        raise InputError("-n/--namespace: Invalid value: '': must not be empty")
    if ns is not None:
        # A namespace is a DNS label: anything else matched nothing in silence (`kdra top -n Team_A` showed
        # an empty table, `kdra explain -n nosuch` "no pending pods"), or went into the request path
        # unescaped ('x?y=1' became a query string, 'a/b' another path).
        from kdra.validation.rules import is_dns1123_label

        for problem in is_dns1123_label(ns):
            raise InputError(f"-n/--namespace: Invalid value: {ns!r}: {problem}")
    return None if getattr(args, "all_namespaces", False) else ns


# The bundled fleets (kdra.fleets.BUNDLED) and workloads (kdra/sim/data), named here so that building a
# parser imports neither package; tests/cli/test_conventions.py keeps them equal.
BUNDLED_FLEETS = ("alibaba-openb", "mixed", "node-types", "uniform-500")


def bundled_workloads() -> list[str]:
    data = Path(__file__).resolve().parents[1] / "sim" / "data"
    return sorted(p.name.removesuffix(".yaml") for p in data.glob("*.yaml"))


def add_workload_arg(p: argparse.ArgumentParser, *, default: str = "mixed-month") -> None:
    """--workload WORKLOAD: a bundled name or a file or folder of objects (and WorkloadGenerators)."""
    from kdra.cli.conventions import add_flag

    add_flag(
        p,
        "--workload",
        default=default,
        help=f"workload: a bundled name ({', '.join(bundled_workloads())}) or a file or folder of Kubernetes "
        f"objects and/or WorkloadGenerators (default: {default})",
    )


# The policies of kdra.scheduler.devicepref (tests/cli/test_main.py keeps the two equal); named here so that
# building a parser does not import the allocator (start-up time).
DEVICE_PREFERENCES = ("fragmentation", "binpack", "spread", "topology")


# kdra.scheduler.fragmentation.PLACEMENT_POLICIES (not imported here: the CLI starts without the scheduler)
PLACEMENTS = ("upstream", "binpack", "spread", "fragmentation", "kdra")


def add_device_preference_arg(p: argparse.ArgumentParser, what_records: str) -> None:
    """--device-preference POLICY (opt-in; default: upstream's first fit)."""
    p.add_argument(
        "--device-preference",
        choices=DEVICE_PREFERENCES,
        default=None,
        help="order the devices tried on a node by this policy instead of upstream's first fit (opt-in)"
        + (f"; {what_records}" if what_records else ""),
    )


def add_gates_arg(p: argparse.ArgumentParser, *, feature_gates: bool = True) -> None:
    """--kubernetes-version (one of kdra.api.versions.SUPPORTED_VERSIONS, default DEFAULT_VERSION: that
    release's gate defaults, locked gates, API validation and allocator) and, unless `feature_gates` is
    False, --feature-gates (repeatable)."""
    from kdra.api.versions import DEFAULT_VERSION, SUPPORTED_VERSIONS
    from kdra.cli.conventions import add_flag

    add_flag(
        p,
        "--kubernetes-version",
        choices=SUPPORTED_VERSIONS,
        default=DEFAULT_VERSION,
        metavar="VERSION",
        help=f"behave like this Kubernetes release: {', '.join(SUPPORTED_VERSIONS)} "
        f"(default {DEFAULT_VERSION}): its feature-gate defaults, locked gates, API validation and allocator",
    )
    if feature_gates:
        add_flag(
            p,
            "--feature-gates",
            help="override the release's feature-gate defaults, e.g. DRAListTypeAttributes=true (repeatable)",
        )


def gates_text(args: argparse.Namespace) -> str:
    value = getattr(args, "feature_gates", "") or ""
    return ",".join(value) if isinstance(value, list) else str(value)


def feature_gates(args: argparse.Namespace) -> FeatureGates:
    """The FeatureGates the flags describe; InputError (exit 2) for what the release refuses (unknown or
    locked gates, a gate on whose dependency is off), with the components' wording."""
    from kdra.api.features import DEFAULT_VERSION, FeatureGates

    version = getattr(args, "kubernetes_version", None) or DEFAULT_VERSION
    return FeatureGates.parse(gates_text(args), version=version)


def add_fleet_arg(
    p: argparse.ArgumentParser, *, default: str | None = "mixed", required: bool = False, what: str = "fleet"
) -> None:
    """-c/--fleet FLEET: a Fleet file, a node-list CSV or a bundled name (the same flag in every command)."""
    from kdra.cli.conventions import add_flag

    add_flag(
        p,
        "--fleet",
        default=default,
        required=required,
        help=f"{what}: a Fleet file, a node-list CSV or a bundled name ({', '.join(BUNDLED_FLEETS)})"
        + (f" (default: {default})" if default else ""),
    )


def add_limit_args(p: argparse.ArgumentParser, *, nodes: bool = True, pods: bool = False) -> None:
    """--max-nodes / --max-pods: lift the bounds that stop a typo from running for hours."""
    from kdra.fleets.spec import MAX_NODES
    from kdra.sim.workload import MAX_PODS

    if nodes:
        p.add_argument(
            "--max-nodes",
            type=int,
            default=MAX_NODES,
            metavar="N",
            help=f"refuse fleets of more nodes (default {MAX_NODES:,})",
        )
    if pods:
        p.add_argument(
            "--max-pods",
            type=int,
            default=MAX_PODS,
            metavar="N",
            help=f"refuse workloads of more pods (default {MAX_PODS:,})",
        )


def limits(args: argparse.Namespace) -> dict[str, int]:
    out = {}
    for flag in ("max_nodes", "max_pods"):
        value = getattr(args, flag, None)
        if value is not None:
            out[flag] = positive_int("--" + flag.replace("_", "-"), int(value))
    return out


def positive_int(flag: str, value: int, minimum: int = 1) -> int:
    if value < minimum:
        raise InputError(f"{flag}: Invalid value: {value}: must be at least {minimum}")
    return value


@contextmanager
def cel_progress(command: str, *, period: float = 15.0, stream: TextIO | None = None) -> Iterator[None]:
    """While the block runs, a line on stderr every `period` seconds of CEL selector work (selectors within
    the cost limit can still take minutes on a large fleet: a 300 x 300 comprehension costs ~0.9 million
    units per device), so a long evaluation is never silent."""
    from kdra.allocator.index import CelBudget, active_cel_budget, cel_budget

    if active_cel_budget() is not None:  # an enclosing block already counts and reports
        yield
        return
    started = time.monotonic()
    out = stream if stream is not None else sys.stderr

    def report(budget: CelBudget) -> None:
        per = budget.spent / max(1, budget.evaluations)
        out.write(
            f"{command}: still evaluating CEL selectors after {time.monotonic() - started:.0f}s: "
            f"{budget.evaluations:,} device evaluations, {budget.spent:,} cost units "
            f"({per:,.0f} per device; Ctrl-C stops)\n"
        )
        out.flush()

    with cel_budget(None, on_progress=report, period=period):
        yield


def reporting_cel(
    command: str, func: Callable[[argparse.Namespace], int]
) -> Callable[[argparse.Namespace], int]:
    """`func`, a command's run function, inside cel_progress: commands that allocate report long CEL work."""

    def run(args: argparse.Namespace) -> int:
        with cel_progress(command):
            return func(args)

    return run


class Progress:
    """Progress of a long run on stderr: a live bar when stderr is a terminal, otherwise one line every
    `period` seconds of wall time (so a CI log shows the run is alive), nothing for runs shorter than that.

    `update(key, done, total, what)` reports one task (a simulation mode, a replay cell)."""

    def __init__(
        self, tasks: Sequence[str], *, stream: TextIO | None = None, period: float = 15.0, unit: str = ""
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.period = period
        self.unit = unit
        self.tasks = list(tasks)
        self._bar: Any = None
        self._ids: dict[str, Any] = {}
        self._state: dict[str, tuple[float, float, str]] = {}
        self._started = time.monotonic()
        self._last_line = self._started

    def __enter__(self) -> Progress:
        if self.tty:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(
                TextColumn("{task.description:<28}"),
                BarColumn(),
                TextColumn("{task.percentage:>3.0f}%"),
                TimeElapsedColumn(),
                console=Console(file=self.stream),
                transient=True,
            )
            self._bar.__enter__()
            for t in self.tasks:
                self._ids[t] = self._bar.add_task(t, total=1.0)
        return self

    def update(self, key: str, done: float, total: float, what: str = "") -> None:
        if total <= 0:
            return
        self._state[key] = (done, total, what)
        if self._bar is not None:
            if key not in self._ids:
                self._ids[key] = self._bar.add_task(key, total=1.0)
            self._bar.update(self._ids[key], completed=min(1.0, done / total), description=what or key)
            return
        now = time.monotonic()
        if now - self._last_line >= self.period:
            self._last_line = now
            self.stream.write(self.line(now) + "\n")
            self.stream.flush()

    def line(self, now: float | None = None) -> str:
        elapsed = (now if now is not None else time.monotonic()) - self._started
        parts = []
        for key, (done, total, what) in self._state.items():
            parts.append(f"{what or key} {min(1.0, done / total):.0%}")
        return f"progress after {elapsed:.0f}s: " + ", ".join(parts)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
