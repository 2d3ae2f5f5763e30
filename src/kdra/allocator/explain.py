"""Explanations of why claims do not fit (computed only after the search failed)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Explanation:
    node: str
    claims: list[Any] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node}

    def __str__(self) -> str:
        return f"node {self.node}: cannot allocate all claims"


def explain(run: Any, limit_hit: bool = False) -> Explanation:
    return Explanation(run.view.node_name)
