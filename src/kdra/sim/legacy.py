"""The legacy device-plugin view of a DRA-shaped pod: claims become integer extended resources.

Each request's device class maps to the extended resource a device plugin advertises (the class's
extendedResourceName, KEP-5004, or the vendor's well-known name; MIG devices and memory shares map to
whole `nvidia.com/gpu`s, because a device plugin hands out whole devices unless the node was statically
partitioned for it). Fractional needs are rounded up to one whole device; `firstAvailable` takes the
cheapest alternative in whole devices; a claim shared by several pods becomes separate devices per pod,
since device plugins cannot share. Selectors are dropped (device plugins have none): model choice must be
expressed with node selectors, which the generator already does.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

Obj = dict[str, Any]

WELL_KNOWN = {
    "gpu.nvidia.com": "nvidia.com/gpu",
    "mig.nvidia.com": "nvidia.com/gpu",
    "gpu.amd.com": "amd.com/gpu",
    "tpu.google.com": "google.com/tpu",
}


def class_resource(class_name: str, classes: Mapping[str, Obj]) -> str:
    ern = ((classes.get(class_name) or {}).get("spec") or {}).get("extendedResourceName")
    return WELL_KNOWN.get(class_name) or ern or f"deviceclass.resource.kubernetes.io/{class_name}"


def _whole(sub: Mapping[str, Any]) -> int:
    if sub.get("allocationMode") == "All":
        return 1
    return max(1, int(sub.get("count") or 1))


def claim_resources(spec: Mapping[str, Any], classes: Mapping[str, Obj]) -> dict[str, int]:
    out: dict[str, int] = {}
    for req in ((spec.get("devices") or {}).get("requests")) or []:
        if req.get("exactly"):
            ex = req["exactly"]
            if ex.get("adminAccess"):
                continue
            res = class_resource(ex.get("deviceClassName", ""), classes)
            out[res] = out.get(res, 0) + _whole(ex)
        elif req.get("firstAvailable"):
            best = min(req["firstAvailable"], key=_whole)
            res = class_resource(best.get("deviceClassName", ""), classes)
            out[res] = out.get(res, 0) + _whole(best)
    return out


def to_device_plugin(
    pod: Obj,
    templates: Mapping[tuple[str, str], Obj],
    claims: Mapping[tuple[str, str], Obj],
    classes: Mapping[str, Obj],
) -> Obj:
    """A copy of `pod` with resourceClaims replaced by extended-resource limits on the using containers."""
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
