"""`kdra plan scale-up`: the cheapest nodes to add so the pending pods and gangs fit (kdra.plan.search), with
a lower bound beside the cost (kdra.plan.bound), on small inputs a proof of optimality (kdra.plan.exact), and
the plan checked by kdra's scheduler (kdra.plan.verify), told where the plan expects each pod that is not
of a gang (status.nominatedNodeName): when the scheduler leaves pods pending that the plan's packing placed,
the next round plans for them on the cluster as the scheduler left it, until the scheduler binds every pod
the plan can place."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kdra.allocator import FeatureGates
from kdra.api.types import Obj
from kdra.plan.bins import Bin, Cluster, Placement
from kdra.plan.bound import lower_bound
from kdra.plan.demand import Demand, Job, build_demand, gang_specs, ref
from kdra.plan.inputs import Inputs, select, split
from kdra.plan.nodetypes import NodeType, pool_of
from kdra.plan.probe import Prober
from kdra.plan.search import Search, Unplaced
from kdra.scheduler.topology import TopologyLevels

# Rounds of plan-then-check: the first plan, then repairs for what the scheduler placed differently.
MAX_ROUNDS = 4


@dataclass
class ScaleUp:
    types: list[NodeType]
    demand: Demand
    searches: list[Search]  # one per round
    lower_bound: float
    optimal: bool  # proven (kdra.plan.exact, or cost == bound) and confirmed by the scheduler unchanged
    seconds: float
    verified: bool  # kdra's scheduler ran the plan
    where: dict[str, list[str]] = field(default_factory=dict)  # node -> pods on it (the scheduler's, if run)
    devices: dict[str, list[str]] = field(default_factory=dict)  # node -> driver/pool/device the pods got
    left: list[str] = field(default_factory=list)  # pods the scheduler left pending that the plan placed
    check_seconds: float = 0.0  # of `seconds`, in kdra's scheduler checking the plan
    check_cpu_seconds: float = 0.0  # the same in CPU time (what a loaded machine does not inflate)

    @property
    def added(self) -> list[Bin]:
        return [b for s in self.searches for b in s.added]

    @property
    def groups(self) -> list[Any]:
        return [g for s in self.searches for g in s.groups]

    @property
    def cost(self) -> float:
        return sum(s.cost for s in self.searches)

    @property
    def unplaced(self) -> list[Unplaced]:
        """What the first search could not place; what later rounds could not is in `left`."""
        return list(self.searches[0].unplaced)

    @property
    def placed(self) -> dict[str, list[tuple[Bin, Placement]]]:
        out: dict[str, list[tuple[Bin, Placement]]] = {}
        for s in self.searches:
            out.update(s.placed)
        return out


def existing_per_pool(nodes: Sequence[Obj]) -> dict[str, int]:
    out: dict[str, int] = {}
    for n in nodes:
        p = pool_of(n)
        if p:
            out[p] = out.get(p, 0) + 1
    return out


def _search(
    inputs: Inputs,
    demand: Demand,
    types: list[NodeType],
    features: FeatureGates,
    serial: int,
    exact: bool,
    bounded: bool = True,
    excluded: frozenset[str] = frozenset(),
) -> tuple[Search, float, bool]:
    """One round: (the search, its lower bound (0 unless `bounded`), proven optimal); `excluded`: nodes of
    the cluster not to place on."""
    levels = TopologyLevels.from_objects(inputs.scheduling)
    taken = {n["metadata"]["name"] for n in inputs.nodes}

    def name(t: NodeType, i: int) -> str:
        n = i
        while f"{t.pool.name}-new-{n}" in taken:
            n += 1000
        return f"{t.pool.name}-new-{n}"

    prober = Prober(types, features)

    def fresh() -> Search:
        s = Search(Cluster.from_inputs(inputs, features), types, features, levels, prober, name=name)
        s.serial = serial
        s.excluded = set(excluded)
        return s

    search = fresh()
    search.run(demand.jobs)
    if not bounded:
        return search, 0.0, False
    # Over the jobs the plan places, on the cluster as it stands (a fresh search: nothing placed yet).
    bound = lower_bound(fresh(), [j for j in demand.jobs if j.key in search.placed])
    if exact and not search.unplaced:
        from kdra.plan.exact import prove

        proven = prove(fresh, search, demand.jobs, bound)
        if proven is not None:
            return proven, bound, True
    return search, bound, False


def rendered(bins: Sequence[Bin], features: FeatureGates) -> list[Obj]:
    """The added nodes' Nodes, ResourceSlices and DeviceClasses, rendered as the plan's Fleet has them."""
    from kdra.fleets.render import render
    from kdra.fleets.spec import Fleet
    from kdra.plan.result import pools_for

    pools = pools_for(bins)
    if not pools:
        return []
    return render(Fleet(name="scale-up", pools=pools), kubernetes_version=features.version)


def _less_room(types: list[NodeType], bins: Sequence[Bin]) -> list[NodeType]:
    used: dict[str, int] = {}
    for b in bins:
        assert b.type is not None
        used[b.type.pool.name] = used.get(b.type.pool.name, 0) + 1
    return [
        dataclasses.replace(
            t, max_new=None if t.max_new is None else max(0, t.max_new - used.get(t.pool.name, 0))
        )
        for t in types
    ]


def plan_scale_up(
    inputs: Inputs,
    types: list[NodeType],
    features: FeatureGates,
    *,
    namespace: str | None = None,
    queue: str | None = None,
    names: Sequence[str] = (),
    exact: bool = True,
    verify: bool = True,
    scoring: str = "LeastAllocated",
) -> ScaleUp:
    from kdra.plan.verify import Check
    from kdra.scheduler.plugins.noderesources import ScoringStrategy
    from kdra.scheduler.scheduler import SchedulerConfig

    start = time.perf_counter()
    gangs = gang_specs(inputs.scheduling)
    pending = select(inputs.pending, namespace=namespace, queue=queue, names=names, gangs=gangs)
    demand = build_demand(pending, inputs.claims, inputs.templates, gangs)
    search, bound, optimal = _search(inputs, demand, types, features, 0, exact)
    plan = ScaleUp(types, demand, [search], bound, optimal, 0.0, verify)
    if verify:
        unplaced = {pd.key for u in search.unplaced for pd in u.job.pods}
        want = [p for p in pending if ref(p) not in unplaced]
        config = SchedulerConfig(scoring=ScoringStrategy(type=scoring), features=features)
        t0, c0 = time.perf_counter(), time.process_time()
        run = Check(inputs, want, config, nominated=_expected_nodes(search, demand.jobs))
        new_nodes = search.added
        for _ in range(MAX_ROUNDS):
            verdict = run.add(rendered(new_nodes, features))
            plan.check_seconds += time.perf_counter() - t0
            plan.check_cpu_seconds += time.process_time() - c0
            after = split(verdict.objects)
            after.pdbs = inputs.pdbs
            _record(plan, after, {ref(p) for p in want})
            stuck = verdict.unbound == plan.left  # the last round's nodes bound none of what they were for
            plan.left = verdict.unbound
            if not verdict.unbound or stuck:
                break
            plan.optimal = False
            left = set(verdict.unbound)
            todo = [p for p in after.pending if ref(p) in left]
            again = build_demand(todo, after.claims, after.templates, gangs)
            room = _less_room(types, plan.added)
            nxt, _, _ = _search(after, again, room, features, len(plan.added), False, bounded=False)
            if not nxt.added and not nxt.unplaced:
                # The search found room for them on the nodes there, which the scheduler just did not use
                # (its own order and scores: a gang's members spread by LeastAllocated, none left with room
                # for the largest): plan them on nodes of their own instead of giving up.
                every = frozenset(n["metadata"]["name"] for n in after.nodes)
                nxt, _, _ = _search(
                    after, again, room, features, len(plan.added), False, bounded=False, excluded=every
                )
            if not nxt.added:
                break
            plan.searches.append(nxt)
            new_nodes = nxt.added
            t0, c0 = time.perf_counter(), time.process_time()
        _drop_idle(plan, inputs, want, config)
    plan.seconds = time.perf_counter() - start
    return plan


def _drop_idle(plan: ScaleUp, inputs: Inputs, want: list[Obj], config: Any) -> None:
    """Added nodes the scheduler left empty (it spread pods into room planned for others, or left pending
    the pods a round bought them for) are dropped when the scheduler, given the rest all at once, binds every
    planned pod it bound before: a plan must not buy a node that runs nothing. Kept as they are when that
    check leaves another pod pending. The searches' `placed` keep their
    packing (what the plan's rounds nominated); the plan's output reads `where`, the scheduler's."""
    from kdra.plan.verify import Check

    idle = {b.name for b in plan.added if b.name not in plan.where}
    if not idle:
        return
    kept = [b for b in plan.added if b.name not in idle]
    nominated: dict[str, str] = {}
    for search in plan.searches:
        nominated.update(_expected_nodes(search, plan.demand.jobs))
    t0, c0 = time.perf_counter(), time.process_time()
    verdict = Check(
        inputs, want, config, nominated={k: v for k, v in nominated.items() if v not in idle}
    ).add(rendered(kept, config.features))
    plan.check_seconds += time.perf_counter() - t0
    plan.check_cpu_seconds += time.process_time() - c0
    if not set(verdict.unbound) <= set(plan.left):
        return
    plan.left = verdict.unbound
    for search in plan.searches:
        search.added = [b for b in search.added if b.name not in idle]
    plan.optimal = plan.cost <= plan.lower_bound  # the search's proof counted the dropped nodes
    after = split(verdict.objects)
    _record(plan, after, {ref(p) for p in want})


def _expected_nodes(search: Search, jobs: Sequence[Job]) -> dict[str, str]:
    """Pod -> the node the search placed it on: the scheduler is told where pods are expected
    (kdra.plan.verify), so that pods the plan put together (those sharing a claim, a gang's members packed
    beside other pods) land together. Without it for gangs the scheduler's LeastAllocated scoring spread a
    gang's members into room planned for others, and its domain search put a gang with a required level on
    a node of its own, so a later round bought nodes more (the checker's seeds: 8 nodes more over 400
    cases; 17 over 200 with rack gangs). The plan's nodes of a gang lie in one domain of its level."""
    out: dict[str, str] = {}
    for job in jobs:
        for b, placement in search.placed.get(job.key, ()):
            for pd in placement.unit.pods:
                out[pd.key] = b.name
    return out


def _record(plan: ScaleUp, after: Inputs, wanted: set[str]) -> None:
    """Where the scheduler put the planned pods, and the devices their claims got."""
    from kdra.api.pods import pod_claim_names

    claims = {ref(c): c for c in after.claims}
    plan.where, plan.devices = {}, {}
    for p in after.running:
        if ref(p) not in wanted:
            continue
        node = p["spec"]["nodeName"]
        plan.where.setdefault(node, []).append(ref(p))
        ns = ref(p).split("/")[0]
        for n in pod_claim_names(p):
            alloc = (claims.get(f"{ns}/{n}", {}).get("status") or {}).get("allocation") or {}
            for r in (alloc.get("devices") or {}).get("results") or []:
                dev = f"{r.get('driver')}/{r.get('pool')}/{r.get('device')}"
                if dev not in plan.devices.setdefault(node, []):
                    plan.devices[node].append(dev)
