"""The real control plane schedules a DRA pod end to end: kube-controller-manager makes the claim
from the template, kube-scheduler allocates a device from a ResourceSlice and binds the pod."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator

import pytest

from kdra.kube.client import KubeClient, Obj
from support.controlplane import ControlPlane, create_node, gates_arg, resolve_gates
from support.wait import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.e2e_lane(name="kube-scheduler")]

DRIVER = "gpu.example.com"


@pytest.fixture
def gpu_node(kube: KubeClient, plane_gates: dict[str, bool]) -> Iterator[tuple[str, str]]:
    """A Ready node with two GPUs published in a ResourceSlice, and a DeviceClass selecting them;
    kube-scheduler (which places the tests' pods) runs with the plane's own gates, whatever ran before."""
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
    release = control_plane.release
    version = kube.request("GET", "/version")
    assert version["gitVersion"].startswith(f"v{release.minor}."), version
    assert version["gitVersion"] == control_plane.version
    groups = kube.request("GET", "/apis/resource.k8s.io")
    served = {v["version"] for v in groups["versions"]}
    assert {"v1", "v1beta2"} <= served, served
    group, _, api = release.device_taint_rule_api.partition("/")
    resources = kube.request("GET", f"/apis/{group}/{api}")
    assert "devicetaintrules" in {r["name"] for r in resources["resources"]}, release.device_taint_rule_api


def _gates_on(kube: KubeClient) -> dict[str, bool]:
    """kubernetes_feature_enabled{name=...} of kube-apiserver's /metrics."""
    out = {}
    for line in str(kube.request("GET", "/metrics")).splitlines():
        if line.startswith("kubernetes_feature_enabled{"):
            name = line.split('name="', 1)[1].split('"', 1)[0]
            out[name] = line.rsplit(" ", 1)[1] == "1"
    return out


def _refused(control_plane: ControlPlane, gates: dict[str, bool]) -> str:
    """kube-scheduler's complaint about these --feature-gates ('' when it accepts them). Gates are
    validated while flags are parsed, so --version answers in a fraction of a second."""
    proc = subprocess.run(
        [str(control_plane.bin_dir / "kube-scheduler"), f"--feature-gates={gates_arg(gates)}", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return "" if proc.returncode == 0 else proc.stderr + proc.stdout


def test_release_table_matches_the_binaries(kube: KubeClient, control_plane: ControlPlane) -> None:
    """K8sRelease (controlplane.py) is what the binaries do: the fixture's gates and the allocator-gate
    defaults are in effect, locked gates are on and refuse to be turned off, every declared dependency
    is enforced, and resolve_gates turns dependents off so that the components start."""
    release = control_plane.release
    on = _gates_on(kube)
    for gate, want in release.feature_gates.items():
        assert on.get(gate) is want, (gate, on.get(gate))
    for gate, want in release.allocator_gate_defaults.items():
        assert on.get(gate) is (control_plane.config.feature_gates or {}).get(gate, want), gate
    for gate in release.locked_gates:
        assert on.get(gate) is True, gate
        assert "locked to true" in _refused(control_plane, {gate: False}), gate
    for gate, needs in release.gate_dependencies.items():
        for need in needs:
            if need in release.locked_gates:
                continue
            assert "depends on features that are disabled" in _refused(
                control_plane, {gate: True, need: False}
            ), (gate, need)
            assert _refused(control_plane, resolve_gates(release.feature_gates, {need: False}, release)) == ""


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
