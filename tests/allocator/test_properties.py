"""Property tests: every allocation kdra returns satisfies every selector, constraint, counter, capacity
and exclusivity rule; and the early pruning never changes an answer."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kdra.allocator import Allocator, FeatureGates
from kdra.api.quantity import parse_quantity
from kdra.cel import compile_selector, device_input
from kdra.errors import AllocationError

D = "d.example.com"
SELECTORS = [
    None,
    f'device.attributes["{D}"].a == 1',
    f'device.attributes["{D}"].b',
    f'device.attributes["{D}"].a >= 1',
]
CLASS = {
    "c": {
        "metadata": {"name": "c"},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{D}"'}}]},
    }
}


@st.composite
def scenarios(draw: Any) -> dict[str, Any]:
    n = draw(st.integers(1, 6))
    devices = []
    for i in range(n):
        dev: dict[str, Any] = {
            "name": f"dev-{i}",
            "attributes": {"a": {"int": draw(st.integers(0, 2))}, "b": {"bool": draw(st.booleans())}},
        }
        if draw(st.booleans()):
            dev["consumesCounters"] = [
                {"counterSet": "cs", "counters": {"c": {"value": str(draw(st.integers(1, 3)))}}}
            ]
        if draw(st.integers(0, 5)) == 0:
            dev["taints"] = [
                {"key": "k", "value": "v", "effect": draw(st.sampled_from(["NoSchedule", "None"]))}
            ]
        if draw(st.integers(0, 3)) == 0:
            dev["allowMultipleAllocations"] = True
            dev["capacity"] = {"bw": {"value": str(draw(st.integers(1, 4)))}}
        devices.append(dev)
    counter_total = draw(st.integers(0, 6))
    slices = [
        {
            "metadata": {"name": "devs"},
            "spec": {
                "driver": D,
                "nodeName": "n",
                "pool": {"name": "p", "generation": 1, "resourceSliceCount": 2},
                "devices": devices,
            },
        },
        {
            "metadata": {"name": "counters"},
            "spec": {
                "driver": D,
                "nodeName": "n",
                "pool": {"name": "p", "generation": 1, "resourceSliceCount": 2},
                "sharedCounters": [{"name": "cs", "counters": {"c": {"value": str(counter_total)}}}],
            },
        },
    ]
    used = draw(st.lists(st.sampled_from([d["name"] for d in devices]), unique=True, max_size=2))
    allocated = [
        {
            "metadata": {"name": f"used-{u}"},
            "status": {
                "allocation": {
                    "devices": {"results": [{"request": "r", "driver": D, "pool": "p", "device": u}]}
                }
            },
        }
        for u in used
    ]
    claims = []
    for ci in range(draw(st.integers(1, 3))):
        requests = []
        for ri in range(draw(st.integers(1, 2))):
            exactly: dict[str, Any] = {"deviceClassName": "c", "count": draw(st.integers(1, 3))}
            sel = draw(st.sampled_from(SELECTORS))
            if sel:
                exactly["selectors"] = [{"cel": {"expression": sel}}]
            if draw(st.integers(0, 4)) == 0:
                exactly["capacity"] = {"requests": {"bw": str(draw(st.integers(1, 2)))}}
            if draw(st.integers(0, 5)) == 0:
                exactly["tolerations"] = [{"key": "k", "operator": "Exists"}]
            kind_of_request = draw(st.sampled_from(["exactly"] * 6 + ["all", "admin", "firstAvailable"]))
            if kind_of_request == "all":
                exactly.pop("count")
                exactly["allocationMode"] = "All"
            elif kind_of_request == "admin":
                exactly["adminAccess"] = True
            if kind_of_request == "firstAvailable":
                alt = dict(exactly, count=1, name="s1")
                alt.pop("selectors", None)
                requests.append({"name": f"r{ri}", "firstAvailable": [dict(exactly, name="s0"), alt]})
                continue
            requests.append({"name": f"r{ri}", "exactly": exactly})
        spec: dict[str, Any] = {"requests": requests}
        kind = draw(st.sampled_from([None, "matchAttribute", "distinctAttribute"]))
        if kind:
            spec["constraints"] = [{kind: f"{D}/a"}]
        claims.append({"metadata": {"name": f"claim-{ci}"}, "spec": {"devices": spec}})
    return {
        "slices": slices,
        "allocated": allocated,
        "claims": claims,
        "used": used,
        "counter": counter_total,
    }


def _outcome(sc: dict[str, Any], prune: bool) -> Any:
    alloc = Allocator(
        CLASS, sc["slices"], sc["allocated"], FeatureGates(), prune=prune, share_id=lambda: "share"
    )
    try:
        return alloc.allocate({"metadata": {"name": "n"}}, sc["claims"])
    except AllocationError as err:
        return str(err)


def _check_valid(sc: dict[str, Any], allocations: list[dict[str, Any]]) -> None:
    devices = {d["name"]: d for d in sc["slices"][0]["spec"]["devices"]}
    exclusive_taken = set(sc["used"])
    counters_used = sum(
        int(devices[u]["consumesCounters"][0]["counters"]["c"]["value"])
        for u in sc["used"]
        if "consumesCounters" in devices[u]
    )
    counters_new = 0
    shared_bw: dict[str, int] = {}
    counted_shared: set[str] = set()
    for claim, alloc in zip(sc["claims"], allocations, strict=True):
        results = alloc["devices"]["results"]
        spec = claim["spec"]["devices"]
        for req in spec["requests"]:
            mine = [r for r in results if r["request"] == req["name"]]
            assert len(mine) == req["exactly"]["count"]
            for r in mine:
                dev = devices[r["device"]]
                cel = device_input(
                    D, dev["attributes"], dev.get("capacity"), dev.get("allowMultipleAllocations")
                )
                for s in CLASS["c"]["spec"]["selectors"] + req["exactly"].get("selectors", []):
                    assert compile_selector(s["cel"]["expression"]).matches(cel)
                if dev.get("allowMultipleAllocations"):
                    bw = req["exactly"].get("capacity", {}).get("requests", {}).get("bw")
                    amount = int(bw) if bw else int(dev["capacity"]["bw"]["value"])
                    shared_bw[dev["name"]] = shared_bw.get(dev["name"], 0) + amount
                    assert r["consumedCapacity"] == {"bw": str(amount)}
                    if dev["name"] in counted_shared:
                        continue
                    counted_shared.add(dev["name"])
                else:
                    assert dev["name"] not in exclusive_taken, "device allocated twice"
                    exclusive_taken.add(dev["name"])
                if "consumesCounters" in dev:
                    counters_new += int(dev["consumesCounters"][0]["counters"]["c"]["value"])
        for c in spec.get("constraints", []):
            values = [devices[r["device"]]["attributes"]["a"]["int"] for r in results]
            if "matchAttribute" in c:
                assert len(set(values)) <= 1
            elif all(r["exactly"]["count"] == 1 for r in spec["requests"]):
                # kube-scheduler 1.36 remembers one value per request, so only this case is pairwise.
                assert len(set(values)) == len(values)
    if counters_new:
        assert counters_used + counters_new <= sc["counter"]
    for name, total in shared_bw.items():
        assert parse_quantity(str(total)) <= parse_quantity(devices[name]["capacity"]["bw"]["value"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_allocations_obey_every_rule_and_pruning_changes_nothing(sc: dict[str, Any]) -> None:
    pruned = _outcome(sc, prune=True)
    full = _outcome(sc, prune=False)
    if isinstance(pruned, str) or isinstance(full, str):
        assert pruned == full
        return
    assert pruned.allocations == full.allocations
    simple = all(
        "exactly" in r
        and r["exactly"].get("allocationMode") != "All"
        and not r["exactly"].get("adminAccess")
        and not r["exactly"].get("tolerations")
        for c in sc["claims"]
        for r in c["spec"]["devices"]["requests"]
    ) and not any("taints" in d for d in sc["slices"][0]["spec"]["devices"])
    if pruned.allocations is not None:
        if simple:
            _check_valid(sc, pruned.allocations)
    else:
        assert pruned.explanation is not None
        text = str(pruned.explanation)
        assert "no explanation" not in text, text
        json.dumps(pruned.explanation.to_dict())
