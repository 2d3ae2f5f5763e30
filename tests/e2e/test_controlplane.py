"""The real control plane schedules a DRA pod end to end: kube-controller-manager makes the claim
from the template, kube-scheduler allocates a device from a ResourceSlice and binds the pod."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from kdra.kube.client import KubeClient, Obj
from kdra.testing.controlplane import ControlPlane, create_node
from kdra.testing.wait import wait_for

pytestmark = pytest.mark.e2e

DRIVER = "gpu.example.com"


@pytest.fixture
def gpu_node(kube: KubeClient) -> Iterator[tuple[str, str]]:
    """A Ready node with two GPUs published in a ResourceSlice, and a DeviceClass selecting them."""
    suffix = uuid.uuid4().hex[:6]
    node, cls = f"node-{suffix}", f"gpu-{suffix}"
    create_node(kube, node, labels={"kdra.test/e2e": "true"})
    kube.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": cls},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        }
    )
    kube.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{DRIVER}"},
            "spec": {
                "driver": DRIVER,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {
                        "name": f"gpu-{i}",
                        "attributes": {"model": {"string": "A100"}, "index": {"int": i}},
                        "capacity": {"memory": {"value": "40Gi"}},
                    }
                    for i in range(2)
                ],
            },
        }
    )
    yield node, cls
    kube.delete("ResourceSlice", f"{node}-{DRIVER}", missing_ok=True)
    kube.delete("DeviceClass", cls, missing_ok=True)
    kube.delete("Node", node, missing_ok=True)


def template(name: str, cls: str, count: int = 1) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {
                                "deviceClassName": cls,
                                "allocationMode": "ExactCount",
                                "count": count,
                            },
                        }
                    ]
                }
            }
        },
    }


def pod(name: str, template_name: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template_name}],
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"claims": [{"name": "gpu"}]},
                }
            ],
        },
    }


def test_version_and_dra_api(kube: KubeClient, control_plane: ControlPlane) -> None:
    version = kube.request("GET", "/version")
    assert version["gitVersion"].startswith("v1.36."), version
    groups = kube.request("GET", "/apis/resource.k8s.io")
    served = {v["version"] for v in groups["versions"]}
    assert {"v1", "v1beta2"} <= served, served


def test_template_claim_is_created_allocated_and_pod_bound(
    kube: KubeClient, namespace: str, gpu_node: tuple[str, str]
) -> None:
    node, cls = gpu_node
    ns = namespace
    tmpl = template("one-gpu", cls)
    tmpl["metadata"]["namespace"] = ns
    kube.create(tmpl)
    p = pod("trainer", "one-gpu")
    p["metadata"]["namespace"] = ns
    created = kube.create(p)
    uid = created["metadata"]["uid"]

    bound = wait_for(
        lambda: (lambda o: o if o["spec"].get("nodeName") else None)(kube.get("Pod", "trainer", ns)),
        60,
        "kube-scheduler to bind pod trainer",
    )
    assert bound["spec"]["nodeName"] == node

    # kube-controller-manager's resourceclaim controller generated the claim and recorded its name.
    statuses = bound["status"].get("resourceClaimStatuses") or []
    assert [s["name"] for s in statuses] == ["gpu"], statuses
    claim_name = statuses[0]["resourceClaimName"]
    claim = kube.get("ResourceClaim", claim_name, ns)
    owners = claim["metadata"].get("ownerReferences") or []
    assert [(o["kind"], o["name"], o["uid"]) for o in owners] == [("Pod", "trainer", uid)]
    assert claim["metadata"]["annotations"]["resource.kubernetes.io/pod-claim-name"] == "gpu"

    # kube-scheduler allocated one of the node's devices and reserved the claim for the pod.
    allocation = claim["status"]["allocation"]
    results = allocation["devices"]["results"]
    assert len(results) == 1
    assert results[0]["request"] == "gpu"
    assert results[0]["driver"] == DRIVER
    assert results[0]["pool"] == node
    assert results[0]["device"] in {"gpu-0", "gpu-1"}
    terms = allocation["nodeSelector"]["nodeSelectorTerms"]
    assert any(
        f.get("key") == "metadata.name" and f.get("values") == [node]
        for t in terms
        for f in t.get("matchFields", [])
    ), terms
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "trainer", "uid": uid}]
    assert "resource.kubernetes.io/delete-protection" in claim["metadata"].get("finalizers", [])


def test_too_many_devices_is_unschedulable(
    kube: KubeClient, namespace: str, gpu_node: tuple[str, str]
) -> None:
    _, cls = gpu_node
    ns = namespace
    tmpl = template("three-gpus", cls, count=3)
    tmpl["metadata"]["namespace"] = ns
    kube.create(tmpl)
    p = pod("greedy", "three-gpus")
    p["metadata"]["namespace"] = ns
    kube.create(p)

    def unschedulable() -> Obj | None:
        conds = kube.get("Pod", "greedy", ns)["status"].get("conditions") or []
        for c in conds:
            if c["type"] == "PodScheduled" and c["status"] == "False" and c.get("reason") == "Unschedulable":
                return c
        return None

    cond = wait_for(unschedulable, 60, "pod greedy to be marked unschedulable")
    assert "cannot allocate all claims" in cond["message"], cond
    assert not kube.get("Pod", "greedy", ns)["spec"].get("nodeName")
