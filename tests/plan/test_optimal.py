"""On generated cases small enough for brute force, the plan costs exactly the optimum, and the lower bound
never exceeds it. The brute force is independent of the planner's search: every set of nodes in increasing
cost, every order of the units and every assignment of them to nodes, with the same checks (kdra.plan.bins:
the allocator and the scheduler's node filters)."""

from __future__ import annotations

import itertools
import random

import pytest

from kdra.plan.bins import Bin, Cluster, Placement, new_bin
from kdra.plan.demand import build_demand, gang_specs
from kdra.plan.scaleup import plan_scale_up

from .helpers import A100, GATES, H100, L40S, gpus, inputs, mig, pod, pod_group, template, types_of

REQUESTS = {"one": gpus(1), "two": gpus(2), "four": gpus(4), "small": mig("10Gi"), "big": mig("40Gi")}


def _case(seed: int) -> tuple[list[dict], list[dict]]:
    rnd = random.Random(seed)
    pools = [
        dict(p, price=float(rnd.choice([5, 8, 13, 21, 34, 55]))) for p in rnd.sample([H100, A100, L40S], 2)
    ]
    objs: list[dict] = [template(n, r) for n, r in REQUESTS.items()]
    for i in range(rnd.randint(2, 5)):
        objs.append(pod(f"p-{i}", templates=(rnd.choice(list(REQUESTS)),), cpu=str(rnd.choice([1, 8, 24]))))
    if rnd.random() < 0.5:
        objs.append(pod_group("g", 2))
        objs += [pod(f"g-{i}", templates=("two",), group="g") for i in range(2)]
    return pools, objs


def _feasible(units: list, bins: list[Bin]) -> bool:
    """Some order of the units and some node for each holds them all (depth first: any remaining unit next,
    on any node; units of one shape and empty nodes of one type are interchangeable)."""
    if not units:
        return True
    tried_shapes: set[str] = set()
    for i, u in enumerate(units):
        if u.shape in tried_shapes:
            continue
        tried_shapes.add(u.shape)
        empty: set[str] = set()
        for b in bins:
            if b.added and not b.placements:
                if b.type.name in empty:
                    continue
                empty.add(b.type.name)
            got = b.place(u)
            if not isinstance(got, Placement):
                continue
            ok = _feasible(units[:i] + units[i + 1 :], bins)
            b.undo(got)
            if ok:
                return True
    return False


def brute_force(pools: list[dict], objs: list[dict]) -> float | None:
    types = types_of(pools)
    inp = inputs(objs)
    units = [
        u
        for j in build_demand(inp.pending, inp.claims, inp.templates, gang_specs(inp.scheduling)).jobs
        for u in j.units
    ]
    sets = [
        combo
        for n in range(len(units) + 1)
        for combo in itertools.combinations_with_replacement(range(len(types)), n)
    ]
    for combo in sorted(sets, key=lambda c: (sum(types[i].price for i in c), c)):
        cluster = Cluster([], {}, [], [], [], GATES)
        bins = cluster.bins + [new_bin(types[i], f"n{k}", GATES) for k, i in enumerate(combo)]
        if _feasible(units, bins):
            return sum(types[i].price for i in combo)
    return None


@pytest.mark.parametrize("seed", range(12))
def test_the_plan_costs_the_brute_force_optimum_and_the_bound_is_below(seed: int) -> None:
    pools, objs = _case(seed)
    best = brute_force(pools, objs)
    plan = plan_scale_up(inputs(objs), types_of(pools), GATES, verify=False)
    if best is None:
        assert plan.unplaced
        return
    assert plan.unplaced == []
    assert plan.cost == pytest.approx(best), (plan.cost, best)
    assert plan.lower_bound <= best + 1e-9
    assert plan.optimal


def test_the_bound_counts_a_shape_by_the_types_each_job_may_use() -> None:
    """A required-rack gang can only use racked types: its members are priced on those; free pods of the
    same shape on the cheap type (a shared tally once mixed them at the gang's price: bound > cost)."""
    racked = {**H100, "price": 50.0, "topology": {"nodesPerRack": 2}}
    objs = [template("four", gpus(4)), pod_group("g", 2, required="kdra.dev/rack")]
    objs += [pod(f"g-{i}", templates=("four",), group="g") for i in range(2)]
    objs += [pod(f"p-{i}", templates=("four",)) for i in range(8)]
    plan = plan_scale_up(inputs(objs), types_of([racked, {**L40S, "price": 10.0}]), GATES, verify=False)
    assert plan.unplaced == [] and plan.lower_bound <= plan.cost + 1e-9
    assert sorted(b.type.name for b in plan.added) == ["h100"] + ["l40s"] * 8
