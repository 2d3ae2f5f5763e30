"""Splitting a YAML stream into documents with exact byte spans, and round-trip editing of one document.

Why our own splitter: ruamel.yaml keeps comments and quoting of a document it re-dumps, but never byte for
byte (it normalises indentation and spacing of untouched lines). So only documents that change are
re-dumped; every other document, comment and separator is copied verbatim from the original text.
"""

from __future__ import annotations

import io
import itertools
import re
from dataclasses import dataclass
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError

_SEPARATOR = re.compile(r"^---(?:[ \t]+#.*|[ \t]*)$")
_DOC_END = re.compile(r"^\.\.\.[ \t]*$")
_DIRECTIVE = re.compile(r"^%")


@dataclass
class Chunk:
    """One document of the stream: `head` (separator line, leading comments and blank lines), `body` (what
    YAML parses) and `tail` (trailing comments and blank lines). head + body + tail is the original text."""

    head: str
    body: str
    tail: str
    line: int  # 1-based line of the body's first line, for messages

    @property
    def text(self) -> str:
        return self.head + self.body + self.tail


def _is_trivia(line: str) -> bool:
    stripped = line.strip()
    return not stripped or stripped.startswith("#")


def split_documents(text: str) -> list[Chunk]:
    """Split at `---` / `...` lines at column 0; comments before a document belong to it (`# Source:`)."""
    lines = text.splitlines(keepends=True)
    groups: list[tuple[int, list[str]]] = []
    current: list[str] = []
    start = 0
    for index, line in enumerate(lines):
        bare = line.rstrip("\r\n")
        if (_SEPARATOR.match(bare) or _DOC_END.match(bare)) and current:
            groups.append((start, current))
            current, start = [], index
        current.append(line)
    if current or not groups:
        groups.append((start, current))
    chunks: list[Chunk] = []
    for first, group in groups:
        head_end = 0
        while head_end < len(group):
            bare = group[head_end].rstrip("\r\n")
            if (
                _SEPARATOR.match(bare)
                or _DOC_END.match(bare)
                or _DIRECTIVE.match(bare)
                or _is_trivia(group[head_end])
            ):
                head_end += 1
                continue
            break
        tail_start = len(group)
        while tail_start > head_end and _is_trivia(group[tail_start - 1]):
            tail_start -= 1
        chunks.append(
            Chunk(
                head="".join(group[:head_end]),
                body="".join(group[head_end:tail_start]),
                tail="".join(group[tail_start:]),
                line=first + head_end + 1,
            )
        )
    return chunks


@dataclass(frozen=True)
class Style:
    """Indentation of a document: mapping indent and the dash offset of block sequences."""

    mapping: int = 2
    offset: int = 0


_KEY_OPEN = re.compile(r"^(\s*)(?:- +)?[^#\s][^#]*:\s*(?:#.*)?$")


def guess_style(text: str) -> Style:
    """Guess indentation from the first block mapping and the first block sequence under a key."""
    mapping: int | None = None
    offset: int | None = None
    lines = [ln.rstrip("\r\n") for ln in text.splitlines() if not _is_trivia(ln)]
    for prev, nxt in itertools.pairwise(lines):
        match = _KEY_OPEN.match(prev)
        if not match:
            continue
        base = len(match.group(1))
        if prev.lstrip().startswith("- "):
            continue  # a key inside a sequence item: its base column is not the line's indent
        indent = len(nxt) - len(nxt.lstrip(" "))
        if nxt.lstrip().startswith("- "):
            if offset is None and indent >= base:
                offset = indent - base
        elif mapping is None and indent > base:
            mapping = indent - base
        if mapping is not None and offset is not None:
            break
    return Style(mapping=mapping or 2, offset=offset or 0)


def make_yaml(style: Style) -> YAML:
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096
    yaml.indent(mapping=style.mapping, sequence=style.offset + 2, offset=style.offset)
    return yaml


def load_document(body: str) -> Any:
    """Parse one document in round-trip mode. Raises ruamel's YAMLError."""
    doc = make_yaml(Style()).load(body)
    _keep_anchors(doc)
    return doc


def _keep_anchors(node: Any) -> None:
    """ruamel drops anchors nothing refers to; the author wrote them, so they stay."""
    anchor = getattr(node, "anchor", None)
    if anchor is not None and getattr(anchor, "value", None):
        anchor.always_dump = True
    if isinstance(node, dict):
        for value in node.values():
            _keep_anchors(value)
    elif isinstance(node, list):
        for value in node:
            _keep_anchors(value)


def dump_document(data: Any, style: Style) -> str:
    stream = io.StringIO()
    make_yaml(style).dump(data, stream)
    return stream.getvalue()


def safe_load(text: str) -> Any:
    return YAML(typ="safe", pure=True).load(text)


def delete_key(mapping: Any, key: str) -> None:
    """Delete `key`, keeping full-line comments that ruamel stored on it (they belong to what follows)."""
    keys = list(mapping.keys())
    index = keys.index(key)
    slot = mapping.ca.items.pop(key, None)
    del mapping[key]
    if not slot or len(slot) < 3 or slot[2] is None:
        return
    token = slot[2]
    value: str = token.value
    # The first line of the token is the end-of-line comment of the deleted key (or empty).
    newline = value.find("\n")
    rest = value[newline + 1 :] if newline >= 0 else ""
    if not rest.strip():
        return
    if index > 0:
        prev = keys[index - 1]
        prev_slot = mapping.ca.items.get(prev)
        if not isinstance(mapping[prev], (CommentedMap, CommentedSeq)):
            if prev_slot and len(prev_slot) > 2 and prev_slot[2] is not None:
                prev_slot[2].value = prev_slot[2].value + rest
            else:
                token.value = "\n" + rest
                mapping.ca.items[prev] = [None, None, token, None]
            return
    # No scalar key before it: keep the comment lines on the key that now comes first after it.
    if index < len(keys) - 1:
        following = keys[index + 1]
        lines = [ln.strip() for ln in rest.splitlines() if ln.strip().startswith("#")]
        if lines:
            column = token.column if hasattr(token, "column") else 0
            mapping.yaml_set_comment_before_after_key(
                following, before="\n".join(ln.lstrip("#").lstrip(" ") for ln in lines), indent=column
            )


__all__ = [
    "Chunk",
    "Style",
    "YAMLError",
    "delete_key",
    "dump_document",
    "guess_style",
    "load_document",
    "safe_load",
    "split_documents",
]
