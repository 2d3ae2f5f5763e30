"""Each unit the planner tries is one scheduling cycle for the allocator (kdra.plan.bins): under Kubernetes
1.36 the available counters are kept per pool name for an Allocator's life, and upstream builds one per pod
(DynamicResources' PreFilter). A unit that fits nowhere leaves the state unchanged; the next unit must not
read counters cached while trying it."""

from __future__ import annotations

from typing import Any

from kdra.allocator import FeatureGates
from kdra.allocator.summary import NodeFinding
from kdra.plan.bins import Cluster
from kdra.plan.demand import build_demand

from .helpers import NS, inputs, pod

Obj = dict[str, Any]
V136 = FeatureGates(version="1.36")


def _slices(driver: str, memory: str, need: str) -> list[Obj]:
    """One pool named `node-0` with a counter set `cs` of `memory`, and one device consuming `need`."""
    pool = {"name": "node-0", "generation": 1, "resourceSliceCount": 2}
    prefix = driver.split(".")[0]
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{prefix}-counters"},
            "spec": {
                "driver": driver,
                "pool": pool,
                "nodeName": "node-0",
                "sharedCounters": [{"name": "cs", "counters": {"mem": {"value": memory}}}],
            },
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{prefix}-devices"},
            "spec": {
                "driver": driver,
                "pool": pool,
                "nodeName": "node-0",
                "devices": [
                    {
                        "name": f"{prefix}-dev",
                        "consumesCounters": [{"counterSet": "cs", "counters": {"mem": {"value": need}}}],
                    }
                ],
            },
        },
    ]


def _class(name: str, driver: str) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
    }


def _claim(name: str, cls: str) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": cls}}]}},
    }


def test_a_unit_that_fit_nowhere_does_not_hand_its_pool_counters_to_the_next() -> None:
    # Two drivers each publish a pool named node-0 with a counter set cs: a.example's has 10Gi and a
    # device that needs 40Gi (never fits), b.example's has 100Gi and a device that needs 40Gi (fits).
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-0"}}
    objs = [
        node,
        _class("a", "a.example.com"),
        _class("b", "b.example.com"),
        *_slices("a.example.com", "10Gi", "40Gi"),
        *_slices("b.example.com", "100Gi", "40Gi"),
        _claim("wants-a", "a"),
        _claim("wants-b", "b"),
        pod("pa", claims=("wants-a",)),
        pod("pb", claims=("wants-b",)),
    ]
    ins = inputs(objs)
    cluster = Cluster.from_inputs(ins, V136)
    [b] = cluster.bins
    units = {j.key: j.units[0] for j in build_demand(ins.pending, ins.claims, ins.templates, {}).jobs}
    # Alone (a fresh allocator, as upstream's next pod gets), b's device fits on the node.
    assert isinstance(Cluster.from_inputs(ins, V136).bins[0].check(units[f"{NS}/pb"]), list)
    # After a's unit failed there (a.example.com's node-0 counters looked at, nothing allocated), it must
    # still fit: the next unit is a new cycle and reads b.example.com's own counters.
    assert isinstance(b.check(units[f"{NS}/pa"]), NodeFinding)
    assert isinstance(b.check(units[f"{NS}/pb"]), list)
