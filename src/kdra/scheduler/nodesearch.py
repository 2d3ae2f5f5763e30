"""Finding a node for a pod: Filter on every node, then Score (kube-scheduler's findNodesThatFitPod and
prioritizeNodes), with answers that outlive the attempt.

Filter and score answers are cached per pod *signature* (what the plugins say their answers depend on)
and node generation: pods that look alike (replicas, job workers) share answers, and after the first
attempt only nodes whose state changed are evaluated again (SchedulerCache.changed_since); feasible nodes
wait in a heap by score. The result is what evaluating every node every time would give (kube-scheduler
with percentageOfNodesToScore=100), except that ties between equally scored nodes go to the first node in
the order nodes were added (upstream picks one at random). As upstream, a pod's nominated node is tried
first and taken unscored when it passes Filter, and Filter counts the pods nominated to a node against
pods of no higher priority (addGENominatedPods: their requests and their number, not their devices, which
upstream's DynamicResources does not count either); nodes with nominations are evaluated again for each
pod. The texts of shared answers name the objects of whichever
pod computed them; they are kept neutral and made each reader's own where they are written
(kdra.scheduler.owntext).
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterable
from typing import Any, cast

from kdra.scheduler.cache import SchedulerCache
from kdra.scheduler.framework import Code, CycleState, FilterPlugin, ScorePlugin, Status
from kdra.scheduler.owntext import NeutralExplanation, OwnNames
from kdra.scheduler.podinfo import NodeInfo, PodInfo
from kdra.scheduler.scoring import add_weighted, best_node


def _neutral(st: Status, own: OwnNames) -> Status:
    """A failing answer as kept for every pod of the signature: `own`'s names made neutral."""
    ex = st.explanation
    return Status(
        st.code,
        tuple(own.neutral(r) for r in st.reasons),
        st.plugin,
        NeutralExplanation(ex, own) if ex is not None else None,
    )


class SigEntry:
    """Filter/score answers for one pod signature: node idx -> (generation, ok, static score)."""

    __slots__ = ("dyn", "epoch", "errors", "heap", "results", "seq", "summary", "version")

    def __init__(self) -> None:
        self.epoch = -1
        self.seq = 0
        self.version = 0  # bumped whenever any node's answer was recomputed
        self.results: dict[int, tuple[int, Status | None, int]] = {}
        # nodes whose current answer is a Filter error: kept as answers change, so that "fail-pod" finds
        # the first erroring node without walking every node's answer on each attempt
        self.errors: set[int] = set()
        self.heap: list[tuple[int, int, int]] = []
        # raw scores of normalizing plugins per node: idx -> (generation, scores in plugin order)
        self.dyn: dict[int, tuple[int, tuple[int, ...]]] = {}
        self.summary: tuple[int, Any] | None = None  # (version, failure summary) for unschedulable pods


class NodeSearch:
    def __init__(
        self, cache: SchedulerCache, filters: list[FilterPlugin], scorers: list[ScorePlugin]
    ) -> None:
        self.cache = cache
        self.filters = filters
        self.scorers = scorers
        self.entries: dict[Hashable, SigEntry] = {}  # pod signature -> its answers
        self.evaluations = 0  # nodes evaluated (Filter and static Score), for benchmarks

    def signature(self, state: CycleState, pi: PodInfo, scorers: list[ScorePlugin]) -> Hashable:
        parts: list[Hashable] = []
        for p in self.filters:
            s = p.signature(state, pi)
            if s is None:
                return None
            parts.append(s)
        for sp in scorers:
            s = sp.signature(state, pi)
            if s is None and not isinstance(sp, FilterPlugin):
                return None
            parts.append((sp.name, s))
        return tuple(parts)

    def _evaluate(
        self, state: CycleState, pi: PodInfo, ni: NodeInfo, static: list[ScorePlugin]
    ) -> tuple[Status | None, int]:
        self.evaluations += 1
        fni = ni
        if self.cache.nominated:
            nominated = self.cache.nominated_against(pi, ni)
            if nominated:
                fni = ni.with_pods(nominated)
        for p in self.filters:
            st = p.filter(state, pi, fni)
            if not st.ok:
                return st.with_plugin(p.name), 0
        total = 0
        for sp in static:
            total += sp.score(state, pi, ni) * sp.weight
        return None, total

    def _nominated(
        self, state: CycleState, pi: PodInfo, static: list[ScorePlugin]
    ) -> tuple[str, dict[int, tuple[int, Status | None, int]]] | None:
        """kube-scheduler's evaluateNominatedNode (pkg/scheduler/schedule_one.go): the node in the pod's
        status.nominatedNodeName (a preemption's, or where an autoscaler expects the pod: KEP-5278) is
        tried first, and when it passes Filter the pod goes there unscored. None: no such node, or it does
        not pass (every node is then searched as usual)."""
        name = (pi.pod.get("status") or {}).get("nominatedNodeName")
        ni = self.cache.node_by_name.get(name) if name else None
        if ni is None:
            return None
        st, total = self._evaluate(state, pi, ni, static)
        if st is not None:
            return None
        return ni.name, {ni.idx: (ni.generation, None, total)}

    def find(
        self, state: CycleState, pi: PodInfo
    ) -> tuple[str | None, dict[int, tuple[int, Status | None, int]]]:
        """The best node for the pod (None: no node passes Filter), and every node's answer by index:
        (the node's generation, its Filter status (None: feasible), its static score)."""
        active = [p for p in self.scorers if p.active(state, pi)]
        static = [p for p in active if not p.needs_normalize(state, pi)]
        dynamic = [p for p in active if p.needs_normalize(state, pi)]
        sig = self.signature(state, pi, active)
        nodes = self.cache.nodes
        # Answers are shared by pods of this signature: their texts are kept neutral (kdra.scheduler.owntext).
        own = state["_own_names"] = OwnNames([n for p in self.filters for n in p.own_names(state, pi)])
        nominated = self._nominated(state, pi, static)
        if nominated is not None:
            state["_sig_entry"] = SigEntry()
            return nominated
        if sig is None:
            entry = SigEntry()
            todo: Iterable[int] = range(len(nodes))
        else:
            entry = self.entries.get(sig)  # type: ignore[assignment]
            if entry is None:
                if len(self.entries) > 256:
                    self.entries.clear()
                entry = self.entries[sig] = SigEntry()
            changed = self.cache.changed_since(entry.seq) if entry.epoch == self.cache.epoch else None
            if changed is None:
                entry.results.clear()
                entry.errors.clear()
                entry.heap.clear()
                todo = range(len(nodes))
            else:
                if self.cache.nominated:
                    # what passes there depends on the pod's priority, not only on its signature
                    by_name = self.cache.node_by_name
                    changed.update(by_name[n].idx for n in self.cache.nominated if n in by_name)
                todo = sorted(changed)
        entry.epoch = self.cache.epoch
        entry.seq = self.cache.change_seq
        state["_sig_entry"] = entry
        results = entry.results
        errors = entry.errors
        heap = entry.heap
        if todo:
            entry.version += 1
        for idx in todo:
            ni = nodes[idx]
            st, total = self._evaluate(state, pi, ni, static)
            if st is not None and own:
                st = _neutral(st, own)
            results[idx] = (ni.generation, st, total)
            if st is None:
                errors.discard(idx)
                heapq.heappush(heap, (-total, idx, ni.generation))
            elif st.code == Code.ERROR:
                errors.add(idx)
            else:
                errors.discard(idx)
        if len(heap) > 4 * len(nodes) + 64:
            entry.heap = heap = [(-t, i, g) for i, (g, s, t) in results.items() if s is None]
            heapq.heapify(heap)
        if not dynamic:
            while heap:
                neg, idx, gen = heap[0]
                g, st, total = results.get(idx, (-1, None, 0))
                if g == gen and st is None and nodes[idx].generation == gen and -neg == total:
                    return nodes[idx].name, results
                heapq.heappop(heap)
            return None, results
        feasible = sorted(i for i, (g, s, _t) in results.items() if s is None)
        if not feasible:
            return None, results
        totals = {i: results[i][2] for i in feasible}
        dyn = entry.dyn
        raws: list[dict[int, int]] = [{} for _ in dynamic]
        for i in feasible:
            gen = results[i][0]
            hit = dyn.get(i)
            if hit is None or hit[0] != gen or len(hit[1]) != len(dynamic):
                hit = (gen, tuple(p.score(state, pi, nodes[i]) for p in dynamic))
                dyn[i] = hit
            for k, v in enumerate(hit[1]):
                raws[k][i] = v
        for p, raw in zip(dynamic, raws, strict=True):
            add_weighted(totals, p, state, pi, raw)
        return nodes[cast(int, best_node(totals, feasible))].name, results
