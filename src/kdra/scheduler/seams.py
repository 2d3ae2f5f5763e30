"""The session's seams with the world it runs in (DESIGN.md "One session, two worlds").

`kdra.scheduler.session` decides the same way in a simulation and on a live cluster; what it does to the
world goes through these seams, each with an in-memory implementation here and a Kubernetes one in
`kdra.kube.session`:

| seam | in memory (`kdra simulate`) | live cluster (`kdra scheduler`) |
|---|---|---|
| store | MemoryStore | KubeStore: informers over the API server |
| clock | VirtualClock | WallClock |
| binder | Scheduler: synchronous | KubeScheduler: worker threads; a gang is one two-phase job |
| evictor | `StoreEvictor`: the victim Fails at once | `KubeEvictor`: Eviction API (PDBs), DisruptionTarget |
| status writer | `StoreStatusWriter`: objects in the store | `KubeStatusWriter`: status patches, Events |

An `EvictionOutcome` says what the session may count on: victims evicted (and whether what they held is
already free, as in memory, or freed once they terminate) and victims whose eviction was refused (a
PodDisruptionBudget), which are not counted as freed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kdra.cluster.store import NotFoundError, Obj, Store, StoreError, clone

DISRUPTION_TARGET = "DisruptionTarget"
PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"  # kube-scheduler's DisruptionTarget reason


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

    def evict(self, pods: Sequence[Obj], message: str, *, dry_run_first: bool = True) -> EvictionOutcome:
        """Evict `pods` (all or, where the world refuses some, as many as it accepts); `message` says who
        wanted it and why. With `dry_run_first`, nothing is evicted unless every pod would be."""
        ...


class StatusWriter(Protocol):
    def write_status(self, obj: Obj, status: Mapping[str, Any]) -> bool:
        """Set these top-level status fields of `obj` (a PodGroup, Queue ...), leaving the others. False
        when the write failed (the caller writes it again later); True when written or the object is
        gone."""
        ...

    def event(self, obj: Obj, etype: str, reason: str, message: str) -> None:
        """A core/v1 Event about `obj` (Normal or Warning)."""
        ...


class StoreEvictor:
    """In memory: the victim is marked Failed with a DisruptionTarget condition (PreemptionByScheduler), so
    the claim controller releases its claims at once. Nothing refuses an eviction here."""

    def __init__(self, store: Store, format_time: Any = None) -> None:
        from kdra.cluster.clock import format_time as virtual

        self.store = store
        self.format_time = format_time or virtual
        self.now = 0.0

    def refusals(self, pods: Sequence[Obj]) -> dict[str, str]:
        return {}

    def evict(self, pods: Sequence[Obj], message: str, *, dry_run_first: bool = True) -> EvictionOutcome:
        from kdra.scheduler.preemption import evict

        out = EvictionOutcome()
        for pod in pods:
            meta = pod["metadata"]
            ns = meta.get("namespace") or "default"
            if evict(self.store, ns, meta["name"], self.format_time(self.now), message):
                out.evicted.append(f"{ns}/{meta['name']}")
        return out


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
