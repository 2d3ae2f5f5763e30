"""Tentative placements (KAI-Scheduler's framework Statement): what a session tries before it commits.

A `Statement` records changes to the scheduler's view that are not made in the world yet:
- `place(pi)`: the pod goes through the cycle and, when Permit holds it (a gang member), stays reserved on
  its node without being bound;
- `reassign(...)`: members held at Permit get other devices (the gang-wide device search);
- `evict(victims)`: running jobs taken out of the view for a trial (reclaim and preemption), their pods
  forgotten and their claims' devices counted free.

`commit()` makes the placements real (held pods go on to PreBind and the bind, in the order they were
held, with the devices a reassignment gave them; the evictions themselves go through the evictor);
`discard(status, message)` gives everything back (held pods are rejected, in the order they were held,
which releases whatever devices they hold, and the victims are put back); `checkpoint()` and
`rollback(mark)` undo the reassignments and trial evictions made after the mark, last first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kdra.api.types import Obj
from kdra.scheduler.framework import Code, CycleState, Status
from kdra.scheduler.preemption import RunningJob, VirtualEviction

if TYPE_CHECKING:
    from kdra.scheduler.podinfo import PodInfo
    from kdra.scheduler.scheduler import CycleResult, Scheduler


class _Hold:
    def __init__(self, pi: PodInfo) -> None:
        self.pi = pi


class _Reassign:
    """Members' devices before a reassignment: (member, cycle state, its allocations then)."""

    def __init__(self, before: list[tuple[PodInfo, CycleState, list[tuple[Any, Any]]]]) -> None:
        self.before = before


class _Evict:
    def __init__(self, trial: VirtualEviction) -> None:
        self.trial = trial


_Op = _Hold | _Reassign | _Evict


class Statement:
    def __init__(self, sched: Scheduler, now: float) -> None:
        self.sched = sched
        self.now = now
        self._ops: list[_Op] = []

    @property
    def held(self) -> list[PodInfo]:
        """The pods held at Permit, in the order they were held."""
        return [op.pi for op in self._ops if isinstance(op, _Hold)]

    # -- changes ---------------------------------------------------------------------------------------
    def place(self, pi: PodInfo) -> CycleResult:
        """The pod's scheduling cycle; held (reserved, not bound) when Permit makes it wait."""
        res = self.sched.schedule_one(pi, self.now)
        if res.status.code == Code.WAIT:
            self._ops.append(_Hold(pi))
        return res

    def reassign(self, pods: Sequence[PodInfo], allocations: Sequence[list[tuple[Obj, Obj]]]) -> int:
        """Held pods take other devices (`allocations`, per pod, claim by claim): returns how many pods'
        devices changed. Undone by rollback/discard."""
        dra = self.sched.dra
        before = []
        changed = 0
        for pi, updated in zip(pods, allocations, strict=True):
            st = self.sched.waiting[pi.uid].state
            allocs = list(st.get("dra_allocations") or [])
            before.append((pi, st, allocs))
            if updated != allocs:
                changed += 1
                # The device preference's record compared the devices it no longer holds: drop it.
                dra.choices.pop(pi.key, None)
            st["dra_allocations"] = updated
            for claim, alloc in updated:
                dra.assume(claim, alloc, pi.uid)
        self._ops.append(_Reassign(before))
        return changed

    def evict(self, victims: Sequence[RunningJob]) -> VirtualEviction:
        """Take the victims out of the view for a trial (their pods and what their claims hold)."""
        trial = VirtualEviction(self.sched, victims)
        self._ops.append(_Evict(trial))
        return trial

    # -- outcome ---------------------------------------------------------------------------------------
    def checkpoint(self) -> int:
        return len(self._ops)

    def rollback(self, mark: int) -> None:
        """Undo the reassignments and trial evictions made after `mark`, last first (pods held after the
        mark stay held)."""
        for op in reversed(self._ops[mark:]):
            self._undo(op)
        self._ops = [op for op in self._ops[:mark]] + [op for op in self._ops[mark:] if isinstance(op, _Hold)]

    def commit(self) -> list[CycleResult]:
        """Held pods go on to PreBind and the bind (in the order they were held)."""
        results = [self.sched.allow_waiting(op.pi.uid, self.now) for op in self._ops if isinstance(op, _Hold)]
        self._ops = []
        return results

    def discard(self, status: Status | None = None, message: str = "") -> list[CycleResult]:
        """Everything back: held pods rejected with `status` and `message` (in the order they were held;
        that releases the devices they hold, reassigned ones included), then the trial evictions undone,
        last first."""
        results = []
        if status is not None:
            results = [
                self.sched.reject_waiting(op.pi.uid, self.now, status, message)
                for op in self._ops
                if isinstance(op, _Hold)
            ]
        for op in reversed(self._ops):
            if isinstance(op, _Evict):
                self._undo(op)
        self._ops = []
        return results

    def _undo(self, op: _Op) -> None:
        if isinstance(op, _Reassign):
            dra = self.sched.dra
            for pi, st, allocs in op.before:
                for claim, _alloc in st.get("dra_allocations") or []:
                    dra.forget_assumed(claim["metadata"].get("uid", ""))
                st["dra_allocations"] = allocs
                for claim, alloc in allocs:
                    dra.assume(claim, alloc, pi.uid)
        elif isinstance(op, _Evict):
            op.trial.restore()
