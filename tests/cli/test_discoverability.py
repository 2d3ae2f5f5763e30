"""When something does not fit or does not exist, kdra says where to look: the DeviceClasses that exist, the
names a device publishes (and `kdra cluster attributes`), the class whose devices the request's selectors
do match, and the largest value in the unit the selector asks for."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kdra.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> str:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["cluster", "render", "-c", "mixed"]) == 0
    path = tmp_path_factory.mktemp("mixed") / "mixed.yaml"
    path.write_text(out.getvalue())
    return str(path)


def _claim(tmp_path: Path, device_class: str, expression: str | None = None) -> str:
    exactly: dict[str, object] = {"deviceClassName": device_class}
    if expression:
        exactly["selectors"] = [{"cel": {"expression": expression}}]
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c1", "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }
    path = tmp_path / "claim.yaml"
    path.write_text(yaml.safe_dump(claim))
    return str(path)


def test_a_missing_device_class_lists_the_classes_that_exist(
    mixed: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["allocate", "-f", mixed, "-f", _claim(tmp_path, "gpu.nvidia.con")]) == 3
    err = capsys.readouterr().err.splitlines()
    assert err[0].endswith('deviceclass.resource.k8s.io "gpu.nvidia.con" not found')  # upstream's words
    assert (
        err[1].startswith(
            "  hint: the DeviceClasses are gpu.amd.com, gpu.nvidia.com, mig.nvidia.com, tpu.google.com"
        )
        and "kdra cluster attributes" in err[1]
    )


def test_a_missing_attribute_points_at_what_the_device_publishes(
    mixed: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`.index` is what NVIDIA's driver publishes; the bundled fleets do not."""
    claim = _claim(tmp_path, "gpu.nvidia.com", 'device.attributes["gpu.nvidia.com"].index == 0')
    assert main(["allocate", "-f", mixed, "-f", claim]) == 3
    err = capsys.readouterr().err.splitlines()
    assert "CEL runtime error: no such key: index" in err[0]
    assert err[1].startswith("  hint: device gpu.nvidia.com/") and " productName" in err[1]
    assert "kdra cluster attributes -c FLEET lists every name" in err[1]


def test_cluster_attributes_lists_the_classes_and_what_they_select(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["cluster", "attributes", "-c", "mixed"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["DEVICE", "CLASS", "SELECTS", "SELECTOR"]
    rows = {line.split()[0]: line for line in out[1:5]}
    assert (
        "gpu.nvidia.com/mig (" in rows["mig.nvidia.com"] and "gpu.nvidia.com/gpu (" in rows["gpu.nvidia.com"]
    )


def test_a_whole_a100_is_told_the_a100s_are_mig_devices(
    mixed: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """On `mixed` the A100s are in dynamic MIG mode: they exist only under mig.nvidia.com."""
    claim = _claim(
        tmp_path, "gpu.nvidia.com", 'device.attributes["gpu.nvidia.com"].productName.contains("A100")'
    )
    assert main(["allocate", "-f", mixed, "-f", claim, "-o", "name"]) == 1
    # The summary line by its shape, not its index: on a loaded machine a CEL progress line (after 15 s of
    # selector work, kdra.cli.common.cel_progress) comes first.
    summary = next(ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("  0/"))
    assert (
        "4 have no device of class gpu.nvidia.com "
        "(the devices matching request gpu are of class mig.nvidia.com)" in summary
    )


def test_largest_and_needed_are_in_one_unit(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["allocate", "-f", str(ROOT / "examples" / "allocate" / "unschedulable.yaml"), "-o", "name"])
        == 1
    )
    err = capsys.readouterr().err
    assert "(needs memory >= 141Gi; largest is 79.65Gi)" in err
    assert "nearest miss: gpu-0: memory 79.65Gi, selector #0 needs >= 141Gi" in err


@pytest.mark.parametrize(
    "value,needs,shown",
    [
        ("81559Mi", "memory >= 141Gi", "79.65Gi"),
        ("40Gi", ">= 141Gi", "40Gi"),
        ("81919.9Mi", ">= 80Gi", "81919.9Mi"),  # 80Gi once rounded: the exact value instead
        ("500M", ">= 1G", "0.5G"),
        ("8", ">= 16", "8"),
        ("H100", ">= 1Gi", "H100"),
    ],
)
def test_in_unit_of(value: str, needs: str, shown: str) -> None:
    from kdra.api.quantity import in_unit_of

    assert in_unit_of(value, needs) == shown
