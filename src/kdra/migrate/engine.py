"""Migration of one YAML stream, one document at a time.

Documents without anything to convert are copied byte for byte; the others are edited in place (edits.py)
and their new ResourceClaimTemplates follow them. Only documents that mention an accelerator vendor are
composed into nodes; every other one is only checked for syntax (libyaml's raw parse, ~40 MB/s), so the cost
is that of the documents that matter and the memory that of the largest document.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.reader import ReaderError

from kdra.migrate import consumers
from kdra.migrate import resources as res
from kdra.migrate.context import DocContext, TakenNames
from kdra.migrate.convert import PodSpecConverter
from kdra.migrate.documents import Chunk, bodies_mentioning, split_documents
from kdra.migrate.edits import EditError, Editor, Style, document_text, guess_style, sequence_offset
from kdra.migrate.kinds import CAPACITY, LIST_SUFFIX, Found, Place, matches_prefix, places_for, pod_specs
from kdra.migrate.messages import Spool
from kdra.migrate.nodes import YAMLError, check, compose, get, get_path, lookup, may_alias, text_of
from kdra.migrate.report import CLAIMS, Options, Report, Where
from kdra.migrate.scan import other_accelerators, patch_requests, reason, rejected, requests, value_text

CLASSES_BANNER = (
    "# ---------------------------------------------------------------------------------------------\n"
    "# DeviceClasses the migrated workloads need (kdra migrate --mode {mode}).\n"
    "# Normally installed once per cluster by the DRA drivers' Helm charts; apply them only if missing.\n"
    "# ---------------------------------------------------------------------------------------------\n"
)

_TEMPLATE_SYNTAX = re.compile(r"\{\{.*?\}\}", re.DOTALL)
# Argo Workflows' own template tags ({{inputs.parameters.x}}, {{workflow.name}}, {{item}}, {{=expr}}):
# a variable path or an expression, where a Go template (Helm) action starts with `.`, `$`, a space or a
# keyword. Argo is a kind kdra migrates: its tags are values, not a chart to render first.
_ARGO_TAG = re.compile(r"\{\{\s*(?:=[^{}]*|[A-Za-z_][\w-]*(?:\.[\w-]+|\[[^\]{}]*\])*)\s*\}\}")
_GO_TEMPLATE_WORDS = frozenset({"end", "else", "break", "continue", "nil", "true", "false"})
# Kinds whose controller renders Go templates in their own spec: KServe's LLMInferenceService and
# LLMInferenceServiceConfig (config_merge.go executes the spec as a text/template, with `ChildName` and the
# service as data: `{{ ChildName .ObjectMeta.Name "-epp-service" }}`). Their tags are values, not a chart.
_CONTROLLER_TEMPLATED = re.compile(
    r"^kind:[ \t]*[\"']?LLMInferenceService(?:Config)?[\"']?[ \t]*(?:#.*)?$", re.M
)


def helm_syntax(body: str) -> re.Match[str] | None:
    """The first Go template (Helm) action in `body`, if any; Argo's variable tags are not one."""
    for m in _TEMPLATE_SYNTAX.finditer(body):
        argo = _ARGO_TAG.fullmatch(m.group(0))
        if argo is None or m.group(0).strip("{} ") in _GO_TEMPLATE_WORDS:
            return m
    return None


# KAI Scheduler's GPU sharing: pod annotations, no resource request (KAI's reservation pod requests the GPU).
KAI_SHARING = ("gpu-fraction", "gpu-memory")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
HELM_HINT = (
    "kdra migrate reads rendered manifests: helm template RELEASE CHART [-f values.yaml] | kdra migrate -, "
    "or "
    "convert at install time: helm install RELEASE CHART --post-renderer kdra --post-renderer-args migrate "
    "--post-renderer-args --no-device-classes"
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


# -- pass 1: names the input already uses --------------------------------------------------------------------


def names_in_use(pieces: Iterable[str]) -> tuple[set[str], set[str]]:
    """(ResourceClaimTemplate names, DeviceClass names) the stream defines, so new names do not collide."""
    templates: set[str] = set()
    classes: set[str] = set()
    for body in bodies_mentioning(pieces, ("ResourceClaimTemplate", "DeviceClass")):
        try:
            root = compose(body)
        except YAMLError:
            continue
        for obj, _ in _objects(root):
            kind = text_of(get(obj, "kind"))
            name = text_of(get(get(obj, "metadata"), "name"))
            if name and kind == "ResourceClaimTemplate":
                templates.add(name)
            elif name and kind == "DeviceClass":
                classes.add(name)
    return templates, classes


_ALIAS = re.compile(r"\*([^\s,\[\]{}]+)")


def _lost_anchor(body: str, new_body: str) -> tuple[str, int] | None:
    """(message, line in `body`) when the edits removed a YAML anchor an alias left in the document still uses
    (`nodeSelector: {nvidia.com/gpu.product: &p X}` moved into the claim, `value: *p` elsewhere): the output
    would not parse (undefined alias). None when nothing was lost; only documents with anchors are checked."""
    if not may_alias(body):
        return None
    try:
        compose(new_body)
    except YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        found = _ALIAS.match(new_body, mark.index) if mark is not None else None
        if found is None:
            raise
        name = found.group(1)
        at = body.find(f"&{name}")
        line = body.count("\n", 0, at) if at >= 0 else 0
        return (
            f"the YAML anchor &{name} is on a request or node selection the migration removes, and *{name} "
            "still uses it elsewhere in the document; nothing was changed\n  hint: write the value out where "
            f"*{name} is (or put the anchor on a value that stays)",
            line,
        )
    return None


def _objects(root: Node | None) -> list[tuple[Node, tuple[str | int, ...]]]:
    """The objects of a document: itself, or the items of a `kind: List` (or `*List`)."""
    kind = text_of(get(root, "kind")) or ""
    items = get(root, "items")
    if kind.endswith(LIST_SUFFIX) and isinstance(items, SequenceNode):
        return [(item, ("items", index)) for index, item in enumerate(items.value)]
    return [(root, ())] if root is not None else []


# -- pass 2: the documents -----------------------------------------------------------------------------------

WRITE_BLOCK = 2**16  # characters


class Output:
    """The documents' texts in stream order, handed on in blocks of about WRITE_BLOCK characters: a write per
    document (a cluster dump has thousands of small ones) costs more than joining them."""

    __slots__ = ("_size", "_texts", "_write")

    def __init__(self, write: Callable[[str], object]) -> None:
        self._write = write
        self._texts: list[str] = []
        self._size = 0

    def add(self, text: str) -> None:
        self._texts.append(text)
        self._size += len(text)
        if self._size >= WRITE_BLOCK:
            self.flush()

    def flush(self) -> None:
        if self._texts:
            self._write("".join(self._texts))
            self._texts = []
            self._size = 0


class StreamMigration:
    """Migrates the documents of one input; `report` collects what happened."""

    def __init__(self, source: str, options: Options, taken: set[str], spool: Spool | None = None) -> None:
        self.source = source
        self.options = options
        self.taken = TakenNames(taken)
        self.report = Report() if spool is None else Report.spooled(spool)
        self.kinds = options.kinds()
        self.changed = False
        self.picked: list[str] = []  # the names the last document took

    def run(self, chunks: Iterable[Chunk], write: Callable[[str], object]) -> Report:
        output = Output(write)
        for chunk in chunks:
            output.add(self.document(chunk))
        output.flush()
        self.report.flush()
        return self.report

    def _problem(self, chunk: Chunk, err: YAMLError) -> str:
        mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
        line = chunk.line + (mark.line if mark is not None else 0)
        problem = getattr(err, "problem", None) or str(err)
        if isinstance(err, ReaderError):  # a character YAML does not allow (NUL, control characters)
            line = chunk.line + chunk.body[: err.position].count("\n")
            problem = f"character #x{err.character:04x} is not allowed in YAML (binary data?)"
        context = getattr(err, "context", None)
        what = f"{problem} ({context})" if context else str(problem)
        if mark is not None:
            lines = chunk.body.splitlines()
            text = lines[mark.line] if mark.line < len(lines) else ""
            if "\t" in text[: max(mark.column, 0) + 1]:
                what += "; the line is indented with a tab, and YAML indents with spaces only"
        return f"{self.source}:{line}: document {chunk.number}: not valid YAML: {what}"

    def document(self, chunk: Chunk) -> str:
        body = chunk.body
        self.picked = []
        if not body.strip():
            return chunk.text
        marks = res.vendor_mentions(body)
        escaped = res.may_escape(body)  # a name the text search cannot see: walk the nodes instead
        others = res.mentions_other_accelerator(body, marks)  # left as is, but never in silence
        relevant = bool(marks) or escaped or others or any(word in body for word in KAI_SHARING)
        helm = helm_syntax(body)
        templated = helm is not None
        if helm is not None and _CONTROLLER_TEMPLATED.search(body):
            helm = None  # the kind's controller renders these tags: values, as long as the document parses
        if helm is not None and relevant:
            line = chunk.line + body[: helm.start()].count("\n")
            self.report.blocked.append(
                f"{self.source}:{line}: document {chunk.number}: a Helm chart template ({{{{ ... }}}}) with "
                f"accelerator requests, not a rendered manifest\n  hint: {HELM_HINT}"
            )
            return chunk.text
        if not relevant:
            try:
                check(body)
            except YAMLError as err:
                hint = f"\n  hint: {HELM_HINT}" if templated else ""
                self.report.invalid.append(self._problem(chunk, err) + hint)
            return chunk.text
        try:
            root = compose(body)
        except YAMLError as err:
            hint = f"\n  hint: {HELM_HINT}" if templated else ""
            self.report.invalid.append(self._problem(chunk, err) + hint)
            return chunk.text
        return self._migrate(chunk, root, marks, escaped, others)

    def _migrate(
        self, chunk: Chunk, root: Node | None, marks: list[int], escaped: bool = False, others: bool = False
    ) -> str:
        body = chunk.body
        style = guess_style(body, root)
        ctx = DocContext(body, Editor(body, style), self.options, Report(), self.taken, self.picked, marks)
        ctx.walk = escaped
        ctx.others = others
        objects = _objects(root)
        is_list = bool(objects and objects[0][1])
        done: set[int] = set()
        for obj, prefix in objects:
            self._object(ctx, chunk, obj, prefix, done)
        report = ctx.report
        if report.warnings:
            self.report.warnings += report.warnings
        if report.failed:
            self.report.invalid += report.invalid
            self.report.blocked += report.blocked
            return chunk.text
        self.report.changes += report.changes
        for name, device_class in report.classes.items():
            self.report.classes.setdefault(name, device_class)
        self.report.notes += [f"{obj}: {'; '.join(texts)}" for obj, texts in ctx.notes.items()]
        if not ctx.editor.changed and not ctx.templates:
            return chunk.text
        if is_list:
            items = get(root, "items")
            assert isinstance(items, SequenceNode)
            for _, template in ctx.templates:
                ctx.editor.append(items, template)
        try:
            new_body = ctx.editor.render()
            check(new_body)
        except (EditError, YAMLError) as err:  # pragma: no cover - a bug, reported instead of written
            self.report.invalid.append(
                f"{self.source}: document {chunk.number}: internal error: the edited document does not parse "
                f"({err}); nothing was written"
            )
            return chunk.text
        lost = _lost_anchor(body, new_body)
        if lost:
            self.report.blocked.append(
                f"{self.source}:{chunk.line + lost[1]}: document {chunk.number}: {lost[0]}"
            )
            return chunk.text
        self.changed = True
        if not is_list and style.json and ctx.templates:
            # A JSON document holds one object: the object and its new templates become a v1 List (which
            # kubectl applies as they are), so a .json file stays JSON.
            newline = ctx.editor.newline
            parts = [
                new_body.rstrip(),
                *(document_text(t, style, newline).rstrip() for _, t in ctx.templates),
            ]
            listed = f'{{"apiVersion": "v1", "kind": "List", "items": [{newline}' + f",{newline}".join(parts)
            return chunk.head + listed + f"{newline}]}}{newline}" + chunk.tail.lstrip("\r\n")
        out = chunk.head + new_body + chunk.tail
        if not is_list:
            newline = ctx.editor.newline
            for _, template in ctx.templates:
                if not out.endswith("\n"):
                    out += newline
                out += "---" + newline + document_text(template, style, newline)
        return out

    def _object(
        self, ctx: DocContext, chunk: Chunk, obj: Node, prefix: tuple[str | int, ...], done: set[int]
    ) -> None:
        kind = text_of(get(obj, "kind")) or ""
        api_version = text_of(get(obj, "apiVersion")) or ""
        meta = get(obj, "metadata")
        name = text_of(get(meta, "name")) or (text_of(get(meta, "generateName")) or "").rstrip("-")
        namespace = text_of(get(meta, "namespace")) or ""
        where = Where(self.source, chunk.number, chunk.line, kind, name, namespace, prefix)
        places: tuple[Place, ...] = places_for(kind, api_version or None, self.kinds) if kind else ()
        found_specs = list(pod_specs(obj, places)) if isinstance(obj, MappingNode) and places else []
        if isinstance(obj, MappingNode):
            self._kai_sharing(ctx, where, obj, found_specs)
        if api_version.startswith("extensions/") and found_specs:
            ctx.report.warnings.append(
                f"{where.describe()}: apiVersion {api_version} left as is: Kubernetes has not served "
                f"{kind} there since 1.16, and ResourceClaims need 1.34 or later; write apps/v1 (which also "
                "requires spec.selector)"
            )
        if self.options.mode == CLAIMS and isinstance(obj, MappingNode):
            if kind == "ResourceQuota" and api_version in ("v1", ""):
                consumers.quota(ctx, where, obj)
            elif kind == "LimitRange" and api_version in ("v1", ""):
                consumers.limit_range(ctx, where, obj)
            elif kind == "ClusterQueue" and api_version.startswith("kueue.x-k8s.io/"):
                consumers.kueue_queue(ctx, where, obj)
            elif kind == "Queue" and api_version.startswith("scheduling.volcano.sh/"):
                consumers.volcano_queue(ctx, where, obj)
            if (kind == "Job" and api_version.startswith("batch.volcano.sh/")) or (
                kind == "PodGroup"
                and api_version.startswith(("scheduling.volcano.sh/", "scheduling.x-k8s.io/"))
            ):
                consumers.min_resources(ctx, where, obj)
            convertible = [f for f in found_specs if not f.place.refuse]
            if convertible and self._names_ok(ctx, where, meta, obj):
                for found in convertible:
                    if id(found.node) in done:
                        continue  # a pod spec shared through an alias: converted once
                    done.add(id(found.node))
                    self._pod_spec(ctx, where, found, obj)
        caps = places_for(kind, api_version or None, CAPACITY) if kind else ()
        for request in requests(obj, (), ctx.scan_body, ctx.marks, ctx.consumed_at):
            if id(request.key) in ctx.consumed or request.path[:1] == ("status",):
                # status (a `kubectl get -o yaml` dump: a pod's containerStatuses[].resources, a quota's
                # used) is what controllers observed; the API server ignores it on create and apply
                continue
            ctx.consume(request.key)
            cap = next((c for c in caps if matches_prefix(c, request.path)), None)
            if cap is not None:  # a cap on node capacity, no request: nothing to convert in either mode
                ctx.report.warnings.append(
                    f"{where.at(request.path, request.key.start_mark.line)}: {request.name}: "
                    f"{value_text(request.value)} left as is: {cap.refuse}"
                )
            elif self.options.mode == CLAIMS and (bad := rejected(places, request.path)) is not None:
                at = where.at(request.path, request.key.start_mark.line)
                ctx.invalid(f"{at}: {request.name}: {value_text(request.value)} {bad[0]}", bad[1])
            elif self.options.mode == CLAIMS:
                what, hint = reason(kind, api_version, places, request.path, bool(places))
                ctx.blocked(
                    f"{where.at(request.path, request.key.start_mark.line)}: "
                    f"{request.name}: {value_text(request.value)} {what}",
                    hint,
                )
            else:
                self._extended(ctx, where, request)
        if self.options.mode == CLAIMS:
            for found in found_specs:
                if found.place.shape.claims == "podSpecPatch":  # Argo: requests inside strings
                    self._argo_strings(ctx, where, found)
        if ctx.others and self.options.mode == CLAIMS:
            names = sorted({request.name for request in other_accelerators(obj)})
            if names:
                ctx.report.warnings.append(
                    f"{where.describe()}: {', '.join(names)} left as is: kdra knows no DRA driver for "
                    f"{'it' if len(names) == 1 else 'them'}, so these pods keep asking the device plugin for "
                    f"{'it' if len(names) == 1 else 'them'} (keep the plugin where they run)"
                )

    def _argo_strings(self, ctx: DocContext, where: Where, found: Found) -> None:
        """Refuse device requests an Argo template keeps in strings kdra does not rewrite: its podSpecPatch
        (merged into the pod after kdra's conversion) and a resource template's manifest (an object Argo
        creates as it is). They passed in silence before."""
        for path, what, hint in (
            (
                ("podSpecPatch",),
                "the podSpecPatch requests {}: Argo merges it into the pod, which would still ask the device "
                "plugin (kdra does not rewrite a patch)",
                "move the request into the template's container resources, which kdra migrate converts (a "
                "claim's count is fixed: write the number, not a {{...}} parameter), or use --mode "
                "extended-resource (KEP-5004)",
            ),
            (
                ("resource", "manifest"),
                "the manifest of this resource template requests {}: Argo creates that object as it is "
                "(kdra does not rewrite an embedded manifest)",
                "migrate the manifest on its own (kdra migrate -) and embed the result, with its "
                "ResourceClaimTemplate created by a step before it; or use --mode extended-resource "
                "(KEP-5004)",
            ),
        ):
            node = get_path(found.node, *path)
            names = patch_requests(text_of(node) or "") if isinstance(node, ScalarNode) else []
            if names and node is not None:
                at = where.at((*found.path, *path), node.start_mark.line)
                ctx.blocked(f"{at}: {what.format(', '.join(names))}", hint)

    def _names_ok(self, ctx: DocContext, where: Where, meta: Node | None, obj: Node) -> bool:
        ok = True
        name_key, name_node, _ = lookup(meta, "name")
        name = text_of(name_node)
        if name is not None and (len(name) > 253 or not _DNS_SUBDOMAIN.match(name)):
            ctx.invalid(
                f"{where.at(('metadata', 'name'), name_node.start_mark.line if name_node else None)}: "
                f"{name[:80] + '...' if len(name) > 80 else name!r} is not a valid name",
                "metadata.name is a DNS subdomain: at most 253 lower-case letters, digits, '-' and '.' "
                "(RFC 1123)",
            )
            ok = False
        ns_node = get(meta, "namespace")
        namespace = text_of(ns_node)
        if namespace is not None and (len(namespace) > 63 or not _DNS_LABEL.match(namespace)):
            ctx.invalid(
                f"{where.at(('metadata', 'namespace'), ns_node.start_mark.line if ns_node else None)}: "
                f"{namespace[:80]!r} is not a valid namespace",
                "a namespace is a DNS label: at most 63 lower-case letters, digits and '-' (RFC 1123)",
            )
            ok = False
        if not ok:
            for request in requests(obj, (), ctx.scan_body, ctx.marks):
                ctx.consume(request.key)
        del name_key
        return ok

    def _kai_sharing(self, ctx: DocContext, where: Where, obj: MappingNode, found_specs: list[Found]) -> None:
        """A pod template with KAI's GPU-sharing annotations has no request to convert, yet it depends on the
        device plugin (KAI's reservation pod takes a whole nvidia.com/gpu): warn, never pass it in silence."""
        for found in found_specs:
            if not found.path or found.path[-1] != "spec":
                continue
            annotations = get_path(obj, *found.path[:-1], "metadata", "annotations")
            for key in KAI_SHARING:
                value = text_of(get(annotations, key))
                if value is not None:
                    ctx.report.warnings.append(
                        f"{where.describe()}: KAI GPU sharing ({key}: {value}) left as is: KAI's reservation "
                        "pod still requests nvidia.com/gpu from the device plugin; under DRA ask for a share "
                        "in a claim instead (a device with allowMultipleAllocations, capacity requests)"
                    )

    def _pod_spec(self, ctx: DocContext, where: Where, found: Any, obj: MappingNode) -> None:
        key_node, containers_node, _ = lookup(found.node, "containers")
        offset = sequence_offset(ctx.body, key_node, containers_node) if key_node is not None else None
        base_style = ctx.editor.style
        if offset is not None:
            ctx.editor.style = Style(base_style.mapping, offset, base_style.json)
        try:
            converter = PodSpecConverter(ctx, where, found, obj)
            template = converter.convert()
            if template is None or converter.failed:
                return
            ctx.templates.append((found.path, template))
            if found.place.consumer == "ray":
                consumers.kuberay(ctx, where, obj, found, converter.converted)
            elif found.place.consumer == "trainer":
                consumers.trainer(ctx, where, obj, found, converter.converted)
        finally:
            ctx.editor.style = base_style

    def _extended(self, ctx: DocContext, where: Where, request: Any) -> None:
        if res.QUOTA_PREFIX.match(str(request.key.value)):
            return  # KEP-5004: quota on the extended resource keeps counting
        refused = res.compute_instance_refusal(request.name)
        if refused is not None:
            ctx.blocked(f"{where.at(request.path, request.key.start_mark.line)}: {refused[0]}", refused[1])
            return
        legacy = res.classify(request.name)
        device_class = res.extended_resource_class(request.name, legacy) if legacy else None
        if device_class is None:
            why = (
                f"{request.name} is not a device count, so no DeviceClass can serve it as an extended "
                "resource"
                if legacy
                else f"no DRA DeviceClass is known for {request.name}"
            )
            if legacy and legacy.kind == "shared":
                why += f" ({res.capacity_requests_release_note()})"
            ctx.blocked(
                f"{where.at(request.path, request.key.start_mark.line)}: {why}",
                "KEP-5004 maps an extended resource to a number of devices; use --mode claims, which turns "
                "HAMi "
                "shares into consumable capacity requests",
            )
            return
        ctx.report.classes.setdefault(device_class["metadata"]["name"], device_class)


# -- whole inputs --------------------------------------------------------------------------------------------


def migrate_text(
    text: str, source: str, options: Options | None = None, taken: set[str] | None = None
) -> FileResult:
    """Migrate one YAML stream held in memory. On any error the text is unchanged."""
    options = options or Options()
    templates, classes = names_in_use([text])
    if taken is not None:
        templates |= taken
    migration = StreamMigration(source, options, templates)
    pieces: list[str] = []
    report = migration.run(split_documents(text), pieces.append)
    result = FileResult(source, text, text, report, classes)
    if not report.failed:
        result.text = "".join(pieces)
    return result


def classes_text(results: list[FileResult], mode: str) -> str:
    """The DeviceClasses all results need and none of the inputs define, once each, sorted by name."""
    needed: dict[str, dict[str, Any]] = {}
    defined: set[str] = set()
    for result in results:
        defined |= result.defined_classes
        for name, obj in result.report.classes.items():
            needed.setdefault(name, obj)
    return classes_document(needed, defined, mode)


def classes_document(
    needed: dict[str, dict[str, Any]], defined: set[str], mode: str, newline: str = "\n"
) -> str:
    missing = [needed[name] for name in sorted(needed) if name not in defined]
    if not missing:
        return ""
    docs = [document_text(obj, Style(), newline) for obj in missing]
    banner = CLASSES_BANNER.format(mode=mode).replace("\n", newline)
    return "---" + newline + banner + ("---" + newline).join(docs)


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
