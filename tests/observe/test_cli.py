"""`kdra exporter` and `kdra top` from the command line."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from kdra.cli.main import main
from kdra.observe.exposition import parse_text
from support.controlplane import free_port

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "queues" / "gang-queues.yaml")


def test_exporter_usage_errors(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert main(["exporter", "--from-simulation", "--listen", "nowhere"]) == 2
    assert "--listen: Invalid value: 'nowhere'" in capsys.readouterr().err
    assert main(["exporter", "--from-simulation", "--speed", "-1"]) == 2
    # Without --from-simulation it reads a cluster found as kubectl finds one; here there is none.
    for var in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    capsys.readouterr()
    assert main(["exporter", "--once"]) == 2
    assert "no Kubernetes configuration: give --kubeconfig FILE" in capsys.readouterr().err


def test_exporter_once_from_a_simulation_with_queues(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    assert main(["exporter", "--from-simulation", "--workload", EXAMPLE, "--once"]) == 0
    text = capsysbinary.readouterr().out.decode()
    names = {n for n, _lb, _v in parse_text(text)}
    assert {"kdra_queue_deserved", "kdra_queue_fair_share", "kdra_pending_pods", "kdra_fleet_gpus"} <= names
    assert "kdra_scheduler_attempt_duration_seconds_count" in names


def test_exporter_serves_a_running_simulation(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [
            *(
                sys.executable,
                "-m",
                "kdra.cli.main",
                "exporter",
                "--from-simulation",
                "--workload",
                "mixed-day",
            ),
            # A simulated day over ~40 s of wall time: still running while it is scraped, however slow
            # the machine (at 20,000x it ended within seconds, before three changes were seen under load).
            *("--speed", "2000", "--listen", f"127.0.0.1:{port}"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        seen: set[float] = set()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(seen) < 3:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    text = r.read().decode()
            except OSError:
                time.sleep(0.2)
                continue
            equiv = sum(v for n, _lb, v in parse_text(text) if n == "kdra_fleet_gpu_equivalents_allocated")
            seen.add(round(equiv, 3))
            time.sleep(0.2)
        assert len(seen) >= 3, f"the fleet never changed while scraped: {seen}"
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=15)
    assert b"serving http://127.0.0.1" in err


def _objects() -> list[dict[str, object]]:
    return [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}},
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "n1-gpu"},
            "spec": {
                "driver": "gpu.nvidia.com",
                "nodeName": "n1",
                "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {
                        "name": f"gpu-{i}",
                        "attributes": {"productName": {"string": "NVIDIA L4"}},
                        "capacity": {"memory": {"value": "24Gi"}},
                        "allowMultipleAllocations": i == 1,
                    }
                    for i in range(3)
                ],
            },
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "whole", "namespace": "ml"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"}
                        ]
                    }
                },
                "reservedFor": [{"resource": "pods", "name": "trainer", "uid": "u1"}],
            },
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "slice", "namespace": "ml"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {
                                "request": "gpu",
                                "driver": "gpu.nvidia.com",
                                "pool": "n1",
                                "device": "gpu-1",
                                "shareID": "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",
                                "consumedCapacity": {"memory": "6Gi"},
                            }
                        ]
                    }
                },
                "reservedFor": [{"resource": "pods", "name": "server", "uid": "u2"}],
            },
        },
    ]


def test_top_reads_objects_and_a_saved_scrape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    objs = tmp_path / "cluster.yaml"
    objs.write_text(yaml.safe_dump_all(_objects()))
    assert main(["top", "-f", str(objs)]) == 0
    out = capsys.readouterr().out
    assert "1 nodes, 2/3 devices allocated" in out
    assert "ml/whole" in out and "trainer" in out
    assert "ml/slice" in out and "25%" in out  # 6Gi of 24Gi
    # the same view from the exporter's text
    from kdra.observe.top import state_from_objects

    scrape = tmp_path / "metrics.txt"
    scrape.write_bytes(state_from_objects(_objects()).render())
    assert main(["top", "-f", str(scrape)]) == 0
    assert capsys.readouterr().out == out
    assert main(["top", "-f", str(tmp_path / "missing.yaml")]) == 2
