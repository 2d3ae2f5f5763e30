"""kdra's other Kubernetes-mode commands on the real control plane: `kdra driver sim` publishing a fleet
(with its least-privilege RBAC), `kdra scheduler` running under deploy/rbac's ClusterRole only, the CRD
manifests, and the read-only tools `kdra explain`, `kdra export` and `kdra allocate --kubeconfig`."""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from kdra.cli.main import main
from kdra.cluster.store import StoreError
from kdra.kube.client import KubeClient
from kdra.kube.client import KubeClient as Client
from support.controlplane import ControlPlane, create_node, write_kubeconfig

from .kubeutil import bound_pods, claim_template, create_pods, kdra_scheduler, template_pod, wait_until

pytestmark = pytest.mark.e2e
# `kdra driver sim` creates the fleet's DeviceClasses (gpu.nvidia.com, ...) the corpus cases create too,
# and export/allocate read the whole cluster: beside kube-scheduler's lane, not beside it.
SHARED_NAMES = pytest.mark.e2e_lane(name="kube-scheduler")

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def apply(client: Client, path: Path, replace: dict[str, str] | None = None) -> list[dict[str, Any]]:
    text = path.read_text()
    for a, b in (replace or {}).items():
        text = text.replace(a, b)
    objs = [d for d in yaml.safe_load_all(text) if d]
    for obj in objs:
        try:
            client.create(obj)
        except Exception as e:
            if "AlreadyExists" not in str(e):
                raise
    return objs


def sa_kubeconfig(cp: ControlPlane, admin: Client, name: str, out: Path) -> Path:
    token = admin.service_account_token("kube-system", name)
    assert cp.certs is not None
    write_kubeconfig(out, cp.server, cp.certs.ca_cert, token)
    return out


@pytest.fixture
def admin(control_plane: ControlPlane) -> Client:
    return Client.from_kubeconfig(control_plane.kubeconfig, qps=0)


def fleet_yaml(name: str, a100: int, l4: int) -> str:
    return f"""
apiVersion: kdra.dev/v1alpha1
kind: Fleet
metadata: {{name: {name}}}
spec:
  nvidia: {{driverVersion: 580.126.20, cudaDriverVersion: 13.0.0}}
  pools:
  - name: a100
    count: {a100}
    namePattern: "{name}-a100-{{index}}"
    cpu: "64"
    memory: 512Gi
    accelerator: {{model: A100-40GB, count: 2}}
  - name: l4
    count: {l4}
    namePattern: "{name}-l4-{{index}}"
    cpu: "32"
    memory: 256Gi
    accelerator: {{model: L4, count: 1}}
"""


def fleet_slices(kube: KubeClient, prefix: str) -> dict[str, dict[str, Any]]:
    return {
        s["metadata"]["name"]: s
        for s in kube.list("ResourceSlice")
        if str(s["spec"].get("nodeName", "")).startswith(prefix)
    }


@SHARED_NAMES
def test_driver_sim_publishes_and_reconciles_a_fleet(
    control_plane: ControlPlane, kube: KubeClient, admin: Client, tmp_path: Path, capsys: Any
) -> None:
    apply(admin, DEPLOY / "rbac" / "driver-sim.yaml")
    kc = sa_kubeconfig(control_plane, admin, "kdra-driver-sim", tmp_path / "driver.kubeconfig")
    name = f"fs{uuid.uuid4().hex[:5]}"
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(fleet_yaml(name, a100=2, l4=1))
    try:
        assert main(["driver", "sim", "--kubeconfig", str(kc), "-c", str(fleet)]) == 0
        nodes = [n for n in kube.list("Node") if n["metadata"]["name"].startswith(name)]
        assert sorted(n["metadata"]["name"] for n in nodes) == [
            f"{name}-a100-0",
            f"{name}-a100-1",
            f"{name}-l4-0",
        ]
        for n in nodes:
            assert not (n.get("spec") or {}).get("taints")
            assert any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"])
            assert n["status"]["allocatable"]["cpu"] in ("64", "32")
        slices = fleet_slices(kube, name)
        assert slices
        pools = {(s["spec"]["driver"], s["spec"]["pool"]["name"]) for s in slices.values()}
        for s in slices.values():
            # one pool per node and driver, named after the node
            assert s["spec"]["pool"]["name"] == s["spec"]["nodeName"]
            assert s["spec"]["pool"]["generation"] == 1
            assert s["metadata"]["ownerReferences"][0]["kind"] == "Node"
        assert len(pools) == len({(s["spec"]["driver"], s["spec"]["nodeName"]) for s in slices.values()})
        capsys.readouterr()

        # Idempotent: nothing changes on a second run.
        assert main(["driver", "sim", "--kubeconfig", str(kc), "-c", str(fleet)]) == 0
        assert "0 created, 0 updated, 0 deleted (0 pools changed)" in capsys.readouterr().out
        assert {k: v["metadata"]["resourceVersion"] for k, v in fleet_slices(kube, name).items()} == {
            k: v["metadata"]["resourceVersion"] for k, v in slices.items()
        }

        # A changed slice is restored with the pool generation bumped; a removed node's slices go.
        victim = copy.deepcopy(next(s for s in slices.values() if s["spec"]["nodeName"] == f"{name}-a100-0"))
        victim["spec"]["devices"] = victim["spec"]["devices"][:1]
        kube.update(dict(victim, kind="ResourceSlice", apiVersion="resource.k8s.io/v1"))
        fleet.write_text(fleet_yaml(name, a100=1, l4=1))
        assert main(["driver", "sim", "--kubeconfig", str(kc), "-c", str(fleet)]) == 0
        after = fleet_slices(kube, name)
        assert not [s for s in after.values() if s["spec"]["nodeName"] == f"{name}-a100-1"]
        restored = after[victim["metadata"]["name"]]
        assert restored["spec"]["pool"]["generation"] == 2
        assert len(restored["spec"]["devices"]) == len(slices[victim["metadata"]["name"]]["spec"]["devices"])
    finally:
        for n in kube.list("Node"):
            if n["metadata"]["name"].startswith(name):
                kube.delete("Node", n["metadata"]["name"], missing_ok=True)
        for s in fleet_slices(kube, name):
            kube.delete("ResourceSlice", s, missing_ok=True)


@SHARED_NAMES
def test_crds_install_and_accept_kdra_objects(admin: Client) -> None:
    for f in sorted((DEPLOY / "crds").glob("*.yaml")):
        apply(admin, f)

    def established() -> bool:
        crds = [admin.get("CustomResourceDefinition", f"{p}.kdra.dev") for p in ("podgroups", "queues")]
        return all(
            any(
                c["type"] == "Established" and c["status"] == "True"
                for c in (crd.get("status") or {}).get("conditions", [])
            )
            for crd in crds
        )

    wait_until(established, 60, "the CRDs to be established")
    q = f"team-{uuid.uuid4().hex[:5]}"
    queue = {
        "apiVersion": "kdra.dev/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": q},
        "spec": {"priority": 100, "resources": {"deviceclass/gpu.nvidia.com": {"quota": 16, "limit": 64}}},
    }
    wait_until(lambda: admin.create(queue), 30, "a Queue to be accepted")
    pg = {
        "apiVersion": "kdra.dev/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "gang", "namespace": "default"},
        "spec": {
            "minMember": 4,
            "queue": q,
            "topologyConstraint": {"requiredTopologyLevel": "kdra.dev/rack"},
        },
    }
    pg["spec"]["deviceConstraints"] = [
        {"requests": ["nic"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}
    ]
    admin.create(pg)
    got = admin.get("PodGroup", "gang", "default")
    assert got["spec"]["topologyConstraint"] == {"requiredTopologyLevel": "kdra.dev/rack"}
    assert got["spec"]["deviceConstraints"] == pg["spec"]["deviceConstraints"]
    admin.delete("PodGroup", "gang", "default", missing_ok=True)
    bad = {**pg, "metadata": {"name": "bad-gang", "namespace": "default"}}
    bad["spec"] = {
        "minMember": 2,
        "deviceConstraints": [{"matchAttribute": "a.io/x", "distinctAttribute": "a.io/y"}],
    }
    with pytest.raises(StoreError) as info:
        admin.create(bad)
    assert 'exactly one of "matchAttribute" or "distinctAttribute" is required' in str(info.value)
    admin.delete("Queue", q, missing_ok=True)


@pytest.mark.e2e_lane(name="kdra-scheduler")
def test_scheduler_runs_with_least_privilege_rbac(
    control_plane: ControlPlane, kube: KubeClient, admin: Client, namespace: str, tmp_path: Path
) -> None:
    apply(admin, DEPLOY / "rbac" / "scheduler.yaml")
    kc = sa_kubeconfig(control_plane, admin, "kdra-scheduler", tmp_path / "sched.kubeconfig")
    prefix = f"rb-{uuid.uuid4().hex[:5]}"
    from .kubeutil import DeviceFleet

    fleet = DeviceFleet(kube, prefix, nodes=2, devices=2).create()
    try:
        kube.create(claim_template("one", namespace, fleet.device_class))
        restricted = ControlPlane(control_plane.bin_dir, control_plane.work_dir)
        restricted.kubeconfig = kc
        # One pod more than there are devices: binding, claim status, condition and Event all exercised.
        with kdra_scheduler(restricted, tmp_path / "kdra.log", "--leader-elect") as proc:
            create_pods(kube, [template_pod(f"p{i}", namespace, "one") for i in range(5)], workers=2)
            try:
                wait_until(lambda: len(bound_pods(kube, namespace)) == 4, 60, "4 pods bound")
                wait_until(
                    lambda: any(e.get("reason") == "FailedScheduling" for e in kube.list("Event", namespace)),
                    60,
                    "the FailedScheduling event",
                )
            except TimeoutError:
                raise AssertionError(proc.log()) from None
            assert "forbidden" not in proc.log().lower(), proc.log()
            lease = kube.get("Lease", "kdra", "kube-system")
            assert lease["spec"]["holderIdentity"]
    finally:
        fleet.delete()


@SHARED_NAMES
def test_explain_export_and_allocate_read_the_live_cluster(
    control_plane: ControlPlane, kube: KubeClient, namespace: str, tmp_path: Path, capsys: Any
) -> None:
    suffix = uuid.uuid4().hex[:5]
    driver = f"gpu-{suffix}.example.com"
    cls = f"gpu-{suffix}"
    nodes = [f"ex-{suffix}-{i}" for i in range(2)]
    kube.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": cls},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
        }
    )
    for n in nodes:
        create_node(kube, n)
        kube.create(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{n}-gpu"},
                "spec": {
                    "driver": driver,
                    "nodeName": n,
                    "pool": {"name": n, "generation": 1, "resourceSliceCount": 1},
                    "devices": [
                        {"name": f"gpu-{i}", "attributes": {"model": {"string": "A100"}}} for i in range(2)
                    ],
                },
            }
        )
    tmpl = claim_template("h100", namespace, cls)
    tmpl["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [
        {"cel": {"expression": f'device.attributes["{driver}"].model == "H100"'}}
    ]
    kube.create(tmpl)
    # Nobody schedules this pod; kube-controller-manager still creates its claim.
    kube.create(template_pod("wants-h100", namespace, "h100", scheduler="nobody"))
    wait_until(
        lambda: kube.get("Pod", "wants-h100", namespace).get("status", {}).get("resourceClaimStatuses"),
        60,
        "the pod's claim",
    )
    kc = str(control_plane.kubeconfig)
    try:
        capsys.readouterr()
        assert main(["explain", "wants-h100", "-n", namespace, "--kubeconfig", kc]) == 1
        text = capsys.readouterr().out
        assert "fits on 0 of" in text
        # grouped by reason: the two nodes with the class's devices fail the H100 selector
        assert "2 fail selector #0 of request" in text and "devices have A100" in text
        assert f"node {nodes[0]}: cannot allocate all claims" in text
        assert "H100" in text and "A100" in text  # the selector and the value that failed it
        assert main(["explain", "wants-h100", "-n", namespace, "--kubeconfig", kc, "-o", "json"]) == 1
        data = json.loads(capsys.readouterr().out)
        per_node = {n["node"]: n for n in data["nodes"]}
        assert not per_node[nodes[0]]["fits"] and per_node[nodes[0]]["details"]["requests"]
        assert per_node[nodes[0]]["reason"].startswith("fail selector #0 of request")
        assert data["summary"]["nodes"] == len(data["nodes"])

        out = tmp_path / "cluster.yaml"
        assert main(["export", "--kubeconfig", kc, "--output-file", str(out)]) == 0
        kinds = {d["kind"] for d in yaml.safe_load_all(out.read_text()) if d}
        assert {
            "Node",
            "DeviceClass",
            "ResourceSlice",
            "ResourceClaim",
            "ResourceClaimTemplate",
            "Pod",
        } <= kinds
        capsys.readouterr()
        # The same verdict offline from the file and online from the cluster (exit 1: does not fit), for
        # this namespace: the export holds every test's objects on the shared control plane, among them
        # claims made to fail with an allocation error (exit 3 for the whole run, as documented).
        assert main(["allocate", "-f", str(out), "-n", namespace, "-o", "json"]) == 1
        offline = capsys.readouterr()
        assert main(["allocate", "--kubeconfig", kc, "-n", namespace, "-o", "json"]) == 1
        online = capsys.readouterr()
        assert "wants-h100" in offline.err and "wants-h100" in online.err
        assert "H100" in offline.err
    finally:
        for n in nodes:
            kube.delete("ResourceSlice", f"{n}-gpu", missing_ok=True)
            kube.delete("Node", n, missing_ok=True)
        kube.delete("DeviceClass", cls, missing_ok=True)


@SHARED_NAMES
def test_driver_sim_watch_restores_a_deleted_slice(
    control_plane: ControlPlane, kube: KubeClient, tmp_path: Path
) -> None:
    from .kubeutil import KdraProcess

    name = f"fw{uuid.uuid4().hex[:5]}"
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(fleet_yaml(name, a100=1, l4=1))
    proc = KdraProcess(
        control_plane, ["driver", "sim", "-c", str(fleet), "--watch", "--interval", "1"], tmp_path / "d.log"
    )
    try:
        wait_until(lambda: len(fleet_slices(kube, name)) >= 2, 60, "the fleet's slices")
        before = fleet_slices(kube, name)
        victim = sorted(before)[0]
        kube.delete("ResourceSlice", victim, missing_ok=True)
        wait_until(lambda: victim in fleet_slices(kube, name), 30, "the deleted slice back")
        back = fleet_slices(kube, name)[victim]
        assert back["spec"]["pool"]["generation"] == before[victim]["spec"]["pool"]["generation"] + 1
        assert proc.running(), proc.log()
    finally:
        proc.stop()
        for n in kube.list("Node"):
            if n["metadata"]["name"].startswith(name):
                kube.delete("Node", n["metadata"]["name"], missing_ok=True)
        for s in fleet_slices(kube, name):
            kube.delete("ResourceSlice", s, missing_ok=True)
