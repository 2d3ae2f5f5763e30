"""Node matching for slices and devices (component-helpers/scheduling/corev1/nodeaffinity).

A NodeSelector's terms are ORed; a term's matchExpressions (labels) and matchFields (only
`metadata.name` exists) are ANDed; a term without requirements matches nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kdra.errors import AllocationError


class NodeSelectorError(AllocationError):
    """A selector that nodeaffinity.NewNodeSelector would refuse to parse."""


def _requirement_matches(req: Mapping[str, Any], value: str | None, has: bool) -> bool:
    op = req.get("operator", "")
    values = req.get("values") or []
    if op == "In":
        return has and value in values
    if op == "NotIn":
        return not has or value not in values
    if op == "Exists":
        return has
    if op == "DoesNotExist":
        return not has
    if op in ("Gt", "Lt"):
        if len(values) != 1:
            raise NodeSelectorError(f"{op} operator requires exactly one value")
        try:
            bound = int(values[0])
        except ValueError as exc:
            raise NodeSelectorError(f"invalid value {values[0]!r} for {op}") from exc
        if not has or value is None:
            return False
        try:
            actual = int(value)
        except ValueError:
            return False
        return actual > bound if op == "Gt" else actual < bound
    raise NodeSelectorError(f"{op!r} is not a valid label selector operator")


def term_matches(term: Mapping[str, Any], name: str, labels: Mapping[str, str]) -> bool:
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False
    for req in exprs:
        key = req.get("key", "")
        if not _requirement_matches(req, labels.get(key), key in labels):
            return False
    for req in fields:
        key = req.get("key", "")
        if key != "metadata.name":
            raise NodeSelectorError(f"not a valid field selector key: {key}")
        if req.get("operator") not in ("In", "NotIn"):
            raise NodeSelectorError(f"{req.get('operator')!r} is not a valid field selector operator")
        if not _requirement_matches(req, name, True):
            return False
    return True


def node_selector_matches(selector: Mapping[str, Any], name: str, labels: Mapping[str, str]) -> bool:
    return any(term_matches(t, name, labels) for t in selector.get("nodeSelectorTerms") or [])


def node_matches(
    name: str,
    labels: Mapping[str, str],
    node_name: str,
    all_nodes: bool,
    node_selector: Mapping[str, Any] | None,
) -> bool:
    """Upstream NodeMatches: nodeName, then allNodes, then nodeSelector; nothing set matches nothing."""
    if node_name:
        return name == node_name
    if all_nodes:
        return True
    if node_selector is not None:
        return node_selector_matches(node_selector, name, labels)
    return False
