"""Gang-wide device search: when a gang member fits nowhere, re-assign the devices of earlier members.

Gang members are placed one by one (kube-scheduler does the same), each taking the first devices that fit.
The devices an earlier member took can make a later member unschedulable although a different choice
for the earlier member would fit both (kubernetes/kubernetes#138765: two pods whose claims ask for a whole
device or, failing that, half of one, and one partitionable device: the first pod takes the whole device,
the second finds nothing, while two halves would serve both). Upstream gives up; here, while the earlier
members still wait at Permit (nothing bound, nothing written), their claims and the failing member's are
allocated together on a node that holds earlier members, by the allocator's own backtracking search; if
that fits, the earlier members keep their node with the new devices and the failing member is scheduled
again (it then finds the room).

Bounded: at most `max_nodes` nodes per failing member and `max_steps` allocator steps (device attempts)
per gang placement; the search never touches bound pods or other gangs' reservations. Deterministic:
nodes are tried by how many of the gang's waiting members they hold, then by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kdra.api.workloadapi import is_pod_group_ref
from kdra.scheduler.framework import Code, CycleState
from kdra.scheduler.plugins.dynamicresources import claim_ref_for

if TYPE_CHECKING:
    from kdra.scheduler.plugins.dynamicresources import DynamicResources
    from kdra.scheduler.podinfo import PodInfo
    from kdra.scheduler.scheduler import CycleResult
    from kdra.scheduler.statement import Statement


@dataclass
class GangSearch:
    """Per gang placement: the budget left and what the search did (for explanations)."""

    max_nodes: int = 8
    max_steps: int = 200_000
    steps: int = 0
    reassigned: int = 0  # members whose devices changed
    tried: int = 0  # joint allocations tried

    def retry(self, stmt: Statement, dynres: DynamicResources | None, pi: PodInfo) -> CycleResult | None:
        """Re-assign the devices of the members `stmt` holds so that `pi` fits; the new result of placing
        `pi` (held at Permit) on success, None (nothing changed) otherwise."""
        sched = stmt.sched
        waiting = stmt.held
        if dynres is None or not waiting:
            return None
        by_node: dict[str, list[PodInfo]] = {}
        for m in waiting:
            wp = sched.waiting.get(m.uid)
            if wp is not None and wp.state.get("dra_allocations"):
                by_node.setdefault(wp.node, []).append(m)
        order = sorted(by_node, key=lambda n: (-len(by_node[n]), n))[: self.max_nodes]
        state = CycleState()
        if not dynres.pre_filter(state, pi).ok:
            return None
        pc = state["DynamicResources"]
        for node in order:
            if self.steps >= self.max_steps:
                return None
            ni = sched.cache.node_by_name.get(node)
            if ni is None:
                continue
            special = dynres.special_claim(pi, pc, ni)
            mine = list(pc.to_allocate) + ([special] if special is not None else [])
            if not mine:
                return None  # nothing of this member's is a device question
            mark = stmt.checkpoint()
            got = self._joint(stmt, ni.node, by_node[node], mine)
            if got is None:
                continue
            res = stmt.place(pi)
            if res.status.code == Code.WAIT:
                self.reassigned += got
                return res
            stmt.rollback(mark)  # the member does not fit for other reasons: restore the devices
        return None

    def _joint(self, stmt: Statement, node: Any, members: list[PodInfo], mine: list[Any]) -> int | None:
        """Allocate the members' claims and `mine` together on `node`; on success the members hold their
        share of it (returns how many members' devices changed), else nothing changed."""
        sched = stmt.sched
        dra = sched.dra
        held: list[list[tuple[Any, Any]]] = []
        claims: list[Any] = []
        holder: dict[str, str] = {}  # claim uid -> the member that holds it
        seen: set[str] = set()
        for m in members:
            state = sched.waiting[m.uid].state
            allocs = list(state.get("dra_allocations") or [])
            held.append(allocs)
            for claim, _alloc in allocs:
                uid = claim["metadata"].get("uid", "")
                seen.add(uid)
                # A PodGroup's claim keeps its devices: other members may already share them (KEP-5729).
                if uid not in holder and not is_pod_group_ref(claim_ref_for(state, m, claim)):
                    holder[uid] = m.uid
                    claims.append(claim)
        ours = [c for c in mine if c["metadata"].get("uid", "") not in seen]
        for claim in claims:
            dra.forget_assumed(claim["metadata"].get("uid", ""))
        self.tried += 1
        try:
            out = dra.allocate(node, claims + ours)
        except Exception:
            out = None
        if out is not None:
            self.steps += out.steps
        if out is None or out.allocations is None:
            for claim in claims:
                uid = claim["metadata"].get("uid", "")
                alloc = next(a for allocs in held for c, a in allocs if c["metadata"].get("uid", "") == uid)
                dra.assume(claim, alloc, holder[uid])
            return None
        new = {c["metadata"].get("uid", ""): a for c, a in zip(claims, out.allocations, strict=False)}
        return stmt.reassign(
            members, [[(c, new.get(c["metadata"].get("uid", ""), a)) for c, a in allocs] for allocs in held]
        )
