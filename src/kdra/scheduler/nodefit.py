"""Node-level verdicts as explanations use them: what the Filter phase said on every node when a pod fit
nowhere (`FitFailure`, from the scheduler), and which nodes declare their resources (the offline placement,
kdra.scheduler.placement, checks resources only on those)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def node_declares_resources(node: Mapping[str, Any]) -> bool:
    """A Node without status.allocatable (a hand-written file, or a node made up from slices) says nothing
    about its size: the offline placement checks resources only on nodes that declare them."""
    status = node.get("status") or {}
    return bool(status.get("allocatable") or status.get("capacity"))


__all__ = ["FitFailure", "node_declares_resources"]


class FitFailure:
    """What the Filter phase said on every node when a pod fit nowhere. `str()` is the first device
    explanation, as the scheduler has always reported it; `summary()` groups every node by reason
    (kdra.allocator.summary.NodesSummary), computing the allocator's explanations only when asked."""

    def __init__(self, first: Any, per_node: Sequence[tuple[str, Any]]) -> None:
        self.first = first
        self.per_node = list(per_node)  # (node name, framework Status) of each node that failed
        self._summary: Any = None

    def __str__(self) -> str:
        return str(self.first)

    def findings(self) -> list[Any]:
        from kdra.allocator.summary import NodeFinding

        out = []
        for node, st in self.per_node:
            if st.explanation is not None:
                out.append(NodeFinding(node, explanation=st.explanation))
            else:
                out.append(NodeFinding(node, reasons=tuple(st.reasons) or (st.plugin or "rejected",)))
        return out

    def summary(self) -> Any:
        if self._summary is None:
            from kdra.allocator.summary import NodesSummary

            self._summary = NodesSummary(self.findings())
        return self._summary
