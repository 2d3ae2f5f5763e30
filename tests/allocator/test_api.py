"""The allocator API the scheduler builds on: reference-counted AllocatedState, a long-lived Allocator
that follows state changes, deterministic shareIDs, the slice cache across stores, lazy explanations
and devices_of_class."""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest

from kdra.allocator import (
    AllocatedState,
    Allocator,
    AllocatorIndex,
    FeatureGates,
    LazyExplanation,
    NodeAllocationError,
    SliceCache,
    random_share_id,
)
from kdra.allocator.index import DEFAULT_SLICE_CACHE
from kdra.cluster import MemoryStore

from .helpers import DRIVER, allocated, claim, device, device_class, node, request, slice_

CLASSES = {"gpu": device_class("gpu")}
F = FeatureGates()


def gpus(n: int, node_name: str = "node-1") -> dict[str, Any]:
    return slice_(f"{node_name}-slice", [device(f"gpu-{i}") for i in range(n)], node=node_name)


def share(name: str, dev: str, share_id: str, **consumed: str) -> dict[str, Any]:
    return allocated(name, dev, shareID=share_id, consumedCapacity=dict(consumed))


def same(a: AllocatedState, b: AllocatedState) -> bool:
    return (a.dedicated, a.shared, a.consumed) == (b.dedicated, b.shared, b.consumed)


# -- AllocatedState -------------------------------------------------------------------------------


def test_remove_claim_keeps_a_device_in_use_while_another_claim_holds_it() -> None:
    a, b = allocated("a", "gpu-0", "gpu-1"), allocated("b", "gpu-1")
    state = AllocatedState.from_claims([a, b], F)
    key1 = (DRIVER, "node-1", "gpu-1")
    state.remove_claim(a, F)
    assert state.dedicated == {key1}
    state.remove_claim(b, F)
    assert state.dedicated == set()
    state.remove_claim(b, F)  # removing what is not there changes nothing
    assert state.dedicated == set()


def test_admin_access_results_are_neither_added_nor_removed() -> None:
    admin = allocated("x", "gpu-0", adminAccess=True)
    state = AllocatedState.from_claims([allocated("a", "gpu-0")], F)
    state.add_claim(admin, F)
    state.remove_claim(admin, F)
    assert state.dedicated == {(DRIVER, "node-1", "gpu-0")}


def test_removing_a_share_subtracts_its_consumed_capacity_exactly() -> None:
    s1 = share("a", "nic", "s1", bw="4G")
    s2 = share("b", "nic", "s2", bw="2G", mem="1Gi")
    s3 = share("c", "nic", "s3")  # a share without consumedCapacity
    state = AllocatedState.from_claims([s1, s2, s3], F)
    key = (DRIVER, "node-1", "nic")
    assert state.consumed[key] == {"bw": 6 * 10**18, "mem": 2**30 * 10**9}
    state.remove_claim(s2, F)
    assert same(state, AllocatedState.from_claims([s1, s3], F))
    state.remove_claim(s1, F)
    assert same(state, AllocatedState.from_claims([s3], F))
    assert key in state.shared and key not in state.consumed
    state.remove_claim(s3, F)
    assert same(state, AllocatedState())


def test_random_add_remove_sequences_equal_building_from_the_remaining_claims() -> None:
    rng = random.Random(7)
    pool = [allocated(f"d{i}", f"gpu-{rng.randrange(4)}") for i in range(6)]
    pool += [
        share(f"s{i}", f"nic-{rng.randrange(2)}", f"id{i}", bw=f"{rng.randrange(1, 5)}G") for i in range(6)
    ]
    pool.append(allocated("admin", "gpu-0", adminAccess=True))
    for gates in (F, F.with_gates(DRAConsumableCapacity=False, DRAFractionalCapacityRange=False)):
        for _ in range(40):
            state = AllocatedState()
            held: list[dict[str, Any]] = []
            for _ in range(30):
                if held and rng.random() < 0.45:
                    c = held.pop(rng.randrange(len(held)))
                    state.remove_claim(c, gates)
                else:
                    c = rng.choice(pool)
                    held.append(c)
                    state.add_claim(c, gates)
                assert same(state, AllocatedState.from_claims(held, gates))


def test_membership_changed_directly_is_respected() -> None:
    # Callers that edit the sets directly (replay's engine does) do not leave stale counts behind.
    a, s1 = allocated("a", "gpu-0"), share("s", "nic", "s1", bw="4G")
    state = AllocatedState.from_claims([a, s1], F)
    key, nic = (DRIVER, "node-1", "gpu-0"), (DRIVER, "node-1", "nic")
    state.dedicated.discard(key)
    state.shared.discard(nic)
    del state.consumed[nic]
    state.add_claim(a, F)
    state.add_claim(s1, F)
    assert same(state, AllocatedState.from_claims([a, s1], F))
    state.remove_claim(a, F)
    state.remove_claim(s1, F)
    assert same(state, AllocatedState())


def test_version_changes_with_every_effective_change() -> None:
    state = AllocatedState()
    a = allocated("a", "gpu-0")
    v0 = state.version
    state.add_claim(a, F)
    assert state.version > v0
    v1 = state.version
    state.remove_claim(allocated("z", "gpu-9"), F)  # nothing to remove
    assert state.version == v1
    state.remove_claim(a, F)
    assert state.version > v1


# -- a long-lived Allocator follows its state -----------------------------------------------------


def test_one_allocator_follows_state_changes_counters_included() -> None:
    # Two partitions drawing on one counter of 1: only one of them fits at a time.
    consume = [{"counterSet": "cs", "counters": {"c": {"value": "1"}}}]
    sl = [
        slice_("a", [{"name": f"p{i}", "consumesCounters": consume} for i in range(2)], pool="p"),
        slice_("b", [], pool="p", sharedCounters=[{"name": "cs", "counters": {"c": {"value": "1"}}}]),
    ]
    del sl[1]["spec"]["devices"]
    for s in sl:
        s["spec"]["pool"]["resourceSliceCount"] = 2
    state = AllocatedState()
    alloc = Allocator.from_index(AllocatorIndex(CLASSES, sl, F), state)
    one = [claim("c", request("r"))]
    first = alloc.allocate(node(), one)
    assert first.allocations is not None
    taken = {**one[0], "status": {"allocation": first.allocations[0]}}
    state.add_claim(taken, F)
    out = alloc.allocate(node(), one)  # p0 in use, and p1 lacks the counter p0 spent
    assert out.allocations is None and "blocked by counters" in str(out.explanation)
    state.remove_claim(taken, F)
    assert alloc.allocate(node(), one).allocations == first.allocations


# -- shareIDs -------------------------------------------------------------------------------------

NIC = {"name": "nic", "allowMultipleAllocations": True, "capacity": {"bw": {"value": "10G"}}}
BW = request("r", capacity={"requests": {"bw": "4G"}})


def share_ids(alloc: Allocator, claims: list[dict[str, Any]]) -> list[str]:
    out = alloc.allocate(node(), claims)
    assert out.allocations is not None
    return [r["shareID"] for a in out.allocations for r in a["devices"]["results"]]


def test_default_share_ids_are_valid_uuid4_and_repeatable() -> None:
    claims = [claim("a", BW), claim("b", BW)]
    first = share_ids(Allocator(CLASSES, [slice_("s", [NIC])], [], F), claims)
    second = share_ids(Allocator(CLASSES, [slice_("s", [NIC])], [], F), claims)
    assert first == second
    assert len(set(first)) == 2
    for sid in first:
        u = uuid.UUID(sid)
        assert u.version == 4 and u.variant == uuid.RFC_4122 and str(u) == sid
    # Claims without name or uid still get distinct ids.
    anonymous = [dict(claim("", BW), metadata={}), dict(claim("", BW), metadata={})]
    ids = share_ids(Allocator(CLASSES, [slice_("s", [NIC])], [], F), anonymous)
    assert len(set(ids)) == 2


def test_share_id_factory_overrides_the_default() -> None:
    alloc = Allocator(CLASSES, [slice_("s", [NIC])], [], F, share_id=random_share_id)
    assert share_ids(alloc, [claim("a", BW)]) != share_ids(alloc, [claim("a", BW)])
    counter = iter(range(100))
    alloc = Allocator(CLASSES, [slice_("s", [NIC])], [], F, share_id=lambda: f"id-{next(counter)}")
    assert share_ids(alloc, [claim("a", BW), claim("b", BW)]) == ["id-0", "id-1"]


# -- slice cache ----------------------------------------------------------------------------------


def _store_with(devices: int) -> MemoryStore:
    s = MemoryStore()
    s.create(gpus(devices))
    return s


def test_two_stores_with_equal_uid_and_resource_version_get_their_own_slices() -> None:
    small, large = _store_with(1), _store_with(3)
    a, b = small.list("ResourceSlice")[0], large.list("ResourceSlice")[0]
    assert (a["metadata"]["uid"], a["metadata"]["resourceVersion"]) == (
        b["metadata"]["uid"],
        b["metadata"]["resourceVersion"],
    )
    two = [claim("c", request("r", 2))]
    for _ in range(2):  # alternating between the stores, with the shared default cache
        for store, fits in ((small, False), (large, True)):
            index = AllocatorIndex(CLASSES, store.list("ResourceSlice"), F)
            out = Allocator.from_index(index).allocate(node(), two)
            assert (out.allocations is not None) == fits
    compiled = DEFAULT_SLICE_CACHE.compiled
    AllocatorIndex(CLASSES, small.list("ResourceSlice"), F)
    AllocatorIndex(CLASSES, large.list("ResourceSlice"), F)
    assert DEFAULT_SLICE_CACHE.compiled == compiled, "both variants stay cached"


def test_slice_cache_reuses_equal_content_and_bounds_variants() -> None:
    cache = SliceCache()
    base = dict(gpus(1), metadata={"name": "s", "uid": "u", "resourceVersion": "1"})
    entry = cache.get(base)
    assert cache.get(dict(base)) is entry  # equal content, another object
    variants = [dict(gpus(n), metadata=base["metadata"]) for n in range(2, 2 + SliceCache.VARIANTS)]
    entries = [cache.get(v) for v in variants]
    assert len({id(e) for e in entries}) == len(variants)
    assert len(cache) == SliceCache.VARIANTS
    assert cache.get(base) is not entry  # the oldest variant was dropped, so it is compiled again


# -- lazy explanations ----------------------------------------------------------------------------


def test_explanation_is_computed_on_first_access_from_the_state_at_failure() -> None:
    state = AllocatedState.from_claims([allocated("a", "gpu-0")], F)
    alloc = Allocator.from_index(AllocatorIndex(CLASSES, [gpus(2)], F), state)
    out = alloc.allocate(node(), [claim("c", request("r", 2))])
    assert out.allocations is None
    lazy = out.lazy_explanation
    assert isinstance(lazy, LazyExplanation) and not lazy.computed
    # The state changes before anyone looks: the explanation still describes the failed attempt.
    state.remove_claim(allocated("a", "gpu-0"), F)
    state.add_claim(allocated("b", "gpu-1"), F)
    text = str(out.explanation)
    assert lazy.computed
    assert "gpu-0 is allocated to another claim" in text
    assert out.explanation is lazy.get()


def test_allocator_explain_for_nodes_ruled_out_elsewhere() -> None:
    state = AllocatedState.from_claims([allocated("a", "gpu-0", "gpu-1")], F)
    alloc = Allocator.from_index(AllocatorIndex(CLASSES, [gpus(2)], F), state)
    lazy = alloc.explain(node(), [claim("c", request("r", 1))])
    state.remove_claim(allocated("a", "gpu-0", "gpu-1"), F)
    assert "needs 1, 0 usable" in str(lazy)
    assert lazy.to_dict()["requests"][0]["inUse"] == 2


def test_node_allocation_error_explanation_is_lazy_too() -> None:
    dup = slice_("s", [device("gpu-0"), device("gpu-0")])
    with pytest.raises(NodeAllocationError) as info:
        Allocator(CLASSES, [dup], [], F).allocate(node(), [claim("c", request("r"))])
    err = info.value
    assert err.lazy_explanation is not None and not err.lazy_explanation.computed
    assert "duplicate device name" in str(err.explanation)


# -- devices_of_class -----------------------------------------------------------------------------


def test_devices_of_class_per_node_network_and_all() -> None:
    classes = {
        "gpu": device_class("gpu"),
        "big": device_class("big", "device.attributes['gpu.example.com'].mem > 40"),
    }
    local = slice_("n1", [device("a", mem=80), device("b", mem=10)], node="node-1")
    other = slice_("n2", [device("c", mem=80)], node="node-2")
    network = slice_("net", [device("d", mem=80)], node="", pool="net", allNodes=True)
    index = AllocatorIndex(classes, [local, other, network], F)
    names = lambda devs: [d.name for d in devs]  # noqa: E731
    assert names(index.devices_of_class("gpu", node="node-1")) == ["a", "b"]
    assert names(index.devices_of_class("big", node="node-1")) == ["a"]
    assert names(
        index.devices_of_class("gpu", ["device.attributes['gpu.example.com'].mem < 20"], node="node-1")
    ) == ["b"]
    assert names(index.devices_of_class("gpu", node="")) == ["d"]
    assert names(index.devices_of_class("big")) == ["a", "c", "d"]
    assert index.devices_of_class("nope", node="node-1") == []
    # A selector that fails to evaluate keeps the device (the allocator reports the error).
    assert names(
        index.devices_of_class("gpu", ["device.attributes['gpu.example.com'].missing"], node="node-1")
    ) == [
        "a",
        "b",
    ]
