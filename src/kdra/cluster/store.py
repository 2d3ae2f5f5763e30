"""The object store kdra's scheduler and controllers run against.

`Store` is the interface (the subset of the Kubernetes API that the scheduler, the resourceclaim controller
and the simulator use); `MemoryStore` is the embedded default. A Kubernetes API backend implements the same
interface later (get/list/create/update/delete map to REST verbs, `watch` to an informer), so nothing above
this layer changes.

Semantics follow the API server:
- every write bumps a store-wide resourceVersion and stamps it on the object (`metadata.resourceVersion`);
- `update` with a resourceVersion that is not the stored one raises `ConflictError` (optimistic concurrency);
  without one it is unconditional, like a PUT without resourceVersion;
- `create` fills `generateName` (5 random-looking, but seeded and deterministic, characters), uid,
  creationTimestamp, generation; an existing name raises `AlreadyExistsError`;
- `delete` of an object with finalizers only sets deletionTimestamp; the object goes once an update clears
  its finalizers;
- `update(..., subresource="status")` only changes `.status`, plain updates keep the stored `.status`
  for kinds that have a status subresource.

Objects returned by get/list and passed to watch handlers are the stored ones, shared like an informer's
cache: treat them as read-only and `clone()` before changing.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from kdra.api.types import Obj
from kdra.api.types import clone as clone  # the store's users copy what they read with it
from kdra.cluster.clock import format_time
from kdra.cluster.selectors import LabelSelector, parse_selector
from kdra.errors import KdraError

EventType = Literal["ADDED", "MODIFIED", "DELETED"]

# Kinds served without a namespace. Everything else is namespaced ("default" when omitted).
CLUSTER_SCOPED: frozenset[str] = frozenset(
    {
        "Node",
        "Namespace",
        "ResourceSlice",
        "DeviceClass",
        "PriorityClass",
        "DeviceTaintRule",
        "Queue",
        "Topology",
    }
)
# Kinds whose status is a subresource (plain updates do not change status, status updates nothing else).
STATUS_SUBRESOURCE: frozenset[str] = frozenset(
    {"Pod", "ResourceClaim", "Node", "Deployment", "ReplicaSet", "Job", "PodGroup", "Workload"}
)


class StoreError(KdraError):
    """An API error; `reason` is the StatusReason the API server would return. Errors from a real API
    server also carry the HTTP `code` and the `status` object it sent."""

    reason = "InternalError"
    exit_code = 2
    code = 0
    status: dict[str, Any] = {}  # noqa: RUF012 - a read-only default; instances set their own


class NotFoundError(StoreError):
    reason = "NotFound"


class AlreadyExistsError(StoreError):
    reason = "AlreadyExists"


class ConflictError(StoreError):
    reason = "Conflict"


class InvalidObjectError(StoreError):
    reason = "Invalid"


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: EventType
    kind: str
    object: Obj
    old: Obj | None  # previous stored version for MODIFIED/DELETED


Handler = Callable[[WatchEvent], None]


class Watch:
    """A registered watch; `stop()` unregisters it."""

    def __init__(self, store: Store, kinds: frozenset[str] | None, handler: Handler) -> None:
        self._store = store
        self.kinds = kinds
        self.handler = handler
        self.active = True

    def stop(self) -> None:
        self.active = False


def copy_for_update(obj: Obj) -> Obj:
    """A copy that mutators may change at the top two levels (metadata/spec/status fields, and append to
    their lists) without touching the stored object; deeper structures stay shared, so replace them rather
    than edit them in place. Much cheaper than clone() on the hot path."""
    new = dict(obj)
    for part in ("metadata", "spec", "status"):
        sub = obj.get(part)
        if isinstance(sub, dict):
            new[part] = {k: (list(v) if isinstance(v, list) else v) for k, v in sub.items()}
    return new


def obj_key(obj: Obj) -> tuple[str, str, str]:
    """(kind, namespace, name) of an object, namespace "" for cluster-scoped kinds."""
    kind = obj.get("kind") or ""
    meta = obj.get("metadata") or {}
    ns = "" if kind in CLUSTER_SCOPED else (meta.get("namespace") or "default")
    return kind, ns, meta.get("name") or ""


def describe(kind: str, namespace: str, name: str) -> str:
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


class Store(ABC):
    """The store interface. Implementations deliver watch events through `_emit`, in write order."""

    def __init__(self) -> None:
        self._watches: list[Watch] = []
        self._pending: deque[WatchEvent] = deque()
        self._dispatching = False

    @abstractmethod
    def get(self, kind: str, name: str, namespace: str = "") -> Obj: ...

    @abstractmethod
    def try_get(self, kind: str, name: str, namespace: str = "") -> Obj | None: ...

    @abstractmethod
    def list(
        self, kind: str, namespace: str | None = None, label_selector: str | LabelSelector | None = None
    ) -> list[Obj]: ...

    @abstractmethod
    def create(self, obj: Obj) -> Obj: ...

    @abstractmethod
    def update(self, obj: Obj, *, subresource: str | None = None) -> Obj: ...

    @abstractmethod
    def delete(
        self, kind: str, name: str, namespace: str = "", *, resource_version: str | None = None
    ) -> Obj | None:
        """Delete; returns the object (deletionTimestamp set) while finalizers keep it, else None."""

    def watch(self, handler: Handler, kinds: Iterable[str] | None = None) -> Watch:
        w = Watch(self, frozenset(kinds) if kinds is not None else None, handler)
        self._watches.append(w)
        return w

    def _emit(self, event: WatchEvent) -> None:
        # Writes made by handlers are queued and delivered after the current event has reached every
        # watcher, so each watcher sees events in resourceVersion order (as from a watch stream).
        self._pending.append(event)
        if self._dispatching:
            return
        self._dispatching = True
        try:
            while self._pending:
                ev = self._pending.popleft()
                stale = False
                for w in self._watches:
                    if not w.active:
                        stale = True
                        continue
                    if w.kinds is None or ev.kind in w.kinds:
                        w.handler(ev)
                if stale:
                    self._watches = [w for w in self._watches if w.active]
        finally:
            self._dispatching = False
            self._pending.clear()

    @property
    @abstractmethod
    def resource_version(self) -> int: ...

    def update_with_retry(
        self,
        kind: str,
        name: str,
        namespace: str,
        mutate: Callable[[Obj], None],
        *,
        subresource: str | None = None,
        attempts: int = 5,
    ) -> Obj:
        """Get, mutate a clone, update; retry on conflict (client-go's RetryOnConflict)."""
        for attempt in range(attempts):
            current = copy_for_update(self.get(kind, name, namespace))
            mutate(current)
            try:
                return self.update(current, subresource=subresource)
            except ConflictError:
                if attempt == attempts - 1:
                    raise
        raise AssertionError("unreachable")


_ALPHANUM = "bcdfghjklmnpqrstvwxz2456789"  # k8s.io/apimachinery/pkg/util/rand: no vowels, no 0/1/3


class MemoryStore(Store):
    """The embedded in-memory backend. `clock` gives the virtual time (seconds) for timestamps."""

    def __init__(self, clock: Callable[[], float] | None = None, seed: int = 0) -> None:
        super().__init__()
        self._objects: dict[str, dict[tuple[str, str], Obj]] = {}
        self._rv = 0
        self._uid = 0
        self._clock = clock or (lambda: 0.0)
        self._rand = random.Random(seed)

    # -- reads -----------------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        return self._rv

    def try_get(self, kind: str, name: str, namespace: str = "") -> Obj | None:
        ns = "" if kind in CLUSTER_SCOPED else (namespace or "default")
        return self._objects.get(kind, {}).get((ns, name))

    def get(self, kind: str, name: str, namespace: str = "") -> Obj:
        obj = self.try_get(kind, name, namespace)
        if obj is None:
            ns = "" if kind in CLUSTER_SCOPED else (namespace or "default")
            raise NotFoundError(f"{describe(kind, ns, name)} not found")
        return obj

    def list(
        self, kind: str, namespace: str | None = None, label_selector: str | LabelSelector | None = None
    ) -> list[Obj]:
        table = self._objects.get(kind, {})
        sel = parse_selector(label_selector) if isinstance(label_selector, str) else label_selector
        out = []
        for (ns, _name), obj in sorted(table.items()):
            if namespace is not None and kind not in CLUSTER_SCOPED and ns != namespace:
                continue
            if sel is not None and not sel.matches(obj["metadata"].get("labels")):
                continue
            out.append(obj)
        return out

    def count(self, kind: str) -> int:
        return len(self._objects.get(kind, {}))

    # -- writes ----------------------------------------------------------------------------------

    def _timestamp(self) -> str:
        return format_time(self._clock())

    def _generate_suffix(self) -> str:
        return "".join(self._rand.choice(_ALPHANUM) for _ in range(5))

    def create(self, obj: Obj) -> Obj:
        kind = obj.get("kind")
        if not kind:
            raise InvalidObjectError("object has no kind")
        meta = dict(obj.get("metadata") or {})
        new = dict(obj)
        new["metadata"] = meta
        ns = "" if kind in CLUSTER_SCOPED else (meta.get("namespace") or "default")
        if ns:
            meta["namespace"] = ns
        table = self._objects.setdefault(kind, {})
        name: str = meta.get("name") or ""
        if not name:
            base = meta.get("generateName")
            if not base:
                raise InvalidObjectError(
                    f"{kind}: metadata.name: Required value: name or generateName is required"
                )
            # names.SimpleNameGenerator: base truncated to 58 chars + 5 random characters.
            base = base[:58]
            for _ in range(100):
                name = base + self._generate_suffix()
                if (ns, name) not in table:
                    break
            meta["name"] = name
        if (ns, name) in table:
            raise AlreadyExistsError(f'{kind.lower()}s "{name}" already exists')
        if meta.get("resourceVersion"):
            raise InvalidObjectError(
                f"{describe(kind, ns, name)}: metadata.resourceVersion: must be unset on create"
            )
        self._rv += 1
        self._uid += 1
        meta["resourceVersion"] = str(self._rv)
        meta.setdefault("uid", f"00000000-0000-4000-8000-{self._uid:012x}")
        meta.setdefault("creationTimestamp", self._timestamp())
        meta["generation"] = 1
        meta.pop("deletionTimestamp", None)
        table[(ns, name)] = new
        self._emit(WatchEvent("ADDED", kind, new, None))
        return new

    def update(self, obj: Obj, *, subresource: str | None = None) -> Obj:
        kind, ns, name = obj_key(obj)
        table = self._objects.get(kind, {})
        old = table.get((ns, name))
        if old is None:
            raise NotFoundError(f"{describe(kind, ns, name)} not found")
        if obj is old:
            raise InvalidObjectError(
                f"{describe(kind, ns, name)}: update with the stored object; clone() it first"
            )
        meta = dict(obj.get("metadata") or {})
        rv = meta.get("resourceVersion")
        old_meta = old["metadata"]
        if rv and rv != old_meta["resourceVersion"]:
            raise ConflictError(
                f'Operation cannot be fulfilled on {kind.lower()}s "{name}": the object has been modified; '
                "please apply your changes to the latest version and try again"
            )
        if subresource == "status":
            new = dict(old)
            new["metadata"] = dict(old_meta)
            if "status" in obj:
                new["status"] = obj["status"]
            else:
                new.pop("status", None)
        else:
            new = dict(obj)
            new["metadata"] = meta
            for fixed in ("uid", "creationTimestamp", "namespace", "deletionTimestamp"):
                if fixed in old_meta:
                    meta[fixed] = old_meta[fixed]
                else:
                    meta.pop(fixed, None)
            if kind in STATUS_SUBRESOURCE:
                if "status" in old:
                    new["status"] = old["status"]
                else:
                    new.pop("status", None)
            if new.get("spec") != old.get("spec"):
                meta["generation"] = old_meta.get("generation", 1) + 1
            if (
                old_meta.get("deletionTimestamp")
                and not old_meta.get("finalizers")
                and meta.get("finalizers")
            ):
                raise InvalidObjectError(
                    f"{describe(kind, ns, name)}: metadata.finalizers: no new finalizers "
                    "can be added if the object is being deleted"
                )
        self._rv += 1
        new["metadata"]["resourceVersion"] = str(self._rv)
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            del table[(ns, name)]
            self._emit(WatchEvent("DELETED", kind, new, old))
            return new
        table[(ns, name)] = new
        self._emit(WatchEvent("MODIFIED", kind, new, old))
        return new

    def delete(
        self, kind: str, name: str, namespace: str = "", *, resource_version: str | None = None
    ) -> Obj | None:
        ns = "" if kind in CLUSTER_SCOPED else (namespace or "default")
        table = self._objects.get(kind, {})
        old = table.get((ns, name))
        if old is None:
            raise NotFoundError(f"{describe(kind, ns, name)} not found")
        if resource_version and resource_version != old["metadata"]["resourceVersion"]:
            raise ConflictError(
                f'Operation cannot be fulfilled on {kind.lower()}s "{name}": the object has been modified'
            )
        self._rv += 1
        if old["metadata"].get("finalizers"):
            if old["metadata"].get("deletionTimestamp"):
                return old
            new = dict(old)
            new["metadata"] = dict(
                old["metadata"], deletionTimestamp=self._timestamp(), resourceVersion=str(self._rv)
            )
            table[(ns, name)] = new
            self._emit(WatchEvent("MODIFIED", kind, new, old))
            return new
        del table[(ns, name)]
        gone = dict(old)
        gone["metadata"] = dict(old["metadata"], resourceVersion=str(self._rv))
        self._emit(WatchEvent("DELETED", kind, gone, old))
        return None
