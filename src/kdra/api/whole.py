"""A DeviceRequest for whole devices, also where a driver publishes devices for sharing (KEP-5075).

A device with `allowMultipleAllocations` is never allocated exclusively: every allocation of it is a share
that consumes what its request asks for, or the capacity's requestPolicy default when it asks for nothing
(NVIDIA's ConsumableShares publish `memory` with default 0: a plain request for such a GPU gets a share
with no memory). So "N whole GPUs", what `nvidia.com/gpu: N` meant to a device plugin, is in DRA terms:

1. devices published for one allocation at a time (`!device.allowMultipleAllocations`), taken exclusively;
2. else, for each capacity shape of the shareable devices the request could meet: a share that consumes all
   of the device's capacity (every capacity at the most one allocation may take), on devices with those
   capacities, so that no other share asking for any of it fits beside it.

`whole_request` writes this as one request: `exactly` with the exclusion alone when no shareable shape is
known, else `firstAvailable` with the exclusive devices first (they rank first in kube-scheduler's
prioritized-list scoring, KEP-4816) and one subrequest per shape. A share that asks for nothing at all of a
capacity whose policy allows zero still fits beside a whole one: that is what such a driver promises.
Which shapes a fleet has: kdra.allocator.whole (this module stays free of the allocator, for `kdra migrate`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any

from kdra.api.quantity import Quantity

EXCLUSIVE = "!device.allowMultipleAllocations"
MAX_SUBREQUESTS = 8  # firstAvailable's limit (resourceapi.FirstAvailableDeviceRequestMaxSize)

# (driver, ((capacity name, published value, amount one allocation takes at most), ...))
Shape = tuple[str, tuple[tuple[str, Quantity, Quantity], ...]]


def memory_shape(driver: str, memory: Quantity) -> Shape:
    """A shareable device known by its memory alone (a catalog model): all of it."""
    return (driver, (("memory", memory, memory),))


def _quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


@functools.lru_cache(maxsize=256)
def shape_selector(shape: Shape) -> str:
    """CEL that selects the shareable devices with this shape's capacities (each of the same value)."""
    driver, parts = shape
    domains: dict[str, list[tuple[str, Quantity]]] = {}
    for name, value, _amount in parts:
        domain, sep, ident = name.partition("/")
        if not sep:
            domain, ident = driver, name
        domains.setdefault(domain, []).append((ident, value))
    terms = ["device.allowMultipleAllocations", f"device.driver == {_quote(driver)}"]
    for domain, caps in domains.items():
        ref = f"device.capacity[{_quote(domain)}]"
        for ident, value in caps:
            terms.append(f"{_quote(ident)} in {ref}")
            terms.append(f"{ref}[{_quote(ident)}].compareTo(quantity({_quote(str(value))})) == 0")
    return " && ".join(terms)


def whole_request(
    name: str,
    class_name: str,
    count: int,
    selectors: Sequence[str] = (),
    shapes: Iterable[Shape] = (),
) -> dict[str, Any]:
    """A DeviceRequest for `count` whole devices of `class_name` (see the module docstring)."""

    def sub(extra: str) -> dict[str, Any]:
        body: dict[str, Any] = {"deviceClassName": class_name, "count": count}
        body["selectors"] = [{"cel": {"expression": e}} for e in (*selectors, extra)]
        return body

    shapes = list(shapes)
    if not shapes:
        return {"name": name, "exactly": sub(EXCLUSIVE)}
    subs = [{"name": "exclusive", **sub(EXCLUSIVE)}]
    for i, shape in enumerate(shapes[: MAX_SUBREQUESTS - 1]):
        body = sub(shape_selector(shape))
        body["capacity"] = {"requests": {n: str(amount) for n, _v, amount in shape[1]}}
        subs.append({"name": f"full-share-{i + 1}", **body})
    return {"name": name, "firstAvailable": subs}


__all__ = ["EXCLUSIVE", "MAX_SUBREQUESTS", "Shape", "memory_shape", "shape_selector", "whole_request"]
