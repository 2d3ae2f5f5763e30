"""Durations as users write them in workloads: `90`, `90s`, `15m`, `2h30m`, `1d`, `1w` (seconds out)."""

from __future__ import annotations

import math
import re

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def parse_duration(value: object, where: str) -> float:
    """Seconds of a duration; raises ValueError naming `where` and the accepted forms."""
    from kdra.errors import InputError

    if isinstance(value, bool):
        raise InputError(f"{where}: Invalid value: {value!r}: must be a duration such as 90s, 15m, 2h30m, 1d")
    if isinstance(value, (int, float)):
        if value < 0:
            raise InputError(f"{where}: Invalid value: {value!r}: must not be negative")
        if value < 1e300:  # not NaN or infinity (`.nan`, "inf", 1e999): they stall the event queue
            return float(value)
        raise InputError(f"{where}: Invalid value: {value!r}: must be a duration such as 90s, 15m, 2h30m, 1d")
    if isinstance(value, str):
        text = value.strip()
        try:
            v = float(text)
        except ValueError:
            pass
        else:
            if v < 0:
                raise InputError(f"{where}: Invalid value: {value!r}: must not be negative")
            if math.isfinite(v):
                return v
            raise InputError(
                f"{where}: Invalid value: {value!r}: must be a duration such as 90s, 15m, 2h30m, 1d"
            )
        pos = 0
        total = 0.0
        for m in _PART.finditer(text):
            if m.start() != pos:
                break
            total += float(m.group(1)) * _UNITS[m.group(2)]
            pos = m.end()
        if pos == len(text) and text and math.isfinite(total):
            return total
    raise InputError(f"{where}: Invalid value: {value!r}: must be a duration such as 90s, 15m, 2h30m, 1d")


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
