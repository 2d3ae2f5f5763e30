"""DeviceTaintRules: the allocator sees their taints on the devices they select, as kube-scheduler's
ResourceSlice tracker patches them in (k8s.io/dynamic-resource-allocation resourceslice/tracker,
applyPatches, v0.37.2; v0.36.3 for 1.36), and only when DRADeviceTaintRules is on."""

from __future__ import annotations

from typing import Any

import pytest

from kdra.allocator import Allocator, FeatureGates
from kdra.allocator.index import AllocatorIndex, SliceCache

from .helpers import DRIVER, claim, device, device_class, node, request, slice_

CLASSES = [device_class("gpu")]
GATES_1_37 = FeatureGates.for_version("1.37")


def rule(
    name: str, selector: dict[str, Any] | None, effect: str = "NoSchedule", **taint: Any
) -> dict[str, Any]:
    spec: dict[str, Any] = {"taint": {"key": "example.com/maintenance", "effect": effect, **taint}}
    if selector is not None:
        spec["deviceSelector"] = selector
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": spec,
    }


def slices() -> list[dict[str, Any]]:
    return [slice_("node-1-gpus", [device("gpu-0"), device("gpu-1")])]


def allocate(
    rules: list[dict[str, Any]], count: int = 2, gates: FeatureGates = GATES_1_37, **req: Any
) -> Any:
    return Allocator(CLASSES, slices(), (), gates, taint_rules=rules, slice_cache=SliceCache()).allocate(
        node(), [claim("c", request("r", count, **req))]
    )


def devices(out: Any) -> list[str]:
    assert out.allocations is not None, out.explanation
    return [r["device"] for r in out.allocations[0]["devices"]["results"]]


def test_a_rule_for_one_device_keeps_the_allocator_off_it_and_the_explanation_names_the_rule() -> None:
    sel = {"driver": DRIVER, "pool": "node-1", "device": "gpu-0"}
    assert devices(allocate([rule("gpu-0-out", sel)], count=1)) == ["gpu-1"]
    out = allocate([rule("gpu-0-out", sel)], count=2)
    assert out.allocations is None
    r = out.explanation.requests[0]
    assert r.blocked_by_taints == 1
    assert (
        r.examples["taints"] == "gpu-0: taint example.com/maintenance=:NoSchedule "
        "(DeviceTaintRule gpu-0-out) not tolerated"
    )


@pytest.mark.parametrize(
    ("selector", "blocked"),
    [
        ({}, 2),  # the empty selector matches every device
        ({"driver": DRIVER}, 2),
        ({"pool": "node-1"}, 2),
        ({"device": "gpu-1"}, 1),  # a device of that name in any driver's pool
        ({"driver": "other.example.com"}, 0),
        ({"driver": DRIVER, "pool": "node-2"}, 0),
        ({"driver": DRIVER, "pool": "node-1", "device": "gpu-9"}, 0),
        (None, 0),  # 1.37 tracker: "Without a selector, no devices are matched"
    ],
)
def test_selector_fields_must_all_match_tracker_apply_patches(selector: Any, blocked: int) -> None:
    out = allocate([rule("r", selector)], count=2)
    if blocked:
        assert out.allocations is None
        assert out.explanation.requests[0].blocked_by_taints == blocked
    else:
        assert devices(out) == ["gpu-0", "gpu-1"]


def test_without_a_selector_a_1_36_rule_taints_every_device_tracker_v0_36() -> None:
    # 1.36's applyPatches only checked driver, pool and device when the selector was set.
    gates = FeatureGates.parse("DRADeviceTaintRules=true", version="1.36")
    out = allocate([rule("all", None)], count=1, gates=gates)
    assert out.allocations is None
    assert out.explanation.requests[0].blocked_by_taints == 2


def test_gate_off_ignores_rules_as_the_tracker_is_then_a_plain_slice_informer() -> None:
    sel = {"device": "gpu-0"}
    assert not FeatureGates.for_version("1.36").device_taint_rules  # 1.36: beta, off by default
    assert devices(allocate([rule("r", sel)], gates=FeatureGates.for_version("1.36"))) == ["gpu-0", "gpu-1"]
    off = GATES_1_37.with_gates(DRADeviceTaintRules=False)
    assert devices(allocate([rule("r", sel)], gates=off)) == ["gpu-0", "gpu-1"]
    # A rule's taint, like a slice's, blocks only while the allocator checks taints (DRADeviceTaints).
    no_taints = FeatureGates.only(["DRADeviceTaintRules"], version="1.37")
    assert devices(allocate([rule("r", sel)], gates=no_taints)) == ["gpu-0", "gpu-1"]
    assert devices(allocate([rule("r", sel)], count=1, gates=GATES_1_37)) == ["gpu-1"]


def test_a_tolerated_rule_taint_and_effect_none_do_not_block() -> None:
    sel = {"device": "gpu-0"}
    tolerate = [{"key": "example.com/maintenance", "operator": "Exists", "effect": "NoSchedule"}]
    assert devices(allocate([rule("r", sel)], tolerations=tolerate)) == ["gpu-0", "gpu-1"]
    assert devices(allocate([rule("r", sel, effect="None")])) == ["gpu-0", "gpu-1"]
    wrong_value = [{"key": "example.com/maintenance", "value": "x", "effect": "NoSchedule"}]
    assert allocate([rule("r", sel, value="y")], tolerations=wrong_value).allocations is None


def test_several_rules_on_one_device_each_add_their_taint_in_name_order() -> None:
    rules = [
        rule("b-noexec", {"device": "gpu-0"}, effect="NoExecute", timeAdded="2026-01-02T03:04:05Z"),
        rule("a-nosched", {"device": "gpu-0"}, value="v"),
    ]
    index = AllocatorIndex(CLASSES, slices(), GATES_1_37, taint_rules=rules, slice_cache=SliceCache())
    gpu0 = index.slices[0].devices[0]
    # key, value, effect and timeAdded are copied; nothing else of the rule's taint.
    assert gpu0.taints == [
        {"key": "example.com/maintenance", "effect": "NoSchedule", "value": "v"},
        {"key": "example.com/maintenance", "effect": "NoExecute", "timeAdded": "2026-01-02T03:04:05Z"},
    ]
    assert gpu0.taint_rules == ("a-nosched", "b-noexec")
    assert index.slices[0].devices[1].taints == []
    # Tolerating one of the two taints is not enough.
    one = [{"key": "example.com/maintenance", "operator": "Exists", "effect": "NoSchedule"}]
    assert devices(allocate(rules, count=1, tolerations=one)) == ["gpu-1"]
    both = [{"key": "example.com/maintenance", "operator": "Exists"}]
    assert devices(allocate(rules, count=2, tolerations=both)) == ["gpu-0", "gpu-1"]


def test_rule_taints_follow_the_slice_own_taints_and_the_raw_slice_is_not_changed() -> None:
    own = {"key": "own", "effect": "None"}
    s = slice_("node-1-gpus", [{**device("gpu-0"), "taints": [own]}])
    index = AllocatorIndex(CLASSES, [s], GATES_1_37, taint_rules=[rule("r", {})], slice_cache=SliceCache())
    dev = index.slices[0].devices[0]
    assert dev.taints[0] == own and dev.taint_rules == ("", "r")
    assert s["spec"]["devices"][0]["taints"] == [own]


def test_a_rule_added_or_removed_gives_a_new_device_view_from_the_same_slices() -> None:
    cache = SliceCache()
    same = slices()
    free = AllocatorIndex(CLASSES, same, GATES_1_37, slice_cache=cache)
    tainted = AllocatorIndex(CLASSES, same, GATES_1_37, taint_rules=[rule("r", {})], slice_cache=cache)
    again = AllocatorIndex(CLASSES, same, GATES_1_37, slice_cache=cache)
    assert free.slices[0].devices[0].taints == []
    assert len(tainted.slices[0].devices[0].taints) == 1
    assert again.slices[0] is free.slices[0]  # compiled once per (slice, rule taints)
    assert cache.compiled == 2
