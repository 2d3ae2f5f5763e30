"""What one unit costs on an empty node of each type, measured with the real checks and cached per unit shape:
whether it fits at all (and why not), how many copies of it fill the node, and what it consumes (cpu, memory,
pods, whole-GPU equivalents of the devices it got). The search ranks types with it; the lower bound is
built from it (kdra.plan.bound)."""

from __future__ import annotations

from dataclasses import dataclass

from kdra.allocator import FeatureGates
from kdra.allocator.summary import NodeFinding
from kdra.plan.bins import Bin, copies, new_bin
from kdra.plan.demand import Unit
from kdra.plan.nodetypes import NodeType
from kdra.sim.accounting import FleetGpus

# A node holds at most this many copies of one shape in the fill (kubelet's default pod limit is 110).
FILL_LIMIT = 128


@dataclass(frozen=True)
class Probe:
    fits: bool
    finding: NodeFinding | None  # why not, when it does not fit
    per_node: int  # copies that fit on one empty node (0 when none)
    use: dict[str, float]  # fraction of the node's cpu, memory, pods and GPUs one copy takes


def _fractions(b: Bin, gpus: FleetGpus, template_name: str) -> dict[str, float]:
    info = b.fit.infos[b.fit_name]
    alloc = info.allocatable
    out: dict[str, float] = {}
    for res in ("cpu", "memory"):
        cap = alloc.get(res) or 0
        out[res] = info.requested.get(res, 0) / cap if cap else 0.0
    pods_cap = alloc.get("pods") or 0
    out["pods"] = len(info.pods) / pods_cap if pods_cap else 0.0
    n_gpus = gpus.node_gpus.get(template_name, 0)
    if n_gpus:
        used = sum(
            gpus.dra_result_cost(r).gpu_equiv
            for p in b.placements
            for _, a in p.allocations
            for r in (a.get("devices") or {}).get("results") or []
        )
        out["gpus"] = used / n_gpus
    return out


class Prober:
    def __init__(self, types: list[NodeType], features: FeatureGates) -> None:
        self.types = types
        self.features = features
        self.cache: dict[tuple[str, str], Probe] = {}
        self.gpus = {t.name: FleetGpus([t.template, *t.slices]) for t in types}

    def probe(self, unit: Unit, t: NodeType) -> Probe:
        key = (unit.shape, t.name)
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        b = new_bin(t, t.name, self.features)
        first = b.place(unit)
        if isinstance(first, NodeFinding):
            probe = Probe(False, first, 0, {})
        else:
            use = _fractions(b, self.gpus[t.name], t.name)
            n = 1
            for c in copies(unit, FILL_LIMIT - 1):
                if isinstance(b.place(c), NodeFinding):
                    break
                n += 1
            probe = Probe(True, None, n, use)
        self.cache[key] = probe
        return probe

    def fitting(self, unit: Unit) -> list[NodeType]:
        return [t for t in self.types if self.probe(unit, t).fits]
