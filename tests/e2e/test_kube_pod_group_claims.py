"""PodGroup-level ResourceClaims (KEP-5729) on a real control plane (1.37 or 1.38): the Workload API at
the version the release serves (v1beta1), kube-controller-manager making the group's claim from its
template (DRAWorkloadResourceClaims, turned on by the fixture with GenericWorkload), and `kdra scheduler`
allocating it once for the whole gang and reserving it for the PodGroup, as kube-scheduler does
(dynamicresources.go podResourceClaimBindings). Run it on 1.38 with `KDRA_K8S_VERSION=1.38`."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from kdra.kube.client import KubeClient
from kdra.kube.resources import resource_path
from support.controlplane import ControlPlane

from .kubeutil import DeviceFleet, claim_template, template_pod
from .sessionutil import FLEET_LABEL, bound, cleanup, create_all, session_scheduler, settled, wait

# kdra scheduler under the default scheduler name: one such test at a time (hack/e2e.sh lanes).
pytestmark = [pytest.mark.e2e, pytest.mark.e2e_lane(name="kdra-scheduler")]

GATES = "GenericWorkload=true,DRAWorkloadResourceClaims=true"
SHARED = {"name": "shared", "resourceClaimTemplateName": "shared"}


def member(name: str, namespace: str, fleet: str) -> dict[str, Any]:
    """A gang member with a claim of its own (`dev`) and the group's (`shared`), kept on the fleet."""
    p = template_pod(name, namespace, "own")
    p["spec"]["nodeSelector"] = {FLEET_LABEL: fleet}
    p["spec"]["schedulingGroup"] = {"podGroupName": "train"}
    p["spec"]["resourceClaims"].append(dict(SHARED))
    p["spec"]["containers"][0]["resources"]["claims"].append({"name": "shared"})
    return p


def test_the_gang_shares_one_claim_made_by_the_controller_manager_and_reserved_for_its_pod_group(
    control_plane: ControlPlane, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    """A Workload and its PodGroup with a template claim; kube-controller-manager makes `train-shared-xxxxx`
    (owned by the PodGroup) and names it in the PodGroup's and each member's status. Two nodes of 4
    devices, 3 members with a device of their own each and the group's: the gang fits only if the group's
    claim is allocated once (4 devices on one node, not 6), and kdra reserves it for the PodGroup, each
    member's own claim for the member. Deleting the PodGroup (after its pods) releases the claim and the
    garbage collector deletes it. The fleet's own driver and DeviceClass keep the lanes apart."""
    release = control_plane.release
    api = f"scheduling.k8s.io/{release.workload_api_version}"
    assert kube.served_version("scheduling.k8s.io", "podgroups") == api, "the Workload API at its version"
    gates = control_plane.config.feature_gates or {}
    assert gates.get("GenericWorkload") and gates.get("DRAWorkloadResourceClaims")
    gang = {"gang": {"minCount": 3}}
    workload = {
        "apiVersion": api,
        "kind": "Workload",
        "metadata": {"name": "train", "namespace": namespace},
        "spec": {
            "podGroupTemplates": [{"name": "workers", "schedulingPolicy": gang, "resourceClaims": [SHARED]}]
        },
    }
    group = {  # as a workload controller copies it from the template
        "apiVersion": api,
        "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": namespace},
        "spec": {
            "workloadRef": {"workloadName": "train", "templateName": "workers"},
            "schedulingPolicy": gang,
            "resourceClaims": [SHARED],
        },
    }
    path = resource_path("PodGroup", namespace, "train", api_version=api)
    fleet = DeviceFleet(kube, f"pgc{uuid.uuid4().hex[:6]}", nodes=2, devices=4).create(workers=2)
    try:
        cls = fleet.device_class
        create_all(
            kube, [claim_template("shared", namespace, cls), claim_template("own", namespace, cls), workload]
        )
        pg = kube.create(group)

        def group_claim() -> str | None:
            statuses = (kube.request("GET", path).get("status") or {}).get("resourceClaimStatuses") or []
            return next((s.get("resourceClaimName") for s in statuses if s.get("name") == "shared"), None)

        name = wait(group_claim, 60, "kube-controller-manager to make the PodGroup's claim")
        claim = kube.get("ResourceClaim", name, namespace)
        assert name.startswith("train-shared-")
        assert claim["metadata"]["ownerReferences"] == [
            {
                "apiVersion": api,
                "kind": "PodGroup",
                "name": "train",
                "uid": pg["metadata"]["uid"],
                "controller": True,
            }
        ]
        create_all(kube, [member(f"train-{i}", namespace, fleet.prefix) for i in range(3)])
        proc = session_scheduler(
            control_plane,
            tmp_path / "kdra.log",
            "--kubernetes-version",
            release.minor,
            "--feature-gates",
            GATES,
        )
        try:
            placed = wait(
                lambda: len(bound(kube, namespace)) == 3 and bound(kube, namespace),
                60,
                "the gang bound",
                log=proc.log,
            )
            claim = kube.get("ResourceClaim", name, namespace)
            assert claim["status"]["reservedFor"] == [
                {
                    "apiGroup": "scheduling.k8s.io",
                    "resource": "podgroups",
                    "name": "train",
                    "uid": pg["metadata"]["uid"],
                }
            ]
            (shared,) = claim["status"]["allocation"]["devices"]["results"]
            assert set(placed.values()) == {shared["pool"]}, "the gang is on the node of the group's device"
            claims = {c["metadata"]["name"]: c for c in kube.list("ResourceClaim", namespace)}
            assert sorted(n.rsplit("-", 1)[0] for n in claims) == [
                "train-0-dev",
                "train-1-dev",
                "train-2-dev",
                "train-shared",
            ]
            devices = {shared["device"]}
            for i in range(3):
                pod = kube.get("Pod", f"train-{i}", namespace)
                statuses = {s["name"]: s["resourceClaimName"] for s in pod["status"]["resourceClaimStatuses"]}
                assert statuses["shared"] == name  # kube-controller-manager resolved the entry to the group's
                own = claims[statuses["dev"]]["status"]
                assert own["reservedFor"] == [
                    {"resource": "pods", "name": f"train-{i}", "uid": pod["metadata"]["uid"]}
                ]
                devices.add(own["allocation"]["devices"]["results"][0]["device"])
            assert len(devices) == 4, "4 devices: one each and the group's"
            problems = settled(
                kube, namespace, gangs={f"{namespace}/train": (3, [f"train-{i}" for i in range(3)])}
            )
            assert not problems, [str(p) for p in problems]
        finally:
            proc.stop()
            cleanup(kube, namespace)
        # The group's claim outlives its pods: still allocated and reserved for the PodGroup.
        claim = kube.get("ResourceClaim", name, namespace)
        assert claim["status"]["reservedFor"][0]["resource"] == "podgroups" and claim["status"]["allocation"]
        # The PodGroup goes once no pod references it; then its claim is released and garbage-collected.
        kube.request("DELETE", path)
        wait(
            lambda: kube.try_get("ResourceClaim", name, namespace) is None, 60, "the PodGroup's claim deleted"
        )
    finally:
        fleet.delete()
