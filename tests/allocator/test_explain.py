"""Explanations: what blocked each request, and the nearest miss."""

from __future__ import annotations

import json

from kdra.allocator import Allocator, FeatureGates

from .helpers import DRIVER, allocated, claim, device, device_class, node, request, slice_

CLASSES = {"gpu": device_class("gpu")}
MEM48 = f'device.capacity["{DRIVER}"].memory.compareTo(quantity("48Gi")) >= 0'


def test_nearest_miss_names_the_closest_device_and_the_values_its_selector_reads() -> None:
    devs = [device("gpu-0", memory="80Gi"), device("gpu-1", memory="24Gi"), device("gpu-3", memory="40Gi")]
    out = Allocator(CLASSES, [slice_("s", devs)], [allocated("u", "gpu-0")], FeatureGates()).allocate(
        node(), [claim("c", request("big", 1, "gpu", MEM48))]
    )
    ex = out.explanation
    assert out.allocations is None and ex is not None
    [r] = ex.requests
    assert (r.class_selected, r.request_selected, r.in_use, r.usable) == (3, 1, 1, 0)
    assert r.nearest_miss is not None
    assert str(r.nearest_miss) == "gpu-3: memory 40Gi, selector #0 needs >= 48Gi"
    text = str(ex)
    assert "1 in use" in text and "nearest miss: gpu-3: memory 40Gi, selector #0 needs >= 48Gi" in text
    data = json.loads(json.dumps(ex.to_dict()))
    assert data["requests"][0]["nearestMiss"]["values"] == {"memory": "40Gi"}
    assert data["summary"].startswith("claim default/c: request big cannot be satisfied")


def test_class_selector_miss_is_reported_as_such() -> None:
    classes = {"h100": device_class("h100", f'device.attributes["{DRIVER}"].model == "H100"')}
    devs = [device("gpu-0", model="A100")]
    out = Allocator(classes, [slice_("s", devs)], [], FeatureGates()).allocate(
        node(), [claim("c", request("r", 1, "h100"))]
    )
    assert out.explanation is not None
    miss = out.explanation.requests[0].nearest_miss
    assert miss is not None and miss.from_class
    assert str(miss) == 'gpu-0: model A100, class selector #0 needs == "H100"'


def test_counters_taints_and_capacity_are_counted_separately() -> None:
    counters = slice_(
        "counters",
        [],
        sharedCounters=[{"name": "cs", "counters": {"mem": {"value": "8"}}}],
    )
    del counters["spec"]["devices"]
    part = [
        {"name": "p-0", "consumesCounters": [{"counterSet": "cs", "counters": {"mem": {"value": "8"}}}]},
        {"name": "p-1", "consumesCounters": [{"counterSet": "cs", "counters": {"mem": {"value": "4"}}}]},
        {"name": "t-0", "taints": [{"key": "broken", "value": "yes", "effect": "NoSchedule"}]},
        {"name": "n-0", "allowMultipleAllocations": True, "capacity": {"bw": {"value": "1G"}}},
    ]
    devs = slice_("devs", part)
    for s in (counters, devs):
        s["spec"]["pool"]["resourceSliceCount"] = 2
    used = [allocated("u", "p-0")]
    out = Allocator(CLASSES, [counters, devs], used, FeatureGates()).allocate(
        node(), [claim("c", request("r", 2))]
    )
    assert out.explanation is not None
    r = out.explanation.requests[0]
    assert (r.in_use, r.blocked_by_counters, r.blocked_by_taints, r.blocked_by_capacity, r.usable) == (
        1,
        1,
        1,
        0,
        1,
    )
    text = str(out.explanation)
    assert "taint broken=yes:NoSchedule not tolerated" in text
    # Asking for capacity the devices do not have is a capacity problem.
    out = Allocator(CLASSES, [counters, devs], used, FeatureGates()).allocate(
        node(), [claim("c", request("r", 1, capacity={"requests": {"bw": "2G"}}))]
    )
    assert out.explanation is not None
    r = out.explanation.requests[0]
    assert (r.in_use, r.blocked_by_capacity) == (1, 3)
    assert r.examples["capacity"] == "p-1: has no capacity bw"


def test_counter_example_says_how_much_is_left() -> None:
    counters = slice_("counters", [], sharedCounters=[{"name": "cs", "counters": {"mem": {"value": "8"}}}])
    del counters["spec"]["devices"]
    part = [
        {"name": "big", "consumesCounters": [{"counterSet": "cs", "counters": {"mem": {"value": "6"}}}]},
        {"name": "mid", "consumesCounters": [{"counterSet": "cs", "counters": {"mem": {"value": "4"}}}]},
    ]
    devs = slice_("devs", part)
    for s in (counters, devs):
        s["spec"]["pool"]["resourceSliceCount"] = 2
    out = Allocator(CLASSES, [counters, devs], [allocated("u", "big")], FeatureGates()).allocate(
        node(), [claim("c", request("r"))]
    )
    assert out.explanation is not None
    r = out.explanation.requests[0]
    assert r.blocked_by_counters == 1
    assert r.examples["counters"] == "mid: counter cs/mem needs 4, 2 left"


def test_skipped_pools_are_listed() -> None:
    incomplete = slice_("a", [device("gpu-0")], pool="growing")
    incomplete["spec"]["pool"]["resourceSliceCount"] = 2
    ok = slice_("c", [device("gpu-2")], pool="ok")
    ex = Allocator(CLASSES, [incomplete, ok], [], FeatureGates()).allocate(
        node(), [claim("c", request("r", 2))]
    )
    assert ex.explanation is not None
    assert ex.explanation.incomplete_pools == [f"{DRIVER}/growing"]
    assert (
        f"pool {DRIVER}/growing skipped: incomplete (1 slice(s) of generation 1, resourceSliceCount says 2)"
        in str(ex.explanation)
    )


def test_constraint_explanation() -> None:
    devs = [device(f"gpu-{i}", numa=i % 4) for i in range(8)]
    c = claim("c", request("r", 3), constraints=[{"matchAttribute": f"{DRIVER}/numa"}])
    out = Allocator(CLASSES, [slice_("s", devs)], [], FeatureGates()).allocate(node(), [c])
    assert out.explanation is not None
    assert out.explanation.summary == (
        f"claim default/c, constraint #0: matchAttribute {DRIVER}/numa needs 3 devices with the same value "
        "(largest group: 0 with 2)"
    )


def test_success_has_no_explanation() -> None:
    out = Allocator(CLASSES, [slice_("s", [device("gpu-0")])], [], FeatureGates()).allocate(
        node(), [claim("c", request("r"))]
    )
    assert out.allocations is not None and out.explanation is None


def test_what_if_names_the_conflicting_constraint_and_competing_claims() -> None:
    devs = [
        device("gpu-0", numa=0, memory="80Gi"),
        device("gpu-1", numa=1, memory="40Gi"),
        device("gpu-2", numa=1, memory="40Gi"),
    ]
    big = f'device.capacity["{DRIVER}"].memory.compareTo(quantity("60Gi")) >= 0'
    c = claim(
        "c", request("big", 1, "gpu", big), request("any"), constraints=[{"matchAttribute": f"{DRIVER}/numa"}]
    )
    out = Allocator(CLASSES, [slice_("s", devs)], [], FeatureGates()).allocate(node(), [c])
    assert out.explanation is not None
    assert out.explanation.summary.startswith(
        f"claim default/c would fit without constraint #0 (matchAttribute {DRIVER}/numa)"
    )
    # Two claims that each fit alone but compete for the one big device.
    a = claim("a", request("r", 1, "gpu", big))
    b = claim("b", request("r", 1, "gpu", big), request("s"))
    out = Allocator(CLASSES, [slice_("s", devs)], [], FeatureGates()).allocate(node(), [a, b])
    assert out.explanation is not None
    assert out.explanation.summary.startswith("each of the 2 claims fits on its own, but not all together")


def test_nearest_miss_points_at_the_failing_part_of_a_conjunction() -> None:
    classes = {
        "full": device_class(
            "full", f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].type == "gpu"'
        )
    }
    out = Allocator(classes, [slice_("s", [device("mig-0", type="mig")])], [], FeatureGates()).allocate(
        node(), [claim("c", request("r", 1, "full"))]
    )
    assert out.explanation is not None
    miss = out.explanation.requests[0].nearest_miss
    assert miss is not None
    assert str(miss) == 'mig-0: type mig, class selector #0 needs == "gpu"'
    assert miss.expression.startswith("device.driver ==")
