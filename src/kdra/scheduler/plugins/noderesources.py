"""NodeResourcesFit (pkg/scheduler/framework/plugins/noderesources): fit filter and allocation scoring.

Scoring strategies: LeastAllocated (upstream default: spread), MostAllocated (bin-packing), each over a
weighted list of resources (default cpu and memory, weight 1). Resources the node does not have are
skipped, as upstream does. Extended resources served by DRA (KEP-5004) on a node without device-plugin
capacity for them are left to DynamicResources.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from kdra.scheduler.framework import (
    EV_CLASS_CHANGE,
    EV_NODE_ADD,
    EV_NODE_UPDATE,
    EV_POD_DELETE,
    MAX_NODE_SCORE,
    SUCCESS,
    ClusterEvent,
    CycleState,
    FilterPlugin,
    ScorePlugin,
    Status,
    unschedulable,
)
from kdra.scheduler.podinfo import CPU, MEMORY, PODS, NodeInfo, PodInfo

LEAST_ALLOCATED = "LeastAllocated"
MOST_ALLOCATED = "MostAllocated"


@dataclass(frozen=True)
class ScoringStrategy:
    type: str = LEAST_ALLOCATED
    resources: Sequence[tuple[str, int]] = ((CPU, 1), (MEMORY, 1))


class NodeResourcesFit(FilterPlugin, ScorePlugin):
    name = "NodeResourcesFit"
    # DeviceClass: a class with extendedResourceName may start serving an extended resource (KEP-5004;
    # upstream registers DeviceClass Add|Update when DRAExtendedResource is on).
    events = frozenset({EV_NODE_ADD, EV_NODE_UPDATE, EV_POD_DELETE, EV_CLASS_CHANGE})
    # The pod count limit and the requests are read against allocatable; an assigned pod's deletion is
    # node-scoped (ClusterEvent.node is its node), so the hint asks Filter on that node.
    node_fields = (("status", "allocatable"),)
    exact_hints = True
    weight = 1

    def __init__(self, strategy: ScoringStrategy | None = None) -> None:
        self.strategy = strategy or ScoringStrategy()
        if self.strategy.type not in (LEAST_ALLOCATED, MOST_ALLOCATED):
            raise ValueError(f"unknown scoring strategy {self.strategy.type!r}")

    def queueing_hint(self, event: ClusterEvent, pi: PodInfo) -> bool:
        if event.name == EV_CLASS_CHANGE:
            return bool(pi.ext_requests)
        return super().queueing_hint(event, pi)

    def _dra_backed(self) -> dict[str, str]:
        dra = getattr(self.cache, "dra", None)
        return dra.extended_resource_classes() if dra is not None else {}

    def filter(self, state: CycleState, pi: PodInfo, ni: NodeInfo) -> Status:
        alloc = ni.allocatable
        req = ni.requested
        reasons = []
        if len(ni.pods) + 1 > alloc.get(PODS, 110):
            reasons.append("Too many pods")
        dra_backed = None
        for name, want in pi.requests.items():
            if want <= 0:
                continue
            have = alloc.get(name)
            if have is None and pi.ext_requests.get(name):
                if dra_backed is None:
                    dra_backed = self._dra_backed()
                if name in dra_backed:
                    continue  # KEP-5004: served by DRA on this node
            if want > (have or 0) - req.get(name, 0):
                reasons.append(f"Insufficient {name}")
        if reasons:
            return unschedulable(*reasons)
        return SUCCESS

    def signature(self, state: CycleState, pi: PodInfo) -> Hashable:
        return tuple(sorted(pi.requests.items()))

    def score(self, state: CycleState, pi: PodInfo, ni: NodeInfo) -> int:
        total = 0
        weights = 0
        most = self.strategy.type == MOST_ALLOCATED
        for name, w in self.strategy.resources:
            cap = ni.allocatable.get(name, 0)
            if cap == 0:
                continue
            if name == CPU:
                used = ni.nonzero_cpu + pi.nonzero_cpu
            elif name == MEMORY:
                used = ni.nonzero_mem + pi.nonzero_mem
            else:
                used = ni.requested.get(name, 0) + pi.requests.get(name, 0)
            if most:
                s = MAX_NODE_SCORE if used > cap else used * MAX_NODE_SCORE // cap
            else:
                s = 0 if used > cap else (cap - used) * MAX_NODE_SCORE // cap
            total += s * w
            weights += w
        return total // weights if weights else 0
