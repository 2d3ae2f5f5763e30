from __future__ import annotations

from kdra.deviceplugin.advertise import extended_resources
from kdra.drivers import amd, tpu
from kdra.drivers.catalog import lookup
from kdra.drivers.common import binary_quantity, make_slices, semver


def test_amd_full_gpus() -> None:
    m = lookup("MI300X")
    gpus = [amd.simulated_amd_gpu(m, m.mode("spx_nps1"), "n", i, 8) for i in range(8)]
    devs = amd.AmdRenderer().devices(gpus)
    assert [d["name"] for d in devs][:2] == ["gpu-1-128", "gpu-2-129"]
    d = devs[0]
    assert d["attributes"]["type"] == {"string": "amdgpu"}
    assert d["attributes"]["partitionProfile"] == {"string": "spx_nps1"}
    assert d["capacity"] == {
        "memory": {"value": "196592Mi"},
        "computeUnits": {"value": "304"},
        "simdUnits": {"value": "1216"},
    }
    assert "resource.kubernetes.io/pcieRoot" in d["attributes"]


def test_amd_partitions() -> None:
    m = lookup("MI300X")
    gpus = [amd.simulated_amd_gpu(m, m.mode("cpx_nps4"), "n", i, 2) for i in range(2)]
    devs = amd.AmdRenderer().devices(gpus)
    assert len(devs) == 16
    p = devs[0]
    assert p["attributes"]["type"] == {"string": "amdgpu-partition"}
    assert "parentDeviceID" in p["attributes"] and "parentPciAddr" in p["attributes"]
    assert p["capacity"]["computeUnits"] == {"value": "38"}
    assert p["capacity"]["memory"] == {"value": "24574Mi"}
    # Partitions of one GPU share the parent's deviceID, so matchAttribute can keep them together.
    assert len({d["attributes"]["parentDeviceID"]["string"] for d in devs}) == 2
    assert extended_resources(m, 2, partition=m.mode("cpx_nps4")) == {"amd.com/gpu": 16}


def test_tpu_chips() -> None:
    v6e = lookup("tpu-v6e")
    devs = tpu.TpuRenderer().devices("tpu-0", v6e, 4, "4x4")
    assert [d["name"] for d in devs] == ["0", "1", "2", "3"]
    a = devs[0]["attributes"]
    assert a["tpuGen"] == {"string": "v6e"} and a["accelerator"] == {"string": "tpu-v6e-slice"}
    assert a["chipCount"] == {"int": 4} and a["topology"] == {"string": "4x4"}
    assert "capacity" not in devs[0]
    # upstream seeds the uuid with the node name only: all chips of a node share it
    assert len({d["attributes"]["uuid"]["string"] for d in devs}) == 1
    v5p = lookup("tpu-v5p")
    assert tpu.TpuRenderer().devices("n", v5p, 4, "2x2x1")[0]["name"] == "accel0"
    (s,) = make_slices(tpu.TpuRenderer().layout("tpu-0", v6e, 4, "4x4"))
    assert s["spec"]["driver"] == "tpu.google.com" and s["spec"]["pool"]["name"] == "tpu-0"


def test_quantities_and_versions() -> None:
    assert binary_quantity(81559 << 20) == "81559Mi"
    assert binary_quantity(80 << 30) == "80Gi"
    assert binary_quantity(0) == "0"
    assert binary_quantity(1500) == "1500"
    assert semver("9.0") == "9.0.0"
    assert semver("580.126.20") == "580.126.20"


def test_legacy_nvidia() -> None:
    h = lookup("H100")
    layout = [(h.profile("3g.40gb"), 4), (h.profile("1g.10gb"), 0)]
    assert extended_resources(h, 2, mig="static", mig_layouts=[layout, []]) == {
        "nvidia.com/gpu": 1,
        "nvidia.com/mig-1g.10gb": 1,
        "nvidia.com/mig-3g.40gb": 1,
    }
    assert extended_resources(h, 8, mig="dynamic") == {"nvidia.com/gpu": 8}
    assert extended_resources(lookup("L4"), 4, sharing=4) == {"nvidia.com/gpu": 16}
    assert extended_resources(lookup("v5e"), 8) == {"google.com/tpu": 8}
