"""Durations as users write them, in workloads and in scheduling objects: `90`, `90s`, `500ms`, `15m`,
`2h30m`, `1d`, `1w` (Go's time.ParseDuration forms down to ms, plus days and weeks; seconds out). One parser
for the simulator's arrivals and run times and the scheduler's gang timeouts and queue periods."""

from __future__ import annotations

import math
import re

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")  # ms before m


# The longest duration accepted: simulated time is stamped as dates from 2026 (kdra.cluster.clock), and
# datetime ends in year 9999; 1,000 years leaves room for an arrival plus a run time, and is no typo's limit.
MAX_SECONDS = 1000 * 365 * 86400
_FORMS = "must be a duration such as 90s, 15m, 2h30m, 1d"


def parse_duration(value: object, where: str) -> float:
    """Seconds of a duration; raises InputError naming `where` and the accepted forms. NaN, infinity
    (`.nan`, "inf", 1e999) and durations beyond MAX_SECONDS are refused: NaN stalled the event queue and
    a date past year 9999 was an OverflowError."""
    from kdra.errors import InputError

    seconds: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = math.inf if value >= 1e300 else float(value)  # float(10**400) would raise
    elif isinstance(value, str):
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            pos = 0
            total = 0.0
            for m in _PART.finditer(text):
                if m.start() != pos:
                    break
                total += float(m.group(1)) * _UNITS[m.group(2)]
                pos = m.end()
            if pos == len(text) and text:
                seconds = total
    if seconds is None or math.isnan(seconds):
        raise InputError(f"{where}: Invalid value: {value!r}: {_FORMS}")
    if seconds < 0:
        raise InputError(f"{where}: Invalid value: {value!r}: must not be negative")
    if seconds > MAX_SECONDS:
        raise InputError(
            f"{where}: Invalid value: {value!r}: must be a duration of at most 1000 years (365000d)"
        )
    return seconds


def format_duration(seconds: float) -> str:
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            parts.append(f"{s // size}{unit}")
            s %= size
        if len(parts) == 2:
            break
    if not parts:
        return f"{s}s"
    return "".join(parts)
