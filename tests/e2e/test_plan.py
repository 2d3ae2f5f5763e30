"""`kdra plan scale-up --kubeconfig` on the real control plane: pending gang, MIG and shared-claim pods that
the cluster cannot hold are planned for, the planned nodes are added with `kdra driver sim`, and kdra's
scheduler binds every pod; the independent checker finds nothing wrong."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kdra.cli.main import main
from kdra.kube.client import KubeClient
from support.controlplane import ControlPlane

from .sessionutil import (
    FLEET_LABEL,
    bound,
    cleanup,
    create_all,
    gpu_fleet,
    gpu_pod,
    gpu_template,
    pod_group,
    scheduled_message,
    session_scheduler,
    settled,
    wait,
)

# kdra scheduler under the default scheduler name: one such test at a time (hack/e2e.sh lanes).
pytestmark = [pytest.mark.e2e, pytest.mark.e2e_lane(name="kdra-scheduler")]

H100 = "H100-SXM-80GB"


def mig_template(namespace: str) -> dict[str, Any]:
    """A MIG device of at least 10Gi, else a whole GPU (firstAvailable)."""
    sel = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("10Gi")) >= 0'
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "mig", "namespace": namespace},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "firstAvailable": [
                                {
                                    "name": "mig",
                                    "deviceClassName": "mig.nvidia.com",
                                    "selectors": [{"cel": {"expression": sel}}],
                                },
                                {"name": "whole", "deviceClassName": "gpu.nvidia.com"},
                            ],
                        }
                    ]
                }
            }
        },
    }


def shared_pod(name: str, namespace: str, claim: str, fleet: str) -> dict[str, Any]:
    pod = gpu_pod(name, namespace, "unused", fleet)
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
    return pod


def node_types(prefix: str) -> dict[str, Any]:
    """One candidate type on the test's fleet (its label), named after it, as are the nodes the plan adds."""
    return {
        "apiVersion": "kdra.dev/v1alpha1",
        "kind": "Fleet",
        "metadata": {"name": f"{prefix}-types"},
        "spec": {
            "pools": [
                {
                    "name": f"{prefix}-h100",
                    "count": 0,
                    "maxCount": 2,
                    "price": 55.04,
                    "cpu": "64",
                    "memory": "512Gi",
                    "labels": {FLEET_LABEL: prefix},
                    "accelerator": {"model": H100, "count": 8, "mig": {"mode": "dynamic"}},
                }
            ]
        },
    }


def _run(capsys: Any, argv: list[str]) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(argv)
    return rc, capsys.readouterr().out


def test_plan_scale_up_adds_the_nodes_pending_gang_mig_and_shared_claim_pods_need_and_all_bind(
    control_plane: ControlPlane,
    kube: KubeClient,
    kdra_crds: list[str],
    namespace: str,
    tmp_path: Path,
    capsys: Any,
) -> None:
    added: list[str] = []
    with gpu_fleet(kube, [{"name": "a", "count": 1, "accelerator": {"model": H100, "count": 2}}]) as fleet:
        prefix = fleet.prefix
        kube.create(gpu_template("two", namespace, 2))
        kube.create(mig_template(namespace))
        kube.create(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": "shared", "namespace": namespace},
                "spec": {
                    "devices": {
                        "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]
                    }
                },
            }
        )
        kube.create(pod_group("train", namespace, 3))
        pods = [gpu_pod(f"train-{i}", namespace, "two", prefix, group="train") for i in range(3)]
        pods += [gpu_pod(f"mig-{i}", namespace, "mig", prefix) for i in range(3)]
        pods += [shared_pod(f"share-{i}", namespace, "shared", prefix) for i in range(2)]
        create_all(kube, pods)
        names = sorted(p["metadata"]["name"] for p in pods)
        proc = session_scheduler(control_plane, tmp_path / "kdra.log")
        try:
            # The gang (3 x 2 GPUs) cannot fit on the cluster's one 2-GPU node: it waits, all or nothing.
            wait(
                lambda: all("PodGroup" in scheduled_message(kube, namespace, f"train-{i}") for i in range(3)),
                60,
                "the gang's members to say why they wait",
                log=proc.log,
            )
            assert not any(n.startswith("train-") for n in bound(kube, namespace))
            types = tmp_path / "types.yaml"
            types.write_text(yaml.safe_dump(node_types(prefix)))
            kc = str(control_plane.kubeconfig)
            args = ["plan", "scale-up", "--kubeconfig", kc, "-n", namespace, "--node-types", str(types)]
            rc, out = _run(capsys, [*args, "-o", "json"])
            st = json.loads(out)["status"]
            assert rc == 0, st
            assert st["unschedulablePods"] == 0 and st["verifiedByScheduler"]
            pending = len(pods) - len(bound(kube, namespace))
            assert st["podsOnAddedNodes"] + st["podsOnClusterNodes"] >= pending
            added = [a["name"] for a in st["add"]]
            assert added and all(a.startswith(f"{prefix}-h100-new-") for a in added)
            planned = {p: a["name"] for a in st["add"] for p in a["pods"]}
            assert {f"{namespace}/train-{i}" for i in range(3)} <= set(planned)

            rc, out = _run(capsys, [*args, "-o", "fleet"])
            assert rc == 0
            fleet_file = tmp_path / "added.yaml"
            fleet_file.write_text(out)
            assert main(["driver", "sim", "--kubeconfig", kc, "-c", str(fleet_file)]) == 0

            def all_bound() -> dict[str, str] | None:
                b = bound(kube, namespace)
                return b if sorted(b) == names else None

            got = wait(
                all_bound,
                90,
                "every pod to bind on the cluster with the planned nodes",
                log=proc.log,
            )
            assert {got[f"train-{i}"] for i in range(3)} <= set(added)
            assert got["share-0"] == got["share-1"]
            assert not settled(kube, namespace)
        finally:
            proc.stop()
            cleanup(kube, namespace)
            for name in added:
                for s in kube.list("ResourceSlice"):
                    if s["spec"].get("nodeName") == name:
                        kube.delete("ResourceSlice", s["metadata"]["name"], missing_ok=True)
                kube.delete("Node", name, missing_ok=True)
