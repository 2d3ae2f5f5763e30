"""The scheduling.k8s.io Workload API as each release serves it, and PodGroup-level ResourceClaims (KEP-5729).

Versions (pkg/registry/scheduling/rest/storage_scheduling.go of each build, behind the GenericWorkload gate):
1.36 serves Workload and PodGroup as v1alpha2 (a PodGroup names its template with
`spec.podGroupTemplateRef.workload{workloadName, podGroupTemplateName}`); 1.37 and 1.38 as v1beta1 (preferred)
and v1alpha3 (`spec.workloadRef{workloadName, templateName}`).

PodGroup-level claims (gate DRAWorkloadResourceClaims, which needs GenericWorkload): `spec.resourceClaims[]`
of a PodGroup (and of a Workload's podGroupTemplates, which controllers copy into the PodGroups they make)
names at most 4 claims, each by `resourceClaimName` or `resourceClaimTemplateName`. A member pod whose
`spec.resourceClaims` entry equals one of them (same name and the same source) uses the one claim of the
group: made once from the template by the resourceclaim controller (owned by the PodGroup, recorded in
`podGroup.status.resourceClaimStatuses` and in each member's `pod.status.resourceClaimStatuses`),
allocated once, and reserved for the PodGroup (`reservedFor: [{apiGroup: scheduling.k8s.io, resource:
podgroups, name, uid}]`), not for each pod. The functions here are k8s.io/dynamic-resource-allocation's
resourceclaim package (resourceclaim.go: BindTo, IsForPod, IsReservedForPod, NameFromPodGroup) on dicts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from kdra.api.features import FeatureGates
from kdra.api.types import Obj

GROUP: Final = "scheduling.k8s.io"
KINDS: Final = frozenset({"Workload", "PodGroup"})
# Release -> the versions that serve Workload and PodGroup, the preferred one first.
SERVED_VERSIONS: Final[Mapping[str, tuple[str, ...]]] = {
    "1.36": ("v1alpha2",),
    "1.37": ("v1beta1", "v1alpha3"),
    "1.38": ("v1beta1", "v1alpha3"),
}
MAX_POD_GROUP_RESOURCE_CLAIMS: Final = 4  # MaxPodGroupResourceClaims
CLAIMS_GATE: Final = "DRAWorkloadResourceClaims"
POD_GROUP_RESOURCE: Final = "podgroups"


def api_group(obj: Mapping[str, Any]) -> str:
    return str(obj.get("apiVersion") or "").split("/", 1)[0]


def is_workload_api(obj: Mapping[str, Any]) -> bool:
    """A Workload or PodGroup of scheduling.k8s.io (not KAI's, Volcano's or kdra's PodGroup)."""
    return obj.get("kind") in KINDS and api_group(obj) == GROUP


def claims_enabled(features: FeatureGates | None) -> bool:
    return features is not None and features.enabled(CLAIMS_GATE)


def pod_group_name(pod: Mapping[str, Any]) -> str | None:
    """The PodGroup a pod belongs to (`spec.schedulingGroup.podGroupName`)."""
    sg = (pod.get("spec") or {}).get("schedulingGroup")
    name = sg.get("podGroupName") if isinstance(sg, Mapping) else None
    return name if isinstance(name, str) and name else None


def pod_group_claims(pod_group: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    """`spec.resourceClaims` of a PodGroup (entries that are objects)."""
    if not pod_group:
        return []
    claims = (pod_group.get("spec") or {}).get("resourceClaims")
    return [c for c in claims if isinstance(c, Mapping)] if isinstance(claims, list) else []


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _ns(obj: Mapping[str, Any]) -> str:
    return str(_meta(obj).get("namespace") or "default")


def matching_group_claim(
    pod: Mapping[str, Any], pod_group: Mapping[str, Any] | None, entry: Mapping[str, Any]
) -> Mapping[str, Any] | None:
    """The PodGroup's claim that a pod's `spec.resourceClaims` entry matches exactly (BindTo's rule: same
    name, resourceClaimName and resourceClaimTemplateName), when the pod belongs to that PodGroup."""
    if pod_group is None or pod_group_name(pod) != _meta(pod_group).get("name") or _ns(pod) != _ns(pod_group):
        return None
    for c in pod_group_claims(pod_group):
        if (
            c.get("name") == entry.get("name")
            and c.get("resourceClaimName") == entry.get("resourceClaimName")
            and c.get("resourceClaimTemplateName") == entry.get("resourceClaimTemplateName")
        ):
            return c
    return None


def pod_group_ref(pod_group: Mapping[str, Any]) -> dict[str, str]:
    """The ResourceClaimConsumerReference of a PodGroup."""
    meta = _meta(pod_group)
    return {
        "apiGroup": GROUP,
        "resource": POD_GROUP_RESOURCE,
        "name": str(meta.get("name", "")),
        "uid": str(meta.get("uid", "")),
    }


def pod_ref(pod: Mapping[str, Any]) -> dict[str, str]:
    meta = _meta(pod)
    return {"resource": "pods", "name": str(meta.get("name", "")), "uid": str(meta.get("uid", ""))}


def bind_to(
    pod: Mapping[str, Any], pod_group: Mapping[str, Any] | None, entry: Mapping[str, Any]
) -> dict[str, str]:
    """Whom the claim of a pod's entry is reserved for: the PodGroup when the entry matches one of its
    claims, else the pod. `pod_group` is None when DRAWorkloadResourceClaims is off."""
    if matching_group_claim(pod, pod_group, entry) is not None:
        assert pod_group is not None
        return pod_group_ref(pod_group)
    return pod_ref(pod)


def is_pod_group_ref(ref: Mapping[str, Any]) -> bool:
    return ref.get("apiGroup") == GROUP and ref.get("resource") == POD_GROUP_RESOURCE


def is_reserved_for_pod(pod: Mapping[str, Any], claim: Mapping[str, Any], accept_pod_group: bool) -> bool:
    """IsReservedForPod: the pod is in the claim's reservedFor, or (with the gate) its PodGroup is (pods do
    not know their PodGroup's uid: group, resource and name are compared)."""
    uid = _meta(pod).get("uid")
    group = pod_group_name(pod) if accept_pod_group else None
    for r in (claim.get("status") or {}).get("reservedFor") or []:
        if r.get("uid") == uid:
            return True
        if group is not None and is_pod_group_ref(r) and r.get("name") == group:
            return True
    return False


def _controller(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for ref in _meta(obj).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller"):
            return ref
    return None


def is_for_pod_group_by_pod(pod: Mapping[str, Any], claim: Mapping[str, Any]) -> bool:
    """isForPodGroupByPod: the claim's controller is the pod's PodGroup (kind, group and name; the version
    of the owner's apiVersion may differ)."""
    group = pod_group_name(pod)
    ctrl = _controller(claim)
    return (
        group is not None
        and ctrl is not None
        and ctrl.get("name") == group
        and ctrl.get("kind") == "PodGroup"
        and str(ctrl.get("apiVersion") or "").startswith(GROUP + "/")
    )


def claim_owner_error(
    pod: Mapping[str, Any], claim: Mapping[str, Any], accept_pod_group_owner: bool
) -> str | None:
    """IsForPod: None when a claim made from a template is the pod's (or, with the gate, its PodGroup's);
    else upstream's message."""
    ns, name = _ns(claim), _meta(claim).get("name")
    pns, pname = _ns(pod), _meta(pod).get("name")
    if ns != pns:
        return f"ResourceClaim {ns}/{name} is not in the same namespace as Pod {pns}/{pname}"
    ctrl = _controller(claim)
    if ctrl is not None and ctrl.get("uid") == _meta(pod).get("uid"):
        return None
    group = pod_group_name(pod)
    if accept_pod_group_owner and group is not None:
        if is_for_pod_group_by_pod(pod, claim):
            return None
        return (
            f"ResourceClaim {ns}/{name} was not created for Pod {pns}/{pname} "
            f"(neither Pod nor PodGroup {group} is the owner)"
        )
    return f"ResourceClaim {ns}/{name} was not created for Pod {pns}/{pname} (Pod is not owner)"


def is_for_pod_group(pod_group: Mapping[str, Any], claim: Mapping[str, Any]) -> bool:
    """IsForPodGroup: the claim's controller is this PodGroup (by uid)."""
    ctrl = _controller(claim)
    return (
        _ns(claim) == _ns(pod_group) and ctrl is not None and ctrl.get("uid") == _meta(pod_group).get("uid")
    )


def group_claim_name(pod_group: Mapping[str, Any], claim: Mapping[str, Any]) -> str | None:
    """NameFromPodGroup: the ResourceClaim a PodGroup claim stands for (None while the controller has not
    made the one of a template yet)."""
    if claim.get("resourceClaimName"):
        return str(claim["resourceClaimName"])
    for st in (pod_group.get("status") or {}).get("resourceClaimStatuses") or []:
        if isinstance(st, Mapping) and st.get("name") == claim.get("name"):
            name = st.get("resourceClaimName")
            return str(name) if name else None
    return None


def drop_disabled_fields(obj: Obj, features: FeatureGates | None) -> bool:
    """The PodGroup and Workload strategies' PrepareForCreate: without DRAWorkloadResourceClaims the API
    server drops `spec.resourceClaims` (and `status.resourceClaimStatuses`) of a PodGroup and of a
    Workload's podGroupTemplates. True when something was dropped."""
    if not is_workload_api(obj) or claims_enabled(features):
        return False
    spec = obj.get("spec")
    dropped = False
    if not isinstance(spec, dict):
        return False
    if obj.get("kind") == "PodGroup":
        dropped = spec.pop("resourceClaims", None) is not None
        status = obj.get("status")
        if isinstance(status, dict):
            status.pop("resourceClaimStatuses", None)
    else:
        for t in spec.get("podGroupTemplates") or []:
            if isinstance(t, dict) and t.pop("resourceClaims", None) is not None:
                dropped = True
    return dropped


__all__ = [
    "CLAIMS_GATE",
    "GROUP",
    "MAX_POD_GROUP_RESOURCE_CLAIMS",
    "SERVED_VERSIONS",
    "bind_to",
    "claim_owner_error",
    "claims_enabled",
    "drop_disabled_fields",
    "group_claim_name",
    "is_for_pod_group",
    "is_for_pod_group_by_pod",
    "is_pod_group_ref",
    "is_reserved_for_pod",
    "is_workload_api",
    "matching_group_claim",
    "pod_group_claims",
    "pod_group_name",
    "pod_group_ref",
    "pod_ref",
]
