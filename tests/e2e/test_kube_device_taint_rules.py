"""A DeviceTaintRule keeps `kdra scheduler` off the devices it selects, as it keeps kube-scheduler off
them (its ResourceSlice tracker adds the rule's taint to the devices; DRADeviceTaintRules is GA in 1.37,
and in the 1.36 plane the fixture turns it on): a pod whose claim tolerates the taint may still get one,
and deleting the rule frees the devices again for the pods that wait."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kdra.kube.client import KubeClient
from support.controlplane import ControlPlane, force_delete

from .kubeutil import (
    DeviceFleet,
    allocated_devices,
    bound_pods,
    claim_template,
    kdra_scheduler,
    template_pod,
    wait_until,
)

# kube-scheduler must apply DeviceTaintRules, so it runs with the plane's own gates (plane_gates): the
# kube-scheduler lane keeps it apart from the corpus, whose cases restart kube-scheduler with theirs (most
# turn DRADeviceTaints off, and then kube-scheduler binds kube-plain to a tainted device). kdra runs under
# a scheduler name of its own, so that it does not take the kdra-scheduler lane's pods, nor they its own.
pytestmark = [pytest.mark.e2e, pytest.mark.e2e_lane(name="kube-scheduler")]


@pytest.fixture
def fleet(kube: KubeClient) -> Iterator[DeviceFleet]:
    f = DeviceFleet(kube, f"dtr-{uuid.uuid4().hex[:5]}", nodes=1, devices=2, kubelet=False).create()
    yield f
    f.delete()


def unschedulable(kube: KubeClient, namespace: str, name: str) -> bool:
    pod = kube.get("Pod", name, namespace)
    return any(
        c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def devices_of(kube: KubeClient, namespace: str, pod: str) -> list[str]:
    return [
        dev
        for claim, _, _, dev in allocated_devices(kube, namespace)
        if claim.startswith(f"{namespace}/{pod}-")
    ]


@pytest.mark.usefixtures("plane_gates")
def test_a_device_taint_rule_keeps_kdra_off_its_devices_like_kube_scheduler_until_it_is_deleted(
    control_plane: ControlPlane, kube: KubeClient, namespace: str, fleet: DeviceFleet, tmp_path: Path
) -> None:
    node = fleet.node_names[0]
    kdra = f"{fleet.prefix}-kdra"
    rule: dict[str, Any] = {
        "apiVersion": control_plane.release.device_taint_rule_api,
        "kind": "DeviceTaintRule",
        "metadata": {"name": f"{fleet.prefix}-maintenance"},
        # Every device of the node's pool: no selector field for the device.
        "spec": {
            "deviceSelector": {"driver": fleet.driver, "pool": node},
            "taint": {"key": "example.com/maintenance", "effect": "NoSchedule"},
        },
    }
    kube.create(rule)
    kube.create(claim_template("one", namespace, fleet.device_class))
    tolerant = claim_template("tolerant", namespace, fleet.device_class)
    tolerant["spec"]["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = [
        {"key": "example.com/maintenance", "operator": "Exists", "effect": "NoSchedule"}
    ]
    kube.create(tolerant)
    try:
        with kdra_scheduler(control_plane, tmp_path / "kdra.log", "--scheduler-name", kdra) as proc:
            wait_until(lambda: "serving schedulerName" in proc.log(), 60, "kdra to start")
            kube.create(template_pod("kdra-plain", namespace, "one", scheduler=kdra))
            try:
                # Both schedulers find no device for a claim that does not tolerate the taint (kube's pod
                # once kdra has answered: kube-scheduler applies a rule once its informer has it).
                wait_until(
                    lambda: unschedulable(kube, namespace, "kdra-plain"), 60, "kdra-plain Unschedulable"
                )
                kube.create(template_pod("kube-plain", namespace, "one", scheduler="default-scheduler"))
                wait_until(
                    lambda: unschedulable(kube, namespace, "kube-plain"), 60, "kube-plain Unschedulable"
                )
                assert bound_pods(kube, namespace) == {}
                # A claim that tolerates it gets a tainted device.
                kube.create(template_pod("kdra-tolerant", namespace, "tolerant", scheduler=kdra))
                wait_until(lambda: "kdra-tolerant" in bound_pods(kube, namespace), 60, "kdra-tolerant bound")
                assert len(devices_of(kube, namespace, "kdra-tolerant")) == 1
                # kube-scheduler's pod goes, so that the freed device is kdra's alone to take.
                force_delete(kube, "Pod", "kube-plain", namespace)
                kube.delete("DeviceTaintRule", rule["metadata"]["name"])
                wait_until(lambda: "kdra-plain" in bound_pods(kube, namespace), 60, "kdra-plain bound")
            except TimeoutError as e:  # which wait, then what kdra said
                raise AssertionError(f"{e}\n{proc.log()}") from None
        taken = devices_of(kube, namespace, "kdra-tolerant") + devices_of(kube, namespace, "kdra-plain")
        assert sorted(taken) == ["dev-0", "dev-1"]
    finally:
        kube.delete("DeviceTaintRule", rule["metadata"]["name"], missing_ok=True)
