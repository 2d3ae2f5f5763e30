"""Placement engine for trace replay: the FGD paper's method over kdra's real DRA allocation.

Per pod: every node is checked and scored by the policy on a cheap incremental view of the node (free CPU,
memory and milli-GPU per GPU; kdra.scheduler.gpupolicies), the best node wins (ties to the first node
in a seeded random node order, which is what reproduces the FGD artifact's figures: its scheduler fork
renames nodes with a random prefix; `tie_break="random"` is upstream selectHost's uniform choice), and
the pod's ResourceClaim is then allocated by kdra's structured allocator (kdra.allocator) on that node
only, the GPUs inside the node chosen by the allocator with the policy as its device preference (the
allocator's ordering hook: FGD and kdra rank the node's GPUs by the fragmentation gradient of putting the
share there). The allocation result (device, shareID, consumedCapacity) is what the engine records; the
view is updated from it. The view is the fast path that makes 1,213 nodes x 10,000 pods affordable; the
allocator is the authority: if it refused what the view allowed, the replay would stop with an error.

Scores are cached per pod shape (all pods with the same request share them) and re-evaluated only on
nodes that changed since that shape was last scored, like the scheduler's per-signature cache.
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kdra.allocator import AllocatedState, Allocator, AllocatorIndex, FeatureGates
from kdra.errors import KdraError
from kdra.fleets import render
from kdra.replay.trace import Trace, TraceNode, TracePod, claim_for
from kdra.scheduler.gpupolicies import MILLI, GpuNodeView, PodRequest, Policy

Progress = Callable[[int, int], None]


class ReplayError(KdraError):
    """The allocator disagreed with the placement view (a kdra bug, never a user error)."""

    exit_code = 1


# -- inflation -------------------------------------------------------------------------------------


def inflate(pods: Sequence[TracePod], capacity_milli: int, ratio: float, seed: int) -> list[TracePod]:
    """The simulator's workload tuning (Simulate + SortClusterPods + TunePodsByNodeTotalResource):
    pods in name order, shuffled with `seed`, then pods sampled with replacement from the list appended
    until the next one would take the GPU request past `ratio` x capacity (or random pods dropped when
    the list already asks for more). `ratio` <= 0 keeps the list (shuffled)."""
    rng = random.Random(seed)
    workload = sorted(pods, key=lambda p: p.name)
    order = list(workload)
    rng.shuffle(order)
    if ratio <= 0:
        return order
    target = ratio * capacity_milli
    total = sum(p.request.total_milli for p in order)
    if total > target:
        while total > target and order:
            victim = order.pop(rng.randrange(len(order)))
            total -= victim.request.total_milli
        return order
    n = len(workload)
    if not any(p.request.gpu_milli for p in workload):
        return order  # no pod asks for a GPU: sampling more never reaches the target (it looped forever)
    i = 0
    while True:
        src = workload[rng.randrange(n)]
        # The simulator compares with the per-GPU milli (podRes.MilliGpu) and adds the total: kept as is.
        if total + src.request.gpu_milli > target:
            break
        total += src.request.total_milli
        order.append(dataclasses.replace(src, name=f"{src.name}-tuned-{i}"))
        i += 1
    return order


def arrivals(trace: Trace, seed: int, until: float = 100, ratio: float = 1.3) -> list[TracePod]:
    """The pods of a replay (`inflate`) in arrival order, while the arrived GPU request stays at or below
    `until` % of the fleet's GPU capacity: what a live cluster is handed to compare with the replay's
    figure at that point."""
    limit = until * trace.gpu_capacity_milli / 100
    out: list[TracePod] = []
    total = 0
    for p in inflate(trace.pods, trace.gpu_capacity_milli, ratio, seed):
        total += p.request.total_milli
        if total > limit:
            break
        out.append(p)
    return out


# -- the cluster: views + DRA ----------------------------------------------------------------------


class _Bag:
    """A set with O(1) add, remove and uniform random choice."""

    __slots__ = ("items", "pos")

    def __init__(self) -> None:
        self.items: list[int] = []
        self.pos: dict[int, int] = {}

    def add(self, x: int) -> None:
        self.pos[x] = len(self.items)
        self.items.append(x)

    def remove(self, x: int) -> None:
        i = self.pos.pop(x)
        last = self.items.pop()
        if last != x:
            self.items[i] = last
            self.pos[last] = i


class _ShapeCache:
    __slots__ = ("buckets", "choice", "epoch", "score", "seq")

    def __init__(self) -> None:
        self.seq = -1
        self.epoch: Any = None
        self.score: dict[int, float] = {}
        self.choice: dict[int, tuple[int, ...]] = {}
        self.buckets: dict[float, _Bag] = {}


@dataclass
class Binding:
    node: int
    gpus: tuple[int, ...]
    results: list[dict[str, Any]] = field(default_factory=list)


class _PolicyPreference:
    """The allocator's device-preference hook (kdra.allocator.preference) driven by a replay policy: each
    candidate GPU device is ranked by the policy's own measure on the node's view (FGD and kdra: the
    node's fragmentation gradient if the share went to that GPU)."""

    name = "replay-policy"

    def __init__(self, keys: Sequence[Any], device_index: dict[tuple[str, str], int]) -> None:
        self._keys = keys
        self._index = device_index

    def keys(self, ctx: Any, request: Any, devices: Sequence[Any]) -> list[Any]:
        out = []
        for d in devices:
            i = self._index.get((d.pool, d.name))
            out.append(self._keys[i] if i is not None else (math.inf, 0))
        return out


class ReplayCluster:
    """The trace's fleet rendered into Nodes + ResourceSlices (consumable shares, or exclusive GPUs with
    `shares=False`), an AllocatorIndex over it, the allocated state, and one GpuNodeView per node.

    kdra's allocator chooses the GPUs inside the chosen node, its search ordered by the policy's device
    preference (Policy.device_keys, through the allocator's hook); the replay stops if they differ from the
    GPUs the policy's view expects."""

    def __init__(
        self,
        nodes: Sequence[TraceNode],
        *,
        shares: bool = True,
        use_allocator: bool = True,
        features: FeatureGates | None = None,
    ) -> None:
        self.shares = shares
        self.use_allocator = use_allocator
        self.features = features or FeatureGates()
        trace = Trace(list(nodes), [])
        fleet = trace.fleet(shares=MILLI if shares else None)
        objs = render(fleet, kubernetes_version=self.features.version)
        classes = {o["metadata"]["name"]: o for o in objs if o["kind"] == "DeviceClass"}
        slices = [o for o in objs if o["kind"] == "ResourceSlice"]
        self.node_objs = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Node"}
        self.index = AllocatorIndex(classes, slices, self.features)
        self.state = AllocatedState()
        self.device_index: dict[tuple[str, str], int] = {}  # (pool, device name) -> GPU index
        for s in slices:
            devs = [
                d
                for d in s["spec"]["devices"]
                if (d.get("attributes") or {}).get("type", {}).get("string") == "gpu"
            ]
            for i, d in enumerate(devs):
                self.device_index[(s["spec"]["pool"]["name"], d["name"])] = i
        self.views: list[GpuNodeView] = []
        for n in nodes:
            self.views.append(GpuNodeView(n.name, n.model, n.cpu, n.mem, n.cpu, n.mem, [MILLI] * n.gpus))
        self.capacity_milli = sum(n.gpus for n in nodes) * MILLI
        self.log: list[int] = []  # node indexes, one entry per change
        self.placed: list[tuple[PodRequest, Binding]] = []  # (the pod's own request, its binding)
        self._share_seq = 0
        self.allocator_calls = 0
        self.allocator_seconds = 0.0

    def _share_id(self) -> str:
        self._share_seq += 1
        return str(uuid.UUID(int=self._share_seq, version=4))

    def bind(
        self, idx: int, name: str, req: PodRequest, gpus: tuple[int, ...], policy: Policy | None = None
    ) -> Binding:
        view = self.views[idx]
        results: list[dict[str, Any]] = []
        if req.num_gpu and self.use_allocator:
            claim = claim_for(name, req, shares=self.shares)
            assert claim is not None
            keys = (policy or Policy()).device_keys(view, req, gpus)
            prefer = _PolicyPreference(keys, self.device_index)
            t0 = time.perf_counter()
            alloc = Allocator.from_index(self.index, self.state, share_id=self._share_id, prefer=prefer)
            out = alloc.allocate(self.node_objs[view.name], [claim])
            self.allocator_seconds += time.perf_counter() - t0
            self.allocator_calls += 1
            if out.allocations is None:
                raise ReplayError(
                    f"pod {name}: the allocator refused GPUs {list(gpus)} on {view.name} that the placement "
                    f"view had free ({view.gpu_free}):\n{out.explanation}"
                )
            results = list(out.allocations[0]["devices"]["results"])
            got = sorted(self.device_index[(r["pool"], r["device"])] for r in results)
            if got != sorted(gpus):
                raise ReplayError(
                    f"pod {name}: allocator chose GPUs {got} on {view.name}, policy chose {sorted(gpus)}"
                )
            for r in results:
                self.state.add_result(r, self.features)
        view.place(req, gpus)
        self.log.append(idx)
        return Binding(idx, gpus, results)

    def unbind(self, req: PodRequest, b: Binding) -> None:
        """Release a pod's node resources and its claim's devices (the claim is deallocated)."""
        for r in b.results:
            self.state.remove_result(r, self.features)
        self.views[b.node].remove(req, b.gpus)
        self.log.append(b.node)

    def allocated_milli(self) -> int:
        return self.capacity_milli - sum(sum(v.gpu_free) for v in self.views)


class Placer:
    """Chooses nodes for pods under one policy on one ReplayCluster."""

    def __init__(self, cluster: ReplayCluster, policy: Policy, seed: int, tie_break: str = "order") -> None:
        self.cluster = cluster
        self.policy = policy
        self.rng = random.Random(seed * 7919 + 17)
        self.tie_break = tie_break
        # "order": the first best node in a seeded random node order (the simulator renames nodes with a
        # random prefix so that ties go to a random but fixed node); "random": uniform among the best.
        # "name": a fixed order of the node names, the one kdra's scheduler plugin uses
        # (kdra.scheduler.policyplacement), so a live run and a replay break ties alike.
        perm = list(range(len(cluster.views)))
        random.Random(seed).shuffle(perm)
        self.rank = [0] * len(perm)
        for r, i in enumerate(perm):
            self.rank[i] = r
        if tie_break == "name":
            from kdra.scheduler.policyplacement import name_order

            order = name_order(v.name for v in cluster.views)
            self.rank = [order[v.name] for v in cluster.views]
        self._cache: dict[PodRequest, _ShapeCache] = {}
        self.evaluations = 0

    def _update(self, c: _ShapeCache, idx: int, req: PodRequest) -> None:
        old = c.score.pop(idx, None)
        if old is not None:
            bag = c.buckets[old]
            bag.remove(idx)
            if not bag.items:
                del c.buckets[old]
            c.choice.pop(idx, None)
        view = self.cluster.views[idx]
        if not view.fits(req):
            return
        self.evaluations += 1
        s, gpus = self.policy.score(view, req)
        c.score[idx] = s
        c.choice[idx] = gpus
        got = c.buckets.get(s)
        if got is None:
            got = c.buckets[s] = _Bag()
        got.add(idx)

    def select(self, req: PodRequest) -> tuple[int, tuple[int, ...]] | None:
        """The node (index) and GPUs for `req`, or None when no node fits."""
        c = self._cache.get(req)
        log = self.cluster.log
        n = len(self.cluster.views)
        if c is None:
            if len(self._cache) > 4096:
                self._cache.clear()
            c = self._cache[req] = _ShapeCache()
        epoch = self.policy.epoch()
        scope = self.policy.epoch_scope(c.epoch) if epoch != c.epoch else frozenset()
        if c.seq < 0 or len(log) - c.seq > n or scope is None:
            c.score.clear()
            c.choice.clear()
            c.buckets.clear()
            for idx in range(n):
                self._update(c, idx, req)
        elif len(log) > c.seq or scope:
            for idx in set(log[c.seq :]) | scope:
                self._update(c, idx, req)
        c.epoch = epoch
        c.seq = len(log)
        if not c.buckets:
            return None
        top = max(c.buckets)
        items = c.buckets[top].items
        if len(items) == 1:
            idx = items[0]
        elif self.tie_break in ("order", "name") and not self.policy.random_gpu:
            idx = min(items, key=self.rank.__getitem__)
        else:
            idx = items[self.rng.randrange(len(items))]
        gpus = c.choice[idx]
        if self.policy.random_gpu:
            gpus = self.policy.choose_random(self.cluster.views[idx], req, self.rng)
        return idx, gpus


# -- the paper's experiment ------------------------------------------------------------------------


@dataclass
class PlacementRun:
    policy: str
    seed: int
    pods: int
    placed: int
    failed: int
    capacity_milli: int
    arrived: list[int]  # cumulative GPU milli requested, after each pod
    allocated: list[int]  # cumulative GPU milli allocated, after each pod
    seconds: float
    allocator_calls: int
    allocator_seconds: float
    evaluations: int
    cpu_seconds: float = 0.0
    nodes: list[tuple[str, str | None]] = field(default_factory=list)  # (pod, node or None) per pod

    def curve(self, step: int = 1, until: int = 130) -> list[tuple[int, float]]:
        """(arrived workload %, GPU allocation %) at x = 0, step, ... until: the allocation when the arrived
        GPU request last was at most x% of capacity (the artifact's discrete analysis)."""
        out = []
        j = -1
        cap = self.capacity_milli
        for x in range(0, until + 1, step):
            limit = x * cap / 100
            while j + 1 < len(self.arrived) and self.arrived[j + 1] <= limit:
                j += 1
            alloc = self.allocated[j] if j >= 0 else 0
            out.append((x, round(100 * alloc / cap, 3)))
        return out

    def allocation_at(self, x: float) -> float:
        limit = x * self.capacity_milli / 100
        alloc = 0
        for a, b in zip(self.arrived, self.allocated, strict=True):
            if a > limit:
                break
            alloc = b
        return 100 * alloc / self.capacity_milli

    def arrived_at(self, x: float = 100) -> float:
        """The GPU request arrived, in % of capacity, at the pod where `allocation_at(x)` is read: below x
        when the list (not inflated, or a small fleet) stops short, and the gap is unallocated whatever the
        placement."""
        limit = x * self.capacity_milli / 100
        got = 0
        for a in self.arrived:
            if a > limit:
                break
            got = a
        return 100 * got / self.capacity_milli

    def unallocated_at(self, x: float = 100) -> float:
        """Unallocated GPU % of capacity when the arrived workload reached x% of capacity."""
        return 100 - self.allocation_at(x)


def run_placement(
    trace: Trace,
    policy: Policy,
    seed: int,
    *,
    inflate_ratio: float = 1.3,
    shares: bool = True,
    use_allocator: bool = True,
    progress: Progress | None = None,
    cluster: ReplayCluster | None = None,
    tie_break: str = "order",
    features: FeatureGates | None = None,
    online: bool = False,
    stop_at: float | None = None,
) -> PlacementRun:
    """Inflate (seeded), shuffle, place pods one at a time, never removing any; record the GPU
    allocation against the arrived workload. The policy is handed the pod list before the first pod
    (offline), or, `online`, learns the workload from the pods as they arrive, as a live scheduler does.
    `stop_at`: stop before the pod that takes the arrived request past this % of capacity (the figures up
    to it are the same; pods past 100% mostly fail to fit on every node, the costliest placements)."""
    t0 = time.perf_counter()
    c0 = time.process_time()
    pods = (
        inflate(trace.pods, trace.gpu_capacity_milli, inflate_ratio, seed)
        if stop_at is None
        else arrivals(trace, seed, stop_at, inflate_ratio)
    )
    cl = cluster or ReplayCluster(trace.nodes, shares=shares, use_allocator=use_allocator, features=features)
    if not online:
        policy.prepare([p.request for p in trace.pods])
    policy.prepare_fleet(cl.views)
    placer = Placer(cl, policy, seed, tie_break)
    arrived: list[int] = []
    allocated: list[int] = []
    a_sum = 0
    alloc_sum = 0
    placed = 0
    total = len(pods)
    nodes: list[tuple[str, str | None]] = []
    for i, tp in enumerate(pods):
        req = tp.request
        if not shares and req.is_share:
            req = dataclasses.replace(req, gpu_milli=MILLI)  # device plugin: a share takes a whole GPU
        a_sum += tp.request.total_milli
        if online:
            policy.learn(tp.request)
        got = placer.select(req)
        if got is not None:
            idx, gpus = got
            cl.placed.append((tp.request, cl.bind(idx, tp.name, req, gpus, policy)))
            alloc_sum += req.total_milli
            placed += 1
        nodes.append((tp.name, cl.views[got[0]].name if got is not None else None))
        arrived.append(a_sum)
        allocated.append(alloc_sum)
        if progress is not None and (i & 255) == 0:
            progress(i, total)
    if progress is not None:
        progress(total, total)
    return PlacementRun(
        policy.name,
        seed,
        total,
        placed,
        total - placed,
        cl.capacity_milli,
        arrived,
        allocated,
        time.perf_counter() - t0,
        cl.allocator_calls,
        cl.allocator_seconds,
        placer.evaluations,
        time.process_time() - c0,
        nodes,
    )
