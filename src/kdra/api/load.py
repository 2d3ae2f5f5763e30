"""Reading and writing Kubernetes objects as YAML or JSON, the way kubectl reads and prints them.

Objects stay plain dicts (nothing is converted), so dump(load(x)) keeps every field, known or not.
Every problem is an `InputError` naming the file, the document and the line, never a traceback.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

from kdra.errors import InputError

try:  # libyaml is several times faster; fall back to the pure-Python classes where it is missing
    from yaml import CSafeDumper as _BaseDumper
    from yaml import CSafeLoader as _BaseLoader
except ImportError:  # pragma: no cover - depends on how PyYAML was built
    from yaml import SafeDumper as _BaseDumper  # type: ignore[assignment]
    from yaml import SafeLoader as _BaseLoader  # type: ignore[assignment]

_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"
YAML_SUFFIXES = (".yaml", ".yml", ".json")


# go-yaml's defence against alias bombs ("billion laughs"), which sigs.k8s.io/yaml and so kubectl and the
# API server inherit (yaml.v3 decode.go allowedAliasRatio): once more than 1,000 nodes are decoded and more
# than 100 of them came from alias expansion, at most 99% may come from aliases up to 400,000 nodes, falling
# linearly to 10% at 4,000,000.
_ALIAS_RATIO_LOW = 400_000
_ALIAS_RATIO_HIGH = 4_000_000


def _allowed_alias_ratio(decoded: int) -> float:
    if decoded <= _ALIAS_RATIO_LOW:
        return 0.99
    if decoded >= _ALIAS_RATIO_HIGH:
        return 0.10
    return 0.99 - 0.89 * (decoded - _ALIAS_RATIO_LOW) / (_ALIAS_RATIO_HIGH - _ALIAS_RATIO_LOW)


def check_aliasing(root: yaml.Node) -> None:
    """Count the nodes the document would have with every alias expanded, without expanding anything (an
    alias is the same Node object composed again), and refuse excessive aliasing before any value is built."""
    sizes: dict[int, int] = {}
    distinct = 0

    def size(node: yaml.Node) -> int:
        nonlocal distinct
        key = id(node)
        known = sizes.get(key)
        if known is not None:
            if known < 0:
                raise yaml.constructor.ConstructorError(
                    None, None, "found a recursive alias (an anchor used inside itself)", node.start_mark
                )
            return known
        sizes[key] = -1
        distinct += 1
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(child) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in node.value)
        sizes[key] = total
        return total

    decoded = size(root)
    aliased = decoded - distinct
    if aliased > 100 and decoded > 1000 and aliased / decoded > _allowed_alias_ratio(decoded):
        raise yaml.constructor.ConstructorError(
            None,
            None,
            f"document contains excessive aliasing: {decoded:,} nodes once aliases are expanded, "
            f"{aliased:,} of them from aliases (an alias bomb?)",
            root.start_mark,
        )


class _Loader(_BaseLoader):
    """Safe loader that keeps timestamps as strings (Kubernetes serves them as strings, and a
    datetime would not survive a JSON dump), rejects duplicate keys, as kubectl does, instead of
    silently keeping the last one, and refuses alias bombs before building anything."""

    def construct_document(self, node: yaml.Node) -> Any:
        check_aliasing(node)
        return super().construct_document(node)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[tuple[str, str]] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                key = (key_node.tag, key_node.value)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"found duplicate key {key_node.value!r}",
                        key_node.start_mark,
                    )
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != _TIMESTAMP_TAG]
    for first, resolvers in _BaseLoader.yaml_implicit_resolvers.items()
}


def _reject_tag(loader: yaml.BaseLoader, node: yaml.Node) -> Any:
    """Kubernetes objects are JSON: binary, set and ordered-map tags have no JSON form."""
    raise yaml.constructor.ConstructorError(
        None, None, f"the {node.tag} tag is not allowed in a Kubernetes object", node.start_mark
    )


for _tag in ("binary", "set", "omap", "pairs"):
    _Loader.add_constructor(f"tag:yaml.org,2002:{_tag}", _reject_tag)


class _Dumper(_BaseDumper):
    """Safe dumper that also quotes strings YAML 1.2 readers (kubectl, go-yaml) would take for
    numbers, such as the quantity "1e3"; PyYAML itself follows YAML 1.1 and would leave them bare.
    Never writes anchors: objects that share sub-dicts (rendered fleets do) must still read as plain
    Kubernetes YAML."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


_Dumper.yaml_implicit_resolvers = {k: list(v) for k, v in _BaseDumper.yaml_implicit_resolvers.items()}
_Dumper.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$|^[-+]?\.(inf|Inf|INF)$|^\.(nan|NaN|NAN)$"
    ),
    list("-+0123456789."),
)
_Dumper.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^0o[0-7]+$|^[-+]?0x[0-9a-fA-F]+$"), list("-+0")
)


def _doc_start_lines(text: str) -> list[int]:
    """1-based line where each YAML document starts (approximate: at each `---` line)."""
    starts: list[int] = []
    seen_content = False
    for lineno, line in enumerate(text.splitlines(), start=1):
        content = not seen_content and line.strip() and not line.lstrip().startswith(("#", "%"))
        if line.startswith("---") or content:
            starts.append(lineno)
            seen_content = True
    return starts or [1]


def type_name(value: object) -> str:
    """JSON's name for a Python value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "mapping"
    return type(value).__name__


def _check_object(obj: object, where: str) -> dict[str, Any]:
    """A document must be a mapping with apiVersion and kind (strings), as the API server requires."""
    if not isinstance(obj, dict):
        raise InputError(f"{where}: expected a Kubernetes object (a mapping), got a {type_name(obj)}")
    missing = [k for k in ("apiVersion", "kind") if not obj.get(k)]
    if missing:
        raise InputError(f"{where}: missing {' and '.join(missing)} (every object needs apiVersion and kind)")
    for key in ("apiVersion", "kind"):
        if not isinstance(obj[key], str):
            raise InputError(f"{where}: {key} must be a string, got a {type_name(obj[key])}")
    check_object_meta(obj.get("metadata"), where)
    return obj


def check_object_meta(meta: object, where: str, path: str = "metadata") -> None:
    """ObjectMeta's types (an object's, or a pod template's at `path`), as the API server decodes them:
    its strings strings, labels and annotations string maps (`gpu: true` in labels is refused by
    kubectl too)."""
    if meta is None:
        return
    if not isinstance(meta, dict):
        raise InputError(f"{where}: {path} must be a mapping, got a {type_name(meta)}")
    for key in ("name", "namespace", "generateName", "uid", "resourceVersion"):
        if meta.get(key) is not None and not isinstance(meta[key], str):
            raise InputError(f"{where}: {path}.{key} must be a string, got a {type_name(meta[key])}")
    for key in ("labels", "annotations"):
        m = meta.get(key)
        if m is None:
            continue
        if not isinstance(m, dict):
            raise InputError(f"{where}: {path}.{key} must be a mapping, got a {type_name(m)}")
        for k, v in m.items():
            if not isinstance(v, str):
                raise InputError(
                    f"{where}: {path}.{key}[{k!r}] must be a string, got a {type_name(v)} (quote it)"
                )


def _flatten(obj: dict[str, Any], where: str) -> Iterator[dict[str, Any]]:
    """`kind: List` (kubectl get -o yaml) and typed lists (ResourceClaimList from the API) yield
    their items; typed-list items lack apiVersion/kind, which the list supplies."""
    kind = obj["kind"]
    if kind != "List" and not kind.endswith("List"):
        yield obj
        return
    items = obj.get("items")
    if items is None:
        return
    if not isinstance(items, list):
        raise InputError(f"{where}: items must be a list, got a {type_name(items)}")
    item_kind = "" if kind == "List" else kind[: -len("List")]
    for i, item in enumerate(items):
        item_where = f"{where}, items[{i}]"
        if isinstance(item, dict) and item_kind:
            item.setdefault("apiVersion", obj["apiVersion"])
            item.setdefault("kind", item_kind)
        checked = _check_object(item, item_where)
        yield from _flatten(checked, item_where)


def _mark_line(err: yaml.YAMLError) -> int | None:
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    return None if mark is None else int(mark.line) + 1


def _yaml_problem(err: yaml.YAMLError) -> str:
    problem = getattr(err, "problem", None)
    context = getattr(err, "context", None)
    if problem:
        return f"{context}, {problem}" if context else str(problem)
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def _invalid_yaml(err: BaseException, source: str, docno: int) -> InputError:
    """The one-line error for a document the loader could not read (ValueError/TypeError: e.g. an
    unhashable mapping key)."""
    if isinstance(err, yaml.YAMLError):
        line = _mark_line(err)
        at = f", line {line}" if line else ""
        return InputError(f"{source}: document {docno}{at}: invalid YAML: {_yaml_problem(err)}")
    if isinstance(err, RecursionError):
        return InputError(f"{source}: document {docno}: invalid YAML: nested too deeply")
    return InputError(f"{source}: document {docno}: invalid YAML: {err}")


def _looks_like_json(text: str) -> bool:
    stripped = text.lstrip()
    return stripped.startswith(("{", "["))


class _JSONError(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _JSONError(f"duplicate field {key!r}")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise _JSONError(f"{name} is not JSON")  # Python's json reads NaN and Infinity; Go's (kubectl's) does not


def _strict_json(text: str) -> Any:
    """JSON as Go's decoder (kubectl's, the API server's) reads it: no trailing commas, NaN or Infinity, and
    duplicate fields are an error, as strict field validation makes them."""
    return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)


def load_text(text: str, source: str = "<input>") -> list[dict[str, Any]]:
    """Parse multi-document YAML or JSON into objects, flattening lists. Raises InputError.

    Text that starts with `{` or `[` is JSON. A file named *.json must be valid JSON (a trailing comma is
    an error with its line and column, as kubectl's decoder reports it); other text that is not valid
    JSON is read as YAML, as kubectl 1.34 and later do (`{apiVersion: v1, kind: Pod}` is a YAML flow
    mapping)."""
    if _looks_like_json(text):
        try:
            data = _strict_json(text)
        except _JSONError as e:
            raise InputError(f"{source}: invalid JSON: {e}") from None
        except json.JSONDecodeError as e:
            where = f"{source}: line {e.lineno} column {e.colno}: invalid JSON: {e.msg}"
            if source.endswith(".json"):
                raise InputError(where) from None
            try:
                return _load_yaml(text, source)
            except InputError:
                raise InputError(where) from None
        except RecursionError:
            raise InputError(f"{source}: invalid JSON: nested too deeply") from None
        docs: list[object] = data if isinstance(data, list) else [data]
        out: list[dict[str, Any]] = []
        for i, doc in enumerate(docs, start=1):
            where = f"{source}: document {i}" if isinstance(data, list) else f"{source}"
            out.extend(_flatten(_check_object(doc, where), where))
        return out
    return _load_yaml(text, source)


def _load_yaml(text: str, source: str) -> list[dict[str, Any]]:
    starts = _doc_start_lines(text)
    out: list[dict[str, Any]] = []
    docno = 0
    try:
        for doc in yaml.load_all(text, Loader=_Loader):
            docno += 1
            if doc is None:  # an empty document (a trailing `---`, or only comments)
                continue
            line = starts[docno - 1] if docno - 1 < len(starts) else None
            where = f"{source}: document {docno}" + (f" (line {line})" if line else "")
            out.extend(_flatten(_check_object(doc, where), where))
    except (yaml.YAMLError, RecursionError, ValueError, TypeError) as e:
        raise _invalid_yaml(e, source, docno + 1) from None
    return out


def load_documents(text: str, source: str) -> list[object]:
    """The non-empty YAML (or JSON) documents of `text` as plain values, read with the same safe loader as
    objects (no alias bombs, no duplicate keys, timestamps as strings), for kdra's own files (Fleet)."""
    docno = 0
    out: list[object] = []
    try:
        for doc in yaml.load_all(text, Loader=_Loader):
            docno += 1
            if doc is not None:
                out.append(doc)
    except (yaml.YAMLError, RecursionError, ValueError, TypeError) as e:
        raise _invalid_yaml(e, source, docno + 1) from None
    return out


def _read(path: Path) -> str:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file or directory") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory") from None
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text (byte {e.start})") from None


def _expand(path: Path) -> list[Path]:
    """A folder becomes its *.yaml/*.yml/*.json files, recursively, in name order."""
    if path.is_dir():
        found = [
            Path(root) / f
            for root, _dirs, files in os.walk(path)
            for f in files
            if f.endswith(YAML_SUFFIXES) and not f.startswith(".")
        ]
        return sorted(found)
    return [path]


def read_stdin() -> str:
    """All of standard input as text; a closed or unreadable stdin is an InputError, not a traceback."""
    stream = sys.stdin
    if stream is None or getattr(stream, "closed", False):
        raise InputError(
            "<stdin>: standard input is closed (give a file with -f FILE, or pipe the objects in)"
        )
    try:
        return stream.read()
    except UnicodeDecodeError:
        raise InputError("<stdin>: not UTF-8 text") from None
    except (OSError, ValueError) as e:  # EBADF on a closed descriptor, "I/O operation on closed file"
        raise InputError(
            f"<stdin>: cannot read standard input: {getattr(e, 'strerror', None) or e}"
        ) from None


def load_paths(paths: Iterable[str | os.PathLike[str]], *, allow_empty: bool = True) -> list[dict[str, Any]]:
    """Load every file, folder (recursed) or `-` (stdin), in the order given. With allow_empty=False, input
    without a single object is an InputError ("no objects in FILE"), as `kubectl apply` says."""
    paths = list(paths)
    out: list[dict[str, Any]] = []
    for p in paths:
        if str(p) == "-":
            out.extend(load_text(read_stdin(), "<stdin>"))
            continue
        path = Path(p)
        if not path.exists():
            raise InputError(f"{path}: no such file or directory")
        for f in _expand(path):
            out.extend(load_text(_read(f), str(f)))
    if not out and not allow_empty:
        names = ", ".join("<stdin>" if str(p) == "-" else str(p) for p in paths)
        raise InputError(f"no objects in {names or 'the input'}: expected Kubernetes objects (YAML or JSON)")
    return out


def dump_yaml(objs: Iterable[dict[str, Any]] | dict[str, Any]) -> str:
    """Multi-document YAML in kubectl's block style, key order kept; "" for no objects."""
    if isinstance(objs, dict):
        objs = [objs]
    docs = [
        yaml.dump(
            obj,
            Dumper=_Dumper,
            default_flow_style=False,
            sort_keys=False,
            allow_unicode=True,
            width=1 << 20,
        )
        for obj in objs
    ]
    return "---\n".join(docs)


def dump_json(objs: Iterable[dict[str, Any]] | dict[str, Any]) -> str:
    """One object as itself; several (or none) as a `v1 List`, as `kubectl get -o json` prints."""
    if isinstance(objs, dict):
        doc: dict[str, Any] = objs
    else:
        items = list(objs)
        doc = items[0] if len(items) == 1 else {"apiVersion": "v1", "kind": "List", "items": items}
    return json.dumps(doc, indent=4, ensure_ascii=False) + "\n"


__all__ = ["dump_json", "dump_yaml", "load_documents", "load_paths", "load_text", "read_stdin"]
