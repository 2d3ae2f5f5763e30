"""Consumable capacity (KEP-5075) as kube-scheduler 1.36 and 1.37 compute it (`CapacityRules`).

Ported from structured/internal/{incubating,experimental}/consumable_capacity.go: capacity
request names match device capacity names literally; a request naming a capacity the device does
not have makes the device ineligible; the amount consumed is the request rounded by the capacity's
requestPolicy, or the policy default, or the whole capacity when nothing is requested.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kdra.allocator.index import CapacityEntry, RequestPolicy
from kdra.api.quantity import BINARY_SI, Quantity

if TYPE_CHECKING:
    from kdra.api.features import FeatureGates


def _go_rem(a: int, b: int) -> int:
    """Go's % on int64: the remainder takes the sign of the dividend."""
    r = abs(a) % abs(b)
    return -r if a < 0 else r


def _go_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return -q if (a < 0) != (b < 0) else q


_MAX_INT64 = (1 << 63) - 1
_NANO = 1_000_000_000


class CapacityError(Exception):
    """A capacity request 1.37 refuses outright (it aborts the allocation, like a CEL runtime error):
    not representable in the device's range arithmetic, or a negative amount. The text is upstream's
    inner error (`capacity "mem": ...`); callers add the claim, request and device."""


@dataclass(frozen=True, slots=True)
class CapacityRules:
    """How a release computes consumed capacity: 1.36 rounds in whole units and reports BinarySI; 1.37
    reports in the step's format, rounds in milli-units with DRAFractionalCapacityRange, and refuses
    requests it cannot represent or negative amounts."""

    v1_36: bool = False
    fractional: bool = True
    # 1.38: capacity names are resolved to fully-qualified ones (a bare name is the driver's), a
    # negative request is refused before rounding (consumable_capacity.go, resolveCapacityRequests).
    qualified: bool = False

    @classmethod
    def of(cls, features: FeatureGates | None) -> CapacityRules:
        if features is None:
            return DEFAULT_RULES
        return cls(features.v1_36, features.fractional_capacity_range, features.qualified_capacity_names)


DEFAULT_RULES = CapacityRules()


def _use_milli(policy: RequestPolicy, rules: CapacityRules) -> bool:
    """useMilli (1.37): the gate is on, min/max/step are whole milli-values, and step >= 1m."""
    if rules.v1_36 or not rules.fractional:
        return False
    for q in (policy.range_min, policy.range_max, policy.range_step):
        if q is not None and (q.nanos % 1_000_000 or abs(q.milli_value()) > _MAX_INT64):
            return False
    return policy.range_step is None or policy.range_step.milli_value() >= 1


def _round_up_range(requested: Quantity, policy: RequestPolicy, rules: CapacityRules) -> Quantity:
    rmin = policy.range_min
    assert rmin is not None
    if requested < rmin:
        return rmin
    step = policy.range_step
    if step is None:
        return requested
    if _use_milli(policy, rules):
        if requested.nanos % 1_000_000:
            raise CapacityError(
                "capacity request cannot be represented in the device's range arithmetic: request "
                f"{requested} is not a representable milli value"
            )
        step_m, min_m = step.milli_value(), rmin.milli_value()
        added = requested.milli_value() - min_m
        n = _go_div(added, step_m) + (1 if _go_rem(added, step_m) else 0)
        value_m = min_m + step_m * n
        if value_m > _MAX_INT64:
            raise CapacityError(
                "capacity request cannot be represented in the device's range arithmetic: rounding request "
                f"{requested} up to the next step passes the milli-value range"
            )
        if value_m % 1000 == 0:
            return Quantity.from_int(value_m // 1000, step.format)
        return Quantity.from_milli(value_m, step.format)
    if not rules.v1_36 and requested.nanos > _MAX_INT64 * _NANO:
        raise CapacityError(
            f"capacity request cannot be represented in the device's range arithmetic: request {requested} "
            "exceeds MaxInt64"
        )
    step_v = step.value()
    if step_v == 0:
        return requested
    min_v = rmin.value()
    added = requested.value() - min_v
    n = _go_div(added, step_v)
    if _go_rem(added, step_v) != 0:
        n += 1
    if not rules.v1_36 and min_v >= 0 and n > (_MAX_INT64 - min_v) // step_v:
        raise CapacityError(
            "capacity request cannot be represented in the device's range arithmetic: rounding request "
            f"{requested} up to the next step passes MaxInt64"
        )
    # 1.36 reports the rounded amount as BinarySI, 1.37 in the step's format.
    return Quantity.from_int(min_v + step_v * n, BINARY_SI if rules.v1_36 else step.format)


def consumed_amount(
    requested: Quantity | None, cap: CapacityEntry, rules: CapacityRules = DEFAULT_RULES
) -> Quantity:
    """calculateConsumedCapacity: what one allocation takes from this capacity."""
    if rules.qualified and requested is not None and requested.sign() < 0:
        raise CapacityError(f"capacity value is negative: request {requested}")
    policy = cap.policy
    if requested is None:
        if policy is not None and policy.default is not None:
            return policy.default
        return cap.value
    if policy is None:
        return requested
    if policy.has_range and policy.range_min is not None:
        return _round_up_range(requested, policy, rules)
    if policy.valid_values is not None:
        for v in policy.valid_values:
            if requested <= v:
                return v
        return requested
    return requested


def violates_policy(
    amount: Quantity, policy: RequestPolicy | None, rules: CapacityRules = DEFAULT_RULES
) -> bool:
    if policy is None:
        return False
    if policy.default is not None and amount == policy.default:
        return False
    if policy.has_range:
        if policy.range_max is not None and amount > policy.range_max:
            return True
        if policy.range_step is not None:
            if _use_milli(policy, rules):
                if amount.nanos % 1_000_000:
                    return True
                rmin_m = policy.range_min.milli_value() if policy.range_min is not None else 0
                step_m = policy.range_step.milli_value()
                return _go_rem(amount.milli_value() - rmin_m, step_m) != 0
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


def qualify(name: str, driver: str) -> str:
    """The fully-qualified capacity name: a bare name belongs to the device's driver."""
    return name if "/" in name else f"{driver}/{name}"


def _qualified_device(capacity: Mapping[str, CapacityEntry], driver: str) -> dict[str, CapacityEntry]:
    """The device's capacities by fully-qualified name; the qualified spelling wins over the bare one
    (Convert_v1_To_api_DeviceCapacities)."""
    out: dict[str, CapacityEntry] = {}
    for name, cap in capacity.items():
        if "/" in name:
            out[name] = cap
        else:
            out.setdefault(qualify(name, driver), cap)
    return out


def _qualified_counts(counts: Mapping[str, int] | None, driver: str) -> dict[str, int] | None:
    if not counts:
        return None
    out: dict[str, int] = {}
    for name, n in counts.items():
        key = qualify(name, driver)
        out[key] = out.get(key, 0) + n
    return out


def _resolve_requests(
    requests: Mapping[str, Quantity] | None, capacity: Mapping[str, CapacityEntry], driver: str
) -> tuple[dict[str, Quantity] | None, str]:
    """resolveCapacityRequests: the requests by fully-qualified name, or the name the device lacks."""
    if not requests:
        return None, ""
    out: dict[str, Quantity] = {}
    for name, value in requests.items():
        key = qualify(name, driver)
        if key not in capacity:
            return None, name
        if key in out:
            ident = key.split("/", 1)[1]
            other = ident if name == key else key
            raise CapacityError(f'capacity "{ident}" requested both as "{name}" and as "{other}"')
        out[key] = value
    return out, ""


def check_capacity(
    requests: Mapping[str, Quantity] | None,
    capacity: Mapping[str, CapacityEntry],
    allocated: Mapping[str, int] | None,
    allocating: Mapping[str, int] | None,
    rules: CapacityRules = DEFAULT_RULES,
    driver: str = "",
) -> str:
    """CmpRequestOverCapacity: "" when the request fits, else a short reason. Raises CapacityError
    where 1.37 aborts (checked for every capacity before any soft failure, as upstream does)."""
    if rules.qualified:
        capacity = _qualified_device(capacity, driver)
        requests, missing = _resolve_requests(requests, capacity, driver)
        if missing:
            return f"has no capacity {missing}"
        allocated = _qualified_counts(allocated, driver)
        allocating = _qualified_counts(allocating, driver)
    if requests:
        for name in requests:
            if name not in capacity:
                return f"has no capacity {name}"
    amounts: dict[str, Quantity] = {}
    for name, cap in capacity.items():
        requested = requests.get(name) if requests else None
        try:
            amount = consumed_amount(requested, cap, rules)
        except CapacityError as err:
            raise CapacityError(f'capacity "{name}": {err}') from None
        if not rules.v1_36 and amount.sign() < 0:
            raise CapacityError(f'capacity "{name}": capacity value is negative')
        amounts[name] = amount
    for name, cap in capacity.items():
        requested = requests.get(name) if requests else None
        amount = amounts[name]
        if violates_policy(amount, cap.policy, rules):
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
    requests: Mapping[str, Quantity] | None,
    capacity: Mapping[str, CapacityEntry],
    rules: CapacityRules = DEFAULT_RULES,
    driver: str = "",
) -> dict[str, Quantity]:
    """GetConsumedCapacityFromRequest: the amount taken from every capacity of the device, named as
    the device names it (1.38's capacityNameForStatus: bare unless the slice spelled it qualified)."""
    if not rules.qualified:
        return {
            name: consumed_amount(requests.get(name) if requests else None, cap, rules)
            for name, cap in capacity.items()
        }
    spelled = {name for name in capacity if "/" in name}
    qualified = _qualified_device(capacity, driver)
    resolved, _ = _resolve_requests(requests, qualified, driver)
    out: dict[str, Quantity] = {}
    for key, cap in qualified.items():
        domain, ident = key.split("/", 1)
        name = ident if domain == driver and key not in spelled else key
        out[name] = consumed_amount(resolved.get(key) if resolved else None, cap, rules)
    return out
