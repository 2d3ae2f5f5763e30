"""Variants of a trace's pod list, to judge placement policies on workloads they were not tuned on.

Each variant rewrites a seeded random share of the pods and keeps the rest, so the list keeps the trace's
size, names and arrival structure while its mix moves:

- `fractional`: more GPU-sharing pods: whole single-GPU pods become a share pod's request (CPU, memory and
  milli-GPU of a random share pod of the same list).
- `multi-gpu`: more multi-GPU pods: whole single-GPU pods ask for 2, 4 or 8 GPUs, CPU and memory scaled
  alike (capped at the largest node).
- `gpu-model`: pods pinned to GPU models (`gpu_spec`): a GPU pod gets one model (sometimes two) among those
  whose nodes can hold it, drawn by the model's share of the fleet's GPUs.
- `cpu-heavy`: CPU-heavy GPU pods: 2-4 times the CPU and twice the memory (capped at the largest node).
- `fine-shares`: GPU-sharing pods ask for a share drawn uniformly from 1-999 milli-GPU (sizes that rarely
  repeat, as a user's own list may have).
- `mixed`: the first four, each at half the rate.
- `generated:SEED`: a recipe drawn from the seed: one to three of the kinds above, each at a rate drawn
  from its range (`generate`). A policy is judged on generated recipes whose seeds it was not tuned on.

`family_recipe(family, seed)` draws a recipe of one family (FAMILIES: one kind at a rate drawn from its
range, or `mixtures` of two to four kinds) for benchmarks/bench_replay_variants.py's table;
`make_recipe_variant` applies any recipe.

`make_variant(trace, "fractional", seed=7, rate=0.5)`; the CLI takes `--variant fractional:7` (or
`generated:7`). The same trace, kind, seed and rate give the same list.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping, Sequence

from kdra.errors import InputError
from kdra.replay.trace import Trace, TraceNode, TracePod
from kdra.scheduler.gpupolicies import MILLI, PodRequest

VARIANTS = ("fractional", "multi-gpu", "gpu-model", "cpu-heavy", "fine-shares", "mixed", "generated")
DEFAULT_RATE = {"fractional": 0.5, "multi-gpu": 0.3, "gpu-model": 0.4, "cpu-heavy": 0.4, "fine-shares": 1.0}
# The rates a generated recipe draws from, per kind (up to every pod the kind can rewrite).
GENERATED_RATES = {
    "fractional": (0.1, 0.8),
    "multi-gpu": (0.05, 0.5),
    "gpu-model": (0.1, 1.0),
    "cpu-heavy": (0.1, 0.6),
    "fine-shares": (0.2, 1.0),
}


def _whole_single(r: PodRequest) -> bool:
    return r.num_gpu == 1 and r.gpu_milli == MILLI


class _Rewriter:
    def __init__(self, trace: Trace, rng: random.Random) -> None:
        self.rng = rng
        self.nodes = trace.nodes
        self.max_cpu = max(n.cpu for n in trace.nodes)
        self.max_mem = max(n.mem for n in trace.nodes)
        self.shares = [p.request for p in trace.pods if p.request.is_share]
        gpus_by_model: dict[str, int] = {}
        for n in trace.nodes:
            if n.gpus:
                gpus_by_model[n.model] = gpus_by_model.get(n.model, 0) + n.gpus
        self.models = sorted(gpus_by_model)
        self.model_gpus = gpus_by_model

    def fractional(self, r: PodRequest) -> PodRequest:
        if not _whole_single(r) or not self.shares:
            return r
        s = self.rng.choice(self.shares)
        return dataclasses.replace(r, cpu=s.cpu, mem=s.mem, gpu_milli=s.gpu_milli)

    def multi_gpu(self, r: PodRequest) -> PodRequest:
        if not _whole_single(r):
            return r
        k = self.rng.choices((2, 4, 8), weights=(5, 3, 2))[0]
        return dataclasses.replace(
            r, num_gpu=k, cpu=min(self.max_cpu, r.cpu * k), mem=min(self.max_mem, r.mem * k)
        )

    def _hosts(self, n: TraceNode, r: PodRequest) -> bool:
        return n.gpus >= r.num_gpu and n.cpu >= r.cpu and n.mem >= r.mem

    def gpu_model(self, r: PodRequest) -> PodRequest:
        if r.num_gpu == 0 or r.models:
            return r
        fit = [m for m in self.models if any(n.model == m and self._hosts(n, r) for n in self.nodes)]
        if not fit:
            return r
        weights = [self.model_gpus[m] for m in fit]
        first = self.rng.choices(fit, weights=weights)[0]
        models = [first]
        if len(fit) > 1 and self.rng.random() < 0.3:
            rest = [m for m in fit if m != first]
            models.append(self.rng.choices(rest, weights=[self.model_gpus[m] for m in rest])[0])
        return dataclasses.replace(r, models=tuple(sorted(models)))

    def cpu_heavy(self, r: PodRequest) -> PodRequest:
        if r.num_gpu == 0:
            return r
        f = self.rng.choice((2, 3, 4))
        return dataclasses.replace(r, cpu=min(self.max_cpu, r.cpu * f), mem=min(self.max_mem, r.mem * 2))

    def fine_shares(self, r: PodRequest) -> PodRequest:
        if not r.is_share:
            return r
        return dataclasses.replace(r, gpu_milli=self.rng.randrange(1, MILLI))


FAMILIES = (*sorted(GENERATED_RATES), "mixtures")


def generate(seed: int) -> dict[str, float]:
    """The recipe `generated:SEED` stands for: kind -> rate (module docstring)."""
    rng = random.Random(f"generated:{seed}")
    kinds = rng.sample(sorted(GENERATED_RATES), rng.choice((1, 1, 2, 3)))
    return {k: round(rng.uniform(*GENERATED_RATES[k]), 2) for k in sorted(kinds)}


def family_recipe(family: str, seed: int) -> dict[str, float]:
    """A recipe of one family (FAMILIES) drawn from the seed: the kind alone at a rate drawn from its
    range, or for `mixtures` two to four kinds, each at a rate drawn from its range."""
    if family not in FAMILIES:
        raise InputError(f"family: Unsupported value: {family!r}: supported values: {', '.join(FAMILIES)}")
    rng = random.Random(f"family:{family}:{seed}")
    kinds = [family] if family != "mixtures" else rng.sample(sorted(GENERATED_RATES), rng.choice((2, 3, 4)))
    return {k: round(rng.uniform(*GENERATED_RATES[k]), 2) for k in sorted(kinds)}


def make_variant(trace: Trace, kind: str, seed: int = 0, rate: float | None = None) -> Trace:
    """A copy of `trace` whose pod list is rewritten as the variant `kind` says (module docstring)."""
    if kind not in VARIANTS:
        raise InputError(f"--variant: Unsupported value: {kind!r}: supported values: {', '.join(VARIANTS)}")
    if kind == "mixed":
        recipe = {
            k: (rate if rate is not None else DEFAULT_RATE[k]) / 2
            for k in ("fractional", "multi-gpu", "gpu-model", "cpu-heavy")
        }
    elif kind == "generated":
        recipe = generate(seed)
    else:
        recipe = {kind: rate if rate is not None else DEFAULT_RATE[kind]}
    return make_recipe_variant(trace, recipe, f"{kind}:{seed}")


def make_recipe_variant(trace: Trace, recipe: Mapping[str, float], label: str) -> Trace:
    """A copy of `trace` with each kind of `recipe` (kind -> rate) applied to that share of its pods,
    drawn from `label` (the same label, the same list)."""
    rng = random.Random(label)
    rw = _Rewriter(trace, rng)
    table: dict[str, Callable[[PodRequest], PodRequest]] = {
        "fractional": rw.fractional,
        "multi-gpu": rw.multi_gpu,
        "gpu-model": rw.gpu_model,
        "cpu-heavy": rw.cpu_heavy,
        "fine-shares": rw.fine_shares,
    }
    # In the order of the table, so that a share made by `fractional` can be resized by `fine-shares`.
    steps = [(fn, recipe[k]) for k, fn in table.items() if k in recipe]
    pods: list[TracePod] = []
    for p in sorted(trace.pods, key=lambda p: p.name):
        r = p.request
        for fn, share in steps:
            if rng.random() < share:
                r = fn(r)
        pods.append(dataclasses.replace(p, request=r) if r is not p.request else p)
    return Trace(list(trace.nodes), pods, trace.nodes_source, f"{trace.pods_source} ({label})")


def parse_variant(text: str) -> tuple[str, int]:
    """`KIND` or `KIND:SEED` (the CLI's --variant)."""
    kind, _, seed = text.partition(":")
    if kind not in VARIANTS:
        raise InputError(f"--variant: Unsupported value: {kind!r}: supported values: {', '.join(VARIANTS)}")
    if not seed:
        return kind, 0
    try:
        return kind, int(seed)
    except ValueError:
        raise InputError(
            f"--variant: Invalid value: {text!r}: the seed after ':' must be an integer"
        ) from None


def describe(trace: Trace) -> dict[str, float]:
    """The mix of a pod list: shares of GPU-sharing, multi-GPU, model-pinned pods; CPU per GPU."""
    pods: Sequence[TracePod] = trace.pods
    gpu = [p.request for p in pods if p.request.num_gpu]
    n = max(1, len(pods))
    return {
        "pods": len(pods),
        "share_pods_pct": round(100 * sum(1 for r in gpu if r.is_share) / n, 1),
        "multi_gpu_pods_pct": round(100 * sum(1 for r in gpu if r.num_gpu > 1) / n, 1),
        "pinned_pods_pct": round(100 * sum(1 for r in gpu if r.models) / n, 1),
        "cpu_cores_per_gpu": round(
            sum(r.cpu for r in gpu) / 1000 / max(1, sum(r.total_milli for r in gpu) / 1000), 2
        ),
    }
