"""Rendering is deterministic, and the sharing between identical nodes stays below the per-device level."""

from __future__ import annotations

import json

from kdra.fleets import iter_render, load_fleet, render


def test_deterministic() -> None:
    a = json.dumps(render(load_fleet("mixed")), sort_keys=True)
    b = json.dumps(list(iter_render(load_fleet("mixed"))), sort_keys=True)
    assert a == b


def test_per_node_objects_are_independent_at_the_device_level() -> None:
    objs = render(load_fleet("mixed"))
    a100 = [o for o in objs if o["kind"] == "ResourceSlice" and o["spec"]["pool"]["name"].startswith("a100-")]
    s0 = next(s for s in a100 if s["metadata"]["name"] == "a100-0-gpu.nvidia.com-gpu0")
    s1 = next(s for s in a100 if s["metadata"]["name"] == "a100-1-gpu.nvidia.com-gpu0")
    d0, d1 = s0["spec"]["devices"][0], s1["spec"]["devices"][0]
    assert d0 is not d1 and s0["spec"] is not s1["spec"] and s0["spec"]["pool"] is not s1["spec"]["pool"]
    d0["taints"] = [{"key": "x", "effect": "NoSchedule"}]  # safe: device dicts are per node
    assert "taints" not in d1
    # capacities are shared read-only between identical nodes (copy-on-render keeps memory flat)
    assert d0["capacity"] is d1["capacity"]
    n0 = next(o for o in objs if o["kind"] == "Node" and o["metadata"]["name"] == "a100-0")
    n1 = next(o for o in objs if o["kind"] == "Node" and o["metadata"]["name"] == "a100-1")
    n0["metadata"]["labels"]["x"] = "y"
    n0["status"]["allocatable"]["cpu"] = "1"
    assert "x" not in n1["metadata"]["labels"] and n1["status"]["allocatable"]["cpu"] == "128"
