"""A lower bound on what any plan costs: the per-resource relaxation.

On a node of type T a unit u takes the fraction use_r(u, T) of resource r (cpu, memory, pods, whole-GPU
equivalents; measured on an empty node: kdra.plan.probe), so it costs at least price(T) * use_r(u, T) of that
node, and at least cs_r(u) = min over T of that. A node's fractions of r add up to at most 1, so any plan that
puts every unit on added nodes costs at least the sum of cs_r over the units, for each r; likewise, a shape
of which k fit on a node of T needs n/k such nodes (per shape and T, the cheapest). The cluster's own
nodes are free: a unit that fits on none of them as the cluster stands (nothing is freed by a plan) counts
in full; one that might fit there counts only beyond what the cluster's free cpu, memory and pod slots can
hold (a fractional knapsack: the largest cost shares per unit of that resource go there first); for GPUs
and slots it counts nothing. The bound is the largest of these. A gang with a required topology level can
only use types whose nodes carry that label, so its units' shares are over those types.

The probes measure the allocator's first choice on an empty node; a later firstAvailable alternative that
takes less of a resource would make a share smaller than measured: requests with firstAvailable therefore
count their smallest alternative (the minimum over the alternatives' probes)."""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence

from kdra.plan.bins import Bin
from kdra.plan.demand import Job, Unit
from kdra.plan.nodetypes import NodeType
from kdra.plan.search import Search, domain_size
from kdra.scheduler.topology import LABEL_ZONE

RESOURCES = ("cpu", "memory", "pods", "gpus")
# Shapes checked against the cluster's nodes before every further unit is assumed to fit there (weaker bound).
MAX_EXISTING_CHECKS = 4000


def _alternatives(unit: Unit) -> list[Unit]:
    """The unit with each request's firstAvailable list cut to one alternative (every combination, at most
    16), or [unit] when it has none."""
    variants: list[Unit] = [unit]
    for ci, claim in enumerate(unit.claims):
        reqs = ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []
        for ri, req in enumerate(reqs):
            subs = req.get("firstAvailable") or []
            if len(subs) < 2:
                continue
            nxt = []
            for v in variants:
                for si in range(len(subs)):
                    c2 = copy.deepcopy(v.claims[ci])
                    c2["spec"]["devices"]["requests"][ri]["firstAvailable"] = [subs[si]]
                    claims = list(v.claims)
                    claims[ci] = c2
                    nxt.append(Unit(v.pods, claims, v.fixed, f"{v.shape}#{ci}.{ri}.{si}"))
            variants = nxt[:16]
    return variants


def _shares(search: Search, unit: Unit, types: Sequence[NodeType]) -> tuple[dict[str, float], float]:
    """cs_r(unit) per resource over `types`, and the cheapest price per copy of the shape."""
    shares = dict.fromkeys(RESOURCES, math.inf)
    per_copy = math.inf
    for v in _alternatives(unit):
        for t in types:
            p = search.prober.probe(v, t)
            if not p.fits:
                continue
            per_copy = min(per_copy, t.price / p.per_node)
            for r in RESOURCES:
                shares[r] = min(shares[r], t.price * p.use.get(r, 0.0))
    return {r: (0.0 if s == math.inf else s) for r, s in shares.items()}, (
        0.0 if per_copy == math.inf else per_copy
    )


def _fits_cluster(bins: Sequence[Bin], unit: Unit, budget: list[int]) -> bool:
    for b in bins:
        if budget[0] <= 0:
            return True
        budget[0] -= 1
        if isinstance(b.check(unit), list):
            return True
    return False


def _demand(unit: Unit) -> dict[str, float]:
    out = {"cpu": 0.0, "memory": 0.0, "pods": float(len(unit.pods))}
    for pd in unit.pods:
        out["cpu"] += pd.info.requests.get("cpu", 0)
        out["memory"] += pd.info.requests.get("memory", 0)
    return out


def _free(bins: Sequence[Bin]) -> dict[str, float]:
    out = {"cpu": 0.0, "memory": 0.0, "pods": 0.0}
    for b in bins:
        info = b.fit.infos[b.fit_name]
        alloc = info.allocatable
        out["cpu"] += max(0, alloc.get("cpu", 0) - info.requested.get("cpu", 0))
        out["memory"] += max(0, alloc.get("memory", 0) - info.requested.get("memory", 0))
        out["pods"] += max(0, alloc.get("pods", 0) - len(info.pods))
    return out


def _types_for(search: Search, job: Job) -> list[NodeType]:
    """The types a job's added nodes can be of: with a required topology level, only those whose nodes carry
    that label (kdra.plan.search.domain_size; a zone is a type's own)."""
    required = job.gang.topology.required if job.gang is not None else None
    if not required:
        return search.types
    label = search.levels.resolve(required)
    if label == LABEL_ZONE:
        return [t for t in search.types if t.zone]
    return [t for t in search.types if domain_size(t, label) > 0]


def lower_bound(search: Search, jobs: Sequence[Job]) -> float:
    """The bound for placing `jobs` (on a search that has not changed the cluster's nodes' state, or has:
    only the bins' starting state is read, by undoing nothing; call before placing or on a fresh Search)."""
    cluster_bins = search.existing()
    budget = [MAX_EXISTING_CHECKS]
    sure = dict.fromkeys(RESOURCES, 0.0)  # units that can only go on added nodes
    maybe: dict[str, list[tuple[float, float]]] = {r: [] for r in ("cpu", "memory", "pods")}
    slots: dict[str, tuple[int, float]] = {}
    cache: dict[str, tuple[dict[str, float], float, bool]] = {}
    for job in jobs:
        types = _types_for(search, job)
        for unit in job.units:
            key = f"{len(types)}:{unit.shape}"
            hit = cache.get(key)
            if hit is None:
                shares, per_copy = _shares(search, unit, types)
                hit = (shares, per_copy, _fits_cluster(cluster_bins, unit, budget))
                cache[key] = hit
            shares, per_copy, maybe_free = hit
            if not maybe_free:
                for r in RESOURCES:
                    sure[r] += shares[r]
                n, pc = slots.get(key, (0, per_copy))
                slots[key] = (n + 1, pc)
                continue
            need = _demand(unit)
            for r in maybe:
                maybe[r].append((shares[r], need[r]))
    free = _free(cluster_bins)
    best = max(sure["gpus"], max((n * pc for n, pc in slots.values()), default=0.0))
    for r, items in maybe.items():
        total = sure[r] + sum(s for s, _ in items)
        room = free[r]
        saved = 0.0
        for s, w in sorted(items, key=lambda sw: -(sw[0] / sw[1]) if sw[1] else -math.inf):
            if w <= room:
                saved += s
                room -= w
            else:
                saved += s * room / w if w else s
                break
        best = max(best, total - saved)
    return best
