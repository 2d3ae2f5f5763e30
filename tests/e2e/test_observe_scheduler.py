"""`kdra scheduler --kubeconfig --metrics-listen`: the exporter's metrics served from the scheduler itself,
with the per-attempt latency histogram that only the scheduler can measure."""

from __future__ import annotations

import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kdra.kube.client import KubeClient
from kdra.observe.exposition import parse_text
from support.controlplane import ControlPlane, free_port

from .kubeutil import DeviceFleet, claim_template, kdra_scheduler, template_pod, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.e2e_lane(name="kdra-scheduler")]


@pytest.fixture
def small_fleet(kube: KubeClient) -> Iterator[DeviceFleet]:
    fleet = DeviceFleet(kube, f"obs-{uuid.uuid4().hex[:6]}", nodes=2, devices=2).create()
    yield fleet
    fleet.delete()


def scrape(port: int) -> list[tuple[str, dict[str, str], float]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return list(parse_text(r.read().decode()))


def test_scheduler_serves_attempt_latency_and_claim_metrics(
    kube: KubeClient, namespace: str, small_fleet: DeviceFleet, control_plane: ControlPlane, tmp_path: Path
) -> None:
    ns, name, port = namespace, f"kdra-obs-{uuid.uuid4().hex[:6]}", free_port()
    kube.create(claim_template("one", ns, small_fleet.device_class))
    kube.create(claim_template("five", ns, small_fleet.device_class, count=5))  # 4 devices exist
    with kdra_scheduler(
        control_plane,
        tmp_path / "scheduler.log",
        "--scheduler-name",
        name,
        "--metrics-listen",
        f"127.0.0.1:{port}",
    ) as proc:
        for i in range(3):
            kube.create(template_pod(f"p{i}", ns, "one", scheduler=name))
        kube.create(template_pod("greedy", ns, "five", scheduler=name))

        def done() -> bool:
            assert proc.running(), proc.log()
            samples = scrape(port)
            info = [lb for n, lb, _v in samples if n == "kdra_claim_device_info" and lb["namespace"] == ns]
            attempts = {
                lb["result"]: v
                for n, lb, v in samples
                if n == "kdra_scheduler_attempt_duration_seconds_count"
            }
            pending = [
                v
                for n, lb, v in samples
                if n == "kdra_pending_pods" and lb == {"namespace": ns, "reason": "Unschedulable"}
            ]
            return (
                len(info) == 3
                and all(lb["pod"].startswith("p") for lb in info)
                and attempts.get("scheduled", 0) >= 3
                and attempts.get("unschedulable", 0) >= 1
                and pending == [1]
            )

        wait_until(done, 90, "the scheduler's metrics to show 3 allocated devices and the greedy pod")
        samples = scrape(port)
        allocated = sum(
            v
            for n, lb, v in samples
            if n == "kdra_fleet_devices_allocated" and lb["node"] in small_fleet.node_names
        )
        assert allocated == 3
