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
(up to the required one), then anywhere. `TopologyPlanner` picks the domains to try, roomiest first; job
placement (kdra.scheduler.jobplacer) sets the restriction and `GangTopology` applies it in Filter.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kdra.api.workloadapi import is_pod_group_ref
from kdra.errors import InputError
from kdra.scheduler.dra import ClaimDemand
from kdra.scheduler.framework import (
    SUCCESS,
    CycleState,
    FilterPlugin,
    PreFilterPlugin,
    Status,
    unschedulable,
)
from kdra.scheduler.podinfo import NodeInfo, PodInfo

if TYPE_CHECKING:
    from kdra.scheduler.cache import SchedulerCache
    from kdra.scheduler.gang import TopologyConstraint
    from kdra.scheduler.plugins.dynamicresources import DynamicResources
    from kdra.scheduler.scheduler import Scheduler

LABEL_ZONE = "topology.kubernetes.io/zone"
LABEL_BLOCK = "kdra.dev/block"
LABEL_RACK = "kdra.dev/rack"
LABEL_NVLINK = "kdra.dev/nvlink-domain"
LABEL_HOST = "kubernetes.io/hostname"
DEFAULT_LEVELS = (LABEL_ZONE, LABEL_BLOCK, LABEL_RACK, LABEL_HOST)
STATE_KEY = "kdra/topology"
# A gang of more member shapes than this gets no room estimate (every domain tried): a PreFilter each.
MAX_SHAPES = 8
# The node-per-member search for a gang of unlike members (TopologyPlanner.assign) gives up after this many
# tries of a member on a node.
MAX_ASSIGN_STEPS = 5000


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

    def __init__(self, cache: SchedulerCache) -> None:
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


def member_shape(pi: PodInfo) -> Hashable:
    """Members of one template (pod requests, claim sources) take the same."""
    return (
        tuple(sorted(pi.requests.items())),
        tuple((r.get("resourceClaimTemplateName"), r.get("resourceClaimName")) for r in pi.claim_refs),
    )


class TopologyPlanner:
    """The topology domains a gang tries, in order: those whose nodes can host the members it still needs
    (a cheap estimate per node: free devices of the lightest member's classes, cpu and memory), roomiest
    first, at most `max_trials` per level; and a note on levels that are too full."""

    def __init__(self, sched: Scheduler, levels: Callable[[], TopologyLevels], max_trials: int) -> None:
        self.sched = sched
        self.levels = levels  # the current levels (Topology objects change)
        self.max_trials = max_trials
        self.rooms = DomainRoom(sched.cache)
        self._fits_memo: dict[Any, dict[int, tuple[int, int]]] = {}
        self._domains: dict[Any, dict[str, list[Any]]] = {}

    def member_demand(self, dynres: DynamicResources, pi: PodInfo) -> dict[Any, int] | None:
        """The devices a member takes on its node, per ClaimDemand key (None: its PreFilter fails): not
        its PodGroup's claims (one for the whole gang, KEP-5729), not classes with network-attached
        devices (node-local counts bound nothing there)."""
        state = CycleState()
        if not dynres.pre_filter(state, pi).ok:
            return None
        pc = state["DynamicResources"]
        own = ClaimDemand()
        for c in pc.to_allocate:
            if not is_pod_group_ref(pc.bind_to.get(c["metadata"].get("uid", ""), {})):
                own.add_claim(c)
        dra = self.sched.dra
        return {k: n for k, n in own.exact.items() if not dra.has_shared_devices(k[0])}

    def packing(
        self, dynres: DynamicResources | None, members: Sequence[PodInfo]
    ) -> list[tuple[PodInfo, dict[Any, int]]] | None:
        """A gang of unlike members (one 6-GPU and two 4-GPU pods) placed one by one, each on the node the
        scoring likes best, can leave no node for a later member although the domain hosts them all (the
        6-GPU pod on the 8-GPU node, not on the 7-GPU one that only it fits). The members heaviest first,
        with their demand, for a second try that puts each on the node `assign` found for it (else the
        one it fits most tightly, `tightest`); None where all members are alike (no order helps) or a
        demand is unknown."""
        if dynres is None or len(members) < 2:
            return None
        shapes: dict[Hashable, dict[Any, int] | None] = {}
        out = []
        for pi in members:
            shape = member_shape(pi)
            if shape not in shapes:
                if len(shapes) == MAX_SHAPES:
                    return None
                shapes[shape] = self.member_demand(dynres, pi)
            demand = shapes[shape]
            if demand is None:
                return None
            out.append((pi, demand))
        if len(shapes) < 2:
            return None
        out.sort(
            key=lambda m: (-sum(m[1].values()), -m[0].requests.get("cpu", 0), -m[0].requests.get("memory", 0))
        )
        return out

    def assign(
        self, packing: Sequence[tuple[PodInfo, Mapping[Any, int]]], restriction: tuple[str, str]
    ) -> list[str] | None:
        """A node (its hostname label value) per member of `packing` such that every node's free devices,
        cpu and memory cover its members, by a backtracking search over the nodes of `restriction`: [] when
        none exists (the free figures are upper bounds: no placement does), None when the search gave up
        after MAX_ASSIGN_STEPS (or a node has no hostname)."""
        dra = self.sched.dra
        keys = sorted({k for _pi, d in packing for k in d}, key=repr)
        hosts: list[str] = []
        free: list[list[int]] = []
        for ni in self.sched.cache.nodes:
            if ni.unschedulable or ni.labels.get(restriction[0]) != restriction[1]:
                continue
            host = ni.labels.get(LABEL_HOST)
            if host is None:
                return None
            hosts.append(host)
            free.append(
                [dra.free_devices(ni.name, k) for k in keys]
                + [ni.allocatable.get(r, 0) - ni.requested.get(r, 0) for r in ("cpu", "memory")]
            )
        wants = [
            [d.get(k, 0) for k in keys] + [pi.requests.get(r, 0) for r in ("cpu", "memory")]
            for pi, d in packing
        ]
        chosen: list[int] = []
        steps = 0

        def search(i: int) -> bool | None:
            nonlocal steps
            if i == len(wants):
                return True
            seen = set()
            for j, f in enumerate(free):
                if tuple(f) in seen or any(a < w for a, w in zip(f, wants[i], strict=True)):
                    continue
                seen.add(tuple(f))  # nodes left alike: one is enough
                steps += 1
                if steps > MAX_ASSIGN_STEPS:
                    return None
                for x, w in enumerate(wants[i]):
                    f[x] -= w
                chosen.append(j)
                found = search(i + 1)
                for x, w in enumerate(wants[i]):
                    f[x] += w
                if found is not False:
                    return found
                chosen.pop()
            return False

        found = search(0)
        if found is None:
            return None
        return [hosts[j] for j in chosen] if found else []

    def tightest(self, pi: PodInfo, demand: Mapping[Any, int], restriction: tuple[str, str]) -> list[str]:
        """The hostname label values of the nodes in `restriction` that can take the member, the one it
        leaves least free devices (then cpu, memory) on first."""
        dra = self.sched.dra
        ranked = []
        for ni in self.sched.cache.nodes:
            host = ni.labels.get(LABEL_HOST)
            if ni.unschedulable or host is None or ni.labels.get(restriction[0]) != restriction[1]:
                continue
            left = []
            for cls, k in demand.items():
                left.append(dra.free_devices(ni.name, cls) - k)
            for res in ("cpu", "memory"):
                left_res = ni.allocatable.get(res, 0) - ni.requested.get(res, 0) - pi.requests.get(res, 0)
                left.append(left_res)
            if min(left, default=0) < 0:
                continue
            ranked.append((sum(left[: len(demand)]), left[len(demand) :], host))
        return [host for *_k, host in sorted(ranked)]

    def member_capacity(
        self, dynres: DynamicResources | None, members: Sequence[PodInfo]
    ) -> tuple[Hashable, Callable[[NodeInfo], int] | None]:
        """A cheap upper bound on how many of `members` a node can still host, and the key it is memoised
        under (None, None: no estimate). Members of different shapes (a gang of one 4-GPU and two 1-GPU
        pods) are counted as the lightest of each resource: estimated as the first member, a node that
        hosts the gang was said to fit "about 2" of 3 and the domain was never tried."""
        if dynres is None:
            return None, None
        sched = self.sched
        dra = sched.dra
        demand: dict[Any, int] | None = None
        cpu = memory = 0
        seen: set[Hashable] = set()
        for pi in members:
            # Members of one template (pod requests, claim sources) take the same: one PreFilter per shape.
            shape = member_shape(pi)
            if shape in seen:
                continue
            if len(seen) == MAX_SHAPES:
                return None, None
            seen.add(shape)
            mine_or_none = self.member_demand(dynres, pi)
            if mine_or_none is None:
                return None, None
            mine = mine_or_none
            if demand is None:
                demand, cpu, memory = mine, pi.requests.get("cpu", 0), pi.requests.get("memory", 0)
            else:  # the lightest of every resource: never below what a node can really host
                demand = {k: min(n, mine[k]) for k, n in demand.items() if k in mine}
                cpu, memory = min(cpu, pi.requests.get("cpu", 0)), min(memory, pi.requests.get("memory", 0))
        if demand is None:
            return None, None
        req = {"cpu": cpu, "memory": memory}
        # Per node, cached by node generation (it changes with every pod and claim the node gets or loses).
        key = (tuple(sorted(demand.items())), cpu, memory, sched.cache.epoch)
        memo = self._fits_memo.get(key)
        if memo is None:
            if len(self._fits_memo) > 64:
                self._fits_memo.clear()
            memo = self._fits_memo[key] = {}

        def fits(ni: NodeInfo) -> int:
            hit = memo.get(ni.idx)
            if hit is not None and hit[0] == ni.generation:
                return hit[1]
            n = 1 << 30
            for cls, k in demand.items():
                if k:
                    n = min(n, dra.free_devices(ni.name, cls) // k)
            for res in ("cpu", "memory"):
                want = req.get(res, 0)
                if want:
                    n = min(n, max(0, ni.allocatable.get(res, 0) - ni.requested.get(res, 0)) // want)
            n = 0 if ni.unschedulable else n
            memo[ni.idx] = (ni.generation, n)
            return n

        return key, fits

    def plan(
        self,
        constraint: TopologyConstraint | None,
        members: Sequence[PodInfo],
        needed: int,
        dynres: DynamicResources | None,
    ) -> tuple[list[tuple[str, str] | None], str]:
        """The domain restrictions to try in order (None: anywhere), and a note on levels that are too
        full. `constraint` is the gang's topology constraint (None: no topology)."""
        if not constraint:
            return [None], ""
        levels = self.levels()
        req = levels.resolve(constraint.required) if constraint.required else None
        pref = levels.resolve(constraint.preferred) if constraint.preferred else None
        labels = ([pref, *levels.coarser(pref, up_to=req)] if pref else []) or ([req] if req else [])
        if req and req not in labels:
            labels.append(req)
        fits_key, fits = self.member_capacity(dynres, members)
        need = max(1, needed)
        out: list[tuple[str, str] | None] = []
        notes = []
        for label in labels:
            cache = self.sched.cache
            dkey = (label, len(cache.nodes), cache.node_updates)
            doms = self._domains.get(dkey)
            if doms is None:
                if len(self._domains) > 32:
                    self._domains.clear()
                doms = self._domains[dkey] = dict(sorted(domains(cache.nodes, label).items()))
            if fits is not None:
                room = self.rooms.room((fits_key, dkey, need), doms, lambda ni: min(fits(ni), need))
                ranked = [(room[value], value) for value in doms]
            else:
                ranked = [(need, value) for value in doms]
            roomy = sorted((c, v) for c, v in ranked if c >= need)
            for _c, v in roomy[: self.max_trials]:
                out.append((label, v))
            if not roomy:
                best = max(ranked, default=(0, "-"))
                largest = max((len(v) for v in doms.values()), default=0)
                notes.append(
                    f"topology: no {label} has room for {need} members ({len(doms)} domains of at most "
                    f"{largest} nodes; the roomiest now, {best[1]}, fits about {best[0]})"
                )
        if not req:
            out.append(None)
        if not out:
            return [], "; ".join(notes) or f"topology: no node has the label {req}"
        return out, "; ".join(notes)
