"""Placement policies over GPU node views: the FGD simulator's policies and kdra's own, for trace replay.

A node is a `GpuNodeView` (free CPU, memory and milli-GPU per GPU), the fast path the replay (kdra.replay)
scores 1,213 nodes with; a pod is a `PodRequest`. Each `Policy` scores a node for a pod and picks the GPUs
inside it; `make_policy(name)` builds one by name (`POLICIES`). FGD's and kdra's policies measure a node's
fragmentation for the workload's typical pods (`FragMeasure`, `CapacityFragMeasure`: FGD's measure, as
kdra.scheduler.fragmentation's `unusable` defines it, by bisection over the node's sorted GPUs). kdra's
scheduler runs a policy as a score plugin through kdra.scheduler.policyplacement.

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
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kdra.scheduler.fragmentation import MAX_NODE_SCORE
from kdra.scheduler.scarcecpu import scarce_cpu_typical
from kdra.scheduler.shareplan import SharePlan
from kdra.scheduler.workload import WorkloadModel

MeasureKey = tuple[str, int, int, tuple[int, ...]]

# -- GPU node views (the replay's fast path) -------------------------------------------------------

MILLI = 1000  # milli-GPU per GPU
MAX_SPEC_CPU = 128_000  # the simulator's normalisation constants (utils.MaxSpecCpu / MaxSpecGpu)
MAX_SPEC_GPU = 8_000

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


MAX_PODS = 110  # pods per node: the rendered Node's status.allocatable.pods, kube's default


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
    max_pods: int = MAX_PODS
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
        self._rows: dict[str, list[tuple[float, int, int, int, int]]] = {}

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

    def rows(self, model: str) -> list[tuple[float, int, int, int, int]]:
        """The GPU typical pods as `compute` reads them on a node of `model`, in order: (frequency, milli-GPU
        per GPU or 0 where the model is out of the pod's reach, GPUs, CPU, memory). Workloads with many share
        sizes have thousands of typical pods and fine shares many node states, so the walk over them is the
        measure's cost: it reads plain tuples, not the pods' fields and models."""
        rows = self._rows.get(model)
        if rows is None:
            rows = self._rows[model] = [
                (
                    t.freq,
                    0 if t.models and model not in t.models else t.gpu_milli,
                    t.num_gpu,
                    t.cpu,
                    self.memory(t),
                )
                for t in self.gpu_types
            ]
        return rows

    def memory(self, t: TypicalPod) -> int:
        """The memory a typical pod is taken to ask for."""
        return t.mem

    def compute(self, model: str, cpu_free: int, mem_free: int, gpus: tuple[int, ...]) -> float:
        total = sum(gpus)
        if total == 0:
            return 0.0
        frag = self.cpu_only * total  # CPU-only typical pods: every idle GPU is "fragment" to them (XL/XR)
        use_mem = self.use_memory
        # `gpus` is sorted (`key`): the GPUs a size fits are a suffix, so what it cannot use (`unusable`)
        # is a prefix sum, found by bisection.
        below = _prefix_sums(gpus)
        n = len(gpus)
        fit = bisect.bisect_left
        for freq, milli, k, cpu, mem in self.rows(model):
            if not milli or cpu > cpu_free or (use_mem and mem > mem_free):
                frag += freq * total  # no access, or lacks CPU (memory): all idle GPU is fragment
                continue
            i = fit(gpus, milli)
            frag += freq * (total if k > 1 and n - i < k else below[i])
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

    def memory(self, t: TypicalPod) -> int:
        return self.mems.get((t.cpu, t.gpu_milli, t.num_gpu), 0)

    def compute(self, model: str, cpu_free: int, mem_free: int, gpus: tuple[int, ...]) -> float:
        total = sum(gpus)
        if total == 0:
            return 0.0
        frag = self.cpu_only * total
        below = _prefix_sums(gpus)  # `gpus` is sorted (`key`): the fitting GPUs are a suffix
        size = len(gpus)
        fit = bisect.bisect_left
        for freq, milli, k, cpu, mem in self.rows(model):
            if not milli:
                frag += freq * total  # no access: all idle GPU is fragment
                continue
            n = (size - fit(gpus, milli)) // k
            if cpu and cpu_free // cpu < n:
                n = cpu_free // cpu
            if mem and mem_free // mem < n:
                n = mem_free // mem
            frag += freq * below[size - n * k]  # all but the n * k largest GPUs, which it can use
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
      of the largest pods (the `multi-gpu` replay variant, docs/replay.md). Where the GPU pods alone ask
      for more CPU than the fleet's GPU nodes have, the room it keeps is weighted toward the pods asking
      little CPU (kdra.scheduler.scarcecpu).
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
        self._typical = list(typical or [])  # the capacity measure's typical pods, unweighted
        self._mems: dict[tuple[int, int, int], int] = {}
        self.gpu_cpu_pressure = 0.0
        self._scarce = False  # whether self.measure is weighted toward light pods (kdra.scheduler.scarcecpu)
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
        typical = self._typical if self.fixed else weighted_typical_pods(items)
        by_shape: dict[tuple[int, int, int], list[tuple[int, float]]] = {}
        for p, w in items:
            by_shape.setdefault((p.cpu, p.gpu_milli, p.num_gpu), []).append((p.mem, w))
        self._typical = typical
        self._mems = {k: _weighted_median(v) for k, v in by_shape.items()}
        self.measure = CapacityFragMeasure(typical, self._mems)
        self._scarce = False
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
        gpu_pods = [(p, w) for p, w in self._shape_counts.items() if p.num_gpu]
        self.gpu_cpu_pressure = cpu_pressure(gpu_pods, views)
        # Above 1 some GPU pods fail whatever the placement (kdra.scheduler.scarcecpu). The measure is rebuilt
        # (its memo dropped) only when that changes, not each time the fleet is read again.
        scarce = self.gpu_cpu_pressure > 1
        if scarce != self._scarce:
            self._scarce = scarce
            typical = scarce_cpu_typical(self._typical) if scarce else self._typical
            self.measure = CapacityFragMeasure(typical, self._mems)
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
