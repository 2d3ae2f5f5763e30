"""What the allocator does differently in Kubernetes 1.36, 1.37 and 1.38 (docs/versions.md), on small
hand-made worlds. Every expectation here was checked against the real allocators (support.oracle) when
written; the differential test keeps checking the same rules on random worlds."""

from __future__ import annotations

from typing import Any

import pytest

from kdra.allocator import Allocator, FeatureGates, NodeAllocationError
from kdra.errors import AllocationError

V136, V137 = FeatureGates.for_version("1.36"), FeatureGates.for_version("1.37")
V138 = FeatureGates.for_version("1.38")


def slice_(name: str, driver: str, pool: str, node: str, count: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "pool": {"name": pool, "generation": 1, "resourceSliceCount": count},
            "nodeName": node,
            **spec,
        },
    }


def counters(mem: str) -> list[dict[str, Any]]:
    return [{"name": "cs", "counters": {"mem": {"value": mem}}}]


def consuming(name: str, mem: str) -> dict[str, Any]:
    return {"name": name, "consumesCounters": [{"counterSet": "cs", "counters": {"mem": {"value": mem}}}]}


def cls(name: str, driver: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
    }


def claim(name: str, *requests: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": list(requests)}},
    }


def exactly(name: str, cls_name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": cls_name, **extra}}


N1 = {"metadata": {"name": "n1"}}


def test_shared_counters_are_keyed_by_pool_name_in_1_36_and_by_driver_and_pool_in_1_37() -> None:
    # Two drivers each publish a pool named "p" with a 40Gi counter; one device of each takes 30Gi.
    slices = [
        slice_("a-counters", "a.example.com", "p", "n1", 2, sharedCounters=counters("40Gi")),
        slice_("a-devices", "a.example.com", "p", "n1", 2, devices=[consuming("d0", "30Gi")]),
        slice_("b-counters", "b.example.com", "p", "n1", 2, sharedCounters=counters("40Gi")),
        slice_("b-devices", "b.example.com", "p", "n1", 2, devices=[consuming("d0", "30Gi")]),
    ]
    classes = [cls("ga", "a.example.com"), cls("gb", "b.example.com")]
    c = claim("c", exactly("ra", "ga"), exactly("rb", "gb"))
    for prune in (True, False):
        # 1.36: both devices draw on the same "p" counters: 60Gi of 40Gi.
        assert Allocator(classes, slices, [], V136, prune=prune).allocate(N1, [c]).allocations is None
        got = Allocator(classes, slices, [], V137, prune=prune).allocate(N1, [c]).allocations
        assert got is not None
        assert [(r["driver"], r["device"]) for r in got[0]["devices"]["results"]] == [
            ("a.example.com", "d0"),
            ("b.example.com", "d0"),
        ]


def test_counter_slices_of_another_node_are_visible_in_1_36_only() -> None:
    # Pool "px" (for node n2) is incomplete: 2 of 3 slices. Its counter slice is published for n2, and
    # 1.36 shows slices with sharedCounters on every node, so an All request on n1 meets the incomplete
    # pool; 1.37 does not see it from n1.
    slices = [
        slice_("x-counters", "a.example.com", "px", "n2", 3, sharedCounters=counters("40Gi")),
        slice_("x-devices", "a.example.com", "px", "n2", 3, devices=[consuming("d0", "10Gi")]),
        slice_("n1-gpus", "a.example.com", "n1", "n1", 1, devices=[{"name": "g0"}]),
    ]
    classes = [cls("ga", "a.example.com")]
    c = claim("all", exactly("r", "ga", allocationMode="All"))
    with pytest.raises(AllocationError) as info:
        Allocator(classes, slices, [], V136).allocate(N1, [c])
    assert str(info.value) == (
        "claim default/all, request r: asks for all devices, but resource pool a.example.com/px is currently "
        "being updated"
    )
    got = Allocator(classes, slices, [], V137).allocate(N1, [c]).allocations
    assert got is not None and [r["device"] for r in got[0]["devices"]["results"]] == ["g0"]


@pytest.mark.parametrize("features", [V136, V137], ids=["1.36", "1.37"])
def test_result_tolerations_carry_the_api_defaulted_operator(features: FeatureGates) -> None:
    taint = {"key": "k", "value": "v", "effect": "NoSchedule"}
    slices = [slice_("s", "a.example.com", "p", "n1", 1, devices=[{"name": "g0", "taints": [taint]}])]
    c = claim("t", exactly("r", "ga", tolerations=[{"key": "k", "value": "v"}]))
    got = Allocator([cls("ga", "a.example.com")], slices, [], features).allocate(N1, [c]).allocations
    assert got is not None
    assert got[0]["devices"]["results"][0]["tolerations"] == [{"key": "k", "value": "v", "operator": "Equal"}]


def test_claim_limit_message_follows_the_release() -> None:
    slices = [slice_("s", "a.example.com", "p", "n1", 1, devices=[{"name": "g0"}])]
    c = claim("big", exactly("a", "ga", count=20), exactly("b", "ga", count=20))
    classes = [cls("ga", "a.example.com")]
    with pytest.raises(AllocationError, match=r"^claim default/big: number of requested devices 40 exceeds"):
        Allocator(classes, slices, [], V136).allocate(N1, [c])
    with pytest.raises(
        AllocationError,
        match=r"^claim default/big, request b: adding 20 devices exceeds the claim limit of 32, "
        r"with 20 already",
    ):
        Allocator(classes, slices, [], V137).allocate(N1, [c])


def test_cel_runtime_errors_name_the_device_in_1_37() -> None:
    slices = [slice_("s", "a.example.com", "p", "n1", 1, devices=[{"name": "g0"}])]
    c = claim(
        "c",
        exactly(
            "r", "ga", selectors=[{"cel": {"expression": 'device.attributes["a.example.com"].model == "x"'}}]
        ),
    )
    classes = [cls("ga", "a.example.com")]
    with pytest.raises(AllocationError) as old:
        Allocator(classes, slices, [], V136).allocate(N1, [c])
    assert str(old.value) == "claim default/c: selector #0: CEL runtime error: no such key: model"
    with pytest.raises(AllocationError) as new:
        Allocator(classes, slices, [], V137).allocate(N1, [c])
    assert str(new.value) == (
        "claim default/c: selector #0 on device a.example.com/p/g0: CEL runtime error: no such key: model. "
        "consider using CEL optional chaining (.? followed by orValue()) or guarding the check with has() "
        "for optional fields"
    )


def test_all_with_consumable_capacity_drops_full_devices_in_1_36_and_fails_in_1_37() -> None:
    # Two shareable NICs of 10G; nic0 already gives 8G to another claim. An All request for 4G each:
    # 1.36 leaves nic0 out of the All set and allocates nic1 alone; 1.37 collects both (static capacity
    # suffices), then fails on nic0 -- or, with firstAvailable, takes the next alternative.
    nic = {"allowMultipleAllocations": True, "capacity": {"bw": {"value": "10G"}}}
    slices = [
        slice_("s", "a.example.com", "p", "n1", 1, devices=[{"name": n, **nic} for n in ("nic0", "nic1")])
    ]
    used = {
        "metadata": {"name": "used", "namespace": "default"},
        "spec": {"devices": {"requests": []}},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "r",
                            "driver": "a.example.com",
                            "pool": "p",
                            "device": "nic0",
                            "shareID": "7d3c1f2e-0000-4000-8000-000000000001",
                            "consumedCapacity": {"bw": "8G"},
                        }
                    ]
                }
            }
        },
    }
    classes = [cls("na", "a.example.com")]
    all_4g = {"deviceClassName": "na", "allocationMode": "All", "capacity": {"requests": {"bw": "4G"}}}
    c = claim("c", {"name": "r", "exactly": all_4g})
    got = Allocator(classes, slices, [used], V136).allocate(N1, [c]).allocations
    assert got is not None and [r["device"] for r in got[0]["devices"]["results"]] == ["nic1"]
    assert Allocator(classes, slices, [used], V137).allocate(N1, [c]).allocations is None
    one = {"deviceClassName": "na", "capacity": {"requests": {"bw": "1G"}}}
    fa = claim("fa", {"name": "r", "firstAvailable": [{"name": "all", **all_4g}, {"name": "one", **one}]})
    got = Allocator(classes, slices, [used], V137).allocate(N1, [fa]).allocations
    assert got is not None
    assert [(r["request"], r["device"]) for r in got[0]["devices"]["results"]] == [("r/one", "nic0")]
    got = Allocator(classes, slices, [used], V136).allocate(N1, [fa]).allocations
    assert got is not None
    assert [(r["request"], r["device"]) for r in got[0]["devices"]["results"]] == [("r/all", "nic1")]


def test_all_meeting_an_incomplete_pool_rules_out_the_node_only_in_1_38() -> None:
    # Node n1's pool is incomplete (1 of 2 slices published): an All request there fails the whole
    # attempt in 1.36/1.37; in 1.38 the error wraps ErrFailedAllocationOnNode
    # (structured/internal/stable/allocator_stable.go), so kube-scheduler tries n2.
    slices = [
        slice_("n1-gpus", "a.example.com", "n1", "n1", 2, devices=[{"name": "g0"}]),
        slice_("n2-gpus", "a.example.com", "n2", "n2", 1, devices=[{"name": "g0"}]),
    ]
    classes = [cls("ga", "a.example.com")]
    c = claim("all", exactly("r", "ga", allocationMode="All"))
    message = (
        "claim default/all, request r: asks for all devices, but resource pool a.example.com/n1 is currently "
        "being updated"
    )
    with pytest.raises(AllocationError) as info:
        Allocator(classes, slices, [], V137).allocate(N1, [c])
    assert str(info.value) == message and not isinstance(info.value, NodeAllocationError)
    with pytest.raises(NodeAllocationError) as node_info:
        Allocator(classes, slices, [], V138).allocate(N1, [c])
    assert str(node_info.value) == message
    got = Allocator(classes, slices, [], V138).allocate({"metadata": {"name": "n2"}}, [c]).allocations
    assert got is not None and [r["pool"] for r in got[0]["devices"]["results"]] == ["n2"]


def test_constraint_on_a_list_attribute_fails_the_attempt_in_1_38() -> None:
    # Without DRAListTypeAttributes a matchAttribute over a list-valued attribute: 1.37 takes the first
    # device (nothing to compare it with yet), 1.38 fails with "unsupported attribute value"
    # (structured/internal/stable/constraint.go); the stable allocator names the claim and request, the
    # incubating one (an alpha gate on) does not.
    dev = {"name": "g0", "attributes": {"model": {"strings": ["a", "b"]}}}
    slices = [slice_("s", "a.example.com", "p", "n1", 1, devices=[dev])]
    c = claim("m", exactly("r", "ga"))
    c["spec"]["devices"]["constraints"] = [{"matchAttribute": "a.example.com/model"}]
    classes = [cls("ga", "a.example.com")]
    got = Allocator(classes, slices, [], V137).allocate(N1, [c]).allocations
    assert got is not None and [r["device"] for r in got[0]["devices"]["results"]] == ["g0"]
    message = "device a.example.com/p/g0: unsupported attribute value for a.example.com/model"
    with pytest.raises(AllocationError) as info:
        Allocator(classes, slices, [], V138).allocate(N1, [c])
    assert str(info.value) == f"claim default/m, request r: {message}"
    with pytest.raises(AllocationError) as info:
        Allocator(classes, slices, [], V138.with_gates(DRADerivedAttributes=True)).allocate(N1, [c])
    assert str(info.value) == message


def test_versions_differing_only_in_build_metadata_match_in_1_38() -> None:
    # 1.38 compares version attributes as semver (Version.Equals: build metadata does not count); 1.37
    # compared the strings.
    devs = [
        {"name": "g0", "attributes": {"fw": {"version": "1.2.3+build.1"}}},
        {"name": "g1", "attributes": {"fw": {"version": "1.2.3+build.2"}}},
    ]
    slices = [slice_("s", "a.example.com", "p", "n1", 1, devices=devs)]
    c = claim("m", exactly("r", "ga", count=2))
    c["spec"]["devices"]["constraints"] = [{"matchAttribute": "a.example.com/fw"}]
    classes = [cls("ga", "a.example.com")]
    assert Allocator(classes, slices, [], V137).allocate(N1, [c]).allocations is None
    got = Allocator(classes, slices, [], V138).allocate(N1, [c]).allocations
    assert got is not None and [r["device"] for r in got[0]["devices"]["results"]] == ["g0", "g1"]
    c["spec"]["devices"]["constraints"] = [{"distinctAttribute": "a.example.com/fw"}]
    assert Allocator(classes, slices, [], V137).allocate(N1, [c]).allocations is not None
    assert Allocator(classes, slices, [], V138).allocate(N1, [c]).allocations is None


def test_cel_compile_errors_leave_out_the_empty_container_in_1_38() -> None:
    # cel.dev/cel-go 0.33 (1.38) no longer appends " (in container '')" to an undeclared reference.
    slices = [slice_("s", "a.example.com", "p", "n1", 1, devices=[{"name": "g0"}])]
    c = claim("m", exactly("r", "ga", selectors=[{"cel": {"expression": "noSuchVar"}}]))
    classes = [cls("ga", "a.example.com")]
    want = "claim default/m: selector #0: CEL compile error: compilation failed: ERROR: <input>:1:1: "
    with pytest.raises(AllocationError) as info:
        Allocator(classes, slices, [], V137).allocate(N1, [c])
    assert str(info.value).startswith(want + "undeclared reference to 'noSuchVar' (in container '')")
    with pytest.raises(AllocationError) as info:
        Allocator(classes, slices, [], V138).allocate(N1, [c])
    assert str(info.value).startswith(want + "undeclared reference to 'noSuchVar'\n")


@pytest.mark.parametrize(
    ("expression", "v137", "v138"),
    [
        ('device.driver == "a.example.com"', "error", "allocation"),
        ('device.attributes["a.example.com"].ok', "error", "allocation"),
        ('device.attributes["a.example.com"].size() == 2', "error", "allocation"),
        ('"bad" in device.attributes["a.example.com"]', "error", "unschedulable"),
        ('device.attributes["a.example.com"].bad == true', "error", "invalid"),
        ('has(device.attributes["a.example.com"].bad)', "error", "invalid"),
    ],
)
def test_an_unrepresentable_attribute_fails_only_the_selector_that_reads_it_in_1_38(
    expression: str, v137: str, v138: str
) -> None:
    # 1.37 converts every attribute before evaluating (any selector fails on the device); 1.38's CEL
    # reads attributes lazily (compile.go nameToAttributes): checked against both oracles.
    dev = {"name": "g0", "attributes": {"bad": {}, "ok": {"bool": True}}}
    slices = [slice_("s", "a.example.com", "p", "n1", 1, devices=[dev])]
    classes = [{"metadata": {"name": "ga"}, "spec": {"selectors": [{"cel": {"expression": expression}}]}}]
    c = claim("m", exactly("r", "ga"))
    prefix = "class ga: selector #0 on device a.example.com/p/g0: CEL runtime error: attribute bad: "
    for features, want in ((V137, v137), (V138, v138)):
        if want in ("error", "invalid"):
            with pytest.raises(AllocationError) as info:
                Allocator(classes, slices, [], features).allocate(N1, [c])
            tail = (
                "unsupported attribute value"
                if want == "error"
                else ("value is invalid or its type is not supported by this version")
            )
            assert str(info.value) == prefix + tail
        else:
            got = Allocator(classes, slices, [], features).allocate(N1, [c]).allocations
            assert (got is not None) == (want == "allocation")


def shared_device(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "allowMultipleAllocations": True, "capacity": {"mem": {"value": "10"}}, **extra}


def test_capacity_names_are_fully_qualified_in_1_38() -> None:
    # A request for "a.example.com/mem" is the device's bare "mem" in 1.38 (resolveCapacityRequests);
    # 1.37 looked the name up as written. The result names it as the slice does.
    slices = [slice_("s", "a.example.com", "p", "n1", 1, devices=[shared_device("g0")])]
    classes = [cls("ga", "a.example.com")]
    c = claim("m", exactly("r", "ga", capacity={"requests": {"a.example.com/mem": "4"}}))
    assert Allocator(classes, slices, [], V137).allocate(N1, [c]).allocations is None
    got = Allocator(classes, slices, [], V138).allocate(N1, [c]).allocations
    assert got is not None and got[0]["devices"]["results"][0]["consumedCapacity"] == {"mem": "4"}
    both = claim("b", exactly("r", "ga", capacity={"requests": {"mem": "1", "a.example.com/mem": "1"}}))
    with pytest.raises(AllocationError) as info:
        Allocator(classes, slices, [], V138).allocate(N1, [both])
    assert str(info.value) == (
        'claim default/b, request r: checking capacity for device a.example.com/p/g0: capacity "mem" '
        'requested both as "a.example.com/mem" and as "mem"'
    )


def test_a_negative_capacity_request_is_refused_before_rounding_in_1_38() -> None:
    policy = {"default": "1", "validRange": {"min": "1", "max": "10", "step": "1"}}
    dev = shared_device("g0", capacity={"mem": {"value": "10", "requestPolicy": policy}})
    slices = [slice_("s", "a.example.com", "p", "n1", 1, devices=[dev])]
    c = claim("m", exactly("r", "ga", capacity={"requests": {"mem": "-1"}}))
    classes = [cls("ga", "a.example.com")]
    assert Allocator(classes, slices, [], V137).allocate(N1, [c]).allocations is not None
    with pytest.raises(AllocationError) as info:
        Allocator(classes, slices, [], V138).allocate(N1, [c])
    assert str(info.value) == (
        "claim default/m, request r: checking capacity for device a.example.com/p/g0: capacity "
        '"a.example.com/mem": capacity value is negative: request -1'
    )


def test_a_live_share_keeps_a_device_from_exclusive_use_in_1_38() -> None:
    # g0 no longer allows multiple allocations but still carries a share: 1.38 does not hand it out
    # exclusively (allocator_*.go: "Device has an active shared allocation"), 1.37 did.
    slices = [slice_("s", "a.example.com", "p", "n1", 1, devices=[{"name": "g0"}, {"name": "g1"}])]
    held = claim("held", exactly("r", "ga"))
    held["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": "r",
                        "driver": "a.example.com",
                        "pool": "p",
                        "device": "g0",
                        "shareID": "00000000-0000-4000-8000-000000000001",
                    }
                ]
            }
        }
    }
    c = claim("m", exactly("r", "ga"))
    classes = [cls("ga", "a.example.com")]
    for features, device in ((V137, "g0"), (V138, "g1")):
        got = Allocator(classes, slices, [held], features).allocate(N1, [c]).allocations
        assert got is not None and got[0]["devices"]["results"][0]["device"] == device
