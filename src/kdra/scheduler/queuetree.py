"""Hierarchical queues, quotas over DRA resources, and KAI-style fair share.

A kdra Queue (cluster-scoped, shaped after KAI's `scheduling.run.ai/v2` Queue):

```yaml
apiVersion: kdra.dev/v1alpha1
kind: Queue
metadata: {name: team-a}
spec:
  parentQueue: research          # optional; only leaf queues take jobs
  priority: 100                  # higher: served first in over-quota, reclaimed last (default 100)
  preemptMinRuntime: 10m         # a running job of this queue is not preempted before this
  reclaimMinRuntime: 10m         # ... nor reclaimed by another queue
  resources:                     # per resource: quota (deserved; -1 unlimited), overQuotaWeight, limit
    deviceclass/gpu.nvidia.com: {quota: 16, overQuotaWeight: 3, limit: 64}   # devices of a DeviceClass
    memory.deviceclass/gpu.nvidia.com: {quota: 1Ti}   # a capacity of those devices (consumable capacity)
    cpu: {quota: "256"}
    memory: {quota: 2Ti}
```

Resource names follow Volcano's DRA quota keys: `deviceclass/<class>` counts allocated devices of the class,
`<capacity>.deviceclass/<class>` sums their capacity (a share's consumedCapacity, or the whole device's
capacity). KAI Queues (`resources.gpu/cpu/memory` with GPUs, millicores and MB) and Volcano Queues
(`weight`, `deserved`, `capability`) are read too.

Fair share (KAI's resource division, per resource): every queue first gets min(quota, request); what is
left goes to queues still asking, highest `priority` tier first, in rounds proportional to
`overQuotaWeight`, never past a queue's request or limit. Top-level queues are divided first, then each
parent's share among its children. Queue order: under fair share first, then under deserved quota with the
job, then priority, then the smallest dominant resource share (max over resources of allocated / fair share).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kdra.allocator.preference import SortKey
from kdra.api.durations import parse_duration
from kdra.api.quantity import parse_quantity_any
from kdra.api.wellknown import NVIDIA_GPU_CLASS
from kdra.errors import InputError
from kdra.scheduler.gang import DEFAULT_QUEUE

if TYPE_CHECKING:
    from collections.abc import Callable

Vector = dict[str, float]
INF = math.inf
EPS = 1e-9
KAI_API_GROUP = "scheduling.run.ai"
VOLCANO_API_GROUP = "scheduling.volcano.sh"
DEFAULT_PRIORITY = 100


@dataclass
class QueueSpec:
    name: str
    parent: str | None = None
    priority: int = DEFAULT_PRIORITY
    quota: Vector = field(default_factory=dict)  # missing: 0; INF: unlimited
    weight: Vector = field(default_factory=dict)  # missing: default_weight
    limit: Vector = field(default_factory=dict)  # missing: no limit
    default_weight: float = 1.0
    preempt_min_runtime: float = 0.0
    reclaim_min_runtime: float = 0.0
    created: str = ""

    def quota_of(self, r: str) -> float:
        return self.quota.get(r, 0.0)

    def weight_of(self, r: str) -> float:
        w = self.weight.get(r)
        if w is None and ".deviceclass/" in r:  # a device capacity weighs like its devices
            w = self.weight.get(r.split(".", 1)[1])
        return self.default_weight if w is None else w

    def limit_of(self, r: str) -> float:
        return self.limit.get(r, INF)


def _number(raw: Any, resource: str, where: str) -> float:
    if isinstance(raw, bool):
        raise InputError(f"{where}: Invalid value: {raw!r}: must be a number or a quantity")
    if isinstance(raw, (int, float)):
        v = float(raw)
    else:
        try:
            q = parse_quantity_any(raw)
        except (ValueError, TypeError) as exc:
            raise InputError(f"{where}: Invalid value: {raw!r}: {exc}") from None
        v = q.milli_value() / 1000.0
    if v < 0 and v != -1:
        raise InputError(f"{where}: Invalid value: {raw!r}: must be -1 (unlimited) or not negative")
    return INF if v == -1 else v


def parse_queue(obj: Mapping[str, Any], gpu_class: str = NVIDIA_GPU_CLASS) -> QueueSpec:
    """A Queue (kdra, KAI or Volcano shape) as a QueueSpec; InputError naming the field on bad input."""
    meta = obj.get("metadata") or {}
    name = meta.get("name", "")
    where = f"Queue {name}: spec"
    spec = obj.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise InputError(f"{where}: Invalid value: must be an object")
    group = str(obj.get("apiVersion") or "").split("/", 1)[0]
    q = QueueSpec(name, created=str(meta.get("creationTimestamp") or ""))
    prio = spec.get("priority", DEFAULT_PRIORITY)
    if isinstance(prio, bool) or not isinstance(prio, int):
        raise InputError(f"{where}.priority: Invalid value: {prio!r}: must be an integer")
    q.priority = prio
    for key, attr in (
        ("preemptMinRuntime", "preempt_min_runtime"),
        ("reclaimMinRuntime", "reclaim_min_runtime"),
    ):
        if spec.get(key) is not None:
            setattr(q, attr, parse_duration(spec[key], f"{where}.{key}"))
    if group == VOLCANO_API_GROUP:
        q.parent = spec.get("parent") or None
        if q.parent == "root":
            q.parent = None
        q.default_weight = float(spec.get("weight", 1))
        for src, attr in (("deserved", "quota"), ("capability", "limit")):
            for r, v in (spec.get(src) or {}).items():
                getattr(q, attr)[_volcano_name(r)] = _number(v, r, f"{where}.{src}[{r}]")
        return q
    q.parent = spec.get("parentQueue") or None
    resources = spec.get("resources") or {}
    if not isinstance(resources, Mapping):
        raise InputError(f"{where}.resources: Invalid value: must be an object")
    for r, entry in resources.items():
        if not isinstance(entry, Mapping):
            raise InputError(f"{where}.resources[{r}]: Invalid value: must be an object with quota/limit")
        rname = r
        scale = 1.0
        if group == KAI_API_GROUP:  # KAI units: GPUs, millicores, MB
            rname = {"gpu": f"deviceclass/{gpu_class}", "cpu": "cpu", "memory": "memory"}.get(r, r)
            scale = {"cpu": 0.001, "memory": 1e6}.get(r, 1.0)
        for fld, attr in (("quota", "quota"), ("limit", "limit"), ("overQuotaWeight", "weight")):
            if entry.get(fld) is None:
                continue
            v = _number(entry[fld], rname, f"{where}.resources[{r}].{fld}")
            getattr(q, attr)[rname] = v * scale if v != INF and fld != "overQuotaWeight" else v
        if group == KAI_API_GROUP and q.limit.get(rname) == 0:
            q.limit[rname] = q.quota.get(rname, 0.0)  # KAI: limit 0 = nothing beyond the quota
    return q


def _volcano_name(r: str) -> str:
    return r  # Volcano's DRA keys (deviceclass/<c>, <dim>.deviceclass/<c>) are kdra's names


# -- resources of pods and claims ------------------------------------------------------------------


def add(a: Vector, b: Mapping[str, float], sign: float = 1.0) -> None:
    for k, v in b.items():
        a[k] = a.get(k, 0.0) + sign * v


def fmt(resource: str, v: float) -> str:
    if v == INF:
        return "unlimited"
    if resource == "memory" or resource.startswith("memory."):
        gi = v / 2**30
        return f"{gi:.4g}Gi"
    return f"{v:.4g}"


def request_class(claim: Mapping[str, Any], request: str) -> str:
    """The DeviceClass a result's request (`req` or `req/sub`) asked for."""
    name, _, sub = request.partition("/")
    for req in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
        if req.get("name") != name:
            continue
        if req.get("exactly"):
            return str(req["exactly"].get("deviceClassName", ""))
        for s in req.get("firstAvailable") or []:
            if s.get("name") == sub:
                return str(s.get("deviceClassName", ""))
    return ""


def claim_demand(claim: Mapping[str, Any], dims: Iterable[str] = ("memory",)) -> Vector:
    """What an unallocated claim will take, as far as its spec says (firstAvailable: the first choice)."""
    out: Vector = {}
    for req in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
        sub = req.get("exactly") or (req.get("firstAvailable") or [None])[0]
        if not sub or sub.get("adminAccess"):
            continue
        cls = sub.get("deviceClassName", "")
        n = 1 if sub.get("allocationMode") == "All" else int(sub.get("count") or 1)
        out[f"deviceclass/{cls}"] = out.get(f"deviceclass/{cls}", 0.0) + n
        for dim in dims:
            raw = ((sub.get("capacity") or {}).get("requests") or {}).get(dim)
            if raw is not None:
                k = f"{dim}.deviceclass/{cls}"
                out[k] = out.get(k, 0.0) + n * parse_quantity_any(raw).value()
    return out


def allocation_usage(
    claim: Mapping[str, Any],
    allocation: Mapping[str, Any],
    device_capacity: Callable[[tuple[str, str, str]], Mapping[str, float]],
    dims: Iterable[str] = ("memory",),
) -> Vector:
    """What an allocated claim holds: devices per class and, per capacity dimension, the consumed capacity
    of a share or the whole device's capacity. `device_capacity(key) -> {dim: value}`."""
    out: Vector = {}
    for r in (allocation.get("devices") or {}).get("results") or []:
        if r.get("adminAccess"):
            continue
        cls = request_class(claim, r.get("request", ""))
        out[f"deviceclass/{cls}"] = out.get(f"deviceclass/{cls}", 0.0) + 1
        consumed = r.get("consumedCapacity")
        cap = None
        for dim in dims:
            if consumed is not None and dim in consumed:
                v = float(parse_quantity_any(consumed[dim]).value())
            else:
                if cap is None:
                    cap = device_capacity((r.get("driver", ""), r.get("pool", ""), r.get("device", "")))
                v = float(cap.get(dim, 0))
            if v:
                k = f"{dim}.deviceclass/{cls}"
                out[k] = out.get(k, 0.0) + v
    return out


def pod_core_usage(requests: Mapping[str, int]) -> Vector:
    out: Vector = {}
    if requests.get("cpu"):
        out["cpu"] = requests["cpu"] / 1000.0
    if requests.get("memory"):
        out["memory"] = float(requests["memory"])
    return out


# -- the queue tree and fair share ------------------------------------------------------------------


class QueueTree:
    def __init__(self, specs: Iterable[QueueSpec] = ()) -> None:
        self.specs: dict[str, QueueSpec] = {}
        for s in specs:
            self.specs[s.name] = s
        if DEFAULT_QUEUE not in self.specs:
            self.specs[DEFAULT_QUEUE] = QueueSpec(DEFAULT_QUEUE)
        # Resources some queue sets a quota, limit or weight for: the only ones fair share divides and
        # quota checks look at (none set: every DeviceClass's device count).
        self.governed = frozenset(r for sp in self.specs.values() for r in (*sp.quota, *sp.limit, *sp.weight))

    def governs(self, r: str) -> bool:
        return r in self.governed if self.governed else r.startswith("deviceclass/")

    def view(self, v: Mapping[str, float]) -> Vector:
        return {r: x for r, x in v.items() if self.governs(r)}

    def children(self, parent: str | None) -> list[QueueSpec]:
        return sorted(
            (s for s in self.specs.values() if (s.parent if s.parent in self.specs else None) == parent),
            key=lambda s: s.name,
        )

    def is_leaf(self, name: str) -> bool:
        return not any(s.parent == name for s in self.specs.values())

    def ancestors(self, name: str) -> list[str]:
        """The queue itself and its ancestors, leaf first."""
        out = []
        seen = set()
        cur: str | None = name
        while cur is not None and cur in self.specs and cur not in seen:
            out.append(cur)
            seen.add(cur)
            cur = self.specs[cur].parent
        return out

    def leaf_or_default(self, name: str | None) -> str:
        if name and name in self.specs:
            return name
        return DEFAULT_QUEUE

    def fair_share(self, total: Mapping[str, float], requested: Mapping[str, Vector]) -> dict[str, Vector]:
        """Per queue (leaves and parents), per resource: KAI's deserved-then-weighted division."""
        req: dict[str, Vector] = {}
        for leaf, v in requested.items():
            for q in self.ancestors(leaf):
                add(req.setdefault(q, {}), v)
        resources = sorted(r for r in set(total) | {r for v in req.values() for r in v} if self.governs(r))
        out: dict[str, Vector] = {q: {} for q in self.specs}
        for r in resources:
            self._divide(r, None, total.get(r, 0.0), req, out)
        return out

    def _divide(
        self, r: str, parent: str | None, amount: float, req: Mapping[str, Vector], out: dict[str, Vector]
    ) -> None:
        kids = self.children(parent)
        if not kids:
            return
        want = {k.name: min(req.get(k.name, {}).get(r, 0.0), k.limit_of(r)) for k in kids}
        share = divide(
            amount,
            [(k.name, k.quota_of(r), k.weight_of(r), want[k.name], k.priority) for k in kids],
        )
        for k in kids:
            out[k.name][r] = share[k.name]
            self._divide(r, k.name, share[k.name], req, out)


def divide(amount: float, queues: list[tuple[str, float, float, float, int]]) -> dict[str, float]:
    """Split `amount` among (name, quota, weight, want, priority): quota first (scaled down if the quotas
    exceed the amount), then the rest by weight within priority tiers, highest first, never past want."""
    fs = {n: min(quota, want) for n, quota, _w, want, _p in queues}
    total = sum(fs.values())
    if total > amount + EPS and total > 0:
        scale = amount / total
        fs = {n: v * scale for n, v in fs.items()}
        return fs
    remaining = amount - total
    for prio in sorted({p for *_x, p in queues}, reverse=True):
        tier = [(n, w, want) for n, _q, w, want, p in queues if p == prio]
        for _ in range(64):
            open_ = [(n, w, want) for n, w, want in tier if fs[n] < want - EPS and w > 0]
            if not open_ or remaining <= EPS:
                break
            wsum = sum(w for _n, w, _want in open_)
            given = 0.0
            for n, w, want in open_:
                g = min(remaining * w / wsum, want - fs[n])
                fs[n] += g
                given += g
            remaining -= given
            if given <= EPS:
                break
    return fs


def dominant_share(allocated: Mapping[str, float], fair: Mapping[str, float]) -> float:
    """max over the divided resources of allocated / fair share (DRF); held without a share counts as INF."""
    best = 0.0
    for r, a in allocated.items():
        if a <= EPS or r not in fair:
            continue
        f = fair[r]
        best = max(best, INF if f <= EPS else a / f)
    return best


@dataclass
class LimitVerdict:
    ok: bool
    queue: str = ""
    resource: str = ""
    have: float = 0.0
    need: float = 0.0
    bound: float = 0.0
    kind: str = "limit"

    def __str__(self) -> str:
        if self.ok:
            return "within limits"
        r = self.resource
        return (
            f"queue {self.queue} would exceed its {self.kind} on {r} "
            f"({fmt(r, self.have)} + {fmt(r, self.need)} > {fmt(r, self.bound)})"
        )


def check_limits(
    tree: QueueTree, queue: str, allocated: Mapping[str, Vector], need: Mapping[str, float]
) -> LimitVerdict:
    for q in tree.ancestors(queue):
        spec = tree.specs[q]
        have = allocated.get(q, {})
        for r, v in sorted(need.items()):
            lim = spec.limit_of(r)
            if v > EPS and have.get(r, 0.0) + v > lim + EPS:
                return LimitVerdict(False, q, r, have.get(r, 0.0), v, lim)
    return LimitVerdict(True)


def check_deserved(
    tree: QueueTree, queue: str, allocated: Mapping[str, Vector], need: Mapping[str, float]
) -> LimitVerdict:
    """Non-preemptible jobs only use deserved quota (KAI)."""
    spec = tree.specs[queue]
    have = allocated.get(queue, {})
    for r, v in sorted(tree.view(need).items()):
        quota = spec.quota_of(r)
        if v > EPS and have.get(r, 0.0) + v > quota + EPS:
            return LimitVerdict(False, queue, r, have.get(r, 0.0), v, quota, kind="deserved quota")
    return LimitVerdict(True)


def queue_order_key(
    tree: QueueTree,
    queue: str,
    allocated: Mapping[str, float],
    fair: Mapping[str, float],
    need: Mapping[str, float],
) -> SortKey:
    """KAI's queue order, smallest first: under fair share, under deserved with the job, priority, DRF."""
    spec = tree.specs[queue]
    share = dominant_share(allocated, fair)
    under_fair = share < 1.0 - EPS
    under_deserved = all(
        allocated.get(r, 0.0) + v <= spec.quota_of(r) + EPS for r, v in tree.view(need).items() if v > EPS
    )
    return (not under_fair, not under_deserved, -spec.priority, share, spec.created, spec.name)
