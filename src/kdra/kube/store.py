"""`KubeStore`: kdra's store interface (kdra.cluster.Store) backed by a Kubernetes API server.

Informer-style: `start()` lists every kind it informs and keeps a cache current with one watch per kind
(a `Reflector` thread each: resume from the last resourceVersion seen, including bookmarks, after a
dropped connection or an API-server restart; relist on 410 Gone, and every `relist_period` seconds as
a resync). Reads (`get`, `list`) come from the cache for informed kinds, like a lister's.

Threading: reflector threads only fetch; everything that changes the cache and every watch handler runs
in the thread that calls `process_events()` or writes through the store (the scheduler's loop), so the
scheduler above sees the single-threaded, ordered store it was written against.

Cached objects lose metadata.managedFields on the way in (as kube-scheduler's informers strip them).

Writes go to the API server and their results are applied to the cache at once and delivered to
handlers as events (as MemoryStore does; client-go's scheduler gets the same effect from its assume
cache). The watch later brings the same resourceVersion, which is then skipped: an event whose
resourceVersion is not newer than the cached object's is stale. `update` is conditional on
metadata.resourceVersion (optimistic concurrency); `update_with_retry` re-reads the live object after a
conflict, as client-go's RetryOnConflict callers do.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kdra.api.types import Obj
from kdra.cluster.selectors import LabelSelector, parse_selector
from kdra.cluster.store import (
    ConflictError,
    NotFoundError,
    Store,
    StoreError,
    WatchEvent,
    copy_for_update,
    describe,
)
from kdra.kube.client import ExpiredError, KubeClient, rv_int
from kdra.kube.resources import GROUP_RESOURCES, RESOURCES, is_namespaced, resource_info

log = logging.getLogger("kdra.kube")

# What `kdra scheduler` informs.
SCHEDULER_KINDS: tuple[str, ...] = (
    "DeviceClass",
    "ResourceSlice",
    "Node",
    "ResourceClaimTemplate",
    "ResourceClaim",
    "Pod",
)

Key = tuple[str, str]
TOMBSTONES = 10_000  # deleted objects remembered (KubeStore._deleted)


def strip_managed_fields(obj: Obj) -> Obj:
    """Drop metadata.managedFields, as kube-scheduler's informers do: often half an object's size, and
    nothing here reads it (an update that omits it leaves it as it is on the server)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


@dataclass(frozen=True)
class Source:
    """One informed resource: `kind` as the store's readers see it, in API `group` ("" = the kind's group
    in kdra.kube.resources.RESOURCES). An optional source is discovered (the version the API server serves,
    preferring `prefer`); when it is not served (a CRD not installed, a gate off) it is simply absent, and
    probed again every `probe_period` seconds, so a CRD installed later is picked up."""

    kind: str
    group: str = ""
    prefer: tuple[str, ...] = ()
    optional: bool = False

    @property
    def id(self) -> str:
        return f"{self.kind}.{self.group}" if self.group else self.kind

    @property
    def api_group(self) -> str:
        return self.group or RESOURCES[self.kind][0].rpartition("/")[0]

    @property
    def plural(self) -> str:
        alt = GROUP_RESOURCES.get((self.group, self.kind)) if self.group else None
        return alt[1] if alt is not None else RESOURCES[self.kind][1]


# DeviceTaintRules, whose taints the allocator adds to the slices' devices (kdra.allocator.taintrules), as
# kube-scheduler's slice tracker does: resource.k8s.io/v1 from 1.37, v1beta2 in 1.36 where its API is on;
# where neither is served there are none.
DEVICE_TAINT_RULES = Source("DeviceTaintRule", prefer=("v1", "v1beta2"), optional=True)

# What the scheduling session reads (kdra.scheduler.gangqueues): gang, queue, topology and shard objects of
# every shape it accepts (kdra.scheduler.gang, .queues), and disruption budgets. All optional.
SESSION_SOURCES: tuple[Source, ...] = (
    Source("PodGroup", optional=True),
    Source("PodGroup", "scheduling.k8s.io", ("v1beta1", "v1alpha2"), optional=True),
    Source("Workload", prefer=("v1beta1", "v1alpha2"), optional=True),
    Source("PodGroup", "scheduling.run.ai", optional=True),
    Source("PodGroup", "scheduling.volcano.sh", optional=True),
    Source("PodGroup", "scheduling.x-k8s.io", optional=True),
    Source("Queue", optional=True),
    Source("Queue", "scheduling.run.ai", optional=True),
    Source("Queue", "scheduling.volcano.sh", optional=True),
    Source("Topology", optional=True),
    Source("Topology", "kai.scheduler", optional=True),
    Source("SchedulingShard", optional=True),
    Source("SchedulingShard", "kai.scheduler", optional=True),
    # Which victims a budget protects (kdra.kube.session.KubeEvictor), as kube-scheduler reads them.
    Source("PodDisruptionBudget", optional=True),
)


def _key(kind: str, obj: Obj) -> Key:
    meta = obj.get("metadata") or {}
    ns = (meta.get("namespace") or "default") if is_namespaced(kind) else ""
    return ns, str(meta.get("name") or "")


class Reflector(threading.Thread):
    """List once (done by the store), then watch one source forever: resume after errors, relist on 410.
    An optional source that is not served waits, probing discovery, until it is."""

    def __init__(
        self,
        store: KubeStore,
        source: Source | str,
        resource_version: str,
        *,
        relist_period: float = 0.0,
        watch_timeout: int = 300,
        api_version: str | None = None,
    ) -> None:
        src = source if isinstance(source, Source) else Source(source)
        super().__init__(daemon=True, name=f"kdra-reflector-{src.id}")
        self.store = store
        self.source = src
        self.kind = src.kind
        self.api_version = api_version  # None: not served (optional sources), or the kind's own version
        self.absent = src.optional and api_version is None
        self.rv = resource_version
        self.relist_period = relist_period
        self.watch_timeout = watch_timeout
        self.last_relist = time.monotonic()
        self.watches = 0  # watch requests made (1 + reconnects), for tests
        self.relists = 0

    def run(self) -> None:
        store = self.store
        stop = store.stopping
        backoff = 0.2
        while not stop.is_set():
            try:
                if self.absent and not self._probe():
                    stop.wait(store.probe_period)
                    continue
                if self.relist_period and time.monotonic() - self.last_relist >= self.relist_period:
                    self.relist()
                self.watches += 1
                timeout = self.watch_timeout
                if self.relist_period:
                    left = self.relist_period - (time.monotonic() - self.last_relist)
                    timeout = max(1, min(timeout, int(left) + 1))
                for etype, obj in store.client.watch_stream(
                    self.kind, self.rv, timeout_seconds=timeout, stop=stop, api_version=self.api_version
                ):
                    rv = (obj.get("metadata") or {}).get("resourceVersion")
                    if rv:
                        self.rv = str(rv)
                    if etype == "BOOKMARK":
                        continue
                    store.inbox.put(("event", self.source.id, etype, strip_managed_fields(obj)))
                    backoff = 0.2
            except NotFoundError:
                if not self.source.optional:
                    log.info("watch %s: not found; retrying in %.1fs", self.source.id, backoff)
                    stop.wait(backoff)
                    backoff = min(backoff * 2, 5.0)
                    continue
                # The CRD (or the API version) went away: its objects are gone too.
                log.info("watch %s: no longer served", self.source.id)
                self.absent = True
                store.inbox.put(("relist", self.source.id, self.rv, []))
            except ExpiredError:
                log.info("watch %s: resourceVersion %s expired, relisting", self.kind, self.rv)
                self._relist_until_ok(backoff)
            except StoreError as e:
                if stop.is_set():
                    return
                log.info("watch %s: %s; retrying in %.1fs", self.kind, e, backoff)
                stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
            except Exception as e:  # never let a reflector die silently
                log.warning("watch %s: unexpected %s: %s", self.kind, type(e).__name__, e)
                stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)

    def _relist_until_ok(self, backoff: float) -> None:
        while not self.store.stopping.is_set():
            try:
                self.relist()
                return
            except StoreError as e:
                log.info("relist %s: %s; retrying in %.1fs", self.kind, e, backoff)
                self.store.stopping.wait(backoff)
                backoff = min(backoff * 2, 5.0)

    def _probe(self) -> bool:
        """Discovery for an absent optional source; when it is served now, list it and watch from there."""
        found = self.store.discover(self.source)
        if found is None:
            return False
        self.api_version = found
        self.relist()
        self.absent = False
        log.info("informing %s (%s)", self.source.id, found)
        return True

    def relist(self) -> None:
        items, rv = self.store.client.list_with_version(self.kind, api_version=self.api_version)
        for obj in items:
            strip_managed_fields(obj)
        self.rv = rv
        self.last_relist = time.monotonic()
        self.relists += 1
        self.store.inbox.put(("relist", self.source.id, rv, items))


class KubeStore(Store):
    """The Store interface over an API server; see the module docstring."""

    def __init__(
        self,
        client: KubeClient,
        kinds: Iterable[str] = SCHEDULER_KINDS,
        *,
        sources: Iterable[Source] = (),
        relist_period: float = 0.0,
        watch_timeout: int = 300,
        probe_period: float = 30.0,
    ) -> None:
        super().__init__()
        self.client = client
        self.sources: dict[str, Source] = {}
        for src in (*(Source(k) for k in kinds), *sources):
            if src.kind not in RESOURCES:
                raise ValueError(f"KubeStore cannot inform kind {src.kind!r}")
            self.sources.setdefault(src.id, src)
        self.kinds = tuple(dict.fromkeys(src.kind for src in self.sources.values()))
        self._sources_of: dict[str, list[str]] = {}
        for sid, src in self.sources.items():
            self._sources_of.setdefault(src.kind, []).append(sid)
        self.relist_period = relist_period
        self.watch_timeout = watch_timeout
        self.probe_period = probe_period
        self._objects: dict[str, dict[Key, Obj]] = {sid: {} for sid in self.sources}
        # (source, key) -> resourceVersion of its deletion, the latest TOMBSTONES: a write's answer applied
        # after the object's DELETED event must not bring it back (a claim written, then deleted with its
        # pod, would hold its devices in kdra's view for good).
        self._deleted: OrderedDict[tuple[str, Key], int] = OrderedDict()
        self._rv = 0
        self.inbox: queue.Queue[tuple[Any, ...]] = queue.Queue()  # the reflectors' events and relists
        self.stopping = threading.Event()  # set by stop(): the reflectors end
        self.reflectors: dict[str, Reflector] = {}
        self.events_applied = 0

    # -- life cycle ------------------------------------------------------------------------------------
    def start(self) -> KubeStore:
        """List every source (filling the cache, no events delivered) and start watching from there."""
        cache: dict[str, Any] = {}  # one discovery read for all sources
        for sid, src in self.sources.items():
            api_version = self.discover(src, cache) if src.optional else None
            rv = ""
            if api_version is not None or not src.optional:
                items, rv = self.client.list_with_version(src.kind, api_version=api_version)
                table = self._objects[sid]
                for obj in items:
                    table[_key(src.kind, strip_managed_fields(obj))] = obj
                self._rv = max(self._rv, rv_int(rv))
            self.reflectors[sid] = Reflector(
                self,
                src,
                rv,
                relist_period=self.relist_period,
                watch_timeout=self.watch_timeout,
                api_version=api_version,
            )
        for r in self.reflectors.values():
            r.start()
        return self

    def discover(self, src: Source, cache: dict[str, Any] | None = None) -> str | None:
        """The group/version the API server serves `src` in, or None."""
        try:
            return self.client.served_version(src.api_group, src.plural, src.prefer, cache)
        except StoreError as e:
            log.info("discovery of %s: %s", src.id, e)
            return None

    def served(self, kind: str) -> dict[str, str]:
        """For each informed source of `kind` that is served: source id -> group/version."""
        out = {}
        for sid in self._sources_of.get(kind, ()):
            r = self.reflectors.get(sid)
            if r is not None and not r.absent:
                out[sid] = r.api_version or resource_info(kind)[0]
        return out

    def stop(self) -> None:
        self.stopping.set()

    def process_events(self, timeout: float = 0.0, max_events: int = 100_000) -> int:
        """Apply queued watch events to the cache and deliver them; waits up to `timeout` for the
        first one. Returns how many were applied."""
        n = 0
        try:
            item = self.inbox.get(timeout=timeout) if timeout > 0 else self.inbox.get_nowait()
        except queue.Empty:
            return 0
        while True:
            n += self._apply_item(item)
            if n >= max_events:
                break
            try:
                item = self.inbox.get_nowait()
            except queue.Empty:
                break
        return n

    def wake(self) -> None:
        """Have a process_events waiting for the first event return now: other threads left work for
        the loop (a binding cycle or a status write finished)."""
        self.inbox.put(("wake",))

    def _apply_item(self, item: tuple[Any, ...]) -> int:
        if item[0] == "wake":
            return 0
        if item[0] == "event":
            _, sid, etype, obj = item
            return self._apply(sid, etype, obj)
        _, sid, rv, items = item
        kind = self.sources[sid].kind
        table = self._objects[sid]
        fresh = {_key(kind, o): o for o in items}
        n = 0
        list_rv = rv_int(rv)
        for key in sorted(set(table) - set(fresh)):
            cached = table[key]
            if not items or rv_int(cached["metadata"].get("resourceVersion")) <= list_rv:
                n += self._apply(sid, "DELETED", cached, deleted_at=list_rv)
        for obj in items:
            n += self._apply(sid, "MODIFIED", obj)
        return n

    def _apply(self, sid: str, etype: str, obj: Obj, deleted_at: int = 0) -> int:
        """One event into the cache (skipped when stale) and out to the handlers. `deleted_at`: for a
        deletion found by a relist, the list's resourceVersion (the object's own is older)."""
        table = self._objects[sid]
        kind = self.sources[sid].kind
        key = _key(kind, obj)
        cached = table.get(key)
        rv = rv_int((obj.get("metadata") or {}).get("resourceVersion"))
        self._rv = max(self._rv, rv)
        if etype == "DELETED":
            if cached is None or rv_int(cached["metadata"].get("resourceVersion")) > rv:
                return 0
            del table[key]
            self.events_applied += 1
            self._deleted[(sid, key)] = max(rv, deleted_at)
            if len(self._deleted) > TOMBSTONES:
                self._deleted.popitem(last=False)
            self._emit(WatchEvent("DELETED", kind, obj, cached))
            return 1
        if cached is None:
            gone = self._deleted.get((sid, key))
            if gone is not None:
                if rv <= gone:
                    return 0  # an answer older than the object's deletion
                del self._deleted[(sid, key)]  # created again
        else:
            if rv_int(cached["metadata"].get("resourceVersion")) >= rv:
                return 0
            # Keep the spec object when it did not change: the scheduler tells a status-only update of a
            # pod by identity (as MemoryStore's status writes leave it).
            if "spec" in obj and obj["spec"] == cached.get("spec"):
                obj["spec"] = cached["spec"]
        table[key] = obj
        self.events_applied += 1
        self._emit(WatchEvent("ADDED" if cached is None else "MODIFIED", kind, obj, cached))
        return 1

    def _source_for(self, kind: str, obj: Obj) -> str | None:
        """The informed source an object of `kind` belongs to, by its apiVersion's group."""
        sids = self._sources_of.get(kind)
        if not sids:
            return None
        group = str(obj.get("apiVersion") or "").rpartition("/")[0]
        for sid in sids:
            if self.sources[sid].api_group == group:
                return sid
        return None

    def apply_written(self, kind: str, obj: Obj) -> Obj:
        """Take in an object as the API server answered a write of kdra's (ahead of its watch event, so
        the next read sees it); returns it."""
        strip_managed_fields(obj)
        obj.setdefault("kind", kind)
        obj.setdefault("apiVersion", RESOURCES[kind][0])
        sid = self._source_for(kind, obj)
        if sid is not None:
            self._apply(sid, "MODIFIED", obj)
        return obj

    # -- reads -----------------------------------------------------------------------------------------
    @property
    def resource_version(self) -> int:
        return self._rv

    def try_get(self, kind: str, name: str, namespace: str = "") -> Obj | None:
        ns = (namespace or "default") if is_namespaced(kind) else ""
        sids = self._sources_of.get(kind)
        if sids is not None:
            for sid in sids:
                hit = self._objects[sid].get((ns, name))
                if hit is not None:
                    return hit
            return None
        if kind not in RESOURCES:
            return None
        return self.client.try_get(kind, name, ns or None)

    def get(self, kind: str, name: str, namespace: str = "") -> Obj:
        obj = self.try_get(kind, name, namespace)
        if obj is None:
            ns = (namespace or "default") if is_namespaced(kind) else ""
            raise NotFoundError(f"{describe(kind, ns, name)} not found")
        return obj

    def list(
        self, kind: str, namespace: str | None = None, label_selector: str | LabelSelector | None = None
    ) -> list[Obj]:
        sids = self._sources_of.get(kind)
        if sids is None:
            if kind not in RESOURCES:
                return []
            try:
                objs = self.client.list(kind, namespace if is_namespaced(kind) else None)
            except NotFoundError:  # a CRD that is not installed
                return []
            pairs = sorted(((_key(kind, o), o) for o in objs), key=lambda p: p[0])
        elif len(sids) == 1:
            pairs = sorted(self._objects[sids[0]].items(), key=lambda p: p[0])
        else:  # several API groups: by key, then in source order
            merged = [(k, i, o) for i, sid in enumerate(sids) for k, o in self._objects[sid].items()]
            pairs = [(k, o) for k, _i, o in sorted(merged, key=lambda t: (t[0], t[1]))]
        sel = parse_selector(label_selector) if isinstance(label_selector, str) else label_selector
        out = []
        for (ns, _name), obj in pairs:
            if namespace is not None and is_namespaced(kind) and ns != namespace:
                continue
            if sel is not None and not sel.matches((obj.get("metadata") or {}).get("labels")):
                continue
            out.append(obj)
        return out

    def count(self, kind: str) -> int:
        return sum(len(self._objects[sid]) for sid in self._sources_of.get(kind, ()))

    # -- writes ----------------------------------------------------------------------------------------
    def create(self, obj: Obj) -> Obj:
        kind = obj["kind"]
        return self.apply_written(kind, self.client.create(obj))

    def update(self, obj: Obj, *, subresource: str | None = None) -> Obj:
        kind = obj["kind"]
        return self.apply_written(kind, self.client.update(obj, subresource))

    def patch(
        self,
        kind: str,
        name: str,
        namespace: str,
        patch: Obj | Sequence[Obj],
        *,
        subresource: str | None = None,
    ) -> Obj:
        ns = namespace if is_namespaced(kind) else None
        return self.apply_written(kind, self.client.patch(kind, name, patch, ns, subresource))

    def delete(
        self, kind: str, name: str, namespace: str = "", *, resource_version: str | None = None
    ) -> Obj | None:
        ns = (namespace or "default") if is_namespaced(kind) else None
        remaining = self.client.delete(kind, name, ns, resource_version=resource_version)
        if remaining is not None:
            return self.apply_written(kind, remaining)
        return None

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        """pods/binding; the pod's new nodeName arrives through the watch."""
        self.client.bind(namespace, name, uid, node)

    def refresh(self, kind: str, name: str, namespace: str = "") -> Obj | None:
        """Read the live object and bring the cache up to it (after a conflict)."""
        ns = (namespace or "default") if is_namespaced(kind) else None
        try:
            live = self.client.get(kind, name, ns)
        except NotFoundError:
            cached = self.try_get(kind, name, namespace)
            sid = self._source_for(kind, cached) if cached is not None else None
            if cached is not None and sid is not None:
                gone = dict(cached)
                gone["metadata"] = dict(cached["metadata"], resourceVersion=str(self._rv + 1))
                self._apply(sid, "DELETED", gone)
            return None
        return self.apply_written(kind, live)

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
        """Get (cache), mutate a copy, conditional update; on conflict re-read the live object."""
        current = self.get(kind, name, namespace)
        for attempt in range(attempts):
            upd = copy_for_update(current)
            mutate(upd)
            try:
                return self.update(upd, subresource=subresource)
            except ConflictError:
                if attempt == attempts - 1:
                    raise
                live = self.refresh(kind, name, namespace)
                if live is None:
                    raise NotFoundError(f"{describe(kind, namespace, name)} not found") from None
                current = live
        raise AssertionError("unreachable")

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Process events until `predicate()` holds or `timeout` passes."""
        deadline = time.monotonic() + timeout
        while not predicate():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.process_events(timeout=min(left, 0.2))
        return True


def live_objects(client: KubeClient, kinds: Iterable[str]) -> list[Obj]:
    """Every object of `kinds` on the cluster (a one-off read for the read-only tools), CRDs that are
    not installed skipped."""
    out: list[Obj] = []
    for kind in kinds:
        with contextlib.suppress(NotFoundError):
            out.extend(client.list(kind))
    return out
