"""Writing a command's result the way kubectl prints: tables in plain aligned columns (`-o table`, `-o wide`
with more columns), `kind/name` lines (`-o name`), and rich consoles that leave a closed pipe to main()."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import Any, TextIO


def write_table(
    header: Sequence[str], rows: Iterable[Sequence[object]], *, stream: TextIO | None = None
) -> int:
    """kubectl's table: upper-case header, columns three spaces apart, no trailing blanks. Returns the
    number of rows; with none, kubectl's `No resources found` goes to stderr."""
    out = stream if stream is not None else sys.stdout
    body = [[str(c) for c in row] for row in rows]
    if not body:
        print("No resources found", file=sys.stderr)
        return 0
    head = [h.upper() for h in header]
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    for row in [head, *body]:
        out.write("   ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() + "\n")
    return len(body)


def write_names(names: Iterable[str], *, stream: TextIO | None = None) -> None:
    """`-o name`: one `kind/name` per line."""
    out = stream if stream is not None else sys.stdout
    for name in names:
        out.write(name + "\n")


def console(**kw: Any) -> Any:
    """A rich Console whose closed pipe (`kdra ... | head`) raises BrokenPipeError for main() to end quietly,
    instead of rich's own exit with status 1."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError

    return _Console(**kw)


__all__ = ["console", "write_names", "write_table"]
