"""Splitting a YAML stream into documents with exact byte spans, one document at a time.

Every byte of the input lands in exactly one chunk (head + body + tail), so a document that needs no change is
copied verbatim and the stream can be rewritten without holding more than one document in memory.
"""

from __future__ import annotations

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


# A line that starts a document: `---` (alone, with a comment, or with the document's first content) or `...`.
_BOUNDARY = re.compile(r"(?:---(?:[ \t][^\n]*)?|\.\.\.[ \t]*)\r?$", re.MULTILINE)
_LINE_START = re.compile(r"\n(?=---|\.\.\.)")  # a literal first: the regex engine skips ahead fast


def _other_breaks(text: str) -> bool:
    """Whether text has a line break other than \n that str.splitlines also splits at (CRLF files, form
    feeds, Unicode separators). Substring tests, written out: faster than a regex or a loop over them."""
    return (
        "\r" in text
        or "\v" in text
        or "\f" in text
        or "\x1c" in text
        or "\x1d" in text
        or "\x1e" in text
        or "\x85" in text
        or "\u2028" in text
        or "\u2029" in text
    )


def _chunk(text: str, first: int, number: int) -> Chunk:
    """A chunk from the text between two boundaries (`first`: 0-based line of its first line). Only the head
    and tail lines are looked at, from each end: a document's other lines are never split.

    A byte order mark (Windows editors write one) is head, not body: the YAML parser skips it but counts it
    as a column of the first line, so edits placed by its marks would land one column off."""
    if text.startswith("\ufeff"):
        chunk = _chunk(text[1:], first, number)
        chunk.head = "\ufeff" + chunk.head
        return chunk
    if _other_breaks(text):
        return _chunk_of_lines(text, first, number)
    size = len(text)
    head_end = 0  # offset where the body starts
    head_lines = 0
    while head_end < size:
        newline = text.find("\n", head_end)
        line_end = size if newline < 0 else newline + 1
        if not _is_head_line(text[head_end:line_end]):
            break
        head_end = line_end
        head_lines += 1
    tail_start = size  # offset where the tail starts
    while tail_start > head_end:
        line_start = text.rfind("\n", 0, tail_start - 1) + 1
        if not _is_trivia(text[line_start:tail_start]):
            break
        tail_start = max(line_start, head_end)
    return Chunk(
        text[:head_end], text[head_end:tail_start], text[tail_start:], first + head_lines + 1, number
    )


def _is_head_line(line: str) -> bool:
    """Whether a line before a document's content belongs to its head (separator, directive, comment)."""
    if line == "---\n":  # the head of nearly every document
        return True
    first = line[:1]
    if first.isalnum() or first in '"{[':  # the first line of content (no whitespace, no head line's mark)
        return False
    bare = line.rstrip("\r\n")
    if _SEPARATOR_WITH_CONTENT.match(bare):
        return False  # `--- {a: 1}`: the separator line carries the document's first content
    return bool(_SEPARATOR.match(bare) or _DOC_END.match(bare) or _DIRECTIVE.match(bare) or _is_trivia(line))


def _chunk_of_lines(text: str, first: int, number: int) -> Chunk:
    """_chunk for text with other line breaks than \n: on its lines as str.splitlines cuts them."""
    lines = text.splitlines(keepends=True)
    head_end = 0
    while head_end < len(lines) and _is_head_line(lines[head_end]):
        head_end += 1
    tail_start = len(lines)
    while tail_start > head_end and _is_trivia(lines[tail_start - 1]):
        tail_start -= 1
    head = "".join(lines[:head_end])
    tail = "".join(lines[tail_start:])
    return Chunk(head, text[len(head) : len(text) - len(tail)], tail, first + head_end + 1, number)


def iter_chunks(pieces: Iterable[str]) -> Iterator[Chunk]:
    """Chunks of a stream given as pieces of text (lines, or blocks as read from a file); split at `---` /
    `...` lines at column 0. Comments before a document belong to it (Helm's `# Source:` lines). Only the
    current document is held."""
    buffer = ""
    line = 0  # 0-based line of buffer[0]
    number = 0
    produced = False
    searched = 0  # buffer[:searched] holds no boundary but the one at 0
    pieces_left = iter(pieces)
    done = False
    while not done:
        piece = next(pieces_left, None)
        if piece is None:
            done = True
            complete = len(buffer)  # the last line counts even without a line end
        else:
            buffer += piece
            complete = buffer.rfind("\n") + 1  # boundaries are whole lines: look at complete ones only
        start = 0
        for candidate in _LINE_START.finditer(buffer, max(searched - 1, 0), complete):
            at = candidate.end()
            if not _BOUNDARY.match(buffer, at, len(buffer) if done else complete):
                continue
            text = buffer[start:at]
            number += 1
            yield _chunk(text, line, number)
            produced = True
            line += text.count("\n")
            start = at
        buffer = buffer[start:]
        searched = max(complete - start, 0)
    if buffer or not produced:
        yield _chunk(buffer, line, number + 1)


def split_documents(text: str) -> list[Chunk]:
    return list(iter_chunks([text]))


def _boundary_before(text: str, end: int) -> int:
    """Start of the last document boundary line in text[:end] (0: the stream's start)."""
    at = end
    while True:
        # the later of the two: `...` is looked for only after the last `---` (most streams have no `...`,
        # and looking for it back to the block's start, once per document, was most of the first pass)
        dashes = text.rfind("\n---", 0, at)
        at = max(dashes, text.rfind("\n...", dashes + 1, at))
        if at < 0:
            return 0
        if _BOUNDARY.match(text, at + 1):
            return at + 1


def _boundary_after(text: str, start: int) -> int:
    """Start of the first document boundary line after offset `start` (len(text) when none)."""
    for candidate in _LINE_START.finditer(text, start):
        if _BOUNDARY.match(text, candidate.end()):
            return candidate.end()
    return len(text)


def _finds(text: str, words: tuple[str, ...], end: int) -> list[int]:
    """Sorted offsets of the words in text[:end] (substring search: far cheaper than a regex alternation)."""
    out: list[int] = []
    for word in words:
        at = text.find(word, 0, end)
        while at >= 0:
            out.append(at)
            at = text.find(word, at + len(word), end)
    return sorted(out)


def bodies_mentioning(pieces: Iterable[str], words: tuple[str, ...]) -> Iterator[str]:
    """The bodies of the documents whose text has one of `words`, without splitting the others: for a pass
    that looks at few documents of a large stream."""
    buffer = ""
    for piece in [*pieces, None] if isinstance(pieces, list) else _ended(pieces):
        if piece is None:
            complete = len(buffer)
        else:
            buffer += piece
            complete = _boundary_before(
                buffer, len(buffer)
            )  # later text may belong to an unfinished document
        last = -1
        for found in _finds(buffer, words, complete):
            start = _boundary_before(buffer, found + 1) if found else 0
            if start <= last:
                continue
            end = min(_boundary_after(buffer, found), complete)
            last = start
            yield _chunk(buffer[start:end], 0, 0).body
        buffer = buffer[complete:]


def _ended(pieces: Iterable[str]) -> Iterator[str | None]:
    yield from pieces
    yield None
