"""How a profile's Score plugins add up to one score per node, after kube-scheduler's runScorePlugins
(pkg/scheduler/framework/runtime/framework.go): each plugin's raw scores are normalised across the feasible
nodes (NormalizeScore, for plugins that have it), multiplied by the plugin's weight and summed.

The scheduler's cycle (kdra.scheduler.scheduler) and the offline placement (kdra.scheduler.placement) both
add scores here, so `kdra allocate` ranks nodes with the scheduler's own arithmetic; and DynamicResources'
prioritized-list score (KEP-4816) is computed by `prioritized_list_score` for both.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from kdra.scheduler.framework import CycleState, ScorePlugin
from kdra.scheduler.podinfo import PodInfo

# resourceapi.FirstAvailableDeviceRequestMaxSize: the first subrequest scores 8, the last possible one 1.
FIRST_AVAILABLE_MAX = 8

K = TypeVar("K", bound=Hashable)


def add_weighted(
    totals: dict[K, int], plugin: ScorePlugin, state: CycleState, pi: PodInfo, raw: dict[K, int]
) -> dict[K, int]:
    """Normalise `raw` (node -> the plugin's score) in place when the plugin normalises, add it times the
    plugin's weight to `totals`, and return the weighted scores."""
    if plugin.needs_normalize(state, pi):
        plugin.normalize(state, pi, raw)  # type: ignore[arg-type]  # keyed by node index or name
    weighted = {k: v * plugin.weight for k, v in raw.items()}
    for k, v in weighted.items():
        totals[k] = totals.get(k, 0) + v
    return weighted


def prioritized_list_score(
    claims: Iterable[Mapping[str, Any]], allocations: Sequence[Mapping[str, Any]]
) -> int:
    """DynamicResources' Score (computeScore, 1.35+): over the pod's claims, for every firstAvailable request,
    8 minus the index of the subrequest that got the devices. A claim allocated earlier is scored by its
    status.allocation; the others take `allocations` in order."""
    score = 0
    pending = iter(allocations)
    for claim in claims:
        alloc = (claim.get("status") or {}).get("allocation")
        if not alloc:
            alloc = next(pending, None) or {}
        chosen = {
            str(r.get("request", ""))
            for r in (alloc.get("devices") or {}).get("results") or []
            if "/" in str(r.get("request", ""))
        }
        for req in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
            for i, sub in enumerate(req.get("firstAvailable") or []):
                if f"{req.get('name')}/{sub.get('name')}" in chosen:
                    score += FIRST_AVAILABLE_MAX - i
    return score


def best_node(totals: Mapping[K, int], order: Iterable[K]) -> K | None:
    """The node with the highest total; among equals the first in `order` (kube-scheduler picks one of
    them at random)."""
    best = None
    for k in order:
        if k in totals and (best is None or totals[k] > totals[best]):
            best = k
    return best


__all__ = ["FIRST_AVAILABLE_MAX", "add_weighted", "best_node", "prioritized_list_score"]
