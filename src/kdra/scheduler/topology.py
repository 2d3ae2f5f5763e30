"""Topology levels from node labels, and the filter that keeps a gang inside one domain.

Levels are node label keys, coarsest first (default: zone > block > rack > host, the labels kdra's fleets
put on nodes; `kdra.dev/nvlink-domain` is a level too when a gang names it). A `Topology` object names them
like KAI's (`kai.scheduler/v1alpha1` or `kdra.dev/v1alpha1`):

```yaml
apiVersion: kdra.dev/v1alpha1
kind: Topology
metadata: {name: default}
spec:
  levels:
  - nodeLabel: topology.kubernetes.io/zone
  - nodeLabel: kdra.dev/block
  - nodeLabel: kdra.dev/rack
  - nodeLabel: kubernetes.io/hostname
```

A gang's `requiredTopologyLevel` puts all its members under one value of that label (one rack, one NVLink
domain) or leaves the gang pending; `preferredTopologyLevel` tries that level first, then each coarser level
(up to the required one), then anywhere. The gang action (kdra.scheduler.session) picks the domains to try
and sets the restriction; `GangTopology` applies it in Filter.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kdra.errors import InputError
from kdra.scheduler.framework import (
    SUCCESS,
    CycleState,
    FilterPlugin,
    PreFilterPlugin,
    Status,
    unschedulable,
)
from kdra.scheduler.podinfo import NodeInfo, PodInfo

LABEL_ZONE = "topology.kubernetes.io/zone"
LABEL_BLOCK = "kdra.dev/block"
LABEL_RACK = "kdra.dev/rack"
LABEL_NVLINK = "kdra.dev/nvlink-domain"
LABEL_HOST = "kubernetes.io/hostname"
DEFAULT_LEVELS = (LABEL_ZONE, LABEL_BLOCK, LABEL_RACK, LABEL_HOST)
STATE_KEY = "kdra/topology"


class TopologyLevels:
    def __init__(
        self, levels: Sequence[str] = DEFAULT_LEVELS, names: Mapping[str, str] | None = None
    ) -> None:
        self.levels = list(levels)
        self.names = dict(names or {})

    @classmethod
    def from_objects(cls, objs: Iterable[Mapping[str, Any]]) -> TopologyLevels:
        """The first Topology object (by name) wins; none gives the default levels."""
        topo = sorted(
            (o for o in objs if o.get("kind") == "Topology"), key=lambda o: o["metadata"].get("name", "")
        )
        if not topo:
            return cls()
        obj = topo[0]
        where = f"Topology {obj['metadata'].get('name', '')}: spec.levels"
        levels = []
        names = {}
        for i, lv in enumerate((obj.get("spec") or {}).get("levels") or []):
            label = (lv or {}).get("nodeLabel") if isinstance(lv, Mapping) else None
            if not label:
                raise InputError(f"{where}[{i}].nodeLabel: Required value")
            levels.append(str(label))
            if lv.get("name"):
                names[str(lv["name"])] = str(label)
        if not levels:
            raise InputError(f"{where}: Required value: at least one level")
        return cls(levels, names)

    def resolve(self, level: str) -> str:
        """A level name or label key -> the node label key."""
        return self.names.get(level, level)

    def coarser(self, label: str, up_to: str | None = None) -> list[str]:
        """Labels above `label` (nearest first), stopping at `up_to` (included)."""
        if label not in self.levels:
            return [up_to] if up_to and up_to != label else []
        out = []
        for lv in reversed(self.levels[: self.levels.index(label)]):
            out.append(lv)
            if lv == up_to:
                break
        return out


def domains(nodes: Iterable[NodeInfo], label: str) -> dict[str, list[NodeInfo]]:
    """Nodes by their value of `label` (nodes without it are in no domain)."""
    out: dict[str, list[NodeInfo]] = {}
    for ni in nodes:
        v = ni.labels.get(label)
        if v is not None:
            out.setdefault(v, []).append(ni)
    return out


@dataclass
class _Room:
    seq: int  # the cache's change_seq the figures are current at
    per_node: dict[int, int] = field(default_factory=dict)
    domain_of: dict[int, str] = field(default_factory=dict)
    per_domain: dict[str, int] = field(default_factory=dict)


class DomainRoom:
    """Per topology domain, how many of a gang's members its nodes can host (a figure per node, summed),
    kept from one plan to the next and brought up to date with the nodes changed since
    (SchedulerCache.changed_since): planning a gang does not walk every node each time."""

    def __init__(self, cache: Any) -> None:
        self.cache = cache
        self._rooms: dict[Hashable, _Room] = {}

    def room(
        self, key: Hashable, doms: Mapping[str, Sequence[NodeInfo]], per_node: Callable[[NodeInfo], int]
    ) -> dict[str, int]:
        """Domain -> the sum of `per_node` over its nodes. `key` names `doms` and `per_node`: the same key
        means the same domains and a figure per node that changes only with the node's generation."""
        cache = self.cache
        entry = self._rooms.get(key)
        changed = cache.changed_since(entry.seq) if entry is not None else None
        if entry is None or changed is None:
            if len(self._rooms) > 32:
                self._rooms.clear()
            entry = self._rooms[key] = _Room(cache.change_seq)
            for value, nodes in doms.items():
                total = 0
                for ni in nodes:
                    n = entry.per_node[ni.idx] = per_node(ni)
                    entry.domain_of[ni.idx] = value
                    total += n
                entry.per_domain[value] = total
            return entry.per_domain
        for idx in changed:
            dom = entry.domain_of.get(idx)
            if dom is not None:
                n = per_node(cache.nodes[idx])
                entry.per_domain[dom] += n - entry.per_node[idx]
                entry.per_node[idx] = n
        entry.seq = cache.change_seq
        return entry.per_domain


class GangTopology(PreFilterPlugin, FilterPlugin):
    """Filter: the nodes of the domain the gang action chose for the pod's gang (no restriction otherwise)."""

    name = "GangTopology"
    filter_first = True

    def __init__(self, gang_of: Callable[[str], str | None]) -> None:
        self.gang_of = gang_of
        self.restrict: dict[str, tuple[str, str]] = {}  # gang key -> (label, value)

    def pre_filter(self, state: CycleState, pi: PodInfo) -> Status:
        gk = self.gang_of(pi.uid)
        state[STATE_KEY] = self.restrict.get(gk) if gk is not None else None
        return SUCCESS

    def signature(self, state: CycleState, pi: PodInfo) -> Hashable:
        return ("topo", state.get(STATE_KEY))

    def filter(self, state: CycleState, pi: PodInfo, ni: NodeInfo) -> Status:
        r = state.get(STATE_KEY)
        if r is not None and ni.labels.get(r[0]) != r[1]:
            return unschedulable(f"node(s) outside the gang's {r[0]}={r[1]}")
        return SUCCESS
