"""A pod's node-level fit: the default profile's node plugins and the one way to ask them.

Everything that rules nodes out before any device is allocated must do it exactly as kube-scheduler (and
kdra's scheduler) do: nodeSelector and required node affinity, taints and tolerations, an unschedulable
node, spec.nodeName, and cpu/memory/pods/extended-resource fit. `node_plugins` are those plugins in the
default profile's order (the scheduler's profile is built from them); `node_checks` asks them about one
pod on one node, for the offline placement loop (kdra.scheduler.placement, over its scheduler cache) and
for `NodeFit`, the same verdicts on a fixed set of Node objects and the pods already on them (kdra.plan).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from kdra.scheduler.cache import is_terminal
from kdra.scheduler.framework import CycleState, FilterPlugin, Plugin
from kdra.scheduler.owntext import personal
from kdra.scheduler.plugins.basic import NodeAffinity, NodeName, NodeUnschedulable, TaintToleration
from kdra.scheduler.plugins.noderesources import NodeResourcesFit, ScoringStrategy
from kdra.scheduler.podinfo import NodeInfo, PodInfo

if TYPE_CHECKING:
    from kdra.allocator.summary import NodeFinding, NodesSummary
    from kdra.scheduler.framework import Status


class _NoDraCache:
    """NodeResourcesFit asks the cache which extended resources DRA serves (KEP-5004); offline, none."""

    dra: Any = None


def node_declares_resources(node: Mapping[str, Any]) -> bool:
    """A Node without status.allocatable (a hand-written file, or a node made up from slices) says nothing
    about its size: offline tools check resources only on nodes that declare them."""
    status = node.get("status") or {}
    return bool(status.get("allocatable") or status.get("capacity"))


def node_plugins(
    implied_tolerations: Iterable[Mapping[str, Any]] = (), scoring: ScoringStrategy | None = None
) -> list[Plugin]:
    """The default profile's node-level plugins, in kube-scheduler's order."""
    return [
        NodeUnschedulable(),
        NodeName(),
        TaintToleration(implied_tolerations),
        NodeAffinity(),
        NodeResourcesFit(scoring),
    ]


def node_checks(
    filters: Iterable[FilterPlugin],
    state: CycleState,
    pi: PodInfo,
    ni: NodeInfo,
    *,
    sized: bool,
    first_only: bool = False,
) -> tuple[tuple[str, ...], int]:
    """The first rejecting plugin's reasons in kube-scheduler's wording ("node(s) didn't match Pod's node
    affinity/selector") and how many plugins reject (only the first with `first_only`). Resources are
    checked only on a node that declares its size (`sized`)."""
    first: tuple[str, ...] = ()
    failed = 0
    for p in filters:
        if isinstance(p, NodeResourcesFit) and not sized:
            continue
        st = p.filter(state, pi, ni)
        if not st.ok:
            failed += 1
            first = first or st.reasons or (p.name,)
            if first_only:
                break
    return first, failed


class NodeFit:
    """Filter verdicts for pods on a fixed set of nodes; `assume` adds a placed pod's requests."""

    def __init__(self, nodes: Sequence[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]] = ()) -> None:
        self.infos = {
            str((n.get("metadata") or {}).get("name", "")): NodeInfo(n, i) for i, n in enumerate(nodes)
        }
        # A Node without status.allocatable (a hand-written file, or a node made up from slices) says
        # nothing about its size: resources are checked only on nodes that declare them.
        self.sized = {name for name, ni in self.infos.items() if node_declares_resources(ni.node)}
        self.plugins = [p for p in node_plugins() if isinstance(p, FilterPlugin)]
        for p in self.plugins:
            p.bind_cache(cast(Any, _NoDraCache()))
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName")
            if node and node in self.infos and not is_terminal(pod):
                self.infos[node].add_pod(_pod_info(pod))

    def reasons(self, pod: Mapping[str, Any] | PodInfo, node: str) -> tuple[str, ...]:
        """() when the pod passes every node-level filter on `node`, else the first rejecting plugin's
        reasons in kube-scheduler's wording ("node(s) didn't match Pod's node affinity/selector")."""
        ni = self.infos.get(node)
        if ni is None:
            return ()
        pi = pod if isinstance(pod, PodInfo) else _pod_info(pod)
        return node_checks(self.plugins, CycleState(), pi, ni, sized=node in self.sized, first_only=True)[0]

    def assume(self, pod: Mapping[str, Any], node: str) -> None:
        ni = self.infos.get(node)
        if ni is not None:
            ni.add_pod(_pod_info(pod))


def _pod_info(pod: Mapping[str, Any]) -> PodInfo:
    """A PodInfo keyed by a uid even for pods from files, which have none (NodeInfo counts pods by uid)."""
    from kdra.api.templates import pod_uid

    pi = PodInfo(pod)
    if not pi.uid:
        pi.uid = pod_uid(dict(pod))
    return pi


__all__ = ["NodeFit", "node_checks", "node_declares_resources", "node_plugins"]


class FitFailure:
    """What the Filter phase said on every node when a pod fit nowhere. `str()` is the first device
    explanation, as the scheduler has always reported it; `text()` groups every node by reason
    (kdra.allocator.summary.NodesSummary), computing the allocator's explanations only when asked.

    One failure is shared by the pods of a signature, its texts neutral (kdra.scheduler.owntext):
    `for_pod(names)` is the same failure as written on one pod, in that pod's names; the grouping is
    computed once for all of them."""

    def __init__(
        self, first: object, per_node: Sequence[tuple[str, Status]], names: Sequence[str] = ()
    ) -> None:
        self.first = first
        self.per_node = list(per_node)  # (node name, framework Status) of each node that failed
        self.names = tuple(names)  # the reader's own names for the texts' tokens
        self._summary: list[NodesSummary | None] = [None]  # shared with the copies for each pod

    def for_pod(self, names: Sequence[str]) -> FitFailure:
        mine = copy.copy(self)
        mine.names = tuple(names)
        return mine

    def __str__(self) -> str:
        return personal(str(self.first), self.names)

    def findings(self) -> list[NodeFinding]:
        from kdra.allocator.summary import NodeFinding

        out = []
        for node, st in self.per_node:
            if st.explanation is not None:
                out.append(NodeFinding(node, explanation=st.explanation))
            else:
                out.append(NodeFinding(node, reasons=tuple(st.reasons) or (st.plugin or "rejected",)))
        return out

    def text(self, nodes: int | None, hint: str) -> str:
        return personal(str(self.summary().text(nodes, hint=hint)), self.names)

    def summary(self) -> NodesSummary:
        """Every node grouped by reason, with neutral texts (`text()` is what a pod reads)."""
        summary = self._summary[0]
        if summary is None:
            from kdra.allocator.summary import NodesSummary

            summary = self._summary[0] = NodesSummary(self.findings())
        return summary
