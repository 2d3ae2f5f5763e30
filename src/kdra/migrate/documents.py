"""Splitting a YAML stream into documents with exact byte spans, one document at a time.

Every byte of the input lands in exactly one chunk (head + body + tail), so a document that needs no change is
copied verbatim and the stream can be rewritten without holding more than one document in memory.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

_SEPARATOR = re.compile(r"^---(?:[ \t]+#.*|[ \t]*)$")
_SEPARATOR_WITH_CONTENT = re.compile(r"^---[ \t]+\S")
_DOC_END = re.compile(r"^\.\.\.[ \t]*$")
_DIRECTIVE = re.compile(r"^%")


@dataclass
class Chunk:
    """One document of the stream: `head` (separator line, leading comments and blank lines), `body` (what
    YAML parses) and `tail` (trailing comments and blank lines). head + body + tail is the original text."""

    head: str
    body: str
    tail: str
    line: int  # 1-based line of the body's first line in the stream, for messages
    number: int = 1  # 1-based document number in the stream

    @property
    def text(self) -> str:
        return self.head + self.body + self.tail


def _is_trivia(line: str) -> bool:
    stripped = line.strip()
    return not stripped or stripped.startswith("#")


def _is_boundary(line: str) -> bool:
    bare = line.rstrip("\r\n")
    return bool(_SEPARATOR.match(bare) or _DOC_END.match(bare) or _SEPARATOR_WITH_CONTENT.match(bare))


def _chunk(first: int, group: list[str], number: int) -> Chunk:
    head_end = 0
    while head_end < len(group):
        line = group[head_end]
        bare = line.rstrip("\r\n")
        if _SEPARATOR_WITH_CONTENT.match(bare):
            break  # `--- {a: 1}`: the separator line carries the document's first content
        if _SEPARATOR.match(bare) or _DOC_END.match(bare) or _DIRECTIVE.match(bare) or _is_trivia(line):
            head_end += 1
            continue
        break
    tail_start = len(group)
    while tail_start > head_end and _is_trivia(group[tail_start - 1]):
        tail_start -= 1
    return Chunk(
        head="".join(group[:head_end]),
        body="".join(group[head_end:tail_start]),
        tail="".join(group[tail_start:]),
        line=first + head_end + 1,
        number=number,
    )


def iter_chunks(lines: Iterable[str]) -> Iterator[Chunk]:
    """Chunks of a stream given as lines with their line endings; split at `---` / `...` lines at column 0.
    Comments before a document belong to it (Helm's `# Source:` lines)."""
    current: list[str] = []
    start = 0
    number = 0
    produced = False
    for index, line in enumerate(lines):
        if current and _is_boundary(line):
            number += 1
            yield _chunk(start, current, number)
            produced = True
            current, start = [], index
        current.append(line)
    if current or not produced:
        yield _chunk(start, current, number + 1)


def split_documents(text: str) -> list[Chunk]:
    # Lines as a file opened with newline='' yields them, so text and files split the same way.
    return list(iter_chunks(io.StringIO(text, newline="")))
