"""Clocks: the simulation's virtual clock and Kubernetes mode's wall clock (the session's clock seam).

A clock is called for the current time in seconds and formats a time as the RFC 3339 timestamp Kubernetes
objects carry (`format`). Decisions only ever compare times from one clock; timestamps written into
objects come from the same clock's `format`, so a simulation writes virtual dates (from `EPOCH`) and a
live scheduler real ones.
"""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Callable
from functools import lru_cache
from typing import Any

# The simulation epoch: timestamps kdra writes are this instant plus virtual seconds.
EPOCH = _dt.datetime(2026, 1, 1, tzinfo=_dt.UTC)


def format_time(seconds: float) -> str:
    """RFC 3339 (metav1.Time's format, second precision) of a virtual time."""
    return _format_seconds(int(seconds))


@lru_cache(maxsize=4096)
def _format_seconds(seconds: int) -> str:
    t = EPOCH + _dt.timedelta(seconds=seconds)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


class VirtualClock:
    """A clock that only moves when told to; never sleeps."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance_to(self, t: float) -> None:
        if t > self.now:
            self.now = t

    @staticmethod
    def format(t: float) -> str:
        return format_time(t)

    @staticmethod
    def parse(text: str) -> float:
        return parse_time(text)


class WallClock:
    """Seconds since the Unix epoch (time.time); what a scheduler on a live cluster decides by."""

    def __call__(self) -> float:
        return time.time()

    @staticmethod
    def format(t: float) -> str:
        return _dt.datetime.fromtimestamp(t, _dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    @staticmethod
    def parse(text: str) -> float:
        return _rfc3339(text).timestamp()


def _rfc3339(text: str) -> _dt.datetime:
    t = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return t if t.tzinfo is not None else t.replace(tzinfo=_dt.UTC)


def parse_time(text: str) -> float:
    """A virtual time from a timestamp written with `format_time`."""
    return (_rfc3339(text) - EPOCH).total_seconds()


def parser(clock: Callable[[], float] | Any) -> Callable[[str], float]:
    """How `clock` reads a timestamp an object carries (the inverse of `formatter`)."""
    parse = getattr(clock, "parse", None)
    return parse if callable(parse) else parse_time


def formatter(clock: Callable[[], float] | Any) -> Callable[[float], str]:
    """How timestamps of `clock` are written: its own `format`, else the virtual epoch's."""
    fmt = getattr(clock, "format", None)
    return fmt if callable(fmt) else format_time
