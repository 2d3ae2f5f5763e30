"""Message lines a migration reports (notes, warnings, changes, errors), held in bounded memory.

Messages are printed only once every input has migrated (on exit 2 nothing but the errors is printed), yet a
stream of 25k rewritten workloads makes 6 MB of `note:` lines: memory would follow the number of objects, not
the largest document. So a run's messages live in one anonymous temporary file (a Spool), and each list of
them keeps only its newest lines in memory, up to `Spool.hold` characters, writing the older ones to the
spool in order.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Iterator
from typing import IO

HOLD = 2**16  # characters of messages one list keeps in memory before it writes them to its spool


class Spool:
    """One anonymous temporary file (created on first use) that message lists write their older lines to."""

    def __init__(self, hold: int = HOLD) -> None:
        self.hold = hold
        self._file: IO[bytes] | None = None

    def write(self, data: bytes) -> tuple[int, int]:
        """Append `data`; its (offset, length) in the file."""
        if self._file is None:
            self._file = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
        self._file.seek(0, 2)
        offset = self._file.tell()
        self._file.write(data)
        return offset, len(data)

    def read(self, span: tuple[int, int]) -> bytes:
        assert self._file is not None
        self._file.seek(span[0])
        return self._file.read(span[1])

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class Messages:
    """An append-only list of lines, in order. Without a spool it is a plain list in memory; with one it
    keeps at most the spool's `hold` characters in memory and the rest in the spool (a JSON array per
    written batch, so a line may hold any character, newlines included)."""

    __slots__ = ("_count", "_held", "_lines", "_spans", "_spool")

    def __init__(self, spool: Spool | None = None) -> None:
        self._spool = spool
        self._lines: list[str] = []
        self._spans: list[tuple[int, int]] = []
        self._held = 0
        self._count = 0

    def append(self, line: str) -> None:
        self._lines.append(line)
        self._count += 1
        if self._spool is not None:
            self._held += len(line)
            if self._held > self._spool.hold:
                self.flush()

    def extend(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.append(line)

    def __iadd__(self, lines: Iterable[str]) -> Messages:
        self.extend(lines)
        return self

    def flush(self) -> None:
        """Write the lines held in memory to the spool (if there is one)."""
        if self._spool is None or not self._lines:
            return
        self._spans.append(self._spool.write(json.dumps(self._lines).encode()))
        self._lines = []
        self._held = 0

    @property
    def held(self) -> int:
        """Characters of lines held in memory (what this list costs beyond its spool)."""
        return sum(len(line) for line in self._lines)

    def __iter__(self) -> Iterator[str]:
        for span in self._spans:
            assert self._spool is not None
            yield from json.loads(self._spool.read(span))
        yield from list(self._lines)

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __getitem__(self, index: int) -> str:
        if index < 0:
            index += self._count
        if not 0 <= index < self._count:
            raise IndexError(index)
        for position, line in enumerate(self):
            if position == index:
                return line
        raise IndexError(index)  # pragma: no cover

    def __add__(self, other: Iterable[str]) -> list[str]:
        return [*self, *other]

    def __radd__(self, other: Iterable[str]) -> list[str]:
        return [*other, *self]

    def __repr__(self) -> str:
        return f"Messages({list(self)!r})"
