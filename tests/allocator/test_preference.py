"""The allocator's device-preference hook: what each policy picks on a real node shape (8x H100 with
dynamic MIG, the NVIDIA driver's layout; plain GPUs in PCIe pairs; shareable GPUs), that the hook only
reorders (upstream's verdict on every conformance case), and its safety valves."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from kdra.allocator import Allocator, FeatureGates
from kdra.allocator.index import DeviceEntry
from kdra.allocator.preference import RequestView, SearchContext
from kdra.api.load import load_paths
from kdra.errors import AllocationError
from kdra.scheduler.devicepref import (
    DEVICE_PREFERENCES,
    compare_with_first_fit,
    describe_choice,
    make_device_preference,
)

from .conformance import conformance_dir, load_case, run_case

ROOT = Path(__file__).resolve().parents[2]
NODE = {"metadata": {"name": "gpu-node-01"}}


def _mig_node() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    objs = load_paths([str(ROOT / "examples" / "allocate" / "h100-mig-node.yaml")])
    classes = {o["metadata"]["name"]: o for o in objs if o["kind"] == "DeviceClass"}
    return classes, [o for o in objs if o["kind"] == "ResourceSlice"]


def _claim(name: str, cls: str, selector: str | None = None, count: int = 1, **extra: Any) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": cls, "count": count, **extra}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": exactly}]}},
    }


def _profile(p: str) -> str:
    return f"device.attributes['gpu.nvidia.com'].profile == '{p}'"


def _devices(out: Any) -> list[str]:
    assert out.allocations is not None, str(out.explanation)
    return [r["device"] for a in out.allocations for r in a["devices"]["results"]]


def _allocated(name: str, device: str, pool: str = "gpu-node-01") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": []}},
        "status": {
            "allocation": {
                "devices": {
                    "results": [{"request": "r", "driver": "gpu.nvidia.com", "pool": pool, "device": device}]
                }
            }
        },
    }


def test_first_fit_breaks_the_4g_placement_fragmentation_keeps_it() -> None:
    classes, slices = _mig_node()
    one_g = _claim("nb", "mig.nvidia.com", _profile("1g.10gb"))
    ff = Allocator(classes, slices).allocate(NODE, [one_g])
    assert _devices(ff) == ["gpu-0-mig-1g10gb-19-0"]  # memory slice 0: no 4g.40gb (slices 0-3) left
    pref = make_device_preference("fragmentation")
    got = Allocator(classes, slices, prefer=pref).allocate(NODE, [one_g])
    dev = _devices(got)[0]
    assert dev.startswith("gpu-0-mig-1g10gb-19-") and int(dev.rsplit("-", 1)[1]) >= 4, dev
    # and a 4g.40gb still fits on that GPU afterwards
    after = Allocator(classes, slices, [{**one_g, "status": {"allocation": got.allocations[0]}}])
    four = after.allocate(NODE, [_claim("big", "mig.nvidia.com", _profile("4g.40gb"))])
    assert _devices(four) == ["gpu-0-mig-4g40gb-5-0"]


def test_fragmentation_fills_a_partly_used_gpu_before_breaking_a_whole_one() -> None:
    classes, slices = _mig_node()
    in_use = [_allocated("a", "gpu-3-mig-3g40gb-9-0")]
    claim = _claim("b", "mig.nvidia.com", _profile("3g.40gb"))
    assert _devices(Allocator(classes, slices, in_use).allocate(NODE, [claim])) == ["gpu-0-mig-3g40gb-9-0"]
    for name in ("fragmentation", "binpack"):
        pref = make_device_preference(name)
        assert _devices(Allocator(classes, slices, in_use, prefer=pref).allocate(NODE, [claim])) == [
            "gpu-3-mig-3g40gb-9-4"
        ], name


def test_spread_takes_a_fresh_gpu() -> None:
    classes, slices = _mig_node()
    in_use = [_allocated("a", "gpu-0-mig-3g40gb-9-0")]
    claim = _claim("b", "mig.nvidia.com", _profile("1g.10gb"))
    got = _devices(
        Allocator(classes, slices, in_use, prefer=make_device_preference("spread")).allocate(NODE, [claim])
    )
    assert not got[0].startswith("gpu-0-"), got


def _pairs_node(shared: bool = False) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """8 plain GPUs, PCIe roots in pairs (0/1, 2/3, ...), NUMA nodes of four."""
    devices = []
    for i in range(8):
        d: dict[str, Any] = {
            "name": f"gpu-{i}",
            "attributes": {
                "type": {"string": "gpu"},
                "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{i // 2}"},
                "resource.kubernetes.io/numaNode": {"int": i // 4},
            },
            "capacity": {"memory": {"value": "80Gi"}},
        }
        if shared:
            d["allowMultipleAllocations"] = True
        devices.append(d)
    slices = [
        {
            "metadata": {"name": "s"},
            "spec": {
                "driver": "gpu.example.com",
                "nodeName": "gpu-node-01",
                "pool": {"name": "gpu-node-01", "generation": 1, "resourceSliceCount": 1},
                "devices": devices,
            },
        }
    ]
    classes = {"gpu": {"metadata": {"name": "gpu"}, "spec": {}}}
    return classes, slices


def _plain(name: str, device: str) -> dict[str, Any]:
    c = _allocated(name, device)
    c["status"]["allocation"]["devices"]["results"][0]["driver"] = "gpu.example.com"
    return c


@pytest.mark.parametrize("policy", ["fragmentation", "binpack", "topology"])
def test_one_gpu_pod_does_not_split_the_last_whole_pair(policy: str) -> None:
    classes, slices = _pairs_node()
    in_use = [_plain(f"u{i}", f"gpu-{i}") for i in (0, 2, 4)]  # pairs 0/1, 2/3, 4/5 broken; 6/7 whole
    claim = _claim("one", "gpu")
    assert _devices(Allocator(classes, slices, in_use).allocate(NODE, [claim])) == ["gpu-1"]
    in_use.append(_plain("u1", "gpu-1"))  # now only 3, 5 are lone GPUs; 6/7 is the last pair
    assert _devices(Allocator(classes, slices, in_use).allocate(NODE, [claim])) == ["gpu-3"]
    in_use.append(_plain("u3", "gpu-3"))
    # first fit takes gpu-5 too; the interesting step: with 5, 6, 7 free, never 6 or 7
    got = _devices(
        Allocator(classes, slices, in_use, prefer=make_device_preference(policy)).allocate(NODE, [claim])
    )
    assert got == ["gpu-5"]


def test_fragmentation_keeps_the_pair_where_first_fit_splits_it() -> None:
    classes, slices = _pairs_node()
    in_use = [_plain("u", "gpu-1")]  # 0 is alone; 2/3 ... whole pairs
    in_use += [_plain("v", "gpu-0")]
    in_use += [_plain("w", "gpu-5")]  # gpu-4 alone
    claim = _claim("one", "gpu")
    assert _devices(Allocator(classes, slices, in_use).allocate(NODE, [claim])) == ["gpu-2"]
    got = Allocator(classes, slices, in_use, prefer=make_device_preference("fragmentation")).allocate(
        NODE, [claim]
    )
    assert _devices(got) == ["gpu-4"]


def test_shares_go_to_the_fullest_gpu_that_fits() -> None:
    classes, slices = _pairs_node(shared=True)
    in_use = []
    for dev, gi in (("gpu-0", 40), ("gpu-3", 70), ("gpu-5", 20)):
        c = _plain(f"s-{dev}", dev)
        r = c["status"]["allocation"]["devices"]["results"][0]
        r["shareID"] = "00000000-0000-4000-8000-000000000001"
        r["consumedCapacity"] = {"memory": f"{gi}Gi"}
        in_use.append(c)
    claim = _claim("share", "gpu", capacity={"requests": {"memory": "8Gi"}})
    assert _devices(Allocator(classes, slices, in_use).allocate(NODE, [claim])) == ["gpu-0"]
    got = Allocator(classes, slices, in_use, prefer=make_device_preference("binpack")).allocate(NODE, [claim])
    assert _devices(got) == ["gpu-3"]  # 10Gi left there: the best fit
    # FGD: on gpu-3 the share would strand 2Gi no share of this size can use; gpu-0 keeps 32Gi usable,
    # and no fresh GPU (or whole PCIe pair) is broken.
    frag = make_device_preference("fragmentation")
    assert _devices(Allocator(classes, slices, in_use, prefer=frag).allocate(NODE, [claim])) == ["gpu-0"]
    big = _claim("big", "gpu", capacity={"requests": {"memory": "30Gi"}})
    got = Allocator(classes, slices, in_use, prefer=make_device_preference("fragmentation")).allocate(
        NODE, [big]
    )
    assert _devices(got) == ["gpu-5"]  # 30Gi left there fit another such share; gpu-0 would strand 10Gi


def test_topology_keeps_a_pods_claims_together() -> None:
    classes, slices = _pairs_node()
    in_use = [_plain("u", "gpu-1"), _plain("v", "gpu-2")]
    first = _claim("a", "gpu")
    second = _claim("b", "gpu")
    ff = _devices(Allocator(classes, slices, in_use).allocate(NODE, [first, second]))
    assert ff == ["gpu-0", "gpu-3"]  # different PCIe roots
    got = _devices(
        Allocator(classes, slices, in_use, prefer=make_device_preference("topology")).allocate(
            NODE, [first, second]
        )
    )
    assert got in (["gpu-4", "gpu-5"], ["gpu-6", "gpu-7"]), got  # one PCIe root: a whole pair
    pair = _claim("p", "gpu", count=2)
    got = _devices(
        Allocator(classes, slices, in_use, prefer=make_device_preference("topology")).allocate(NODE, [pair])
    )
    assert got == ["gpu-4", "gpu-5"]


def test_comparison_with_first_fit_says_what_decided() -> None:
    classes, slices = _mig_node()
    pref = make_device_preference("fragmentation")
    alloc = Allocator(classes, slices, prefer=pref)
    claim = _claim("nb", "mig.nvidia.com", _profile("1g.10gb"))
    out = alloc.allocate(NODE, [claim])
    cmp = compare_with_first_fit(pref, alloc, NODE, [claim], out.allocations)
    assert cmp["decidedBy"] == "preference"
    assert cmp["firstFit"]["devices"] == ["gpu.nvidia.com/gpu-node-01/gpu-0-mig-1g10gb-19-0"]
    assert cmp["chosen"]["score"] < cmp["firstFit"]["score"]
    assert "not a rule" in describe_choice(cmp)
    whole = _claim("g", "gpu.nvidia.com")
    out = alloc.allocate(NODE, [whole])
    assert compare_with_first_fit(pref, alloc, NODE, [whole], out.allocations)["decidedBy"] == "rules"


class _Reversed:
    """A preference that tries upstream's last candidates first."""

    name = "reversed"
    calls = 0

    def keys(self, ctx: SearchContext, request: RequestView, devices: Sequence[DeviceEntry]) -> list[Any]:
        _Reversed.calls += 1
        return [-i for i in range(len(devices))]


def test_budget_spent_in_the_preferred_order_falls_back_to_upstream_order() -> None:
    # Four claims of one device each that must share a NUMA value 0, devices of NUMA 1 listed last:
    # reversed, the search wades through NUMA-1 devices first and runs out of its small budget.
    classes, slices = _pairs_node()
    devices = slices[0]["spec"]["devices"]
    claim = _claim("c", "gpu", count=3)
    claim["spec"]["devices"]["constraints"] = [{"matchAttribute": "resource.kubernetes.io/numaNode"}]
    in_use = [_plain(f"u{i}", f"gpu-{i}") for i in (5, 6)]  # NUMA 1 has only 4 and 7: three cannot fit
    assert len(devices) == 8
    up = Allocator(classes, slices, in_use, max_steps=12).allocate(NODE, [claim])
    assert _devices(up) == ["gpu-0", "gpu-1", "gpu-2"]
    rev = Allocator(classes, slices, in_use, max_steps=12, prefer=_Reversed()).allocate(NODE, [claim])
    assert _devices(rev) == ["gpu-0", "gpu-1", "gpu-2"]  # the fallback, not a "does not fit"
    assert _Reversed.calls > 0


def test_a_preference_must_give_one_key_per_device() -> None:
    class Short:
        name = "short"

        def keys(self, ctx: SearchContext, request: RequestView, devices: Sequence[DeviceEntry]) -> list[Any]:
            return [0]

    classes, slices = _pairs_node()
    with pytest.raises(ValueError, match="1 keys for 8 devices"):
        Allocator(classes, slices, prefer=Short()).allocate(NODE, [_claim("c", "gpu")])


def test_requests_with_selector_errors_keep_upstream_order() -> None:
    classes, slices = _pairs_node()
    slices[0]["spec"]["devices"][0]["attributes"].pop("type")
    claim = _claim("c", "gpu", "device.attributes['gpu.example.com'].type == 'gpu'")
    with pytest.raises(AllocationError, match="no such key"):
        Allocator(classes, slices).allocate(NODE, [claim])
    with pytest.raises(AllocationError, match="no such key"):
        Allocator(classes, slices, prefer=_Reversed()).allocate(NODE, [claim])


CASES = sorted(conformance_dir().glob("*.yaml"))


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_every_conformance_case_keeps_its_verdict_with_each_preference(path: Path) -> None:
    case = load_case(path)

    def verdict(policy: str | None) -> Any:
        try:
            out = run_case(case, prefer=make_device_preference(policy) if policy else None)
        except AllocationError as err:
            return ("error", str(err))
        if out.allocations is None:
            return ("no fit",)
        return (
            "fit",
            [sorted(r["request"] for r in a["devices"]["results"]) for a in out.allocations],
        )

    upstream = verdict(None)
    for policy in DEVICE_PREFERENCES:
        assert verdict(policy) == upstream, policy


def test_features_unchanged() -> None:
    assert FeatureGates().partitionable_devices
