"""Consumable capacity (KEP-5075) as kube-scheduler 1.36 computes it.

Ported from structured/internal/experimental/consumable_capacity.go (1.36 behaviour): capacity
request names match device capacity names literally; a request naming a capacity the device does
not have makes the device ineligible; the amount consumed is the request rounded by the capacity's
requestPolicy, or the policy default, or the whole capacity when nothing is requested.
"""

from __future__ import annotations

from collections.abc import Mapping

from kdra.allocator.index import CapacityEntry, RequestPolicy
from kdra.api.quantity import BINARY_SI, Quantity


def _go_rem(a: int, b: int) -> int:
    """Go's % on int64: the remainder takes the sign of the dividend."""
    r = abs(a) % abs(b)
    return -r if a < 0 else r


def _go_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return -q if (a < 0) != (b < 0) else q


def _round_up_range(requested: Quantity, policy: RequestPolicy) -> Quantity:
    rmin = policy.range_min
    assert rmin is not None
    if requested < rmin:
        return rmin
    step = policy.range_step
    if step is None:
        return requested
    step_v = step.value()
    if step_v == 0:
        return requested
    min_v = rmin.value()
    added = requested.value() - min_v
    n = _go_div(added, step_v)
    if _go_rem(added, step_v) != 0:
        n += 1
    return Quantity.from_int(min_v + step_v * n, BINARY_SI)


def consumed_amount(requested: Quantity | None, cap: CapacityEntry) -> Quantity:
    """calculateConsumedCapacity: what one allocation takes from this capacity."""
    policy = cap.policy
    if requested is None:
        if policy is not None and policy.default is not None:
            return policy.default
        return cap.value
    if policy is None:
        return requested
    if policy.has_range and policy.range_min is not None:
        return _round_up_range(requested, policy)
    if policy.valid_values is not None:
        for v in policy.valid_values:
            if requested <= v:
                return v
        return requested
    return requested


def violates_policy(amount: Quantity, policy: RequestPolicy | None) -> bool:
    if policy is None:
        return False
    if policy.default is not None and amount == policy.default:
        return False
    if policy.has_range:
        if policy.range_max is not None and amount > policy.range_max:
            return True
        if policy.range_step is not None:
            step = policy.range_step.value()
            rmin = policy.range_min.value() if policy.range_min is not None else 0
            if step != 0 and _go_rem(amount.value() - rmin, step) != 0:
                return True
        return False
    if policy.valid_values:
        return all(amount != v for v in policy.valid_values)
    return False


# Why a device cannot take a capacity request (for explanations); "" means it fits.
CAP_OK = ""


def check_capacity(
    requests: Mapping[str, Quantity] | None,
    capacity: Mapping[str, CapacityEntry],
    allocated: Mapping[str, int] | None,
    allocating: Mapping[str, int] | None,
) -> str:
    """CmpRequestOverCapacity: "" when the request fits, else a short reason."""
    if requests:
        for name in requests:
            if name not in capacity:
                return f"has no capacity {name}"
    for name, cap in capacity.items():
        requested = requests.get(name) if requests else None
        amount = consumed_amount(requested, cap)
        if violates_policy(amount, cap.policy):
            return (
                f"{name}: request {requested if requested is not None else amount} violates the requestPolicy"
            )
        total = amount.nanos
        if allocated:
            total += allocated.get(name, 0)
        if allocating:
            total += allocating.get(name, 0)
        if total > cap.value.nanos:
            used = total - amount.nanos
            if used:
                return (
                    f"{name}: needs {amount}, {Quantity.from_nanos(cap.value.nanos - used, cap.value.format)}"
                    f" of {cap.value} left"
                )
            return f"{name}: needs {amount}, has {cap.value}"
    return CAP_OK


def consumed_capacity(
    requests: Mapping[str, Quantity] | None, capacity: Mapping[str, CapacityEntry]
) -> dict[str, Quantity]:
    """GetConsumedCapacityFromRequest: the amount taken from every capacity of the device."""
    return {
        name: consumed_amount(requests.get(name) if requests else None, cap) for name, cap in capacity.items()
    }
