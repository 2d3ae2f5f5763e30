"""Instantiate a ResourceClaimTemplate for a pod (or a PodGroup) as kube-controller-manager's resourceclaim
controller does.

Upstream (pkg/controller/resourceclaim/controller.go, handleClaim and handlePodGroupClaim): the claim gets
`generateName: <owner>-<claimName>-`, both parts truncated proportionally when the base exceeds 57
characters, the pod or PodGroup as controlling owner (`controller: true`, nothing else set), the
template's labels and annotations plus the annotation `resource.kubernetes.io/pod-claim-name` (the entry's
name, for a PodGroup's claim too), and the template's spec. The API server then appends
five random characters (apiserver names.SimpleNameGenerator: base cut to 58, alphabet
"bcdfghjklmnpqrstvwxz2456789"). kdra derives those five characters from a hash of the pod and the claim
entry instead, so the same input always produces the same claim name.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Container
from typing import Any

from kdra.api.types import clone

POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"

# apiserver/pkg/storage/names/generate.go
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_RANDOM_LENGTH = 5
_MAX_GENERATED_BASE = 63 - _RANDOM_LENGTH
# resourceclaim controller: leave space for a hyphen and 5 random characters in a 63-character name.
_MAX_CONTROLLER_BASE = 57


def claim_generate_name(pod_name: str, pod_claim_name: str) -> str:
    """The controller's generateName, with its proportional truncation (which drops the trailing hyphen)."""
    generate_name = f"{pod_name}-{pod_claim_name}-"
    if len(generate_name) > _MAX_CONTROLLER_BASE:
        total = len(generate_name)
        generate_name = (
            pod_name[: len(pod_name) * _MAX_CONTROLLER_BASE // total]
            + "-"
            + pod_claim_name[: len(pod_claim_name) * _MAX_CONTROLLER_BASE // total]
        )
    return generate_name


def deterministic_suffix(seed: str, attempt: int = 0) -> str:
    """Five characters from the apiserver's name alphabet, derived from `seed` (no randomness)."""
    digest = hashlib.sha256(f"{seed}#{attempt}".encode()).digest()
    return "".join(_ALPHABET[b % len(_ALPHABET)] for b in digest[:_RANDOM_LENGTH])


def generated_name(generate_name: str, seed: str, taken: Container[str] = (), attempt: int = 0) -> str:
    """What the apiserver makes of generateName, with a seed-derived suffix that avoids `taken` names."""
    base = generate_name[:_MAX_GENERATED_BASE]
    while True:
        name = base + deterministic_suffix(seed, attempt)
        if name not in taken:
            return name
        attempt += 1


def pod_uid(pod: dict[str, Any]) -> str:
    """The pod's uid, or a stable one derived from its namespace and name when the input has none."""
    meta = pod.get("metadata") or {}
    uid = meta.get("uid")
    if uid:
        return str(uid)
    namespace = meta.get("namespace") or "default"
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"kdra://pods/{namespace}/{meta.get('name', '')}"))


def is_claim_for_pod(claim: dict[str, Any], pod: dict[str, Any], pod_claim_name: str) -> bool:
    """True for a claim the controller created earlier for this pod entry (controller owner + annotation)."""
    meta = claim.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    if annotations.get(POD_CLAIM_NAME_ANNOTATION) != pod_claim_name:
        return False
    pod_meta = pod.get("metadata") or {}
    if (meta.get("namespace") or "default") != (pod_meta.get("namespace") or "default"):
        return False
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == "Pod" and ref.get("controller") and ref.get("name") == pod_meta.get("name"):
            uid = pod_meta.get("uid")
            if not uid or ref.get("uid") == uid:
                return True
    return False


def instantiate_template(
    owner: dict[str, Any],
    claim_name: str,
    template: dict[str, Any],
    taken_names: Container[str] = (),
    owner_api_version: str = "v1",
) -> dict[str, Any]:
    """A new ResourceClaim for the entry `claim_name` of `owner` (a Pod, or a PodGroup whose controller
    reference names `owner_api_version`) from `template`, named deterministically."""
    owner_meta = owner.get("metadata") or {}
    owner_name = str(owner_meta.get("name", ""))
    namespace = str(owner_meta.get("namespace") or "default")
    template_spec = template.get("spec") or {}
    template_meta = template_spec.get("metadata") or {}
    annotations = dict(template_meta.get("annotations") or {})
    annotations[POD_CLAIM_NAME_ANNOTATION] = claim_name
    generate_name = claim_generate_name(owner_name, claim_name)
    uid = pod_uid(owner)
    kind = str(owner.get("kind") or "Pod")
    seed = (
        f"{namespace}/{owner_name}/{uid}/{claim_name}"
        if kind == "Pod"
        else f"{kind}/{namespace}/{owner_name}/{uid}/{claim_name}"
    )
    name = generated_name(generate_name, seed, taken_names)
    metadata: dict[str, Any] = {
        "name": name,
        "generateName": generate_name,
        "namespace": namespace,
        "annotations": annotations,
    }
    labels = template_meta.get("labels")
    if labels:
        metadata["labels"] = dict(labels)
    metadata["ownerReferences"] = [
        {"apiVersion": owner_api_version, "kind": kind, "name": owner_name, "uid": uid, "controller": True}
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": metadata,
        "spec": clone(template_spec.get("spec") or {}),
    }
