"""PodGroup-level ResourceClaims (KEP-5729, gate DRAWorkloadResourceClaims) in memory: the claim controller
makes a group's claim once from its template, the scheduler allocates it once for the whole gang and
reserves it for the PodGroup, as kube-controller-manager and kube-scheduler v1.38.0-beta.0 do
(pkg/controller/resourceclaim/controller.go handlePodGroupClaim; dynamicresources.go podResourceClaimBindings,
PreFilter's pending allocations; resourceclaim.go BindTo)."""

from __future__ import annotations

from typing import Any

from builders import claim, device_class, gpu_slice, node, template
from helpers import bound

from kdra.api.features import FeatureGates
from kdra.cluster import MemoryStore
from kdra.cluster.store import clone
from kdra.scheduler.gangqueues import GangQueueOptions, GangQueues
from kdra.scheduler.scheduler import Scheduler, SchedulerConfig

Obj = dict[str, Any]
GATES = "GenericWorkload=true,DRAWorkloadResourceClaims=true"
ON = FeatureGates.parse(GATES, version="1.38")
SHARED = {"name": "shared", "resourceClaimTemplateName": "shared-t"}


def world(nodes: int = 2, gpus: int = 4, features: FeatureGates = ON) -> tuple[MemoryStore, Scheduler]:
    s = MemoryStore()
    s.create(device_class("gpu"))
    for i in range(nodes):
        s.create(node(f"n{i}", cpu="64", memory="512Gi", labels={"rack": f"r{i // 2}"}))
        s.create(gpu_slice(f"n{i}", count=gpus))
    s.create(template("shared-t", count=1))
    s.create(template("own-t", count=1))
    gq = GangQueues(s, GangQueueOptions())
    return s, Scheduler(s, gq.config(SchedulerConfig(features=features)))


def pod_group(name: str, min_count: int, claims: list[Obj], **spec: Any) -> Obj:
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}, "resourceClaims": claims, **spec},
    }


def member(name: str, group: str, claims: list[Obj]) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulingGroup": {"podGroupName": group},
            "resourceClaims": claims,
            "containers": [
                {
                    "name": "main",
                    "image": "x",
                    "resources": {"requests": {"cpu": "1"}, "claims": [{"name": c["name"]} for c in claims]},
                }
            ],
        },
    }


def claims_of(s: MemoryStore) -> dict[str, Obj]:
    return {c["metadata"]["name"]: c for c in s.list("ResourceClaim")}


def test_one_claim_for_the_gang_allocated_once_and_reserved_for_the_pod_group() -> None:
    s, sched = world()
    pg = s.create(pod_group("g", 3, [SHARED]))
    for i in range(3):
        s.create(member(f"m{i}", "g", [SHARED, {"name": "own", "resourceClaimTemplateName": "own-t"}]))
    sched.run(0)

    pg = s.get("PodGroup", "g", "default")
    (group_status,) = pg["status"]["resourceClaimStatuses"]
    name = group_status["resourceClaimName"]
    claims = claims_of(s)
    shared = claims[name]
    assert (
        group_status["name"] == "shared"
        and name.startswith("g-shared-")
        and len(name) == len("g-shared-") + 5
    )
    assert shared["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "name": "g",
            "uid": pg["metadata"]["uid"],
            "controller": True,
        }
    ]
    assert shared["metadata"]["annotations"] == {"resource.kubernetes.io/pod-claim-name": "shared"}
    # Three own claims and one shared: no member got a claim of its own for the group's entry.
    assert sorted(n.rsplit("-", 1)[0] for n in claims) == ["g-shared", "m0-own", "m1-own", "m2-own"]
    assert len(bound(s)) == 3
    assert shared["status"]["reservedFor"] == [
        {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "g", "uid": pg["metadata"]["uid"]}
    ]
    (result,) = shared["status"]["allocation"]["devices"]["results"]
    for i in range(3):
        p = s.get("Pod", f"m{i}", "default")
        statuses = {st["name"]: st["resourceClaimName"] for st in p["status"]["resourceClaimStatuses"]}
        assert [st["name"] for st in p["status"]["resourceClaimStatuses"]] == ["own", "shared"]  # sorted
        assert statuses["shared"] == name
        own = claims[statuses["own"]]
        assert own["status"]["reservedFor"] == [
            {"resource": "pods", "name": f"m{i}", "uid": p["metadata"]["uid"]}
        ]
        assert own["status"]["allocation"]["devices"]["results"][0]["device"] != result["device"]
    # The shared device is node-local: the gang lands where it is, as upstream's pending allocation makes it.
    assert set(bound(s).values()) == {allocated_node(shared)}


def allocated_node(claim: Obj) -> str:
    (term,) = claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"]
    (field,) = term["matchFields"]
    return str(field["values"][0])


def own(i: int) -> Obj:
    return {"name": "own", "resourceClaimTemplateName": f"own{i}-t"}


def test_without_the_gate_every_member_has_a_claim_of_its_own() -> None:
    """DRAWorkloadResourceClaims off (1.38's default): BindTo is never asked, the template makes a claim per
    pod and each is reserved for its pod (as kube-controller-manager and kube-scheduler do then)."""
    s, sched = world(features=FeatureGates.parse("GenericWorkload=true", version="1.38"))
    s.create(pod_group("g", 2, [SHARED]))
    for i in range(2):
        s.create(member(f"m{i}", "g", [SHARED]))
    sched.run(0)
    claims = claims_of(s)
    assert sorted(n.rsplit("-", 1)[0] for n in claims) == ["m0-shared", "m1-shared"]
    assert len(bound(s)) == 2
    for c in claims.values():
        assert c["status"]["reservedFor"][0]["resource"] == "pods"
    assert "resourceClaimStatuses" not in s.get("PodGroup", "g", "default")["status"]


def test_a_named_claim_of_the_group_is_reserved_for_the_group_once() -> None:
    """resourceClaimName: the user's claim; members whose entry matches share it, reserved for the PodGroup
    (not one reservedFor entry per pod, which caps a shared claim at 256 consumers)."""
    s, sched = world()
    s.create(claim("dataset", count=1))
    entry = {"name": "data", "resourceClaimName": "dataset"}
    pg = s.create(pod_group("g", 3, [entry]))
    for i in range(3):
        s.create(member(f"m{i}", "g", [entry]))
    sched.run(0)
    assert len(bound(s)) == 3
    c = s.get("ResourceClaim", "dataset", "default")
    assert c["status"]["reservedFor"] == [
        {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "g", "uid": pg["metadata"]["uid"]}
    ]
    assert len(c["status"]["allocation"]["devices"]["results"]) == 1


def test_a_gang_that_fits_no_node_with_the_group_claim_allocates_nothing() -> None:
    """The group's node-local device pins every member to its node; three members of three GPUs each find
    no room beside it on 4-GPU nodes: the gang waits and holds no device (nothing is written)."""
    s, sched = world(nodes=2, gpus=4)
    s.create(template("three", count=3))
    s.create(pod_group("g", 3, [SHARED]))
    for i in range(3):
        s.create(member(f"m{i}", "g", [SHARED, {"name": "own", "resourceClaimTemplateName": "three"}]))
    sched.run(0)
    assert bound(s) == {}
    assert all("allocation" not in (c.get("status") or {}) for c in s.list("ResourceClaim"))
    assert sched.dra.assumed == {}
    cond = s.get("Pod", "m0", "default")["status"]["conditions"][0]
    assert cond["reason"] == "Unschedulable" and "fit at once" in cond["message"]


def network_slice(name: str, rack: str, devices: int = 1) -> Obj:
    """Devices reachable from every node of a rack (a network-attached pool: spec.nodeSelector)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": "fabric.example.com",
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "rack", "operator": "In", "values": [rack]}]}
                ]
            },
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {"name": f"{name}-{i}", "attributes": {"rack": {"string": rack}}} for i in range(devices)
            ],
        },
    }


def fabric_world(racks: int = 2) -> tuple[MemoryStore, Scheduler]:
    s, sched = world(nodes=2 * racks, gpus=4)
    s.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "fabric"},
            "spec": {"selectors": [{"cel": {"expression": 'device.driver == "fabric.example.com"'}}]},
        }
    )
    s.create(template("fabric-t", count=1, cls="fabric"))
    s.create(template("three", count=3))
    return s, sched


def test_a_network_attached_group_device_serves_members_on_several_nodes() -> None:
    """A device reachable from a rack's nodes (slice nodeSelector): the group's claim is allocated once with
    that nodeSelector, and members that need more GPUs than one node has spread over the rack."""
    s, sched = fabric_world(racks=1)
    s.create(network_slice("r0-fabric", "r0"))
    fabric = {"name": "fabric", "resourceClaimTemplateName": "fabric-t"}
    s.create(pod_group("g", 2, [fabric]))
    for i in range(2):
        s.create(member(f"m{i}", "g", [fabric, {"name": "own", "resourceClaimTemplateName": "three"}]))
    sched.run(0)
    assert sorted(bound(s).values()) == ["n0", "n1"]
    (shared,) = [c for c in s.list("ResourceClaim") if c["metadata"]["name"].startswith("g-fabric-")]
    alloc = shared["status"]["allocation"]
    assert [r["device"] for r in alloc["devices"]["results"]] == ["r0-fabric-0"]
    assert alloc["nodeSelector"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["r0"]
    assert shared["status"]["reservedFor"][0]["resource"] == "podgroups"


def test_the_group_device_comes_from_the_topology_domain_the_gang_lands_in() -> None:
    """A PodGroup with a rack topology constraint and a rack's fabric device: rack r0 is full, so the gang
    and the device it shares are both in r1 (the claim is allocated in the domain being tried)."""
    s, sched = fabric_world(racks=2)
    s.create(network_slice("r0-fabric", "r0"))
    s.create(network_slice("r1-fabric", "r1"))
    s.create(template("four", count=4))
    for i in range(2):  # rack r0's GPUs are taken
        s.create(pod_group(f"busy{i}", 1, []))
        s.create(member(f"busy{i}", f"busy{i}", [{"name": "own", "resourceClaimTemplateName": "four"}]))
    sched.run(0)
    assert sorted(bound(s).values()) == ["n0", "n1"]
    fabric = {"name": "fabric", "resourceClaimTemplateName": "fabric-t"}
    s.create(pod_group("g", 2, [fabric], schedulingConstraints={"topology": [{"key": "rack"}]}))
    for i in range(2):
        s.create(member(f"m{i}", "g", [fabric, {"name": "own", "resourceClaimTemplateName": "three"}]))
    sched.run(1)
    assert sorted(v for k, v in bound(s).items() if k.startswith("m")) == ["n2", "n3"]
    (shared,) = [c for c in s.list("ResourceClaim") if c["metadata"]["name"].startswith("g-fabric-")]
    assert [r["device"] for r in shared["status"]["allocation"]["devices"]["results"]] == ["r1-fabric-0"]


def test_the_group_claim_outlives_its_pods_and_goes_with_the_pod_group() -> None:
    """Members that finish leave the claim reserved for the PodGroup (it may start more); deleting the
    PodGroup deallocates it and deletes it (the claim controller's syncClaim and the garbage collector)."""
    s, sched = world()
    s.create(pod_group("g", 2, [SHARED]))
    for i in range(2):
        s.create(member(f"m{i}", "g", [SHARED]))
    sched.run(0)
    assert len(bound(s)) == 2
    name = s.get("PodGroup", "g", "default")["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    for i in range(2):
        p = clone(s.get("Pod", f"m{i}", "default"))
        p["status"]["phase"] = "Succeeded"
        s.update(p, subresource="status")
    c = s.get("ResourceClaim", name, "default")
    assert c["status"]["allocation"] and c["status"]["reservedFor"][0]["name"] == "g"
    s.delete("PodGroup", "g", "default")
    assert s.try_get("ResourceClaim", name, "default") is None
    assert sched.dra.allocated == {}


def test_a_group_claim_left_allocated_where_the_gang_no_longer_fits_is_released() -> None:
    """PodGroupPostFilter: the group's claim is allocated on n0 (its earlier members are gone) and n0 is
    now full; with no member bound the claim is deallocated, and the gang is placed on n1 with a new
    allocation."""
    s, sched = world(nodes=2, gpus=4)
    s.create(template("four", count=4))
    s.create(template("three", count=3))
    pg = s.create(pod_group("g", 1, [SHARED]))
    s.create(member("first", "g", [SHARED]))
    sched.run(0)
    name = s.get("PodGroup", "g", "default")["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    node0 = allocated_node(s.get("ResourceClaim", name, "default"))
    s.delete("Pod", "first", "default")
    s.create(pod_group("busy", 1, []))
    busy = member("busy", "busy", [{"name": "own", "resourceClaimTemplateName": "three"}])
    busy["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node0}
    s.create(busy)  # three of node0's four GPUs
    sched.run(1)
    assert bound(s) == {"busy": node0}
    s.create(member("second", "g", [SHARED, {"name": "own", "resourceClaimTemplateName": "three"}]))
    sched.run(2)
    assert "second" not in bound(s)
    assert "allocation" not in s.get("ResourceClaim", name, "default")["status"]
    msg = s.get("Pod", "second", "default")["status"]["conditions"][0]["message"]
    assert f"released the claims its pending members held: default/{name}" in msg
    sched.queue.flush_unschedulable_leftover(400)
    sched.run(400)
    other = "n1" if node0 == "n0" else "n0"
    assert bound(s)["second"] == other
    c = s.get("ResourceClaim", name, "default")
    assert allocated_node(c) == other and c["status"]["reservedFor"][0]["uid"] == pg["metadata"]["uid"]


def test_the_group_claim_counts_once_for_its_queue() -> None:
    """Queue usage: the PodGroup's claim is held once for the gang, not once per member."""
    s = MemoryStore()
    s.create(device_class("gpu"))
    s.create(node("n0", cpu="64", memory="512Gi"))
    s.create(gpu_slice("n0", count=8))
    s.create(template("shared-t", count=1))
    s.create(template("own-t", count=1))
    gq = GangQueues(s, GangQueueOptions())
    sched = Scheduler(s, gq.config(SchedulerConfig(features=ON)))
    s.create(pod_group("g", 3, [SHARED]))
    for i in range(3):
        s.create(member(f"m{i}", "g", [SHARED, {"name": "own", "resourceClaimTemplateName": "own-t"}]))
    sched.run(0)
    assert len(bound(s)) == 3
    assert sum(u.usage.get("deviceclass/gpu", 0) for u in gq.usage.values()) == 4


def test_a_claim_another_pod_is_allocating_makes_the_pod_wait() -> None:
    """PreFilter: a claim with an allocation in flight is shared only within the gang deciding it (upstream:
    the same PodGroup scheduling cycle); any other pod is told it is being allocated, instead of allocating
    it a second time."""
    from kdra.scheduler.framework import CycleState
    from kdra.scheduler.plugins.dynamicresources import DynamicResources
    from kdra.scheduler.podinfo import PodInfo

    s, sched = world()
    c = s.create(claim("dataset"))
    sched.dra.assume(c, {"devices": {"results": []}}, holder="someone")
    p = s.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"resourceClaims": [{"name": "d", "resourceClaimName": "dataset"}], "containers": []},
        }
    )
    dynres = next(pl for pl in sched.profile.plugins if isinstance(pl, DynamicResources))
    st = dynres.pre_filter(CycleState(), PodInfo(p))
    assert not st.ok and st.message == "resource claim default/dataset is in the process of being allocated"
