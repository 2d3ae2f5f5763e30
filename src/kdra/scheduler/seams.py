"""The scheduler's seams with the world it runs in.

The scheduler and its session decide the same way in a simulation and on a live cluster; what they do to
the world goes through these seams, each with an in-memory implementation here and a Kubernetes one in
`kdra.kube`:

| seam | in memory (`kdra simulate`) | live cluster (`kdra scheduler`) |
|---|---|---|
| store | MemoryStore | KubeStore: informers over the API server |
| clock | VirtualClock | WallClock |
| binder | `StoreBinder`: PreBind and bind at once | `KubeBinder`: worker threads; a gang: one two-phase job |
| evictor | `StoreEvictor`: the victim Fails at once | `KubeEvictor`: Eviction API (PDBs), DisruptionTarget |
| status writer | `StoreStatusWriter`: objects in the store | `KubeStatusWriter`: status patches, Events |

A `Binder` takes a pod the cycle placed (reserved and permitted) through PreBind and the bind, commits the
binds decided together (a `BindGroup`: a gang's members, or a preemptor placed over victims) and records
why a pod stays pending. An `EvictionOutcome` says what the session may count on: victims evicted (and
whether what they held is already free, as in memory, or freed once they terminate) and victims whose
eviction was refused (a PodDisruptionBudget), which are not counted as freed.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from kdra.api.types import Obj
from kdra.cluster.store import NotFoundError, Store, StoreError, clone
from kdra.scheduler.framework import SUCCESS, Code, CycleState, PreBindPlugin, Status
from kdra.scheduler.podinfo import PodInfo

if TYPE_CHECKING:
    from kdra.scheduler.scheduler import Scheduler

DISRUPTION_TARGET = "DisruptionTarget"
PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"  # kube-scheduler's DisruptionTarget reason
# The record on a victim, written before it is evicted: the uid of the pod its eviction makes room for
# (a preemptor's or reclaimer's first member), or EVICTED_WHOLE when nothing waits for it (a stale gang).
# A restarted scheduler finishes and holds what it names (the Eviction API replaces DisruptionTarget with
# its own condition; annotations it leaves).
EVICTED_FOR_ANNOTATION = "kdra.dev/evicted-for"
EVICTED_WHOLE = "-"


@dataclass
class BindGroup:
    """Binds the session commits together (a gang's members, or a preemptor placed over victims).

    `cancel()` drops binds that were decided but not yet made (a victim's eviction was refused). The binder
    decides how the group is committed: in memory each bind was made when decided; the Kubernetes binder
    writes a gang in two phases and holds back binds whose devices other claims still hold in the API.
    `pending` is the binder's: what it decided to do on commit."""

    name: str
    pods: list[tuple[PodInfo, str]] = field(default_factory=list)
    cancelled: str = ""
    pending: list[Any] = field(default_factory=list)

    def cancel(self, why: str) -> None:
        self.cancelled = why or "cancelled"


class BindFailed(Exception):
    """A bind that failed after PreBind had written the pod's claims: the pod is retried (its claims stay
    allocated and reserved for it, so its next attempt lands on the same node)."""


class Binder(Protocol):
    def refusing(self) -> str:
        """Why nothing may be bound now ("": binding); the scheduler then decides nothing."""
        ...

    def bind(
        self,
        sched: Scheduler,
        state: CycleState,
        pi: PodInfo,
        node: str,
        now: float,
        pre_bind: Sequence[PreBindPlugin],
        group: BindGroup | None,
    ) -> Status:
        """The binding cycle of a pod placed on `node` (reserved, permitted): PreBind, then the bind, now
        or later (the Kubernetes binder binds on worker threads, and a group's binds on commit). A status
        that is not ok: PreBind failed, nothing was bound, the pod is unreserved and retried. BindFailed:
        the bind failed after PreBind."""
        ...

    def commit_group(self, sched: Scheduler, group: BindGroup) -> None:
        """Commit the binds decided in `group` (or drop them: `group.cancelled`)."""
        ...

    def record_unschedulable(
        self, pi: PodInfo, now: float, status: Status, message: str, explanation: object
    ) -> None:
        """Say why the pod stays pending: its PodScheduled=False condition (and, on a cluster, an Event)."""
        ...

    def in_flight(self, uid: str) -> bool:
        """The pod's binding cycle is running (a status change meanwhile does not make it pending)."""
        ...


class StoreBinder:
    """In memory: PreBind writes the claims and the bind writes the pod (spec.nodeName, then
    PodScheduled=True), one pod after the other, when decided; a pod that stays pending gets its
    PodScheduled=False condition in the store, written only when its reason or message changed."""

    def __init__(self, store: Store, format_time: Callable[[float], str]) -> None:
        self.store = store
        self.format_time = format_time

    def refusing(self) -> str:
        return ""

    def in_flight(self, uid: str) -> bool:
        return False

    def bind(
        self,
        sched: Scheduler,
        state: CycleState,
        pi: PodInfo,
        node: str,
        now: float,
        pre_bind: Sequence[PreBindPlugin],
        group: BindGroup | None,
    ) -> Status:
        for bp in pre_bind:
            st = bp.pre_bind(state, pi, node)
            if not st.ok:
                return st.with_plugin(bp.name)

        def bind(p: Obj) -> None:
            p["spec"] = dict(p.get("spec") or {}, nodeName=node)

        self.store.update_with_retry("Pod", pi.name, pi.namespace, bind)

        def scheduled(p: Obj) -> None:
            conds = [
                c
                for c in (p.setdefault("status", {}).get("conditions") or [])
                if c.get("type") != "PodScheduled"
            ]
            conds.append(
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": self.format_time(now)}
            )
            p["status"]["conditions"] = conds
            p["status"].setdefault("phase", "Pending")

        self.store.update_with_retry("Pod", pi.name, pi.namespace, scheduled, subresource="status")
        return SUCCESS

    def record_unschedulable(
        self, pi: PodInfo, now: float, status: Status, message: str, explanation: object
    ) -> None:
        text = message
        if explanation is not None:
            text = f"{message}\n{explanation}"
        reason = "SchedulerError" if status.code == Code.ERROR else "Unschedulable"
        current = self.store.try_get("Pod", pi.name, pi.namespace)
        if current is None:
            return
        conds = (current.get("status") or {}).get("conditions") or []
        old = next((c for c in conds if c.get("type") == "PodScheduled"), None)
        if old is not None and old.get("message") == text and old.get("reason") == reason:
            return
        upd = clone(current)
        st_obj = upd.setdefault("status", {})
        new_conds = [c for c in conds if c.get("type") != "PodScheduled"]
        new_conds.append(
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": reason,
                "message": text,
                "lastTransitionTime": self.format_time(now),
            }
        )
        st_obj["conditions"] = new_conds
        st_obj.setdefault("phase", "Pending")
        with contextlib.suppress(NotFoundError):
            self.store.update(upd, subresource="status")

    def commit_group(self, sched: Scheduler, group: BindGroup) -> None:
        if group.cancelled and group.pods:
            raise RuntimeError(
                f"bind group {group.name}: in-memory binds are synchronous and cannot be cancelled"
            )


@dataclass
class EvictionOutcome:
    evicted: list[str] = field(default_factory=list)  # ns/name, accepted
    refused: dict[str, str] = field(default_factory=dict)  # ns/name -> why (the API's message)
    released: bool = True  # what the evicted pods held is free now (False: once they terminate)

    @property
    def ok(self) -> bool:
        return not self.refused


class Evictor(Protocol):
    def refusals(self, pods: Sequence[Obj]) -> dict[str, str]:
        """Which of `pods` would not be evicted now, and why (a dry run: nothing is evicted)."""
        ...

    def evict(
        self,
        pods: Sequence[Obj],
        message: str,
        *,
        dry_run_first: bool = True,
        evicted_for: str = "",
        nominate: Mapping[str, str] | None = None,
    ) -> EvictionOutcome:
        """Evict `pods` (all or, where the world refuses some, as many as it accepts); `message` says who
        wanted it and why, `evicted_for` the uid of the pod it makes room for (EVICTED_FOR_ANNOTATION),
        `nominate` the pods they make room for (ns/name -> node), nominated before anything is evicted.
        With `dry_run_first`, nothing is evicted unless every pod would be."""
        ...

    def withdraw_nomination(self, pod: Obj) -> None:
        """Preemption cannot help `pod` (any more): its status.nominatedNodeName is cleared, as
        kube-scheduler clears a nominated node when preemption finds no candidate (schedule_one.go,
        clearNominatedNode; preemption.go Preempt)."""
        ...


class StatusWriter(Protocol):
    def write_status(self, obj: Obj, status: Mapping[str, Any]) -> bool:
        """Set these top-level status fields of `obj` (a PodGroup, Queue ...), leaving the others. False
        when the write failed (the caller writes it again later); True when written or the object is
        gone."""
        ...

    def status_of(self, obj: Obj) -> Mapping[str, Any]:
        """`obj`'s status as it will be once the writes asked for land: what the next write builds on."""
        ...

    def event(self, obj: Obj, etype: str, reason: str, message: str) -> None:
        """A core/v1 Event about `obj` (Normal or Warning)."""
        ...


class StoreEvictor:
    """In memory: the victim is marked Failed with a DisruptionTarget condition (PreemptionByScheduler), so
    the claim controller releases its claims at once. Nothing refuses an eviction here."""

    def __init__(self, store: Store, format_time: Callable[[float], str] | None = None) -> None:
        from kdra.cluster.clock import format_time as virtual

        self.store = store
        self.format_time = format_time or virtual
        self.now = 0.0

    def refusals(self, pods: Sequence[Obj]) -> dict[str, str]:
        return {}

    def evict(
        self,
        pods: Sequence[Obj],
        message: str,
        *,
        dry_run_first: bool = True,
        evicted_for: str = "",
        nominate: Mapping[str, str] | None = None,
    ) -> EvictionOutcome:
        """Victims go at once here: nothing waits for them, so nothing is nominated."""
        from kdra.scheduler.preemption import evict

        out = EvictionOutcome()
        for pod in pods:
            meta = pod["metadata"]
            ns = meta.get("namespace") or "default"
            if evict(self.store, ns, meta["name"], self.format_time(self.now), message):
                out.evicted.append(f"{ns}/{meta['name']}")
        return out

    def withdraw_nomination(self, pod: Obj) -> None:
        meta = pod["metadata"]

        def clear(p: Obj) -> None:
            (p.get("status") or {}).pop("nominatedNodeName", None)

        with contextlib.suppress(NotFoundError):
            self.store.update_with_retry(
                "Pod", meta["name"], meta.get("namespace") or "default", clear, subresource="status"
            )


class StoreStatusWriter:
    """In memory: status written into the stored object; Events kept in a bounded list (`events`)."""

    def __init__(self, store: Store, keep_events: int = 10_000) -> None:
        self.store = store
        self.events: deque[tuple[str, str, str, str]] = deque(maxlen=keep_events)

    def write_status(self, obj: Obj, status: Mapping[str, Any]) -> bool:
        meta = obj.get("metadata") or {}
        cur = self.store.try_get(str(obj.get("kind")), meta.get("name", ""), meta.get("namespace") or "")
        if cur is None:
            return True
        upd = clone(cur)
        upd["status"] = dict(upd.get("status") or {}, **status)
        try:
            self.store.update(upd, subresource="status")
        except NotFoundError:
            return True
        except StoreError:
            return False
        return True

    def status_of(self, obj: Obj) -> Mapping[str, Any]:
        """The stored object's: writes land at once (`obj` may be a copy taken before them)."""
        meta = obj.get("metadata") or {}
        cur = self.store.try_get(str(obj.get("kind")), meta.get("name", ""), meta.get("namespace") or "")
        status: Mapping[str, Any] = (cur if cur is not None else obj).get("status") or {}
        return status

    def event(self, obj: Obj, etype: str, reason: str, message: str) -> None:
        meta = obj.get("metadata") or {}
        name = f"{meta.get('namespace') or ''}/{meta.get('name', '')}".lstrip("/")
        self.events.append((f"{obj.get('kind')} {name}", etype, reason, message))


def set_condition(
    conditions: Sequence[Mapping[str, Any]] | None,
    ctype: str,
    status: str,
    reason: str,
    message: str,
    now_text: str,
    observed_generation: int | None = None,
) -> tuple[list[dict[str, Any]], bool]:
    """`conditions` with the condition of `ctype` set (metav1.Condition shape; lastTransitionTime kept
    unless the status changes), and whether anything changed."""
    out = [dict(c) for c in conditions or [] if c.get("type") != ctype]
    old = next((c for c in conditions or [] if c.get("type") == ctype), None)
    new: dict[str, Any] = {
        "type": ctype,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": old["lastTransitionTime"]
        if old is not None and old.get("status") == status and old.get("lastTransitionTime")
        else now_text,
    }
    if observed_generation is not None:
        new["observedGeneration"] = observed_generation
    changed = old is None or any(old.get(k) != new[k] for k in ("status", "reason", "message"))
    out.append(new)
    return out, changed
