"""Polling for tests and harnesses: wait until the cluster shows what a test expects.

Every e2e wait goes through `wait_for`, so that two things hold everywhere:
- one timeout factor (`KDRA_E2E_TIMEOUT_FACTOR`, default 1) stretches every wait on a slower runner
  instead of failing it;
- a wait that times out says what it last saw and prints the tail of every log registered with
  `diagnose` (the kdra processes a test started, the control plane's components), so a failure explains
  itself from the lane log alone.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from kdra.cluster.store import StoreError

T = TypeVar("T")

TIMEOUT_FACTOR_ENV = "KDRA_E2E_TIMEOUT_FACTOR"
_SEEN_CHARS = 1500  # of the last value seen, in a timeout's message
_LOG_LINES = 40  # of each registered log, in a timeout's message


class WaitTimeout(TimeoutError, AssertionError):
    """A wait ran out: an AssertionError for pytest's report, a TimeoutError for callers that add
    context of their own."""


def timeout_factor() -> float:
    raw = os.environ.get(TIMEOUT_FACTOR_ENV, "").strip()
    if not raw:
        return 1.0
    try:
        factor = float(raw)
    except ValueError:
        raise ValueError(f"{TIMEOUT_FACTOR_ENV}={raw!r}: must be a number >= 1") from None
    if factor < 1:
        raise ValueError(f"{TIMEOUT_FACTOR_ENV}={raw!r}: must be a number >= 1")
    return factor


def scaled(seconds: float) -> float:
    """`seconds` stretched by the runner's timeout factor: every deadline a test sets goes through it."""
    return seconds * timeout_factor()


# Logs whose tails explain a failure: name -> function returning the tail (registered while relevant).
_logs: dict[str, Callable[[], str]] = {}


def diagnose(name: str, tail: Callable[[], str]) -> None:
    """Register a log whose tail every timed-out wait (and a failed e2e test's report) prints."""
    _logs[name] = tail


def file_tail(path: os.PathLike[str] | str, chars: int = 16_000) -> Callable[[], str]:
    """A log tail reader for `diagnose`: the end of the file at `path` (read when a failure is reported)."""

    def tail() -> str:
        try:
            with open(path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - chars))
                return f.read().decode(errors="replace")
        except OSError as e:
            return f"(no log: {e})"

    return tail


def forget(name: str) -> None:
    _logs.pop(name, None)


@contextmanager
def diagnosing(name: str, tail: Callable[[], str]) -> Iterator[None]:
    diagnose(name, tail)
    try:
        yield
    finally:
        forget(name)


def lines_naming(path: os.PathLike[str] | str, needle: str, chars: int = 4_000_000) -> Callable[[], str]:
    """A log reader for `diagnose`: the lines near the end of the file at `path` that contain `needle` (what a
    shared component, e.g. kube-scheduler, said about one test's namespace among every other test's lines)."""
    tail = file_tail(path, chars)

    def naming() -> str:
        return "\n".join(line for line in tail().splitlines() if needle in line)

    return naming


def clear_diagnostics() -> None:
    _logs.clear()


def diagnostics(lines: int = _LOG_LINES, skip: Callable[[], str] | None = None) -> str:
    """The tails of every registered log (but `skip`, printed already), each under a heading."""
    out = []
    for name, tail in list(_logs.items()):
        if skip is not None and tail == skip:
            continue
        try:
            text = tail()
        except Exception as e:  # a diagnostic must never hide the failure it explains
            text = f"(could not read: {e})"
        body = "\n".join(text.splitlines()[-lines:]) or "(empty)"
        out.append(f"----- {name} (last {lines} lines) -----\n{body}")
    return "\n".join(out)


def _brief(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SEEN_CHARS else text[:_SEEN_CHARS] + f"... ({len(text)} chars)"


def wait_for(
    fn: Callable[[], T | None],
    timeout: float,
    what: str,
    interval: float = 0.2,
    log: Callable[[], str] | None = None,
) -> T:
    """Poll `fn` until it returns something truthy and return that; otherwise raise `WaitTimeout` naming
    `what`, with the last value `fn` returned, the last API error and the registered logs' tails (and
    `log()`'s, when given). API and connection errors count as "not yet" (components still starting).
    `timeout` is stretched by the runner's timeout factor."""
    limit = scaled(timeout)
    deadline = time.monotonic() + limit
    last_exc: BaseException | None = None
    seen: object = None
    polled = False
    while True:
        try:
            value = fn()
            seen, polled = value, True
            if value:
                return value
        except WaitTimeout:
            raise  # a wait inside `fn` ran out: that is the failure, not a "not yet"
        except (StoreError, OSError) as e:
            last_exc = e
        if time.monotonic() >= deadline:
            parts = [f"timed out after {limit:.0f}s waiting for {what}"]
            if polled:
                parts.append(f"last seen: {_brief(seen)}")
            if last_exc is not None:
                parts.append(f"last error: {last_exc}")
            if log is not None:
                parts.append(f"----- log -----\n{log()}")
            logs = diagnostics(skip=log)
            if logs:
                parts.append(logs)
            raise WaitTimeout("\n".join(parts))
        time.sleep(interval)


def stays(fn: Callable[[], object], seconds: float, what: str, interval: float = 0.2) -> None:
    """Check that `fn` stays truthy for `seconds` (stretched by the timeout factor): for what must NOT
    happen (a standby that must not lead, a pod that must not bind), where there is no event to wait for.
    Raises AssertionError with the value that broke it and the registered logs' tails."""
    deadline = time.monotonic() + scaled(seconds)
    while True:
        value = fn()
        if not value:
            logs = diagnostics()
            raise AssertionError(f"{what} did not hold: got {_brief(value)}" + (f"\n{logs}" if logs else ""))
        if time.monotonic() >= deadline:
            return
        time.sleep(interval)
