"""Optimality on small inputs: branch and bound over the sets of nodes to add.

Sets of node types (multisets, within the pools' limits) are tried in increasing cost, below the cost of the
plan the search found and at or above the lower bound; for each, a depth-first search assigns the units in
the search's order to the cluster's nodes and the set's nodes (an empty node of a type is tried once: empty
nodes of one type are interchangeable), with the same allocator and node fit. The first set that holds every
unit is the cheapest plan; none below the search's cost proves the search's plan optimal. Gangs with a
required topology level are left to the search (no proof is claimed), and so is anything past the budget.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence

from kdra.plan.bins import Bin, Placement
from kdra.plan.demand import Job, Unit
from kdra.plan.nodetypes import NodeType
from kdra.plan.search import Search

MAX_UNITS = 12  # units of all jobs together
MAX_STEPS = 20_000  # placements tried, over all sets
EPS = 1e-9


def _multisets(types: Sequence[NodeType], limit: int, below: float, above: float) -> list[tuple[int, ...]]:
    """Counts per type of every set of at most `limit` nodes costing in [above, below), cheapest first."""
    out: list[tuple[float, tuple[int, ...]]] = []
    start = tuple(0 for _ in types)
    seen = {start}
    heap: list[tuple[float, tuple[int, ...]]] = [(0.0, start)]
    while heap:
        cost, counts = heapq.heappop(heap)
        if cost >= below - EPS:
            break
        if cost >= above - EPS:
            out.append((cost, counts))
        if sum(counts) >= limit:
            continue
        for i, t in enumerate(types):
            if t.max_new is not None and counts[i] >= t.max_new:
                continue
            nxt = (*counts[:i], counts[i] + 1, *counts[i + 1:])
            if nxt not in seen:
                seen.add(nxt)
                heapq.heappush(heap, (cost + t.price, nxt))
    return [c for _, c in out]


class _Budget(Exception):
    pass


def _assign(units: Sequence[Unit], bins: list[Bin], steps: list[int]) -> list[tuple[Bin, Placement]] | None:
    done: list[tuple[Bin, Placement]] = []

    def go(i: int) -> bool:
        if i == len(units):
            return True
        tried_empty: set[str] = set()
        for b in bins:
            if b.added and not b.placements:
                assert b.type is not None
                if b.type.name in tried_empty:
                    continue
                tried_empty.add(b.type.name)
            steps[0] -= 1
            if steps[0] < 0:
                raise _Budget
            got = b.place(units[i])
            if not isinstance(got, Placement):
                continue
            done.append((b, got))
            if go(i + 1):
                return True
            done.pop()
            b.undo(got)
        return False

    return done if go(0) else None


def prove(fresh: Callable[[], Search], found: Search, jobs: Sequence[Job], bound: float) -> Search | None:
    """The optimal plan (`found` itself when nothing cheaper exists), or None when the input is too large, a
    gang needs a topology level, or the budget ran out."""
    if found.cost - bound < EPS:
        return found
    if any(j.gang is not None and j.gang.topology.required for j in jobs):
        return None
    order = [job for job in jobs if job.key in found.placed]
    units = [u for job in sorted(order, key=lambda j: -found.weight(j)) for u in job.units]
    if len(units) > MAX_UNITS:
        return None
    steps = [MAX_STEPS]
    for counts in _multisets(found.types, len(units), found.cost, bound):
        trial = fresh()
        for t, n in zip(trial.types, counts, strict=True):
            for _ in range(n):
                trial.open(t)
        try:
            done = _assign(units, trial.existing() + trial.added, steps)
        except _Budget:
            return None
        if done is None:
            continue
        by_unit = {id(p.unit): (b, p) for b, p in done}
        for job in order:
            trial.placed[job.key] = [by_unit[id(u)] for u in job.units]
        for b in [b for b in trial.added if not b.placements]:
            trial.close(b)
        return trial
    return found
