"""`kdra export`: a live cluster's DRA objects as one file for `kdra allocate -f` and offline replay."""

from __future__ import annotations

from kdra.api.types import Obj
from kdra.kube.client import KubeClient

# In dependency order: what `kdra allocate` reads, plus Namespaces (their labels gate adminAccess).
EXPORT_KINDS: tuple[str, ...] = (
    "Namespace",
    "Node",
    "DeviceClass",
    "ResourceSlice",
    "DeviceTaintRule",
    "ResourceClaimTemplate",
    "ResourceClaim",
    "Pod",
)
NAMESPACED = frozenset({"ResourceClaimTemplate", "ResourceClaim", "Pod"})
# Server-managed bookkeeping that means nothing offline (and would only bloat the file).
DROP_METADATA = ("managedFields", "selfLink")


def clean(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        for k in DROP_METADATA:
            meta.pop(k, None)
        ann = meta.get("annotations")
        if isinstance(ann, dict):
            ann.pop("kubectl.kubernetes.io/last-applied-configuration", None)
            if not ann:
                meta.pop("annotations")
    return obj


def device_taint_rules(client: KubeClient) -> list[Obj]:
    """The DeviceTaintRules, in the version served: resource.k8s.io/v1 from 1.37, v1beta2 in 1.36 where
    its API is on; none where neither is."""
    gv = client.served_version("resource.k8s.io", "devicetaintrules", ("v1", "v1beta2"))
    items = [] if gv is None else client.list("DeviceTaintRule", None, api_version=gv)
    for o in items:
        o.setdefault("kind", "DeviceTaintRule")
        o.setdefault("apiVersion", gv)
    return items


def export_objects(client: KubeClient, namespace: str | None = None) -> list[Obj]:
    """Every object of EXPORT_KINDS (claims, templates and pods of `namespace` only, when given), each
    with kind and apiVersion, sorted by kind order then namespace/name."""
    out: list[Obj] = []
    for kind in EXPORT_KINDS:
        if kind == "Namespace" and namespace:
            items = [client.get("Namespace", namespace)]
        elif kind == "DeviceTaintRule":
            items = device_taint_rules(client)
        else:
            items = client.list(kind, namespace if kind in NAMESPACED else None)
        items.sort(key=lambda o: ((o["metadata"].get("namespace") or ""), o["metadata"]["name"]))
        for o in items:
            o.setdefault("kind", kind)
            out.append(clean(o))
    return out
