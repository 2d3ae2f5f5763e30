"""What the exporter keeps of each watched object: compact records read from ResourceSlices, ResourceClaims
and Pods (never the objects themselves), and the arithmetic on one record (a share's fraction of its
device, a result's memory). Reading an object raises on what cannot be read, before anything is changed.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kdra.api.gpus import attribute_text, counter_sets, gpu_devices, quantity_value
from kdra.api.pods import pod_claim_names, reserving_pods
from kdra.api.types import Obj
from kdra.observe.exposition import escape

DevKey = tuple[str, str, str]  # driver, pool, device
ClaimKey = tuple[str, str]  # namespace, name
GPU_MEMORY_ANNOTATION = "kdra.dev/gpu-memory"
# kdra.scheduler.gang's, not imported from there: that would load the allocator and CEL into the exporter
QUEUE_REFS = ("kdra.dev/queue", "kai.scheduler/queue", "runai/queue", "scheduling.volcano.sh/queue-name")

_MEM_SELECTOR = re.compile(
    r"capacity\[['\"][^'\"]+['\"]\]\.memory\s*\.\s*compareTo\(\s*quantity\(\s*['\"]([^'\"]+)['\"]\s*\)\s*\)"
    r"\s*(>=|>)\s*0"
)
_COUNT_PREFIX = re.compile(r"^\d+\s+")


def parse_time(ts: Any) -> float | None:
    if not ts or not isinstance(ts, str):
        return None
    try:
        return datetime.datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


@dataclass(slots=True)
class DeviceRec:
    node: str
    product: str
    dtype: str
    memory: int
    shareable: bool
    counters: tuple[tuple[str, str, int], ...]  # (counter set, counter, value) it consumes
    phys: str  # the physical GPU it is (part of); "" for non-GPU devices
    parent_memory: int  # memory of that physical GPU when the slice says (counter set), else 0
    profile: str
    uuid: str
    gpu: bool
    slice: str
    labels: str = ""  # node/driver/pool/device/product label text, built once
    capacity: tuple[tuple[str, int], ...] = ()  # every capacity it publishes (a share's fraction of it)


@dataclass(slots=True)
class ResultRec:
    request: str
    driver: str
    pool: str
    device: str
    share_id: str
    consumed: tuple[tuple[str, int], ...]
    admin: bool

    @property
    def key(self) -> DevKey:
        return (self.driver, self.pool, self.device)


@dataclass(slots=True)
class ClaimRec:
    namespace: str
    name: str
    uid: str
    results: tuple[ResultRec, ...]
    classes: dict[str, str]  # request (or request/subrequest) -> DeviceClass
    request_memory: dict[str, int]  # request -> requested memory per device, where known
    need: int | None  # the claim's own gpu-memory annotation
    pods: tuple[str, ...]  # reservedFor pod names
    selector_node: str
    allocated: bool
    deleting: bool


@dataclass(slots=True)
class PodRec:
    uid: str
    node: str
    phase: str
    pending: bool
    reason: str
    node_reasons: tuple[str, ...]
    claims: tuple[str, ...]
    need: int | None
    queue: str
    message: str = ""  # first line of the PodScheduled=False message, for `kdra top`'s pending list


def obj_key(kind: str, obj: Obj) -> ClaimKey:
    meta = obj.get("metadata") or {}
    if kind in ("ResourceClaim", "Pod"):
        return (meta.get("namespace") or "default", meta.get("name", ""))
    return ("", meta.get("name", ""))


def device_labels(dk: DevKey, rec: DeviceRec) -> str:
    return (
        f'{{node="{escape(rec.node)}",driver="{escape(dk[0])}",pool="{escape(dk[1])}",'
        f'device="{escape(dk[2])}",product="{escape(rec.product)}"'
        + (',partition="true"}' if is_partition(rec) else "}")
    )


def is_partition(rec: DeviceRec) -> bool:
    """A dynamic partition (a MIG profile of a partitionable GPU): one of many overlapping devices."""
    return bool(rec.counters) and rec.dtype == "mig"


def share_fraction(r: ResultRec, rec: DeviceRec) -> float:
    """The part of a shareable device one result consumes: the largest fraction of any of its capacities
    (memory, or a `shares` count as the openb replay fleet publishes)."""
    consumed = dict(r.consumed)
    frac = 0.0
    for name, total in rec.capacity:
        if total > 0 and consumed.get(name):
            frac = max(frac, consumed[name] / total)
    return min(1.0, frac)


def result_memory(r: ResultRec, rec: DeviceRec | None) -> int:
    if r.share_id or (rec is not None and rec.shareable and r.consumed):
        for name, v in r.consumed:
            if name == "memory":
                return v
        return 0
    return rec.memory if rec is not None else 0


def node_reasons(message: str) -> tuple[str, ...]:
    """The reasons of kube-scheduler's FitError text: '0/5 nodes are available: 3 Insufficient cpu, 2 ...'"""
    first = message.split("\n", 1)[0]
    if "nodes are available:" not in first:
        return ()  # free text (gang and queue messages name objects): only the condition reason counts
    body = first.split("nodes are available:", 1)[1]
    body = body.split(" preemption:", 1)[0].strip().rstrip(".")
    out = []
    for part in body.split(", "):
        part = _COUNT_PREFIX.sub("", part.strip()).rstrip(".")
        if part:
            out.append(part)
    return tuple(sorted(set(out)))


def scheduled_condition(pod: Obj) -> dict[str, Any] | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled":
            return dict(c)
    return None


def pod_record(obj: Obj) -> PodRec:
    meta = obj["metadata"]
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    phase = status.get("phase") or "Pending"
    node = spec.get("nodeName") or ""
    cond = scheduled_condition(obj)
    terminal = phase in ("Succeeded", "Failed")
    pending = not node and not terminal and not meta.get("deletionTimestamp")
    reason = ""
    message = ""
    rejected: tuple[str, ...] = ()
    if pending:
        if spec.get("schedulingGates"):
            reason = "SchedulingGated"
        elif cond is not None and cond.get("status") == "False":
            reason = cond.get("reason") or "Unschedulable"
            rejected = node_reasons(cond.get("message") or "")
            message = (cond.get("message") or "").split("\n", 1)[0][:300]
        else:
            reason = "NotYetAttempted"
    claims = pod_claim_names(obj)
    ann = meta.get("annotations") or {}
    need = quantity_value(ann[GPU_MEMORY_ANNOTATION]) if ann.get(GPU_MEMORY_ANNOTATION) else None
    return PodRec(
        meta.get("uid", ""),
        node,
        phase,
        pending,
        reason,
        rejected,
        tuple(claims),
        need,
        _queue(meta),
        message,
    )


def _queue(meta: Mapping[str, Any]) -> str:
    for src in (meta.get("labels") or {}, meta.get("annotations") or {}):
        for k in QUEUE_REFS:
            if src.get(k):
                return str(src[k])
    return ""


def _request_memory(req: Mapping[str, Any]) -> int | None:
    cap = ((req.get("capacity") or {}).get("requests") or {}).get("memory")
    if cap is not None:
        return quantity_value(cap)
    for sel in req.get("selectors") or []:
        m = _MEM_SELECTOR.search(((sel or {}).get("cel") or {}).get("expression", ""))
        if m:
            return quantity_value(m.group(1))
    return None


def claim_record(ck: ClaimKey, obj: Obj) -> ClaimRec:
    meta = obj["metadata"]
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    classes: dict[str, str] = {}
    req_mem: dict[str, int] = {}
    for req in (spec.get("devices") or {}).get("requests") or []:
        rname = req.get("name", "")
        exactly = req.get("exactly")
        if exactly is not None:
            classes[rname] = exactly.get("deviceClassName", "")
            m = _request_memory(exactly)
            if m is not None:
                req_mem[rname] = m
        for sub in req.get("firstAvailable") or []:
            key = f"{rname}/{sub.get('name', '')}"
            classes[key] = sub.get("deviceClassName", "")
            m = _request_memory(sub)
            if m is not None:
                req_mem[key] = m
    alloc = status.get("allocation") or {}
    results = []
    for r in (alloc.get("devices") or {}).get("results") or []:
        consumed = tuple(sorted((k, quantity_value(v)) for k, v in (r.get("consumedCapacity") or {}).items()))
        results.append(
            ResultRec(
                request=r.get("request", ""),
                driver=r.get("driver", ""),
                pool=r.get("pool", ""),
                device=r.get("device", ""),
                share_id=str(r.get("shareID") or ""),
                consumed=consumed,
                admin=bool(r.get("adminAccess")),
            )
        )
    selector_node = ""
    for term in (alloc.get("nodeSelector") or {}).get("nodeSelectorTerms") or []:
        for f in term.get("matchFields") or []:
            if f.get("key") == "metadata.name" and len(f.get("values") or []) == 1:
                selector_node = f["values"][0]
    pods = tuple(reserving_pods(obj))
    ann = meta.get("annotations") or {}
    need = quantity_value(ann[GPU_MEMORY_ANNOTATION]) if ann.get(GPU_MEMORY_ANNOTATION) else None
    return ClaimRec(
        namespace=ck[0],
        name=ck[1],
        uid=meta.get("uid", ""),
        results=tuple(results),
        classes=classes,
        request_memory=req_mem,
        need=need,
        pods=pods,
        selector_node=selector_node,
        allocated=bool(alloc),
        deleting=bool(meta.get("deletionTimestamp")),
    )


def slice_records(
    name: str,
    obj: Obj,
    known_sets: Mapping[tuple[str, str, str], Mapping[str, int]],
    node_product: Mapping[str, str],
) -> tuple[dict[tuple[str, str, str], dict[str, int]], list[tuple[DevKey, DeviceRec]]]:
    """A ResourceSlice's counter sets and the records of its devices; `known_sets` (every slice's counter
    sets) size partitions whose counter set another slice of the pool publishes, `node_product` names the
    product of devices that do not say."""
    spec = obj.get("spec") or {}
    driver = spec.get("driver", "")
    pool = (spec.get("pool") or {}).get("name", "")
    node = spec.get("nodeName") or ""
    sets = counter_sets(spec)
    out = []
    for dev in gpu_devices(spec, known_sets):
        dk = (driver, pool, dev.name)
        attrs = dev.attributes
        product = (
            attribute_text(attrs, "productName")
            or attribute_text(attrs, "model")
            or attribute_text(attrs, "accelerator")
            or node_product.get(node, "")
        )
        rec = DeviceRec(
            node=node,
            product=product,
            dtype=dev.dtype,
            memory=dev.memory,
            shareable=dev.shareable,
            counters=dev.counters,
            phys=dev.physical,
            parent_memory=dev.parent_memory,
            profile=attribute_text(attrs, "profile"),
            uuid=dev.uuid,
            gpu=dev.gpu,
            slice=name,
            capacity=dev.capacity,
        )
        rec.labels = device_labels(dk, rec)
        out.append((dk, rec))
    return sets, out
