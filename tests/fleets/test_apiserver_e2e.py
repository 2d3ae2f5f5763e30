"""The real kube-apiserver (1.36, built by hack/k8s/build.sh) accepts what `kdra cluster render` and
`kdra driver nvml` print, applied the way `kubectl apply --server-side` applies it (a PATCH of type
application/apply-patch+yaml per object, with a field manager), so the test needs no kubectl binary.
Marked e2e: runs in `make e2e`."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kdra.api.load import load_text

pytestmark = pytest.mark.e2e
FIXTURES = Path(__file__).parent.parent / "drivers" / "fixtures"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from support.controlplane import ControlPlane, ensure_binaries

    cp = ControlPlane(ensure_binaries(sys.stderr), tmp_path_factory.mktemp("fleet-cp"))
    cp.start()
    try:
        yield cp.client()
    finally:
        cp.stop()


def _kdra(*args: str) -> str:
    return subprocess.run(
        [sys.executable, "-m", "kdra.cli.main", *args], capture_output=True, text=True, check=True
    ).stdout


def _apply_server_side(client: Any, text: str) -> int:
    """Server-side apply of every object; raises StoreError naming the object when the server refuses."""
    from kdra.kube.resources import resource_path

    objs = load_text(text, "kdra output")
    for obj in objs:
        md = obj["metadata"]
        path = resource_path(obj["kind"], md.get("namespace"), md["name"], api_version=obj["apiVersion"])
        client.request(
            "PATCH",
            path,
            obj,
            params={"fieldManager": "kdra-e2e", "force": "true"},
            content_type="application/apply-patch+yaml",
        )
    return len(objs)


def test_mixed_fleet_is_accepted(client: Any) -> None:
    applied = _apply_server_side(client, _kdra("cluster", "render", "-c", "mixed", "--legacy"))
    assert applied > 36  # nodes, slices and classes
    got = client.get("ResourceSlice", "a100-0-gpu.nvidia.com-counters")
    # Not dropped by the server: the partitionable-devices gate is on in 1.36.
    assert [s["name"] for s in got["spec"]["sharedCounters"]] == [f"gpu-{i}-counter-set" for i in range(8)]
    node = client.get("Node", "a100-0")
    assert node["metadata"]["labels"]


@pytest.mark.parametrize("fixture", ["nvml-h100x4-synthetic.json", "nvml-l4x2-synthetic.json"])
def test_nvml_slices_are_accepted(client: Any, fixture: str) -> None:
    text = _kdra(
        "driver", "nvml", "--dynamic-mig", "--consumable-shares", "4", "--fixture", str(FIXTURES / fixture)
    )
    assert _apply_server_side(client, text) > 0
