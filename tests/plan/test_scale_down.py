"""kdra plan scale-down: nodes drained only when every pod they run is placed again on the rest (claims
allocated anew, gangs whole), within PodDisruptionBudgets and pools' minCount."""

from __future__ import annotations

from typing import Any

from kdra.allocator import Allocator
from kdra.plan.demand import ref
from kdra.plan.scaledown import drain_document, plan_scale_down

from .helpers import GATES, L40S, NS, claim, cluster, gpus, inputs, pod, pod_group, types_of


def _running(name: str, node: str, objs: list[dict[str, Any]], n: int = 1, **kw: Any) -> list[dict[str, Any]]:
    """A pod on `node` with a claim of n GPUs allocated there by the allocator."""
    classes = {o["metadata"]["name"]: o for o in objs if o["kind"] == "DeviceClass"}
    slices = [o for o in objs if o["kind"] == "ResourceSlice"]
    used = [o for o in objs if o["kind"] == "ResourceClaim" and o.get("status")]
    node_obj = next(o for o in objs if o["kind"] == "Node" and o["metadata"]["name"] == node)
    c = claim(f"{name}-gpu", gpus(n))
    out = Allocator(classes, slices, used, GATES).allocate(node_obj, [c])
    assert out.allocations is not None
    c["status"] = {"allocation": out.allocations[0], "reservedFor": [{"resource": "pods", "name": name}]}
    return [c, pod(name, claims=(c["metadata"]["name"],), node=node, **kw)]


def _cluster(nodes: int = 3) -> list[dict[str, Any]]:
    return cluster([{**L40S, "count": nodes}])


def test_a_node_whose_pods_fit_elsewhere_is_drained_and_the_rest_stay() -> None:
    objs = _cluster()
    objs += _running("a", "l40s-0", objs, 3)
    objs += _running("b", "l40s-1", objs, 1)
    objs += _running("c", "l40s-2", objs, 4)
    plan = plan_scale_down(inputs(objs), types_of([L40S]), GATES)
    drained = [d.node for d in plan.drains]
    # b's one GPU fits beside a's three; then a (3) has no room left on the full nodes.
    assert drained == ["l40s-1"], (drained, plan.kept)
    assert plan.drains[0].moved == [(f"{NS}/b", "l40s-0")]
    doc = drain_document(plan)
    assert doc["status"]["gpuHoursSavedPerWeek"] == 4 * 168
    assert doc["status"]["savedPerWeek"] == round(10.5 * 168, 2)


def test_a_pdb_without_disruptions_left_keeps_the_node() -> None:
    objs = _cluster(2)
    objs += _running("b", "l40s-1", objs, 1)
    objs[-1]["metadata"]["labels"] = {"app": "b"}
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "b", "namespace": NS},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "b"}}},
        "status": {"disruptionsAllowed": 0},
    }
    plan = plan_scale_down(inputs(objs, pdb), types_of([L40S]), GATES)
    assert [d.node for d in plan.drains] == ["l40s-0"]  # the empty one
    assert "PodDisruptionBudget ml/b" in plan.kept["l40s-1"]


def test_min_count_and_safe_to_evict_keep_nodes() -> None:
    objs = _cluster(2)
    objs += _running("b", "l40s-1", objs, 1)
    objs[-1]["metadata"]["annotations"] = {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}
    plan = plan_scale_down(inputs(objs), types_of([L40S]), GATES)
    assert [d.node for d in plan.drains] == ["l40s-0"] and "safe-to-evict" in plan.kept["l40s-1"]
    plan = plan_scale_down(inputs(_cluster(2)), types_of([{**L40S, "minCount": 1}]), GATES)
    assert len(plan.drains) == 1 and "minCount" in next(iter(plan.kept.values()))


def test_a_gang_moves_whole_or_its_node_stays() -> None:
    objs = [*_cluster(3), pod_group("g", 2)]
    objs += _running("g-0", "l40s-0", objs, 2, group="g")
    objs += _running("g-1", "l40s-1", objs, 2, group="g")
    objs += _running("x", "l40s-2", objs, 4)
    plan = plan_scale_down(inputs(objs), types_of([L40S]), GATES)
    # Draining l40s-0 moves both members: g-0 beside g-1 on l40s-1 (2 + 2 GPUs).
    (d,) = plan.drains
    assert d.node == "l40s-0"
    assert sorted(p for p, _ in d.moved) == [f"{NS}/g-0", f"{NS}/g-1"]
    assert all(n == "l40s-1" for _, n in d.moved)
    assert ref(objs[-1]) == f"{NS}/x"


def test_a_node_drained_after_taking_pods_moves_them_along() -> None:
    # a (1 GPU) leaves l40s-0 for l40s-1, whose own b (1 GPU) then fits on l40s-2 beside c (2 GPUs): the
    # plan drains l40s-1 too only if a goes along, and a must be placed on a node that stays.
    objs = _cluster()
    objs += _running("a", "l40s-0", objs, 1)
    objs += _running("b", "l40s-1", objs, 1)
    objs += _running("c", "l40s-2", objs, 2)
    plan = plan_scale_down(inputs(objs), types_of([L40S]), GATES)
    assert [d.node for d in plan.drains] == ["l40s-0", "l40s-1"], (plan.drains, plan.kept)
    assert plan.drains[0].moved == [(f"{NS}/a", "l40s-1")]
    assert sorted(plan.drains[1].moved) == [(f"{NS}/a", "l40s-2"), (f"{NS}/b", "l40s-2")]


def test_a_node_that_took_pods_is_not_drained_when_they_do_not_fit_elsewhere() -> None:
    # As above with c holding 3 GPUs: b alone would fit on l40s-2, but not with a, so l40s-1 stays.
    objs = _cluster()
    objs += _running("a", "l40s-0", objs, 1)
    objs += _running("b", "l40s-1", objs, 1)
    objs += _running("c", "l40s-2", objs, 3)
    plan = plan_scale_down(inputs(objs), types_of([L40S]), GATES)
    assert [d.node for d in plan.drains] == ["l40s-0"], (plan.drains, plan.kept)
    assert "l40s-1" in plan.kept


def test_a_gang_member_that_may_not_be_evicted_keeps_its_mates_nodes() -> None:
    # g-1 (on l40s-1) is annotated safe-to-evict "false": draining l40s-0 would evict it along with g-0,
    # so l40s-0 stays as l40s-1 does.
    objs = [*_cluster(3), pod_group("g", 2)]
    objs += _running("g-0", "l40s-0", objs, 2, group="g")
    objs += _running("g-1", "l40s-1", objs, 2, group="g")
    objs[-1]["metadata"]["annotations"] = {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}
    objs += _running("x", "l40s-2", objs, 4)
    plan = plan_scale_down(inputs(objs), types_of([L40S]), GATES)
    assert plan.drains == [], plan.drains
    assert "safe-to-evict" in plan.kept["l40s-0"] and "ml/g-1, which would move along" in plan.kept["l40s-0"]
    assert "safe-to-evict" in plan.kept["l40s-1"]


def _fabric() -> list[dict[str, Any]]:
    """A device every node reaches (allNodes): a claim on it can be shared by pods on different nodes."""
    cls = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "fabric.example.com"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'fabric.example.com'"}}]},
    }
    sl = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "fabric"},
        "spec": {
            "driver": "fabric.example.com",
            "allNodes": True,
            "pool": {"name": "fabric", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "link-0"}],
        },
    }
    c = claim("link", gpus(1, "fabric.example.com"))
    c["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": "fabric.example.com", "pool": "fabric", "device": "link-0"}
                ]
            }
        }
    }
    return [cls, sl, c]


def test_a_claim_sharer_pulled_in_brings_its_gang() -> None:
    # a (l40s-0) shares the fabric claim with b (l40s-1); b is in gang g with c (l40s-2). Draining l40s-0
    # evicts b, so c goes too: with c safe-to-evict "false" the node stays, else all three move.
    def world(unsafe: bool) -> list[dict[str, Any]]:
        objs = [*_cluster(3), *_fabric(), pod_group("g", 2)]
        objs += _running("a", "l40s-0", objs, 1)
        objs[-1]["spec"]["resourceClaims"].append({"name": "f", "resourceClaimName": "link"})
        objs += _running("b", "l40s-1", objs, 1, group="g")
        objs[-1]["spec"]["resourceClaims"].append({"name": "f", "resourceClaimName": "link"})
        objs += _running("c", "l40s-2", objs, 2, group="g")
        if unsafe:
            objs[-1]["metadata"]["annotations"] = {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}
        return objs

    plan = plan_scale_down(inputs(world(True)), types_of([L40S]), GATES)
    assert plan.drains == [], plan.drains
    assert "ml/c, which would move along" in plan.kept["l40s-0"], plan.kept
    plan = plan_scale_down(inputs(world(False)), types_of([L40S]), GATES)
    first = plan.drains[0]
    assert first.node == "l40s-0"
    assert sorted(p for p, _ in first.moved) == [f"{NS}/a", f"{NS}/b", f"{NS}/c"], first.moved
