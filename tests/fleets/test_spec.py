"""Hand-written Fleet files: what they render to, and the errors bad ones get (pool, field, rule)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kdra.errors import InputError
from kdra.fleets import legacy_allocatable, parse_fleet, render


def fleet(*pools: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kdra.dev/v1alpha1",
        "kind": "Fleet",
        "metadata": {"name": "t"},
        "spec": {"pools": list(pools), **spec},
    }


H100 = {
    "name": "h100",
    "count": 4,
    "cpu": "96",
    "memory": "1Ti",
    "accelerator": {"model": "H100", "count": 8},
}


def test_node_shape_and_labels() -> None:
    pool = {
        **H100,
        "labels": {"team": "ml"},
        "taints": [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}],
        "topology": {"zones": ["a", "b"], "nodesPerRack": 1, "racksPerBlock": 2, "nvlinkDomainSize": 2},
        "namePattern": "gpu-{zone}-{index:02d}",
    }
    objs = render(parse_fleet(fleet(pool)))
    nodes = [o for o in objs if o["kind"] == "Node"]
    assert [n["metadata"]["name"] for n in nodes] == ["gpu-a-00", "gpu-a-01", "gpu-b-02", "gpu-b-03"]
    n = nodes[1]
    labels = n["metadata"]["labels"]
    assert labels["topology.kubernetes.io/zone"] == "a"
    assert labels["kdra.dev/rack"] == "a-h100-rack1" and labels["kdra.dev/block"] == "a-h100-block0"
    assert labels["kdra.dev/nvlink-domain"] == "a-h100-nvl0"
    assert labels["nvidia.com/gpu.clique"] == "t.a-h100-nvl0"
    assert labels["team"] == "ml" and labels["kubernetes.io/hostname"] == "gpu-a-01"
    assert n["spec"]["taints"] == [{"key": "gpu", "effect": "NoSchedule", "value": "yes"}]
    assert n["status"]["allocatable"] == {"cpu": "96", "memory": "1Ti", "pods": "110"}


def test_legacy_option_and_function() -> None:
    pool = {
        **H100,
        "accelerator": {"model": "H100", "count": 8, "mig": {"mode": "static", "layout": "all-1g.10gb"}},
    }
    f = parse_fleet(fleet(pool))
    node = render(f, legacy=True, dra=False)[0]
    assert node["kind"] == "Node"
    assert node["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] == "56"
    assert "nvidia.com/gpu" not in node["status"]["allocatable"]
    assert legacy_allocatable(f)["h100-0"] == {"nvidia.com/mig-1g.10gb": 56}


def test_per_gpu_layouts() -> None:
    pool = {
        **H100,
        "accelerator": {
            "model": "A100-40GB",
            "count": 2,
            "mig": {"mode": "static", "layouts": [["7g.40gb"], ["3g.20gb", "3g.20gb"]]},
        },
    }
    objs = render(parse_fleet(fleet(pool)))
    s = next(o for o in objs if o["kind"] == "ResourceSlice")
    assert [d["name"] for d in s["spec"]["devices"]] == [
        "gpu-0-mig-7g40gb-0-0",
        "gpu-1-mig-3g20gb-9-0",
        "gpu-1-mig-3g20gb-9-4",
    ]


def test_device_taints_and_slice_limit() -> None:
    pool = {
        "name": "l4",
        "count": 1,
        "accelerator": {"model": "L4", "count": 100},
        "deviceTaints": [{"key": "maintenance", "effect": "NoSchedule"}],
    }
    slices = [o for o in render(parse_fleet(fleet(pool))) if o["kind"] == "ResourceSlice"]
    assert [len(s["spec"]["devices"]) for s in slices] == [64, 36]


def test_amd_and_tpu_pools() -> None:
    f = parse_fleet(
        fleet(
            {
                "name": "mi",
                "count": 1,
                "accelerator": {"model": "MI300X", "count": 8, "partition": "cpx_nps1"},
            },
            {"name": "tpu", "count": 8, "accelerator": {"model": "v5p", "topology": "2x4x4"}},
        )
    )
    objs = render(f)
    assert {o["metadata"]["name"] for o in objs if o["kind"] == "DeviceClass"} == {
        "gpu.amd.com",
        "tpu.google.com",
    }
    nodes = [o for o in objs if o["kind"] == "Node" and o["metadata"]["labels"]["kdra.dev/pool"] == "tpu"]
    assert {n["metadata"]["labels"]["kdra.dev/tpu-slice"] for n in nodes} == {"tpu-s0"}
    amd_slice = next(o for o in objs if o["kind"] == "ResourceSlice" and o["spec"]["driver"] == "gpu.amd.com")
    assert len(amd_slice["spec"]["devices"]) == 64


BAD = [
    (
        {**H100, "accelerator": {"model": "H900", "count": 8}},
        r"pool h100 \(spec.pools\[0\]\): "
        r"spec.pools\[0\].accelerator.model: Unsupported value: unknown accelerator model 'H900'",
    ),
    ({**H100, "count": -1}, r"spec.pools\[0\].count: Invalid value: -1: must be greater than or equal to 0"),
    ({**H100, "accelerator": {"model": "H100", "count": 0}}, r"accelerator.count: Invalid value: 0"),
    (
        {
            **H100,
            "accelerator": {
                "model": "H100",
                "count": 8,
                "mig": {"mode": "static", "layout": ["7g.80gb", "1g.10gb"]},
            },
        },
        r"accelerator.mig.layout: Invalid value: .*impossible MIG layout",
    ),
    (
        {
            **H100,
            "accelerator": {"model": "H100", "count": 8, "mig": {"mode": "static", "layout": ["5g.50gb"]}},
        },
        r"accelerator.mig.layout: Invalid value: unknown MIG profile '5g.50gb'",
    ),
    (
        {**H100, "accelerator": {"model": "L4", "count": 8, "mig": "dynamic"}},
        r"accelerator.mig.mode: Invalid value: 'dynamic': L4 does not support MIG",
    ),
    ({**H100, "gpus": 8}, r"spec.pools\[0\].gpus: unknown field 'gpus'"),
    (
        {**H100, "accelerator": {"model": "H100", "count": 8, "migg": "static"}},
        r"accelerator.migg: unknown field",
    ),
    ({**H100, "memory": "lots"}, r"spec.pools\[0\].memory: Invalid value: 'lots'"),
    (
        {**H100, "maxDevicesPerSlice": 200},
        r"maxDevicesPerSlice: Invalid value: 200: a ResourceSlice holds at most 128",
    ),
    (
        {**H100, "accelerator": {"model": "H100", "count": 8, "mig": "dynamic"}, "maxDevicesPerSlice": 100},
        r"at most 64 devices when devices have taints or consume counters",
    ),
    (
        {**H100, "accelerator": {"model": "v6e", "topology": "4x4"}, "count": 3},
        r"spec.pools\[0\].count: Invalid value: 3: a 4x4 slice spans 4 hosts",
    ),
    (
        {**H100, "accelerator": {"model": "v6e", "topology": "3x3"}},
        r"accelerator.topology: Unsupported value: '3x3'",
    ),
    (
        {**H100, "accelerator": {"model": "MI300X", "count": 8, "partition": "dpx_nps4"}},
        r"accelerator.partition: Unsupported value: 'dpx_nps4'",
    ),
    ({**H100, "namePattern": "n-{rack}-{index}"}, r"namePattern: Invalid value: unknown placeholder"),
    ({**H100, "namePattern": "Node_{index}"}, r"node names must be DNS subdomains"),
    ({**H100, "namePattern": "n-{index"}, r"namePattern: Invalid value: expected '}'.*literal brace"),
    ({**H100, "namePattern": "n-{zone.{x[}"}, r"namePattern: Invalid value: unexpected '{' in field name"),
    ({**H100, "namePattern": "n-{index:q}"}, r"namePattern: Invalid value: Unknown format code 'q'"),
    (
        {
            **H100,
            "accelerator": {
                "model": "H100",
                "count": 8,
                "sharing": {"mode": "consumable-shares", "shares": 0},
            },
        },
        r"sharing.shares: Invalid value: 0",
    ),
    ({**H100, "taints": [{"key": "a", "effect": "Sometimes"}]}, r"taints\[0\].effect: Unsupported value"),
]


@pytest.mark.parametrize(("pool", "message"), BAD, ids=[m[:40] for _, m in BAD])
def test_bad_fleets_get_clear_errors(pool: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError, match=message) as info:
        parse_fleet(fleet(pool))
    assert str(info.value).startswith("Fleet t: pool h100 (spec.pools[0]): ")


def test_fleet_level_errors() -> None:
    with pytest.raises(InputError, match=r"Fleet t: spec\.pools: Required value"):
        parse_fleet(fleet())
    with pytest.raises(InputError, match=r"expected kdra\.dev/v1alpha1/Fleet"):
        parse_fleet({**fleet(H100), "kind": "Cluster"})
    with pytest.raises(InputError, match=r"spec.pools\[1\].name: Duplicate value: 'h100'"):
        parse_fleet(fleet(H100, copy.deepcopy(H100)))
    with pytest.raises(InputError, match="node name 'h100-0' is also produced by pool h100"):
        parse_fleet(fleet(H100, {**H100, "name": "other", "namePattern": "h100-{index}"}))
    with pytest.raises(InputError, match=r"spec\.colour: unknown field"):
        parse_fleet(fleet(H100, colour="blue"))


def test_republish_bumps_generation_of_changed_pools_only() -> None:
    from kdra.fleets import FleetPublisher

    a100 = {"name": "a100", "count": 2, "accelerator": {"model": "A100-40GB", "count": 2, "mig": "dynamic"}}
    l4 = {"name": "l4", "count": 1, "accelerator": {"model": "L4", "count": 2}}
    pub = FleetPublisher()
    first, deleted = pub.publish(parse_fleet(fleet(a100, l4)))
    assert {s["spec"]["pool"]["generation"] for s in first} == {1} and deleted == []
    assert pub.publish(parse_fleet(fleet(a100, l4))) == ([], [])
    a100_static = {
        **a100,
        "accelerator": {"model": "A100-40GB", "count": 2, "mig": {"mode": "static", "layout": "all-1g.5gb"}},
    }
    changed, deleted = pub.publish(parse_fleet(fleet(a100_static, l4)))
    assert {s["spec"]["pool"]["name"] for s in changed} == {"a100-0", "a100-1"}
    assert {s["spec"]["pool"]["generation"] for s in changed} == {2}
    assert all(s["spec"]["pool"]["resourceSliceCount"] == 1 for s in changed)
    assert "a100-0-gpu.nvidia.com-counters" in deleted and "a100-0-gpu.nvidia.com-devices" not in deleted
    _, deleted = pub.publish(parse_fleet(fleet(l4)))
    assert deleted == ["a100-0-gpu.nvidia.com-devices", "a100-1-gpu.nvidia.com-devices"]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("labels", {"bad key!": "x"}, r"labels: Invalid value: 'bad key!': name part must consist"),
        ("labels", {"Example.COM/x": "y"}, r"prefix part must be a lowercase RFC 1123 subdomain"),
        ("labels", {"ok": "not ok!"}, r"labels\[ok\]: Invalid value: 'not ok!': a valid label value"),
        ("taints", [{"key": "a b", "effect": "NoSchedule"}], r"taints\[0\].key: Invalid value: 'a b'"),
    ],
)
def test_label_and_taint_keys(field: str, value: Any, message: str) -> None:
    with pytest.raises(InputError, match=message):
        parse_fleet(fleet({**H100, field: value}))


def test_empty_static_layout_means_mig_off_on_that_gpu() -> None:
    pool = {
        **H100,
        "count": 1,
        "accelerator": {
            "model": "H100",
            "count": 2,
            "mig": {"mode": "static", "layouts": [[], ["4g.40gb", "3g.40gb"]]},
        },
    }
    f = parse_fleet(fleet(pool))
    s = next(o for o in render(f) if o["kind"] == "ResourceSlice")
    assert [d["name"] for d in s["spec"]["devices"]] == [
        "gpu-0",
        "gpu-1-mig-3g40gb-9-4",
        "gpu-1-mig-4g40gb-5-0",
    ]
    assert legacy_allocatable(f)["h100-0"] == {
        "nvidia.com/gpu": 1,
        "nvidia.com/mig-3g.40gb": 1,
        "nvidia.com/mig-4g.40gb": 1,
    }


def test_driver_version_must_be_numeric() -> None:
    with pytest.raises(InputError, match=r"spec\.nvidia\.driverVersion: Invalid value: 'latest'"):
        parse_fleet(fleet(H100, nvidia={"driverVersion": "latest"}))
    f = parse_fleet(fleet(H100, nvidia={"driverVersion": "570.133.20", "cudaDriverVersion": "12.8"}))
    s = next(o for o in render(f) if o["kind"] == "ResourceSlice")
    attrs = s["spec"]["devices"][0]["attributes"]
    assert attrs["driverVersion"] == {"version": "570.133.20"}
    assert attrs["cudaDriverVersion"] == {"version": "12.8.0"}
