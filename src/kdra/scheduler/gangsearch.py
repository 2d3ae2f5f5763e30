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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kdra.scheduler.framework import Code, CycleState

if TYPE_CHECKING:
    from kdra.scheduler.podinfo import PodInfo
    from kdra.scheduler.scheduler import CycleResult, Scheduler


@dataclass
class GangSearch:
    """Per gang placement: the budget left and what the search did (for explanations)."""

    max_nodes: int = 8
    max_steps: int = 200_000
    steps: int = 0
    reassigned: int = 0  # members whose devices changed
    tried: int = 0  # joint allocations tried

    def retry(
        self, sched: Scheduler, dynres: Any, waiting: Sequence[PodInfo], pi: PodInfo, now: float
    ) -> CycleResult | None:
        """Re-assign earlier members' devices so that `pi` fits; the new result of scheduling `pi`
        (waiting at Permit) on success, None (everything as before) otherwise."""
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
            got = self._joint(sched, ni.node, by_node[node], mine)
            if got is None:
                continue
            res = sched.schedule_one(pi, now)
            if res.status.code == Code.WAIT:
                self.reassigned += got
                return res
            self._undo(sched)  # the member does not fit for other reasons: restore the devices
        return None

    def _joint(self, sched: Scheduler, node: Any, members: list[PodInfo], mine: list[Any]) -> int | None:
        """Allocate the members' claims and `mine` together on `node`; on success the members hold their
        share of it (returns how many members' devices changed), else nothing changed."""
        dra = sched.dra
        held: list[tuple[CycleState, list[tuple[Any, Any]]]] = []
        claims: list[Any] = []
        seen: set[str] = set()
        for m in members:
            st = sched.waiting[m.uid].state
            allocs = list(st.get("dra_allocations") or [])
            held.append((st, allocs))
            for claim, _alloc in allocs:
                uid = claim["metadata"].get("uid", "")
                if uid not in seen:
                    seen.add(uid)
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
            for _st, allocs in held:
                for claim, alloc in allocs:
                    dra.assume(claim, alloc)
            return None
        new = {c["metadata"].get("uid", ""): a for c, a in zip(claims, out.allocations, strict=False)}
        changed = 0
        self._restore = held
        for m, (st, allocs) in zip(members, held, strict=True):
            updated = [(c, new[c["metadata"].get("uid", "")]) for c, _a in allocs]
            if updated != allocs:
                changed += 1
                # The device preference's record compared the devices it no longer holds: drop it, the
                # group condition says the search decided.
                dra.choices.pop(m.key, None)
            st["dra_allocations"] = updated
            for claim, alloc in updated:
                dra.assume(claim, alloc)
        return changed

    def _undo(self, sched: Scheduler) -> None:
        dra = sched.dra
        for st, allocs in self._restore:
            for claim, _alloc in st.get("dra_allocations") or []:
                dra.forget_assumed(claim["metadata"].get("uid", ""))
            st["dra_allocations"] = allocs
            for claim, alloc in allocs:
                dra.assume(claim, alloc)
        self._restore = []

    _restore: list[tuple[CycleState, list[tuple[Any, Any]]]] = ()  # type: ignore[assignment]
