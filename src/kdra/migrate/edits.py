"""Surgical edits of one YAML document's text: delete and add entries and items, replace values.

Every byte outside an edited entry stays as it was (indentation styles, quoting, comments, blank lines), which
is what a reviewer of the diff wants, and it is far cheaper than a round trip through a YAML library. New
content is written in the style of its surroundings: block or flow, the document's indentation, JSON quoting
inside JSON documents.
"""

from __future__ import annotations

import collections
import functools
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import Resolver

from kdra.migrate.nodes import NULL_TAG, content_end, line_after, line_start, slot_end


class EditError(Exception):
    """A layout the editor does not rewrite (reported to the user as a request that cannot be migrated)."""


@dataclass(frozen=True)
class Style:
    """How new block content is indented: nested mappings `mapping` columns right of their key, the dashes of
    a block sequence `offset` columns right of its key; `json`: quote keys and strings as JSON does."""

    mapping: int = 2
    offset: int = 0
    json: bool = False


# -- writing values ---------------------------------------------------------------------------------------


class Literal(str):
    """A string written as a block literal (`key: |`), e.g. a YAML document inside a YAML string."""

    __slots__ = ()


_RESOLVER = Resolver()
_INDICATORS = set("-?:,[]{}#&*!|>'\"%@`")
_FLOW_INDICATORS = set(",[]{}")


def _plain_ok(value: str, flow: bool) -> bool:
    if not value or value != value.strip() or value[0] in _INDICATORS:
        return False
    if ": " in value or " #" in value or value.endswith(":") or "\t" in value or "\n" in value:
        return False
    if flow and any(c in _FLOW_INDICATORS for c in value):
        return False
    if not value.isprintable():
        return False
    return bool(_RESOLVER.resolve(ScalarNode, value, (True, False)) == "tag:yaml.org,2002:str")


def scalar_text(value: Any, style: Style, flow: bool = False) -> str:
    if type(value) is str:
        return _string_text(value, style.json, flow)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if type(value) is int:
        return str(value)  # what json.dumps writes for an int, without its encoder
    if isinstance(value, int | float):
        return json.dumps(value)
    return _string_text(str(value), style.json, flow)


@functools.lru_cache(maxsize=8192)
def _string_text(text: str, as_json: bool, flow: bool) -> str:
    if as_json or not _plain_ok(text, flow):
        return json.dumps(text, ensure_ascii=False)
    return text


def flow_text(value: Any, style: Style) -> str:
    if isinstance(value, dict):
        inner = ", ".join(f"{scalar_text(k, style, True)}: {flow_text(v, style)}" for k, v in value.items())
        return "{" + inner + "}"
    if isinstance(value, list):
        return "[" + ", ".join(flow_text(v, style) for v in value) + "]"
    return scalar_text(value, style, True)


def map_lines(data: dict[str, Any], indent: int, style: Style, out: list[str] | None = None) -> list[str]:
    """Block lines of a mapping whose keys start at column `indent` (appended to `out` when given: one list
    for a whole value, not one per level)."""
    if out is None:
        out = []
    pad = " " * indent
    as_json = style.json
    for key, value in data.items():
        key_text = _string_text(key, as_json, False) if type(key) is str else scalar_text(key, style)
        kind = type(value)
        if kind is str:  # the common case first: a string scalar
            out.append(f"{pad}{key_text}: {_string_text(value, as_json, False)}")
        elif isinstance(value, Literal) and not as_json:
            out.append(f"{pad}{key_text}: |")
            inner = " " * (indent + max(style.mapping, 2))
            out.extend(inner + line if line else "" for line in value.splitlines())
        elif isinstance(value, dict) and value:
            out.append(f"{pad}{key_text}:")
            map_lines(value, indent + style.mapping, style, out)
        elif isinstance(value, list) and value:
            out.append(f"{pad}{key_text}:")
            seq_lines(value, indent + style.offset, style, out)
        else:
            out.append(f"{pad}{key_text}: {_block_value(value, style)}")
    return out


def _block_value(value: Any, style: Style) -> str:
    """A scalar (or empty collection) after `key: ` or `- ` in block context."""
    if isinstance(value, dict | list):
        return flow_text(value, style)
    return scalar_text(value, style)


def seq_lines(items: list[Any], indent: int, style: Style, out: list[str] | None = None) -> list[str]:
    """Block lines of a sequence whose dashes are at column `indent` (appended to `out` when given)."""
    if out is None:
        out = []
    pad = " " * indent
    for item in items:
        first = len(out)
        if isinstance(item, dict) and item:
            map_lines(item, indent + 2, style, out)
        elif isinstance(item, list) and item:
            seq_lines(item, indent + 2, style, out)
        else:
            out.append(f"{pad}- {_block_value(item, style)}")
            continue
        out[first] = pad + "- " + out[first][indent + 2 :]
    return out


def document_text(data: dict[str, Any], style: Style, newline: str = "\n") -> str:
    if style.json:
        return flow_text(data, style) + newline
    if data.get("kind") == "ResourceClaimTemplate" and list(data) == _TEMPLATE_KEYS:
        return _claim_template_text(data, style, newline)
    return "".join(line + newline for line in map_lines(data, 0, style))


def guess_style(text: str, root: Node | None = None) -> Style:
    """Indentation of a document, from its nodes (`root`, composed from `text` when not given): the indent of
    the first block mapping nested under a key and the dash offset of the first block sequence under a key;
    JSON when the document is one flow mapping with quoted keys."""
    if text.lstrip().startswith("{"):
        return Style(json='"' in text[: text.find(":")] if ":" in text else False)
    if root is None:
        from kdra.migrate.nodes import YAMLError, compose

        try:
            root = compose(text)
        except YAMLError:
            return Style()
    mapping: int | None = None
    offset: int | None = None
    # Breadth first over the nodes, at most `budget` of them (the style shows early). Scalars count towards
    # the budget where they stand in that order but are never queued: only collections can show a style.
    budget = 2000
    queue: collections.deque[tuple[MappingNode | SequenceNode, int]] = collections.deque()
    if isinstance(root, MappingNode | SequenceNode):
        queue.append((root, 0))
    count = 1  # nodes in breadth-first order so far, scalars included
    while queue and (mapping is None or offset is None):
        node, position = queue.popleft()
        if position >= budget:
            break
        if isinstance(node, SequenceNode):
            for item in node.value:
                if not isinstance(item, ScalarNode):
                    queue.append((item, count))
                count += 1
            continue
        if node.flow_style:
            continue
        for key, value in node.value:
            if value.start_mark.index < key.end_mark.index:
                continue  # an alias (never queued)
            if isinstance(value, ScalarNode):
                count += 1
                continue
            if isinstance(value, MappingNode) and not value.flow_style and value.value:
                first = value.value[0][0]
                if mapping is None and first.start_mark.line > key.start_mark.line:
                    step = first.start_mark.column - key.start_mark.column
                    mapping = step if step > 0 else None
            elif (
                isinstance(value, SequenceNode)
                and not value.flow_style
                and value.value
                and offset is None
                and value.start_mark.line > key.start_mark.line
            ):
                offset = max(0, value.start_mark.column - key.start_mark.column)
            queue.append((value, count))
            count += 1
    return Style(mapping=mapping or 2, offset=offset or 0)


def sequence_offset(body: str, key: ScalarNode, seq: Node | None) -> int | None:
    """The dash offset a block sequence under `key` is written with (None for flow sequences)."""
    if not isinstance(seq, SequenceNode) or seq.flow_style or not seq.value:
        return None
    dash = seq.start_mark.index
    if seq.start_mark.index < key.end_mark.index:  # an alias
        return None
    return max(0, (dash - line_start(body, dash)) - key.start_mark.column)


_TEMPLATE_KEYS = ["apiVersion", "kind", "metadata", "spec"]


def _claim_template_text(data: dict[str, Any], style: Style, newline: str) -> str:
    """map_lines for the one shape kdra writes most, a ResourceClaimTemplate, without walking it generically
    (a template per migrated pod spec: this is a good part of the emitting)."""
    m, o = style.mapping, style.offset
    meta = data["metadata"]
    lines = ["apiVersion: resource.k8s.io/v1", "kind: ResourceClaimTemplate", "metadata:"]
    lines.append(f"{' ' * m}name: {scalar_text(meta['name'], style)}")
    if "namespace" in meta:
        lines.append(f"{' ' * m}namespace: {scalar_text(meta['namespace'], style)}")
    lines += ["spec:", f"{' ' * m}spec:", f"{' ' * 2 * m}devices:", f"{' ' * 3 * m}requests:"]
    lines += seq_lines(data["spec"]["spec"]["devices"]["requests"], 3 * m + o, style)
    return newline.join(lines) + newline


# -- the editor ---------------------------------------------------------------------------------------------

_DASH_PREFIX = re.compile(r"^[ ]*-[ ]+$")


@dataclass
class _Plan:
    node: Node
    style: Style
    deleted: set[int] = field(default_factory=set)
    added: list[Any] = field(default_factory=list)  # (key, value) for mappings, values for sequences


class Editor:
    """Collects edits on the nodes of one document body; `render()` applies them to the text."""

    def __init__(self, body: str, style: Style) -> None:
        self.body = body
        self.style = style
        self.newline = "\r\n" if "\r\n" in body else "\n"
        self._plans: dict[int, _Plan] = {}
        self._replaced: list[tuple[int, int, str]] = []

    @property
    def changed(self) -> bool:
        return bool(self._plans or self._replaced)

    def _plan(self, node: Node) -> _Plan:
        plan = self._plans.get(id(node))
        if plan is None:
            plan = self._plans[id(node)] = _Plan(node, self.style)
        return plan

    # -- what the edits leave ----------------------------------------------------------------------------
    def remaining_keys(self, mapping: MappingNode) -> list[str]:
        plan = self._plans.get(id(mapping))
        deleted = plan.deleted if plan else set()
        out = [str(k.value) for i, (k, _) in enumerate(mapping.value) if i not in deleted]
        out += [str(key) for key, _ in (plan.added if plan else [])]
        return out

    def remaining_items(self, seq: SequenceNode) -> int:
        plan = self._plans.get(id(seq))
        if plan is None:
            return len(seq.value)
        return len(seq.value) - len(plan.deleted) + len(plan.added)

    # -- operations ---------------------------------------------------------------------------------------
    def delete(self, mapping: MappingNode, key: str) -> None:
        for index, (k, _) in enumerate(mapping.value):
            if isinstance(k, ScalarNode) and k.value == key:
                self._plan(mapping).deleted.add(index)
                return
        raise KeyError(key)

    def add(self, mapping: MappingNode, key: str, value: Any) -> None:
        self._plan(mapping).added.append((key, value))

    def delete_item(self, seq: SequenceNode, index: int) -> None:
        self._plan(seq).deleted.add(index)

    def append(self, seq: SequenceNode, value: Any) -> None:
        self._plan(seq).added.append(value)

    def replace(self, node: Node, bound: int, value: Any) -> None:
        """Replace the value `node` (found after offset `bound`) by `value`: a scalar in place, a collection
        as flow text in flow context, or as block lines under its key when `node` is an empty/null scalar."""
        start = node.start_mark.index
        end = slot_end(self.body, node, bound)
        if start < bound:  # an alias: replace the `*name` token
            start = end - len(self.body[bound:end].lstrip())
        block = isinstance(value, dict | list) and value and isinstance(node, ScalarNode)
        if block and node.tag == NULL_TAG and self._block_context(start):
            # `key:` or `key: null`: the value goes on the lines below, indented under the key.
            col = self._key_column(bound)
            lines = (
                map_lines(value, col + self.style.mapping, self.style)
                if isinstance(value, dict)
                else seq_lines(value, col + self.style.offset, self.style)
            )
            self._replaced.append((start, end, "".join(self.newline + ln for ln in lines)))
            return
        self._replaced.append((start, end, flow_text(value, self.style)))

    def replace_text(self, node: ScalarNode, text: str) -> None:
        self._replaced.append((node.start_mark.index, node.end_mark.index, text))

    def replace_block(self, node: ScalarNode, text: str) -> None:
        """Replace a block scalar (`|` / `>`) by a literal with `text`, indented under its key."""
        start = node.start_mark.index
        end = content_end(self.body, node, start)
        pad = " " * (self._key_column(start) + max(self.style.mapping, 2))
        lines = [pad + line if line else "" for line in text.splitlines()]
        self._replaced.append((start, end, "|" + "".join(self.newline + ln for ln in lines)))

    def _block_context(self, offset: int) -> bool:
        line = self.body[line_start(self.body, offset) : offset]
        return "{" not in line and "[" not in line

    def _key_column(self, offset: int) -> int:
        start = line_start(self.body, offset)
        line = self.body[start:offset]
        stripped = line.lstrip(" ")
        if stripped.startswith("- "):
            return len(line) - len(stripped) + 2
        return len(line) - len(stripped)

    # -- rendering --------------------------------------------------------------------------------------
    def render(self) -> str:
        # (start, end, order, text); insertions at one offset go innermost collection first (a later start)
        edits: list[tuple[int, int, int, str]] = []
        for plan in self._plans.values():
            for start, end, text in self._plan_edits(plan):
                edits.append((start, end, -plan.node.start_mark.index, text))
        for start, end, text in self._replaced:
            edits.append((start, end, 0, text))
        edits = _drop_nested(edits)
        edits.sort(key=lambda e: (e[0], e[1] > e[0], e[2]))
        out: list[str] = []
        position = 0
        for start, end, _, text in edits:
            if start < position:
                raise EditError("overlapping edits")
            out.append(self.body[position:start])
            out.append(text)
            position = end
        out.append(self.body[position:])
        return "".join(out)

    def _plan_edits(self, plan: _Plan) -> list[tuple[int, int, str]]:
        saved, self.style = self.style, plan.style
        try:
            return self._plan_edits_in_style(plan)
        finally:
            self.style = saved

    def _plan_edits_in_style(self, plan: _Plan) -> list[tuple[int, int, str]]:
        node = plan.node
        if isinstance(node, MappingNode):
            pairs = node.value
            bounds = [k.start_mark.index for k, _ in pairs]
            ends: Sequence[int] = _LazyEnds(
                len(pairs), lambda i: content_end(self.body, pairs[i][1], pairs[i][0].end_mark.index)
            )
            lines = [self._map_entry_lines(k, v) for k, v in plan.added]
            if node.flow_style:
                return self._flow_edits(
                    node, bounds, ends, plan, [self._flow_entry(k, v) for k, v in plan.added]
                )
            column = pairs[0][0].start_mark.column if pairs else 0
            return self._block_edits(bounds, ends, plan, lines, column)
        items = node.value
        bounds, ends = [], []
        bound = node.start_mark.index
        for item in items:
            start = item.start_mark.index if item.start_mark.index >= bound else bound
            bounds.append(start)
            bound = content_end(self.body, item, bound)
            ends.append(bound)
        if getattr(node, "flow_style", False):
            return self._flow_edits(node, bounds, ends, plan, [flow_text(v, self.style) for v in plan.added])
        dashes = [self._dash_start(b) for b in bounds]
        column = dashes[0] - line_start(self.body, dashes[0]) if dashes else 0
        lines = [seq_lines([v], 0, self.style) for v in plan.added]
        return self._block_edits(dashes, ends, plan, lines, column)

    def _dash_start(self, item_start: int) -> int:
        """Offset of the `-` that opens the block sequence item starting at `item_start`."""
        before = self.body[line_start(self.body, item_start) : item_start]
        if not _DASH_PREFIX.match(before):
            raise EditError("a block sequence item that does not start its line")
        return line_start(self.body, item_start) + before.index("-")

    def _map_entry_lines(self, key: str, value: Any) -> list[str]:
        return map_lines({key: value}, 0, self.style)

    def _flow_entry(self, key: str, value: Any) -> str:
        return f"{scalar_text(key, self.style, True)}: {flow_text(value, self.style)}"

    def _block_edits(
        self, starts: list[int], ends: Sequence[int], plan: _Plan, added: list[list[str]], column: int
    ) -> list[tuple[int, int, str]]:
        body = self.body
        out: list[tuple[int, int, str]] = []
        surviving = [i for i in range(len(starts)) if i not in plan.deleted]
        pad = " " * column
        added_text = "".join(pad + line + self.newline for lines in added for line in lines)
        for index in sorted(plan.deleted):
            start = starts[index]
            first = line_start(body, start)
            if body[first:start].strip(" "):
                # The first entry of a mapping on a `- ` line: the next surviving key moves up onto it.
                following = [i for i in surviving if i > index]
                if following:
                    out.append((start, starts[following[0]], ""))
                    continue
                if added and not surviving:
                    text = added_text[column:] if added_text.startswith(pad) else added_text
                    out.append((start, line_after(body, ends[max(plan.deleted)]), text))
                    added_text = ""
                    continue
                # Every entry goes: the caller deletes the item that holds this mapping, which takes this
                # span along (a span inside a deleted one is dropped).
                out.append((start, line_after(body, ends[index]), ""))
                continue
            end = line_after(body, ends[index])
            kept = [ln for ln in body[first:end].splitlines(keepends=True)[1:] if ln.strip().startswith("#")]
            out.append((first, end, "".join(kept)))
        if added_text:
            if surviving:
                at = line_after(body, ends[surviving[-1]])
                prefix = "" if at == 0 or body[at - 1] == "\n" else self.newline
            elif starts:
                at, prefix = line_start(body, starts[min(plan.deleted)]), ""
            else:  # pragma: no cover - block collections are never empty
                raise EditError("adding to an empty block collection")
            out.append((at, at, prefix + added_text))
        return out

    def _flow_edits(
        self, node: Node, starts: list[int], ends: Sequence[int], plan: _Plan, added: list[str]
    ) -> list[tuple[int, int, str]]:
        body = self.body
        out: list[tuple[int, int, str]] = []
        count = len(starts)
        surviving = [i for i in range(count) if i not in plan.deleted]
        separator = self._flow_separator(node, starts, ends)
        text = separator.join(added)
        if not surviving and count:
            # Everything goes: the new entries take the place of the old ones (the layout stays).
            out.append((starts[0], ends[-1], text))
            return out
        runs: list[list[int]] = []
        for index in sorted(plan.deleted):
            if runs and runs[-1][-1] == index - 1:
                runs[-1].append(index)
            else:
                runs.append([index])
        for run in runs:
            after = run[-1] + 1
            if after < count:
                out.append((starts[run[0]], starts[after], ""))
            else:
                out.append((ends[run[0] - 1], ends[run[-1]], ""))
        if added:
            if surviving:
                out.append((ends[surviving[-1]], ends[surviving[-1]], separator + text))
            else:
                open_at = node.start_mark.index
                while body[open_at] not in "{[":
                    open_at += 1  # skip an anchor or tag
                out.append((open_at + 1, open_at + 1, text))
        return out

    def _flow_separator(self, node: Node, starts: list[int], ends: Sequence[int]) -> str:
        """How this flow collection separates its entries: `, ` on one line, or `,` + newline + indentation
        in a pretty-printed JSON document."""
        body = self.body
        if len(starts) >= 2:
            between = body[ends[-2] : starts[-1]]
            if between.strip() == ",":
                return between
        if starts and "\n" in body[node.start_mark.index : starts[0]]:
            first = line_start(body, starts[0])
            return "," + self.newline + body[first : starts[0]]
        return ", "


class _LazyEnds(Sequence[int]):
    """Content ends of a mapping's entries, computed when asked (an edit needs two or three of them)."""

    def __init__(self, count: int, compute: Callable[[int], int]) -> None:
        self._count = count
        self._compute = compute
        self._known: dict[int, int] = {}

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._count))]
        if index < 0:
            index += self._count
        if not 0 <= index < self._count:
            raise IndexError(index)
        if index not in self._known:
            self._known[index] = self._compute(index)
        return self._known[index]


def _drop_nested(edits: list[tuple[int, int, int, str]]) -> list[tuple[int, int, int, str]]:
    """Edits inside a span another edit deletes are dropped (a deleted `limits:` takes its keys along); an
    insertion at the very start of a deleted span stays. One sweep in start order: the span seen so far that
    reaches furthest is the one that could hold the next edit."""
    out = []
    cover_start, cover_end = -1, -1
    for edit in sorted(edits, key=lambda e: (e[0], e[1] > e[0], -e[1])):
        start, end = edit[0], edit[1]
        if start == end:
            inside = cover_start < start < cover_end
        else:
            inside = cover_start <= start and end <= cover_end and (start, end) != (cover_start, cover_end)
        if inside:
            continue
        out.append(edit)
        if end > cover_end:
            cover_start, cover_end = start, end
    return out
