"""Fragmentation: one model of free accelerator capacity, for trace replay, simulation and Kubernetes mode.

FGD (Fragmentation Gradient Descent; Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing
Workloads with Fragmentation Gradient Descent", USENIX ATC '23) measures a node's fragmentation for a
target workload as the free accelerator capacity a task drawn from that workload could not use. This
module has that measure once (`unusable`) and the three views it is applied to:

- **DRA units** (`UnitTable`, `DeviceUnits`): a node's accelerators as kdra's allocator sees them. A unit
  is a physical device: a GPU whose MIG placements share a counter set (DynamicMIG:
  `gpu-<n>-counter-set`) is one unit whatever is carved out of it, as are static partitions with the same
  `parentUUID` attribute; a device with allowMultipleAllocations (consumable capacity) is a unit its shares
  split; any other device is a unit of its own. Units carry their placement table (the partitions of a
  counter set by profile) and their locality (PCIe root, NUMA node, NVLink domain). The node score
  plugins below and the allocator's device preferences (kdra.scheduler.devicepref) use them.
- **GPU node views** (`GpuNodeView`, `PodRequest`, `FragMeasure`, `CapacityFragMeasure`): free CPU,
  memory and milli-GPU per GPU of a node, the fast path the replay (kdra.replay) scores 1,213 nodes with.
- **The fleet** (`cluster_fragmentation`): the figures simulation reports.

On top of the measure sit the placement policies: the FGD paper's simulator policies plus kdra's own for
the replay (`make_policy`), and node score plugins for kdra's scheduler (`placement_plugins`:
`fragmentation`, `binpack`, `spread`; `DeviceLocality`; `FragmentationScore` wraps a replay policy).
Upstream's behaviour (first node by the NodeResourcesFit score, first fitting devices) stays the default:
all of these are opt-in.

The simulator policies (hkust-adsl/kubernetes-scheduler-simulator, pkg/simulator/plugin and
pkg/utils/frag.go):

- `random`: a uniformly random feasible node; a random GPU that fits.
- `dot-product`: Tetris alignment, 100 * (1 - <free, request> / 2), CPU and GPU scaled by 128 cores and
  8 GPUs (dimExtMethod=merge, normMethod=max); best-fit GPU.
- `best-fit`: 100 * (1 - sum_r 0.5 * (free_r - request_r) / max_r) over CPU and GPU; best-fit GPU.
- `packing`: shared GPUs first, then free GPUs of used nodes, then free nodes (score tiers); best-fit GPU.
- `clustering`: nodes already running pods of the same GPU shape first, fuller first; best-fit GPU.
- `fgd`: int(sigmoid((frag_before - frag_after) / 1000) * 100); the GPU minimising frag.
- `kdra`: FGD's gradient, with CPU and memory counted as capacity (CapacityFragMeasure; the node score
  where CPU binds, FGD's tie-break elsewhere), shares placed by the workload's own share plan
  (kdra.scheduler.shareplan), and the hosts of rare shapes kept while the workload will need them
  (KdraPolicy).
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from kdra.api.quantity import parse_quantity_any
from kdra.scheduler.framework import CycleState, ScorePlugin
from kdra.scheduler.shareplan import SharePlan
from kdra.scheduler.workload import WorkloadModel

if TYPE_CHECKING:
    from kdra.allocator.allocator import AllocatedState
    from kdra.allocator.index import AllocatorIndex, AttributeScalar, DeviceEntry
    from kdra.scheduler.devicepref import MeasuredPreference
    from kdra.scheduler.dra import DraState
    from kdra.scheduler.podinfo import NodeInfo, PodInfo
    from kdra.scheduler.session import Session

EPS = 1e-9

# -- FGD's measure ---------------------------------------------------------------------------------


def unusable(frees: Sequence[float], fits: Sequence[bool], count: int = 1) -> float:
    """FGD for one task shape: the free capacity of the units it cannot use. `fits[i]`: one member of
    the shape fits unit i. A shape of one unit (a fraction, a partition, one device) cannot use the units
    it does not fit; a shape of `count` units cannot use anything when fewer than `count` units fit, else
    the units it does not fit."""
    if count > 1 and sum(1 for ok in fits if ok) < count:
        return sum(frees)
    return sum(f for f, ok in zip(frees, fits, strict=True) if not ok)


def shape_fragment(frees: Iterable[float], d: float) -> float:
    """FGD over unit free fractions for a task of shape d (d < 1: a fraction of one unit; d >= 1: d
    whole units)."""
    fr = list(frees)
    if d < 1.0 - EPS:
        return unusable(fr, [f >= d - EPS for f in fr])
    return unusable(fr, [f >= 1.0 - EPS for f in fr], round(d))


def node_fragmentation(frees: Iterable[float], shapes: Mapping[float, float]) -> float:
    """The popularity-weighted FGD fragmentation of a node over shapes (units -> popularity)."""
    fr = list(frees)
    total = sum(shapes.values())
    if total <= 0:
        return 0.0
    return sum(p * shape_fragment(fr, d) for d, p in shapes.items()) / total


# -- DRA units -------------------------------------------------------------------------------------

# What a fragmentation measure is memoised by: the GPU model, the free CPU and memory buckets, the GPUs.
MeasureKey = tuple[str, int, int, tuple[int, ...]]
UnitKey = tuple[str, str, str]  # (driver, pool, counter set | "parent:<uuid>" | device name)
DeviceKey = tuple[str, str, str]
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
NUMA_NODE = "resource.kubernetes.io/numaNode"
NVLINK_DOMAIN = "kdra.dev/nvlinkDomain"
LOCALITY_ATTRIBUTES = (PCIE_ROOT, NUMA_NODE, NVLINK_DOMAIN)
WHOLE = "whole"  # the kind of a device that is its own unit


def device_kind(dev: DeviceEntry) -> str:
    """The shape a device offers: its `profile` attribute (MIG: 1g.10gb), else its `type` (gpu), else
    its capacity (devices with equal capacity are interchangeable shapes)."""
    for attr in ("profile", "type"):
        v = (dev.attributes.get(attr) or {}).get("string")
        if v:
            return str(v)
    return "capacity:" + ",".join(f"{n}={c.value}" for n, c in sorted(dev.capacity.items()))


def attr_value(dev: DeviceEntry, name: str) -> AttributeScalar | None:
    """A device attribute's plain value (string, int, bool or version), or None."""
    raw = dev.attribute(name)
    if not isinstance(raw, Mapping):
        return None
    for kind in ("string", "int", "bool", "version"):
        if raw.get(kind) is not None:
            return cast("AttributeScalar", raw[kind])
    return None


def _main_capacity(dev: DeviceEntry) -> str | None:
    if "memory" in dev.capacity:
        return "memory"
    return next(iter(sorted(dev.capacity)), None)


@dataclass(eq=False)
class Unit:
    """One physical accelerator of a node."""

    key: UnitKey
    devices: list[DeviceEntry] = field(default_factory=list)
    counters: dict[str, int] | None = None  # its counter set's totals (partitionable)
    shared: bool = False  # one device with allowMultipleAllocations
    locality: dict[str, Any] = field(default_factory=dict)  # LOCALITY_ATTRIBUTES -> value
    # Partitionable: kind -> its placements as (device, [(counter index, amount)]) in slice order, and
    # the counter names in a fixed order (remaining counters are tuples in that order).
    placements: dict[str, list[tuple[DeviceEntry, tuple[tuple[int, int], ...]]]] = field(default_factory=dict)
    counter_names: tuple[str, ...] = ()
    signature: Hashable = None  # equal for units of the same structure (their placeable counts agree)

    def remaining(self, left: Mapping[str, int]) -> tuple[int, ...]:
        return tuple(left.get(c, 0) for c in self.counter_names)

    def placeable(self, kind: str, left: tuple[int, ...], first_only: bool = False) -> int:
        """How many placements of `kind` fit at once in the counters left (greedy in slice order)."""
        cur = list(left)
        n = 0
        for _dev, use in self.placements.get(kind, ()):
            if all(cur[i] >= amount for i, amount in use):
                n += 1
                if first_only:
                    return n
                for i, amount in use:
                    cur[i] -= amount
        return n


class UnitTable:
    """The units of one node's devices, and per device: its unit and the fraction of it the device holds
    (a whole device all of its unit; a partition its share of the counter set's `memory` counter, or of
    its first counter; a static partition its memory over the sum of its siblings')."""

    def __init__(
        self, devices: Iterable[DeviceEntry], counter_sets: Mapping[tuple[str, str, str], Mapping[str, int]]
    ) -> None:
        self.units: list[Unit] = []
        self.of: dict[DeviceKey, tuple[int, float, float]] = {}  # device -> (unit index, fraction, memory)
        by_key: dict[UnitKey, int] = {}
        parent_mem: dict[int, float] = {}
        for d in devices:
            mem = d.capacity.get("memory")
            memcap = float(mem.value.value()) if mem is not None else 0.0
            parent = (d.attributes.get("parentUUID") or {}).get("string")
            counters: Mapping[str, int] | None = None
            if d.consumes:
                cs, used = d.consumes[0]
                key: UnitKey = (d.driver, d.pool, cs)
                counters = counter_sets.get(key, {})
                usedd = dict(used)
                cname = "memory" if "memory" in usedd and counters.get("memory") else None
                if cname is None:
                    cname = next((c for c, _v in used if counters.get(c)), None)
                frac = min(1.0, usedd[cname] / counters[cname]) if cname else 1.0
            elif parent:
                key = (d.driver, d.pool, f"parent:{parent}")
                frac = memcap  # over the parent's memory, once all its partitions are known
            else:
                key = (d.driver, d.pool, d.name)
                frac = 1.0
            ui = by_key.get(key)
            if ui is None:
                ui = by_key[key] = len(self.units)
                unit = Unit(key, counters=dict(counters) if counters is not None else None)
                unit.shared = bool(d.allow_multi and not d.consumes and not parent)
                if counters is not None:
                    unit.counter_names = tuple(sorted(counters))
                self.units.append(unit)
            unit = self.units[ui]
            unit.devices.append(d)
            for attr in LOCALITY_ATTRIBUTES:
                if attr not in unit.locality:
                    v = attr_value(d, attr)
                    if v is not None:
                        unit.locality[attr] = v
            if parent and not d.consumes:
                parent_mem[ui] = parent_mem.get(ui, 0.0) + memcap
            self.of[d.key] = (ui, frac, memcap)
        for dkey, (ui, frac, memcap) in self.of.items():
            psum = parent_mem.get(ui)
            if psum is not None:
                self.of[dkey] = (ui, min(1.0, frac / psum) if psum else 1.0, memcap)
        for unit in self.units:
            if unit.counters is not None:
                index = {c: i for i, c in enumerate(unit.counter_names)}
                for d in unit.devices:
                    use = tuple(
                        (index[c], amount)
                        for set_name, cs in d.consumes
                        if set_name == unit.key[2]
                        for c, amount in cs
                        if amount and c in index
                    )
                    unit.placements.setdefault(device_kind(d), []).append((d, use))
                unit.signature = (
                    tuple(unit.counters[c] for c in unit.counter_names),
                    tuple((k, tuple(u for _d, u in pl)) for k, pl in sorted(unit.placements.items())),
                )

    def unit_of(self, dev: DeviceEntry) -> tuple[int, float, float] | None:
        return self.of.get(dev.key)

    def kinds(self) -> list[str]:
        """Every shape a unit of this node offers: partition profiles, and `whole` for units that are
        devices (a whole GPU of a partitionable unit is its own kind, e.g. `gpu`)."""
        out: dict[str, None] = {}
        for u in self.units:
            if u.counters is not None:
                out.update(dict.fromkeys(u.placements))
            elif u.key[2].startswith("parent:"):
                out.update(dict.fromkeys(device_kind(d) for d in u.devices))
            else:
                out[WHOLE] = None
        return list(out)

    def groups(self, attribute: str) -> dict[AttributeScalar, list[int]]:
        """Units by their value of a locality attribute (units without it are left out)."""
        out: dict[AttributeScalar, list[int]] = {}
        for i, u in enumerate(self.units):
            v = u.locality.get(attribute)
            if v is not None:
                out.setdefault(v, []).append(i)
        return out


class DeviceUnits:
    """Per node of an AllocatorIndex: its UnitTable; `free(node, dra)` under the scheduler's state."""

    def __init__(self, index: AllocatorIndex) -> None:
        sets: dict[tuple[str, str, str], dict[str, int]] = {}
        pool_node: dict[tuple[str, str], str] = {}
        for s in index.slices:
            for name, counters in s.shared_counters:
                sets[(s.driver, s.pool, name)] = counters
            if s.node_name:
                pool_node[(s.driver, s.pool)] = s.node_name
        per_node: dict[str, list[DeviceEntry]] = {}
        for s in index.slices:
            node = s.node_name or pool_node.get((s.driver, s.pool), "")
            if node:
                per_node.setdefault(node, []).extend(s.devices)
        self.tables: dict[str, UnitTable] = {n: UnitTable(devs, sets) for n, devs in per_node.items()}

    @property
    def node_units(self) -> dict[str, list[UnitKey]]:
        return {n: [u.key for u in t.units] for n, t in self.tables.items()}

    def free(self, node: str, dra: DraState) -> dict[UnitKey, float]:
        """Free fraction per unit of `node` under the scheduler's allocated (and assumed) state."""
        table = self.tables.get(node)
        if table is None or not table.units:
            return {}
        return dict(zip((u.key for u in table.units), unit_frees(table, dra.state), strict=True))

    def result_use(self, node: str, result: Mapping[str, Any]) -> tuple[UnitKey, float] | None:
        """The unit an allocation result takes from and how much of it."""
        table = self.tables.get(node)
        if table is None:
            return None
        key = (result.get("driver", ""), result.get("pool", ""), result.get("device", ""))
        hit = table.of.get(key)
        if hit is None:
            return None
        ui, frac, memcap = hit
        consumed = result.get("consumedCapacity")
        if result.get("shareID") is not None and consumed is not None and memcap:
            mem = consumed.get("memory")
            if mem is not None:
                return table.units[ui].key, min(1.0, parse_quantity_any(mem).value() / memcap)
        return table.units[ui].key, frac


def unit_frees(table: UnitTable, state: AllocatedState) -> list[float]:
    """Free fraction per unit of a table under an AllocatedState (exclusive devices and shares)."""
    free = [1.0] * len(table.units)
    of = table.of
    for key in state.dedicated:
        hit = of.get(key)
        if hit is not None:
            free[hit[0]] -= hit[1]
    for key, consumed in state.consumed.items():
        hit = of.get(key)
        if hit is not None and hit[2]:
            free[hit[0]] -= consumed.get("memory", 0) / 1e9 / hit[2]
    return [max(0.0, min(1.0, f)) for f in free]


# -- GPU node views (the replay's fast path) -------------------------------------------------------

MILLI = 1000  # milli-GPU per GPU
MAX_SPEC_CPU = 128_000  # the simulator's normalisation constants (utils.MaxSpecCpu / MaxSpecGpu)
MAX_SPEC_GPU = 8_000
MAX_NODE_SCORE = 100

POLICIES = ("random", "dot-product", "best-fit", "packing", "clustering", "fgd", "kdra")
# Published unallocated GPU % at 100% arrived workload, default openb trace, mean of 10 seeds
# (shared/reference/peers.md section 5.1, from the artifact's analysis_allo_discrete.csv).
PUBLISHED_UNALLOCATED_AT_100: dict[str, float] = {
    "random": 13.70,
    "dot-product": 9.38,
    "best-fit": 7.14,
    "packing": 8.22,
    "clustering": 8.35,
    "fgd": 4.77,
}


@dataclass(frozen=True, slots=True)
class PodRequest:
    """What a pod asks for: CPU in millicores, memory in MiB, GPUs and the share of each (per GPU)."""

    cpu: int
    mem: int
    num_gpu: int = 0
    gpu_milli: int = 0  # per GPU; < 1000 only with num_gpu == 1 (a share)
    models: tuple[str, ...] = ()  # acceptable GPU models (trace codes); () = any

    @property
    def is_share(self) -> bool:
        return self.num_gpu == 1 and 0 < self.gpu_milli < MILLI

    @property
    def total_milli(self) -> int:
        return self.num_gpu * self.gpu_milli

    @property
    def affinity(self) -> str:
        """The simulator's GPU affinity tag (GetGpuAffinityFromPodAnnotation)."""
        if self.num_gpu == 0:
            return ""
        if self.is_share:
            return "share"
        return f"{self.num_gpu}-gpu"


@dataclass(slots=True)
class GpuNodeView:
    """A node's free resources, kept up to date by the caller."""

    name: str
    model: str  # the GPU model (trace code) of all GPUs on the node; "" without GPUs
    cpu_cap: int
    mem_cap: int
    cpu_free: int
    mem_free: int
    gpu_free: list[int]  # milli-GPU free per GPU, in device index order
    pods: int = 0
    max_pods: int = 110
    affinity: dict[str, int] = field(default_factory=dict)  # GPU affinity tag -> pods on the node
    version: int = 0  # bumped by place/remove (callers that edit fields directly bump it too)

    @property
    def gpu_count(self) -> int:
        return len(self.gpu_free)

    def gpu_free_total(self) -> int:
        return sum(self.gpu_free)

    def accessible(self, pod: PodRequest) -> bool:
        return not pod.models or self.model in pod.models

    def fits(self, pod: PodRequest) -> bool:
        if self.pods >= self.max_pods or pod.cpu > self.cpu_free or pod.mem > self.mem_free:
            return False
        if pod.num_gpu == 0:
            return True
        if not self.accessible(pod):
            return False
        need = pod.num_gpu
        m = pod.gpu_milli
        for f in self.gpu_free:
            if f >= m:
                need -= 1
                if need == 0:
                    return True
        return False

    def place(self, pod: PodRequest, gpus: Sequence[int]) -> None:
        self.version += 1
        self.cpu_free -= pod.cpu
        self.mem_free -= pod.mem
        self.pods += 1
        for i in gpus:
            self.gpu_free[i] -= pod.gpu_milli
        if pod.num_gpu:
            tag = pod.affinity
            self.affinity[tag] = self.affinity.get(tag, 0) + 1

    def remove(self, pod: PodRequest, gpus: Sequence[int]) -> None:
        self.version += 1
        self.cpu_free += pod.cpu
        self.mem_free += pod.mem
        self.pods -= 1
        for i in gpus:
            self.gpu_free[i] += pod.gpu_milli
        if pod.num_gpu:
            tag = pod.affinity
            n = self.affinity.get(tag, 0) - 1
            if n > 0:
                self.affinity[tag] = n
            else:
                self.affinity.pop(tag, None)


# -- GPU choice inside a node ---------------------------------------------------------------------


def exclusive_gpus(view: GpuNodeView, pod: PodRequest) -> tuple[int, ...]:
    """The first `num_gpu` fully free GPUs by index (the simulator's AllocateExclusiveGpuId)."""
    out: list[int] = []
    for i, f in enumerate(view.gpu_free):
        if f == MILLI:
            out.append(i)
            if len(out) == pod.num_gpu:
                break
    return tuple(out)


def best_fit_gpus(view: GpuNodeView, pod: PodRequest) -> tuple[int, ...]:
    """A share goes to the GPU with the least free capacity that still fits (first index on ties);
    whole GPUs are the first fully free ones (allocateGpuIdBasedOnBestFit)."""
    if pod.num_gpu == 0:
        return ()
    if not pod.is_share:
        return exclusive_gpus(view, pod)
    best = -1
    m = pod.gpu_milli
    for i, f in enumerate(view.gpu_free):
        if f >= m and (best < 0 or f < view.gpu_free[best]):
            best = i
    return (best,) if best >= 0 else ()


# -- typical pods and the fragmentation measure ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class TypicalPod:
    cpu: int
    gpu_milli: int
    num_gpu: int
    models: tuple[str, ...]
    freq: float
    mem: int = 0


def typical_pods(
    pods: Iterable[PodRequest],
    threshold: float = 0.95,
    include_cpu_pods: bool = True,
    with_memory: bool = False,
) -> list[TypicalPod]:
    """The most frequent pod shapes covering `threshold` of all pods, frequencies renormalised
    (utils.GetTypicalPods with isInvolvedCpuPods=true, podPopularityThreshold=95, podIncreaseStep=1).

    Shapes are (cpu, gpu milli, GPU count, models); memory is not part of the simulator's shape and is
    only added for kdra's memory-aware measure (`with_memory`)."""
    return weighted_typical_pods(((p, 1.0) for p in pods), threshold, include_cpu_pods, with_memory)


def weighted_typical_pods(
    pods: Iterable[tuple[PodRequest, float]],
    threshold: float = 0.95,
    include_cpu_pods: bool = True,
    with_memory: bool = False,
) -> list[TypicalPod]:
    """`typical_pods` over pods with weights (a WorkloadModel's histogram)."""
    counts: dict[tuple[Any, ...], float] = {}
    total = 0.0
    for p, w in pods:
        if not include_cpu_pods and p.num_gpu == 0:
            continue
        key: tuple[Any, ...] = (p.cpu, p.gpu_milli, p.num_gpu, "|".join(p.models))
        if with_memory:
            key += (p.mem,)
        counts[key] = counts.get(key, 0.0) + w
        total += w
    if total <= 0:
        return []
    # Decreasing count; equal counts in decreasing (cpu, milli, count, models) as sort.Reverse does.
    ordered = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    chosen: list[tuple[tuple[Any, ...], float]] = []
    cum = 0.0
    for k, n in ordered:
        if cum >= threshold * total:
            break
        chosen.append((k, n))
        cum += n
    out = []
    for k, n in chosen:
        models = tuple(str(k[3]).split("|")) if k[3] else ()
        out.append(TypicalPod(k[0], k[1], k[2], models, n / cum, k[4] if with_memory else 0))
    return out


def _prefix_sums(values: Sequence[int]) -> list[int]:
    out = [0]
    for v in values:
        out.append(out[-1] + v)
    return out


class FragMeasure:
    """frag(node): expected idle milli-GPUs a typical pod cannot use (NodeGpuShareFragAmountScore).

    Memoised by (model, CPU bucket, memory bucket, sorted free GPUs): the measure only depends on which
    typical pods' CPU (and memory) demands the node meets, so many node states share one value."""

    def __init__(self, typical: Sequence[TypicalPod], use_memory: bool = False) -> None:
        self.typical = list(typical)
        self.use_memory = use_memory
        self.cpu_points = sorted({t.cpu for t in self.typical})
        self.mem_points = sorted({t.mem for t in self.typical}) if use_memory else []
        self._memo: dict[tuple[Any, ...], float] = {}
        self.cpu_only = sum(t.freq for t in self.typical if t.gpu_milli == 0)
        self.gpu_types = [t for t in self.typical if t.gpu_milli > 0]

    def key(self, model: str, cpu_free: int, mem_free: int, gpus: Sequence[int]) -> MeasureKey:
        cb = bisect.bisect_right(self.cpu_points, cpu_free)
        mb = bisect.bisect_right(self.mem_points, mem_free) if self.use_memory else 0
        return (model, cb, mb, tuple(sorted(gpus)))

    def of(self, model: str, cpu_free: int, mem_free: int, gpus: Sequence[int]) -> float:
        k = self.key(model, cpu_free, mem_free, gpus)
        v = self._memo.get(k)
        if v is None:
            if len(self._memo) > 500_000:
                self._memo.clear()
            v = self._memo[k] = self.compute(model, cpu_free, mem_free, k[3])
        return v

    def compute(self, model: str, cpu_free: int, mem_free: int, gpus: tuple[int, ...]) -> float:
        total = sum(gpus)
        if total == 0:
            return 0.0
        frag = self.cpu_only * total  # CPU-only typical pods: every idle GPU is "fragment" to them (XL/XR)
        use_mem = self.use_memory
        # `gpus` is sorted (`key`): the GPUs a size fits are a suffix, so what it cannot use (`unusable`)
        # is a prefix sum, found by bisection (workloads with many share sizes have many typical pods).
        below = _prefix_sums(gpus)
        n = len(gpus)
        for t in self.gpu_types:
            if (t.models and model not in t.models) or t.cpu > cpu_free or (use_mem and t.mem > mem_free):
                frag += t.freq * total  # no access, or lacks CPU (memory): all idle GPU is fragment
                continue
            i = bisect.bisect_left(gpus, t.gpu_milli)
            frag += t.freq * (total if t.num_gpu > 1 and n - i < t.num_gpu else below[i])
        return frag

    def node(self, view: GpuNodeView) -> float:
        return self.of(view.model, view.cpu_free, view.mem_free, view.gpu_free)


def sigmoid(x: float) -> float:
    if x < -700:
        return 0.0
    return 1.0 / (1.0 + math.exp(-x))


# -- policies -------------------------------------------------------------------------------------


class Policy:
    """Scores one node for one pod (higher wins; ties are broken uniformly at random by the caller) and
    picks the GPUs inside the chosen node."""

    name = "policy"
    random_gpu = False  # True: the GPU choice is random (made at bind time, not cached)

    def prepare(self, workload: Sequence[PodRequest]) -> None:
        """Called once with the workload (the un-inflated pod list) before placing anything (offline)."""

    def learn(self, pod: PodRequest) -> None:
        """Called with each pod as it arrives, before it is placed, instead of `prepare` (online): a policy
        that reads the workload learns it from the pods seen (kdra.scheduler.workload)."""

    def prepare_fleet(self, views: Sequence[GpuNodeView]) -> None:
        """Called once with the empty fleet (live views: the caller updates them) before placing anything."""

    def epoch(self) -> Hashable:
        """Fleet-wide state the scores depend on besides the node itself; when it changes, callers that
        cache scores per node must re-score the nodes of `epoch_scope`."""
        return None

    def epoch_scope(self, since: Hashable) -> frozenset[int] | None:
        """The nodes (indexes into the views given to `prepare_fleet`) whose scores may differ between
        epoch `since` and now; None: every node."""
        return None

    def score(self, view: GpuNodeView, pod: PodRequest) -> tuple[float, tuple[int, ...]]:
        raise NotImplementedError

    def choose_random(self, view: GpuNodeView, pod: PodRequest, rng: random.Random) -> tuple[int, ...]:
        return best_fit_gpus(view, pod)

    def device_keys(self, view: GpuNodeView, pod: PodRequest, gpus: Sequence[int]) -> list[tuple[float, int]]:
        """A sort key per GPU of the node (lower first) for the allocator's device-preference hook, such
        that the allocator's first choice is `gpus`, the GPUs this policy chose: by default those first,
        in order, then the rest by index. Policies that rank GPUs by a measure rank by it instead."""
        rank = {g: k for k, g in enumerate(gpus)}
        return [(0, rank[i]) if i in rank else (1, i) for i in range(len(view.gpu_free))]


class RandomPolicy(Policy):
    """RandomScore + gpuSelMethod=random."""

    name = "random"
    random_gpu = True

    def score(self, view: GpuNodeView, pod: PodRequest) -> tuple[float, tuple[int, ...]]:
        return 0.0, ()

    def choose_random(self, view: GpuNodeView, pod: PodRequest, rng: random.Random) -> tuple[int, ...]:
        if not pod.is_share:
            return exclusive_gpus(view, pod) if pod.num_gpu else ()
        fits = [i for i, f in enumerate(view.gpu_free) if f >= pod.gpu_milli]
        return (rng.choice(fits),) if fits else ()


class DotProductPolicy(Policy):
    """DotProductScore with dimExtMethod=merge, normMethod=max (Tetris alignment; lower product wins)."""

    name = "dot-product"

    def score(self, view: GpuNodeView, pod: PodRequest) -> tuple[float, tuple[int, ...]]:
        dot = (view.cpu_free / MAX_SPEC_CPU) * (pod.cpu / MAX_SPEC_CPU) + (
            view.gpu_free_total() / MAX_SPEC_GPU
        ) * (pod.total_milli / MAX_SPEC_GPU)
        return float(int(MAX_NODE_SCORE * (1 - dot / 2))), best_fit_gpus(view, pod)


class BestFitPolicy(Policy):
    """BestFitScore: least leftover CPU and GPU (weights 0.5 each) after placing the pod."""

    name = "best-fit"

    def score(self, view: GpuNodeView, pod: PodRequest) -> tuple[float, tuple[int, ...]]:
        left = (
            0.5 * (view.cpu_free - pod.cpu) / MAX_SPEC_CPU
            + 0.5 * (view.gpu_free_total() - pod.total_milli) / MAX_SPEC_GPU
        )
        return float(int((1.0 - left) * MAX_NODE_SCORE)), best_fit_gpus(view, pod)


class PackingPolicy(Policy):
    """GpuPackingScore: shared GPUs first, then free GPUs of used nodes, then free nodes."""

    name = "packing"

    def score(self, view: GpuNodeView, pod: PodRequest) -> tuple[float, tuple[int, ...]]:
        gpus = best_fit_gpus(view, pod)
        if pod.total_milli <= 0:
            return 0.0, gpus
        free = view.gpu_free
        fully_free = sum(1 for f in free if f == MILLI)
        if fully_free == len(free):
            return float(max(MAX_NODE_SCORE // 3 - fully_free, fully_free)), gpus
        order = sorted(range(len(free)), key=lambda i: free[i])  # stable: index order on ties
        need = pod.num_gpu
        use: list[int] = []
        ff_use = 0
        for i in order:
            if need == 0:
                break
            if pod.gpu_milli <= free[i]:
                need -= 1
                use.append(i)
                if free[i] == MILLI:
                    ff_use += 1
        if ff_use > 0:
            return float(max(MAX_NODE_SCORE // 2 - ff_use, MAX_NODE_SCORE // 3)), gpus
        ratio = sum(free[i] * 100 // MILLI for i in use)
        return float(max(MAX_NODE_SCORE - ratio // 10, MAX_NODE_SCORE // 2)), gpus


class ClusteringPolicy(Policy):
    """GpuClusteringScore: pods of one GPU shape (share, 1-gpu, 2-gpu...) together, fuller nodes first."""

    name = "clustering"

    def score(self, view: GpuNodeView, pod: PodRequest) -> tuple[float, tuple[int, ...]]:
        gpus = best_fit_gpus(view, pod)
        tag = pod.affinity
        if not tag:
            return 0.0, gpus
        base = (MAX_NODE_SCORE // 4) * (MAX_SPEC_GPU - view.gpu_free_total()) // MAX_SPEC_GPU
        aff = view.affinity
        if aff.get(tag, 0) > 0:
            return float(base + (MAX_NODE_SCORE * 3 // 4 if len(aff) == 1 else MAX_NODE_SCORE * 2 // 4)), gpus
        return float(base + (MAX_NODE_SCORE // 4 if not aff else 0)), gpus


class FGDPolicy(Policy):
    """FGDScore: the node (and GPU) whose fragmentation grows least; the score is
    int(sigmoid((frag_before - frag_after) / 1000) * 100) as in the simulator; GPU ties go to the lowest
    index."""

    name = "fgd"
    use_memory = False
    exact = False

    def __init__(self, typical: Sequence[TypicalPod] | None = None) -> None:
        self.measure = FragMeasure(typical or [], use_memory=self.use_memory)
        self.fixed = typical is not None  # typical pods given: not read from the workload
        self.model = WorkloadModel()
        self.learned = 0  # pods seen when the policy last read the model (its epoch)
        self._learn_at = 1
        self._fleet_milli = 0

    def prepare(self, workload: Sequence[PodRequest]) -> None:
        self.model.observe_all(workload)
        self._relearn()

    def learn(self, pod: PodRequest) -> None:
        self.model.observe(pod)
        if self.model.seen >= self._learn_at:
            if self._fleet_milli:
                # A pod weighs half after as many pods as the fleet holds when its GPUs are full.
                milli = sum(p.total_milli * w for p, w in self.model.items()) / max(1e-9, self.model.total())
                self.model.set_half_life(self._fleet_milli / milli if milli > 0 else None)
            self._relearn()
            self._learn_at = self.model.learn_points(self.model.seen)

    def prepare_fleet(self, views: Sequence[GpuNodeView]) -> None:
        self._fleet_milli = sum(len(v.gpu_free) for v in views) * MILLI

    def _relearn(self) -> None:
        """Read what the policy needs from the workload model."""
        self.learned = self.model.seen
        if not self.fixed:
            typical = weighted_typical_pods(self.model.items(), with_memory=self.use_memory)
            self.measure = FragMeasure(typical, self.use_memory)

    def epoch(self) -> Hashable:
        return self.learned

    def epoch_scope(self, since: Hashable) -> frozenset[int] | None:
        return frozenset() if since == self.learned else None

    def _gradient(self, before: float, after: float) -> float:
        return float(int(sigmoid((before - after) / 1000) * MAX_NODE_SCORE))

    def node_score(
        self, view: GpuNodeView, cpu: int, mem: int, gpus: Sequence[int], lost: float = 0
    ) -> float:
        """The node's score if its free CPU, memory and GPUs became `cpu`, `mem`, `gpus`, with `lost`
        milli-GPU more counted as fragment."""
        return self._measured(self.measure, view, cpu, mem, gpus, lost)

    def _measured(
        self, fm: FragMeasure, view: GpuNodeView, cpu: int, mem: int, gpus: Sequence[int], lost: float
    ) -> float:
        return self._gradient(fm.node(view), fm.of(view.model, cpu, mem, gpus) + lost)

    def share_lost(self, free: int, size: int) -> float:
        """Milli-GPU a share of `size` on a GPU with `free` left is expected to strand that the measure
        does not see (FGD: none)."""
        return 0.0

    def score(self, view: GpuNodeView, pod: PodRequest) -> tuple[float, tuple[int, ...]]:
        cpu = view.cpu_free - pod.cpu
        mem = view.mem_free - pod.mem
        free = view.gpu_free
        if pod.is_share:
            best = -1
            best_score = 0.0
            for i, s in self.share_gradients(view, pod).items():
                if best < 0 or s > best_score:
                    best, best_score = i, s
            return best_score, ((best,) if best >= 0 else ())
        gpus = exclusive_gpus(view, pod) if pod.num_gpu else ()
        after_gpus = list(free)
        for i in gpus:
            after_gpus[i] -= pod.gpu_milli
        return self.node_score(view, cpu, mem, after_gpus), gpus

    def share_gradients(self, view: GpuNodeView, pod: PodRequest) -> dict[int, float]:
        """Per GPU the share fits, in index order: the node's score if the share went there."""
        cpu = view.cpu_free - pod.cpu
        mem = view.mem_free - pod.mem
        free = view.gpu_free
        out: dict[int, float] = {}
        by_free: dict[int, float] = {}  # GPUs with equal free capacity give equal states
        for i, f in enumerate(free):
            if f < pod.gpu_milli:
                continue
            s = by_free.get(f)
            if s is None:
                after_gpus = list(free)
                after_gpus[i] = f - pod.gpu_milli
                lost = self.share_lost(f, pod.gpu_milli)
                s = by_free[f] = self.node_score(view, cpu, mem, after_gpus, lost)
            out[i] = s
        return out

    def device_keys(self, view: GpuNodeView, pod: PodRequest, gpus: Sequence[int]) -> list[tuple[float, int]]:
        if not pod.is_share:
            return super().device_keys(view, pod, gpus)
        grads = self.share_gradients(view, pod)
        return [(-grads[i], i) if i in grads else (math.inf, i) for i in range(len(view.gpu_free))]


class CapacityFragMeasure(FragMeasure):
    """kdra's fragmentation measure: FGD's, with CPU and memory counted as capacity, not as a yes/no.

    FGD treats a node with 3 idle GPUs and 12 free cores as fully usable by a typical 1-GPU, 11-core pod,
    although only one such pod fits: two of the GPUs are stranded. Here, per typical pod t, only as many
    fitting GPUs count as usable as t-pods fit the node's free CPU and memory (memory per shape: the
    median of the workload's pods of that shape); the rest of the idle GPU capacity is fragment."""

    def __init__(self, typical: Sequence[TypicalPod], mems: dict[tuple[int, int, int], int]) -> None:
        super().__init__(typical, use_memory=False)
        self.mems = mems
        self.mem_list = sorted({mems.get((t.cpu, t.gpu_milli, t.num_gpu), 0) for t in self.typical})
        self.cpu_thresholds = sorted({c * k for c in self.cpu_points if c for k in range(1, 9)})
        self.mem_thresholds = sorted({m * k for m in self.mem_list if m for k in range(1, 9)})

    def key(self, model: str, cpu_free: int, mem_free: int, gpus: Sequence[int]) -> MeasureKey:
        # How many copies of each typical pod the free CPU (memory) holds, capped at 8, only changes at the
        # thresholds k * cpu_t: the threshold bucket identifies it.
        return (
            model,
            bisect.bisect_right(self.cpu_thresholds, cpu_free),
            bisect.bisect_right(self.mem_thresholds, mem_free),
            tuple(sorted(gpus)),
        )

    def compute(self, model: str, cpu_free: int, mem_free: int, gpus: tuple[int, ...]) -> float:
        total = sum(gpus)
        if total == 0:
            return 0.0
        frag = self.cpu_only * total
        below = _prefix_sums(gpus)  # `gpus` is sorted (`key`): the fitting GPUs are a suffix
        size = len(gpus)
        for t in self.gpu_types:
            if t.models and model not in t.models:
                frag += t.freq * total
                continue
            k = t.num_gpu
            n = (size - bisect.bisect_left(gpus, t.gpu_milli)) // k
            if t.cpu:
                n = min(n, cpu_free // t.cpu)
            mm = self.mems.get((t.cpu, t.gpu_milli, t.num_gpu), 0)
            if mm:
                n = min(n, mem_free // mm)
            frag += t.freq * below[size - n * k]  # all but the n * k largest GPUs, which it can use
        return frag


def cpu_pressure(
    workload: Iterable[PodRequest] | Iterable[tuple[PodRequest, float]], views: Sequence[GpuNodeView]
) -> float:
    """The CPU the workload (pods, or pods with weights) asks for by the time its GPU requests fill the
    fleet's GPUs, over the CPU of the fleet's GPU nodes (0 without GPU requests). Above ~1, CPU runs out
    before GPUs do."""
    milli = cpu = 0.0
    for item in workload:
        p, w = item if isinstance(item, tuple) else (item, 1.0)
        milli += p.total_milli * w
        cpu += p.cpu * w
    cpu_cap = sum(v.cpu_cap for v in views if v.gpu_free)
    if not milli or not cpu_cap:
        return 0.0
    gpu_cap = sum(len(v.gpu_free) for v in views) * MILLI
    return cpu / milli * gpu_cap / cpu_cap


def _weighted_median(values: list[tuple[int, float]]) -> int:
    """The median of weighted values (for an even count of equal weights, the upper middle one)."""
    values = sorted(values)
    total = sum(w for _v, w in values)
    acc = 0.0
    for v, w in values:
        acc += w
        if acc > total / 2 + 1e-9:
            return v
    return values[-1][0] if values else 0


def _sizes(items: Iterable[tuple[PodRequest, float]]) -> list[int]:
    """The share sizes of a weighted workload as a multiset (weights rounded to whole pods)."""
    out: list[int] = []
    for p, w in items:
        if p.is_share:
            out.extend([p.gpu_milli] * round(w))
    return out


class KdraPolicy(FGDPolicy):
    """kdra's own policy: FGD's gradient, told what FGD's measure does not see.

    - **CPU as capacity** (CapacityFragMeasure: idle GPUs the free CPU and memory cannot feed are
      fragment). Where CPU binds (`cpu_pressure` of the workload on the fleet >= CPU_BOUND) it is the
      node score; elsewhere FGD's integer score decides and the capacity gradient breaks its ties: as the
      primary score there it draws small pods to the nodes with the most CPU, which are also the only hosts
      of the largest pods (the `multi-gpu` replay variant, docs/replay.md).
    - **A share plan** (kdra.scheduler.shareplan): a share placed off the plan the workload's own sizes
      give counts OFF_PLAN times its GPU's leftover as fragment, so shares fill GPUs the way they pack
      best instead of whatever gap is there; then a slight preference for the fuller GPU.
    - **Rare hosts** (`protect_rare`, default): a rare shape is one only a few nodes of the empty fleet
      can host (`prepare_fleet`); its idle hosts are kept for it while they are no more than the rare
      pods the workload is expected to bring before the fleet fills (its rare pods per GPU it asks for,
      times the fleet's free GPU capacity), and always the last RARE_KEEP of them.

    Node ties left keep FGD's behaviour (the first node in a fixed random order: consolidation)."""

    name = "kdra"
    RARE_HOSTS = 0.05  # a shape only this share of the (empty) fleet can host is rare
    RARE_PENALTY = 50.0
    RARE_KEEP = 1  # always protect the idle hosts of a rare shape once this few are left
    FREE_EVERY = 32  # recount the fleet's free GPU capacity every this many epochs
    CPU_BOUND = 0.9  # cpu_pressure from which the capacity measure is the node score
    TIE = 1000.0  # the capacity gradient (0..100) scaled under one step of FGD's integer score
    OFF_PLAN = 8.0  # an off-plan share's leftover counts this many times as fragment
    FULLER = 1e-5  # per free milli-GPU (<= 0.01, under one step of FGD's score): the fuller GPU first

    def __init__(self, typical: Sequence[TypicalPod] | None = None, protect_rare: bool = True) -> None:
        super().__init__(typical)
        self.coarse = FragMeasure(typical or [])  # FGD's measure
        self.protect_rare = protect_rare
        self.plan = SharePlan((), MILLI)
        self.cpu_bound = False
        self._shape_counts: dict[PodRequest, float] = {}
        self._workload_milli = 1.0
        self.rare: list[PodRequest] = []
        self._rare_set: frozenset[PodRequest] = frozenset()
        # Rare shapes grouped by the nodes of the empty fleet able to host them: (hosts, shapes, pods).
        self._rare_groups: list[tuple[list[GpuNodeView], list[PodRequest], float]] = []
        self._groups_of: dict[str, list[int]] = {}  # node name -> the rare groups it hosts
        self._idle: list[tuple[int, int]] = []  # per group: (sum of its hosts' view versions, idle hosts)
        self._protected: frozenset[int] = frozenset()  # groups whose idle hosts are protected now
        self._rare_hosts: frozenset[int] = frozenset()
        self._views: list[GpuNodeView] = []
        self._epochs = 0
        self._fleet_free = 0

    def _relearn(self) -> None:
        """The capacity measure (memory per shape: the median of the workload's pods of that shape), the
        share plan, and, with the fleet known, where CPU binds and the rare shapes."""
        self.learned = self.model.seen
        items = list(self.model.items())
        typical = self.measure.typical if self.fixed else weighted_typical_pods(items)
        by_shape: dict[tuple[int, int, int], list[tuple[int, float]]] = {}
        for p, w in items:
            by_shape.setdefault((p.cpu, p.gpu_milli, p.num_gpu), []).append((p.mem, w))
        self.measure = CapacityFragMeasure(typical, {k: _weighted_median(v) for k, v in by_shape.items()})
        self.coarse = FragMeasure(typical)
        self.plan = SharePlan(_sizes(items), MILLI)
        self._shape_counts = dict(items)
        self._workload_milli = max(1.0, sum(p.total_milli * w for p, w in items))
        if self._views:
            self._read_fleet()

    def prepare_fleet(self, views: Sequence[GpuNodeView]) -> None:
        super().prepare_fleet(views)
        self._views = list(views)
        self._read_fleet()

    def _read_fleet(self) -> None:
        """Where CPU binds, and the rare shapes: pods that only a few nodes of the empty fleet can host
        (the trace's 8-GPU, 120-core, 700 GiB pods fit only the 39 G3 nodes). Breaking an idle host of
        such a shape for a pod that could go elsewhere is penalised while the hosts are scarce for the
        demand (class docstring), so the rare pods are not starved in a live cluster."""
        views = self._views
        if not views:
            return
        self.cpu_pressure = cpu_pressure(self._shape_counts.items(), views)
        self.cpu_bound = self.cpu_pressure >= self.CPU_BOUND
        by_node_shape: dict[tuple[Any, ...], list[int]] = {}
        for i, v in enumerate(views):
            by_node_shape.setdefault((v.cpu_cap, v.mem_cap, len(v.gpu_free), v.model), []).append(i)
        groups: dict[tuple[int, ...], list[PodRequest]] = {}
        shapes = sorted(self._shape_counts, key=lambda p: (p.cpu, p.mem, p.num_gpu, p.gpu_milli))
        for shape in shapes:
            hosts = tuple(
                sorted(
                    i
                    for (cpu, mem, gpus, model), idx in by_node_shape.items()
                    if cpu >= shape.cpu
                    and mem >= shape.mem
                    and gpus >= shape.num_gpu
                    and (not shape.models or model in shape.models)
                    for i in idx
                )
            )
            if 0 < len(hosts) <= self.RARE_HOSTS * len(views):
                groups.setdefault(hosts, []).append(shape)
        self.rare = [s for group in groups.values() for s in group]
        self._rare_set = frozenset(self.rare)
        self._rare_groups = [
            ([views[i] for i in hosts], group, sum(self._shape_counts[s] for s in group))
            for hosts, group in groups.items()
        ]
        self._groups_of = {}
        for gi, hosts in enumerate(groups):
            for i in hosts:
                self._groups_of.setdefault(views[i].name, []).append(gi)
        self._idle = [(-1, 0)] * len(self._rare_groups)
        self._rare_hosts = frozenset(i for hosts in groups for i in hosts)

    def epoch(self) -> Hashable:
        """The pods seen when the workload was last read, and which rare groups' idle hosts are protected
        now."""
        if not self._rare_groups or not self.protect_rare:
            return (self.learned, ())
        if self._epochs % self.FREE_EVERY == 0:
            self._fleet_free = sum(v.gpu_free_total() for v in self._views)
        self._epochs += 1
        protected = []
        for gi, (hosts, group, pods) in enumerate(self._rare_groups):
            seen, idle = self._idle[gi]
            versions = sum(v.version for v in hosts)  # versions only grow: equal sums, unchanged hosts
            if versions != seen:
                idle = sum(1 for v in hosts if any(v.fits(s) for s in group))
                self._idle[gi] = (versions, idle)
            if idle <= self.RARE_KEEP + pods * self._fleet_free / self._workload_milli:
                protected.append(gi)
        self._protected = frozenset(protected)
        return (self.learned, tuple(protected))

    def epoch_scope(self, since: Hashable) -> frozenset[int] | None:
        """Protection only moves the scores of rare shapes' hosts; a new reading of the workload, all."""
        if not isinstance(since, tuple) or since[0] != self.learned:
            return None
        return self._rare_hosts

    def _breaks_rare(self, view: GpuNodeView, pod: PodRequest, gpus: tuple[int, ...]) -> bool:
        if pod in self._rare_set:
            return False
        after: list[int] | None = None  # the node's free GPUs after the pod, once some shape needs them
        for gi in self._groups_of.get(view.name, ()):
            if gi not in self._protected:
                continue
            for shape in self._rare_groups[gi][1]:
                if not view.fits(shape):
                    continue
                if view.cpu_free - pod.cpu < shape.cpu or view.mem_free - pod.mem < shape.mem:
                    return True
                if after is None:
                    after = list(view.gpu_free)
                    for i in gpus:
                        after[i] -= pod.gpu_milli
                if sum(1 for f in after if f >= shape.gpu_milli) < shape.num_gpu:
                    return True
        return False

    def node_score(
        self, view: GpuNodeView, cpu: int, mem: int, gpus: Sequence[int], lost: float = 0
    ) -> float:
        fine = super().node_score(view, cpu, mem, gpus, lost)
        if self.cpu_bound:
            return fine
        return self._measured(self.coarse, view, cpu, mem, gpus, lost) + fine / self.TIE

    def share_lost(self, free: int, size: int) -> float:
        return 0.0 if self.plan.on_plan(MILLI - free, size) else self.OFF_PLAN * (free - size)

    def share_gradients(self, view: GpuNodeView, pod: PodRequest) -> dict[int, float]:
        free = view.gpu_free
        return {i: s - free[i] * self.FULLER for i, s in super().share_gradients(view, pod).items()}

    def score(self, view: GpuNodeView, pod: PodRequest) -> tuple[float, tuple[int, ...]]:
        s, gpus = super().score(view, pod)
        if self._protected and self._breaks_rare(view, pod, gpus):
            s -= self.RARE_PENALTY
        return s, gpus


_FACTORIES: dict[str, type[Policy]] = {
    "random": RandomPolicy,
    "dot-product": DotProductPolicy,
    "best-fit": BestFitPolicy,
    "packing": PackingPolicy,
    "clustering": ClusteringPolicy,
    "fgd": FGDPolicy,
    "kdra": KdraPolicy,
}
ALIASES = {
    "dotprod": "dot-product",
    "dotproduct": "dot-product",
    "bestfit": "best-fit",
    "gpu-packing": "packing",
    "gpupacking": "packing",
    "gpu-clustering": "clustering",
    "gpuclustering": "clustering",
}


def make_policy(name: str) -> Policy:
    """A fresh policy by name (see POLICIES; a few aliases such as `bestfit`, `dotprod` are accepted)."""
    key = ALIASES.get(name.lower(), name.lower())
    cls = _FACTORIES.get(key)
    if cls is None:
        raise KeyError(name)
    return cls()


# -- DRA node scores: fragmentation, bin packing, spread, locality --------------------------------


class _DeviceScore(ScorePlugin):
    """Shared machinery: the pod's allocation on the node (from DynamicResources) applied to the units."""

    def __init__(self, weight: int = 10) -> None:
        self.weight = weight
        self.dynres: Any = None  # the profile's DynamicResources plugin (named by the session)
        self._units: DeviceUnits | None = None
        self._units_index: Any = None
        self.version = 0

    def open_session(self, ssn: Session) -> None:
        from kdra.scheduler.plugins.dynamicresources import DynamicResources

        self.dynres = ssn.plugin(DynamicResources)

    def units(self) -> DeviceUnits:
        index = self.cache.dra.index
        if self._units is None or self._units_index is not index:
            self._units = DeviceUnits(index)
            self._units_index = index
        return self._units

    def active(self, state: CycleState, pi: PodInfo) -> bool:
        pc = state.get("DynamicResources")
        return self.dynres is not None and pc is not None and bool(pc.to_allocate or pc.ext)

    def signature(self, state: CycleState, pi: PodInfo) -> Hashable:
        pc = state.get("DynamicResources")
        return (self.name, getattr(pc, "signature", None), self.version)

    def placement(
        self, state: CycleState, pi: PodInfo, ni: NodeInfo
    ) -> tuple[dict[UnitKey, float], dict[UnitKey, float], float] | None:
        """(free before, free after, pod's shape) for the pod's allocation on this node."""
        allocs = self.dynres.allocations_for(state, pi, ni)
        if allocs is None:
            return None
        units = self.units()
        before = units.free(ni.name, self.cache.dra)
        after = dict(before)
        fracs = []
        for alloc in allocs:
            for r in ((alloc or {}).get("devices") or {}).get("results") or []:
                use = units.result_use(ni.name, r)
                if use is None or use[0] not in after:
                    continue
                after[use[0]] = max(0.0, after[use[0]] - use[1])
                fracs.append(use[1])
        whole = all(f >= 1.0 - EPS for f in fracs)
        shape = float(len(fracs)) if whole else round(sum(fracs), 4)
        return before, after, shape


class DeviceFragmentation(_DeviceScore):
    name = "DeviceFragmentation"

    def __init__(self, weight: int = 10, shapes: Mapping[float, float] | None = None) -> None:
        super().__init__(weight)
        self.fixed = dict(shapes) if shapes else None
        self.seen: dict[float, float] = {}
        self._seen_pods: set[str] = set()

    def shapes(self) -> Mapping[float, float]:
        return self.fixed or self.seen or {1.0: 1.0}

    def score(self, state: CycleState, pi: PodInfo, ni: NodeInfo) -> int:
        got = self.placement(state, pi, ni)
        if got is None:
            return 0
        before, after, shape = got
        if self.fixed is None and pi.uid not in self._seen_pods and shape > 0:
            self._seen_pods.add(pi.uid)
            if shape not in self.seen:
                self.version += 1
            self.seen[shape] = self.seen.get(shape, 0.0) + 1.0
        n = max(1, len(before))
        shapes = self.shapes()
        delta = node_fragmentation(after.values(), shapes) - node_fragmentation(before.values(), shapes)
        return round(MAX_NODE_SCORE * (1.0 - delta / n))


class DeviceBinPack(_DeviceScore):
    """Prefer the node whose devices are most used after the placement (MostAllocated on devices)."""

    name = "DeviceBinPack"

    def score(self, state: CycleState, pi: PodInfo, ni: NodeInfo) -> int:
        got = self.placement(state, pi, ni)
        if got is None or not got[1]:
            return 0
        _before, after, _shape = got
        return round(MAX_NODE_SCORE * (1.0 - sum(after.values()) / len(after)))


class DeviceSpread(_DeviceScore):
    """Prefer the node with the most free device capacity after the placement (LeastAllocated on devices)."""

    name = "DeviceSpread"

    def score(self, state: CycleState, pi: PodInfo, ni: NodeInfo) -> int:
        got = self.placement(state, pi, ni)
        if got is None or not got[1]:
            return 0
        _before, after, _shape = got
        return round(MAX_NODE_SCORE * sum(after.values()) / len(after))


class DeviceLocality(_DeviceScore):
    """Prefer the node where the devices the allocator would give the pod share one PCIe root (100), else
    one NUMA node (50). A claim that must keep its devices together says so with matchAttribute (the
    allocator enforces it); this is the soft preference for claims that do not ask."""

    name = "DeviceLocality"

    def __init__(self, weight: int = 2) -> None:
        super().__init__(weight)
        self._attrs: dict[tuple[str, str, str], tuple[Any, Any]] = {}
        self._attrs_index: Any = None

    def _locality(self, key: tuple[str, str, str]) -> tuple[Any, Any]:
        index = self.cache.dra.index
        if self._attrs_index is not index:
            self._attrs = {}
            for sl in index.slices:
                for d in sl.devices:
                    root = d.attributes.get(PCIE_ROOT) or {}
                    numa = d.attributes.get(NUMA_NODE) or {}
                    self._attrs[d.key] = (root.get("string"), numa.get("int"))
            self._attrs_index = index
        return self._attrs.get(key, (None, None))

    def score(self, state: CycleState, pi: PodInfo, ni: NodeInfo) -> int:
        allocs = self.dynres.allocations_for(state, pi, ni) if self.dynres is not None else None
        keys = [
            (r.get("driver", ""), r.get("pool", ""), r.get("device", ""))
            for a in allocs or []
            for r in ((a or {}).get("devices") or {}).get("results") or []
        ]
        if len(keys) < 2:
            return MAX_NODE_SCORE
        locs = [self._locality(k) for k in keys]
        roots = {loc[0] for loc in locs}
        if len(roots) == 1 and None not in roots:
            return MAX_NODE_SCORE
        numas = {loc[1] for loc in locs}
        if len(numas) == 1 and None not in numas:
            return MAX_NODE_SCORE // 2
        return 0


PLACEMENT_POLICIES = ("upstream", "binpack", "spread", "fragmentation", "kdra")


def placement_plugins(policy: str, shapes: Mapping[float, float] | None = None) -> list[ScorePlugin]:
    """Score plugins for a placement policy; `shapes` (units -> popularity) fixes FGD's target workload.
    `kdra`: kdra's replay policy, learning the workload from the pods it sees, choosing the node and (through
    the plugin's `device_preference`) the GPUs (kdra.scheduler.policyplacement)."""
    if policy == "upstream":
        return []
    if policy == "binpack":
        return [DeviceBinPack()]
    if policy == "spread":
        return [DeviceSpread()]
    if policy == "fragmentation":
        return [DeviceFragmentation(shapes=shapes)]
    if policy == "kdra":
        from kdra.scheduler.policyplacement import FragmentationScore

        return [FragmentationScore(KdraPolicy)]
    raise ValueError(f"unknown placement policy {policy!r} (one of {', '.join(PLACEMENT_POLICIES)})")


def placement_preference(plugins: Iterable[object]) -> MeasuredPreference | None:
    """The device preference a placement's plugins bring (placement kdra chooses the GPUs too), or None."""
    return next((p.device_preference for p in plugins if hasattr(p, "device_preference")), None)


def cluster_fragmentation(dra: DraState, shapes: Mapping[float, float]) -> dict[str, float]:
    """Fleet figures: free units, FGD fragmentation (in units) and its share of the free capacity, and
    partly used units (idle fragments)."""
    units = DeviceUnits(dra.index)
    free_total = frag = 0.0
    partial = 0
    whole_free = 0
    for node in sorted(units.node_units):
        frees = units.free(node, dra)
        free_total += sum(frees.values())
        frag += node_fragmentation(frees.values(), shapes)
        partial += sum(1 for f in frees.values() if EPS < f < 1.0 - EPS)
        whole_free += sum(1 for f in frees.values() if f >= 1.0 - EPS)
    return {
        "free_units": round(free_total, 4),
        "fragmented_units": round(frag, 4),
        "fragmentation_ratio": round(frag / free_total, 4) if free_total else 0.0,
        "partly_used_units": partial,
        "wholly_free_units": whole_free,
    }
