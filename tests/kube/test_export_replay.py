"""A `kdra export` file replays offline: `kdra simulate -c EXPORT --workload EXPORT` uses the export's Nodes,
DeviceClasses and ResourceSlices as the cluster and its pods (unbound again) as the workload."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kdra.api.exportfile import is_export, load_exported_cluster, replayable_workload
from kdra.api.load import dump_yaml
from kdra.cli.main import main
from kdra.fleets import load_fleet, render


def exported_cluster() -> list[dict[str, Any]]:
    """What `kdra export` writes for a small cluster: objects as served, with server fields, a bound pod
    whose template claim is allocated, and a pending pod."""
    objs = json.loads(json.dumps(render(load_fleet("mixed"))))  # unshared copies
    objs = [
        o for o in objs if o["kind"] != "Node" or o["metadata"]["name"].startswith(("h100", "a100", "l4"))
    ]
    names = {o["metadata"]["name"] for o in objs if o["kind"] == "Node"}
    objs = [o for o in objs if o["kind"] != "ResourceSlice" or o["spec"].get("nodeName") in names]
    for o in objs:
        o["metadata"].update(uid=f"uid-{o['metadata']['name']}", resourceVersion="17")
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team", "uid": "ns-uid"}}
    tmpl = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu", "namespace": "team", "uid": "t-uid", "resourceVersion": "5"},
        "spec": {
            "spec": {
                "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}
            }
        },
    }

    def pod(name: str, node: str | None) -> dict[str, Any]:
        p: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "team", "uid": f"uid-{name}", "resourceVersion": "9"},
            "spec": {
                "containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}],
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
            },
            "status": {"phase": "Pending"},
        }
        if node:
            p["spec"]["nodeName"] = node
            p["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": f"{name}-gpu-abcde"}]
        return p

    node = sorted(names)[0]
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": "running-gpu-abcde",
            "namespace": "team",
            "annotations": {"resource.kubernetes.io/pod-claim-name": "gpu"},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": "running",
                    "uid": "uid-running",
                    "controller": True,
                }
            ],
        },
        "spec": tmpl["spec"]["spec"],
        "status": {
            "allocation": {"devices": {"results": []}},
            "reservedFor": [{"resource": "pods", "name": "running", "uid": "uid-running"}],
        },
    }
    return [ns, *objs, tmpl, claim, pod("running", node), pod("pending", None)]


def test_replayable_workload_unbinds_pods_and_drops_generated_claims() -> None:
    objs = exported_cluster()
    assert is_export(objs)
    wl = replayable_workload(objs)
    kinds = [o["kind"] for o in wl]
    assert kinds == ["Namespace", "ResourceClaimTemplate", "Pod", "Pod"]
    assert all("nodeName" not in o.get("spec", {}) and "status" not in o for o in wl)
    assert all("uid" not in o["metadata"] for o in wl)
    # A Fleet or plain workload passes through untouched.
    plain = [o for o in objs if o["kind"] == "Pod"]
    assert replayable_workload(plain) is plain


def test_simulate_accepts_an_export(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(dump_yaml(exported_cluster()))
    name, cluster = load_exported_cluster(str(path)) or ("", [])
    assert name == "cluster"
    assert {o["kind"] for o in cluster} == {"DeviceClass", "Node", "ResourceSlice"}
    assert main(["simulate", "-c", str(path), "--workload", str(path), "-o", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert list(report["modes"]) == ["dra"]  # no device-plugin view of a live cluster
    assert report["modes"]["dra"]["metrics"]["pods_scheduled"] == 2
