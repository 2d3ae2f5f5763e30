"""`kdra plan scale-up`: the cheapest nodes to add so the pending pods and gangs fit (kdra.plan.search), with a
lower bound beside the cost (kdra.plan.bound) and, on small inputs, a proof of optimality (kdra.plan.exact)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kdra.allocator import FeatureGates
from kdra.plan.bins import Bin, Cluster, Placement
from kdra.plan.bound import lower_bound
from kdra.plan.demand import Demand, Job, build_demand, gang_specs
from kdra.plan.inputs import Inputs, select
from kdra.plan.nodetypes import NodeType
from kdra.plan.probe import Prober
from kdra.plan.search import Search, Unplaced
from kdra.scheduler.topology import TopologyLevels


@dataclass
class ScaleUp:
    types: list[NodeType]
    demand: Demand
    search: Search
    lower_bound: float
    optimal: bool  # proven by kdra.plan.exact
    seconds: float
    cluster_nodes: int
    notes: list[str] = field(default_factory=list)

    @property
    def added(self) -> list[Bin]:
        return self.search.added

    @property
    def cost(self) -> float:
        return self.search.cost

    @property
    def unplaced(self) -> list[Unplaced]:
        return self.search.unplaced

    @property
    def placed(self) -> dict[str, list[tuple[Bin, Placement]]]:
        return self.search.placed


def existing_per_pool(nodes: Sequence[dict[str, Any]]) -> dict[str, int]:
    from kdra.plan.nodetypes import pool_of

    out: dict[str, int] = {}
    for n in nodes:
        p = pool_of(n)
        if p:
            out[p] = out.get(p, 0) + 1
    return out


def plan_scale_up(
    inputs: Inputs,
    types: list[NodeType],
    features: FeatureGates,
    *,
    namespace: str | None = None,
    queue: str | None = None,
    names: Sequence[str] = (),
    exact: bool = True,
) -> ScaleUp:
    start = time.perf_counter()
    gangs = gang_specs(inputs.scheduling)
    pending = select(inputs.pending, namespace=namespace, queue=queue, names=names, gangs=gangs)
    demand = build_demand(pending, inputs.claims, inputs.templates, gangs)
    levels = TopologyLevels.from_objects(inputs.scheduling)
    taken = {n["metadata"]["name"] for n in inputs.nodes}

    def name(t: NodeType, i: int) -> str:
        n = i
        while f"{t.pool.name}-new-{n}" in taken:
            n += 1000
        return f"{t.pool.name}-new-{n}"

    def fresh() -> Search:
        cluster = Cluster(inputs.nodes, inputs.classes, inputs.slices, inputs.claims, inputs.running, features)
        return Search(cluster, types, features, levels, prober, name=name)

    prober = Prober(types, features)
    search = fresh()
    bound = lower_bound(search, demand.jobs)  # before anything is placed: the cluster as it stands
    search.run(demand.jobs)
    optimal = False
    if exact and not search.unplaced:
        from kdra.plan.exact import prove

        proven = prove(fresh, search, demand.jobs, bound)
        if proven is not None:
            search, optimal = proven, True
    return ScaleUp(
        types,
        demand,
        search,
        min(bound, search.cost) if not search.unplaced else bound,
        optimal or abs(search.cost - bound) < 1e-9,
        time.perf_counter() - start,
        len(inputs.nodes),
    )


def jobs_of(plan: ScaleUp) -> list[Job]:
    return plan.demand.jobs
