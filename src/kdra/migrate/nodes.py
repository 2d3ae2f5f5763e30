"""One YAML document as libyaml's node graph (PyYAML's C composer), with the positions edits need.

Why nodes and not data: the migration edits the original text in place, so it needs to know where each key,
value and sequence item is. libyaml gives start and end marks (character offsets into the document body) for
every node; the composer never expands aliases (an alias is the anchored node object again), so a document
full of aliases costs no more than its text. Scalars are converted to Python values only when read.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import yaml
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import BaseResolver, Resolver

from kdra.api.load import check_aliasing

YAMLError = yaml.YAMLError
MarkedYAMLError = yaml.MarkedYAMLError

_PARSER: Any = None
try:  # the C parser's raw_parse checks a document without building Python objects
    from yaml import _yaml as _c_yaml

    _PARSER = _c_yaml.CParser
except ImportError:  # pragma: no cover - PyYAML without libyaml
    _PARSER = None

MERGE_TAG = "tag:yaml.org,2002:merge"
STR_TAG = "tag:yaml.org,2002:str"
NULL_TAG = "tag:yaml.org,2002:null"
MAP_TAG = "tag:yaml.org,2002:map"
SEQ_TAG = "tag:yaml.org,2002:seq"
PLAIN_TAG = "!kdra-plain"  # a plain scalar whose type is resolved only when read (most never are)
_NULLS = frozenset({"", "~", "null", "Null", "NULL"})
_RESOLVER = Resolver()


class _LazyResolver(BaseResolver):
    """Tags the composer needs right away (merge keys, nulls, quoted strings); other plain scalars are
    resolved when read: resolving every scalar of a document (PyYAML's regexes) costs more than parsing it."""

    def resolve(self, kind: Any, value: Any, implicit: Any) -> str:
        if kind is ScalarNode:
            if implicit[0]:
                if value == "<<":
                    return MERGE_TAG
                return NULL_TAG if value in _NULLS else PLAIN_TAG
            return STR_TAG
        return MAP_TAG if kind is MappingNode else SEQ_TAG

    # No path resolvers, so nothing to track per node; the composer calls these twice per node, and a
    # builtin costs far less to call than a Python method (dict.get takes any two arguments, int none).
    descend_resolver: Any = {}.get
    ascend_resolver: Any = int


_LOADER: Any
if _PARSER is not None:

    class _Loader(_PARSER, _LazyResolver):
        """Composes only: scalars are constructed when read (`scalar`), so no constructor is set up per
        document, and the resolver has no path state to set up."""

    _LOADER = _Loader
else:  # pragma: no cover - PyYAML without libyaml
    _LOADER = yaml.SafeLoader

Path = tuple[str | int, ...]


def compose(body: str) -> Node | None:
    """The node graph of one document (None when it is empty). Raises yaml.YAMLError, also for an alias bomb
    or a recursive alias (the bound kubectl and kdra's object loader apply)."""
    loader = _LOADER(body)
    try:
        node: Node | None = loader.get_single_node()
    finally:
        loader.dispose()
    if node is not None and may_alias(body):
        check_aliasing(node)
    return node


_ANCHOR = re.compile(r"&[^\s,\[\]{}&]")


def may_alias(body: str) -> bool:
    """Whether a document may hold aliases: an alias needs an anchor (`&name`) before it. A cheap test on the
    text (`&&` in a shell command is no anchor; an `&x` inside a string only costs a slower path)."""
    return "&" in body and _ANCHOR.search(body) is not None


def check(body: str) -> None:
    """Parse without building anything, only to find syntax errors (raises yaml.YAMLError)."""
    if _PARSER is None:  # pragma: no cover
        compose(body)
        return
    _PARSER(body).raw_parse()


_CONSTRUCTOR = SafeConstructor()


def scalar(node: Node | None) -> Any:
    """The Python value of a scalar node as a safe YAML load gives it (int, float, bool, None, str, ...)."""
    if not isinstance(node, ScalarNode):
        return None
    tag = node.tag
    if tag == PLAIN_TAG:
        value = node.value
        if value.isdigit() and value.isascii() and (value[0] != "0" or value == "0"):
            return int(value)  # a decimal integer (a leading 0 is YAML 1.1's octal): what the resolver reads
        tag = _RESOLVER.resolve(ScalarNode, value, (True, False))
        if tag == STR_TAG:
            return node.value
        node = ScalarNode(tag, node.value, node.start_mark, node.end_mark, node.style)
    elif tag == STR_TAG:
        return node.value
    construct = _CONSTRUCTOR.yaml_constructors.get(tag)
    if construct is None:
        return node.value
    try:
        return construct(_CONSTRUCTOR, node)
    except (ConstructorError, ValueError, OverflowError):
        return node.value


# The words YAML 1.1 (PyYAML's resolver) reads as booleans; the nulls are tagged when composed.
_BOOLS = frozenset(
    w for word in ("yes", "no", "true", "false", "on", "off") for w in (word, word.capitalize(), word.upper())
)


def text_of(node: Node | None) -> str | None:
    """A scalar's value as a string (what Kubernetes reads for names and label values), else None."""
    if not isinstance(node, ScalarNode) or node.tag == NULL_TAG:
        return None
    tag = node.tag
    if tag == STR_TAG:
        return str(node.value)
    if tag == PLAIN_TAG:
        value = node.value
        first = value[:1]
        # a string however it resolves: only a number (digit, sign, dot) or a boolean word is not
        if not first.isdigit() and first not in "-+." and (first not in "tfTFyYnNoO" or value not in _BOOLS):
            return str(value)
    value = scalar(node)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def is_map(node: Any) -> bool:
    return isinstance(node, MappingNode)


def is_seq(node: Any) -> bool:
    return isinstance(node, SequenceNode)


def own_entries(node: MappingNode) -> Iterator[tuple[int, ScalarNode, Node]]:
    """(index, key, value) written in this mapping itself (merge keys excluded)."""
    for index, (key, value) in enumerate(node.value):
        if key.tag != MERGE_TAG and isinstance(key, ScalarNode):
            yield index, key, value


def has_merges(node: MappingNode) -> bool:
    """Whether a mapping has merge keys (`<<`)."""
    _index(node)
    return bool(node._kdra_merges)  # type: ignore[attr-defined]


def has_duplicates(node: MappingNode) -> bool:
    """Whether a key is written twice in one mapping; without building anything when every key is a
    distinct string (the index then has one entry per key)."""
    if len(_index(node)) == len(node.value):
        return False
    return bool(duplicate_keys(node))


def merged_sources(node: MappingNode) -> list[MappingNode]:
    """The mappings `<<: *x` / `<<: [*x, *y]` merges into this one, in precedence order."""
    out: list[MappingNode] = []
    for key, value in node.value:
        if key.tag != MERGE_TAG:
            continue
        if isinstance(value, MappingNode):
            out.append(value)
        elif isinstance(value, SequenceNode):
            out.extend(v for v in value.value if isinstance(v, MappingNode))
    return out


def _index(node: MappingNode) -> dict[str, tuple[ScalarNode, Node]]:
    """Own string keys of a mapping -> (key, value), the last one winning as in a safe load; built once, with
    whether the mapping has merge keys (most have none, so a missing key needs no second look)."""
    index: dict[str, tuple[ScalarNode, Node]] | None = getattr(node, "_kdra_index", None)
    if index is None:
        index = {}
        merges = False
        for k, v in node.value:
            tag = k.tag
            if tag in (STR_TAG, PLAIN_TAG):
                if isinstance(k, ScalarNode):
                    index[k.value] = (k, v)
            elif tag == MERGE_TAG:
                merges = True
        node._kdra_index = index  # type: ignore[attr-defined]
        node._kdra_merges = merges  # type: ignore[attr-defined]
    return index


_MISSING: tuple[None, None, bool] = (None, None, False)


def lookup(node: Any, key: str) -> tuple[ScalarNode | None, Node | None, bool]:
    """(key node, value node, owned) for `key` in a mapping, following merge keys; owned is False when the
    entry comes from a merged mapping (editing it would edit every mapping that merges it)."""
    if not isinstance(node, MappingNode):
        return _MISSING
    found = _index(node).get(key)
    if found:
        return found[0], found[1], True
    if node._kdra_merges:  # type: ignore[attr-defined]
        for source in merged_sources(node):
            k2, v2, _ = lookup(source, key)
            if k2 is not None:
                return k2, v2, False
    return _MISSING


def get(node: Any, key: str) -> Node | None:
    """The value node of `key` in a mapping (merge keys followed), else None; the hot path of every read."""
    if not isinstance(node, MappingNode):
        return None
    index = getattr(node, "_kdra_index", None)  # _index's cache, looked at here: one call less per read
    found = (index if index is not None else _index(node)).get(key)
    if found:
        return found[1]
    if node._kdra_merges:  # type: ignore[attr-defined]
        return lookup(node, key)[1]
    return None


def get_path(node: Any, *keys: str | int) -> Node | None:
    for key in keys:
        if isinstance(key, int):
            if not isinstance(node, SequenceNode) or key >= len(node.value):
                return None
            node = node.value[key]
        else:
            node = get(node, key)
        if node is None:
            return None
    return node


def keys(node: Any) -> list[str]:
    """Effective keys of a mapping (own and merged), first occurrence order."""
    if not isinstance(node, MappingNode):
        return []
    out: list[str] = []
    for _, key, _ in own_entries(node):
        if key.value not in out:
            out.append(str(key.value))
    for source in merged_sources(node):
        for key_text in keys(source):
            if key_text not in out:
                out.append(key_text)
    return out


def duplicate_keys(node: MappingNode) -> list[ScalarNode]:
    """Keys written twice in one mapping (the API server's strict decoding rejects them)."""
    seen: set[str] = set()
    out = []
    for _, key, _ in own_entries(node):
        if key.value in seen:
            out.append(key)
        seen.add(key.value)
    return out


def plain(node: Any, _depth: int = 0) -> Any:
    """A small subtree as plain Python data (aliases shared, never expanded twice; depth bounded)."""
    if node is None or _depth > 64:
        return None
    if isinstance(node, ScalarNode):
        return scalar(node)
    if isinstance(node, SequenceNode):
        return [plain(v, _depth + 1) for v in node.value]
    if isinstance(node, MappingNode):
        out: dict[Any, Any] = {}
        for source in reversed(merged_sources(node)):
            merged = plain(source, _depth + 1)
            if isinstance(merged, dict):
                out.update(merged)
        for _, key, value in own_entries(node):
            out[scalar(key)] = plain(value, _depth + 1)
        return out
    return None


def path_text(path: Path) -> str:
    out = ""
    for key in path:
        if isinstance(key, int):
            out += f"[{key}]"
        elif "." in key or "/" in key or not key:
            out += f'["{key}"]'
        else:
            out += ("." if out else "") + key
    return out


def line_of(node: Node) -> int:
    """0-based line of the node's start in the document body."""
    return int(node.start_mark.line)


def is_anchored(body: str, node: Node) -> bool:
    return body[node.start_mark.index : node.start_mark.index + 1] == "&"


_ALIAS = re.compile(r"\*[^\s,\[\]{}]+")


def slot_end(body: str, node: Node, bound: int) -> int:
    """End offset of the text that stands for `node` at a place that starts at or after `bound`. An alias
    occurrence is the anchored node object again (marks of the anchor, which always come earlier), so its own
    text is the `*name` token found after `bound`."""
    if node.start_mark.index >= bound:
        return int(node.end_mark.index)
    match = _ALIAS.search(body, bound)
    return match.end() if match else bound


def is_alias_at(node: Node, bound: int) -> bool:
    return bool(node.start_mark.index < bound)


def _scalar_content_end(body: str, node: ScalarNode) -> int:
    start, end = node.start_mark.index, node.end_mark.index
    if node.style in ("|", ">"):
        header = body[start : body.find("\n", start) if "\n" in body[start:end] else end]
        if "+" in header:
            return int(end)  # keep chomping: trailing blank lines are part of the value
        stripped = body[start:end].rstrip()
        return int(start + len(stripped))
    return int(end)


def content_end(body: str, node: Node, bound: int) -> int:
    """Offset just after the last character that belongs to `node` (comments and blank lines that follow a
    block collection belong to what comes next)."""
    if node.start_mark.index < bound:  # an alias occurrence
        return slot_end(body, node, bound)
    if isinstance(node, ScalarNode):
        return _scalar_content_end(body, node)
    if getattr(node, "flow_style", False) or not node.value:
        return int(node.end_mark.index)
    if isinstance(node, MappingNode):
        key, value = node.value[-1]
        return content_end(body, value, key.end_mark.index)
    end = int(node.start_mark.index)
    for item in node.value:  # each item's text starts after the previous one's
        end = content_end(body, item, end)
    return end


def line_after(body: str, offset: int) -> int:
    """Offset of the start of the line after the one `offset` is on (or the end of the body)."""
    newline = body.find("\n", offset)
    return len(body) if newline < 0 else newline + 1


def line_start(body: str, offset: int) -> int:
    return body.rfind("\n", 0, offset) + 1


def column(body: str, offset: int) -> int:
    return offset - line_start(body, offset)


__all__ = [
    "MappingNode",
    "MarkedYAMLError",
    "Node",
    "Path",
    "ScalarNode",
    "SequenceNode",
    "YAMLError",
    "check",
    "compose",
    "content_end",
    "get",
    "get_path",
    "lookup",
    "path_text",
    "plain",
    "scalar",
    "text_of",
]
