"""Every accelerator request in a document, wherever it is: what a conversion left must not pass `--check`.

A request is a key naming an nvidia.com/*, amd.com/*, gpu.intel.com/* or google.com/tpu resource inside a
`limits` or `requests` mapping (containers, TrainJob's resourcesPerNode, CRDs kdra does not know), or a quota
key `requests.<that name>`. Each is found once per node (aliases are not walked twice), so a document of
aliases costs its size.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from kdra.migrate import resources as res
from kdra.migrate.kinds import Place, matches_prefix
from kdra.migrate.nodes import Path, text_of


@dataclass
class Request:
    key: ScalarNode
    value: Node
    name: str  # the resource name (without a quota prefix)
    path: Path


def requests(root: Node | None, base: Path = ()) -> Iterator[Request]:
    if root is None:
        return
    seen: set[int] = set()
    stack: list[tuple[Node, Path, str]] = [(root, base, "")]
    while stack:
        node, path, parent_key = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, MappingNode):
            children = []
            for key, value in node.value:
                key_text = str(key.value) if isinstance(key, ScalarNode) else ""
                if parent_key in ("limits", "requests") and res.is_vendor_resource(key_text):
                    yield Request(key, value, key_text, (*path, key_text))
                    continue
                quota = res.QUOTA_PREFIX.match(key_text)
                if quota and res.is_vendor_resource(quota.group(2)):
                    yield Request(key, value, quota.group(2), (*path, key_text))
                    continue
                if not isinstance(value, ScalarNode):
                    children.append((value, (*path, key_text), key_text))
            stack.extend(reversed(children))
        elif isinstance(node, SequenceNode):
            stack.extend(
                (item, (*path, index), "")
                for index, item in reversed(list(enumerate(node.value)))
                if not isinstance(item, ScalarNode)
            )


def reason(
    kind: str, api_version: str, places: tuple[Place, ...], path: Path, known: bool
) -> tuple[str, str]:
    """(what, hint) for a request that was not converted."""
    for place in places:
        if place.refuse and matches_prefix(place, path):
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
