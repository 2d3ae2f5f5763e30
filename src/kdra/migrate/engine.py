"""Migration of one YAML stream: documents that need no change are copied verbatim, the others are edited in
ruamel round-trip mode, and each new ResourceClaimTemplate follows the document of its workload."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Any

from kdra.errors import InputError
from kdra.migrate import resources as res
from kdra.migrate.convert import CLAIMS, Options, PodTemplateConverter, Report, Where
from kdra.migrate.workloads import WORKLOAD_KINDS, pod_templates
from kdra.migrate.yamldoc import Chunk, Style, YAMLError, dump_document, guess_style, load_document, safe_load
from kdra.migrate.yamldoc import split_documents as split

CLASSES_BANNER = (
    "# ---------------------------------------------------------------------------------------------\n"
    "# DeviceClasses the migrated workloads need (kdra migrate --mode {mode}).\n"
    "# Normally installed once per cluster by the DRA drivers' Helm charts; apply them only if missing.\n"
    "# ---------------------------------------------------------------------------------------------\n"
)


@dataclass
class FileResult:
    source: str
    original: str
    text: str  # migrated text (== original when nothing changed or on error)
    report: Report = field(default_factory=Report)
    defined_classes: set[str] = field(default_factory=set)  # DeviceClasses the input already has

    @property
    def changed(self) -> bool:
        return self.text != self.original


def _kind_of(obj: Any) -> str:
    return str(obj.get("kind")) if isinstance(obj, dict) else ""


def _objects(doc: Any) -> list[tuple[tuple[str | int, ...], Any]]:
    """The objects of a document: itself, or the items of a `kind: List` (or `*List`)."""
    if isinstance(doc, dict) and _kind_of(doc).endswith("List") and isinstance(doc.get("items"), list):
        return [(("items", index), item) for index, item in enumerate(doc["items"])]
    return [((), doc)]


def _quick_scan(body: str) -> bool:
    """Whether a document can contain anything to convert (skip parsing ConfigMaps and CRDs)."""
    return bool(res.LEGACY_PATTERN.search(body))


def migrate_text(text: str, source: str, options: Options | None = None) -> FileResult:
    """Migrate one YAML stream. Errors are collected in the report; on any error the text is unchanged."""
    options = options or Options()
    result = FileResult(source, text, text)
    report = result.report
    chunks = split(text)
    parsed: list[Any] = []
    taken: set[str] = set()
    # First pass: parse what may matter, and collect names already used (claim templates, classes).
    for number, chunk in enumerate(chunks, start=1):
        doc: Any = None
        relevant = (
            _quick_scan(chunk.body) or "ResourceClaimTemplate" in chunk.body or "DeviceClass" in chunk.body
        )
        if chunk.body.strip() and relevant:
            try:
                doc = load_document(chunk.body)
            except YAMLError as err:
                if _quick_scan(chunk.body):
                    mark = getattr(err, "problem_mark", None)
                    line = f" line {chunk.line + mark.line}" if mark is not None else ""
                    report.errors.append(
                        f"{source}: document {number}{line}: "
                        f"not valid YAML ({getattr(err, 'problem', err)})\n"
                        "  hint: migrate rendered manifests (helm template ... | kdra migrate -), not chart "
                        "templates"
                    )
                doc = None
        parsed.append(doc)
        for _, obj in _objects(doc):
            meta = obj.get("metadata") if isinstance(obj, dict) else None
            if isinstance(meta, dict) and meta.get("name"):
                if _kind_of(obj) == "ResourceClaimTemplate":
                    taken.add(str(meta["name"]))
                elif _kind_of(obj) == "DeviceClass":
                    result.defined_classes.add(str(meta["name"]))
    pieces: list[str] = []
    for number, (chunk, doc) in enumerate(zip(chunks, parsed, strict=True), start=1):
        if doc is None:
            pieces.append(chunk.text)
            continue
        errors_before = len(report.errors)
        changes_before = len(report.changes)
        templates: list[tuple[int, dict[str, Any]]] = []
        for item, (prefix, obj) in enumerate(_objects(doc)):
            if _kind_of(obj) not in WORKLOAD_KINDS:
                continue
            where = Where(source, number, obj, prefix)
            converter = PodTemplateConverter(options, report, where, taken)
            for tpl in pod_templates(obj):
                made = converter.convert(tpl, obj)
                if made is not None:
                    templates.append((item, made))
        edited = len(report.changes) > changes_before
        if len(report.errors) > errors_before or not edited or options.mode != CLAIMS:
            pieces.append(chunk.text)
            continue
        pieces.append(_render(chunk, doc, templates))
    if report.errors:
        return result
    text_out = "".join(pieces)
    result.text = text_out
    return result


def _render(chunk: Chunk, doc: Any, templates: list[tuple[int, dict[str, Any]]]) -> str:
    """The edited document, then its new claim templates (List items after their workload in a List)."""
    style = guess_style(chunk.body)
    is_list = bool(_objects(doc)[0][0])
    if is_list:
        for offset, (index, template) in enumerate(templates):
            doc["items"].insert(index + 1 + offset, template)
    newline = "\r\n" if "\r\n" in chunk.body else "\n"
    body = dump_document(doc, style).replace("\n", newline)
    expected = _plain(doc)
    _verify(body, expected)
    out = chunk.head + _reconcile(chunk.body, body, expected) + chunk.tail
    if not is_list:
        for _, template in templates:
            if not out.endswith("\n"):
                out += newline
            out += ("---\n" + dump_document(template, style)).replace("\n", newline)
    return out


def _reads_as(text: str, expected: Any) -> bool:
    try:
        return bool(safe_load(text) == expected)
    except YAMLError:
        return False


_COMMENT = re.compile(r"(^|\s)#.*$")


def _form(lines: list[str]) -> str:
    """The lines without comments and whitespace: equal for hunks that differ only in form."""
    return "".join(re.sub(r"\s+", "", _COMMENT.sub("", line)) for line in lines)


def _reconcile(original: str, dumped: str, expected: Any) -> str:
    """Put back original lines wherever the dump differs only in form (`key:\n  {}` -> `key: {}`, dropped
    blank lines, re-spaced flow mappings): each differing hunk reverts to the original text when the whole
    document still reads as the intended data."""
    old = original.splitlines(keepends=True)
    new = dumped.splitlines(keepends=True)
    if old and not old[-1].endswith("\n"):
        old[-1] += "\r\n" if old[0].endswith("\r\n") else "\n"
    opcodes = difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes()
    pieces = [new[j1:j2] if tag != "equal" else old[i1:i2] for tag, i1, i2, j1, j2 in opcodes]
    for index, (tag, i1, i2, j1, j2) in enumerate(opcodes):
        if tag == "equal" or _form(old[i1:i2]) != _form(new[j1:j2]):
            continue  # a real edit: the data differs, so the original text cannot come back
        trial = [*pieces[:index], old[i1:i2], *pieces[index + 1 :]]
        if _reads_as("".join("".join(p) for p in trial), expected):
            pieces = trial
    return "".join("".join(p) for p in pieces)


def _verify(dumped: str, expected: Any) -> None:
    """Guard against a round-trip dump that does not read back as what was meant."""
    try:
        again = safe_load(dumped)
    except YAMLError as err:  # pragma: no cover - would be a ruamel bug
        raise InputError(f"internal error: the migrated document does not parse: {err}") from err
    if again != expected:  # pragma: no cover - would be a ruamel bug
        raise InputError("internal error: the migrated document does not read back as intended")


def _plain(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k) if not isinstance(k, (int, float, bool)) else k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_plain(v) for v in obj]
    if isinstance(obj, str):
        return str(obj)
    if isinstance(obj, bool):
        return bool(obj)
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return float(obj)
    return obj


def classes_text(results: list[FileResult], mode: str) -> str:
    """The DeviceClasses all results need and none of the inputs define, once each, sorted by name."""
    needed: dict[str, dict[str, Any]] = {}
    defined: set[str] = set()
    for result in results:
        defined |= result.defined_classes
        for name, obj in result.report.classes.items():
            needed.setdefault(name, obj)
    missing = [needed[name] for name in sorted(needed) if name not in defined]
    if not missing:
        return ""
    docs = [dump_document(obj, Style()) for obj in missing]
    return "---\n" + CLASSES_BANNER.format(mode=mode) + "---\n".join(docs)


def join_outputs(texts: list[str]) -> str:
    """Concatenate streams, with a `---` between them where the next does not start with one."""
    out = ""
    for text in texts:
        if not text:
            continue
        if out:
            if not out.endswith("\n"):
                out += "\n"
            if not text.startswith("---"):
                out += "---\n"
        out += text
    return out
