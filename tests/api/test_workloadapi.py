"""The Workload API per release and PodGroup-level ResourceClaims (KEP-5729): which versions each release
serves, what its API server drops without DRAWorkloadResourceClaims, and the resourceclaim rules of
k8s.io/dynamic-resource-allocation (resourceclaim.go: BindTo, IsReservedForPod, IsForPod) as
kdra.api.workloadapi ports them."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kdra_api_cases import WORKLOAD_GATES, pod_group

from kdra.api import workloadapi as wa
from kdra.api.features import FeatureGates
from kdra.errors import InputError
from kdra.validation.admission import drop_disabled_fields
from kdra.validation.rules import validate

ON_1_38 = FeatureGates.parse(WORKLOAD_GATES, version="1.38")
OFF_1_38 = FeatureGates.for_version("1.38")
TOO_MANY = [{"name": n, "resourceClaimName": "x"} for n in "abcde"]


@pytest.mark.parametrize(
    ("version", "served"),
    [
        ("1.36", "v1alpha2"),
        ("1.37", "v1beta1"),
        ("1.37", "v1alpha3"),
        ("1.38", "v1beta1"),
        ("1.38", "v1alpha3"),
    ],
)
def test_each_release_reads_the_versions_it_serves(version: str, served: str) -> None:
    """storage_scheduling.go of each build: 1.36 serves Workload/PodGroup as v1alpha2, 1.37 and 1.38 as
    v1beta1 and v1alpha3; another version is refused naming what the release serves."""
    features = FeatureGates.for_version(version)
    assert validate(pod_group([], api=f"scheduling.k8s.io/{served}"), features=features) == []
    other = "v1beta1" if served == "v1alpha2" else "v1alpha2"
    (err,) = validate(pod_group([], api=f"scheduling.k8s.io/{other}"), features=features)
    assert str(err).startswith(
        f'apiVersion: Unsupported value: "scheduling.k8s.io/{other}": Kubernetes {version}'
    )
    assert f'"scheduling.k8s.io/{served}"' in str(err)


def test_other_pod_groups_are_not_the_workload_api() -> None:
    volcano = dict(pod_group(TOO_MANY), apiVersion="scheduling.volcano.sh/v1beta1")
    assert validate(volcano, features=ON_1_38) == []


def test_without_the_gate_the_api_server_drops_the_claims_and_says_nothing_about_them() -> None:
    """podgroup/strategy.go dropDisabledDRAWorkloadResourceClaimsFields: PrepareForCreate drops the field,
    so even a list over the limit is not an error; kdra says it dropped them."""
    pg = pod_group(TOO_MANY)
    assert validate(pg, features=OFF_1_38) == []
    assert [str(e) for e in validate(pg, features=ON_1_38)] == [
        "spec.resourceClaims: Too many: 5: must have at most 4 items"
    ]
    said: list[str] = []
    dropped = copy.deepcopy(pg)
    drop_disabled_fields([dropped], OFF_1_38, said.append)
    assert "resourceClaims" not in dropped["spec"]
    assert said == [
        "PodGroup default/pg-0: spec.resourceClaims dropped: the DRAWorkloadResourceClaims feature gate is "
        "off in Kubernetes 1.38; its pods get claims of their own (--feature-gates "
        "GenericWorkload=true,DRAWorkloadResourceClaims=true shares the group's)"
    ]
    kept = copy.deepcopy(pg)
    drop_disabled_fields([kept], ON_1_38, said.append)
    assert kept == pg and len(said) == 1


def test_the_gate_needs_generic_workload() -> None:
    with pytest.raises(
        InputError, match=r"DRAWorkloadResourceClaims is enabled, but depends on .*GenericWorkload"
    ):
        FeatureGates.parse("DRAWorkloadResourceClaims=true", version="1.38")


def _pod(
    name: str = "m0", group: str | None = "g", claims: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {"resourceClaims": claims or []}
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"}, "spec": spec}


def _group(claims: list[dict[str, Any]], name: str = "g") -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "spec": {"resourceClaims": claims},
    }


SHARED = {"name": "shared", "resourceClaimTemplateName": "t"}
GROUP_REF = {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "g", "uid": "uid-g"}


def test_bind_to_the_pod_group_only_for_an_exact_match() -> None:
    """BindTo: the pod's entry must equal the group's claim in name and source, and the pod must belong
    to that group; otherwise the claim is the pod's."""
    pg = _group([SHARED])
    pod = _pod(claims=[SHARED])
    assert wa.bind_to(pod, pg, SHARED) == GROUP_REF
    own = {"resource": "pods", "name": "m0", "uid": "uid-m0"}
    assert wa.bind_to(pod, pg, {"name": "shared", "resourceClaimTemplateName": "other"}) == own
    assert wa.bind_to(pod, pg, {"name": "other", "resourceClaimTemplateName": "t"}) == own
    assert wa.bind_to(_pod(group="h"), pg, SHARED) == own
    assert wa.bind_to(pod, None, SHARED) == own  # the gate off: no PodGroup is looked at


def test_reserved_for_the_pod_group_counts_for_its_members_with_the_gate() -> None:
    claim = {"status": {"reservedFor": [GROUP_REF]}}
    assert wa.is_reserved_for_pod(_pod(), claim, True)
    assert not wa.is_reserved_for_pod(_pod(), claim, False)
    assert not wa.is_reserved_for_pod(_pod(group="h"), claim, True)


def test_a_claim_owned_by_the_pod_group_is_the_members_with_the_gate() -> None:
    """IsForPod with acceptPodGroupOwner: the controller's kind, group and name are compared (not its
    version, not its uid: pods do not know it)."""
    claim = {
        "metadata": {
            "name": "g-shared-abcde",
            "namespace": "ns",
            "ownerReferences": [
                {
                    "apiVersion": "scheduling.k8s.io/v1alpha3",
                    "kind": "PodGroup",
                    "name": "g",
                    "uid": "x",
                    "controller": True,
                }
            ],
        }
    }
    assert wa.claim_owner_error(_pod(), claim, True) is None
    assert wa.claim_owner_error(_pod(), claim, False) == (
        "ResourceClaim ns/g-shared-abcde was not created for Pod ns/m0 (Pod is not owner)"
    )
    assert wa.claim_owner_error(_pod(group="h"), claim, True) == (
        "ResourceClaim ns/g-shared-abcde was not created for Pod ns/m0 "
        "(neither Pod nor PodGroup h is the owner)"
    )
