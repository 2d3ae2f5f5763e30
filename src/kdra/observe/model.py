"""Claim-level fleet state kept current from watch events, and its Prometheus exposition.

`FleetState.apply(event_type, kind, obj)` takes the events of a watch (Node, ResourceSlice, ResourceClaim,
Pod, DeviceClass, Queue) from any source: the in-memory store of a simulation, or the Kubernetes API
server. It keeps compact records, never the objects, and rebuilds the text of an object's series when that
object (or a device it holds) changes. `render()` then only joins precomputed strings, so a scrape of a
5,000-node fleet costs milliseconds (benchmarks/bench_exporter.py); aggregates are recomputed once per
change, not per scrape. What it keeps of each object: kdra.observe.records; the families it serves:
kdra.observe.families; the pending and queue reports, computed when it renders: kdra.observe.reports.

Definitions (docs/observability.md):
- GPU-equivalents follow kdra.sim.accounting: a full GPU is 1, a MIG device its memory over its parent
  GPU's, a share of a shareable GPU its consumed memory over the GPU's; non-GPU devices (TPU chips) 0.
- Requested memory of a claim: the claim's `kdra.dev/gpu-memory` annotation, else each request's
  `capacity.requests.memory` (consumable capacity) or a `capacity[...].memory` lower bound in its CEL
  selectors, else the `kdra.dev/gpu-memory` annotation of its only pod. Stranded memory is allocated
  minus requested memory, never negative, and only counted where the request is known.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from kdra.api.gpus import gpu_equivalents, node_gpu_memory
from kdra.api.types import Obj
from kdra.observe.exposition import CONTENT_TYPE, Histogram, SeriesTable, escape, fmt_value, header
from kdra.observe.families import (
    ATTEMPT_BUCKETS,
    CLAIM_FAMILIES,
    DEVICE_FAMILIES,
    E2E_BUCKETS,
    POOL_LABELS,
)
from kdra.observe.records import (
    ClaimKey,
    ClaimRec,
    DeviceRec,
    DevKey,
    PodRec,
    ResultRec,
    claim_record,
    device_labels,
    obj_key,
    parse_time,
    pod_record,
    result_memory,
    scheduled_condition,
    share_fraction,
    slice_records,
)
from kdra.observe.reports import pending_text, queue_rows_from_objects, queue_text
from kdra.observe.sums import FleetSums

KINDS = ("Node", "DeviceClass", "ResourceSlice", "ResourceClaim", "Pod", "Queue")


def _fam_index(fams: tuple[tuple[str, str, str], ...]) -> dict[str, int]:
    return {name: i for i, (name, _t, _h) in enumerate(fams)}


_CF = _fam_index(CLAIM_FAMILIES)
_DF = _fam_index(DEVICE_FAMILIES)


class FleetState:
    """Compact, incrementally maintained view of who holds which device. Thread-safe: every public method
    takes the state's lock, so a watch thread can apply events while an HTTP thread renders."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.version = 0
        self.devices: dict[DevKey, DeviceRec] = {}
        self.slice_devices: dict[str, list[DevKey]] = {}
        self.slice_counters: dict[str, list[tuple[str, str, str]]] = {}
        self.counter_sets: dict[tuple[str, str, str], dict[str, int]] = {}
        self.node_devices: dict[str, set[DevKey]] = {}
        self.node_gpu_memory: dict[str, int] = {}
        self.node_product: dict[str, str] = {}
        self.holders: dict[DevKey, dict[ClaimKey, int]] = {}
        # Every claim naming a device (adminAccess results too): re-rendered when the device changes.
        self.named_by: dict[DevKey, set[ClaimKey]] = {}
        # Devices whose slice went away while claims still name them: their last record keeps the claims'
        # series labels stable (a series never changes identity because its device is unpublished).
        self.unpublished: dict[DevKey, DeviceRec] = {}
        self.claims: dict[ClaimKey, ClaimRec] = {}
        self.pods: dict[ClaimKey, PodRec] = {}
        self.classes: set[str] = set()
        self.queues: dict[str, Obj] = {}
        self.queue_report: list[dict[str, Any]] | None = None  # from an in-process scheduler
        # (over-allocated devices now, detected, repaired) from an in-process kdra scheduler
        self.conflicts: tuple[int, int, int] | None = None
        self.claim_lines: list[SeriesTable] = [SeriesTable(1024) for _ in CLAIM_FAMILIES]
        self.device_lines: list[SeriesTable] = [SeriesTable(part=1) for _ in DEVICE_FAMILIES]
        self.scheduled_seen: set[str] = set()
        self.events: dict[str, int] = {}
        self.event_errors: dict[str, int] = {}
        self.e2e = Histogram(
            "kdra_pod_scheduling_duration_seconds",
            "Pod creation to PodScheduled=True, as observed from watches (any scheduler); simulated "
            "seconds in a simulation.",
            E2E_BUCKETS,
        )
        self.attempts = Histogram(
            "kdra_scheduler_attempt_duration_seconds",
            "Wall time of one scheduling attempt of kdra's scheduler (one pod through PreFilter..Bind), by "
            "result; only when the exporter runs beside that scheduler.",
            ATTEMPT_BUCKETS,
            ("result",),
        )
        self.sums = FleetSums(self)
        self.pending_pod_counts: dict[tuple[str, str], int] = {}
        self.node_reason_counts: dict[str, int] = {}
        self.claim_users: dict[ClaimKey, set[ClaimKey]] = {}
        self.unallocated: set[ClaimKey] = set()
        self._rendered: tuple[int, list[bytes]] | None = None
        self.last_render_seconds = 0.0

    # -- events --------------------------------------------------------------------------------------

    def apply(self, event_type: str, kind: str, obj: Obj) -> None:
        """One watch event (ADDED, MODIFIED, DELETED) of one object."""
        with self.lock:
            self.events[kind] = self.events.get(kind, 0) + 1
            self.version += 1
            try:
                self._apply(event_type, kind, obj)
            except (KeyError, TypeError, ValueError, AttributeError, IndexError):
                # An object the API server accepted but kdra cannot read must not stop the exporter (nor a
                # simulation or scheduler it is attached to): count it and go on.
                self.event_errors[kind] = self.event_errors.get(kind, 0) + 1

    def _apply(self, event_type: str, kind: str, obj: Obj) -> None:
        deleted = event_type == "DELETED"
        if kind == "ResourceSlice":
            self._on_slice(obj, deleted)
        elif kind == "ResourceClaim":
            self._on_claim(obj, deleted)
        elif kind == "Pod":
            self._on_pod(obj, deleted)
        elif kind == "Node":
            self._on_node(obj, deleted)
        elif kind == "DeviceClass":
            name = obj["metadata"]["name"]
            if deleted:
                self.classes.discard(name)
            else:
                self.classes.add(name)
        elif kind == "Queue":
            name = obj["metadata"]["name"]
            if deleted:
                self.queues.pop(name, None)
            else:
                self.queues[name] = obj

    def on_event(self, ev: Any) -> None:
        """Adapter for kdra.cluster.Store.watch handlers (WatchEvent)."""
        self.apply(ev.type, ev.kind, ev.object)

    def replace(self, kind: str, objs: Iterable[Obj]) -> None:
        """A fresh list of a kind (start, or a watch that expired): the objects not in it are gone."""
        with self.lock:
            objs = list(objs)
            names = {obj_key(kind, o) for o in objs}
            for key in self._keys_of(kind):
                if key not in names:
                    ns, name = key
                    self.apply("DELETED", kind, {"metadata": {"name": name, "namespace": ns}})
            for o in objs:
                self.apply("ADDED", kind, o)

    def _keys_of(self, kind: str) -> list[ClaimKey]:
        if kind == "ResourceSlice":
            return [("", n) for n in self.slice_devices.keys() | self.slice_counters.keys()]
        if kind == "ResourceClaim":
            return list(self.claims)
        if kind == "Pod":
            return list(self.pods)
        if kind == "Node":
            return [("", n) for n in self.node_gpu_memory.keys() | self.node_product.keys()]
        if kind == "DeviceClass":
            return [("", n) for n in self.classes]
        if kind == "Queue":
            return [("", n) for n in self.queues]
        return []

    def observe_attempt(self, result: str, seconds: float) -> None:
        with self.lock:
            self.attempts.observe(seconds, (result,))
            self.version += 1

    def set_conflicts(self, current: int, detected: int, repaired: int) -> None:
        """kdra scheduler's conflict detector (kdra.kube.conflicts), when the exporter runs beside it."""
        with self.lock:
            if self.conflicts != (current, detected, repaired):
                self.conflicts = (current, detected, repaired)
                self.version += 1

    def set_queue_report(self, report: list[dict[str, Any]] | None) -> None:
        with self.lock:
            if report != self.queue_report:
                self.queue_report = report
                self.version += 1

    # -- nodes and slices ----------------------------------------------------------------------------

    def _on_node(self, obj: Obj, deleted: bool) -> None:
        name = obj["metadata"]["name"]
        labels = obj["metadata"].get("labels") or {}
        pool = "" if deleted else next((labels[k] for k in POOL_LABELS if labels.get(k)), "")
        self.sums.move_node(name, pool)
        mem = 0 if deleted else node_gpu_memory(obj)
        product = (
            ""
            if deleted
            else (labels.get("nvidia.com/gpu.product") or labels.get("amd.com/gpu.product-name") or "")
        )
        changed = self.node_gpu_memory.get(name, 0) != mem or self.node_product.get(name, "") != product
        if deleted:
            self.node_gpu_memory.pop(name, None)
            self.node_product.pop(name, None)
        else:
            self.node_gpu_memory[name] = mem
            self.node_product[name] = product
        if changed:
            for dk in sorted(self.node_devices.get(name, ())):
                rec = self.devices.get(dk)
                if rec is not None and not rec.product and product:
                    rec.product = product
                    rec.labels = device_labels(dk, rec)
                self._refresh_device(dk)

    def _on_slice(self, obj: Obj, deleted: bool) -> None:
        name = obj["metadata"]["name"]
        # read everything first: an unreadable slice changes nothing
        new_sets, new_devs = (
            ({}, []) if deleted else slice_records(name, obj, self.counter_sets, self.node_product)
        )
        old = self.slice_devices.pop(name, [])
        for cs in self.slice_counters.pop(name, []):
            self.counter_sets.pop(cs, None)
        touched: set[DevKey] = set()
        for dk in old:
            rec = self.devices.get(dk)
            if rec is not None and rec.slice != name:
                continue  # republished by another slice of the pool since (a driver replacing its slices)
            self.devices.pop(dk, None)
            if rec is not None and dk in self.named_by:
                self.unpublished[dk] = rec
            if rec is not None:
                nd = self.node_devices.get(rec.node)
                if nd is not None:
                    nd.discard(dk)
                    if not nd:
                        del self.node_devices[rec.node]
            self.device_lines_pop(dk)
            touched.add(dk)
        if new_sets:
            self.counter_sets.update(new_sets)
            self.slice_counters[name] = list(new_sets)
        for dk, rec in new_devs:
            self.devices[dk] = rec
            self.unpublished.pop(dk, None)
            self.node_devices.setdefault(rec.node, set()).add(dk)
            touched.add(dk)
        if new_devs:
            self.slice_devices[name] = [dk for dk, _rec in new_devs]
        for dk in sorted(touched):
            self._refresh_device(dk)

    def device_lines_pop(self, dk: DevKey) -> None:
        for lines in self.device_lines:
            lines.pop(dk, None)

    def _refresh_device(self, dk: DevKey) -> None:
        """Rebuild a device's own series and those of the claims holding it."""
        rec = self.devices.get(dk)
        holders = self.holders.get(dk) or {}
        self.sums.device(dk)
        self.sums.device_use(dk, rec, self.device_ratio(dk, rec, holders) if rec is not None else 0.0)
        if rec is not None:
            n = sum(holders.values())
            ratio = self.device_ratio(dk, rec, holders)
            self.device_lines[_DF["kdra_device_allocations"]][dk] = (
                f"kdra_device_allocations{rec.labels} {n}\n"
            )
            self.device_lines[_DF["kdra_device_allocated_ratio"]][dk] = (
                f"kdra_device_allocated_ratio{rec.labels} {fmt_value(ratio)}\n"
            )
        else:
            self.device_lines_pop(dk)
        for ck in sorted(self.named_by.get(dk) or ()):
            self._render_claim(ck)
            if ck in holders:
                self.sums.claim(ck)

    def device_ratio(self, dk: DevKey, rec: DeviceRec, holders: Mapping[ClaimKey, int]) -> float:
        if not holders:
            return 0.0
        if not rec.shareable:
            return 1.0
        if not rec.capacity:
            return 1.0
        used = 0.0
        for ck in holders:
            claim = self.claims.get(ck)
            if claim is None:
                continue
            for r in claim.results:
                if r.key == dk:
                    used += share_fraction(r, rec) if r.share_id or r.consumed else 1.0
        return min(1.0, used)

    # -- claims ---------------------------------------------------------------------------------------

    def _on_claim(self, obj: Obj, deleted: bool) -> None:
        meta = obj["metadata"]
        ck = (meta.get("namespace") or "default", meta["name"])
        rec = None if deleted else claim_record(ck, obj)  # read first: an unreadable claim changes nothing
        old = self.claims.pop(ck, None)
        old_devices: set[DevKey] = set()
        if old is not None:
            for r in old.results:
                self._unhold(r.key, ck)
                self._unname(r.key, ck)
                old_devices.add(r.key)
        for lines in self.claim_lines:
            lines.pop(ck, None)
        new_devices: set[DevKey] = set()
        if rec is not None:
            self.claims[ck] = rec
            for r in rec.results:
                self.named_by.setdefault(r.key, set()).add(ck)
                if r.admin:
                    continue  # adminAccess results do not hold the device (allocator contract)
                h = self.holders.setdefault(r.key, {})
                h[ck] = h.get(ck, 0) + 1
                new_devices.add(r.key)
            self._render_claim(ck)
            if rec.allocated or rec.deleting:
                self.unallocated.discard(ck)
            else:
                self.unallocated.add(ck)
        else:
            self.unallocated.discard(ck)
        self.sums.claim(ck)
        for dk in sorted(old_devices | new_devices):
            self.sums.device(dk)
            rec_d = self.devices.get(dk)
            if rec_d is None:
                continue
            holders = self.holders.get(dk) or {}
            ratio = self.device_ratio(dk, rec_d, holders)
            self.sums.device_use(dk, rec_d, ratio)
            self.device_lines[_DF["kdra_device_allocations"]][dk] = (
                f"kdra_device_allocations{rec_d.labels} {sum(holders.values())}\n"
            )
            self.device_lines[_DF["kdra_device_allocated_ratio"]][dk] = (
                f"kdra_device_allocated_ratio{rec_d.labels} {fmt_value(ratio)}\n"
            )

    def _unhold(self, dk: DevKey, ck: ClaimKey) -> None:
        h = self.holders.get(dk)
        if not h or ck not in h:
            return
        h[ck] -= 1
        if h[ck] <= 0:
            del h[ck]
        if not h:
            del self.holders[dk]

    def _unname(self, dk: DevKey, ck: ClaimKey) -> None:
        names = self.named_by.get(dk)
        if names is None:
            return
        names.discard(ck)
        if not names:
            del self.named_by[dk]
            self.unpublished.pop(dk, None)

    def device_for_labels(self, dk: DevKey) -> DeviceRec | None:
        """The device as its slice publishes it, or as it was last published while claims still name it."""
        return self.devices.get(dk) or self.unpublished.get(dk)

    def result_node(self, claim: ClaimRec, r: ResultRec) -> str:
        rec = self.device_for_labels(r.key)
        return (rec.node if rec is not None and rec.node else "") or claim.selector_node

    def result_equiv(self, r: ResultRec, rec: DeviceRec | None) -> float:
        if rec is None or not rec.gpu:
            return 0.0
        if r.share_id and rec.shareable:
            return share_fraction(r, rec)
        return gpu_equivalents(rec, self.node_gpu_memory.get(rec.node, 0))

    def _render_claim(self, ck: ClaimKey) -> None:
        claim = self.claims.get(ck)
        if claim is None:
            return
        info: list[str] = []
        equiv: list[str] = []
        mem: list[str] = []
        consumed: list[str] = []
        counters: list[str] = []
        ns, name = ck
        pods = ",".join(claim.pods)
        for r in claim.results:
            rec = self.device_for_labels(r.key)
            if rec is None:
                # Not published yet (the claim came first): no series until its labels are all known,
                # so a series never changes identity when the slice arrives.
                continue
            node = self.result_node(claim, r)
            product = rec.product
            base_req = r.request
            cls = claim.classes.get(base_req) or claim.classes.get(base_req.split("/", 1)[0], "")
            extra = ""
            if r.share_id:
                extra += f',share_id="{escape(r.share_id)}"'
            if rec.profile:
                extra += f',dra_mig_profile="{escape(rec.profile)}"'
                if rec.uuid:
                    extra += f',dra_mig_device_uuid="{escape(rec.uuid)}"'
            if r.admin:
                extra += ',admin_access="true"'
            e_ns, e_name, e_drv, e_pool, e_dev = (
                escape(ns),
                escape(name),
                escape(r.driver),
                escape(r.pool),
                escape(r.device),
            )
            e_req = escape(r.request)
            info.append(
                f'kdra_claim_device_info{{claim="{e_name}",namespace="{e_ns}",pod="{escape(pods)}",'
                f'driver="{e_drv}",pool="{e_pool}",device="{e_dev}",request="{e_req}",node="{escape(node)}",'
                f'device_class="{escape(cls)}",product="{escape(product)}",dra_claim_name="{e_name}",'
                f'dra_claim_namespace="{e_ns}",dra_driver_name="{e_drv}",dra_pool_name="{e_pool}",'
                f'dra_device_name="{e_dev}"{extra}}} 1\n'
            )
            key = (
                f'{{dra_claim_namespace="{e_ns}",dra_claim_name="{e_name}",dra_driver_name="{e_drv}",'
                f'dra_pool_name="{e_pool}",dra_device_name="{e_dev}",request="{e_req}"'
                + (f',share_id="{escape(r.share_id)}"' if r.share_id else "")
            )
            if r.admin:
                continue
            equiv.append(f"kdra_claim_device_gpu_equivalents{key}}} {fmt_value(self.result_equiv(r, rec))}\n")
            mem.append(f"kdra_claim_device_memory_bytes{key}}} {result_memory(r, rec)}\n")
            for cname, v in r.consumed:
                consumed.append(
                    f'kdra_claim_device_consumed_capacity{key},capacity="{escape(cname)}"}} {v}\n'
                )
            for cs, c, v in rec.counters:
                counters.append(
                    f'kdra_claim_device_consumes{key},counter_set="{escape(cs)}",'
                    f'counter="{escape(c)}"}} {v}\n'
                )
        for fam, lines in (
            ("kdra_claim_device_info", info),
            ("kdra_claim_device_gpu_equivalents", equiv),
            ("kdra_claim_device_memory_bytes", mem),
            ("kdra_claim_device_consumed_capacity", consumed),
            ("kdra_claim_device_consumes", counters),
        ):
            table = self.claim_lines[_CF[fam]]
            if lines:
                table[ck] = "".join(lines)
            else:
                table.pop(ck, None)

    # -- pods -----------------------------------------------------------------------------------------

    def _on_pod(self, obj: Obj, deleted: bool) -> None:
        meta = obj["metadata"]
        pk = (meta.get("namespace") or "default", meta["name"])
        uid = meta.get("uid", "")
        new = None if deleted else pod_record(obj)  # read first: an unreadable pod changes nothing
        old = self.pods.pop(pk, None)
        if old is not None:
            self._pod_uncount(pk, old)
        if new is None:
            self.scheduled_seen.discard(uid)
            self._pod_claims_changed(pk, old, None)
            return
        self.pods[pk] = new
        self._pod_count(pk, new)
        self._pod_claims_changed(pk, old, new)
        if new.node and uid not in self.scheduled_seen:
            cond = scheduled_condition(obj)
            if cond is not None and cond.get("status") == "True":
                # kube-scheduler's binding sets nodeName and PodScheduled=True at once; kdra's scheduler
                # writes the condition in a second update, so wait for it.
                self.scheduled_seen.add(uid)
                created = parse_time(meta.get("creationTimestamp"))
                at = parse_time(cond.get("lastTransitionTime"))
                if created is not None and at is not None:
                    self.e2e.observe(max(0.0, at - created))

    def _pod_count(self, pk: ClaimKey, pod: PodRec) -> None:
        for c in pod.claims:
            self.claim_users.setdefault((pk[0], c), set()).add(pk)
        if pod.pending:
            k = (pk[0], pod.reason)
            self.pending_pod_counts[k] = self.pending_pod_counts.get(k, 0) + 1
            for r in pod.node_reasons:
                self.node_reason_counts[r] = self.node_reason_counts.get(r, 0) + 1

    def _pod_uncount(self, pk: ClaimKey, pod: PodRec) -> None:
        for c in pod.claims:
            users = self.claim_users.get((pk[0], c))
            if users is not None:
                users.discard(pk)
                if not users:
                    del self.claim_users[(pk[0], c)]
        if pod.pending:
            k = (pk[0], pod.reason)
            self.pending_pod_counts[k] -= 1
            if not self.pending_pod_counts[k]:
                del self.pending_pod_counts[k]
            for r in pod.node_reasons:
                self.node_reason_counts[r] -= 1
                if not self.node_reason_counts[r]:
                    del self.node_reason_counts[r]

    def _pod_claims_changed(self, pk: ClaimKey, old: PodRec | None, new: PodRec | None) -> None:
        """A pod's memory need counts for its only claim: recompute the claims it names when it changes."""
        before = (old.need, old.claims) if old is not None else (None, ())
        after = (new.need, new.claims) if new is not None else (None, ())
        if before == after:
            return
        names = set(old.claims if old else ()) | set(new.claims if new else ())
        for c in sorted(names):
            ck = (pk[0], c)
            if ck in self.claims:
                self.sums.claim(ck)

    # -- aggregates and exposition --------------------------------------------------------------------

    def claim_need(self, claim: ClaimRec) -> int | None:
        if claim.need is not None:
            return claim.need
        needs = [
            claim.request_memory.get(r.request, claim.request_memory.get(r.request.split("/", 1)[0]))
            for r in claim.results
            if not r.admin
        ]
        if needs and all(n is not None for n in needs):
            return sum(n for n in needs if n is not None)
        if len(claim.pods) == 1:
            pod = self.pods.get((claim.namespace, claim.pods[0]))
            if pod is not None and pod.need is not None and len(pod.claims) == 1:
                return pod.need
        return None

    def _aggregate_parts(self) -> list[bytes]:
        parts = self.sums.parts()
        parts.append(pending_text(self).encode())
        parts.append(queue_text(self.queue_rows()).encode())
        return parts

    def queue_rows(self) -> list[dict[str, Any]]:
        if self.queue_report is not None:
            return self.queue_report
        if not self.queues:
            return []
        return queue_rows_from_objects(self)

    def render(self) -> bytes:
        """The whole exposition."""
        return b"".join(self.render_parts()[1])

    def render_parts(self) -> tuple[int, list[bytes]]:
        """(state version, the exposition in pieces): cached until the next change; the HTTP server writes
        the pieces as they are, so a 50 MB scrape is not copied once more to be joined."""
        with self.lock:
            if self._rendered is not None and self._rendered[0] == self.version:
                return self._rendered
            t0 = time.perf_counter()
            parts: list[bytes] = []
            for i, (fam, kind, help_text) in enumerate(CLAIM_FAMILIES):
                parts.append(header(fam, kind, help_text).encode())
                parts.extend(self.claim_lines[i].blobs())
            for i, (fam, kind, help_text) in enumerate(DEVICE_FAMILIES):
                parts.append(header(fam, kind, help_text).encode())
                parts.extend(self.device_lines[i].blobs())
            parts.extend(self._aggregate_parts())
            tail = [self.e2e.render(), self.attempts.render()]
            if self.conflicts is not None:
                current, detected, repaired = self.conflicts
                tail += [
                    header(
                        "kdra_conflicting_allocations",
                        "gauge",
                        "Devices allocated to more claims than they can serve now (another scheduler raced "
                        "kdra for them), as kdra's scheduler sees them.",
                    ),
                    f"kdra_conflicting_allocations {current}\n",
                    header(
                        "kdra_conflicting_allocations_detected_total",
                        "counter",
                        "Over-allocated devices kdra's scheduler found (each device and set of claims once).",
                    ),
                    f"kdra_conflicting_allocations_detected_total {detected}\n",
                    header(
                        "kdra_conflicting_allocations_repaired_total",
                        "counter",
                        "kdra's claims deallocated (and re-allocated where possible) to end a conflict.",
                    ),
                    f"kdra_conflicting_allocations_repaired_total {repaired}\n",
                ]
            tail.append(
                header("kdra_exporter_watch_events_total", "counter", "Watch events applied, by kind.")
            )
            for kind, n in sorted(self.events.items()):
                tail.append(f'kdra_exporter_watch_events_total{{kind="{kind}"}} {n}\n')
            tail.append(
                header(
                    "kdra_exporter_watch_event_errors_total",
                    "counter",
                    "Watch events whose object could not be read (skipped), by kind.",
                )
            )
            for kind, n in sorted(self.event_errors.items()):
                tail.append(f'kdra_exporter_watch_event_errors_total{{kind="{kind}"}} {n}\n')
            parts.append("".join(tail).encode())
            parts = [p for p in parts if p]
            self.last_render_seconds = time.perf_counter() - t0
            self._rendered = (self.version, parts)
            return self._rendered

    content_type = CONTENT_TYPE
