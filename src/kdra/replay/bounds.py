"""Lower bounds on the unallocated GPU capacity a replay can reach (issue 30, item 2).

Two linear-programming bounds, solved by column generation (Gilmore and Gomory's configuration LP) with
scipy's HiGHS (`scipy` is a test/benchmark dependency, imported here only when a bound is computed):

- `bin_lp_bound`: the fewest GPUs a set of shares (milli-GPU < 1,000) fits in, at least. Every share must
  be packed; a pattern is a set of shares that fits one GPU. At least as tight as Martello and Toth's L2.

- `placement_bound`: the most milli-GPU any placement of a set of pods can allocate, at most, so the
  least unallocated GPU capacity. Any subset of the pods may stay unplaced (failing a badly fitting share
  and giving its GPU to a whole-GPU pod can waste less than placing it). The fleet is relaxed to groups of
  alike nodes: per group its GPUs, CPU, memory and pod slots in total (a pod's CPU and memory come from
  the group of the GPUs it holds; node boundaries are ignored, so a multi-GPU pod needs only as many GPUs
  of a group whose nodes have that many). Shares still pack GPU by GPU. With a single group and no CPU or
  memory limit it is the GPU-only relaxation.

Both are valid whatever the LP solver's tolerances or iteration limit: the returned figure is the
Lagrangian bound of the duals the last restricted LP gave (weak duality), priced exactly by a bounded
knapsack over the 1,000 milli of one GPU; at convergence it equals the LP optimum.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

MILLI = 1000


@dataclass(frozen=True, slots=True)
class ShareItem:
    """One kind of share: milli-GPU, CPU, memory, the GPU models it accepts (() = any)."""

    milli: int
    cpu: int = 0
    mem: int = 0
    models: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class WholeItem:
    """One kind of whole-GPU pod: GPUs, CPU, memory, accepted models."""

    gpus: int
    cpu: int = 0
    mem: int = 0
    models: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeGroup:
    """`count` alike nodes: GPUs per node, CPU and memory per node (None: unlimited), model, pod slots."""

    count: int
    gpus: int
    cpu: int | None = None
    mem: int | None = None
    model: str = ""
    max_pods: int | None = None


@dataclass
class Bound:
    value: float  # the bound (GPUs for bin_lp_bound, milli-GPU for placement_bound)
    lp: float  # the last restricted LP's optimum (equal to value at convergence)
    iterations: int
    converged: bool
    columns: int
    detail: dict[str, Any] = field(default_factory=dict)


def _knapsack(
    sizes: Sequence[int], values: Sequence[float], counts: Sequence[int], capacity: int
) -> tuple[float, list[int]]:
    """Bounded knapsack: the most total value of item multiples (at most counts[i] of item i) whose sizes
    sum to at most `capacity`, and how many of each. Items of non-positive value are never taken."""
    import numpy as np

    dp = np.zeros(capacity + 1)
    taken: list[tuple[int, int, Any]] = []  # (item, multiple, mask of capacities where it was taken)
    for i, (w, v, n) in enumerate(zip(sizes, values, counts, strict=True)):
        if v <= 0 or w <= 0 or n <= 0 or w > capacity:
            continue
        n = min(n, capacity // w)
        k = 1
        while n > 0:  # binary splitting: pieces 1, 2, 4, ... and the rest
            m = min(k, n)
            n -= m
            k *= 2
            ww, vv = w * m, v * m
            if ww > capacity:
                break
            cand = dp[:-ww] + vv
            mask = np.zeros(capacity + 1, dtype=bool)
            mask[ww:] = cand > dp[ww:] + 1e-12
            dp[ww:] = np.where(mask[ww:], cand, dp[ww:])
            taken.append((i, m, mask))
    best_c = int(np.argmax(dp))
    best = float(dp[best_c])
    out = [0] * len(sizes)
    c = best_c
    for i, m, mask in reversed(taken):
        if mask[c]:
            out[i] += m
            c -= sizes[i] * m
    return best, out


def l2_bound(sizes: list[int], capacity: int) -> int:
    """Martello and Toth's L2: the fewest bins of `capacity` the sizes could fit in is at least this."""
    best = 0
    half = capacity / 2
    cuts = sorted({0, *(s for s in sizes if s <= half)})
    for k in cuts:
        big = [s for s in sizes if s > capacity - k]
        mid = [s for s in sizes if half < s <= capacity - k]
        small = sum(s for s in sizes if k <= s <= half)
        room = len(mid) * capacity - sum(mid)
        extra = max(0, -(-(small - room) // capacity))
        best = max(best, len(big) + len(mid) + extra)
    return max(best, -(-sum(sizes) // capacity))


def _linprog(c: Any, a_ub: Any, b_ub: Any, bounds: Any) -> tuple[float, Any, Any]:
    from scipy.optimize import linprog

    res = linprog(c, A_ub=a_ub, b_ub=b_ub, bounds=bounds, method="highs")
    if res.status != 0:
        raise RuntimeError(f"LP failed: {res.message}")
    return float(res.fun), -res.ineqlin.marginals, res.x


def bin_lp_bound(sizes: Iterable[int], capacity: int = MILLI, max_iterations: int = 500) -> Bound:
    """At least how many bins of `capacity` the sizes need (the configuration LP, rounded up)."""
    import numpy as np

    counts = Counter(s for s in sizes if s > 0)
    if any(s > capacity for s in counts):
        raise ValueError(f"an item exceeds the capacity {capacity}")
    kinds = sorted(counts, reverse=True)
    if not kinds:
        return Bound(0, 0.0, 0, True, 0)
    n = np.array([counts[s] for s in kinds], dtype=float)
    # start: one pattern per kind, as many of it as fit
    patterns = [[(capacity // s if j == i else 0) for j in range(len(kinds))] for i, s in enumerate(kinds)]
    lagr = 0.0
    lp = 0.0
    converged = False
    it = 0
    for it in range(1, max_iterations + 1):  # noqa: B007
        a = np.array(patterns, dtype=float).T  # kinds x patterns
        # min sum x  s.t.  A x >= n  ->  -A x <= -n
        lp, duals, x = _linprog(np.ones(a.shape[1]), -a, -n, (0, None))
        u = np.maximum(duals, 0.0)
        best, pat = _knapsack(kinds, list(u), [int(x) for x in n], capacity)
        # Farley: every bin holds at most `best` of dual value, so at least u.n / best bins
        lagr = max(lagr, float(u @ n) / max(best, 1.0))
        if best <= 1 + 1e-9 or pat in patterns:
            converged = best <= 1 + 1e-9
            break
        patterns.append(pat)
    value = math.ceil(lagr - 1e-6)
    return Bound(
        value,
        lp,
        it,
        converged,
        len(patterns),
        {"packing": _round_packing(kinds, counts, patterns, x, capacity)},
    )


def _round_packing(
    kinds: list[int], counts: Counter[int], patterns: list[list[int]], x: Any, capacity: int
) -> int:
    """Bins of an actual packing from the LP's: each pattern as many times as the LP uses it whole, then
    what is left by first-fit decreasing (an upper bound on the fewest bins, to set beside the LP's)."""
    from kdra.scheduler.shareplan import first_fit_decreasing

    left = {s: counts[s] for s in kinds}
    bins = 0
    for pat, xv in zip(patterns, x, strict=False):
        for _ in range(math.floor(float(xv) + 1e-9)):
            took = False
            for s, c in zip(kinds, pat, strict=True):
                k = min(c, left[s])
                if k:
                    left[s] -= k
                    took = True
            bins += took
    rest = [s for s in kinds for _ in range(left[s])]
    return bins + len(first_fit_decreasing(rest, capacity))


def _items_of(pods: Iterable[Any]) -> tuple[Counter[ShareItem], Counter[WholeItem]]:
    shares: Counter[ShareItem] = Counter()
    whole: Counter[WholeItem] = Counter()
    for r in pods:
        if r.num_gpu == 0:
            continue
        if r.is_share:
            shares[ShareItem(r.gpu_milli, r.cpu, r.mem, tuple(r.models))] += 1
        else:
            whole[WholeItem(r.num_gpu, r.cpu, r.mem, tuple(r.models))] += 1
    return shares, whole


def node_groups(nodes: Iterable[Any], resources: bool = True) -> list[NodeGroup]:
    """Trace nodes (kdra.replay.trace.TraceNode) with GPUs grouped by shape; `resources=False`: one group
    of all GPUs, no CPU, memory, model or pod-slot limit (the GPU-only relaxation)."""
    from kdra.scheduler.gpupolicies import MAX_PODS

    gpu_nodes = [n for n in nodes if n.gpus]
    if not resources:
        return [NodeGroup(1, sum(n.gpus for n in gpu_nodes))]
    shapes = Counter((n.gpus, n.cpu, n.mem, n.model) for n in gpu_nodes)
    return [NodeGroup(c, g, cpu, mem, model, MAX_PODS) for (g, cpu, mem, model), c in sorted(shapes.items())]


def placement_bound(pods: Iterable[Any], groups: Sequence[NodeGroup], max_iterations: int = 400) -> Bound:
    """At most how much milli-GPU any placement of `pods` (PodRequest-like: cpu, mem, num_gpu, gpu_milli,
    models, is_share; CPU-only pods are ignored: placing them allocates no GPU) on `groups` allocates.

    LP: x[k,p] >= 0 GPUs of group k holding share pattern p, y[k,t] >= 0 whole pods of kind t in group k;
    maximise the milli-GPU placed subject to, per share kind and whole kind, at most its count placed, and,
    per group, GPUs, CPU, memory and pod slots within the group's totals."""
    import numpy as np

    share_count, whole_count = _items_of(pods)
    shares = sorted(share_count, key=lambda s: (-s.milli, s.cpu, s.mem, s.models))
    wholes = sorted(whole_count, key=lambda w: (-w.gpus, w.cpu, w.mem, w.models))
    ns, nw, ng = len(shares), len(wholes), len(groups)
    big = float("inf")

    def lim(v: int | None, count: int) -> float:
        return big if v is None else float(v) * count

    gpu_cap = [float(g.count * g.gpus) for g in groups]
    cpu_cap = [lim(g.cpu, g.count) for g in groups]
    mem_cap = [lim(g.mem, g.count) for g in groups]
    pod_cap = [lim(g.max_pods, g.count) for g in groups]
    res_caps = [cpu_cap, mem_cap, pod_cap]
    # rows: shares (ns), wholes (nw), then per group: gpu, cpu, mem, pods (only the finite ones)
    rows: list[tuple[str, int]] = [("gpu", k) for k in range(ng)]
    for r, caps in enumerate(res_caps):
        rows += [(("cpu", "mem", "pods")[r], k) for k in range(ng) if caps[k] < big]
    row_of = {key: ns + nw + i for i, key in enumerate(rows)}
    b = np.array(
        [float(share_count[s]) for s in shares]
        + [float(whole_count[w]) for w in wholes]
        + [{"gpu": gpu_cap, "cpu": cpu_cap, "mem": mem_cap, "pods": pod_cap}[name][k] for name, k in rows]
    )
    allowed_s = [[not s.models or g.model in s.models for s in shares] for g in groups]

    def whole_ok(g: NodeGroup, w: WholeItem) -> bool:
        return g.gpus >= w.gpus and (not w.models or g.model in w.models) and g.count > 0

    # columns: (group, kind, coefficients as {row: value}, objective)
    cols: list[tuple[int, Any, dict[int, float], float]] = []
    for k, g in enumerate(groups):
        for t, w in enumerate(wholes):
            if not whole_ok(g, w):
                continue
            coef = {t + ns: 1.0, row_of[("gpu", k)]: float(w.gpus)}
            for name, v in (("cpu", w.cpu), ("mem", w.mem), ("pods", 1)):
                if (name, k) in row_of:
                    coef[row_of[(name, k)]] = float(v)
            cols.append((k, ("whole", t), coef, float(w.gpus * MILLI)))
    seen: set[tuple[int, tuple[int, ...]]] = set()

    def add_pattern(k: int, pat: list[int]) -> bool:
        key = (k, tuple(pat))
        if key in seen or not any(pat):
            return False
        seen.add(key)
        coef: dict[int, float] = {row_of[("gpu", k)]: 1.0}
        cpu = mem = npods = milli = 0
        for i, c in enumerate(pat):
            if c:
                coef[i] = float(c)
                cpu += c * shares[i].cpu
                mem += c * shares[i].mem
                npods += c
                milli += c * shares[i].milli
        for name, v in (("cpu", cpu), ("mem", mem), ("pods", npods)):
            if (name, k) in row_of:
                coef[row_of[(name, k)]] = float(v)
        cols.append((k, ("share", key[1]), coef, float(milli)))
        return True

    for k, g in enumerate(groups):  # start: each share kind alone, as many as fit one GPU
        if g.count * g.gpus == 0:
            continue
        for i, s in enumerate(shares):
            if allowed_s[k][i]:
                pat = [0] * ns
                pat[i] = min(share_count[s], MILLI // s.milli)
                add_pattern(k, pat)

    nrows = len(b)
    lp = 0.0
    best_ub = big
    converged = False
    split = {"whole": 0.0, "share": 0.0}
    it = 0
    for it in range(1, max_iterations + 1):
        if not cols:
            return Bound(0.0, 0.0, it, True, 0)
        a = np.zeros((nrows, len(cols)))
        c = np.zeros(len(cols))
        for j, (_k, _kind, coef, obj) in enumerate(cols):
            for r, val in coef.items():
                a[r, j] = val
            c[j] = -obj
        finite = np.isfinite(b)
        neg, duals_f, x = _linprog(c, a[finite], b[finite], (0, None))
        lp = -neg
        # the LP's placement: milli-GPU of whole pods and of shares (what it leaves out, by kind)
        split = dict.fromkeys(split, 0.0)
        for j, (_k, kind, _coef, obj) in enumerate(cols):
            split[kind[0]] += obj * float(x[j])
        duals = np.zeros(nrows)
        duals[finite] = np.maximum(duals_f, 0.0)
        # Lagrangian bound of these duals: b.duals + the most any column could add beyond them
        ub = float(duals[finite] @ b[finite])
        added = 0
        for k, g in enumerate(groups):
            if g.count * g.gpus == 0:
                continue
            gk = row_of[("gpu", k)]
            extra = [
                duals[row_of[(name, k)]] if (name, k) in row_of else 0.0 for name in ("cpu", "mem", "pods")
            ]
            vals = [
                (s.milli - duals[i] - s.cpu * extra[0] - s.mem * extra[1] - extra[2])
                if allowed_s[k][i]
                else 0.0
                for i, s in enumerate(shares)
            ]
            best, pat = _knapsack([s.milli for s in shares], vals, [share_count[s] for s in shares], MILLI)
            rc = best - duals[gk]
            ub += gpu_cap[k] * max(0.0, rc)
            if rc > 1e-6 and add_pattern(k, pat):
                added += 1
            for t, w in enumerate(wholes):  # whole kinds are all columns already; any positive rc counts
                if whole_ok(g, w):
                    rcw = w.gpus * MILLI - duals[ns + t] - w.gpus * duals[gk]
                    rcw -= w.cpu * extra[0] + w.mem * extra[1] + extra[2]
                    ub += max(0.0, rcw) * min(float(whole_count[w]), gpu_cap[k] // w.gpus)
        best_ub = min(best_ub, ub)
        if added == 0:
            converged = best_ub - lp < 1e-6 * max(1.0, lp)
            break
    return Bound(
        min(
            best_ub,
            float(
                sum(b[:ns] * [s.milli for s in shares]) + sum(whole_count[w] * w.gpus * MILLI for w in wholes)
            ),
        ),
        lp,
        it,
        converged,
        len(cols),
        {
            "lp_whole_milli": split["whole"],
            "lp_share_milli": split["share"],
            "whole_milli": float(sum(whole_count[w] * w.gpus * MILLI for w in wholes)),
            "share_milli": float(sum(share_count[s] * s.milli for s in shares)),
        },
    )


@dataclass
class Exact:
    """The offline optimum (or the best found and a bound on it) of placing pods on nodes: milli-GPU."""

    placed: float  # the best placement found (milli-GPU), achievable
    bound: float  # no placement places more (HiGHS's dual bound)
    optimal: bool
    gap: float  # (bound - placed) / placed
    seconds: float
    status: str


def exact_placement(
    nodes: Sequence[Any], pods: Iterable[Any], time_limit: float = 120.0, upper: float | None = None
) -> Exact:
    """The most milli-GPU any placement of `pods` (any subset unplaced) on `nodes` allocates, as the replay
    enforces them: per node CPU, memory, pod slots and GPU model; a whole-GPU pod takes `num_gpu` idle GPUs
    of one node; shares share a GPU up to 1,000 milli; GPUs holding shares take no whole pod. CPU-only pods
    allocate no GPU and are left out (leaving them unplaced frees room). A MIP (scipy.optimize.milp, HiGHS)
    with pods of one kind counted together per node (and per GPU for shares); `time_limit` seconds at most,
    then the best placement found and HiGHS's bound on the optimum. `upper`: a known bound on the optimum
    (placement_bound's), added as a cut: milli-GPU are integers, so the optimum is at most its floor."""
    import time

    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    share_count, whole_count = _items_of(pods)
    shares = sorted(share_count, key=lambda s: (-s.milli, s.cpu, s.mem, s.models))
    wholes = sorted(whole_count, key=lambda w: (-w.gpus, w.cpu, w.mem, w.models))
    from kdra.scheduler.gpupolicies import MAX_PODS

    gpu_nodes = [n for n in nodes if n.gpus]
    obj: list[float] = []
    ub: list[float] = []
    integral: list[int] = []

    def var(o: float, hi: float, integer: bool = True) -> int:
        obj.append(o)
        ub.append(hi)
        integral.append(1 if integer else 0)
        return len(obj) - 1

    rows: list[tuple[dict[int, float], float]] = []  # sum coef x <= rhs
    per_share: list[dict[int, float]] = [{} for _ in shares]
    per_whole: list[dict[int, float]] = [{} for _ in wholes]
    for n in gpu_nodes:
        cpu: dict[int, float] = {}
        mem: dict[int, float] = {}
        cnt: dict[int, float] = {}
        gpus: dict[int, float] = {}
        used_prev = -1
        for _q in range(n.gpus):
            used = var(0.0, 1.0)  # this GPU holds shares
            gpus[used] = 1.0
            load: dict[int, float] = {used: -float(MILLI)}
            for i, s in enumerate(shares):
                if (s.models and n.model not in s.models) or s.cpu > n.cpu or s.mem > n.mem:
                    continue
                x = var(float(s.milli), float(min(share_count[s], MILLI // s.milli)))
                load[x] = float(s.milli)
                per_share[i][x] = 1.0
                cpu[x], mem[x], cnt[x] = float(s.cpu), float(s.mem), 1.0
            rows.append((load, 0.0))
            if used_prev >= 0:  # GPUs of a node are alike: the ones holding shares come first
                rows.append(({used: 1.0, used_prev: -1.0}, 0.0))
            used_prev = used
        for t, w in enumerate(wholes):
            if w.gpus > n.gpus or (w.models and n.model not in w.models) or w.cpu > n.cpu or w.mem > n.mem:
                continue
            y = var(float(w.gpus * MILLI), float(min(whole_count[w], n.gpus // w.gpus)))
            per_whole[t][y] = 1.0
            gpus[y] = float(w.gpus)
            cpu[y], mem[y], cnt[y] = float(w.cpu), float(w.mem), 1.0
        rows += [(gpus, float(n.gpus)), (cpu, float(n.cpu)), (mem, float(n.mem)), (cnt, float(MAX_PODS))]
    if upper is not None:
        rows.append(({j: o for j, o in enumerate(obj) if o}, float(math.floor(upper + 1e-6))))
    rows += [(r, float(share_count[s])) for r, s in zip(per_share, shares, strict=True) if r]
    rows += [(r, float(whole_count[w])) for r, w in zip(per_whole, wholes, strict=True) if r]
    ri, ci, vals = [], [], []
    for k, (coef, _rhs) in enumerate(rows):
        for j, v in coef.items():
            ri.append(k)
            ci.append(j)
            vals.append(v)
    a = coo_matrix((vals, (ri, ci)), shape=(len(rows), len(obj))).tocsr()
    rhs = np.array([r for _c, r in rows])
    t0 = time.perf_counter()
    res = milp(
        -np.array(obj),
        constraints=LinearConstraint(a, -np.inf, rhs),
        integrality=np.array(integral),
        bounds=Bounds(0, np.array(ub)),
        options={"time_limit": time_limit, "disp": False},
    )
    seconds = time.perf_counter() - t0
    placed = -float(res.fun) if res.x is not None else 0.0
    dual = getattr(res, "mip_dual_bound", None)
    bound = -float(dual) if dual is not None and np.isfinite(dual) else float("inf")
    bound = max(bound, placed)
    return Exact(placed, bound, res.status == 0, (bound - placed) / max(placed, 1.0), seconds, res.message)


__all__ = [
    "Bound",
    "Exact",
    "NodeGroup",
    "ShareItem",
    "WholeItem",
    "bin_lp_bound",
    "exact_placement",
    "l2_bound",
    "node_groups",
    "placement_bound",
]
