"""The state of migrating one document: its text, the editor, what was reported, names in use."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from yaml.nodes import Node, ScalarNode

from kdra.migrate.edits import Editor
from kdra.migrate.report import Options, Report, Where


@dataclass
class DocContext:
    body: str
    editor: Editor
    options: Options
    report: Report
    taken: set[str]  # ResourceClaimTemplate names used in this input
    marks: list[int]  # offsets of the vendor names in the body (scan.requests follows them)
    consumed: set[int] = field(default_factory=set)  # id() of accelerator keys converted or already reported
    consumed_at: set[int] = field(default_factory=set)  # where those keys start in the body (scan.requests)
    shared: dict[int, str] = field(default_factory=dict)  # id() of a resources node -> name of its container
    notes: dict[str, list[str]] = field(default_factory=dict)  # object -> semantic changes, in order
    templates: list[tuple[tuple[str | int, ...], dict[str, Any]]] = field(default_factory=list)

    def note(self, where: Where, text: str) -> None:
        self.notes.setdefault(where.describe(), []).append(text)

    def invalid(self, message: str, hint: str = "") -> None:
        self.report.invalid.append(message + (f"\n  hint: {hint}" if hint else ""))

    def blocked(self, message: str, hint: str = "") -> None:
        self.report.blocked.append(message + (f"\n  hint: {hint}" if hint else ""))

    def consume(self, *nodes: Node | None) -> None:
        for node in nodes:
            if node is not None:
                self.consumed.add(id(node))
                if isinstance(node, ScalarNode):
                    self.consumed_at.add(node.start_mark.index)
