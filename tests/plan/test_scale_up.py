"""kdra plan scale-up: nodes added so pending pods and gangs fit, checked by kdra's scheduler and by `kdra
simulate` running the plan's Fleet."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
import yaml

from kdra.cli.main import main
from kdra.fleets import render
from kdra.fleets.spec import LABEL_RACK, parse_fleet
from kdra.plan.result import fleet_document, plan_document
from kdra.plan.scaleup import plan_scale_up

from .helpers import (
    A100,
    GATES,
    H100,
    L40S,
    Obj,
    claim,
    cluster,
    gpus,
    inputs,
    mig,
    pod,
    pod_group,
    template,
    types_of,
)


def _simulate(fleet_doc: dict, workload: list[dict], tmp: Path) -> dict:
    (tmp / "fleet.yaml").write_text(yaml.safe_dump(fleet_doc))
    (tmp / "w.yaml").write_text(yaml.safe_dump_all(workload))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(
            [
                "simulate",
                "-c",
                str(tmp / "fleet.yaml"),
                "--workload",
                str(tmp / "w.yaml"),
                "--mode",
                "dra",
                "-o",
                "json",
            ]
        )
    assert rc == 0
    return json.loads(out.getvalue())["modes"]["dra"]


def _workload() -> list[dict]:
    objs = [
        template("two", gpus(2)),
        template("small", mig("10Gi")),
        claim("shared", gpus(1)),
        pod_group("train", 4),
    ]
    objs += [pod(f"train-{i}", templates=("two",), cpu="16", group="train") for i in range(4)]
    objs += [pod(f"infer-{i}", templates=("small",)) for i in range(6)]
    objs += [pod(f"share-{i}", claims=("shared",), schedulerName="kdra") for i in range(3)]
    return objs


def test_gang_mig_and_shared_claim_pods_all_bind_and_simulate_runs_the_plan(tmp_path: Path) -> None:
    objs = _workload()
    plan = plan_scale_up(inputs(objs), types_of([H100, A100, L40S]), GATES)
    assert plan.unplaced == [] and plan.left == []
    assert plan.added and plan.lower_bound <= plan.cost + 1e-9
    # Pods that share a claim share a node; the gang's members are all placed.
    on = {p: n for n, ps in plan.where.items() for p in ps}
    assert len({on[f"ml/share-{i}"] for i in range(3)}) == 1
    assert all(f"ml/train-{i}" in on for i in range(4))
    doc = plan_document(plan)
    assert doc["status"]["podsOnAddedNodes"] == 13 and doc["status"]["unschedulablePods"] == 0
    # The plan as a Fleet: kdra simulate binds every pod on it (its scheduler serves default-scheduler pods;
    # the plan checked the kdra-named ones with kdra's scheduler all the same).
    for o in objs:
        o.get("spec", {}).pop("schedulerName", None)
    sim = _simulate(fleet_document(plan, "added"), objs, tmp_path)
    assert sim["metrics"]["pods_total"] == 13 and sim["metrics"]["pods_pending"] == 0


def test_pods_that_fit_on_the_cluster_add_no_node() -> None:
    objs = [*cluster([{**L40S, "count": 1}]), template("one", gpus(1))]
    objs += [pod(f"p-{i}", templates=("one",)) for i in range(4)]
    plan = plan_scale_up(inputs(objs), types_of([H100, L40S]), GATES)
    assert plan.added == [] and plan.unplaced == [] and plan.cost == 0 and plan.optimal
    assert sorted(plan.where) == ["l40s-0"]


def test_the_cheapest_type_per_pod_wins_and_price_overrides_it() -> None:
    objs = [template("one", gpus(1))] + [pod(f"p-{i}", templates=("one",)) for i in range(4)]
    plan = plan_scale_up(inputs(objs), types_of([H100, A100, L40S]), GATES)
    assert [b.type.name for b in plan.added] == ["l40s"] and plan.optimal
    plan = plan_scale_up(inputs(objs), types_of([H100, A100, L40S], prices={"l40s": 100.0}), GATES)
    assert [b.type.name for b in plan.added] == ["a100"] and plan.cost == 33.0


def test_max_count_bounds_what_a_pool_adds_counting_its_nodes() -> None:
    objs = [template("one", gpus(1))] + [pod(f"p-{i}", templates=("one",)) for i in range(12)]
    existing = cluster([{**L40S, "count": 1, "cpu": "1"}])  # no cpu left for these pods
    types = types_of([H100, A100, {**L40S, "maxCount": 2}], existing={"l40s": 1})
    plan = plan_scale_up(inputs(existing, objs), types, GATES)
    assert plan.unplaced == [] and plan.left == []
    kinds = sorted(b.type.name for b in plan.added)
    assert kinds.count("l40s") == 1, kinds  # 2 at most, one exists
    assert "a100" in kinds


def test_a_pod_no_type_can_run_is_unschedulable_with_the_allocators_reason() -> None:
    objs = [
        template("sixteen", gpus(16)),
        pod("big", templates=("sixteen",)),
        template("one", gpus(1)),
        pod("ok", templates=("one",)),
    ]
    plan = plan_scale_up(inputs(objs), types_of([H100, L40S]), GATES)
    doc = plan_document(plan)
    (u,) = doc["status"]["unschedulable"]
    assert u["pods"] == ["ml/big"] and "no node type can run it" in u["reason"]
    assert "2 nodes" in u["nodeTypes"] or "0/2" in u["nodeTypes"], u["nodeTypes"]
    assert doc["status"]["podsOnAddedNodes"] == 1


def test_a_required_rack_gang_gets_new_nodes_in_one_rack_as_the_fleet_renders_them(tmp_path: Path) -> None:
    racked = {**H100, "topology": {"nodesPerRack": 2}}
    objs = [template("eight", gpus(8)), pod_group("big", 2, required=LABEL_RACK)]
    objs += [pod(f"big-{i}", templates=("eight",), group="big") for i in range(2)]
    plan = plan_scale_up(inputs(objs), types_of([racked]), GATES)
    assert plan.unplaced == [] and len(plan.added) == 2
    doc = fleet_document(plan, "added")
    nodes = [o for o in render(parse_fleet(doc)) if o["kind"] == "Node"]
    racks = {n["metadata"]["labels"].get(LABEL_RACK) for n in nodes}
    assert len(racks) == 1 and None not in racks
    assert _simulate(doc, objs, tmp_path)["metrics"]["pods_pending"] == 0
    # Racks of one node cannot hold the gang: it is unschedulable, and says why.
    plan = plan_scale_up(inputs(objs), types_of([{**H100, "topology": {"nodesPerRack": 1}}]), GATES)
    (u,) = plan.unplaced
    assert LABEL_RACK in u.why and plan.added == []


def test_pods_sharing_a_claim_are_checked_together_on_one_node() -> None:
    """Two pods of 30 cpu share a claim: one 48-cpu node holds either, not both, so no type can run them; they
    are listed once, with the scheduler's reason."""
    objs = [claim("shared", gpus(1)), template("one", gpus(1))]
    objs += [pod(f"share-{i}", claims=("shared",), cpu="30") for i in range(2)]
    objs += [pod("m-0", templates=("one",), cpu="4")]
    plan = plan_scale_up(inputs(objs), types_of([L40S]), GATES)
    doc = plan_document(plan)
    (u,) = doc["status"]["unschedulable"]
    assert sorted(u["pods"]) == ["ml/share-0", "ml/share-1"] and "Insufficient cpu" in u["nodeTypes"]
    assert plan.left == [] and [b.type.name for b in plan.added] == ["l40s"]


def test_pods_sharing_a_claim_land_together_when_the_plan_fills_its_nodes() -> None:
    """Two claims, each shared by three 4-cpu pods, and nine 8-cpu pods fill two 48-cpu nodes exactly. The
    scheduler alone spreads the 8-cpu pods (queued first) and the third sharer of a claim finds its claim's
    node full; told where the plan expects each pod (status.nominatedNodeName), it binds every pod on the
    plan's two nodes, each claim's sharers on one node."""
    objs = [claim(f"shared-{k}", gpus(1)) for k in range(2)]
    objs += [pod(f"a-{i}", cpu="8") for i in range(9)]
    objs += [pod(f"s{k}-{i}", claims=(f"shared-{k}",), cpu="4") for k in range(2) for i in range(3)]
    plan = plan_scale_up(inputs(objs), types_of([L40S]), GATES)
    assert plan.left == [] and [b.type.name for b in plan.added] == ["l40s", "l40s"]
    node_of = {p: n for n, pods in plan.where.items() for p in pods}
    assert len(node_of) == 15
    for k in range(2):
        assert len({node_of[f"ml/s{k}-{i}"] for i in range(3)}) == 1


def test_devices_a_device_taint_rule_takes_out_of_service_need_a_new_node() -> None:
    """The cluster's L40S node has room for the pods, but a DeviceTaintRule (DRADeviceTaintRules, GA in
    1.37) takes its GPUs out of service as kube-scheduler sees them: the plan adds a node instead."""
    rule = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "l40s-0-maintenance"},
        "spec": {
            "deviceSelector": {"pool": "l40s-0"},
            "taint": {"key": "maintenance", "effect": "NoSchedule"},
        },
    }
    objs = [*cluster([{**L40S, "count": 1}]), template("one", gpus(1))]
    objs += [pod(f"p-{i}", templates=("one",)) for i in range(2)]
    assert plan_scale_up(inputs(objs), types_of([L40S]), GATES).added == []
    plan = plan_scale_up(inputs([*objs, rule]), types_of([L40S]), GATES)
    assert plan.added and plan.unplaced == [] and "l40s-0" not in plan.where


def test_a_claim_a_gang_member_shares_with_another_pod_is_placed_once_with_both() -> None:
    """g-0 (a gang member) and x share the claim `shared`: they are one unit in the gang's job, on one node;
    the gang's other member and x no longer fit one 48-cpu node together. Before, the gang's units and the
    other pods' were formed apart, and `shared` was allocated twice: once with g-0, once with x on a node
    of its own."""
    from kdra.plan.demand import build_demand, gang_specs, ref

    objs = [claim("shared", gpus(1)), template("one", gpus(1)), pod_group("g", 2)]
    objs += [pod("g-0", claims=("shared",), cpu="20", group="g")]
    objs += [pod("g-1", templates=("one",), cpu="20", group="g")]
    objs += [pod("x", claims=("shared",), cpu="20")]
    ins = inputs(objs)
    demand = build_demand(ins.pending, ins.claims, ins.templates, gang_specs(ins.scheduling))
    units = [u for j in demand.jobs for u in j.units]
    assert sorted(ref(c) for u in units for c in u.claims).count("ml/shared") == 1
    (job,) = demand.jobs
    assert job.gang is not None and sorted(pd.key for pd in job.pods) == ["ml/g-0", "ml/g-1", "ml/x"]
    plan = plan_scale_up(ins, types_of([L40S]), GATES)
    placed = {pd.key: b.name for done in plan.placed.values() for b, p in done for pd in p.unit.pods}
    assert placed["ml/g-0"] == placed["ml/x"] != placed["ml/g-1"]
    assert plan.left == [] and not plan.unplaced
    node_of = {p: n for n, pods in plan.where.items() for p in pods}
    assert node_of["ml/g-0"] == node_of["ml/x"]


def test_units_a_failed_move_put_back_are_still_found_where_a_later_move_takes_them() -> None:
    """The local search first fails to empty a100-new-1 (p1 and p2, sharing c1) into the others' room, puts
    its units back, then moves them to a cheaper l40s node. The put-back made new placements the plan's
    record did not follow, so it still expected p1 and p2 on a100-new-1, a node no longer in the plan:
    the scheduler, told to look there, bound p1 beside p0 and left p2 (40 cpu, pinned by c1) pending, and
    the l40s node was added for nothing."""
    sel = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0'
    big = {
        "exactly": {
            "deviceClassName": "gpu.nvidia.com",
            "count": 2,
            "selectors": [{"cel": {"expression": sel}}],
        }
    }
    objs = [claim("c0", big), claim("c1", gpus(1)), claim("c3", gpus(1))]
    objs += [pod("p0", claims=("c0",), cpu="4"), pod("p1", claims=("c1",), cpu="4")]
    objs += [pod("p2", claims=("c1",), cpu="40"), pod("p3", claims=("c3",), cpu="40")]
    objs += [pod("p4", claims=("c3",), cpu="16")]
    plan = plan_scale_up(inputs(objs), types_of([{**A100, "price": 55.0}, {**L40S, "price": 34.0}]), GATES)
    (search,) = plan.searches
    names = {b.name for b in search.added}
    assert all(b.name in names for done in search.placed.values() for b, _ in done), search.placed
    assert plan.left == [] and not plan.unplaced
    node_of = {p: n for n, pods in plan.where.items() for p in pods}
    assert node_of["ml/p1"] == node_of["ml/p2"] == "l40s-new-2"


def test_a_gang_the_scheduler_left_pending_in_the_room_found_gets_nodes_of_its_own() -> None:
    """Three l40s nodes hold p0 (1 GPU), p1 (4) and the gang g-0 (1), g-1 (4), g-2 (1) as the search packs
    them, but the scheduler spreads the gang's first member onto the empty node (LeastAllocated) and g-1
    then finds no node with 4 free GPUs. The next round found the same room again, added nothing, and the
    plan gave up with the gang unschedulable although a node more runs it; it now plans what the scheduler
    left pending on nodes of its own."""
    objs = [template("one", gpus(1)), template("four", gpus(4)), pod_group("g", 3)]
    objs += [pod("p0", templates=("one",), cpu="4"), pod("p1", templates=("four",), cpu="4")]
    objs += [pod(f"g-{i}", templates=(t,), group="g") for i, t in enumerate(("one", "four", "one"))]
    plan = plan_scale_up(inputs(objs), types_of([{**L40S, "price": 3.0}]), GATES)
    assert plan.left == [] and not plan.unplaced, plan.left
    assert sum(len(p) for p in plan.where.values()) == 5


def test_a_gang_packed_by_the_plan_is_not_spread_by_the_check_into_nodes_more() -> None:
    """Seed 386 of a checker that acts on plans: the gang g (4, 1 and 4 GPUs) was left to the scheduler's
    own search, which spread it (LeastAllocated) into room planned for others; two more rounds bought nodes
    for it, six l40s nodes (18.0/h) of which two ran nothing, then four (12.0/h) once the empty ones were
    dropped. With the gang's members nominated where the plan packs them the scheduler binds every pod on
    three nodes, the fewest: 11 GPUs and 48 CPUs need three 4-GPU, 48-CPU nodes."""
    plan = plan_scale_up(inputs(seed_386()), types_of([{**L40S, "price": 3.0}]), GATES)
    assert plan.left == [] and not plan.unplaced
    assert sum(len(p) for p in plan.where.values()) == 6
    assert all(plan.where.get(b.name) for b in plan.added), [b.name for b in plan.added]
    assert plan.cost == 9.0 and len(plan.added) == 3 and len(plan.searches) == 1
    doc = plan_document(plan)["status"]
    assert doc["costPerHour"] == 9.0 and all(a["pods"] for a in doc["add"])


def test_gang_members_land_beside_the_pods_the_plan_packed_them_with() -> None:
    """Checker seed 20258: p0 (1 GPU) and the gang g0 (1), g1 (1), g2 (4) fit two l40s nodes; the
    scheduler's LeastAllocated scoring put g0 and g1 each on an empty node, g2 then found no 4 free GPUs and
    a second round bought two nodes more (four in all, optimal: false)."""
    objs = [claim("c0", gpus(1)), claim("g0", gpus(1)), claim("g1", gpus(1)), claim("g2", gpus(4))]
    objs += [pod_group("g", 3), pod("p0", claims=("c0",))]
    objs += [pod(f"g{i}", claims=(f"g{i}",), group="g") for i in range(3)]
    plan = plan_scale_up(inputs(objs), types_of([{**L40S, "price": 8.0}]), GATES)
    assert plan.left == [] and not plan.unplaced
    assert len(plan.added) == 2 and plan.optimal, (plan.where, plan.optimal)
    assert sum(len(p) for p in plan.where.values()) == 4


def test_a_rack_gang_lands_on_the_node_the_plan_packed_it_on() -> None:
    """Checker seed 20086 (racks of two h100 nodes): p0, p1 (one shared claim) and p2 take 2 GPUs, the
    rack gang g0 (4) and g1 (1) five more; one node holds them all. Left to the scheduler's domain search
    the gang went to a node of its own, which a second round added."""
    objs = [claim("c0", gpus(1)), claim("c2", gpus(1)), claim("g0", gpus(4)), claim("g1", gpus(1))]
    objs += [pod_group("g", 2, required=LABEL_RACK)]
    objs += [pod("p0", claims=("c0",)), pod("p1", claims=("c0",)), pod("p2", claims=("c2",))]
    objs += [pod(f"g{i}", claims=(f"g{i}",), group="g") for i in range(2)]
    racked = {**H100, "price": 34.0, "topology": {"nodesPerRack": 2}}
    plan = plan_scale_up(inputs(objs), types_of([racked]), GATES)
    assert plan.left == [] and not plan.unplaced
    assert len(plan.added) == 1 and len(plan.searches) == 1, plan.where
    assert sum(len(p) for p in plan.where.values()) == 5


def test_added_nodes_the_scheduler_leaves_empty_are_not_in_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """The seed-386 case with the gang left to the scheduler's own search: it spreads the gang and a second
    round adds three nodes of which it uses one. The two it leaves empty are dropped after a check with the
    rest, which still binds every pod: four nodes, 12.0/h."""
    import kdra.plan.scaleup as scaleup

    plain = scaleup._expected_nodes
    monkeypatch.setattr(
        scaleup, "_expected_nodes", lambda s, jobs: plain(s, [j for j in jobs if j.gang is None])
    )
    plan = plan_scale_up(inputs(seed_386()), types_of([{**L40S, "price": 3.0}]), GATES)
    assert plan.left == [] and not plan.unplaced
    assert sum(len(p) for p in plan.where.values()) == 6
    assert all(plan.where.get(b.name) for b in plan.added), [b.name for b in plan.added]
    assert plan.cost == 12.0 and len(plan.added) == 4


def test_a_rack_gang_of_unlike_members_gets_one_node() -> None:
    """Checker seed 20173 with rack gangs: the scheduler's domain estimate counted members like the first
    (4 GPUs: two per h100 node) and refused the rack gang g0 (4), g1 (1), g2 (1) on the node the plan packed
    it on; every round bought one more h100 node for it, five at 13.0/h that ran nothing. The estimate now
    takes the lightest member: one node, the gang on it."""
    plan = plan_scale_up(inputs(rack_gang()), types_of([RACKED]), GATES)
    assert plan.left == [] and [len(plan.where[b.name]) for b in plan.added] == [3]
    assert plan.cost == 13.0


def test_nodes_bought_for_pods_the_scheduler_still_leaves_pending_are_not_in_the_plan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where the scheduler refuses what the plan packed (here every topology domain refused, as the old
    estimate did for the gang above), a round whose nodes bind none of what they were bought for ends the
    rounds, and nodes left empty are dropped: the gang is reported pending, not five nodes running nothing."""
    from kdra.scheduler.topology import TopologyPlanner

    monkeypatch.setattr(TopologyPlanner, "plan", lambda self, *a: ([], "topology: refused"))
    plan = plan_scale_up(inputs(rack_gang()), types_of([RACKED]), GATES)
    assert sorted(plan.left) == ["ml/g0", "ml/g1", "ml/g2"] and plan.added == [], (plan.left, plan.added)
    assert plan.cost == 0


def seed_386() -> list[Obj]:
    """A gang g (4, 1 and 4 GPUs) beside three pods sharing a 2-GPU claim, one of them asking 40 CPUs."""
    objs = [claim("c0", gpus(2)), claim("g0", gpus(4)), claim("g1", gpus(1)), claim("g2", gpus(4))]
    objs += [pod_group("g", 3)]
    objs += [pod(f"p{i}", claims=("c0",), cpu=cpu) for i, cpu in ((0, "4"), (2, "1"), (3, "40"))]
    return objs + [pod(f"g{i}", claims=(f"g{i}",), group="g") for i in range(3)]


RACKED = {**H100, "price": 13.0, "topology": {"nodesPerRack": 2}}


def rack_gang() -> list[Obj]:
    objs = [claim("g0", gpus(4)), claim("g1", gpus(1)), claim("g2", gpus(1))]
    objs += [pod_group("g", 3, required=LABEL_RACK)]
    return objs + [pod(f"g{i}", claims=(f"g{i}",), group="g") for i in range(3)]
