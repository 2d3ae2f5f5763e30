"""Explanations are the pod's own on a real control plane: pods, claims and gangs of one shape in two
namespaces share kdra's cached Filter answers, yet each pod's PodScheduled message, its FailedScheduling
Events and its gang's condition name only its own claims and namespace (kdra.scheduler.owntext), checked by
the independent checker's "explanations name only the pod's own objects"."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from kdra.kube.client import KubeClient
from support.controlplane import ControlPlane, ensure_default_service_account
from support.invariants import check_cluster

from .sessionutil import (
    cleanup,
    condition,
    create_all,
    events_for,
    gpu_fleet,
    gpu_pod,
    gpu_template,
    pod_group,
    scheduled_message,
    session_scheduler,
    wait,
)

# kdra scheduler under the default scheduler name: one such test at a time (hack/e2e.sh lanes).
pytestmark = [pytest.mark.e2e, pytest.mark.e2e_lane(name="kdra-scheduler")]

H100 = "H100-SXM-80GB"


def huge_claim(namespace: str) -> dict[str, object]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "huge-dev", "namespace": namespace},
        "spec": {
            "devices": {
                "requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 100}}]
            }
        },
    }


def test_pods_of_one_shape_in_two_namespaces_are_explained_with_their_own_claims(
    control_plane: ControlPlane, kube: KubeClient, kdra_crds: list[str], namespace: str, tmp_path: Path
) -> None:
    other = f"e2e-{uuid.uuid4().hex[:8]}"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}})
    ensure_default_service_account(kube, other)
    spaces = (namespace, other)
    with gpu_fleet(kube, [{"name": "a", "count": 1, "accelerator": {"model": H100, "count": 8}}]) as fleet:
        proc = session_scheduler(control_plane, tmp_path / "kdra.log")
        try:
            for ns in spaces:
                kube.create(gpu_template("nine", ns, 9))
                kube.create(huge_claim(ns))
                kube.create(pod_group("g", ns, 2))
                huge = gpu_pod("huge", ns, "nine", fleet.prefix)
                huge["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "huge-dev"}]
                create_all(
                    kube,
                    [
                        gpu_pod("big", ns, "nine", fleet.prefix),
                        huge,
                        *(gpu_pod(f"g-{k}", ns, "nine", fleet.prefix, group="g") for k in range(2)),
                    ],
                )

            def explained() -> bool:
                for ns in spaces:
                    for pod in ("big", "huge", "g-0", "g-1"):
                        said = scheduled_message(kube, ns, pod)
                        # a member is explained with the gang's verdict only (never its own attempt's
                        # text first: a retry when another test's node arrives must not flip it)
                        if not said or (pod.startswith("g-") and "fits nowhere" not in said):
                            return False
                        if not any(
                            e["reason"] == "FailedScheduling" for e in events_for(kube, ns, pod, "Pod")
                        ):
                            return False
                    if condition(kube.get("PodGroup", "g", ns), "PodGroupScheduled").get("status") != "False":
                        return False
                return True

            wait(explained, 60, "every pod and gang explained in both namespaces", log=proc.log)
            for ns in spaces:
                claims = {c["metadata"]["name"] for c in kube.list("ResourceClaim", ns)}
                big_claim = next(c for c in claims if c.startswith("big-"))
                assert f"claim {ns}/{big_claim}" in scheduled_message(kube, ns, "big")
                huge = scheduled_message(kube, ns, "huge")
                assert f"claim {ns}/huge-dev, request g: adding 100 devices exceeds the claim limit" in huge
                member = scheduled_message(kube, ns, "g-0")
                assert "fits nowhere" in member and f"claim {ns}/g-" in member, member
                problems = [v for v in check_cluster(kube, ns) if v.rule == "foreign-name"]
                assert not problems, [str(p) for p in problems]
        finally:
            proc.stop()
            for ns in spaces:
                cleanup(kube, ns)
            kube.delete("Namespace", other, missing_ok=True)
