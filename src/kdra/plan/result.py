"""A plan as Kubernetes-shaped documents: the plan itself (kind ScaleUpPlan, for -o yaml|json), the Fleet of
the nodes it adds (for `kdra driver sim` and `kdra simulate -c`), and the rows of its table."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from kdra.allocator.summary import NodesSummary
from kdra.api.types import Obj
from kdra.fleets.spec import API_VERSION, Fleet, Pool, fleet_to_dict
from kdra.plan.bins import Bin
from kdra.plan.scaleup import ScaleUp


def _money(v: float) -> float:
    return round(v, 4)


def _device_ids(b: Bin) -> list[str]:
    """The devices the node's pods got, `driver/pool/device`, with an added node's own name as pool."""
    out = []
    tmpl = b.type.name if b.type is not None else None
    for p in b.placements:
        for _, alloc in p.allocations:
            for r in (alloc.get("devices") or {}).get("results") or []:
                pool = r.get("pool", "")
                if tmpl is not None and pool == tmpl:
                    pool = b.name
                out.append(f"{r.get('driver')}/{pool}/{r.get('device')}")
    return out


def pods_on(plan: ScaleUp, b: Bin) -> list[str]:
    """The pods that land on the node: where kdra's scheduler put them when it checked the plan, else where
    the plan's search did."""
    if plan.verified:
        return list(plan.where.get(b.name, []))
    return [pd.key for p in b.placements for pd in p.unit.pods]


def devices_on(plan: ScaleUp, b: Bin) -> list[str]:
    return list(plan.devices.get(b.name, [])) if plan.verified else _device_ids(b)


def plan_document(plan: ScaleUp, name: str = "scale-up") -> Obj:
    pods = plan.demand.pods
    by_gang = sum(1 for j in plan.demand.jobs if j.gang is not None)
    added_names = {b.name for b in plan.added}
    on_cluster: dict[str, list[str]] = {}
    if plan.verified:
        on_cluster = {n: list(ps) for n, ps in plan.where.items() if n not in added_names}
    else:
        for done in plan.placed.values():
            for b, p in done:
                if not b.added:
                    on_cluster.setdefault(b.name, []).extend(pd.key for pd in p.unit.pods)
    added = []
    for b in plan.added:
        assert b.type is not None
        entry: Obj = {
            "name": b.name,
            "nodeType": b.type.name,
            "pool": b.type.pool.name,
            "pricePerHour": _money(b.type.price),
            "pods": pods_on(plan, b),
            "devices": devices_on(plan, b),
        }
        if b.type.zone:
            entry["zone"] = b.type.zone
        group = next((g for g in plan.groups if b in g.bins), None)
        if group is not None:
            entry["topologyDomain"] = {"label": group.label, "group": f"{b.type.pool.name}-domain-{group.id}"}
        added.append(entry)
    unschedulable = []
    for u in plan.unplaced:
        item: Obj = {"pods": [pd.key for pd in u.job.pods], "reason": u.why}
        if u.job.gang is not None:
            item["gang"] = u.job.gang.key
        if u.findings:
            summary = NodesSummary(u.findings)
            item["nodeTypes"] = summary.headline()
            item["details"] = summary.to_dict(3)
        unschedulable.append(item)
    if plan.left:
        unschedulable.append(
            {
                "pods": list(plan.left),
                "reason": "kdra's scheduler left these pods pending on the cluster with the added nodes "
                "although the plan placed them (its own order and scores); the plan gave up after "
                f"{len(plan.searches)} rounds",
            }
        )
    return {
        "apiVersion": API_VERSION,
        "kind": "ScaleUpPlan",
        "metadata": {"name": name},
        "status": {
            "costPerHour": _money(plan.cost),
            "lowerBoundPerHour": _money(plan.lower_bound),
            "optimal": plan.optimal,
            "pendingPods": len(pods),
            "gangs": by_gang,
            "podsOnClusterNodes": sum(len(v) for v in on_cluster.values()),
            "podsOnAddedNodes": sum(len(b["pods"]) for b in added),
            "unschedulablePods": sum(len(u["pods"]) for u in unschedulable),
            "verifiedByScheduler": plan.verified,
            "nodesToAdd": _counts(plan.added),
            "add": added,
            "clusterNodes": [{"name": n, "pods": ps} for n, ps in sorted(on_cluster.items())],
            "unschedulable": unschedulable,
            "seconds": round(plan.seconds, 3),
        },
    }


def _counts(bins: Sequence[Bin]) -> list[Obj]:
    out: dict[str, Obj] = {}
    for b in bins:
        assert b.type is not None
        e = out.setdefault(b.type.name, {"nodeType": b.type.name, "count": 0, "pricePerHour": 0.0})
        e["count"] += 1
        e["pricePerHour"] = _money(e["pricePerHour"] + b.type.price)
    return list(out.values())


def pools_for(added: Sequence[Bin]) -> list[Pool]:
    """One pool per node type and new topology domain, named nodes as the plan names them; their topology
    puts a domain's nodes under one label value (they are the first nodes of the pool's first rack, block
    and NVLink domain)."""
    pools: dict[tuple[str, int | None], list[Bin]] = {}
    for b in added:
        assert b.type is not None
        pools.setdefault((b.type.name, b.domain), []).append(b)
    out = []
    for (tname, domain), bins in pools.items():
        t = bins[0].type
        assert t is not None
        name = tname if domain is None else f"{tname}-domain-{domain}"
        out.append(
            dataclasses.replace(
                t.pool,
                name=name[:63].rstrip("-"),
                count=len(bins),
                names=tuple(b.name for b in bins),
                topology=dataclasses.replace(t.pool.topology, zones=(t.zone,) if t.zone else ()),
                labels={**t.pool.labels, "kdra.dev/pool": t.pool.name},
                min_count=0,
                max_count=None,
            )
        )
    return out


def fleet_document(plan: ScaleUp, name: str, base: Fleet | None = None) -> Obj:
    """The added nodes as a Fleet: on their own (for `kdra driver sim`), or after `base`'s pools (the cluster
    the plan started from, so `kdra simulate -c` runs the cluster as planned)."""
    pools = list(base.pools) if base is not None else []
    taken = {p.name for p in pools}
    for p in pools_for(plan.added):
        n, i = p.name, 1
        while n in taken:
            n, i = f"{p.name[:58]}-{i}", i + 1
        taken.add(n)
        pools.append(dataclasses.replace(p, name=n))
    fleet = Fleet(
        name=name,
        pools=pools,
        description=f"nodes added by kdra plan scale-up{' to ' + base.name if base else ''}",
    )
    if base is not None:
        fleet.driver_version, fleet.cuda_driver_version = base.driver_version, base.cuda_driver_version
    return fleet_to_dict(fleet)


def table(plan: ScaleUp, wide: bool = False) -> list[list[str]]:
    """NODE TYPE COUNT PRICE/H PODS, one row per added node (wide: its devices too)."""
    header = ["NODE", "TYPE", "ZONE", "PRICE/H", "PODS"]
    if wide:
        header += ["DEVICES", "POD NAMES"]
    rows = [header]
    for b in plan.added:
        assert b.type is not None
        pods = pods_on(plan, b)
        row = [b.name, b.type.name, b.type.zone or "-", f"{b.type.price:.2f}", str(len(pods))]
        if wide:
            row += [str(len(devices_on(plan, b))), ",".join(pods)]
        rows.append(row)
    return rows
