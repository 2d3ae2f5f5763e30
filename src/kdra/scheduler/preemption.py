"""Victims for preemption (inside a queue, by priority) and reclaim (across queues, by fair share).

Reclaim follows KAI's two strategies (pkg/scheduler/plugins/proportion/reclaimable/strategies): a victim may
be taken from another queue if

- MaintainFairShare: the victim's queue stays at or above its fair share after losing it, and the reclaimer
  stays within its own fair share with the job; or
- GuaranteeDeservedQuota: the reclaimer stays within its deserved quota with the job, and the victim's queue
  keeps at least its deserved quota.

Jobs run at least their queue's reclaimMinRuntime / preemptMinRuntime before they can be victims; a gang is
evicted whole. Eviction marks the pods Failed with a DisruptionTarget condition (reason
PreemptionByScheduler), so the resourceclaim controller releases their claims: claims from templates are
deleted, shared claims unreserved and deallocated when no consumer is left.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kdra.api.pods import pod_claim_names, reserved_for
from kdra.api.types import Obj
from kdra.cluster.store import NotFoundError, Store, WatchEvent, clone
from kdra.scheduler.queuetree import EPS, QueueTree, Vector, add, fmt

if TYPE_CHECKING:
    from kdra.scheduler.scheduler import Scheduler

MAINTAIN_FAIR_SHARE = "MaintainFairShare"
GUARANTEE_DESERVED_QUOTA = "GuaranteeDeservedQuota"
STRATEGIES = (MAINTAIN_FAIR_SHARE, GUARANTEE_DESERVED_QUOTA)
DISRUPTION_REASON = "PreemptionByScheduler"


@dataclass
class RunningJob:
    key: str
    queue: str
    priority: int
    start: float
    preemptible: bool
    pods: list[str] = field(default_factory=list)  # uids
    names: list[str] = field(default_factory=list)  # ns/name
    usage: Vector = field(default_factory=dict)


def covers(take: Mapping[str, float], need: Mapping[str, float]) -> bool:
    """The victims free at least what the job needs of every device resource it asks for."""
    return all(take.get(r, 0.0) + EPS >= v for r, v in need.items() if r.startswith("deviceclass/"))


def frees_any(usage: Mapping[str, float], take: Mapping[str, float], need: Mapping[str, float]) -> bool:
    """The victim frees some device resource the job still lacks after `take` (any victim, for a job that
    asks for no devices): one that frees none would be evicted for nothing (kube-scheduler reprieves it)."""
    lacking = [r for r, v in need.items() if r.startswith("deviceclass/") and take.get(r, 0.0) + EPS < v]
    return not lacking or any(usage.get(r, 0.0) > EPS for r in lacking)


def reclaim_verdict(
    tree: QueueTree,
    fair: Mapping[str, Vector],
    allocated: Mapping[str, Vector],
    reclaimer: str,
    need: Mapping[str, float],
    victim_queue: str,
    take: Mapping[str, float],
    strategies: Sequence[str] = STRATEGIES,
) -> tuple[bool, list[str]]:
    """May `victim_queue` lose `take` (all victims so far from it) so `reclaimer` gets `need`? And if not,
    why, per strategy."""
    why = []
    need = tree.view(need)
    take = tree.view(take)
    ra = allocated.get(reclaimer, {})
    va = allocated.get(victim_queue, {})
    rs = tree.specs[reclaimer]
    vs = tree.specs[victim_queue]
    if MAINTAIN_FAIR_SHARE in strategies:
        bad = next(
            (
                r
                for r, v in sorted(need.items())
                if ra.get(r, 0.0) + v > fair.get(reclaimer, {}).get(r, 0.0) + EPS
            ),
            None,
        )
        if bad is not None:
            why.append(
                f"{MAINTAIN_FAIR_SHARE}: queue {reclaimer} would exceed its fair share on {bad} "
                f"({fmt(bad, ra.get(bad, 0.0))} + {fmt(bad, need[bad])} > "
                f"{fmt(bad, fair.get(reclaimer, {}).get(bad, 0.0))})"
            )
        else:
            vbad = next(
                (
                    r
                    for r, v in sorted(take.items())
                    if v > EPS and va.get(r, 0.0) - v < fair.get(victim_queue, {}).get(r, 0.0) - EPS
                ),
                None,
            )
            if vbad is None:
                return True, []
            why.append(
                f"{MAINTAIN_FAIR_SHARE}: queue {victim_queue} would fall below its fair share on {vbad} "
                f"({fmt(vbad, va.get(vbad, 0.0))} - {fmt(vbad, take[vbad])} < "
                f"{fmt(vbad, fair.get(victim_queue, {}).get(vbad, 0.0))})"
            )
    if GUARANTEE_DESERVED_QUOTA in strategies:
        bad = next((r for r, v in sorted(need.items()) if ra.get(r, 0.0) + v > rs.quota_of(r) + EPS), None)
        if bad is not None:
            why.append(
                f"{GUARANTEE_DESERVED_QUOTA}: queue {reclaimer} would exceed its deserved quota on {bad} "
                f"({fmt(bad, ra.get(bad, 0.0))} + {fmt(bad, need[bad])} > {fmt(bad, rs.quota_of(bad))})"
            )
        else:
            vbad = next(
                (r for r, v in sorted(take.items()) if v > EPS and va.get(r, 0.0) - v < vs.quota_of(r) - EPS),
                None,
            )
            if vbad is None:
                return True, []
            why.append(
                f"{GUARANTEE_DESERVED_QUOTA}: queue {victim_queue} would fall below its deserved quota on "
                f"{vbad} ({fmt(vbad, va.get(vbad, 0.0))} - {fmt(vbad, take[vbad])} < "
                f"{fmt(vbad, vs.quota_of(vbad))})"
            )
    return False, why


def order_victims(
    jobs: Iterable[RunningJob], saturation: Mapping[str, float], now: float
) -> list[RunningJob]:
    """Most saturated queue first, then lowest priority, then the most recently started."""
    return sorted(jobs, key=lambda j: (-saturation.get(j.queue, 0.0), j.priority, -j.start, j.key))


class VirtualEviction:
    """Take victims out of the scheduler's cache and DRA state for a trial; `restore()` puts them back."""

    def __init__(self, sched: Scheduler, victims: Sequence[RunningJob]) -> None:
        self.sched = sched
        self.pods: list[tuple[Any, str]] = []
        self.claims: list[Obj] = []
        self.claims_of: dict[str, list[Obj]] = {}  # pod uid -> its allocated claims
        uids = {u for v in victims for u in v.pods}
        cache = sched.cache
        store: Store = sched.store
        for uid in sorted(uids):
            node = cache.assigned.get(uid)
            if node is None:
                continue
            ni = cache.node_by_name[node]
            pi = ni.pods.get(uid)
            if pi is None:
                continue
            self.pods.append((pi, node))
            cache.forget(uid)
            current = store.try_get("Pod", pi.name, pi.namespace)
            names = pod_claim_names(current if current is not None else pi.pod)
            for name in names:
                claim = cache.claims.get((pi.namespace, name))
                if claim is None or not (claim.get("status") or {}).get("allocation"):
                    continue
                self.claims_of.setdefault(uid, []).append(claim)
                rf = reserved_for(claim)
                if all(r.get("uid") in uids for r in rf) and claim not in self.claims:
                    self.claims.append(claim)
                    sched.dra.on_claim(WatchEvent("DELETED", "ResourceClaim", claim, None))
                    sched.dra.released.add(claim["metadata"].get("uid", ""))

    def spare(self, victims: Sequence[RunningJob], used_nodes: set[str]) -> list[RunningJob]:
        """Put back the victims a trial placement did not need, as kube-scheduler reprieves them: none of
        their pods is on a node the job took, and every claim they hold is allocated to one node (devices
        of another node cannot serve the job). The rest stay out; they are the ones to evict."""
        on_node = dict((pi.uid, node) for pi, node in self.pods)
        spared = []
        for v in victims:
            nodes = {on_node[u] for u in v.pods if u in on_node}
            pinned = {pinned_node(c) for u in v.pods for c in self.claims_of.get(u, ())}
            if not nodes & used_nodes and None not in pinned and not pinned & used_nodes:
                spared.append(v)
        uids = {u for v in spared for u in v.pods}
        if not uids:
            return spared
        for pi, node in [p for p in self.pods if p[0].uid in uids]:
            self.sched.cache.assume(pi, node)
            self.pods.remove((pi, node))
        for claim in list(self.claims):
            rf = reserved_for(claim)
            if any(r.get("uid") in uids for r in rf):
                self.claims.remove(claim)
                self.sched.dra.count_again(claim)
        return spared

    def restore(self) -> None:
        for claim in self.claims:
            self.sched.dra.count_again(claim)
        for pi, node in self.pods:
            self.sched.cache.assume(pi, node)
        self.pods.clear()
        self.claims.clear()


def pinned_node(claim: Obj) -> str | None:
    """The one node a claim's allocation is limited to (node-local devices), else None."""
    sel = ((claim.get("status") or {}).get("allocation") or {}).get("nodeSelector") or {}
    terms = sel.get("nodeSelectorTerms") or []
    if len(terms) != 1 or terms[0].get("matchExpressions"):
        return None
    fields = terms[0].get("matchFields") or []
    if len(fields) != 1:
        return None
    f = fields[0]
    values = f.get("values") or []
    if f.get("key") != "metadata.name" or f.get("operator") != "In" or len(values) != 1:
        return None
    return str(values[0])


def evict(store: Store, namespace: str, name: str, now_text: str, message: str) -> bool:
    """Mark a victim pod Failed with DisruptionTarget (what a preempted pod ends up as)."""
    pod = store.try_get("Pod", name, namespace)
    if pod is None:
        return False
    upd = clone(pod)
    st = upd.setdefault("status", {})
    conds = [c for c in st.get("conditions") or [] if c.get("type") != "DisruptionTarget"]
    conds.append(
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": DISRUPTION_REASON,
            "message": message,
            "lastTransitionTime": now_text,
        }
    )
    st["conditions"] = conds
    st["phase"] = "Failed"
    st["reason"] = "Preempted"
    st["message"] = message
    try:
        store.update(upd, subresource="status")
    except NotFoundError:
        return False
    return True


def total_usage(jobs: Iterable[RunningJob]) -> Vector:
    out: Vector = {}
    for j in jobs:
        add(out, j.usage)
    return out
