"""Hypothesis properties of kdra's allocator, checked against an independent model of the rules.

Generated inputs: one node, ResourceSlices of a `gpu.example.com` driver (optionally partitionable, in the
split-slice layout; optionally devices that allow multiple allocations with a capacity requestPolicy; some
tainted), claims already allocated (in use), and 1-3 claims to allocate with selectors, counts, All,
tolerations, matchAttribute and distinctAttribute. Every selector is generated together with a plain-Python
predicate, so selectors are re-evaluated here without kdra.cel.

Soundness: every allocation kdra returns satisfies every selector, constraint, counter, capacity, taint and
exclusivity rule, the result counts and the 32-device limit. Completeness (the allocator's search is
exhaustive, as upstream's): where kdra says "does not fit" for plain exclusive devices, a brute-force search
finds no solution either.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kdra.allocator import Allocator, FeatureGates
from kdra.errors import AllocationError

DRIVER = "gpu.example.com"
NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1", "labels": {"zone": "a"}}}
GI = 1024**3
SETTINGS = settings(
    max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)


@dataclass
class Dev:
    name: str
    model: str
    numa: int
    memory_gi: int
    taint: str | None = None  # effect of a taint with key example.com/unhealthy
    consumes: int = 0  # units of counter "mem" in counter set "gpu-set"
    multi: bool = False  # allowMultipleAllocations with memory requestPolicy validRange{min 8Gi, step 8Gi}

    def to_slice_device(self) -> dict[str, Any]:
        dev: dict[str, Any] = {
            "name": self.name,
            "attributes": {"model": {"string": self.model}, "numa": {"int": self.numa}},
            "capacity": {"memory": {"value": f"{self.memory_gi}Gi"}},
        }
        if self.taint:
            dev["taints"] = [{"key": "example.com/unhealthy", "value": "true", "effect": self.taint}]
        if self.consumes:
            dev["consumesCounters"] = [
                {"counterSet": "gpu-set", "counters": {"mem": {"value": str(self.consumes)}}}
            ]
        if self.multi:
            dev["allowMultipleAllocations"] = True
            dev["capacity"]["memory"]["requestPolicy"] = {
                "default": "8Gi",
                "validRange": {"min": "8Gi", "step": "8Gi"},
            }
        return dev


# Selectors: (CEL text, independent predicate).
SELECTORS: list[tuple[str, Callable[[Dev], bool]]] = [
    (f'device.attributes["{DRIVER}"].model == "h100"', lambda d: d.model == "h100"),
    (f'device.attributes["{DRIVER}"].model.startsWith("a")', lambda d: d.model.startswith("a")),
    (f'device.attributes["{DRIVER}"].numa == 1', lambda d: d.numa == 1),
    (
        f'device.capacity["{DRIVER}"].memory.compareTo(quantity("64Gi")) >= 0',
        lambda d: d.memory_gi >= 64,
    ),
    (f'device.attributes["{DRIVER}"].numa < 2 && device.driver == "{DRIVER}"', lambda d: d.numa < 2),
]


@dataclass
class Req:
    name: str
    count: int  # 0 = allocationMode All
    selectors: list[int]
    tolerate: bool = False
    memory_gi: int | None = None  # capacity request (multi-allocatable scenario)


@dataclass
class ClaimSpec:
    name: str
    requests: list[Req]
    match_numa: bool = False
    distinct_model: bool = False


@dataclass
class World:
    devices: list[Dev]
    counter_value: int  # 0 = not partitionable
    in_use: list[str]
    shares: dict[str, list[int]] = field(default_factory=dict)  # existing consumed Gi per multi device
    claims: list[ClaimSpec] = field(default_factory=list)

    def objects(
        self,
    ) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
        classes = {
            "gpu": {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": "gpu"},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
            }
        }
        count = 2 if self.counter_value else 1
        pool = {"name": "node-1", "generation": 1, "resourceSliceCount": count}
        slices = [
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": "node-1-devices"},
                "spec": {
                    "driver": DRIVER,
                    "nodeName": "node-1",
                    "pool": dict(pool),
                    "devices": [d.to_slice_device() for d in self.devices],
                },
            }
        ]
        if self.counter_value:
            slices.append(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceSlice",
                    "metadata": {"name": "node-1-counters"},
                    "spec": {
                        "driver": DRIVER,
                        "nodeName": "node-1",
                        "pool": dict(pool),
                        "sharedCounters": [
                            {"name": "gpu-set", "counters": {"mem": {"value": str(self.counter_value)}}}
                        ],
                    },
                }
            )
        allocated = []
        for i, name in enumerate(self.in_use):
            allocated.append(
                _allocated_claim(
                    f"in-use-{i}", {"request": "r", "driver": DRIVER, "pool": "node-1", "device": name}
                )
            )
        for name, amounts in self.shares.items():
            for j, gi in enumerate(amounts):
                allocated.append(
                    _allocated_claim(
                        f"share-{name}-{j}",
                        {
                            "request": "r",
                            "driver": DRIVER,
                            "pool": "node-1",
                            "device": name,
                            "shareID": f"00000000-0000-4000-8000-{j:012d}",
                            "consumedCapacity": {"memory": f"{gi}Gi"},
                        },
                    )
                )
        claims = [_claim_object(c) for c in self.claims]
        return classes, slices, allocated, claims


def _allocated_claim(name: str, result: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu"}}]}},
        "status": {"allocation": {"devices": {"results": [result]}}},
    }


def _claim_object(c: ClaimSpec) -> dict[str, Any]:
    requests = []
    for r in c.requests:
        exactly: dict[str, Any] = {"deviceClassName": "gpu"}
        if r.count == 0:
            exactly["allocationMode"] = "All"
        else:
            exactly["allocationMode"] = "ExactCount"
            exactly["count"] = r.count
        if r.selectors:
            exactly["selectors"] = [{"cel": {"expression": SELECTORS[i][0]}} for i in r.selectors]
        if r.tolerate:
            exactly["tolerations"] = [{"key": "example.com/unhealthy", "operator": "Exists"}]
        if r.memory_gi is not None:
            exactly["capacity"] = {"requests": {"memory": f"{r.memory_gi}Gi"}}
        requests.append({"name": r.name, "exactly": exactly})
    devices: dict[str, Any] = {"requests": requests}
    constraints = []
    if c.match_numa:
        constraints.append({"matchAttribute": f"{DRIVER}/numa"})
    if c.distinct_model:
        constraints.append({"distinctAttribute": f"{DRIVER}/model"})
    if constraints:
        devices["constraints"] = constraints
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": c.name, "namespace": "default"},
        "spec": {"devices": devices},
    }


# ----------------------------------------------------------------------------------- strategies


@st.composite
def devices(draw: st.DrawFn, multi: bool = False, partitionable: bool = False) -> list[Dev]:
    n = draw(st.integers(1, 8))
    out = []
    for i in range(n):
        out.append(
            Dev(
                name=f"gpu-{i}",
                model=draw(st.sampled_from(["a100", "h100"])),
                numa=draw(st.integers(0, 1)),
                memory_gi=draw(st.sampled_from([40, 80])),
                taint=draw(st.sampled_from([None, None, None, None, "NoSchedule", "NoExecute", "None"])),
                consumes=draw(st.integers(1, 3)) if partitionable else 0,
                multi=multi,
            )
        )
    return out


@st.composite
def claim_specs(draw: st.DrawFn, multi: bool) -> list[ClaimSpec]:
    out = []
    for ci in range(draw(st.integers(1, 2))):
        reqs = []
        for ri in range(draw(st.integers(1, 2))):
            reqs.append(
                Req(
                    name=f"r{ri}",
                    count=draw(st.sampled_from([1, 1, 1, 2, 3, 0])) if not multi else draw(st.integers(1, 2)),
                    selectors=draw(st.lists(st.integers(0, len(SELECTORS) - 1), max_size=2)),
                    tolerate=draw(st.booleans()),
                    memory_gi=draw(st.sampled_from([None, 4, 8, 12, 20, 40])) if multi else None,
                )
            )
        distinct = draw(st.booleans()) and draw(st.booleans())
        if distinct:
            # Upstream tracks distinctAttribute values per request name, so with count > 1 an earlier value
            # of the same request is forgotten (upstream distinctAttributeConstraint);
            # pairwise distinctness is only a rule for one device per request.
            for r in reqs:
                r.count = 1
        out.append(
            ClaimSpec(
                name=f"claim-{ci}", requests=reqs, match_numa=draw(st.booleans()), distinct_model=distinct
            )
        )
    return out


@st.composite
def exclusive_worlds(draw: st.DrawFn) -> World:
    partitionable = draw(st.booleans())
    devs = draw(devices(partitionable=partitionable))
    in_use = [d.name for d in devs if draw(st.integers(0, 4)) == 0]
    counter_value = draw(st.integers(2, 14)) if partitionable else 0
    return World(devs, counter_value, in_use, claims=draw(claim_specs(multi=False)))


@st.composite
def shared_worlds(draw: st.DrawFn) -> World:
    devs = draw(devices(multi=True))
    shares = {d.name: draw(st.lists(st.sampled_from([8, 16, 40]), max_size=2)) for d in devs}
    shares = {
        k: v for k, v in shares.items() if v and sum(v) <= next(d.memory_gi for d in devs if d.name == k)
    }
    return World(devs, 0, [], shares=shares, claims=draw(claim_specs(multi=True)))


# ----------------------------------------------------------------------------------------- model


def tolerated(dev: Dev, req: Req) -> bool:
    return dev.taint in (None, "None") or req.tolerate


def selected(dev: Dev, req: Req) -> bool:
    return all(SELECTORS[i][1](dev) for i in req.selectors)


def consumed_gi(dev: Dev, req: Req) -> int:
    """requestPolicy validRange{min 8Gi, step 8Gi}, default 8Gi (KEP-5075)."""
    want = 8 if req.memory_gi is None else req.memory_gi
    return max(8, 8 * math.ceil(want / 8))


def check_allocation(world: World, allocations: list[dict[str, Any]]) -> None:
    devs = {d.name: d for d in world.devices}
    used: Counter[str] = Counter(world.in_use)
    counters_used = sum(devs[n].consumes for n in world.in_use)
    capacity_used = {name: sum(v) for name, v in world.shares.items()}
    assert len(allocations) == len(world.claims)
    for spec, allocation in zip(world.claims, allocations, strict=True):
        results = allocation["devices"]["results"]
        assert len(results) <= 32
        assert allocation.get("nodeSelector") == {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}
            ]
        }
        by_request: dict[str, list[Dev]] = defaultdict(list)
        for r in results:
            assert (r["driver"], r["pool"]) == (DRIVER, "node-1")
            assert r["device"] in devs, f"unknown device {r['device']}"
            by_request[r["request"]].append(devs[r["device"]])
        assert set(by_request) <= {q.name for q in spec.requests}
        for req in spec.requests:
            got = by_request.get(req.name, [])
            for dev in got:
                assert selected(dev, req), f"{spec.name}/{req.name}: {dev.name} fails a selector"
                assert tolerated(dev, req), f"{spec.name}/{req.name}: {dev.name} has an untolerated taint"
            if req.count:
                assert len(got) == req.count, (
                    f"{spec.name}/{req.name}: {len(got)} devices, wanted {req.count}"
                )
            else:
                want = {d.name for d in world.devices if selected(d, req)}
                assert got and {d.name for d in got} == want, f"{spec.name}/{req.name}: All gave {got}"
        all_devs = [d for ds in by_request.values() for d in ds]
        if spec.match_numa:
            assert len({d.numa for d in all_devs}) <= 1, f"{spec.name}: matchAttribute numa violated"
        if spec.distinct_model:
            models = [d.model for d in all_devs]
            assert len(models) == len(set(models)), f"{spec.name}: distinctAttribute model violated"
        for r in results:
            dev = devs[r["device"]]
            req = next(q for q in spec.requests if q.name == r["request"])
            if dev.multi:
                gi = consumed_gi(dev, req)
                consumed = r.get("consumedCapacity") or {}
                assert consumed.get("memory") == f"{gi}Gi", (
                    f"{dev.name}: consumed {consumed}, expected {gi}Gi"
                )
                assert r.get("shareID"), "a share needs a shareID"
                capacity_used[dev.name] = capacity_used.get(dev.name, 0) + gi
            else:
                used[dev.name] += 1
                counters_used += dev.consumes
    duplicates = [n for n, k in used.items() if k > 1]
    assert not duplicates, f"devices allocated twice: {duplicates}"
    if world.counter_value:
        assert counters_used <= world.counter_value, f"counter mem overcommitted: {counters_used}"
    for name, total in capacity_used.items():
        assert total <= devs[name].memory_gi, f"{name}: {total}Gi consumed of {devs[name].memory_gi}Gi"


def brute_force_fits(world: World) -> bool:
    """Exhaustive search over exclusive devices (counters included, All included)."""
    free = [d for d in world.devices if d.name not in world.in_use]
    counter_left = world.counter_value - sum(d.consumes for d in world.devices if d.name in world.in_use)
    slots: list[tuple[ClaimSpec, Req]] = [(c, r) for c in world.claims for r in c.requests]

    def rec(i: int, taken: frozenset[str], counters: int, picked: dict[str, list[Dev]]) -> bool:
        if i == len(slots):
            return True
        spec, req = slots[i]
        candidates = [d for d in free if d.name not in taken and selected(d, req) and tolerated(d, req)]
        if req.count == 0:
            matching = [d for d in world.devices if selected(d, req)]
            if not matching or any(d not in candidates for d in matching):
                return False
            options: Any = [tuple(matching)]
        else:
            options = itertools.combinations(candidates, req.count)
        for combo in options:
            cost = sum(d.consumes for d in combo)
            if world.counter_value and cost > counters:
                continue
            group = picked.get(spec.name, []) + list(combo)
            if spec.match_numa and len({d.numa for d in group}) > 1:
                continue
            if spec.distinct_model and len({d.model for d in group}) != len(group):
                continue
            if rec(i + 1, taken | {d.name for d in combo}, counters - cost, {**picked, spec.name: group}):
                return True
        return False

    return rec(0, frozenset(), counter_left, {})


def allocate(world: World) -> list[dict[str, Any]] | None:
    """kdra's allocations, or None when the claims do not fit or upstream would return an error (the only
    one these inputs can produce: an All device that breaks a matchAttribute constraint)."""
    classes, slices, allocated, claims = world.objects()
    try:
        outcome = Allocator(classes, slices, allocated, FeatureGates()).allocate(NODE, claims)
    except AllocationError as err:
        assert "constraint would not be satisfied" in str(err), str(err)
        return None
    if outcome.allocations is None:
        assert outcome.explanation is not None
    return outcome.allocations


# ------------------------------------------------------------------------------------------- tests


@SETTINGS
@given(exclusive_worlds())
def test_exclusive_allocations_respect_every_rule(world: World) -> None:
    allocations = allocate(world)
    if allocations is not None:
        check_allocation(world, allocations)


@SETTINGS
@given(shared_worlds())
def test_shared_allocations_respect_capacity_and_policy(world: World) -> None:
    allocations = allocate(world)
    if allocations is not None:
        check_allocation(world, allocations)


@SETTINGS
@given(exclusive_worlds())
def test_unschedulable_only_when_nothing_fits(world: World) -> None:
    """For claims without distinctAttribute (whose upstream bookkeeping is per request name), the search is
    complete: kdra finds an allocation whenever one exists, and only then."""
    for c in world.claims:
        c.distinct_model = False
        if any(r.count == 0 for r in c.requests):
            # Upstream aborts (an error, not a retry) when an All device breaks a constraint.
            c.match_numa = False
    allocations = allocate(world)
    assert (allocations is not None) == brute_force_fits(world), (
        "kdra found an allocation the model rejects" if allocations is not None else "kdra missed a solution"
    )
