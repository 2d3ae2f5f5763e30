"""The scale-up search: which nodes to add so every job fits, cheapest first.

1. Jobs in decreasing order of what they cost at best (a unit's cheapest price per copy over the types it
   fits on, summed over the job), as first-fit decreasing does for bins.
2. Each job goes first-fit onto room that is already paid for: the cluster's nodes, then nodes added for
   earlier jobs. What does not fit opens a node of the type with the lowest price per copy of that unit
   (measured by filling an empty node: kdra.plan.probe), within the pool's maxCount.
3. A gang is all or nothing: its units are placed one after another and every placement is undone when one
   fails. A required topology level keeps them under one value of the label: one of the cluster's domains,
   or one new domain of added nodes of one type (as many as the pool's topology puts in one rack, block or
   NVLink domain; one node for the hostname level; a zone is part of a type).
4. Local search, each move checked by the same allocator and node fit: empty an added node into the room
   of the others, and move an added node's pods onto one cheaper node.

kdra.plan.exact proves small instances optimal; kdra.plan.bound gives the lower bound reported beside.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kdra.allocator import FeatureGates
from kdra.allocator.summary import NodeFinding
from kdra.fleets.spec import LABEL_BLOCK, LABEL_NVLINK, LABEL_RACK
from kdra.plan.bins import Bin, Cluster, Placement, new_bin
from kdra.plan.demand import Job, Unit
from kdra.plan.nodetypes import NodeType
from kdra.plan.probe import Prober
from kdra.scheduler.topology import LABEL_HOST, LABEL_ZONE, TopologyLevels

Opener = Callable[[Unit], Bin | None]

# Moves the local search tries (each re-places a node's units with the allocator) before it stops.
IMPROVE_MOVES = 200


@dataclass
class Group:
    """Added nodes that share one domain of a topology level (a new rack, block or NVLink domain)."""

    id: int
    label: str
    type: NodeType
    room: int  # the most nodes the domain holds
    bins: list[Bin] = field(default_factory=list)


@dataclass
class Unplaced:
    job: Job
    why: str  # one line
    findings: list[NodeFinding] = field(default_factory=list)  # per node type, against its template


def _in_zone(zone: str) -> Callable[[NodeType], bool]:
    return lambda t: t.zone == zone


def domain_size(t: NodeType, label: str) -> int:
    """How many added nodes of type `t` one domain of `label` holds (0: its nodes have no such label)."""
    topo = t.pool.topology
    if label == LABEL_HOST:
        return 1
    if label == LABEL_RACK:
        return topo.nodes_per_rack
    if label == LABEL_BLOCK:
        return topo.nodes_per_rack * topo.racks_per_block
    if label == LABEL_NVLINK:
        return topo.nvlink_domain_size
    return 0


class Search:
    def __init__(
        self,
        cluster: Cluster | None,
        types: Sequence[NodeType],
        features: FeatureGates,
        levels: TopologyLevels | None = None,
        prober: Prober | None = None,
        name: Callable[[NodeType, int], str] | None = None,
    ) -> None:
        self.cluster = cluster
        self.types = list(types)
        self.features = features
        self.levels = levels or TopologyLevels()
        self.prober = prober or Prober(self.types, features)
        self.added: list[Bin] = []
        self.groups: list[Group] = []
        self.opened: dict[str, int] = {}  # pool -> nodes added (a pool's limit covers all its zones)
        self.serial = 0
        self.name = name or (lambda t, i: f"{t.pool.name}-new-{i}")
        self.constrained: set[int] = set()  # ids of placements a topology level holds in place
        self.placed: dict[str, list[tuple[Bin, Placement]]] = {}
        self.excluded: set[str] = set()  # cluster nodes not to place on (scale-down: the drained ones)
        self.unplaced: list[Unplaced] = []

    # -- opening nodes ------------------------------------------------------------------------------

    def room(self, t: NodeType) -> bool:
        return t.max_new is None or self.opened.get(t.pool.name, 0) < t.max_new

    def open(self, t: NodeType, group: Group | None = None) -> Bin:
        self.opened[t.pool.name] = self.opened.get(t.pool.name, 0) + 1
        b = new_bin(t, self.name(t, self.serial), self.features, group.id if group else None)
        self.serial += 1
        self.added.append(b)
        if group is not None:
            group.bins.append(b)
        return b

    def close(self, b: Bin) -> None:
        assert b.type is not None and not b.placements
        self.added.remove(b)
        self.opened[b.type.pool.name] -= 1
        for g in self.groups:
            if b in g.bins:
                g.bins.remove(b)

    def cost_per_copy(self, unit: Unit, t: NodeType) -> float:
        p = self.prober.probe(unit, t)
        return t.price / p.per_node if p.fits else math.inf

    def best_type(self, unit: Unit, allowed: Callable[[NodeType], bool] = lambda t: True) -> NodeType | None:
        best: tuple[float, int, NodeType] | None = None
        for i, t in enumerate(self.types):
            if not allowed(t) or not self.room(t):
                continue
            c = self.cost_per_copy(unit, t)
            if c < math.inf and (best is None or (c, i) < best[:2]):
                best = (c, i, t)
        return best[2] if best else None

    def weight(self, job: Job) -> float:
        """What the job costs at best per copy summed over its units: the first-fit-decreasing size."""
        total = 0.0
        for u in job.units:
            costs = [self.cost_per_copy(u, t) for t in self.types]
            finite = [c for c in costs if c < math.inf]
            total += min(finite) if finite else 0.0
        return total

    # -- placing ------------------------------------------------------------------------------------

    def existing(self) -> list[Bin]:
        if self.cluster is None:
            return []
        return [b for b in self.cluster.bins if b.name not in self.excluded]

    def fill(
        self, units: Sequence[Unit], bins: list[Bin], opener: Opener | None
    ) -> list[tuple[Bin, Placement]] | None:
        """Every unit on `bins` first fit, opening nodes with `opener`; all or nothing."""
        done: list[tuple[Bin, Placement]] = []
        opened: list[Bin] = []
        for unit in units:
            placed = None
            for b in bins:
                if unit.shape in b.full:
                    continue
                got = b.place(unit)
                if isinstance(got, Placement):
                    placed = (b, got)
                    break
            if placed is None and opener is not None:
                b2 = opener(unit)
                if b2 is not None:
                    opened.append(b2)
                    bins.append(b2)
                    got = b2.place(unit)
                    if isinstance(got, Placement):
                        placed = (b2, got)
            if placed is None:
                for b, p in reversed(done):
                    b.undo(p)
                for b in opened:
                    self.close(b)
                return None
            done.append(placed)
        return done

    def _open_best(self, allowed: Callable[[NodeType], bool] = lambda t: True) -> Opener:
        def opener(unit: Unit) -> Bin | None:
            t = self.best_type(unit, allowed)
            return self.open(t) if t is not None else None

        return opener

    def _group_opener(self, group: Group) -> Opener:
        def opener(unit: Unit) -> Bin | None:
            if len(group.bins) >= group.room or not self.room(group.type):
                return None
            if not self.prober.probe(unit, group.type).fits:
                return None
            return self.open(group.type, group)

        return opener

    def _domains(self, job: Job, label: str) -> list[tuple[list[Bin], Opener | None, Group | None]]:
        """Where a gang that needs one value of `label` may go, cheapest first: the cluster's domains, room in
        new domains made for earlier gangs, then a new domain per type that has the level."""
        out: list[tuple[list[Bin], Opener | None, Group | None]] = []
        by_value: dict[str, list[Bin]] = {}
        for b in self.existing():
            v = b.labels.get(label)
            if v is not None:
                by_value.setdefault(v, []).append(b)
        if label == LABEL_ZONE:
            zones = sorted(set(by_value) | {t.zone for t in self.types if t.zone})
            for z in zones:
                added = [b for b in self.added if b.type is not None and b.type.zone == z]
                out.append((by_value.get(z, []) + added, self._open_best(_in_zone(z)), None))
            return out
        for v in sorted(by_value):
            out.append((by_value[v], None, None))
        if label == LABEL_HOST:
            for b in self.added:
                out.append(([b], None, None))
        for g in self.groups:
            if g.label == label:
                out.append((list(g.bins), self._group_opener(g), g))
        candidates = []
        for i, t in enumerate(self.types):
            size = domain_size(t, label)
            if size <= 0 or not self.room(t):
                continue
            probes = [self.prober.probe(u, t) for u in job.units]
            if not all(p.fits for p in probes):
                continue
            nodes = math.ceil(sum(1 / p.per_node for p in probes) - 1e-9)
            if nodes > size:
                continue
            candidates.append((t.price * nodes, i, t, size))
        for _, _, t, size in sorted(candidates, key=lambda c: c[:2]):
            g = Group(self.serial * 1000 + len(self.groups), label, t, size)
            out.append(([], self._group_opener(g), g))
        return out

    def place_job(self, job: Job) -> list[tuple[Bin, Placement]] | None:
        required = job.gang.topology.required if job.gang is not None else None
        if not required:
            bins = self.existing() + list(self.added)
            return self.fill(job.units, bins, self._open_best())
        label = self.levels.resolve(required)
        for bins, opener, group in self._domains(job, label):
            new_group = group if group is not None and group not in self.groups else None
            if new_group is not None:
                self.groups.append(new_group)
            done = self.fill(job.units, list(bins), opener)
            if done is not None:
                self.constrained.update(id(p) for _, p in done)
                return done
            if new_group is not None:
                self.groups.remove(new_group)
        return None

    # -- the whole run ------------------------------------------------------------------------------

    def unplaceable(self, job: Job) -> Unplaced | None:
        """Why no node type could ever serve the job, when none can (its first such unit, against each type's
        template), else None."""
        for u in job.units:
            if any(self.prober.probe(u, t).fits for t in self.types):
                continue
            if any(isinstance(b.check(u), list) for b in self.existing()):
                continue
            findings = [f for t in self.types if (f := self.prober.probe(u, t).finding) is not None]
            who = ", ".join(u.keys)
            return Unplaced(job, f"pod {who}: no node type can run it", findings)
        return None

    def run(self, jobs: Sequence[Job], improve: bool = True) -> None:
        order = sorted(enumerate(jobs), key=lambda ij: (-ij[1].priority, -self.weight(ij[1]), ij[0]))
        for _, job in order:
            why = self.unplaceable(job)
            if why is not None:
                self.unplaced.append(why)
                continue
            done = self.place_job(job)
            if done is None:
                self.unplaced.append(Unplaced(job, self._why_not(job)))
                continue
            self.placed[job.key] = done
        if improve:
            self.improve()

    def _why_not(self, job: Job) -> str:
        g = job.gang
        if g is not None and g.topology.required:
            label = self.levels.resolve(g.topology.required)
            return (
                f"gang {g.key}: its {len(job.pods)} pods fit in no single {label} domain: neither in the "
                f"cluster's nor in one of added nodes (each type's pool topology bounds how many nodes share "
                f"one; limits: maxCount)"
            )
        return (
            f"{'gang ' + g.key if g else 'pod ' + job.key}: the node types' limits (maxCount) leave no room"
        )

    # -- local search -------------------------------------------------------------------------------

    def _movable(self, b: Bin) -> bool:
        return bool(b.placements) and not any(id(p) in self.constrained for p in b.placements)

    def _relocate(self, b: Bin, targets: list[Bin]) -> bool:
        """Move every unit on `b` to `targets` (first fit); all or nothing."""
        mine = list(b.placements)
        for p in reversed(mine):
            b.undo(p)
        moved: list[tuple[Bin, Placement]] = []
        for p in mine:
            ok = None
            for t in targets:
                if p.unit.shape in t.full:
                    continue
                got = t.place(p.unit)
                if isinstance(got, Placement):
                    ok = (t, got)
                    break
            if ok is None:
                for t, q in reversed(moved):
                    t.undo(q)
                back: list[tuple[Bin, Placement]] = []
                for q in mine:
                    again = b.place(q.unit)
                    assert isinstance(again, Placement), "a node's own pods fit on it again"
                    back.append((b, again))
                # The units are placed anew (new Placements): `placed` must name these, or a later move
                # of this node would leave the plan's record of them on a node that was closed.
                self._rehome(mine, back)
                return False
            moved.append(ok)
        self._rehome(mine, moved)
        return True

    def _rehome(self, old: list[Placement], new: list[tuple[Bin, Placement]]) -> None:
        swap = {id(p): nb for p, nb in zip(old, new, strict=True)}
        for key, done in self.placed.items():
            if any(id(p) in swap for _, p in done):
                self.placed[key] = [swap.get(id(p), (b, p)) for b, p in done]

    def load(self, b: Bin, t: NodeType | None = None) -> float:
        """The largest share of one resource of a node of type `t` (default: the bin's) its units take, as
        measured on empty nodes (kdra.plan.probe): a cheap necessary check before trying a move."""
        t = t or b.type
        assert t is not None
        total: dict[str, float] = {}
        for p in b.placements:
            probe = self.prober.probe(p.unit, t)
            if not probe.fits:
                return math.inf
            for r, v in probe.use.items():
                if r != "gpus":  # a firstAvailable alternative may take less of the GPUs elsewhere
                    total[r] = total.get(r, 0.0) + v
        return max(total.values(), default=0.0)

    def improve(self) -> None:
        """Local search within a budget of moves: empty lightly loaded added nodes into the others' room,
        then move a node's units onto one node of a cheaper type."""
        budget = IMPROVE_MOVES
        for _ in range(3):
            changed = False
            light = [b for b in self.added if self._movable(b) and self.load(b) <= 0.5]
            for b in sorted(light, key=lambda b: (self.load(b), b.name)):
                if budget <= 0:
                    return
                budget -= 1
                others = self.existing() + [o for o in self.added if o is not b]
                if self._relocate(b, others):
                    self.close(b)
                    changed = True
            for b in list(self.added):
                if not self._movable(b) or b.type is None:
                    continue
                for t in sorted(self.types, key=lambda t: t.price):
                    if t.price >= b.type.price or not self.room(t) or self.load(b, t) > 1.0:
                        continue
                    if budget <= 0:
                        return
                    budget -= 1
                    nb = self.open(t)
                    if self._relocate(b, [nb]):
                        self.close(b)
                        changed = True
                        break
                    self.close(nb)
            if not changed:
                return

    # -- results ------------------------------------------------------------------------------------

    @property
    def cost(self) -> float:
        return sum(b.type.price for b in self.added if b.type is not None)
