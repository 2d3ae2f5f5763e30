"""The real kube-apiserver (1.36, built by hack/k8s/build.sh) accepts what `kdra cluster render` and
`kdra driver nvml` print: `kubectl apply --server-side` of the bundled mixed fleet and of NVML fixtures.
Marked e2e: runs with `pytest -m e2e -p no:xdist tests/fleets`."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
FIXTURES = Path(__file__).parent.parent / "drivers" / "fixtures"


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl not installed")
    from kdra.testing.controlplane import ControlPlane, ensure_binaries

    cp = ControlPlane(ensure_binaries(sys.stderr), tmp_path_factory.mktemp("fleet-cp"))
    cp.start()
    try:
        yield cp.kubeconfig
    finally:
        cp.stop()


def _kdra(*args: str) -> str:
    return subprocess.run(
        [sys.executable, "-m", "kdra.cli.main", *args], capture_output=True, text=True, check=True
    ).stdout


def _apply(kubeconfig: Path, text: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    f = tmp_path / "objs.yaml"
    f.write_text(text)
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), "apply", "--server-side", "-f", str(f)],
        capture_output=True,
        text=True,
    )


def test_mixed_fleet_is_accepted(kubeconfig: Path, tmp_path: Path) -> None:
    r = _apply(kubeconfig, _kdra("cluster", "render", "-f", "mixed", "--legacy"), tmp_path)
    assert r.returncode == 0, r.stderr
    got = subprocess.run(
        [
            "kubectl",
            "--kubeconfig",
            str(kubeconfig),
            "get",
            "resourceslice",
            "a100-0-gpu.nvidia.com-counters",
            "-o",
            "jsonpath={.spec.sharedCounters[*].name}",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert got.split() == [f"gpu-{i}-counter-set" for i in range(8)]  # not dropped: the gate is on


@pytest.mark.parametrize("fixture", ["nvml-h100x4-synthetic.json", "nvml-l4x2-synthetic.json"])
def test_nvml_slices_are_accepted(kubeconfig: Path, tmp_path: Path, fixture: str) -> None:
    text = _kdra(
        "driver", "nvml", "--dynamic-mig", "--consumable-shares", "4", "--fixture", str(FIXTURES / fixture)
    )
    r = _apply(kubeconfig, text, tmp_path)
    assert r.returncode == 0, r.stderr
