"""Whole devices where a driver publishes them for sharing (kdra.allocator.whole, kdra.api.whole): the most
one allocation may take of a capacity, the shapes a request could meet, and the request that is exclusive
or all of a shareable device's capacity, on kdra's fleets and on NVIDIA's own slice shape."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kdra.allocator import Allocator, FeatureGates
from kdra.allocator.index import CapacityEntry, RequestPolicy
from kdra.allocator.whole import device_index, full_amount, shareable_shapes
from kdra.api.load import load_paths
from kdra.api.quantity import Quantity
from kdra.api.whole import EXCLUSIVE, whole_request

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "allocate" / "h100-mig-node.yaml"


def q(text: str) -> Quantity:
    return Quantity.parse(text)


def policy(**kw: Any) -> RequestPolicy:
    return RequestPolicy(
        default=kw.get("default"),
        valid_values=kw.get("values"),
        has_range="min" in kw,
        range_min=kw.get("min"),
        range_max=kw.get("max"),
        range_step=kw.get("step"),
    )


def test_full_amount_follows_the_request_policy() -> None:
    assert full_amount(CapacityEntry(q("24Gi"), None)) == q("24Gi")
    ranged = policy(min=q("0"), max=q("20Gi"), step=q("3Gi"))
    assert full_amount(CapacityEntry(q("24Gi"), ranged)) == q("18Gi")  # below max, on a step
    assert full_amount(CapacityEntry(q("24Gi"), policy(min=q("1Gi")))) == q("24Gi")
    assert full_amount(CapacityEntry(q("24Gi"), policy(values=(q("8Gi"), q("16Gi"), q("32Gi"))))) == q("16Gi")
    assert full_amount(CapacityEntry(q("1Gi"), policy(min=q("2Gi")))) is None


def _slice(node: str, devices: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": node},
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def _device(name: str, memory: str, shared: bool) -> dict[str, Any]:
    cap: dict[str, Any] = {"value": memory}
    dev: dict[str, Any] = {"name": name, "capacity": {"memory": cap}}
    if shared:
        cap["requestPolicy"] = {"default": "0", "validRange": {"min": "0", "max": memory, "step": "1Mi"}}
        dev["allowMultipleAllocations"] = True
    return dev


CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "gpu"},
    "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]},
}


def _claim(name: str, request: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"devices": {"requests": [request]}},
    }


def test_whole_devices_are_exclusive_or_all_of_a_shareable_one() -> None:
    """Two shareable 24Gi GPUs and one exclusive 80Gi GPU: three whole-GPU claims get three different
    devices, each share consuming all 24Gi; a fourth does not fit, and a share asking for memory neither."""
    node = _slice(
        "n", [_device("big", "80Gi", False), _device("s0", "24Gi", True), _device("s1", "24Gi", True)]
    )
    index = device_index([CLASS, node])
    shapes = shareable_shapes(index, "gpu")
    assert [(s[0], [(n, str(v), str(a)) for n, v, a in s[1]]) for s in shapes] == [
        ("gpu.example.com", [("memory", "24Gi", "24Gi")])
    ]
    request = whole_request("gpu", "gpu", 1, (), shapes)
    assert [s["name"] for s in request["firstAvailable"]] == ["exclusive", "full-share-1"]
    in_use: list[dict[str, Any]] = []
    got = []
    for i in range(4):
        claim = _claim(f"c{i}", request)
        outcome = Allocator({"gpu": CLASS}, [node], in_use, FeatureGates()).allocate(
            {"metadata": {"name": "n"}}, [claim]
        )
        if outcome.allocations is None:
            got.append(None)
            continue
        (result,) = outcome.allocations[0]["devices"]["results"]
        got.append(
            (result["request"], result["device"], (result.get("consumedCapacity") or {}).get("memory"))
        )
        in_use.append({**claim, "status": {"allocation": outcome.allocations[0]}})
    assert got == [
        ("gpu/exclusive", "big", None),
        ("gpu/full-share-1", "s0", "24Gi"),
        ("gpu/full-share-1", "s1", "24Gi"),
        None,
    ]
    share = _claim(
        "share",
        {"name": "gpu", "exactly": {"deviceClassName": "gpu", "capacity": {"requests": {"memory": "1Gi"}}}},
    )
    outcome = Allocator({"gpu": CLASS}, [node], in_use, FeatureGates()).allocate(
        {"metadata": {"name": "n"}}, [share]
    )
    assert outcome.allocations is None


def test_on_nvidias_own_slice_shape_a_whole_gpu_is_a_plain_exclusive_request() -> None:
    """The NVIDIA DRA driver's default slices (examples/allocate: no consumable shares) have no shareable
    GPU: the request is `exactly` with the exclusion, and allocates as before."""
    objs = load_paths([str(EXAMPLE)])
    index = device_index(objs)
    assert shareable_shapes(index, "gpu.nvidia.com") == []
    request = whole_request("gpu", "gpu.nvidia.com", 2, (), [])
    assert request == {
        "name": "gpu",
        "exactly": {
            "deviceClassName": "gpu.nvidia.com",
            "count": 2,
            "selectors": [{"cel": {"expression": EXCLUSIVE}}],
        },
    }
    classes = {o["metadata"]["name"]: o for o in objs if o["kind"] == "DeviceClass"}
    slices = [o for o in objs if o["kind"] == "ResourceSlice"]
    in_use = [o for o in objs if o["kind"] == "ResourceClaim" and (o.get("status") or {}).get("allocation")]
    node = next(o for o in objs if o["kind"] == "Node")
    outcome = Allocator(classes, slices, in_use, FeatureGates()).allocate(node, [_claim("whole", request)])
    assert outcome.allocations is not None
    assert len(outcome.allocations[0]["devices"]["results"]) == 2
