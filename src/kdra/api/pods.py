"""A pod's ResourceClaims and a claim's consumers, read from the objects as the API server serves them.

A pod names its claims in `spec.resourceClaims`: directly (`resourceClaimName`), or through a template
whose generated claim the resourceclaim controller records in `status.resourceClaimStatuses`; KEP-5004
adds the claim kube-scheduler creates for extended resources (`status.extendedResourceClaimStatus`).
A claim lists the pods using it in `status.reservedFor` (at most 256, ResourceClaimReservedForMaxSize).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

MAX_RESERVED_FOR = 256  # ResourceClaimReservedForMaxSize (k8s.io/api/resource/v1)


def generated_claims(pod: Mapping[str, Any]) -> dict[str, str | None]:
    """pod.status.resourceClaimStatuses: entry name -> the claim made for it (None: none needed)."""
    return {
        s.get("name"): s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }


def entry_claim_name(pod: Mapping[str, Any], entry: Mapping[str, Any]) -> tuple[str | None, bool]:
    """(the claim a pod.spec.resourceClaims entry stands for, None if not created yet; from a template)."""
    if entry.get("resourceClaimName"):
        return entry["resourceClaimName"], False
    for st in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
        if st.get("name") == entry.get("name"):
            return st.get("resourceClaimName"), True
    return None, True


def extended_claim_name(pod: Mapping[str, Any]) -> str | None:
    """The KEP-5004 claim kube-scheduler made for the pod's extended-resource requests (None: none)."""
    name = ((pod.get("status") or {}).get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
    return name or None


def entry_claim_names(pod: Mapping[str, Any]) -> list[str]:
    """The claims the pod's spec.resourceClaims entries stand for, in spec order, those created so far."""
    return [
        name
        for entry in (pod.get("spec") or {}).get("resourceClaims") or []
        if (name := entry_claim_name(pod, entry)[0])
    ]


def pod_claim_names(pod: Mapping[str, Any]) -> list[str]:
    """The claims a pod uses, in spec order: named ones, those made from its templates, then its
    extended-resource claim. The same whoever created them (kdra or kube-controller-manager)."""
    names = entry_claim_names(pod)
    special = extended_claim_name(pod)
    if special:
        names.append(special)
    return names


def reserved_for(claim: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]:
    """claim.status.reservedFor (empty when unset)."""
    return (claim.get("status") or {}).get("reservedFor") or []


def reserved_for_pod(claim: Mapping[str, Any], uid: str) -> bool:
    """Whether the pod with `uid` is among the claim's consumers."""
    return any(r.get("uid") == uid for r in reserved_for(claim))


def reserving_pods(claim: Mapping[str, Any]) -> list[str]:
    """The names of the pods among the claim's consumers, sorted."""
    return sorted(r.get("name", "") for r in reserved_for(claim) if r.get("resource") == "pods")
