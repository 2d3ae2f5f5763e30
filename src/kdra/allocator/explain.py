"""Why claims do not fit on a node, in terms a user can act on.

kube-scheduler only says "cannot allocate all claims". After kdra's search has failed (never on the
successful path) this module walks the node's devices once per request, using the selector results
the search already cached, and counts what stood in the way: devices the class selected, how many
the request selectors kept, how many were in use, blocked by counters, capacity or taints, pools that
were skipped, constraints no group of devices satisfies, and the nearest miss (the device that came
closest to passing the selectors, with the values its failing selector looks at).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, cast

from kdra.allocator.index import (
    MATCH,
    AttributeScalar,
    DeviceEntry,
    SelectorError,
    attribute_value,
    display_attribute,
)
from kdra.api.quantity import in_unit_of

if TYPE_CHECKING:
    from kdra.allocator.allocator import ReqData, _Run


@dataclass
class NearestMiss:
    """The device that passed the most selectors before one returned false."""

    device: str  # driver/pool/device
    selector_index: int
    from_class: bool
    expression: str
    values: dict[str, str]  # referenced attribute/capacity name -> the device's value
    needs: str  # the failing condition, simplified when it has a recognised shape

    def __str__(self) -> str:
        name = self.device.rsplit("/", 1)[-1]
        vals = ", ".join(f"{k} {in_unit_of(v, self.needs)}" for k, v in self.values.items())
        which = "class selector" if self.from_class else "selector"
        head = f"{name}: {vals}, " if vals else f"{name}: "
        return f"{head}{which} #{self.selector_index} needs {self.needs}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "selector": self.selector_index,
            "classSelector": self.from_class,
            "expression": self.expression,
            "values": dict(self.values),
            "needs": self.needs,
            "text": str(self),
        }


@dataclass
class RequestExplanation:
    claim: str
    request: str
    device_class: str
    mode: str
    needed: int
    class_selected: int = 0
    request_selected: int = 0
    in_use: int = 0
    blocked_by_counters: int = 0
    blocked_by_capacity: int = 0
    blocked_by_taints: int = 0
    blocked_by_constraints: int = 0
    selector_errors: int = 0
    not_on_node: int = 0  # per-device node selection excludes this node
    binding_conditions_off: int = 0  # devices with binding conditions while the gate is off
    usable: int = 0
    examples: dict[str, str] = field(default_factory=dict)  # category -> one device and why
    nearest_miss: NearestMiss | None = None
    # When nothing here is kept: other DeviceClasses whose devices here would match the request's own
    # selectors, with how many (a whole A100 asked of gpu.nvidia.com where A100s are only MIG devices).
    other_classes: dict[str, int] = field(default_factory=dict)

    @property
    def fits_alone(self) -> bool:
        return self.usable >= self.needed if self.mode != "All" else self.usable == self.needed > 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "claim": self.claim,
            "request": self.request,
            "deviceClass": self.device_class,
            "allocationMode": self.mode,
            "needed": self.needed,
            "classSelected": self.class_selected,
            "requestSelected": self.request_selected,
            "inUse": self.in_use,
            "blockedByCounters": self.blocked_by_counters,
            "blockedByCapacity": self.blocked_by_capacity,
            "blockedByTaints": self.blocked_by_taints,
            "blockedByConstraints": self.blocked_by_constraints,
            "selectorErrors": self.selector_errors,
            "notOnNode": self.not_on_node,
            "bindingConditionsGateOff": self.binding_conditions_off,
            "usable": self.usable,
            "fitsAlone": self.fits_alone,
            "examples": dict(self.examples),
            "nearestMiss": self.nearest_miss.to_dict() if self.nearest_miss else None,
            "otherClasses": dict(self.other_classes),
        }

    def lines(self) -> list[str]:
        need = f"all ({self.needed} found)" if self.mode == "All" else str(self.needed)
        out = [f"claim {self.claim}, request {self.request} (class {self.device_class}, needs {need}):"]
        parts = [
            f"{self.class_selected} device(s) selected by the class",
            f"{self.request_selected} kept by the request selectors",
        ]
        blocked = [
            (self.in_use, "in use"),
            (self.blocked_by_counters, "blocked by counters"),
            (self.blocked_by_capacity, "blocked by capacity"),
            (self.blocked_by_taints, "blocked by taints"),
            (self.blocked_by_constraints, "without the constrained attribute"),
            (self.selector_errors, "with selector errors"),
        ]
        parts += [f"{n} {what}" for n, what in blocked if n]
        excluded = [
            (self.not_on_node, "not available on this node (per-device node selection)"),
            (self.binding_conditions_off, "with binding conditions (DRADeviceBindingConditions is off)"),
        ]
        out.append("  " + ", ".join(parts) + f" -> {self.usable} usable")
        for n, what in excluded:
            if n:
                out.append(f"  excluded before selection: {n} device(s) {what}")
        for category, text in self.examples.items():
            out.append(f"  {category}: {text}")
        if self.nearest_miss is not None:
            out.append(f"  nearest miss: {self.nearest_miss}")
        if self.other_classes:
            found = ", ".join(f"{n} of class {c}" for c, n in self.other_classes.items())
            out.append(f"  devices here that match the request's selectors: {found}")
        return out


@dataclass
class Explanation:
    """Structured reasons why the claims do not fit on `node`; `str()` for people, `to_dict()` for JSON."""

    node: str
    requests: list[RequestExplanation] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)  # claim-level and node-level findings
    incomplete_pools: list[str] = field(default_factory=list)
    incomplete_detail: dict[str, str] = field(default_factory=dict)
    invalid_pools: dict[str, str] = field(default_factory=dict)
    search_limit_hit: bool = False
    steps: int = 0

    @property
    def summary(self) -> str:
        if self.reasons:
            return self.reasons[0]
        return "cannot allocate all claims"

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "summary": self.summary,
            "reasons": list(self.reasons),
            "requests": [r.to_dict() for r in self.requests],
            "incompletePools": list(self.incomplete_pools),
            "incompletePoolDetails": dict(self.incomplete_detail),
            "invalidPools": dict(self.invalid_pools),
            "searchLimitHit": self.search_limit_hit,
            "steps": self.steps,
        }

    def __str__(self) -> str:
        head = (
            "gave up searching for an allocation" if self.search_limit_hit else "cannot allocate all claims"
        )
        out = [f"node {self.node}: {head}"]
        for reason in self.reasons:
            out.append(f"  {reason}")
        for r in self.requests:
            out.extend("  " + line for line in r.lines())
        for pool in self.incomplete_pools:
            out.append(f"  pool {pool} skipped: incomplete ({self.incomplete_detail.get(pool, '')})")
        for pool, why in self.invalid_pools.items():
            out.append(f"  pool {pool} skipped: invalid ({why})")
        return "\n".join(out)


# ---------------------------------------------------------------------------------------------


_REF = re.compile(
    r"""device\.(attributes|capacity)\[\s*["']([^"']+)["']\s*\]"""
    r"""(?:\.([A-Za-z_][A-Za-z0-9_]*)|\[\s*["']([^"']+)["']\s*\])"""
)
_QTY = r"""quantity\(\s*["']([^"']+)["']\s*\)"""
_CMP_OPS = {">=": ">=", ">": ">", "<=": "<=", "<": "<", "==": "==", "!=": "!="}


def _referenced_values(dev: DeviceEntry, expression: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for m in _REF.finditer(expression):
        kind, domain, ident = m.group(1), m.group(2), m.group(3) or m.group(4)
        label = ident if domain == dev.driver else f"{domain}/{ident}"
        if kind == "attributes":
            raw = dev.attribute(f"{domain}/{ident}")
            values[label] = display_attribute(raw) if raw is not None else "<not set>"
        else:
            cap = dev.capacity.get(f"{domain}/{ident}")
            if cap is None and domain == dev.driver:
                cap = dev.capacity.get(ident)
            values[label] = str(cap.value) if cap is not None else "<not set>"
    if "device.driver" in expression:
        values["driver"] = dev.driver
    if "device.allowMultipleAllocations" in expression:
        values["allowMultipleAllocations"] = "true" if dev.allow_multi else "false"
    return values


def _needs(expression: str) -> str:
    """The failing condition without the device reference, for recognised shapes."""
    expr = expression.strip()
    ref = _REF.pattern
    m = re.fullmatch(rf"{ref}\.compareTo\(\s*{_QTY}\s*\)\s*(>=|>|<=|<|==|!=)\s*0", expr)
    if m:
        return f"{_CMP_OPS[m.group(6)]} {m.group(5)}"
    m = re.fullmatch(rf"{ref}\.(isGreaterThan|isLessThan)\(\s*{_QTY}\s*\)", expr)
    if m:
        return ("> " if m.group(5) == "isGreaterThan" else "< ") + m.group(6)
    m = re.fullmatch(rf"{ref}\s*(>=|>|<=|<|==|!=)\s*(.+)", expr)
    if m:
        return f"{m.group(5)} {m.group(6).strip()}"
    m = re.fullmatch(r"device\.(?:driver|allowMultipleAllocations)\s*(>=|>|<=|<|==|!=)\s*(.+)", expr)
    if m:
        return f"{m.group(1)} {m.group(2).strip()}"
    return f"`{expression}`"


@lru_cache(maxsize=1024)
def _numeric_condition(expression: str) -> tuple[str, str, str, float] | None:
    """(kind, domain, id, threshold) for a simple numeric comparison selector, else None."""
    from kdra.api.quantity import parse_quantity

    expr = expression.strip()
    ref = _REF.pattern
    m = re.fullmatch(rf"{ref}\.compareTo\(\s*{_QTY}\s*\)\s*(>=|>|<=|<|==|!=)\s*0", expr) or re.fullmatch(
        rf"{ref}\.(?:isGreaterThan|isLessThan)\(\s*{_QTY}\s*\)", expr
    )
    try:
        if m:
            threshold = parse_quantity(m.group(5)).as_float()
        else:
            m = re.fullmatch(rf"{ref}\s*(?:>=|>|<=|<|==|!=)\s*(-?[0-9]+)", expr)
            if m is None:
                return None
            threshold = float(m.group(5))
    except ValueError:
        return None
    return m.group(1), m.group(2), m.group(3) or m.group(4), threshold


def _distance(dev: DeviceEntry, expression: str) -> float | None:
    """How far the device's value is from a simple numeric selector's threshold (None if not simple)."""
    cond = _numeric_condition(expression)
    if cond is None:
        return None
    kind, domain, ident, threshold = cond
    if kind == "capacity":
        cap = dev.capacity.get(f"{domain}/{ident}")
        if cap is None and domain == dev.driver:
            cap = dev.capacity.get(ident)
        return abs(cap.value.as_float() - threshold) if cap is not None else None
    av = attribute_value(dev.attribute(f"{domain}/{ident}"))
    if av is None or av[0] != "int":
        return None
    return abs(float(cast(int, av[1])) - threshold)


def _nearest_miss(run: _Run, rd: ReqData, misses: list[tuple[int, bool, DeviceEntry]]) -> NearestMiss | None:
    """misses: (selectors passed, failed in class, device) for devices rejected by a selector."""
    if not misses:
        return None
    most = max(m[0] for m in misses)
    tied = [m for m in misses if m[0] == most]
    passed, from_class, dev = tied[0]
    index = passed if from_class else passed - len(rd.class_selectors)
    exprs = rd.class_selectors if from_class else rd.request_selectors
    expression = exprs[index]
    if len(tied) > 1:
        # Same failing selector: prefer the device whose value is closest to what it asks for.
        scored = [(d, m) for m in tied if (d := _distance(m[2], expression)) is not None]
        if scored:
            dev = min(scored, key=lambda x: x[0])[1][2]
    condition = _failing_conjunct(run, dev, expression)
    return NearestMiss(
        dev.id, index, from_class, expression, _referenced_values(dev, condition), _needs(condition)
    )


def _conjuncts(expression: str) -> list[str]:
    """Top-level `&&` operands of an expression (outside brackets and string literals)."""
    parts: list[str] = []
    depth = 0
    quote = ""
    start = 0
    i = 0
    n = len(expression)
    while i < n:
        c = expression[i]
        if quote:
            if c == "\\":
                i += 2
                continue
            if c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0 and expression.startswith("&&", i):
            parts.append(expression[start:i].strip())
            i += 2
            start = i
            continue
        i += 1
    parts.append(expression[start:].strip())
    return parts


def _failing_conjunct(run: _Run, dev: DeviceEntry, expression: str) -> str:
    """The first `&&` operand that is false for the device, or the whole expression."""
    from kdra.cel import compile_selector

    parts = _conjuncts(expression)
    if len(parts) < 2:
        return expression
    f = run.features
    for part in parts:
        try:
            program = compile_selector(
                part,
                consumable_capacity=f.consumable_capacity,
                list_type_attributes=f.cel_list_type_attributes,
                stored_expressions=True,
            )
            if not program.matches(dev.cel_input()):
                return part
        except Exception:  # a diagnostic only: fall back to the whole expression
            return expression
    return expression


def _explain_request(run: _Run, rd: ReqData, claim_name: str) -> tuple[RequestExplanation, list[DeviceEntry]]:
    f = run.features
    consumable = f.consumable_capacity
    lists = f.cel_list_type_attributes
    from kdra.allocator.allocator import blocking_taint
    from kdra.allocator.index import evaluate_selectors

    ex = RequestExplanation(
        claim_name,
        rd.full_name,
        rd.class_name,
        rd.mode,
        rd.num_devices if rd.mode != "All" else len(rd.all_devices),
    )
    misses: list[tuple[int, bool, DeviceEntry]] = []
    usable: list[DeviceEntry] = []
    view = run.view
    n_class = len(rd.class_selectors)
    for dev, pi, node_ok in zip(view.devices, view.device_pool, view.node_ok, strict=True):
        if not node_ok:
            ex.not_on_node += 1
            continue
        if not f.device_binding_and_status and dev.binding_conditions:
            ex.binding_conditions_off += 1
            continue
        res = evaluate_selectors(dev, rd.class_selectors, consumable, lists, f.cel_lazy_attributes)
        if isinstance(res, SelectorError):
            ex.selector_errors += 1
            continue
        if res != MATCH:
            misses.append((res, True, dev))
            continue
        ex.class_selected += 1
        res = evaluate_selectors(dev, rd.request_selectors, consumable, lists, f.cel_lazy_attributes)
        if isinstance(res, SelectorError):
            ex.selector_errors += 1
            continue
        if res != MATCH:
            misses.append((n_class + res, False, dev))
            continue
        ex.request_selected += 1
        if not rd.admin and dev.key in run.state.dedicated:
            ex.in_use += 1
            if "in use" not in ex.examples:
                ex.examples["in use"] = f"{dev.name} is allocated to another claim"
            continue
        why = run.blocked_alone(rd, dev, pi)
        if why == "capacity":
            ex.blocked_by_capacity += 1
            if "capacity" not in ex.examples:
                ex.examples["capacity"] = f"{dev.name}: {run.capacity_alone(rd, dev)}"
            continue
        if why == "counters":
            ex.blocked_by_counters += 1
            if "counters" not in ex.examples:
                ex.examples["counters"] = f"{dev.name}: {_counter_detail(run, dev, pi)}"
            continue
        if why == "taints":
            ex.blocked_by_taints += 1
            taint = blocking_taint(dev, rd.tolerations) or {}
            rule = next((r for t, r in zip(dev.taints, dev.taint_rules, strict=True) if t is taint), "")
            ex.examples.setdefault(
                "taints",
                f"{dev.name}: taint {taint.get('key', '')}={taint.get('value', '')}:"
                f"{taint.get('effect', '')}{f' (DeviceTaintRule {rule})' if rule else ''} not tolerated",
            )
            continue
        usable.append(dev)
    # Devices missing an attribute some constraint of the claim needs.
    constraints = run.constraints[rd.claim_index]
    if constraints:
        kept = []
        for dev in usable:
            missing = [
                c.attribute for c in constraints if c.applies(rd) and dev.attribute(c.attribute) is None
            ]
            if missing:
                ex.blocked_by_constraints += 1
                ex.examples.setdefault("constraints", f"{dev.name} has no attribute {missing[0]}")
            else:
                kept.append(dev)
        usable = kept
    ex.usable = len(usable)
    if ex.usable < ex.needed or ex.request_selected == 0:
        ex.nearest_miss = _nearest_miss(run, rd, misses)
    if ex.request_selected == 0:
        ex.other_classes = _other_classes(run, rd)
    return ex, usable


def _other_classes(run: _Run, rd: Any) -> dict[str, int]:
    """The other DeviceClasses whose devices on this node pass the request's own selectors, and how many."""
    from kdra.allocator.index import evaluate_selectors

    f = run.features
    args = (f.consumable_capacity, f.cel_list_type_attributes, f.cel_lazy_attributes)
    view = run.view
    out: dict[str, int] = {}
    for name in sorted(run.index.classes):
        if name == rd.class_name:
            continue
        selectors = run.index.class_selectors(name)
        n = sum(
            1
            for dev, node_ok in zip(view.devices, view.node_ok, strict=True)
            if node_ok
            and evaluate_selectors(dev, selectors, *args) == MATCH
            and evaluate_selectors(dev, rd.request_selectors, *args) == MATCH
        )
        if n:
            out[name] = n
    return out


def _counter_detail(run: _Run, dev: DeviceEntry, pi: int) -> str:
    if not run.features.partitionable_devices:
        return "consumes counters, but DRAPartitionableDevices is disabled"
    avail, _ = run.owner.available_counters(run.view.pools[pi])
    for set_name, counters in dev.consumes:
        cs = avail.get(set_name) or {}
        for cname, amount in counters:
            left = cs.get(cname)
            if left is not None and left < amount:
                return (
                    f"counter {set_name}/{cname} needs {_fmt_nanos(amount)}, {_fmt_nanos(max(left, 0))} left"
                )
    for set_name, cs in avail.items():
        for cname, left in cs.items():
            if left < 0:
                return f"counter {set_name}/{cname} is overcommitted by allocated devices"
    return "not enough counters"


def _fmt_nanos(n: int) -> str:
    from kdra.api.quantity import Quantity

    return str(Quantity.from_nanos(n))


def _constraint_reasons(
    run: _Run, ci: int, claim_name: str, usable: dict[str, list[DeviceEntry]]
) -> list[str]:
    """For each constraint: can any group of usable devices satisfy it for the requests it covers?"""
    out: list[str] = []
    from kdra.allocator.allocator import DistinctAttribute, MatchAttribute

    for i, c in enumerate(run.constraints[ci]):
        covered = [rd for rd in _chosen_requests(run, ci) if c.applies(rd)]
        if not covered:
            continue
        need = sum(rd.num_devices for rd in covered)
        devices: dict[str, DeviceEntry] = {}
        for rd in covered:
            for dev in usable.get(rd.full_name, []):
                devices.setdefault(dev.id, dev)
        values: dict[Any, int] = {}
        for dev in devices.values():
            av = attribute_value(dev.attribute(c.attribute))
            if av is None:
                continue
            if av[0].endswith("s"):
                for v in cast(frozenset[AttributeScalar], av[1]):
                    values[(av[0].rstrip("s"), v)] = values.get((av[0].rstrip("s"), v), 0) + 1
            else:
                values[av] = values.get(av, 0) + 1
        if isinstance(c, MatchAttribute):
            best = max(values.items(), key=lambda kv: kv[1], default=None)
            if best is None or best[1] < need:
                largest = f"largest group: {best[0][1]} with {best[1]}" if best else "no device has it"
                out.append(
                    f"claim {claim_name}, constraint #{i}: matchAttribute {c.attribute} needs {need} devices "
                    f"with the same value ({largest})"
                )
        elif (
            isinstance(c, DistinctAttribute)
            and len(values) < need
            and all(rd.num_devices == 1 for rd in covered)
        ):
            out.append(
                f"claim {claim_name}, constraint #{i}: distinctAttribute {c.attribute} needs {need} "
                f"different values, usable devices have {len(values)}"
            )
    return out


def _chosen_requests(run: _Run, ci: int) -> list[ReqData]:
    """The first alternative of each request (what the claim would ideally get)."""
    out = []
    ri = 0
    while (ci, ri, 0) in run.requests:
        out.append(run.requests[(ci, ri, 0)])
        ri += 1
    return out


def explain(run: _Run, limit_hit: bool = False) -> Explanation:
    ex = Explanation(run.view.node_name, search_limit_hit=limit_hit, steps=run.steps)
    for pool in run.view.pools:
        if pool.incomplete:
            ex.incomplete_pools.append(pool.id)
            ex.incomplete_detail[pool.id] = (
                f"{pool.slices_seen} slice(s) of generation {pool.generation}, "
                f"resourceSliceCount says {pool.slices_expected}"
            )
        elif pool.invalid:
            ex.invalid_pools[pool.id] = pool.invalid_reason
    if not run.validated:
        return ex
    demand = 0
    supply: dict[str, DeviceEntry] = {}
    exclusive = True
    for ci, claim in enumerate(run.claims):
        from kdra.allocator.allocator import claim_ref

        name = claim_ref(claim)
        usable_by_request: dict[str, list[DeviceEntry]] = {}
        ri = 0
        while (ci, ri, 0) in run.requests:
            si = 0
            alternatives = []
            while (ci, ri, si) in run.requests:
                rd = run.requests[(ci, ri, si)]
                rex, usable = _explain_request(run, rd, name)
                ex.requests.append(rex)
                usable_by_request[rd.full_name] = usable
                alternatives.append((rd, rex, usable))
                si += 1
            rd0, rex0, _ = alternatives[0]
            if not any(r.fits_alone for _, r, _ in alternatives):
                what = "any alternative of request" if len(alternatives) > 1 else "request"
                if rd0.mode == "All" and len(alternatives) == 1:
                    if rex0.needed == 0:
                        detail = "allocationMode All matches no device on this node"
                    else:
                        detail = (
                            f"allocationMode All needs every matching device, {rex0.needed - rex0.usable} "
                            f"of {rex0.needed} are in use or blocked"
                        )
                    ex.reasons.append(f"claim {name}: request {rd0.base_name}: {detail}")
                else:
                    ex.reasons.append(
                        f"claim {name}: {what} {rd0.base_name} cannot be satisfied on this node "
                        f"(needs {rex0.needed}, {rex0.usable} usable)"
                    )
            if not rd0.admin:
                # A request with alternatives (firstAvailable) needs at least what its smallest
                # alternative takes, from the devices any alternative could use.
                demand += min(rd.num_devices for rd, _, _ in alternatives)
                for _, _, usable in alternatives:
                    for dev in usable:
                        supply.setdefault(dev.id, dev)
                        if run.features.consumable_capacity and dev.allow_multi:
                            exclusive = False
            ri += 1
        ex.reasons.extend(_constraint_reasons(run, ci, name, usable_by_request))
    if not ex.reasons and exclusive and demand > len(supply):
        ex.reasons.append(
            f"together the claims need {demand} devices, "
            f"but only {len(supply)} different usable devices exist"
        )
    if not ex.reasons:
        ex.reasons.extend(_counter_reasons(run))
    if limit_hit:
        # First: kdra gave up, it did not prove that the claims cannot fit.
        ex.reasons.insert(
            0,
            f"gave up: the search stopped after {run.steps} steps (limit {run.owner.max_steps}) without "
            "finding an allocation or proving there is none",
        )
    if not ex.reasons and not limit_hit:
        ex.reasons.extend(_what_if(run))
    if not ex.reasons:
        ex.reasons.append(
            "every request can be satisfied on its own, but no combination satisfies all requests, "
            "constraints, counters and capacities together"
        )
    return ex


def _counter_reasons(run: _Run) -> list[str]:
    """Counters that the requests drawing on them cannot all fit into (least possible consumption)."""
    from kdra.allocator.allocator import request_candidates

    demand: dict[tuple[int, str, str], int] = {}
    for (_, _, si), rd in run.requests.items():
        if rd.mode == "All" or si > 0 or (rd.claim_index, rd.request_index, 1) in run.requests:
            continue
        usable, _ = request_candidates(run, rd)
        run._add_counter_demand(rd, usable, demand)
    out = []
    for (pi, set_name, cname), amount in demand.items():
        pool = run.view.pools[pi]
        avail, _ = run.owner.available_counters(pool)
        left = avail.get(set_name, {}).get(cname)
        if left is not None and amount > left:
            out.append(
                f"the requests need at least {_fmt_nanos(amount)} of counter {set_name}/{cname} in pool "
                f"{pool.id}, only {_fmt_nanos(max(left, 0))} left"
            )
    return out


WHAT_IF_STEPS = 2_000  # search budget of each diagnostic re-run
WHAT_IF_TOTAL_STEPS = 10_000  # and of all of them together, so explaining stays fast


class _Budget:
    def __init__(self, total: int) -> None:
        self.left = total


def _fits(run: _Run, claims: list[Mapping[str, Any]], budget: _Budget) -> bool | None:
    """Would these claims fit on the node (same state)? None when that cannot be told cheaply."""
    from kdra.allocator.allocator import SearchLimitExceeded, _Run
    from kdra.errors import AllocationError

    if budget.left <= 0:
        return None
    trial = _Run(run.owner, run.view, claims)
    try:
        return trial.search(min(WHAT_IF_STEPS, budget.left))
    except (SearchLimitExceeded, AllocationError):
        return None
    finally:
        budget.left -= trial.steps


def _what_if(run: _Run) -> list[str]:
    """Diagnostic re-runs when every request fits on its own: which claims or constraints conflict."""
    from kdra.allocator.allocator import claim_ref

    claims: list[Mapping[str, Any]] = list(run.claims)
    budget = _Budget(WHAT_IF_TOTAL_STEPS)
    out: list[str] = []
    if len(claims) > 1:
        alone = [_fits(run, [c], budget) for c in claims]
        lonely = [claim_ref(c) for c, ok in zip(claims, alone, strict=True) if ok is False]
        if lonely:
            out.append(f"claim {lonely[0]} does not fit on this node even on its own")
        elif all(alone):
            out.append(
                f"each of the {len(claims)} claims fits on its own, but not all together: "
                "they compete for the same devices, counters or capacity"
            )
    for ci, c in enumerate(claims):
        devices = ((c.get("spec") or {}).get("devices")) or {}
        constraints = devices.get("constraints") or []
        for i, constraint in enumerate(constraints):
            relaxed = dict(c)
            relaxed["spec"] = dict(c.get("spec") or {})
            relaxed["spec"]["devices"] = dict(devices)
            relaxed["spec"]["devices"]["constraints"] = constraints[:i] + constraints[i + 1 :]
            trial = [*claims[:ci], relaxed, *claims[ci + 1 :]]
            if _fits(run, trial, budget):
                what = next(
                    (k for k in ("matchAttribute", "distinctAttribute") if k in constraint), "constraint"
                )
                out.append(
                    f"claim {claim_ref(c)} would fit without constraint #{i} ({what} "
                    f"{constraint.get(what, '')}): no usable devices satisfy it together with the other "
                    "requests, counters and capacities"
                )
    return out
