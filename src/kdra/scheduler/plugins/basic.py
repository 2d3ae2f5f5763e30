"""Upstream's simple plugins: PrioritySort, SchedulingGates, NodeUnschedulable, NodeName, NodeAffinity,
TaintToleration (pkg/scheduler/framework/plugins/{queuesort,schedulinggates,nodeunschedulable,nodename,
nodeaffinity,tainttoleration})."""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterable, Mapping
from typing import Any, ClassVar

from kdra.cluster.selectors import Requirement
from kdra.scheduler.framework import (
    EV_NODE_ADD,
    EV_NODE_UPDATE,
    MAX_NODE_SCORE,
    SUCCESS,
    Code,
    CycleState,
    FilterPlugin,
    PreEnqueuePlugin,
    QueueSortPlugin,
    ScorePlugin,
    Status,
    unschedulable,
)
from kdra.scheduler.podinfo import NodeInfo, PodInfo

NODE_EVENTS = frozenset({EV_NODE_ADD, EV_NODE_UPDATE})


class PrioritySort(QueueSortPlugin):
    """Higher priority first; FIFO (time entered the queue) within a priority."""

    name = "PrioritySort"

    def sort_key(self, pi: PodInfo) -> tuple[int, float]:
        return (-pi.priority, pi.queued_at)


class SchedulingGates(PreEnqueuePlugin):
    """A pod with spec.schedulingGates is not scheduled until they are all removed (the update that removes
    them enqueues it again); kube-apiserver, not the scheduler, marks it PodScheduled=False
    SchedulingGated."""

    name = "SchedulingGates"
    events: frozenset[str] = frozenset()  # only the pod's own update helps

    def pre_enqueue(self, pi: PodInfo) -> Status:
        gates = (pi.pod.get("spec") or {}).get("schedulingGates")
        if not gates:
            return SUCCESS
        names = " ".join(str(g.get("name", "")) for g in gates)
        return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (f"waiting for scheduling gates: [{names}]",))


class NodeUnschedulable(FilterPlugin):
    name = "NodeUnschedulable"
    events = NODE_EVENTS
    node_fields = (("spec", "unschedulable"),)
    exact_hints = True
    _TAINT: ClassVar[dict[str, str]] = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}

    def filter(self, state: CycleState, pi: PodInfo, ni: NodeInfo) -> Status:
        if ni.unschedulable and not any(tolerates(t, self._TAINT) for t in pi.tolerations):
            return unschedulable("node(s) were unschedulable", resolvable=False)
        return SUCCESS

    def signature(self, state: CycleState, pi: PodInfo) -> Hashable:
        return any(tolerates(t, self._TAINT) for t in pi.tolerations)


class NodeName(FilterPlugin):
    name = "NodeName"
    events = NODE_EVENTS
    node_fields = (("metadata", "name"),)
    exact_hints = True

    def filter(self, state: CycleState, pi: PodInfo, ni: NodeInfo) -> Status:
        want = (pi.pod.get("spec") or {}).get("nodeName")
        if want and want != ni.name:
            return unschedulable("node(s) didn't match the requested node name", resolvable=False)
        return SUCCESS

    def signature(self, state: CycleState, pi: PodInfo) -> Hashable:
        return (pi.pod.get("spec") or {}).get("nodeName") or ""


def _reqs_match(exprs: tuple[Requirement, ...], fields: tuple[Requirement, ...], ni: NodeInfo) -> bool:
    if not exprs and not fields:
        return False
    if not all(r.matches(ni.labels) for r in exprs):
        return False
    return all(r.matches({"metadata.name": ni.name}) for r in fields)


class NodeAffinity(FilterPlugin, ScorePlugin):
    """nodeSelector and required node affinity (filter), preferred node affinity (score)."""

    name = "NodeAffinity"
    events = NODE_EVENTS
    node_fields = (("metadata", "labels"), ("metadata", "name"))
    exact_hints = True
    weight = 2  # upstream default profile weight

    def filter(self, state: CycleState, pi: PodInfo, ni: NodeInfo) -> Status:
        labels = ni.labels
        for k, v in pi.node_selector.items():
            if labels.get(k) != v:
                return unschedulable("node(s) didn't match Pod's node affinity/selector", resolvable=False)
        if pi.affinity_required is not None and not any(
            _reqs_match(e, f, ni) for e, f in pi.affinity_required
        ):
            return unschedulable("node(s) didn't match Pod's node affinity/selector", resolvable=False)
        return SUCCESS

    def signature(self, state: CycleState, pi: PodInfo) -> Hashable:
        spec = pi.pod.get("spec") or {}
        aff = (spec.get("affinity") or {}).get("nodeAffinity")
        if not aff and not spec.get("nodeSelector"):
            return ""
        return json.dumps([spec.get("nodeSelector"), aff], sort_keys=True)

    def active(self, state: CycleState, pi: PodInfo) -> bool:
        return bool(pi.preferred_terms)

    def score(self, state: CycleState, pi: PodInfo, ni: NodeInfo) -> int:
        return sum(w for w, e, f in pi.preferred_terms if _reqs_match(e, f, ni))

    def needs_normalize(self, state: CycleState, pi: PodInfo) -> bool:
        return True

    def normalize(self, state: CycleState, pi: PodInfo, scores: dict[int, int]) -> None:
        default_normalize(scores, reverse=False)


def default_normalize(scores: dict[int, int], reverse: bool) -> None:
    """helper.DefaultNormalizeScore: scale to [0, MaxNodeScore] by the maximum, optionally reversed."""
    top = max(scores.values(), default=0)
    if top == 0:
        if reverse:
            for k in scores:
                scores[k] = MAX_NODE_SCORE
        return
    for k, v in scores.items():
        s = MAX_NODE_SCORE * v // top
        scores[k] = MAX_NODE_SCORE - s if reverse else s


def tolerates(tol: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """v1.Toleration.ToleratesTaint."""
    effect = tol.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = tol.get("key") or ""
    if key and key != taint.get("key"):
        return False
    op = tol.get("operator") or "Equal"
    if op == "Exists":
        return True
    if op == "Equal":
        return (tol.get("value") or "") == (taint.get("value") or "")
    return False


class TaintToleration(FilterPlugin, ScorePlugin):
    name = "TaintToleration"
    events = NODE_EVENTS
    node_fields = (("spec", "taints"),)
    exact_hints = True
    weight = 3  # upstream default profile weight

    def __init__(self, implied: Iterable[Mapping[str, Any]] = ()) -> None:
        # Tolerations every pod this scheduler places has, besides its own (kdra.kube.partition: the
        # taint that keeps other schedulers off the nodes kdra owns); none by default, as upstream.
        self.implied: tuple[Mapping[str, Any], ...] = tuple(implied)

    def filter(self, state: CycleState, pi: PodInfo, ni: NodeInfo) -> Status:
        for taint in ni.taints:
            if taint.get("effect") not in ("NoSchedule", "NoExecute"):
                continue
            if not any(tolerates(t, taint) for t in pi.tolerations) and not any(
                tolerates(t, taint) for t in self.implied
            ):
                desc = (
                    f"{{{taint.get('key')}: {taint.get('value')}}}"
                    if taint.get("value")
                    else f"{{{taint.get('key')}}}"
                )
                return unschedulable(f"node(s) had untolerated taint {desc}", resolvable=False)
        return SUCCESS

    def signature(self, state: CycleState, pi: PodInfo) -> Hashable:
        return json.dumps(pi.tolerations, sort_keys=True) if pi.tolerations else ""

    def active(self, state: CycleState, pi: PodInfo) -> bool:
        key = (self.cache.epoch, self.cache.node_updates)
        if getattr(self, "_active_key", None) != key:
            self._active_key = key
            self._active = any(
                t.get("effect") == "PreferNoSchedule" for ni in self.cache.nodes for t in ni.taints
            )
        return self._active

    def score(self, state: CycleState, pi: PodInfo, ni: NodeInfo) -> int:
        tols = [t for t in pi.tolerations if not t.get("effect") or t.get("effect") == "PreferNoSchedule"]
        return sum(
            1
            for taint in ni.taints
            if taint.get("effect") == "PreferNoSchedule" and not any(tolerates(t, taint) for t in tols)
        )

    def needs_normalize(self, state: CycleState, pi: PodInfo) -> bool:
        return True

    def normalize(self, state: CycleState, pi: PodInfo, scores: dict[int, int]) -> None:
        default_normalize(scores, reverse=True)
