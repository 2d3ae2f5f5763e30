"""The virtual clock: seconds since the simulation epoch, rendered as RFC 3339 timestamps."""

from __future__ import annotations

import datetime as _dt
from functools import lru_cache

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
