"""The device-plugin view of a DRA-shaped pod: claims become integer extended resources.

Each request's device class maps to the extended resource a device plugin advertises (the class's
extendedResourceName, KEP-5004, or the vendor's well-known name; MIG devices and memory shares map to
whole `nvidia.com/gpu`s, because a device plugin hands out whole devices unless the node was statically
partitioned for it). Fractional needs are rounded up to one whole device; `firstAvailable` takes the
cheapest alternative in whole devices; a claim shared by several pods becomes separate devices per pod,
since device plugins cannot share. Device plugins have no selectors: what a request's selectors choose
among GPU models becomes what users write today, a required node affinity on GPU Feature Discovery's
product label (`nvidia.com/gpu.product In [...]`, the NVML product name with spaces as `-`), computed by
evaluating the selectors on the fleet's devices (`ProductLabels`), so both models do the same work.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from kdra.api import wellknown as wk
from kdra.api.types import Obj

WELL_KNOWN = {
    wk.NVIDIA_GPU_CLASS: wk.NVIDIA_GPU_RESOURCE,
    wk.NVIDIA_MIG_CLASS: wk.NVIDIA_GPU_RESOURCE,
    wk.AMD_GPU_CLASS: wk.AMD_GPU_RESOURCE,
    wk.TPU_CLASS: wk.TPU_RESOURCE,
}


def class_resource(class_name: str, classes: Mapping[str, Obj]) -> str:
    ern = ((classes.get(class_name) or {}).get("spec") or {}).get("extendedResourceName")
    return WELL_KNOWN.get(class_name) or ern or f"deviceclass.resource.kubernetes.io/{class_name}"


def _whole(sub: Mapping[str, Any]) -> int:
    if sub.get("allocationMode") == "All":
        return 1
    return max(1, int(sub.get("count") or 1))


def _chosen(req: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The (sub)request a device plugin stands in for: `exactly`, or the cheapest alternative."""
    if req.get("exactly"):
        ex: Mapping[str, Any] = req["exactly"]
        return None if ex.get("adminAccess") else ex
    if req.get("firstAvailable"):
        return min(req["firstAvailable"], key=_whole)
    return None


def claim_resources(spec: Mapping[str, Any], classes: Mapping[str, Obj]) -> dict[str, int]:
    out: dict[str, int] = {}
    for req in ((spec.get("devices") or {}).get("requests")) or []:
        sub = _chosen(req)
        if sub is not None:
            res = class_resource(sub.get("deviceClassName", ""), classes)
            out[res] = out.get(res, 0) + _whole(sub)
    return out


GFD_PRODUCT = "nvidia.com/gpu.product"


class ProductLabels:
    """The GFD product labels of the devices a request selects on a fleet (its DRA view): the model choice
    a request's selectors make, as a device plugin's user writes it. None when the selectors leave every
    model the class has, or the class's devices publish no productName."""

    def __init__(self, dra_objects: Sequence[Mapping[str, Any]]) -> None:
        from kdra.allocator.whole import device_index

        self.index = device_index(dra_objects)
        self._memo: dict[tuple[str, tuple[str, ...]], frozenset[str]] = {}

    def _products(self, class_name: str, selectors: tuple[str, ...]) -> frozenset[str]:
        out = set()
        for dev in self.index.devices_of_class(class_name, selectors):
            name = dev.attribute(f"{dev.driver}/productName")
            if isinstance(name, Mapping) and isinstance(name.get("string"), str):
                out.add(name["string"].replace(" ", "-"))
        return frozenset(out)

    def __call__(self, req: Mapping[str, Any]) -> frozenset[str] | None:
        """The products a request (any of its alternatives) accepts; None when that is every product of
        its classes, or none has a product name."""
        subs = [req["exactly"]] if req.get("exactly") else list(req.get("firstAvailable") or [])
        chosen: set[str] = set()
        every: set[str] = set()
        for sub in subs:
            cls = str(sub.get("deviceClassName", ""))
            sels = tuple(((s.get("cel") or {}).get("expression") or "") for s in sub.get("selectors") or [])
            chosen |= self._memoised(cls, sels)
            every |= self._memoised(cls, ())
        return frozenset(chosen) if chosen and chosen != every else None

    def _memoised(self, class_name: str, selectors: tuple[str, ...]) -> frozenset[str]:
        key = (class_name, selectors)
        got = self._memo.get(key)
        if got is None:
            got = self._memo[key] = self._products(class_name, selectors)
        return got


def _require_products(spec: Obj, products: frozenset[str]) -> None:
    """AND `nvidia.com/gpu.product In products` into the pod's required node affinity."""
    expr = {"key": GFD_PRODUCT, "operator": "In", "values": sorted(products)}
    affinity = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    required = affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.setdefault("nodeSelectorTerms", [])
    if not terms:
        terms.append({})
    for term in terms:
        term.setdefault("matchExpressions", []).append(dict(expr))


def to_device_plugin(
    pod: Obj,
    templates: Mapping[tuple[str, str], Obj],
    claims: Mapping[tuple[str, str], Obj],
    classes: Mapping[str, Obj],
    products: ProductLabels | None = None,
) -> Obj:
    """A copy of `pod` with resourceClaims replaced by extended-resource limits on the using containers,
    and (with `products`) the requests' model choice as a required affinity on GFD's product label."""
    spec = pod.get("spec") or {}
    refs = spec.get("resourceClaims") or []
    if not refs:
        return pod
    ns = pod["metadata"].get("namespace") or "default"
    new = copy.deepcopy(pod)
    nspec = new["spec"]
    containers = nspec.get("containers") or []
    for ref in refs:
        if ref.get("resourceClaimTemplateName"):
            src = templates.get((ns, ref["resourceClaimTemplateName"]))
            cspec = ((src or {}).get("spec") or {}).get("spec") or {}
        else:
            src = claims.get((ns, ref.get("resourceClaimName", "")))
            cspec = (src or {}).get("spec") or {}
        resources = claim_resources(cspec, classes)
        if products is not None:
            for req in ((cspec.get("devices") or {}).get("requests")) or []:
                chosen = products(req) if _chosen(req) is not None else None
                if chosen is not None:
                    _require_products(nspec, chosen)
        users = [
            c
            for c in containers
            if any(cl.get("name") == ref.get("name") for cl in (c.get("resources") or {}).get("claims") or [])
        ]
        target = users[0] if users else (containers[0] if containers else None)
        if target is None:
            continue
        limits = target.setdefault("resources", {}).setdefault("limits", {})
        for res, n in resources.items():
            limits[res] = str(int(limits.get(res, 0)) + n)
    for c in containers:
        (c.get("resources") or {}).pop("claims", None)
    nspec.pop("resourceClaims", None)
    return new
