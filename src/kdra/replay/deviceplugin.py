"""Device-plugin integer GPUs against DRA shares on the same trace.

Under the device plugin (`nvidia.com/gpu: 1`), a pod asking for 0.3 of a GPU gets a whole GPU; under DRA
with consumable shares it gets 300 of the GPU's 1000 shares and the rest stays allocatable. Three figures:

- pods placed: the default pod list (not inflated), shuffled, placed once, never removed;
- GPUs needed to host the trace: the same list on a fleet twice the size (nothing fails), counting GPUs
  with any allocation;
- stranded GPU memory: memory of GPUs held by pods that did not ask for it (device plugin: the unrequested
  part of every rounded-up share; DRA: none is held, the idle part of shared GPUs is reported separately
  as "idle on shared GPUs", which later pods can still use).

Both models use the same placement policy and the same allocator; only the fleet (exclusive devices vs
shares) and the claims (whole GPUs vs shares) differ.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from kdra.api.features import FeatureGates
from kdra.drivers.catalog import lookup
from kdra.fleets.openb import MODEL_MAP
from kdra.replay.engine import ReplayCluster, run_placement
from kdra.replay.timed import run_timed
from kdra.replay.trace import Trace, TraceNode
from kdra.scheduler.gpupolicies import MILLI, make_policy


def gpu_memory_mib(model: str) -> int:
    if not model:
        return 0
    return int(getattr(lookup(MODEL_MAP[model]), "memory_mib", 0))


@dataclass
class ModelFigures:
    model: str  # "dra-shares" | "device-plugin"
    pods: int
    placed: int
    gpu_pods_placed: int
    share_pods_placed: int
    gpus_allocated: float  # GPU capacity held by placed pods (GPUs)
    gpus_needed: int  # GPUs with any allocation when the whole list is hosted (doubled fleet, or larger)
    stranded_gib: float  # GPU memory held but not requested
    idle_on_shared_gib: float  # DRA: idle memory on GPUs that are partly shared
    timed: dict[str, Any] | None = None
    unhostable: int = 0  # pods no node of the fleet's shapes can run: left out of gpus_needed

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["gpus_allocated"] = round(self.gpus_allocated, 1)
        out["stranded_gib"] = round(self.stranded_gib, 1)
        out["idle_on_shared_gib"] = round(self.idle_on_shared_gib, 1)
        return out


def _doubled(nodes: list[TraceNode]) -> list[TraceNode]:
    return nodes + [dataclasses.replace(n, name=f"{n.name}-x2") for n in nodes]


def _copies(nodes: list[TraceNode], k: int) -> list[TraceNode]:
    return nodes + [dataclasses.replace(n, name=f"{n.name}-x{c}") for c in range(2, k + 1) for n in nodes]


MAX_COPIES = 64  # the largest fleet tried to host the whole list: this many copies of each node


def compare(
    trace: Trace,
    policy: str = "kdra",
    seed: int = 42,
    *,
    timed: bool = False,
    compress: float = 1.0,
    use_allocator: bool = True,
    features: FeatureGates | None = None,
) -> dict[str, ModelFigures]:
    out: dict[str, ModelFigures] = {}
    mem_by_node = {n.name: gpu_memory_mib(n.model) for n in trace.nodes}
    for shares in (True, False):
        label = "dra-shares" if shares else "device-plugin"
        cluster = ReplayCluster(trace.nodes, shares=shares, use_allocator=use_allocator, features=features)
        run = run_placement(trace, make_policy(policy), seed, inflate_ratio=0, shares=shares, cluster=cluster)
        gpu_pods = share_pods = 0
        stranded = 0.0
        idle_shared = 0.0
        # Walk the final views: which GPUs are held, and by how much.
        held = cluster.capacity_milli - sum(sum(v.gpu_free) for v in cluster.views)
        for v in cluster.views:
            mem = mem_by_node.get(v.name, 0)
            for f in v.gpu_free:
                if shares and 0 < f < MILLI:
                    idle_shared += f / MILLI * mem
        # Pods placed, and (device plugin) the unrequested memory of rounded-up shares.
        for req, b in cluster.placed:
            if req.num_gpu:
                gpu_pods += 1
            if req.is_share:
                share_pods += 1
                if not shares:
                    stranded += (
                        (MILLI - req.gpu_milli) / MILLI * mem_by_node.get(cluster.views[b.node].name, 0)
                    )
        # Hosting the whole list: the fleet doubled, and doubled again while pods still fail and fewer fail
        # each time. (Only doubled, a list that needs more than twice the fleet was said to need the GPUs
        # of the pods that fit, with no word of the rest: 30 whole-GPU pods on 10 GPUs "needed 20".)
        copies, last_failed = 2, None
        while True:
            nodes = _copies(trace.nodes, copies)
            big = ReplayCluster(nodes, shares=shares, use_allocator=use_allocator, features=features)
            hosted = Trace(nodes, trace.pods, trace.nodes_source, trace.pods_source)
            host = run_placement(
                hosted, make_policy(policy), seed, inflate_ratio=0, shares=shares, cluster=big
            )
            if (
                not host.failed
                or copies >= MAX_COPIES
                or (last_failed is not None and host.failed >= last_failed)
            ):
                break
            last_failed, copies = host.failed, copies * 2
        needed = sum(1 for v in big.views for f in v.gpu_free if f < MILLI)
        fig = ModelFigures(
            label,
            run.pods,
            run.placed,
            gpu_pods,
            share_pods,
            held / MILLI,
            needed,
            stranded / 1024,
            idle_shared / 1024,
            unhostable=host.failed,
        )
        if timed:
            fig.timed = run_timed(
                trace, make_policy(policy), shares=shares, seed=seed, compress=compress, features=features
            ).to_dict()
        out[label] = fig
    return out
