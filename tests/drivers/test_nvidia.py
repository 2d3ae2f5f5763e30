"""gpu.nvidia.com: golden 8 x H100 nodes against peers.md's shapes (shared/reference/examples), plus MIG
layouts, consumable shares and limits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kdra.drivers import nvidia
from kdra.drivers.catalog import lookup
from kdra.drivers.common import PoolPublisher, make_slices
from kdra.errors import InputError

GOLDEN = Path(__file__).parent / "golden"
H100 = lookup("H100-SXM-80GB")


def _norm(o: Any) -> Any:
    """UUIDs are per host; everything else must match byte for byte."""
    if isinstance(o, dict):
        return {k: ("<uuid>" if k in ("uuid", "parentUUID") else _norm(v)) for k, v in o.items()}
    if isinstance(o, list):
        return [_norm(x) for x in o]
    return o


def _node(dynamic: bool, **kw: Any) -> list[dict[str, Any]]:
    gpus = [nvidia.simulated_gpu(H100, "gpu-node-01", i, 8, mig_enabled=dynamic) for i in range(8)]
    r = nvidia.NvidiaRenderer(nvidia.NvidiaConfig(dynamic_mig=dynamic, **kw))
    return make_slices(r.layout("gpu-node-01", gpus))


@pytest.mark.parametrize(
    ("dynamic", "golden"), [(False, "h100x8-static.yaml"), (True, "h100x8-dynamic-mig.yaml")]
)
def test_golden_8x_h100(dynamic: bool, golden: str) -> None:
    got = _node(dynamic)
    want = list(yaml.safe_load_all((GOLDEN / golden).read_text()))
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert _norm(g["spec"]) == _norm(w["spec"])
        assert g["apiVersion"] == "resource.k8s.io/v1" and g["kind"] == "ResourceSlice"


def test_dynamic_mig_layout_rules() -> None:
    slices = _node(True)
    counters, devices = slices[0], slices[1:]
    assert "devices" not in counters["spec"] and len(counters["spec"]["sharedCounters"]) == 8
    assert all("sharedCounters" not in s["spec"] for s in devices)
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {9}
    names = [d["name"] for d in devices[0]["spec"]["devices"]]
    assert names == sorted(names) and len(names) == 26
    assert sum(len(s["spec"]["devices"]) for s in devices) == 208
    # No uuid on not-yet-created partitions; parentUUID ties them to the GPU.
    mig = devices[0]["spec"]["devices"][1]
    assert (
        "uuid" not in mig["attributes"]
        and mig["attributes"]["parentUUID"] == devices[0]["spec"]["devices"][0]["attributes"]["uuid"]
    )


def test_ampere_dynamic_mig_has_no_full_gpu() -> None:
    """MIG cannot be toggled without a reset on Ampere: only partitions are published (nvlib.go)."""
    a100 = lookup("A100-40GB")
    gpu = nvidia.simulated_gpu(a100, "n", 0, 1, mig_enabled=True)
    devs = nvidia.NvidiaRenderer(nvidia.NvidiaConfig(dynamic_mig=True)).gpu_devices(gpu)
    assert "gpu-0" not in [d["name"] for d in devs]
    assert len(devs) == 25


def test_static_mig_devices() -> None:
    layout = nvidia.place_mig_layout(H100, ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"], "t")
    assert [(p.name, s) for p, s in layout] == [
        ("2g.20gb", 0),
        ("1g.10gb", 2),
        ("1g.10gb", 3),
        ("3g.40gb", 4),
    ]
    gpu = nvidia.simulated_gpu(H100, "n", 0, 1, mig_enabled=True, mig_layout=layout)
    devs = nvidia.NvidiaRenderer().gpu_devices(gpu)
    assert [d["name"] for d in devs] == [
        "gpu-0-mig-1g10gb-19-2",
        "gpu-0-mig-1g10gb-19-3",
        "gpu-0-mig-2g20gb-14-0",
        "gpu-0-mig-3g40gb-9-4",
    ]
    d = devs[3]
    assert d["attributes"]["uuid"]["string"].startswith("MIG-")
    assert d["attributes"]["profile"] == {"string": "3g.40gb"}
    assert {k for k in d["capacity"] if k.startswith("memorySlice")} == {
        f"memorySlice{i}" for i in range(4, 8)
    }
    assert d["capacity"]["memory"] == {"value": "40448Mi"}


@pytest.mark.parametrize(
    "layout",
    [
        ["7g.80gb", "1g.10gb"],
        ["4g.40gb", "4g.40gb"],
        ["1g.10gb"] * 8,
        ["1g.10gb+me", "1g.10gb+me"],
        ["3g.40gb", "3g.40gb", "1g.10gb"],
    ],
)
def test_impossible_layouts(layout: list[str]) -> None:
    with pytest.raises(InputError, match=r"impossible MIG layout|maximum|no valid placement"):
        nvidia.place_mig_layout(H100, layout, "pool x")


def test_backtracking_finds_non_greedy_placement() -> None:
    a100 = lookup("A100-40GB")
    placed = nvidia.place_mig_layout(a100, ["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"], "t")
    assert sorted((p.name, s) for p, s in placed) == [
        ("1g.5gb", 2),
        ("1g.5gb", 3),
        ("2g.10gb", 0),
        ("3g.20gb", 4),
    ]


@pytest.mark.parametrize(
    ("mode", "default", "minimum"), [("unlimited", "0", "0"), ("memory", "81559Mi", "1Mi")]
)
def test_consumable_shares_memory_policy(mode: str, default: str, minimum: str) -> None:
    dev = _node(False, consumable_shares=mode)[0]["spec"]["devices"][0]
    assert dev["allowMultipleAllocations"] is True
    assert dev["capacity"]["memory"] == {
        "value": "81559Mi",
        "requestPolicy": {
            "default": default,
            "validRange": {"min": minimum, "max": "81559Mi", "step": "1Mi"},
        },
    }
    assert "shares" not in dev["capacity"]


def test_consumable_shares_count() -> None:
    dev = _node(False, consumable_shares=4)[0]["spec"]["devices"][0]
    assert dev["capacity"]["shares"] == {
        "value": "4",
        "requestPolicy": {"default": "1", "validRange": {"min": "1", "max": "4", "step": "1"}},
    }


def test_many_gpus_respect_slice_limits() -> None:
    """16 GPUs under DynamicMIG: 16 counter sets need two counter slices (8 per slice)."""
    gpus = [nvidia.simulated_gpu(H100, "big", i, 16, mig_enabled=True) for i in range(16)]
    slices = make_slices(nvidia.NvidiaRenderer(nvidia.NvidiaConfig(dynamic_mig=True)).layout("big", gpus))
    counter_slices = [s for s in slices if "sharedCounters" in s["spec"]]
    assert [len(s["spec"]["sharedCounters"]) for s in counter_slices] == [8, 8]
    assert all(len(s["spec"].get("devices", ())) <= 64 for s in slices)
    assert len({s["metadata"]["name"] for s in slices}) == len(slices) == 18


def test_static_pool_splits_past_128_devices() -> None:
    gpus = [nvidia.simulated_gpu(lookup("L4"), "wide", i, 200) for i in range(200)]
    slices = make_slices(nvidia.NvidiaRenderer().layout("wide", gpus))
    assert [len(s["spec"]["devices"]) for s in slices] == [128, 72]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {2}


def test_republish_bumps_generation_only_on_change() -> None:
    pub = PoolPublisher()
    r = nvidia.NvidiaRenderer()
    gpus = [nvidia.simulated_gpu(H100, "n1", i, 2) for i in range(2)]
    first = pub.publish(r.layout("n1", gpus))
    assert first[0]["spec"]["pool"]["generation"] == 1
    again = pub.publish(r.layout("n1", gpus))
    assert again[0]["spec"]["pool"]["generation"] == 1
    layout = nvidia.place_mig_layout(H100, ["all-1g.10gb"[4:]] * 7, "t")
    gpus[1] = nvidia.simulated_gpu(H100, "n1", 1, 2, mig_enabled=True, mig_layout=layout)
    changed = pub.publish(r.layout("n1", gpus))
    assert changed[0]["spec"]["pool"]["generation"] == 2
    assert len(changed[0]["spec"]["devices"]) == 8


def test_nvlink_domain_attribute_is_kdras_own() -> None:
    gpu = nvidia.simulated_gpu(H100, "n", 0, 1)
    extra = {nvidia.NVLINK_DOMAIN_ATTRIBUTE: {"string": "nvl0"}}
    (dev,) = nvidia.NvidiaRenderer().gpu_devices(gpu, extra)
    assert dev["attributes"]["kdra.dev/nvlinkDomain"] == {"string": "nvl0"}


def test_device_classes() -> None:
    classes = {c["metadata"]["name"]: c for c in nvidia.device_classes()}
    assert classes["gpu.nvidia.com"]["spec"]["extendedResourceName"] == "nvidia.com/gpu"
    assert "type == 'mig'" in classes["mig.nvidia.com"]["spec"]["selectors"][0]["cel"]["expression"]


def test_numa_node_is_a_standard_attribute_from_1_37_only() -> None:
    # KEP-6072 made resource.kubernetes.io/numaNode standard in 1.37; a 1.36 cluster's driver has no such
    # attribute to publish (pcieRoot and pciBusID are standard in both).
    for version, want in (("1.37", True), ("1.36", False)):
        devices = [
            d for s in _node(False, kubernetes_version=version) for d in s["spec"].get("devices") or []
        ]
        assert devices
        for d in devices:
            attrs = d["attributes"]
            assert ("resource.kubernetes.io/numaNode" in attrs) == want, (version, d["name"])
            assert "resource.kubernetes.io/pcieRoot" in attrs
