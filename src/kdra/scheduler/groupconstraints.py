"""Cross-claim device constraints for a pod group: matchAttribute / distinctAttribute across its members.

A ResourceClaim's `constraints` only relate the devices of that one claim. Distributed jobs need more:
every worker's NIC on the same rail (the same `resource.kubernetes.io/pcieRoot` value on identical nodes),
every worker's GPUs in one NVLink domain, or each worker on a different one. kdra's PodGroup
(kdra.dev/v1alpha1) carries them, in the claim constraint's own shape:

    spec:
      minMember: 4
      deviceConstraints:
      - requests: [nic]                                  # request names in the members' claims
        matchAttribute: resource.kubernetes.io/pcieRoot  # (`request/subrequest` too; none: all requests)
      - requests: [gpu]
        distinctAttribute: kdra.dev/nvlinkDomain

Enforcement stays inside the allocator's rules: a member's claims are allocated with one more CEL selector on
the covered requests (a copy; the stored claim is not changed). matchAttribute: the device must have the
attribute and, once a value is chosen, have that value; distinctAttribute: have it and differ from the
values the gang's other members (waiting at Permit or bound) already hold. Within one claim the same rule
is added as a claim constraint over its covered requests. Which value a match constraint takes is tried in
turn, the values with the most free devices first (`GangQueueOptions.max_domain_trials` of them), like
topology domains; before the gang binds, the members' allocations are checked against every constraint.
When no value works, the gang's explanation says which values were tried and how many members fit.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kdra.allocator.index import attribute_value
from kdra.api.pods import entry_claim_names
from kdra.errors import InputError

if TYPE_CHECKING:
    from collections.abc import Hashable

    from kdra.scheduler.gang import GangSpec
    from kdra.scheduler.gangqueues import GangQueues
    from kdra.scheduler.podinfo import PodInfo

Value = tuple[str, Any]  # (attribute kind, value) as kdra.allocator.index.attribute_value gives it
MAX_GROUP_CONSTRAINTS = 32  # as many as a claim may have (DEVICE_CONSTRAINTS_MAX_SIZE)


@dataclass(frozen=True)
class GroupConstraint:
    attribute: str  # fully qualified: domain/id
    distinct: bool  # distinctAttribute (else matchAttribute)
    requests: tuple[str, ...] = ()  # request (or request/subrequest) names; () = every request

    @property
    def field(self) -> str:
        return "distinctAttribute" if self.distinct else "matchAttribute"

    def label(self, index: int) -> str:
        over = f" over requests [{', '.join(self.requests)}]" if self.requests else ""
        return f"deviceConstraints[{index}] ({self.field} {self.attribute}{over})"

    def covers(self, request: str, sub: str | None = None) -> bool:
        if not self.requests:
            return True
        return request in self.requests or (sub is not None and f"{request}/{sub}" in self.requests)

    def covers_result(self, result_request: str) -> bool:
        base, _, sub = result_request.partition("/")
        return self.covers(base, sub or None)


def parse_device_constraints(raw: object, where: str) -> tuple[GroupConstraint, ...]:
    """`spec.deviceConstraints` of a PodGroup; InputError listing every problem as the API server words
    claim constraint errors."""
    from kdra.validation.rules import attribute_name_errors, request_ref_errors

    if raw is None:
        return ()
    path = f"{where}.deviceConstraints"
    if not isinstance(raw, list):
        raise InputError(f"{path}: Invalid value: {raw!r}: must be a list")
    errors: list[str] = []
    if len(raw) > MAX_GROUP_CONSTRAINTS:
        errors.append(f"{path}: Too many: {len(raw)}: must have at most {MAX_GROUP_CONSTRAINTS} items")
    out: list[GroupConstraint] = []
    for i, c in enumerate(raw):
        p = f"{path}[{i}]"
        if not isinstance(c, Mapping):
            errors.append(f"{p}: Invalid value: {c!r}: must be an object")
            continue
        unknown = sorted(set(c) - {"requests", "matchAttribute", "distinctAttribute"})
        if unknown:
            errors.append(
                f'{p}: Unsupported value: "{unknown[0]}": '
                "supported fields: requests, matchAttribute, distinctAttribute"
            )
        match, distinct = c.get("matchAttribute"), c.get("distinctAttribute")
        if (match is None) == (distinct is None):
            errors.append(
                f'{p}: Required value: exactly one of "matchAttribute" or "distinctAttribute" is required'
            )
            continue
        field = "matchAttribute" if match is not None else "distinctAttribute"
        attr = match if match is not None else distinct
        errors.extend(str(e) for e in attribute_name_errors(attr, f"{p}.{field}"))
        reqs = c.get("requests") or []
        if not isinstance(reqs, list):
            errors.append(f"{p}.requests: Invalid value: {reqs!r}: must be a list of request names")
            continue
        for j, r in enumerate(reqs):
            errors.extend(str(e) for e in request_ref_errors(r, f"{p}.requests[{j}]"))
        if len(set(map(str, reqs))) != len(reqs):
            dup = next(r for k, r in enumerate(reqs) if r in reqs[:k])
            errors.append(f"{p}.requests: Duplicate value: {json.dumps(dup)}")
        if isinstance(attr, str):
            out.append(GroupConstraint(attr, distinct is not None, tuple(str(r) for r in reqs)))
    if errors:
        raise InputError("\n".join(errors))
    return tuple(out)


def _literal(v: Value) -> str:
    kind, value = v
    if kind == "string":
        return json.dumps(value)
    if kind == "bool":
        return "true" if value else "false"
    if kind == "version":
        return f"semver({json.dumps(value)})"
    return str(int(value))


def selector_for(c: GroupConstraint, value: Value | None, avoid: Sequence[Value]) -> str:
    """The CEL selector a covered request gets."""
    domain, _, ident = c.attribute.partition("/")
    has = f"{json.dumps(ident)} in device.attributes[{json.dumps(domain)}]"
    ref = f"device.attributes[{json.dumps(domain)}][{json.dumps(ident)}]"
    if value is not None:
        if value[0] == "version":
            return f"{has} && {ref}.compareTo({_literal(value)}) == 0"
        return f"{has} && {ref} == {_literal(value)}"
    if avoid:
        if any(v[0] == "version" for v in avoid):
            return has + "".join(f" && {ref}.compareTo({_literal(v)}) != 0" for v in avoid)
        return f"{has} && !({ref} in [{', '.join(_literal(v) for v in avoid)}])"
    return has


def constrain_claim(
    claim: Mapping[str, Any], rules: Sequence[tuple[GroupConstraint, Value | None, Sequence[Value]]]
) -> dict[str, Any]:
    """A copy of the claim whose covered requests carry each rule's selector, plus, where a rule covers
    several devices of this claim, the same rule as a claim constraint."""
    new = dict(claim)
    spec = copy.deepcopy(dict(claim.get("spec") or {}))
    devices = spec.setdefault("devices", {})
    requests = devices.get("requests") or []
    constraints = list(devices.get("constraints") or [])
    for c, value, avoid in rules:
        expr = selector_for(c, value, avoid)
        names: list[str] = []
        count = 0
        for req in requests:
            name = req.get("name", "")
            if req.get("exactly") is not None:
                if c.covers(name):
                    req["exactly"].setdefault("selectors", []).append({"cel": {"expression": expr}})
                    names.append(name)
                    count += int(req["exactly"].get("count") or 1)
                continue
            subs = req.get("firstAvailable") or []
            hit = [s for s in subs if c.covers(name, s.get("name"))]
            for sub in hit:
                sub.setdefault("selectors", []).append({"cel": {"expression": expr}})
            if hit:
                names.append(name)
                count += max(int(s.get("count") or 1) for s in hit)
        if count >= 2:
            constraints.append({"requests": names, c.field: c.attribute})
    if constraints:
        devices["constraints"] = constraints
    new["spec"] = spec
    return new


class GroupConstraints:
    """Applies a gang's deviceConstraints while kdra.scheduler.jobplacer places its members."""

    def __init__(self, gq: GangQueues) -> None:
        self.gq = gq
        self.pins: dict[str, dict[int, Value]] = {}  # gang key -> constraint index -> value being tried
        self._cache: dict[tuple[Any, ...], dict[str, Any]] = {}
        self._devices: tuple[Any, dict[tuple[str, str, str], Any]] | None = None

    # -- the gang's devices ------------------------------------------------------------------------
    def _device(self, key: tuple[str, str, str]) -> Any:
        index = self.gq.runtime.sched.dra.index
        if self._devices is None or self._devices[0] is not index:
            self._devices = (index, {d.key: d for s in index.slices for d in s.devices})
        return self._devices[1].get(key)

    def value_of(self, result: Mapping[str, Any], attribute: str) -> Value | None:
        dev = self._device((result.get("driver", ""), result.get("pool", ""), result.get("device", "")))
        raw = dev.attribute(attribute) if dev is not None else None
        return attribute_value(raw) if raw is not None else None

    def member_results(
        self, gang_key: str, exclude: str | None = None
    ) -> Iterable[tuple[str, Mapping[str, Any]]]:
        """(member uid, allocation result) of members waiting at Permit or bound."""
        gq = self.gq
        sched = gq.runtime.sched
        for uid in sorted(gq.gangs.members.get(gang_key, ())):
            if uid == exclude:
                continue
            wp = sched.waiting.get(uid)
            if wp is not None:
                for _claim, alloc in wp.state.get("dra_allocations") or []:
                    for r in ((alloc or {}).get("devices") or {}).get("results") or []:
                        yield uid, r
                continue
            if uid not in gq.gangs.bound.get(gang_key, set()):
                continue
            node = sched.cache.assigned.get(uid)
            ni = sched.cache.node_by_name.get(node) if node else None
            pi = ni.pods.get(uid) if ni is not None else None
            ctrl = sched.controller
            if pi is None:
                continue
            names = ctrl.claim_names(pi.pod) if ctrl is not None else []
            if not names:
                names = entry_claim_names(pi.pod)
            for name in names:
                claim = sched.cache.claims.get((pi.namespace, name)) or {}
                alloc = (claim.get("status") or {}).get("allocation") or {}
                for r in (alloc.get("devices") or {}).get("results") or []:
                    yield uid, r

    def held(self, gang_key: str, c: GroupConstraint, exclude: str | None = None) -> list[Value]:
        out: list[Value] = []
        for _uid, r in self.member_results(gang_key, exclude):
            if r.get("adminAccess") or not c.covers_result(str(r.get("request", ""))):
                continue
            v = self.value_of(r, c.attribute)
            if v is not None and v not in out:
                out.append(v)
        return out

    # -- the rewrite (DynamicResources' PreFilter hook) ---------------------------------------------
    def spec(self, uid: str) -> GangSpec | None:
        gk = self.gq.gangs.gang_of(uid)
        spec = self.gq.gangs.spec(gk) if gk is not None else None
        return spec if spec is not None and spec.device_constraints else None

    def rewrite(self, pi: PodInfo, claim: Mapping[str, Any]) -> tuple[Mapping[str, Any], Hashable]:
        """The claim this member allocates, and what the rewrite depends on (for the cycle's signature)."""
        spec = self.spec(pi.uid)
        if spec is None:
            return claim, None
        pins = self.pins.get(spec.key, {})
        rules: list[tuple[GroupConstraint, Value | None, Sequence[Value]]] = []
        for i, c in enumerate(spec.device_constraints):
            held = self.held(spec.key, c, exclude=pi.uid)
            if c.distinct:
                rules.append((c, None, held))
            else:
                rules.append((c, pins.get(i) or (held[0] if held else None), ()))
        key = tuple((v, tuple(a)) for _c, v, a in rules)
        meta = claim.get("metadata") or {}
        ck = (meta.get("uid"), meta.get("resourceVersion"), id(claim), spec.key, key)
        hit = self._cache.get(ck)
        if hit is None:
            if len(self._cache) > 10_000:
                self._cache.clear()
            hit = self._cache[ck] = constrain_claim(claim, rules)
        return hit, ("G", key)

    # -- trials and checks (kdra.scheduler.jobplacer) -----------------------------------------------
    def trials(self, spec: GangSpec | None, claims: Sequence[Mapping[str, Any]]) -> list[dict[int, Value]]:
        """Pins to try in turn: for the first match constraint no member fixes yet, its values by free
        devices (most first); [{}] when nothing needs choosing."""
        if spec is None or not spec.device_constraints:
            return [{}]
        for i, c in enumerate(spec.device_constraints):
            if c.distinct or self.held(spec.key, c):
                continue
            ranked = self.values(c, claims)
            if not ranked:
                return [{}]  # nothing has the attribute: the members' own explanation says so
            limit = max(1, int(self.gq.options.max_domain_trials))
            return [{i: v} for _n, v in ranked[:limit]]
        return [{}]

    def values(self, c: GroupConstraint, claims: Sequence[Mapping[str, Any]]) -> list[tuple[int, Value]]:
        """(free devices, value) of the attribute among devices the covered requests' classes select."""
        dra = self.gq.runtime.sched.dra
        classes: set[tuple[str, tuple[str, ...]]] = set()
        for claim in claims:
            for req in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
                name = req.get("name", "")
                alts = [req["exactly"]] if req.get("exactly") else list(req.get("firstAvailable") or [])
                for sub in alts:
                    if c.covers(name, None if req.get("exactly") else sub.get("name")):
                        sels = tuple(
                            ((s.get("cel") or {}).get("expression") or "") for s in sub.get("selectors") or []
                        )
                        classes.add((sub.get("deviceClassName", ""), sels))
        room: dict[Value, int] = {}
        seen: set[int] = set()
        for cls, sels in sorted(classes):
            for d in dra.index.devices_of_class(cls, sels):
                if id(d) in seen:
                    continue
                seen.add(id(d))
                raw = d.attribute(c.attribute)
                v = attribute_value(raw) if raw is not None else None
                if v is None or v[0].endswith("s"):
                    continue
                free = d.allow_multi or d.key not in dra.state.dedicated
                room[v] = room.get(v, 0) + int(free)
        return sorted(((n, v) for v, n in room.items()), key=lambda t: (-t[0], str(t[1][1])))

    def claims_of(self, members: Sequence[PodInfo]) -> list[Mapping[str, Any]]:
        cache = self.gq.sched.cache if self.gq.sched is not None else None
        out: list[Mapping[str, Any]] = []
        for m in members:
            for name in entry_claim_names(m.pod):
                claim = cache.claims.get((m.namespace, name)) if cache is not None else None
                if claim is not None:
                    out.append(claim)
        return out

    def describe_trial(self, spec: GangSpec, pins: Mapping[int, Value], failure: str | None) -> str:
        what = ", ".join(
            f"{spec.device_constraints[i].attribute}={describe_value(v)}" for i, v in pins.items()
        )
        why = (failure or "no placement").split("\n", 1)[0]
        m = re.search(r"only (\d+) of the (\d+) members", why)
        return f"{what}: {m.group(1)} of {m.group(2)} members fit" if m else f"{what}: {why}"

    def explain(self, spec: GangSpec, tried: Sequence[str], failure: str | None) -> str:
        i = next(iter(k for k, c in enumerate(spec.device_constraints) if not c.distinct), 0)
        head = (
            f"{spec.source} {spec.device_constraints[i].label(i)}: no value has room for the gang "
            f"(tried {'; '.join(tried)})"
        )
        return f"{head}\n{failure}" if failure else head

    def violation(self, spec: GangSpec | None) -> str | None:
        """Whether the members' allocations (waiting and bound) break a constraint."""
        if spec is None:
            return None
        for i, c in enumerate(spec.device_constraints):
            per_member: dict[str, list[Value | None]] = {}
            for uid, r in self.member_results(spec.key):
                if c.covers_result(str(r.get("request", ""))) and not r.get("adminAccess"):
                    per_member.setdefault(uid, []).append(self.value_of(r, c.attribute))
            values = [v for vs in per_member.values() for v in vs]
            if any(v is None for v in values):
                return f"{spec.source} {c.label(i)}: a device has no {c.attribute}"
            if not c.distinct and len(set(values)) > 1:
                shown = ", ".join(sorted(str(v[1]) for v in set(values) if v is not None))
                return f"{spec.source} {c.label(i)}: members' devices have different values ({shown})"
            if c.distinct and len(set(values)) < len(values):
                return f"{spec.source} {c.label(i)}: members' devices share a value"
        return None


def describe_value(v: Value) -> str:
    return str(v[1]).lower() if isinstance(v[1], bool) else str(v[1])
