"""The state of migrating one document: its text, the editor, what was reported, names in use."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from yaml.nodes import Node, ScalarNode

from kdra.migrate.edits import Editor
from kdra.migrate.report import Options, Report, Where


def free_name(name: str, taken: set[str], limit: int = 63) -> str:
    """`name`, or the first of name-2, name-3, ... (cut to `limit`) not in `taken`."""
    if name not in taken:
        return name
    return _candidate(name, _first_free(name, taken, limit, 2), limit)


def _candidate(name: str, number: int, limit: int) -> str:
    suffix = f"-{number}"
    return name[: limit - len(suffix)].rstrip("-.") + suffix


def _first_free(name: str, taken: set[str], limit: int, number: int) -> int:
    while _candidate(name, number, limit) in taken:
        number += 1
    return number


class TakenNames:
    """The ResourceClaimTemplate names a run has in use (a set that only grows) and the first free one for a
    new template. Each name remembers the number it last got: every lower one stays taken, so a name wanted
    n times (the same workload in many namespaces) costs n steps, not n*n/2."""

    __slots__ = ("_next", "names")

    def __init__(self, names: set[str]) -> None:
        self.names = names
        self._next: dict[tuple[str, int], int] = {}

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def free(self, name: str, limit: int) -> str:
        if name not in self.names:
            return name
        number = _first_free(name, self.names, limit, self._next.get((name, limit), 2))
        self._next[name, limit] = number
        return _candidate(name, number, limit)

    def update(self, names: list[str]) -> None:
        self.names.update(names)


@dataclass
class DocContext:
    body: str
    editor: Editor
    options: Options
    report: Report
    taken: TakenNames  # ResourceClaimTemplate names used in this run
    picked: list[str]  # names this document took (a parallel run checks them against earlier documents')
    marks: list[int]  # offsets of the vendor names in the body (scan.requests follows them)
    consumed: set[int] = field(default_factory=set)  # id() of accelerator keys converted or already reported
    consumed_at: set[int] = field(default_factory=set)  # where those keys start in the body (scan.requests)
    shared: dict[int, str] = field(default_factory=dict)  # id() of a resources node -> name of its container
    notes: dict[str, list[str]] = field(default_factory=dict)  # object -> semantic changes, in order
    templates: list[tuple[tuple[str | int, ...], dict[str, Any]]] = field(default_factory=list)
    walk: bool = False  # the body may spell a vendor's name with escapes: scan.requests walks every node
    others: bool = False  # the body names an accelerator kdra cannot convert (res.OTHER_ACCELERATOR)

    @property
    def scan_body(self) -> str | None:
        """The body for scan.requests to follow the marks in, or None to walk the nodes."""
        return None if self.walk else self.body

    def take(self, name: str) -> None:
        self.taken.names.add(name)
        self.picked.append(name)

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
