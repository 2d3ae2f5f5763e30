"""The offline placement loop (kdra.scheduler.placement): kube-scheduler's Filter on every node, then its
Score plugins, as `kdra allocate`, `kdra explain` and the differential test run it; and its agreement with
the scheduler itself on the same objects."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest
from builders import DRIVER, device_class, gpu_slice, node, pod, template

from kdra.allocator import FeatureGates
from kdra.allocator.summary import NodesSummary
from kdra.cluster.store import MemoryStore
from kdra.errors import AllocationError
from kdra.scheduler import offline
from kdra.scheduler.placement import Placer
from kdra.scheduler.scheduler import Scheduler

Obj = dict[str, Any]


def first_available(name: str, *subs: tuple[str, str]) -> Obj:
    """A claim with one firstAvailable request: (subrequest name, model) in order."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "firstAvailable": [
                            {
                                "name": sub,
                                "deviceClassName": "gpu",
                                "selectors": [
                                    {
                                        "cel": {
                                            "expression": f'device.attributes["{DRIVER}"].model == "{model}"'
                                        }
                                    }
                                ],
                            }
                            for sub, model in subs
                        ],
                    }
                ]
            }
        },
    }


def test_the_first_available_subrequest_wins_over_the_node_name() -> None:
    """KEP-4816 scoring: a node where the claim gets its first choice beats one earlier by name where it only
    gets a later choice (kube-scheduler 1.35+; kdra allocate took the first node by name)."""
    objs = [
        node("a-small"),
        node("b-big"),
        gpu_slice("a-small", model="L4"),
        gpu_slice("b-big", model="H100"),
    ]
    placer = Placer([*objs, device_class()], FeatureGates())
    claim = first_available("c", ("h100", "H100"), ("l4", "L4"))
    placement = placer.place(None, [claim])
    assert placement.node == "b-big"
    assert placement.allocations[0]["devices"]["results"][0]["request"] == "gpu/h100"
    scores = {s.node: s.plugins for s in placement.scores}
    assert scores["b-big"]["DynamicResources"] > scores["a-small"]["DynamicResources"]
    assert [s.node for s in placement.scores] == ["b-big", "a-small"]  # best first


def test_equal_scores_go_to_the_first_node_by_name() -> None:
    objs = [node(n) for n in ("n-c", "n-a", "n-b")] + [gpu_slice(n) for n in ("n-c", "n-a", "n-b")]
    placement = Placer([*objs, device_class()], FeatureGates()).place(pod("p"), [])
    assert placement.node == "n-a"
    assert len({s.total for s in placement.scores}) == 1


def test_preferences_and_resources_decide_as_the_scheduler_scores() -> None:
    """NodeAffinity preferences (weight 2), PreferNoSchedule taints (weight 3) and NodeResourcesFit's
    LeastAllocated (weight 1) move the choice away from the first node by name."""
    prefer = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 50,
                    "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
                }
            ]
        }
    }
    objs = [node("a", labels={"zone": "a"}), node("b", labels={"zone": "b"})]
    assert Placer(objs).place(pod("p", affinity=prefer), []).node == "b"
    tainted = [node("a", taints=[{"key": "spot", "effect": "PreferNoSchedule"}]), node("b")]
    assert Placer(tainted).place(pod("p"), []).node == "b"
    busy = [
        node("a", cpu="8"),
        node("b", cpu="8"),
        {**pod("running", cpu="6"), "spec": {**pod("running", cpu="6")["spec"], "nodeName": "a"}},
    ]
    placement = Placer(busy).place(pod("p"), [])
    assert placement.node == "b"
    assert placement.scores[0].plugins["NodeResourcesFit"] > placement.scores[1].plugins["NodeResourcesFit"]


def test_an_allocation_error_on_any_node_ends_the_attempt() -> None:
    """findNodesThatPassFilters: an error (a CEL runtime error on one node's devices) fails the pod even
    though another node, first by name, fits."""
    good = gpu_slice("a")
    bad = gpu_slice("b")
    for d in bad["spec"]["devices"]:
        del d["attributes"]["model"]
    claim = first_available("c", ("h100", "H100"))
    placement = Placer([node("a"), node("b"), good, bad, device_class()]).place(None, [claim])
    assert placement.node is None
    assert isinstance(placement.error, AllocationError)
    assert placement.error_node == "b"
    assert "no such key: model" in str(placement.error)


def test_pods_without_claims_are_checked_and_counted() -> None:
    """Node fit alone: resources, then the pods placed earlier take their share (as the scheduler assumes)."""
    placer = Placer([node("a", cpu="4"), node("b", cpu="2")])
    first = placer.place(pod("p1", cpu="3"), [])
    assert first.node == "a"
    placer.commit(first)
    second = placer.place(pod("p2", cpu="3"), [])
    assert second.node is None
    assert {f.node: f.reasons for f in second.findings} == {
        "a": ("Insufficient cpu",),
        "b": ("Insufficient cpu",),
    }


def test_extended_resources_a_device_class_serves_are_allocated_through_dra() -> None:
    """KEP-5004: `example.com/gpu: 2` with a DeviceClass naming it becomes a claim for two devices on a
    node without device-plugin capacity for it, alongside the pod's own claim."""
    objs = [node("a"), gpu_slice("a", count=4), device_class(extended_resource="example.com/gpu")]
    claim = offline.groups({"Pod": [], "ResourceClaim": [first_available("own", ("h100", "H100"))]})[
        0
    ].claims[0]
    p = pod("p", limits={"example.com/gpu": "2"})
    p["spec"]["resourceClaims"] = [{"name": "own", "resourceClaimName": "own"}]
    placer = Placer([*objs, claim, p])
    placement = placer.place(p, [claim])
    assert placement.node == "a"
    special = placement.extended_claim
    assert special is not None
    assert special["metadata"]["name"].startswith("p-extended-resources-")
    assert len(special["status"]["allocation"]["devices"]["results"]) == 2
    written = placer.commit(placement)
    assert written[-1]["metadata"]["name"].startswith("p-extended-resources-")
    assert written[-1]["status"]["reservedFor"][0]["name"] == "p"
    devices = {r["device"] for c in written for r in c["status"]["allocation"]["devices"]["results"]}
    assert len(devices) == 3  # three different GPUs: the claim's and the two extended resources


def test_nearest_nodes_are_those_that_came_closest() -> None:
    """A node that fails only a toleration and has the devices comes before nodes that fail the selector
    and have no device of the class, whatever their names."""
    tpu_taint = [{"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"}]
    objs = [
        node("a100-0", labels={"acc": "a100"}),
        node("a100-1", labels={"acc": "a100"}),
        node("a100-2", labels={"acc": "a100"}),
        node("tpu-0", labels={"acc": "tpu"}, taints=tpu_taint),
        gpu_slice("a100-0", model="A100"),
        gpu_slice("tpu-0", model="TPU"),
        device_class(),
        {
            **device_class("tpu"),
            "spec": {
                "selectors": [{"cel": {"expression": 'device.attributes["gpu.example.com"].model == "TPU"'}}]
            },
        },
    ]
    claim = offline.groups(
        {
            "ResourceClaim": [
                {
                    **first_available("t", ("tpu", "TPU")),
                    "spec": {
                        "devices": {"requests": [{"name": "tpu", "exactly": {"deviceClassName": "tpu"}}]}
                    },
                }
            ]
        }
    )[0].claims[0]
    placement = Placer(objs).place(pod("train", node_selector={"acc": "tpu"}), [claim])
    assert placement.node is None
    nearest = NodesSummary(placement.findings).nearest(3)
    assert nearest[0].node == "tpu-0"
    assert nearest[0].reasons == ("node(s) had untolerated taint {google.com/tpu: present}",)


def _world(seed: int) -> list[Obj]:
    """A small heterogeneous cluster and a stream of pods with claims, firstAvailable, selectors, taints."""
    rng = random.Random(seed)
    models = ["H100", "A100", "L4"]
    objs: list[Obj] = [device_class()]
    for i in range(6):
        name = f"node-{rng.choice('abc')}{i}"
        taints = [{"key": "spot", "effect": "PreferNoSchedule"}] if rng.random() < 0.3 else None
        objs.append(
            node(name, cpu=str(rng.choice([8, 16, 32])), labels={"zone": rng.choice("xy")}, taints=taints)
        )
        objs.append(gpu_slice(name, count=rng.choice([1, 2, 4]), model=rng.choice(models)))
    for j in range(3):
        t = template(f"t{j}", count=rng.choice([1, 2]))
        if rng.random() < 0.5:
            subs = rng.sample(models, 2)
            t["spec"]["spec"]["devices"]["requests"] = first_available("x", *[(m.lower(), m) for m in subs])[
                "spec"
            ]["devices"]["requests"]
        objs.append(t)
    for k in range(12):
        objs.append(pod(f"p{k:02d}", cpu=str(rng.choice([1, 2, 4])), template_name=f"t{rng.randrange(3)}"))
    return objs


@pytest.mark.parametrize("seed", range(8))
def test_allocate_places_every_pod_where_the_scheduler_does(seed: int) -> None:
    """The same objects through the scheduler (kdra simulate's and kdra scheduler's engine) and through
    the offline loop (kdra allocate): the same node and the same devices for every pod, in turn."""
    objs = _world(seed)
    store = MemoryStore()
    for o in objs:
        if o["kind"] != "Pod":
            store.create(copy.deepcopy(o))
    sch = Scheduler(store)
    want: dict[str, tuple[str | None, list[str]]] = {}
    for pod_obj in [o for o in objs if o["kind"] == "Pod"]:
        created = store.create(copy.deepcopy(pod_obj))  # one pod at a time, as kdra allocate takes them
        for _ in range(3):  # the claim controller creates the claim, then the pod is tried
            sch.run(0)
        bound = store.get("Pod", created["metadata"]["name"], "default")
        claims = [
            c
            for c in store.list("ResourceClaim")
            if any(
                r.get("uid") == created["metadata"]["uid"] for r in c["metadata"].get("ownerReferences") or []
            )
        ]
        want[bound["metadata"]["name"]] = (bound["spec"].get("nodeName"), _devices(claims))
    by_kind: dict[str, list[Obj]] = {}
    for o in objs:
        by_kind.setdefault(o["kind"], []).append(copy.deepcopy(o))
    result = offline.allocate(by_kind, FeatureGates())
    got = {
        g.pod["metadata"]["name"]: (p.node, _devices([{"status": {"allocation": a}} for a in p.allocations]))
        for g, p in result.placements
        if g.pod is not None
    }
    assert got == want
    assert sum(1 for n, _ in want.values() if n) >= 4  # most pods fit: the comparison says something


def _devices(claims: list[Obj]) -> list[str]:
    return sorted(
        f"{r['pool']}/{r['device']}"
        for c in claims
        if (c.get("status") or {}).get("allocation")
        for r in c["status"]["allocation"]["devices"]["results"]
    )


def test_a_verdict_shared_by_pods_of_one_shape_names_each_pods_own_claim() -> None:
    """kdra allocate and explain keep a node's verdict per pod signature: the allocation error on n1 (an All
    request meeting a pool being updated, a node error in 1.38) is computed for tenant-a's claim and, on
    tenant-b's pod, names tenant-b's claim (kdra.scheduler.owntext)."""
    incomplete = gpu_slice("n1", 2)
    incomplete["spec"]["pool"]["resourceSliceCount"] = 2
    objs: list[Obj] = [device_class(), node("n1"), incomplete]
    placer = Placer(objs, FeatureGates.for_version("1.38"))
    for ns in ("tenant-a", "tenant-b"):
        c = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": f"{ns}-all", "namespace": ns},
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "r", "exactly": {"deviceClassName": "gpu", "allocationMode": "All"}}
                    ]
                }
            },
        }
        p = pod("p", namespace=ns, claim_name=c["metadata"]["name"])
        placement = placer.place(p, [c])
        other = "tenant-b" if ns == "tenant-a" else "tenant-a"
        (finding,) = placement.findings
        assert (
            placement.node is None
            and f"claim {ns}/{ns}-all, request r: asks for all devices" in finding.message
        )
        assert other not in finding.message and other not in finding.text()
