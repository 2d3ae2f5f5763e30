"""`kdra scheduler` against the real control plane: kube-controller-manager creates the claims from
templates, kdra allocates, writes claim status with the finalizer, and binds through pods/binding."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kdra.kube.client import KubeClient
from support.controlplane import ControlPlane

from .kubeutil import (
    DeviceFleet,
    allocated_devices,
    bound_pods,
    claim_template,
    create_pods,
    kdra_scheduler,
    template_pod,
    wait_until,
)

pytestmark = [pytest.mark.e2e, pytest.mark.e2e_lane(name="kdra-scheduler")]

FINALIZER = "resource.kubernetes.io/delete-protection"


@pytest.fixture
def fleet(kube: KubeClient) -> Iterator[DeviceFleet]:
    f = DeviceFleet(kube, f"ks-{uuid.uuid4().hex[:5]}", nodes=20, devices=4).create()
    yield f
    f.delete()


def test_kdra_binds_template_pods_with_distinct_devices(
    control_plane: ControlPlane, kube: KubeClient, namespace: str, fleet: DeviceFleet, tmp_path: Path
) -> None:
    kube.create(claim_template("one-dev", namespace, fleet.device_class))
    pods = [template_pod(f"p{i:02d}", namespace, "one-dev") for i in range(50)]
    # A pod for another scheduler is not kdra's (nobody schedules it here).
    pods.append(template_pod("other", namespace, "one-dev", scheduler="other-scheduler"))
    # A gated pod (as Kueue holds them) is not tried until its gate goes: created first, so that it would
    # be among the first bound if kdra ignored the gate.
    gated = template_pod("gated", namespace, "one-dev")
    gated["spec"]["schedulingGates"] = [{"name": "example.com/admission"}]
    pods.insert(0, gated)
    with kdra_scheduler(control_plane, tmp_path / "kdra.log") as proc:
        create_pods(kube, pods)
        try:
            wait_until(lambda: len(bound_pods(kube, namespace)) == 50, 120, "50 pods bound")
        except TimeoutError:
            raise AssertionError(proc.log()) from None
        assert proc.running(), proc.log()
        assert "gated" not in bound_pods(kube, namespace)
        # Not tried at all: no devices held for it (the API server would refuse its binding anyway).
        held = [d for d in allocated_devices(kube, namespace) if d[0].split("/", 1)[1].startswith("gated-")]
        assert held == [], held
        kube.patch("Pod", "gated", {"spec": {"schedulingGates": None}}, namespace)
        wait_until(lambda: "gated" in bound_pods(kube, namespace), 60, "the pod bound once its gate went")
    bound = bound_pods(kube, namespace)
    assert "other" not in bound
    assert set(bound.values()) <= set(fleet.node_names)
    devices = allocated_devices(kube, namespace)
    assert len(devices) == 51
    assert len({d[1:] for d in devices}) == 51, "a device was allocated twice"
    for c in kube.list("ResourceClaim", namespace):
        if c["metadata"]["ownerReferences"][0]["name"] == "other":
            assert not c.get("status", {}).get("allocation")
            continue
        assert FINALIZER in c["metadata"].get("finalizers", [])
        owner = c["metadata"]["ownerReferences"][0]["name"]
        rf = c["status"]["reservedFor"]
        assert [r["name"] for r in rf] == [owner]
        # The claim's devices are on the node its pod is bound to.
        pool = c["status"]["allocation"]["devices"]["results"][0]["pool"]
        assert pool == bound[owner]
        assert c["status"]["allocation"]["nodeSelector"]
    scheduled = [e for e in kube.list("Event", namespace) if e.get("reason") == "Scheduled"]
    assert sorted(e["involvedObject"]["name"] for e in scheduled) == sorted(bound)
    assert all(e["source"]["component"] == "kdra" and e["type"] == "Normal" for e in scheduled)
    for p in kube.list("Pod", namespace):
        if p["metadata"]["name"] == "other":
            continue
        cond = next(c for c in p["status"]["conditions"] if c["type"] == "PodScheduled")
        assert cond["status"] == "True"


def test_unschedulable_pod_gets_condition_and_event_with_explanation(
    control_plane: ControlPlane, kube: KubeClient, namespace: str, fleet: DeviceFleet, tmp_path: Path
) -> None:
    # Five devices on one claim: no node has more than four.
    kube.create(claim_template("five", namespace, fleet.device_class, count=5))
    with kdra_scheduler(control_plane, tmp_path / "kdra.log") as proc:
        kube.create(template_pod("too-big", namespace, "five"))

        def condition() -> dict | None:
            p = kube.get("Pod", "too-big", namespace)
            return next(
                (
                    c
                    for c in (p.get("status") or {}).get("conditions") or []
                    if c["type"] == "PodScheduled" and c["status"] == "False"
                ),
                None,
            )

        try:
            wait_until(condition, 60, "PodScheduled=False on too-big")
            wait_until(
                lambda: any(e.get("reason") == "FailedScheduling" for e in kube.list("Event", namespace)),
                30,
                "a FailedScheduling event",
            )
        except TimeoutError:
            raise AssertionError(proc.log()) from None
    cond = condition()
    assert cond is not None
    assert cond["reason"] == "Unschedulable"
    assert "cannot allocate all claims" in cond["message"]
    # kdra's explanation: which request and how many devices it could not get.
    assert "node " in cond["message"] and "dev" in cond["message"]
    # kube-scheduler's line first, then the nodes grouped by reason (allocator.summary), then the nearest.
    lines = cond["message"].splitlines()
    assert lines[0].startswith("0/") and "nodes are available" in lines[0]
    assert lines[1].startswith("0/") and " nodes: " in lines[1] and "have fewer than 5" in lines[1]
    assert any(line.startswith("nearest") for line in lines)
    ev = next(e for e in kube.list("Event", namespace) if e.get("reason") == "FailedScheduling")
    assert ev["involvedObject"]["name"] == "too-big"
    assert ev["source"]["component"] == "kdra"
    assert "cannot allocate all claims" in ev["message"]
    assert len(ev["message"].encode()) <= 1024  # the API's limit, as kube-scheduler truncates
    assert not kube.get("Pod", "too-big", namespace)["spec"].get("nodeName")
