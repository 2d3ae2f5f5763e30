"""Candidate node types: a Fleet's pools (one type per pool and zone), each rendered once as a template node
with the ResourceSlices its vendor's DRA driver would publish.

Every node of a type is identical but for its name and topology labels, so one template per type serves the
whole search: nodes added by a plan share the type's allocator index and differ only in what is allocated
on them (kdra.plan.bins). A zone is part of a type (a node group lives in one zone, as cluster-autoscaler's
do); racks, blocks and NVLink domains are not: added nodes go into new ones (kdra.plan.search).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kdra.allocator import AllocatorIndex, FeatureGates
from kdra.api.types import Obj
from kdra.errors import InputError
from kdra.fleets.render import PoolRenderer, RenderOptions, device_classes, pool_renderers
from kdra.fleets.spec import LABEL_POOL, LABEL_ZONE, Fleet, Pool, Topology

# Without a price a node costs 1: the plan then adds as few nodes as it can.
DEFAULT_PRICE = 1.0


@dataclass
class NodeType:
    """One kind of node a plan may add."""

    name: str  # the pool's name, with the zone appended when the pool spans several
    pool: Pool  # the pool as given, for the Fleet the plan writes
    zone: str | None
    price: float
    max_new: int | None  # how many more the pool may have (maxCount - nodes it has), None = no limit
    template: Obj  # the Node of one such node, named `name`
    slices: list[Obj]  # its ResourceSlices
    index: AllocatorIndex
    accelerators: int  # GPUs / TPU chips per node

    @property
    def labels(self) -> Mapping[str, str]:
        return (self.template.get("metadata") or {}).get("labels") or {}


def _template_pool(pool: Pool, name: str, zone: str | None) -> Pool:
    """The pool reduced to one node named `name`: topology below the zone is left to the plan."""
    return dataclasses.replace(
        pool,
        count=1,
        names=(name,),
        topology=Topology(zones=(zone,) if zone else ()),
        start_index=0,
    )


def node_types(
    fleet: Fleet,
    features: FeatureGates,
    *,
    prices: Mapping[str, float] | None = None,
    limits: Mapping[str, int] | None = None,
    existing: Mapping[str, int] | None = None,
    only: Sequence[str] = (),
) -> list[NodeType]:
    """The fleet's pools as node types. `prices` and `limits` (pool name -> price per node-hour / the most
    nodes the pool may have) override the pools' `price` and `maxCount`; `existing` counts the nodes each pool
    already has (label kdra.dev/pool), which the limit includes; `only` keeps the named pools."""
    prices, limits, existing = prices or {}, limits or {}, existing or {}
    names = {p.name for p in fleet.pools}
    for flag, given in (("--price", prices), ("--max", limits), ("--node-type", {n: 0 for n in only})):
        unknown = sorted(set(given) - names)
        if unknown:
            raise InputError(
                f"{flag} {unknown[0]}: Not found: fleet {fleet.name} has no pool {unknown[0]!r} "
                f"(pools: {', '.join(sorted(names))})"
            )
    out: list[NodeType] = []
    options = RenderOptions(kubernetes_version=features.version)
    for pool in fleet.pools:
        if only and pool.name not in only:
            continue
        zones: Sequence[str | None] = pool.topology.zones or (None,)
        cap = limits.get(pool.name, pool.max_count)
        room = None if cap is None else max(0, cap - existing.get(pool.name, 0))
        for zone in zones:
            name = pool.name if len(zones) == 1 else f"{pool.name}-{zone}"
            tmpl = _template_pool(pool, name, zone)
            renderer: PoolRenderer = pool_renderers(dataclasses.replace(fleet, pools=[tmpl]), options)[0]
            node = renderer.node(0)
            slices = renderer.slices(0)
            classes = {c["metadata"]["name"]: c for c in device_classes(fleet)}
            acc = pool.accelerator
            out.append(
                NodeType(
                    name=name,
                    pool=pool,
                    zone=zone,
                    price=float(
                        prices.get(pool.name, pool.price if pool.price is not None else DEFAULT_PRICE)
                    ),
                    # A pool spanning zones shares its limit; the search counts it per pool.
                    max_new=room,
                    template=node,
                    slices=slices,
                    index=AllocatorIndex(classes, slices, features),
                    accelerators=acc.count if acc else 0,
                )
            )
    if not out:
        raise InputError(f"fleet {fleet.name}: no node types to plan with")
    return out


def pool_of(node: Mapping[str, Any]) -> str | None:
    return ((node.get("metadata") or {}).get("labels") or {}).get(LABEL_POOL)


def zone_of(node: Mapping[str, Any]) -> str | None:
    return ((node.get("metadata") or {}).get("labels") or {}).get(LABEL_ZONE)
