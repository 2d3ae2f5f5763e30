"""Which whole-device shapes a fleet has (kdra.api.whole writes the request): the most one allocation may
take of each capacity of a shareable device (`full_amount`, under its requestPolicy), and the distinct
shapes of the shareable devices a class and selectors meet (`shareable_shapes`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kdra.allocator.index import AllocatorIndex, CapacityEntry
from kdra.api.features import FeatureGates
from kdra.api.quantity import Quantity
from kdra.api.whole import MAX_SUBREQUESTS, Shape


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


def device_index(
    objects: Iterable[Mapping[str, Any]], features: FeatureGates | None = None
) -> AllocatorIndex:
    """An index of the DeviceClasses, ResourceSlices and DeviceTaintRules among `objects` (a fleet, a
    cluster export)."""
    objs = list(objects)
    classes = {str(o["metadata"]["name"]): o for o in objs if o.get("kind") == "DeviceClass"}
    slices = [o for o in objs if o.get("kind") == "ResourceSlice"]
    rules = [o for o in objs if o.get("kind") == "DeviceTaintRule"]
    return AllocatorIndex(classes, slices, features or FeatureGates(), taint_rules=rules)


__all__ = ["device_index", "full_amount", "shareable_shapes"]
