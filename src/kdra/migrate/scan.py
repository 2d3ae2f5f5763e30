"""Every accelerator request in a document, wherever it is: what a conversion left must not pass `--check`.

A request is a key naming an nvidia.com/*, amd.com/*, gpu.intel.com/* or google.com/tpu resource inside a
`limits` or `requests` mapping (containers, TrainJob's resourcesPerNode, CRDs kdra does not know), a quota
key `requests.<that name>`, or such a name written as a value beside an amount, as CRDs that build pods spell
a request (`{name: nvidia.com/gpu, quantity: 1}`: the Spark operator's driver/executor `gpu`). Each is found
once per node (aliases are not walked twice), so a document of aliases costs its size.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from yaml import YAMLError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from kdra.migrate import resources as res
from kdra.migrate.kinds import POD, Place, matches_prefix
from kdra.migrate.nodes import MERGE_TAG, Path, compose, may_alias, path_text, text_of


@dataclass
class Request:
    key: ScalarNode
    value: Node
    name: str  # the resource name (without a quota prefix)
    path: Path


def requests(
    root: Node | None,
    base: Path = (),
    body: str | None = None,
    marks: list[int] | None = None,
    settled: set[int] | None = None,
) -> Iterator[Request]:
    """Every accelerator request under `root`. With the document's `body`, only the places whose text names a
    vendor are visited: each mention is followed down from the root (a binary search per level), so a
    manifest costs its mentions, not its size. A mention at an offset in `settled` (where a scalar key the
    caller is done with starts) is not followed: it could only lead to that key."""
    if root is None:
        return
    if body is None or may_alias(body):
        yield from _walk(root, base)  # an alias's text does not name what it stands for: visit the nodes
        return
    seen: set[int] = set()
    for mark in marks if marks is not None else res.vendor_mentions(body):
        if settled is not None and mark in settled:
            continue
        found = _descend(root, mark)
        if found is not None and id(found.key) not in seen:
            seen.add(id(found.key))
            yield Request(found.key, found.value, found.name, (*base, *found.path))


def _starts(node: Node) -> list[int]:
    starts: list[int] | None = getattr(node, "_kdra_starts", None)
    if starts is None:
        if isinstance(node, MappingNode):
            starts = [k.start_mark.index for k, _ in node.value]
        else:
            starts = [item.start_mark.index for item in node.value]
        node._kdra_starts = starts  # type: ignore[attr-defined]
    return starts


def _descend(root: Node, offset: int) -> Request | None:
    """The request whose key holds the text at `offset`, if that text is one."""
    node, path, parent_key = root, (), ""
    path_list: list[str | int] = []
    while True:
        if isinstance(node, MappingNode):
            index = bisect.bisect_right(_starts(node), offset) - 1
            if index < 0:
                return None
            key, value = node.value[index]
            key_text = str(key.value) if isinstance(key, ScalarNode) else ""
            if key.start_mark.index <= offset < key.end_mark.index:
                name = _request_name(key_text, parent_key)
                if name is None:
                    return None
                return Request(key, value, name, (*path, *path_list, key_text))
            if value.start_mark.index < key.end_mark.index:
                return None  # an alias
            if isinstance(value, ScalarNode):  # the mention is in a value: a request only as a named amount
                amount = _named_amount(node, key_text, value)
                if amount is None:
                    return None
                return Request(value, amount, str(value.value), (*path, *path_list, key_text))
            node, parent_key = value, key_text
            path_list.append(key_text)
        elif isinstance(node, SequenceNode):
            index = bisect.bisect_right(_starts(node), offset) - 1
            if index < 0:
                return None
            item = node.value[index]
            if isinstance(item, ScalarNode) or (
                index and item.start_mark.index < node.value[index - 1].start_mark.index
            ):
                return None
            node, parent_key = item, ""
            path_list.append(index)
        else:
            return None


_NAME_KEYS = ("name", "type")
_AMOUNT_KEYS = ("quantity", "count")


def _named_amount(mapping: MappingNode, key_text: str, value: ScalarNode) -> Node | None:
    """The amount beside a vendor resource written as a value (`{name: nvidia.com/gpu, quantity: 1}`), if
    `key_text: value` is such a name; None otherwise (`name: nvidia.com/gpu` beside a quota is no request)."""
    if key_text not in _NAME_KEYS or not res.is_vendor_resource(str(value.value)):
        return None
    for key, amount in mapping.value:
        if isinstance(key, ScalarNode) and key.value in _AMOUNT_KEYS:
            return amount
    return None


def _request_name(key_text: str, parent_key: str) -> str | None:
    if "/" not in key_text:
        return None
    if parent_key in ("limits", "requests") and res.is_vendor_resource(key_text):
        return key_text
    quota = res.QUOTA_PREFIX.match(key_text)
    if quota and res.is_vendor_resource(quota.group(2)):
        return quota.group(2)
    return None


def other_accelerators(root: Node) -> Iterator[Request]:
    """The requests of accelerators kdra cannot convert and leaves as they are (res.OTHER_ACCELERATOR): keys
    under `limits`/`requests`, also through aliases."""
    yield from _walk(root, (), _other_name)


def _other_name(key_text: str, parent_key: str) -> str | None:
    if parent_key in ("limits", "requests") and res.is_other_accelerator(key_text):
        return key_text
    return None


def _walk(
    root: Node, base: Path, name_of: Callable[[str, str], str | None] | None = None
) -> Iterator[Request]:
    """Every request, also through aliases and merge keys (`limits: *gpus`, `limits: {<<: *gpus}`): a node is
    visited once per key it stands under, since that key decides whether its entries are requests; a request
    key reached twice is reported once, at the first place in document order."""
    seen: set[tuple[int, str]] = set()
    reported: set[int] = set()
    stack: list[tuple[Node, Path, str]] = [(root, base, "")]
    while stack:
        node, path, parent_key = stack.pop()
        if (id(node), parent_key) in seen:
            continue
        seen.add((id(node), parent_key))
        if isinstance(node, MappingNode):
            children = []
            for key, value in node.value:
                if key.tag == MERGE_TAG:  # merged entries are this mapping's own, under the same key
                    merged = value.value if isinstance(value, SequenceNode) else [value]
                    children += [(m, path, parent_key) for m in merged if isinstance(m, MappingNode)]
                    continue
                key_text = str(key.value) if isinstance(key, ScalarNode) else ""
                name = (name_of or _request_name)(key_text, parent_key)
                if name is not None:
                    if id(key) not in reported:
                        reported.add(id(key))
                        yield Request(key, value, name, (*path, key_text))
                elif not isinstance(value, ScalarNode):
                    children.append((value, (*path, key_text), key_text))
                elif name_of is None:
                    amount = _named_amount(node, key_text, value)
                    if amount is not None and id(value) not in reported:
                        reported.add(id(value))
                        yield Request(value, amount, str(value.value), (*path, key_text))
            stack.extend(reversed(children))
        elif isinstance(node, SequenceNode):
            stack.extend(
                (item, (*path, index), "")
                for index, item in reversed(list(enumerate(node.value)))
                if not isinstance(item, ScalarNode)
            )


def patch_requests(text: str) -> list[str]:
    """The accelerator requests in a YAML or JSON string (an Argo podSpecPatch merged into the pod, a
    resource template's manifest): what `requests` finds anywhere in it, walked as a document of its own.
    Argo's `{{...}}` composes as a node; a string that does not parse is read for `limits`/`requests` and
    vendor keys in its text."""
    if not res.LEGACY_PATTERN.search(text) and not res.may_escape(text):
        return []
    try:
        root = compose(text)
    except YAMLError:
        root = None
    if root is None or isinstance(root, ScalarNode):
        if not re.search(r"\b(limits|requests)\b", text):
            return []
        keys = re.findall(r"[\"']?([a-z0-9.-]+/[A-Za-z0-9._-]+)[\"']?\s*:", text)
        return sorted({k for k in keys if res.is_vendor_resource(k)})
    return sorted({r.name for r in _walk(root, ())})


_IN_CONTAINER = (
    "ask for the device in the resources of the container that uses it; kdra migrate turns that request "
    "into a claim"
)


def rejected(places: tuple[Place, ...], path: Path) -> tuple[str, str] | None:
    """(what, hint) when `path` is a request where Kubernetes rejects any device (invalid input, no place to
    convert): a pod spec's own `resources` (pod-level resources take only cpu, memory and hugepages-*), or an
    ephemeral container's (`kubectl debug` containers take no resources)."""
    for place in places:
        if place.refuse or place.shape is not POD or not matches_prefix(place, path):
            continue
        rest = path[len(place.segments()) :]
        if len(rest) == 3 and rest[0] == "resources" and rest[1] in ("limits", "requests"):
            return (
                "is a pod-level resource: Kubernetes accepts only cpu, memory and hugepages-* in a pod "
                "spec's resources (Unsupported value)",
                _IN_CONTAINER,
            )
        if len(rest) == 5 and rest[0] == "ephemeralContainers" and rest[2] == "resources":
            return (
                "is in an ephemeral container, whose resources Kubernetes forbids (Forbidden: cannot be set "
                "for an Ephemeral Container)",
                "remove it: ephemeral containers (kubectl debug) get no resources, and no claim can name "
                "them either",
            )
    return None


def reason(
    kind: str, api_version: str, places: tuple[Place, ...], path: Path, known: bool
) -> tuple[str, str]:
    """(what, hint) for a request that was not converted."""
    for place in places:
        if place.refuse and matches_prefix(place, path):
            if place.owner:
                owned = path_text(path[: len(place.segments())])
                return (
                    f"is in {owned}, a field {place.owner} owns (it builds the pods from it): kdra migrate "
                    "cannot give a claim there",
                    place.refuse,
                )
            return "cannot become a ResourceClaim here", place.refuse
    if not kind:
        return (
            "is in a document without kind (a Helm values file?)",
            "kdra migrates rendered manifests: helm template RELEASE CHART -f values.yaml | kdra migrate "
            "-, or "
            "helm install ... --post-renderer kdra --post-renderer-args migrate; in the values, this key "
            "is what "
            "to set to nothing once the pods get claims",
        )
    group = api_version.split("/", 1)[0] if "/" in api_version else ""
    name = f"{kind}.{group}" if group else kind
    if path and path[-1] in _NAME_KEYS:  # a named amount: the kind's own field, no pod spec
        return (
            f"is requested in a field of {name} (not a pod spec's resources)",
            "kdra converts the requests of pod specs: if the kind also takes a pod template (the Spark "
            "operator's spec.driver.template / spec.executor.template), ask for the device there and name "
            f"its path with --kind {name}=<path to the pod spec>; or use --mode extended-resource (KEP-5004) "
            "to keep the request as it is",
        )
    if known:
        return (
            f"is not in a pod spec kdra knows for {name}",
            f"if it is one, add its path: --kind {name}=<path to the pod spec>; or use --mode "
            "extended-resource",
        )
    return (
        f"is inside {name}, a kind whose pod specs kdra does not know",
        f"add it: --kind {name}=<path to the pod spec, e.g. spec.template.spec>, or use --mode "
        "extended-resource (KEP-5004) to keep the request as it is",
    )


def value_text(node: Node) -> str:
    return text_of(node) or "?"
