"""A request for whole devices, also where a driver publishes devices for sharing (KEP-5075).

A device with `allowMultipleAllocations` is never allocated exclusively: every allocation of it is a share
that consumes what its request asks for, or the capacity's requestPolicy default when it asks for nothing
(NVIDIA's ConsumableShares publish `memory` with default 0: a plain request for such a GPU gets a share
with no memory). So "N whole GPUs", what `nvidia.com/gpu: N` meant to a device plugin, is in DRA terms:

1. devices published for one allocation at a time (`!device.allowMultipleAllocations`), taken exclusively;
2. else, for each capacity shape of the shareable devices the request could select: a share that consumes
   all of the device's capacity (every capacity at the most one allocation may take), on devices with
   those capacities, so that no other share asking for any of it fits beside it.

`whole_request` writes this as one request: `exactly` with the exclusion alone when no shareable device is
known, else `firstAvailable` with the exclusive devices first (they rank first in kube-scheduler's
prioritized-list scoring, KEP-4816) and one subrequest per shape. A share that asks for nothing at all of
a capacity whose policy allows zero still fits beside a whole one: that is what such a driver promises.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kdra.allocator.index import AllocatorIndex, CapacityEntry
from kdra.api.quantity import Quantity

EXCLUSIVE = "!device.allowMultipleAllocations"
MAX_SUBREQUESTS = 8  # firstAvailable's limit (resourceapi.FirstAvailableDeviceRequestMaxSize)

# (driver, ((capacity name, published value, amount one allocation takes at most), ...))
Shape = tuple[str, tuple[tuple[str, Quantity, Quantity], ...]]


def full_amount(cap: CapacityEntry) -> Quantity | None:
    """The most of this capacity one allocation may request (the value, bounded by the policy's range or
    values and rounded down to its step); None when the policy allows nothing within the value."""
    value = cap.value
    policy = cap.policy
    if policy is None:
        return value
    if policy.valid_values is not None:
        fitting = [v for v in policy.valid_values if not value < v]
        return max(fitting, key=lambda q: q.nanos) if fitting else None
    if policy.has_range:
        top = value if policy.range_max is None or value < policy.range_max else policy.range_max
        low = policy.range_min
        if low is None or top < low:
            return None if low is not None else top
        step = policy.range_step
        if step is None or step.nanos <= 0:
            return top
        steps = (top.nanos - low.nanos) // step.nanos
        return Quantity.from_nanos(low.nanos + steps * step.nanos, step.format)
    return value


def shareable_shapes(
    index: AllocatorIndex,
    class_name: str,
    selectors: Sequence[str] = (),
    limit: int | None = MAX_SUBREQUESTS - 1,
) -> list[Shape]:
    """The distinct capacity shapes of the shareable devices `class_name` and `selectors` select, most
    common first (then by value); by default at most what fits in one firstAvailable request beside the
    exclusive devices (None: all)."""
    counts: dict[Shape, int] = {}
    for dev in index.devices_of_class(class_name, selectors):
        if not dev.allow_multi or not dev.capacity:
            continue
        parts = []
        for name, cap in sorted(dev.capacity.items()):
            amount = full_amount(cap)
            if amount is None:
                break
            parts.append((name, cap.value, amount))
        else:
            shape = (dev.driver, tuple(parts))
            counts[shape] = counts.get(shape, 0) + 1
    ordered = sorted(counts, key=lambda s: (-counts[s], s[0], [(n, v.nanos) for n, v, _ in s[1]]))
    return ordered if limit is None else ordered[:limit]


def _quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


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


def device_index(objects: Iterable[Mapping[str, Any]], features: Any = None) -> AllocatorIndex:
    """An index of the DeviceClasses and ResourceSlices among `objects` (a fleet, a cluster export)."""
    objs = list(objects)
    classes = {str(o["metadata"]["name"]): o for o in objs if o.get("kind") == "DeviceClass"}
    slices = [o for o in objs if o.get("kind") == "ResourceSlice"]
    from kdra.allocator.features import FeatureGates

    return AllocatorIndex(classes, slices, features or FeatureGates())


__all__ = [
    "EXCLUSIVE",
    "Shape",
    "device_index",
    "full_amount",
    "shape_selector",
    "shareable_shapes",
    "whole_request",
]
