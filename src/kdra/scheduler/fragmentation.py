"""GPU placement policies for shared and whole GPUs, among them FGD (Fragmentation Gradient Descent).

The policies reproduce the scoring plugins of the FGD paper's simulator (Weng et al., "Beware of
Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation Gradient Descent", USENIX ATC '23;
hkust-adsl/kubernetes-scheduler-simulator, pkg/simulator/plugin and pkg/utils/frag.go), plus kdra's own:

- `random`: a uniformly random feasible node; a random GPU that fits.
- `dot-product`: Tetris alignment, 100 * (1 - <free, request> / 2), CPU and GPU scaled by 128 cores and
  8 GPUs (dimExtMethod=merge, normMethod=max); best-fit GPU.
- `best-fit`: 100 * (1 - sum_r 0.5 * (free_r - request_r) / max_r) over CPU and GPU; best-fit GPU.
- `packing`: shared GPUs first, then free GPUs of used nodes, then free nodes (score tiers); best-fit GPU.
- `clustering`: nodes already running pods of the same GPU shape first, fuller first; best-fit GPU.
- `fgd`: int(sigmoid((frag_before - frag_after) / 1000) * 100); the GPU minimising frag.
- `kdra`: FGD's gradient over a CPU- and memory-capacity-aware measure (CapacityFragMeasure), CPU-only
  pods to the nodes with the fewest idle GPUs; the GPU minimising frag.

`frag(node)` is the expected number of idle milli-GPUs that a pod drawn from the *typical pod*
distribution could not use: per typical pod t with frequency p_t, all idle GPU capacity if t does not fit
the node at all (CPU, GPU count or model), else the idle capacity of the GPUs with less free than t asks.

A policy works on `GpuNodeView` (free CPU, memory and milli-GPU per GPU of one node), which a caller keeps
up to date incrementally; nothing here allocates devices. The replay engine (kdra.replay) and the
`FragmentationScore` scheduler plugin below both feed it: the chosen node's claims are then allocated by
kdra's DRA allocator, restricted to the GPUs the policy picked.
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kdra.scheduler.framework import CycleState, ScorePlugin

if TYPE_CHECKING:
    from kdra.scheduler.podinfo import NodeInfo, PodInfo

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
    counts: dict[tuple[Any, ...], int] = {}
    total = 0
    for p in pods:
        if not include_cpu_pods and p.num_gpu == 0:
            continue
        key: tuple[Any, ...] = (p.cpu, p.gpu_milli, p.num_gpu, "|".join(p.models))
        if with_memory:
            key += (p.mem,)
        counts[key] = counts.get(key, 0) + 1
        total += 1
    if total == 0:
        return []
    # Decreasing count; equal counts in decreasing (cpu, milli, count, models) as sort.Reverse does.
    ordered = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    chosen: list[tuple[tuple[Any, ...], int]] = []
    cum = 0
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

    def key(self, model: str, cpu_free: int, mem_free: int, gpus: Sequence[int]) -> tuple[Any, ...]:
        cb = bisect.bisect_right(self.cpu_points, cpu_free)
        mb = bisect.bisect_right(self.mem_points, mem_free) if self.use_memory else 0
        return (model, cb, mb, tuple(sorted(gpus)))

    def of(self, model: str, cpu_free: int, mem_free: int, gpus: Sequence[int]) -> float:
        k = self.key(model, cpu_free, mem_free, gpus)
        v = self._memo.get(k)
        if v is None:
            if len(self._memo) > 500_000:
                self._memo.clear()
            v = self._memo[k] = self._compute(model, cpu_free, mem_free, k[3])
        return v

    def _compute(self, model: str, cpu_free: int, mem_free: int, gpus: tuple[int, ...]) -> float:
        total = sum(gpus)
        if total == 0:
            return 0.0
        frag = self.cpu_only * total  # CPU-only typical pods: every idle GPU is "fragment" to them (XL/XR)
        use_mem = self.use_memory
        for t in self.gpu_types:
            if t.models and model not in t.models:
                frag += t.freq * total  # no access
                continue
            need = t.num_gpu
            m = t.gpu_milli
            for f in gpus:
                if f >= m:
                    need -= 1
                    if need == 0:
                        break
            if need > 0 or t.cpu > cpu_free or (use_mem and t.mem > mem_free):
                frag += t.freq * total  # lacks GPU, CPU (or memory): all idle GPU is fragment
            else:
                frag += t.freq * sum(f for f in gpus if f < m)  # Q3: GPUs too small for t
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
        """Called once with the workload (the un-inflated pod list) before placing anything."""

    def prepare_fleet(self, views: Sequence[GpuNodeView]) -> None:
        """Called once with the empty fleet (live views: the caller updates them) before placing anything."""

    def epoch(self) -> Hashable:
        """Fleet-wide state the scores depend on besides the node itself; when it changes, callers that
        cache scores per node must re-score every node."""
        return None

    def score(self, view: GpuNodeView, pod: PodRequest) -> tuple[float, tuple[int, ...]]:
        raise NotImplementedError

    def choose_random(self, view: GpuNodeView, pod: PodRequest, rng: random.Random) -> tuple[int, ...]:
        return best_fit_gpus(view, pod)


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

    def prepare(self, workload: Sequence[PodRequest]) -> None:
        if not self.measure.typical:
            self.measure = FragMeasure(typical_pods(workload, with_memory=self.use_memory), self.use_memory)

    def _gradient(self, before: float, after: float) -> float:
        return float(int(sigmoid((before - after) / 1000) * MAX_NODE_SCORE))

    def score(self, view: GpuNodeView, pod: PodRequest) -> tuple[float, tuple[int, ...]]:
        fm = self.measure
        before = fm.node(view)
        cpu = view.cpu_free - pod.cpu
        mem = view.mem_free - pod.mem
        model = view.model
        free = view.gpu_free
        if pod.is_share:
            best = -1
            best_score = 0.0
            seen: set[int] = set()
            for i, f in enumerate(free):
                if f < pod.gpu_milli or f in seen:
                    continue
                seen.add(f)  # GPUs with equal free capacity give equal states: the first one stands for all
                after_gpus = list(free)
                after_gpus[i] = f - pod.gpu_milli
                s = self._gradient(before, fm.of(model, cpu, mem, after_gpus))
                if best < 0 or s > best_score:
                    best, best_score = i, s
            return best_score, ((best,) if best >= 0 else ())
        gpus = exclusive_gpus(view, pod) if pod.num_gpu else ()
        after_gpus = list(free)
        for i in gpus:
            after_gpus[i] -= pod.gpu_milli
        return self._gradient(before, fm.of(model, cpu, mem, after_gpus)), gpus


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

    def key(self, model: str, cpu_free: int, mem_free: int, gpus: Sequence[int]) -> tuple[Any, ...]:
        # How many copies of each typical pod the free CPU (memory) holds, capped at 8, only changes at the
        # thresholds k * cpu_t: the threshold bucket identifies it.
        return (
            model,
            bisect.bisect_right(self.cpu_thresholds, cpu_free),
            bisect.bisect_right(self.mem_thresholds, mem_free),
            tuple(sorted(gpus)),
        )

    def _compute(self, model: str, cpu_free: int, mem_free: int, gpus: tuple[int, ...]) -> float:
        total = sum(gpus)
        if total == 0:
            return 0.0
        frag = self.cpu_only * total
        for t in self.gpu_types:
            if t.models and model not in t.models:
                frag += t.freq * total
                continue
            m = t.gpu_milli
            k = t.num_gpu
            fit = sorted((g for g in gpus if g >= m), reverse=True)
            n = len(fit) // k
            if t.cpu:
                n = min(n, cpu_free // t.cpu)
            mm = self.mems.get((t.cpu, t.gpu_milli, t.num_gpu), 0)
            if mm:
                n = min(n, mem_free // mm)
            frag += t.freq * (total - sum(fit[: n * k]))
        return frag


class KdraPolicy(FGDPolicy):
    """kdra's own: FGD's gradient over the capacity-aware measure (CapacityFragMeasure), and CPU-only
    pods, which FGD scores alike on most nodes, sent to the nodes with the fewest idle GPUs (then the most
    CPU left), so they stop eating the CPU that idle GPUs need. With `protect_rare`, the last idle node
    able to host a rare shape is kept for it (`prepare_fleet`): off by default, since in the paper's
    never-removing experiment it costs a few hundredths of a point. Node ties keep FGD's behaviour (the
    first node in a fixed random order: consolidation)."""

    name = "kdra"
    RARE_HOSTS = 0.05  # a shape only this share of the (empty) fleet can host is rare
    RARE_PENALTY = 50.0
    RARE_KEEP = 1  # protect the idle hosts of a rare shape once this few are left

    def __init__(self, typical: Sequence[TypicalPod] | None = None, protect_rare: bool = False) -> None:
        super().__init__(typical)
        self.protect_rare = protect_rare
        self._workload_shapes: list[PodRequest] = []
        self.rare: list[PodRequest] = []
        self._rare_views: list[GpuNodeView] = []
        self._protect = False

    def prepare(self, workload: Sequence[PodRequest]) -> None:
        if isinstance(self.measure, CapacityFragMeasure):
            return
        typical = typical_pods(workload)
        by_shape: dict[tuple[int, int, int], list[int]] = {}
        for p in workload:
            by_shape.setdefault((p.cpu, p.gpu_milli, p.num_gpu), []).append(p.mem)
        mems = {k: sorted(v)[len(v) // 2] for k, v in by_shape.items()}
        self.measure = CapacityFragMeasure(typical, mems)
        self._workload_shapes = sorted(set(workload), key=lambda p: (p.cpu, p.mem, p.num_gpu, p.gpu_milli))

    def prepare_fleet(self, views: Sequence[GpuNodeView]) -> None:
        """Rare shapes: pods that only a few nodes of the empty fleet can host (the trace's 8-GPU,
        120-core, 700 GiB pods fit only the 39 G3 nodes). Breaking the last idle host of such a shape for
        a pod that could go elsewhere is penalised once only RARE_KEEP of them are left, so the rare pods
        are not starved in a live cluster."""
        if not views:
            return
        rare = []
        for shape in self._workload_shapes:
            hosts = sum(
                1
                for v in views
                if v.cpu_cap >= shape.cpu
                and v.mem_cap >= shape.mem
                and len(v.gpu_free) >= shape.num_gpu
                and v.accessible(shape)
            )
            if 0 < hosts <= self.RARE_HOSTS * len(views):
                rare.append(shape)
        self.rare = rare
        self._rare_views = [
            v
            for v in views
            if any(v.cpu_cap >= r.cpu and v.mem_cap >= r.mem and len(v.gpu_free) >= r.num_gpu for r in rare)
        ]

    def epoch(self) -> Hashable:
        """Whether the idle hosts of some rare shape are down to RARE_KEEP (then they are protected)."""
        if not self.rare or not self.protect_rare:
            return None
        self._protect = any(
            sum(1 for v in self._rare_views if v.fits(r)) <= self.RARE_KEEP for r in self.rare
        )
        return self._protect

    def _breaks_rare(self, view: GpuNodeView, pod: PodRequest, gpus: tuple[int, ...]) -> bool:
        if pod in self.rare:
            return False
        for shape in self.rare:
            if not view.fits(shape):
                continue
            cpu = view.cpu_free - pod.cpu
            mem = view.mem_free - pod.mem
            if cpu < shape.cpu or mem < shape.mem:
                return True
            after = list(view.gpu_free)
            for i in gpus:
                after[i] -= pod.gpu_milli
            if sum(1 for f in after if f >= shape.gpu_milli) < shape.num_gpu:
                return True
        return False

    def score(self, view: GpuNodeView, pod: PodRequest) -> tuple[float, tuple[int, ...]]:
        s, gpus = super().score(view, pod)
        if self._protect and self._breaks_rare(view, pod, gpus):
            s -= self.RARE_PENALTY
        if pod.num_gpu == 0:
            return s - view.gpu_free_total() * 1e-5 + (view.cpu_free - pod.cpu) * 1e-10, gpus
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


# -- as a scheduler score plugin ------------------------------------------------------------------


class FragmentationScore(ScorePlugin):
    """A policy as a kdra scheduler score plugin (issue 5's fragmentation-aware placement).

    `views` turns the scheduler's NodeInfo / PodInfo into the policy's compact view; by default
    `DraGpuViews`, which reads free milli-GPU per GPU from the scheduler's DRA state (claims' consumed
    `shares`). The raw score is rescaled to 0..100 across feasible nodes (NormalizeScore). The device
    choice inside the node stays the allocator's (upstream order); the replay engine pins it instead."""

    name = "FragmentationScore"
    weight = 1

    def __init__(self, policy: Policy, views: DraGpuViews | None = None) -> None:
        self.policy = policy
        self.views = views or DraGpuViews()

    def bind_cache(self, cache: Any) -> None:
        super().bind_cache(cache)
        if self.views.cache is None:
            self.views.cache = cache

    def signature(self, state: CycleState, pi: PodInfo) -> Hashable:
        return None

    def needs_normalize(self, state: CycleState, pi: PodInfo) -> bool:
        return True

    def score(self, state: CycleState, pi: PodInfo, ni: NodeInfo) -> int:
        view = self.views.view_of(ni)
        req = self.views.request_of(pi)
        if not view.fits(req):
            return 0
        s, _ = self.policy.score(view, req)
        return round(s * 1000)

    def normalize(self, state: CycleState, pi: PodInfo, scores: dict[int, int]) -> None:
        if not scores:
            return
        lo = min(scores.values())
        hi = max(scores.values())
        for k, v in scores.items():
            scores[k] = MAX_NODE_SCORE * (v - lo) // (hi - lo) if hi > lo else MAX_NODE_SCORE


GPU_CLASS = "gpu.nvidia.com"
TRACE_MODEL_LABEL = "kdra.dev/trace-gpu-model"
_NANO = 10**9


class DraGpuViews:
    """`view_of` / `request_of` for FragmentationScore inside kdra's scheduler, read from its DRA state.

    A node's GPUs are the devices of `device_class` on it; a GPU's free milli-GPU is its `shares` capacity
    (1000 per GPU in consumable-shares mode) minus what allocated and in-flight claims consume, 0 when a
    claim holds it exclusively. A pod's GPU request is read from its ResourceClaims (count and
    `capacity.requests.shares`; no shares = whole GPUs)."""

    def __init__(self, cache: Any = None, device_class: str = GPU_CLASS) -> None:
        self.cache = cache  # the scheduler's SchedulerCache (bound by FragmentationScore.bind_cache)
        self.device_class = device_class

    def view_of(self, ni: NodeInfo) -> GpuNodeView:
        from kdra.scheduler.podinfo import CPU, MEMORY

        dra = self.cache.dra
        gpus: list[int] = []
        consumed = dra.state.consumed
        dedicated = dra.state.dedicated
        for d in dra.index.devices_of_class(self.device_class, node=ni.name):
            if d.key in dedicated:
                gpus.append(0)
                continue
            cap = d.capacity.get("shares")
            if cap is None:
                gpus.append(MILLI)
                continue
            total = cap.value.nanos // _NANO
            used = consumed.get(d.key, {}).get("shares", 0) // _NANO
            gpus.append(round((total - used) * MILLI / total) if total else 0)
        alloc, req = ni.allocatable, ni.requested
        mib = 1 << 20
        return GpuNodeView(
            ni.name,
            ni.labels.get(TRACE_MODEL_LABEL, ni.labels.get("nvidia.com/gpu.product", "")),
            alloc.get(CPU, 0),
            alloc.get(MEMORY, 0) // mib,
            alloc.get(CPU, 0) - req.get(CPU, 0),
            (alloc.get(MEMORY, 0) - req.get(MEMORY, 0)) // mib,
            gpus,
            len(ni.pods),
            alloc.get("pods", 110),
        )

    def request_of(self, pi: PodInfo) -> PodRequest:
        from kdra.scheduler.cache import claim_key
        from kdra.scheduler.plugins.dynamicresources import pod_claim_name
        from kdra.scheduler.podinfo import CPU, MEMORY

        num = 0
        milli = 0
        claims = self.cache.claims
        for entry in pi.claim_refs:
            name, _ = pod_claim_name(pi.pod, entry)
            claim = claims.get(claim_key(pi.namespace, name or ""))
            if claim is None:
                continue
            for r in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
                ex = r.get("exactly") or {}
                if ex.get("deviceClassName") != self.device_class:
                    continue
                num += int(ex.get("count") or 1)
                shares = ((ex.get("capacity") or {}).get("requests") or {}).get("shares")
                milli = int(shares) if shares is not None else MILLI
        return PodRequest(pi.requests.get(CPU, 0), pi.requests.get(MEMORY, 0) >> 20, num, milli if num else 0)
