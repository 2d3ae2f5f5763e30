"""`kdra driver nvml` against recorded NVML fixtures, through a fake pynvml module."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest
import yaml

from kdra.cli.main import main
from kdra.drivers.catalog import lookup
from kdra.drivers.nvml import FixtureNvml, capture, gpus_from_capture, render_capture

FIXTURES = Path(__file__).parent / "fixtures"
H100_FIXTURE = FIXTURES / "nvml-h100x4-synthetic.json"


def _record(path: Path = H100_FIXTURE) -> dict:
    return json.loads(path.read_text())


def test_capture_through_fake_pynvml_roundtrips_the_fixture() -> None:
    rec = _record()
    got = capture(FixtureNvml(rec))
    assert got["devices"] == rec["devices"]
    assert (got["driverVersion"], got["cudaDriverVersion"]) == ("580.126.20", 13000)


def test_profiles_named_like_nvidia() -> None:
    gpus = gpus_from_capture(_record())
    names = sorted(p.name for p in gpus[0].mig_profiles)
    assert names == sorted(p.name for p in lookup("H100").mig_profiles)
    assert gpus[2].mig_enabled and len(gpus[2].mig_devices) == 4
    assert gpus[0].memory_slice_count == 8


def test_same_shape_as_simulated_driver() -> None:
    """A captured host and the simulated driver agree on everything but uuids (and the node name)."""
    from kdra.drivers import nvidia
    from kdra.drivers.common import make_slices

    (real,) = render_capture(_record(), "fixture-host")
    h = lookup("H100")
    sim_gpus = [nvidia.simulated_gpu(h, "fixture-host", i, 4) for i in range(2)]
    (sim,) = make_slices(nvidia.NvidiaRenderer().layout("fixture-host", sim_gpus))
    for r, s in zip(real["spec"]["devices"][:2], sim["spec"]["devices"], strict=True):
        r_attrs = {k: v for k, v in r["attributes"].items() if k != "uuid"}
        s_attrs = {k: v for k, v in s["attributes"].items() if k != "uuid"}
        assert (r["name"], r_attrs, r["capacity"]) == (s["name"], s_attrs, s["capacity"])
    names = [d["name"] for d in real["spec"]["devices"]]
    # GPU 2 has 4 MIG devices, GPU 3 has MIG on and none configured (published: nothing)
    assert names == [
        "gpu-0",
        "gpu-1",
        "gpu-2-mig-1g10gb-19-2",
        "gpu-2-mig-1g10gb-19-3",
        "gpu-2-mig-2g20gb-14-0",
        "gpu-2-mig-3g40gb-9-4",
    ]
    mig = real["spec"]["devices"][2]
    assert mig["attributes"]["uuid"]["string"] == _record()["devices"][2]["migDevices"][1]["uuid"]


def test_cli_with_injected_pynvml(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", FixtureNvml(_record()))
    assert main(["driver", "nvml", "--node", "host-a", "--dynamic-mig"]) == 0
    slices = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [s["metadata"]["name"] for s in slices][:2] == [
        "host-a-gpu.nvidia.com-counters",
        "host-a-gpu.nvidia.com-gpu0",
    ]
    assert len(slices) == 5 and slices[0]["spec"]["pool"] == {
        "name": "host-a",
        "generation": 1,
        "resourceSliceCount": 5,
    }


def test_cli_fixture_option_and_validation(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["driver", "nvml", "--fixture", str(FIXTURES / "nvml-l4x2-synthetic.json"), "-o", "json"]) == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "ResourceSlice"  # one slice: printed as itself
    assert [d["name"] for d in doc["spec"]["devices"]] == ["gpu-0", "gpu-1"]
    assert doc["spec"]["devices"][0]["attributes"]["cudaDriverVersion"] == {"version": "12.8.0"}
    assert doc["spec"]["nodeName"] == "fixture-l4"
    validation = importlib.import_module("kdra.validation.rules")
    validation.validate_objects([doc])


class _NoDriver:
    class NVMLError(Exception):
        pass

    def nvmlInit(self) -> None:
        raise self.NVMLError("NVML Shared Library Not Found")


def test_no_driver_says_so_and_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _NoDriver())
    assert main(["driver", "nvml"]) == 2
    err = capsys.readouterr().err
    assert "no NVIDIA driver on this host" in err and "Traceback" not in err


def test_malformed_fixture_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "kdra-nvml-fixture/v1", "devices": [{"index": 0}]}))
    assert main(["driver", "nvml", "--fixture", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "not a kdra-nvml-fixture/v1 record" in err and "Traceback" not in err
    bad.write_text("{not json")
    assert main(["driver", "nvml", "--fixture", str(bad)]) == 2
    assert "cannot read NVML fixture" in capsys.readouterr().err


def test_nvml_error_mid_capture_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FixtureNvml(_record())

    def lost(h: int) -> str:
        raise fake.NVMLError("GPU is lost")

    fake.nvmlDeviceGetUUID = lost  # type: ignore[method-assign]
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert main(["driver", "nvml"]) == 2
    assert "NVML failed while reading the GPUs of this host: GPU is lost" in capsys.readouterr().err
