"""Allocator behaviour beyond the upstream table: index reuse, in-use state, pruning, step budget."""

from __future__ import annotations

import pytest

from kdra.allocator import AllocatedState, Allocator, AllocatorIndex, FeatureGates, NodeAllocationError
from kdra.allocator.allocator import QUICK_SEARCH_STEPS
from kdra.errors import AllocationError

from .helpers import DRIVER, allocated, claim, device, device_class, node, request, slice_

CLASSES = {"gpu": device_class("gpu")}


def gpus(n: int, node_name: str = "node-1", **attrs: object) -> dict:
    return slice_(f"{node_name}-slice", [device(f"gpu-{i}", **attrs) for i in range(n)], node=node_name)


def results(outcome) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    assert outcome.allocations is not None, str(outcome.explanation)
    return [(r["request"], r["device"]) for a in outcome.allocations for r in a["devices"]["results"]]


def test_first_fit_in_slice_order_and_node_selector() -> None:
    out = Allocator(CLASSES, [gpus(4)], [], FeatureGates()).allocate(node(), [claim("c", request("r", 2))])
    assert results(out) == [("r", "gpu-0"), ("r", "gpu-1")]
    assert out.allocations is not None
    sel = out.allocations[0]["nodeSelector"]
    assert sel == {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}
        ]
    }


def test_devices_of_allocated_claims_are_in_use_but_admin_access_results_are_not() -> None:
    used = [allocated("a", "gpu-0"), allocated("b", "gpu-1", adminAccess=True)]
    out = Allocator(CLASSES, [gpus(3)], used, FeatureGates()).allocate(node(), [claim("c", request("r", 2))])
    assert results(out) == [("r", "gpu-1"), ("r", "gpu-2")]


def test_index_is_reused_across_nodes_and_states() -> None:
    slices = [gpus(2, f"node-{i}") for i in range(5)]
    index = AllocatorIndex(CLASSES, slices, FeatureGates())
    state = AllocatedState.from_claims([allocated("a", "gpu-0", "gpu-1", pool="node-0")], index.features)
    alloc = Allocator.from_index(index, state)
    outs = [alloc.allocate(node(f"node-{i}"), [claim("c", request("r", 1))]) for i in range(5)]
    assert [o.allocations is not None for o in outs] == [False, True, True, True, True]
    # Selector results are memoised on the device entries: a second allocator evaluates no CEL.
    dev = index.slices[1].devices[0]
    assert dev.matches, "selector result cached on the device entry"
    again = Allocator.from_index(index, AllocatedState()).allocate(
        node("node-0"), [claim("c", request("r", 2))]
    )
    assert results(again) == [("r", "gpu-0"), ("r", "gpu-1")]


def test_slice_cache_keeps_compiled_devices_for_unchanged_slices() -> None:
    s = gpus(2)
    a = AllocatorIndex(CLASSES, [s], FeatureGates())
    b = AllocatorIndex(CLASSES, [s], FeatureGates())
    assert a.slices[0] is b.slices[0]
    versioned = dict(s, metadata={"name": "x", "uid": "u1", "resourceVersion": "7"})
    c = AllocatorIndex(CLASSES, [versioned], FeatureGates())
    d = AllocatorIndex(CLASSES, [dict(versioned)], FeatureGates())
    assert c.slices[0] is d.slices[0]


def test_claim_limit_of_32_devices() -> None:
    with pytest.raises(AllocationError, match="exceeds the claim limit of 32"):
        Allocator(CLASSES, [gpus(40)], [], FeatureGates()).allocate(node(), [claim("c", request("r", 33))])


def test_invalid_pool_is_a_node_error_only_when_nothing_else_fits() -> None:
    dup = slice_("dup", [device("gpu-0"), device("gpu-0")], pool="bad")
    alloc = Allocator(CLASSES, [dup], [], FeatureGates())
    with pytest.raises(NodeAllocationError, match="invalid resource pools were encountered") as info:
        alloc.allocate(node(), [claim("c", request("r"))])
    assert info.value.invalid_pools == {f"{DRIVER}/bad": "duplicate device name gpu-0"}
    assert info.value.explanation is not None
    assert f"pool {DRIVER}/bad skipped: invalid (duplicate device name gpu-0)" in str(info.value.explanation)
    ok = Allocator(CLASSES, [dup, gpus(1)], [], FeatureGates()).allocate(node(), [claim("c", request("r"))])
    assert results(ok) == [("r", "gpu-0")]


def test_pruning_never_changes_the_answer() -> None:
    slices = [slice_("s", [device(f"gpu-{i}", numa=i % 2) for i in range(6)])]
    claims = [
        claim("a", request("r", 2), constraints=[{"matchAttribute": f"{DRIVER}/numa"}]),
        claim("b", request("r", 2), constraints=[{"matchAttribute": f"{DRIVER}/numa"}]),
    ]
    for extra in ([], [claim("c", request("r", 3))], [claim("d", request("r", 1))]):
        pruned = Allocator(CLASSES, slices, [], FeatureGates()).allocate(node(), claims + extra)
        full = Allocator(CLASSES, slices, [], FeatureGates(), prune=False).allocate(node(), claims + extra)
        assert (pruned.allocations is None) == (full.allocations is None)
        if pruned.allocations is not None:
            assert results(pruned) == results(full)


def test_hopeless_request_gives_up_without_searching() -> None:
    out = Allocator(CLASSES, [gpus(8)], [], FeatureGates()).allocate(node(), [claim("c", request("r", 9))])
    assert out.allocations is None and out.steps < 2 * QUICK_SEARCH_STEPS
    many = [claim(f"c{i}", request("r")) for i in range(10)]
    out = Allocator(CLASSES, [gpus(8)], [], FeatureGates()).allocate(node(), many)
    assert out.allocations is None and out.steps < 2 * QUICK_SEARCH_STEPS
    assert "together the claims need 10 devices" in str(out.explanation)


def test_search_budget_turns_into_unschedulable_with_explanation() -> None:
    # 20 devices, two requests of 6; the second request's devices must all share a value nobody
    # shares with the first - without pruning the search would try C(20, 6) first choices.
    devs = [device(f"gpu-{i}", grp=i % 2) for i in range(20)]
    c = claim(
        "c",
        request("a", 6),
        request("b", 6),
        constraints=[{"requests": ["a", "b"], "matchAttribute": f"{DRIVER}/grp"}],
    )
    blocker = [allocated("x", *[f"gpu-{i}" for i in range(0, 20, 2)][:5])]
    out = Allocator(
        CLASSES, [slice_("s", devs)], blocker, FeatureGates(), prune=False, max_steps=500
    ).allocate(node(), [c])
    assert out.allocations is None and out.gave_up
    assert out.explanation is not None and out.explanation.search_limit_hit
    # It says it gave up, not that the claims do not fit.
    assert str(out.explanation).startswith("node node-1: gave up searching for an allocation")
    assert out.explanation.summary.startswith("gave up: the search stopped after")
    assert "without finding an allocation or proving there is none" in str(out.explanation)
    # With the exact pruning the same budget is enough to prove it does not fit (no group of 12 GPUs
    # sharing a value is free): not gave up, and an explanation that says so.
    out = Allocator(CLASSES, [slice_("s", devs)], blocker, FeatureGates(), max_steps=500).allocate(
        node(), [c]
    )
    assert out.allocations is None and not out.gave_up
    assert out.steps < 500
    assert str(out.explanation).startswith("node node-1: cannot allocate all claims")


def test_firstavailable_demand_counts_the_smallest_alternative() -> None:
    # Two claims share three GPUs; one wants 2 or else 1 (firstAvailable), the other 2: together they
    # need at least 3 of 3 - so the explanation must not say "need 4" (the first alternative only).
    devs = [device(f"gpu-{i}") for i in range(3)]
    first = claim(
        "first",
        {
            "name": "r",
            "firstAvailable": [
                {"name": "two", "deviceClassName": "gpu", "count": 2},
                {"name": "one", "deviceClassName": "gpu", "count": 1},
            ],
        },
    )
    second = claim("second", request("r", 2))
    blocker = [allocated("x", "gpu-0")]
    out = Allocator(CLASSES, [slice_("s", devs)], blocker, FeatureGates()).allocate(node(), [first, second])
    assert out.allocations is None
    assert "together the claims need 3 devices, but only 2 different usable devices exist" in str(
        out.explanation
    )


def test_shares_get_fresh_uuid_and_consumed_capacity() -> None:
    dev = {"name": "nic", "allowMultipleAllocations": True, "capacity": {"bw": {"value": "10G"}}}
    req = request("r", capacity={"requests": {"bw": "4G"}})
    alloc = Allocator(CLASSES, [slice_("s", [dev])], [], FeatureGates())
    out = alloc.allocate(node(), [claim("a", req), claim("b", req)])
    assert out.allocations is not None
    shares = [a["devices"]["results"][0] for a in out.allocations]
    assert [s["consumedCapacity"] for s in shares] == [{"bw": "4G"}, {"bw": "4G"}]
    assert shares[0]["shareID"] != shares[1]["shareID"]
    used = [allocated("x", "nic", pool="node-1", shareID="s1", consumedCapacity={"bw": "8G"})]
    out = Allocator(CLASSES, [slice_("s", [dev])], used, FeatureGates()).allocate(node(), [claim("a", req)])
    assert out.allocations is None
    assert "bw: needs 4G, 2G of 10G left" in str(out.explanation)


def test_distinct_attribute_remembers_one_value_per_request_in_1_36_and_every_device_in_1_37() -> None:
    # kube-scheduler 1.36 compares a new device only with the last device of each request, so three
    # devices with values 0, 1, 0 satisfy distinctAttribute for one request with count 3; 1.37 compares
    # with every device, so they do not.
    devs = [device("gpu-0", numa=0), device("gpu-1", numa=1), device("gpu-2", numa=0)]
    c = claim("c", request("r", 3), constraints=[{"distinctAttribute": f"{DRIVER}/numa"}])
    for prune in (True, False):
        v136 = FeatureGates.for_version("1.36")
        out = Allocator(CLASSES, [slice_("s", devs)], [], v136, prune=prune).allocate(node(), [c])
        assert results(out) == [("r", "gpu-0"), ("r", "gpu-1"), ("r", "gpu-2")]
        v137 = FeatureGates.for_version("1.37")
        out = Allocator(CLASSES, [slice_("s", devs)], [], v137, prune=prune).allocate(node(), [c])
        assert out.allocations is None
    # Across requests with one device each it is pairwise in both.
    c2 = claim(
        "c", request("a"), request("b"), request("d"), constraints=[{"distinctAttribute": f"{DRIVER}/numa"}]
    )
    for version in ("1.36", "1.37"):
        out = Allocator(CLASSES, [slice_("s", devs)], [], FeatureGates.for_version(version)).allocate(
            node(), [c2]
        )
        assert out.allocations is None
        assert "distinctAttribute" in str(out.explanation)


def test_counter_demand_prunes_and_explains() -> None:
    devs = [
        {
            "name": f"d{i}",
            "attributes": {"g": {"int": i % 2}},
            "consumesCounters": [{"counterSet": "cs", "counters": {"c": {"value": "1"}}}],
        }
        for i in range(24)
    ]
    sl = [
        slice_("a", devs, pool="p"),
        slice_("b", [], pool="p", sharedCounters=[{"name": "cs", "counters": {"c": {"value": "9"}}}]),
    ]
    del sl[1]["spec"]["devices"]
    for s in sl:
        s["spec"]["pool"]["resourceSliceCount"] = 2
    c = claim("x", request("a", 5), request("b", 5), constraints=[{"matchAttribute": f"{DRIVER}/g"}])
    out = Allocator(CLASSES, sl, [], FeatureGates()).allocate(node(), [c])
    assert out.allocations is None and out.steps < 2 * QUICK_SEARCH_STEPS
    assert out.explanation is not None
    assert (
        out.explanation.summary
        == f"the requests need at least 10 of counter cs/c in pool {DRIVER}/p, only 9 left"
    )


def test_counters_of_a_rejected_tainted_device_are_released() -> None:
    # kubernetes#140436, fixed by #140431 and backported to release-1.36 (#140663): a candidate rejected
    # for an untolerated taint must not keep the counters it reserved.
    consume = [{"counterSet": "cs", "counters": {"mem": {"value": "8"}}}]
    devs = [
        {"name": "tainted", "consumesCounters": consume, "taints": [{"key": "k", "effect": "NoSchedule"}]},
        {"name": "healthy", "consumesCounters": consume},
    ]
    sl = [
        slice_("a", devs, pool="p"),
        slice_("b", [], pool="p", sharedCounters=[{"name": "cs", "counters": {"mem": {"value": "8"}}}]),
    ]
    del sl[1]["spec"]["devices"]
    for s in sl:
        s["spec"]["pool"]["resourceSliceCount"] = 2
    out = Allocator(CLASSES, sl, [], FeatureGates()).allocate(node(), [claim("c", request("r"))])
    assert results(out) == [("r", "healthy")]


def test_bad_quantities_are_input_errors_naming_the_field() -> None:
    from kdra.errors import InputError

    bad = slice_("s", [{"name": "gpu-0", "capacity": {"memory": {"value": "lots"}}}])
    with pytest.raises(InputError, match=r"ResourceSlice s: spec.devices\[0\].capacity\[memory\].value"):
        Allocator(CLASSES, [bad], [], FeatureGates())


def test_slice_cache_never_mixes_up_same_name_and_version_with_different_content() -> None:
    a = dict(gpus(1), metadata={"name": "s", "resourceVersion": "1"})
    b = dict(gpus(3), metadata={"name": "s", "resourceVersion": "1"})
    first = Allocator(CLASSES, [a], [], FeatureGates()).allocate(node(), [claim("c", request("r", 2))])
    second = Allocator(CLASSES, [b], [], FeatureGates()).allocate(node(), [claim("c", request("r", 2))])
    assert first.allocations is None
    assert results(second) == [("r", "gpu-0"), ("r", "gpu-1")]


def test_many_claims_with_many_devices_do_not_hit_the_recursion_limit() -> None:
    claims = [claim(f"c{i}", request("r", 32)) for i in range(40)]
    out = Allocator(CLASSES, [gpus(40 * 32)], [], FeatureGates()).allocate(node(), claims)
    assert out.allocations is not None
    assert sum(len(a["devices"]["results"]) for a in out.allocations) == 1280
