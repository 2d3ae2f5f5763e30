"""`kdra plan scale-down`: the nodes that can be drained, every running pod placed again on the rest.

Nodes are tried most expensive first (then fewest pods). Draining a node moves its pods: pods sharing a claim
move together, a gang moves whole (every member, wherever it runs, under its required topology level), and
each PodDisruptionBudget allows only its disruptionsAllowed evictions over the whole plan. Pods that
cluster-autoscaler would not evict (annotation cluster-autoscaler.kubernetes.io/safe-to-evict: "false",
DaemonSet pods stay with their node and are not moved), and pools at their minCount, keep their node.
Moved pods get their claims allocated again (a new claim from the same spec, as recreating the pod does),
with the same allocator and node fit as scale-up (kdra.plan.bins), on the nodes that stay.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kdra.allocator import FeatureGates
from kdra.api.pods import pod_claim_names
from kdra.api.types import Obj
from kdra.cluster.selectors import LabelSelector, from_label_selector
from kdra.plan.bins import Bin, Cluster, Placement
from kdra.plan.demand import Job, allocated, build_demand, gang_specs, ref
from kdra.plan.inputs import Inputs
from kdra.plan.nodetypes import NodeType, pool_of
from kdra.plan.search import Search
from kdra.scheduler.gang import pod_group_ref
from kdra.scheduler.topology import TopologyLevels
from kdra.sim.accounting import FleetGpus

SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
HOURS_PER_WEEK = 168


@dataclass
class Drain:
    node: str
    pool: str | None
    price: float
    gpus: int
    moved: list[tuple[str, str]]  # (pod, new node)


@dataclass
class ScaleDown:
    drains: list[Drain] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)  # node -> why it stays


def _daemon(pod: Mapping[str, Any]) -> bool:
    return any(o.get("kind") == "DaemonSet" for o in (pod.get("metadata") or {}).get("ownerReferences") or [])


@dataclass
class _Budget:
    namespace: str
    selector: LabelSelector
    allowed: int
    name: str

    def covers(self, pod: Mapping[str, Any]) -> bool:
        meta = pod.get("metadata") or {}
        return (meta.get("namespace") or "default") == self.namespace and self.selector.matches(
            meta.get("labels") or {}
        )


class _Budgets:
    """PodDisruptionBudgets: evictions each still allows (status.disruptionsAllowed, as the Eviction API
    checks it)."""

    def __init__(self, pdbs: Sequence[Obj]) -> None:
        self.items = [
            _Budget(
                (p.get("metadata") or {}).get("namespace") or "default",
                from_label_selector((p.get("spec") or {}).get("selector") or {}, what="selector"),
                int((p.get("status") or {}).get("disruptionsAllowed") or 0),
                ref(p),
            )
            for p in pdbs
        ]

    def take(self, pods: Sequence[Mapping[str, Any]]) -> str | None:
        """Count the evictions; the PDB that refuses one (nothing taken then), else None."""
        need = [sum(1 for pod in pods if b.covers(pod)) for b in self.items]
        for b, n in zip(self.items, need, strict=True):
            if n > b.allowed:
                return b.name
        for b, n in zip(self.items, need, strict=True):
            b.allowed -= n
        return None

    def give_back(self, pods: Sequence[Mapping[str, Any]]) -> None:
        for b in self.items:
            b.allowed += sum(1 for pod in pods if b.covers(pod))


def plan_scale_down(inputs: Inputs, types: Sequence[NodeType], features: FeatureGates) -> ScaleDown:
    prices: dict[str, float] = {}
    mins: dict[str, int] = {}
    for t in types:  # the first type of a pool name wins (the cluster's own Fleet comes first)
        prices.setdefault(t.pool.name, t.price)
        mins.setdefault(t.pool.name, t.pool.min_count)
    cluster = Cluster.from_inputs(inputs, features)
    search = Search(cluster, [], features, TopologyLevels.from_objects(inputs.scheduling))
    gpus = FleetGpus([*inputs.nodes, *inputs.slices])
    # The cluster as the plan so far leaves it: a pod moved off a drained node runs where it went (its
    # claims allocated there), so that a node drained later takes along what earlier drains put on it.
    claims = {ref(c): c for c in inputs.claims}
    running = [copy.deepcopy(p) for p in inputs.running]
    gangs = gang_specs(inputs.scheduling)
    by_node: dict[str, list[Obj]] = {}
    for p in running:
        by_node.setdefault(p["spec"]["nodeName"], []).append(p)
    members: dict[str, list[Obj]] = {}
    for p in running:
        g = pod_group_ref(p)
        if g is not None and g[1] in gangs:
            members.setdefault(g[1], []).append(p)
    sharers: dict[str, list[Obj]] = {}  # claim -> the running pods that use it
    for p in running:
        for n in pod_claim_names(p):
            sharers.setdefault(f"{ref(p).split('/')[0]}/{n}", []).append(p)
    budgets = _Budgets(inputs.pdbs)
    pools: dict[str, int] = {}
    for node in inputs.nodes:
        if name := pool_of(node):
            pools[name] = pools.get(name, 0) + 1
    out = ScaleDown()
    bins = {b.name: b for b in cluster.bins}
    drained: set[str] = set()

    used: dict[str, float] = {}  # whole-GPU equivalents the node's pods hold
    for host, on_host in by_node.items():
        for p in on_host:
            ns = ref(p).split("/")[0]
            for cn in pod_claim_names(p):
                alloc = (claims.get(f"{ns}/{cn}", {}).get("status") or {}).get("allocation") or {}
                for r in (alloc.get("devices") or {}).get("results") or []:
                    used[host] = used.get(host, 0.0) + gpus.dra_result_cost(r).gpu_equiv

    def order(b: Bin) -> tuple[float, float, int, str]:
        """Most expensive first, then the least used (cluster-autoscaler drains under-utilised nodes)."""
        return (
            -prices.get(pool_of(b.node) or "", 0.0),
            used.get(b.name, 0.0),
            len(by_node.get(b.name, [])),
            b.name,
        )

    for b in sorted(cluster.bins, key=order):
        pool = pool_of(b.node)
        pods = [p for p in by_node.get(b.name, []) if not _daemon(p)]
        if pool and pools.get(pool, 0) <= mins.get(pool, 0):
            out.kept[b.name] = f"pool {pool} is at its minCount ({mins.get(pool, 0)})"
            continue
        moving = _closure(pods, sharers, members)
        # Every pod the drain evicts, its gang's members and its claims' other pods on other nodes
        # included: one that may not be evicted keeps the node.
        unsafe = sorted(
            ref(p)
            for p in moving.values()
            if (p["metadata"].get("annotations") or {}).get(SAFE_TO_EVICT) == "false"
        )
        if unsafe:
            mine = {ref(p) for p in pods}
            on = "" if any(r in mine for r in unsafe) else f" ({unsafe[0]}, which would move along)"
            out.kept[b.name] = f'a pod is annotated {SAFE_TO_EVICT}: "false"{on}'
            continue
        refused = budgets.take(list(moving.values()))
        if refused is not None:
            out.kept[b.name] = f"PodDisruptionBudget {refused} allows no more evictions"
            continue
        moved = _try_move(search, bins, b, list(moving.values()), claims, inputs, gangs, drained)
        if moved is None:
            budgets.give_back(list(moving.values()))
            out.kept[b.name] = "its pods do not all fit on the other nodes"
            continue
        drained.add(b.name)
        for key, to in moved:
            p = moving[key]
            by_node[p["spec"]["nodeName"]].remove(p)
            p["spec"]["nodeName"] = to
            by_node.setdefault(to, []).append(p)
        if pool:
            pools[pool] -= 1
        out.drains.append(
            Drain(b.name, pool, prices.get(pool or "", 0.0), gpus.node_gpus.get(b.name, 0), moved)
        )
    return out


def _closure(
    pods: Sequence[Obj], sharers: Mapping[str, list[Obj]], members: Mapping[str, list[Obj]]
) -> dict[str, Obj]:
    """The pods a drain moves: the node's own, every member of their gangs and every pod sharing a claim with
    a moving pod, until nothing more joins (a sharer pulled in through a claim usable on several nodes
    brings its gang, whose members bring their claims' sharers)."""
    moving: dict[str, Obj] = {}
    todo = list(pods)
    for p in todo:  # grows as it goes: breadth first, the node's own pods first
        if ref(p) in moving:
            continue
        moving[ref(p)] = p
        g = pod_group_ref(p)
        if g is not None:
            todo.extend(members.get(g[1], ()))
        ns = ref(p).split("/")[0]
        for n in pod_claim_names(p):
            todo.extend(sharers[f"{ns}/{n}"])
    return moving


def _try_move(
    search: Search,
    bins: Mapping[str, Bin],
    node: Bin,
    pods: list[Obj],
    claims: dict[str, Obj],
    inputs: Inputs,
    gangs: Mapping[str, Any],
    drained: set[str],
) -> list[tuple[str, str]] | None:
    """Take the pods off their nodes and place them again on the nodes that stay; all or nothing. On
    success `claims` holds the moved claims as allocated again (where a later drain finds them)."""
    features = search.features
    removed: list[tuple[Bin, Obj, list[Obj]]] = []
    for p in pods:
        src = bins[p["spec"]["nodeName"]]
        ns = ref(p).split("/")[0]
        held = [claims[f"{ns}/{n}"] for n in pod_claim_names(p) if f"{ns}/{n}" in claims]
        held = [c for c in held if allocated(c)]
        removed.append((src, p, held))
    released: set[str] = set()
    for src, p, held in removed:
        src.fit.infos[src.fit_name].remove_pod(_uid(p))
        for c in held:
            if ref(c) not in released:
                src.state.remove_claim(c, features)
                released.add(ref(c))
    # The moved pods as pending pods: no node, claims to allocate again from the same specs.
    fresh_claims = []
    for c in {ref(c): c for _, _, held in removed for c in held}.values():
        cc = copy.deepcopy({k: v for k, v in c.items() if k != "status"})
        fresh_claims.append(cc)
    pending = []
    for _, p, _ in removed:
        q = copy.deepcopy(p)
        q["spec"].pop("nodeName", None)
        q.pop("status", None)
        pending.append(q)
    others = [c for c in claims.values() if ref(c) not in released]
    demand = build_demand(pending, [*others, *fresh_claims], inputs.templates, gangs)
    search.excluded = {*drained, node.name}
    targets = search.existing()
    done_all: list[tuple[Bin, Placement]] = []
    ok = True
    for job in demand.jobs:
        done = _place(search, job, targets)
        if done is None:
            ok = False
            break
        done_all.extend(done)
    search.excluded = set(drained)
    if ok:
        for _, pl in done_all:
            for claim, allocation in pl.allocations:
                claims[ref(claim)] = {**claim, "status": {"allocation": allocation}}
        return [(pd.key, b.name) for b, pl in done_all for pd in pl.unit.pods]
    for b, pl in reversed(done_all):
        b.undo(pl)
    for src, p, _ in removed:
        src.fit.infos[src.fit_name].add_pod(_info(p))
    assert search.cluster is not None
    for c in {ref(c): c for _, _, held in removed for c in held}.values():
        search.cluster.state.add_claim(c, features)
    return None


def _place(search: Search, job: Job, targets: list[Bin]) -> list[tuple[Bin, Placement]] | None:
    if job.gang is not None and job.gang.topology.required:
        return search.place_job(job)
    return search.fill(job.units, list(targets), None)


def _info(p: Obj) -> Any:
    from kdra.plan.demand import pod_info

    return pod_info(p)


def _uid(p: Obj) -> str:
    return str(_info(p).uid)


def drain_document(plan: ScaleDown, name: str = "scale-down") -> Obj:
    from kdra.fleets.spec import API_VERSION

    drains = [
        {
            "name": d.node,
            "pool": d.pool,
            "pricePerHour": round(d.price, 4),
            "gpus": d.gpus,
            "pods": [{"pod": p, "to": n} for p, n in d.moved],
        }
        for d in plan.drains
    ]
    return {
        "apiVersion": API_VERSION,
        "kind": "ScaleDownPlan",
        "metadata": {"name": name},
        "status": {
            "drain": drains,
            "gpuHoursSavedPerWeek": sum(d.gpus for d in plan.drains) * HOURS_PER_WEEK,
            "savedPerWeek": round(sum(d.price for d in plan.drains) * HOURS_PER_WEEK, 2),
            "kept": [{"name": n, "reason": r} for n, r in sorted(plan.kept.items())],
        },
    }
