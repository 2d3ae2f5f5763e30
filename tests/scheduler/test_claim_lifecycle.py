"""Claim lifecycle: created from a template as the resourceclaim controller does, allocated, reserved, shared,
released and deleted; KEP-5004 extended-resource claims."""

from __future__ import annotations

import pytest
from builders import claim, device_class, gpu_slice, node, pod, template

from kdra.cluster import MemoryStore, clone
from kdra.scheduler.dra import DELETE_PROTECTION_FINALIZER
from kdra.scheduler.scheduler import Scheduler


@pytest.fixture
def cluster() -> tuple[MemoryStore, Scheduler]:
    s = MemoryStore()
    s.create(device_class(extended_resource="example.com/gpu"))
    for n in ("n1", "n2"):
        s.create(node(n))
        s.create(gpu_slice(n, 2))
    s.create(template("one"))
    return s, Scheduler(s)


def finish(s: MemoryStore, name: str) -> None:
    p = clone(s.get("Pod", name, "default"))
    p.setdefault("status", {})["phase"] = "Succeeded"
    s.update(p, subresource="status")


def test_template_claim_named_owned_annotated_and_recorded(cluster: tuple[MemoryStore, Scheduler]) -> None:
    s, _sch = cluster
    created = s.create(pod("trainer", template_name="one"))
    claims = s.list("ResourceClaim")
    assert len(claims) == 1
    c = claims[0]
    assert c["metadata"]["generateName"] == "trainer-gpu-"
    assert (
        c["metadata"]["name"].startswith("trainer-gpu-")
        and len(c["metadata"]["name"]) == len("trainer-gpu-") + 5
    )
    assert c["metadata"]["annotations"]["resource.kubernetes.io/pod-claim-name"] == "gpu"
    (owner,) = c["metadata"]["ownerReferences"]
    assert owner["kind"] == "Pod" and owner["uid"] == created["metadata"]["uid"]
    assert owner["controller"] is True and "blockOwnerDeletion" not in owner  # as kcm's handleClaim
    p = s.get("Pod", "trainer", "default")
    assert p["status"]["resourceClaimStatuses"] == [
        {"name": "gpu", "resourceClaimName": c["metadata"]["name"]}
    ]


def test_long_names_truncated_like_the_controller(cluster: tuple[MemoryStore, Scheduler]) -> None:
    s, _ = cluster
    long = "a" * 60
    s.create(pod(long, template_name="one"))
    c = s.list("ResourceClaim")[0]
    assert len(c["metadata"]["generateName"]) <= 57
    assert len(c["metadata"]["name"]) <= 63


def test_allocate_reserve_bind_then_release_and_delete(cluster: tuple[MemoryStore, Scheduler]) -> None:
    s, sch = cluster
    s.create(pod("p", template_name="one"))
    (res,) = sch.run(0)
    assert res.node is not None
    c = s.list("ResourceClaim")[0]
    assert DELETE_PROTECTION_FINALIZER in c["metadata"]["finalizers"]
    results = c["status"]["allocation"]["devices"]["results"]
    assert [r["pool"] for r in results] == [res.node]
    assert c["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [
        res.node
    ]
    p = s.get("Pod", "p", "default")
    assert c["status"]["reservedFor"] == [{"resource": "pods", "name": "p", "uid": p["metadata"]["uid"]}]
    assert p["spec"]["nodeName"] == res.node
    assert any(
        cond["type"] == "PodScheduled" and cond["status"] == "True" for cond in p["status"]["conditions"]
    )
    finish(s, "p")
    assert s.list("ResourceClaim") == []  # deallocated, finalizer removed, deleted with its pod's completion
    assert sch.dra.state.dedicated == set()


def test_freed_devices_let_a_pending_pod_in(cluster: tuple[MemoryStore, Scheduler]) -> None:
    s, sch = cluster
    for i in range(5):
        s.create(pod(f"p{i}", template_name="one"))
    got = {r.pod: r.node for r in sch.run(0)}
    assert sum(1 for n in got.values() if n) == 4
    assert got["default/p4"] is None
    finish(s, "p0")
    got = {r.pod: r.node for r in sch.run(1)}
    assert got["default/p4"] is not None


def test_shared_claim_allocated_once_reserved_by_all_released_by_the_last(
    cluster: tuple[MemoryStore, Scheduler],
) -> None:
    s, sch = cluster
    s.create(claim("shared"))
    s.create(pod("a", claim_name="shared"))
    s.create(pod("b", claim_name="shared"))
    got = {r.pod: r.node for r in sch.run(0)}
    assert got["default/a"] is not None and got["default/a"] == got["default/b"]
    c = s.get("ResourceClaim", "shared", "default")
    assert [r["name"] for r in c["status"]["reservedFor"]] == ["a", "b"]
    assert len(c["status"]["allocation"]["devices"]["results"]) == 1
    finish(s, "a")
    c = s.get("ResourceClaim", "shared", "default")
    assert [r["name"] for r in c["status"]["reservedFor"]] == ["b"] and c["status"]["allocation"]
    finish(s, "b")
    c = s.get("ResourceClaim", "shared", "default")
    assert "allocation" not in c["status"] and "reservedFor" not in c["status"]
    assert DELETE_PROTECTION_FINALIZER not in (c["metadata"].get("finalizers") or [])
    assert sch.dra.state.dedicated == set()


def test_reserved_for_is_limited_to_256_consumers() -> None:
    s = MemoryStore()
    s.create(device_class())
    s.create(node("n", cpu="1000", pods="1000"))
    s.create(gpu_slice("n", 1))
    s.create(claim("shared"))
    sch = Scheduler(s)
    for i in range(257):
        s.create(pod(f"p{i:03d}", cpu="1m", claim_name="shared"))
    got = {r.pod: r.node for r in sch.run(0)}
    assert sum(1 for n in got.values() if n) == 256
    assert got["default/p256"] is None
    cond = next(
        c for c in s.get("Pod", "p256", "default")["status"]["conditions"] if c["type"] == "PodScheduled"
    )
    assert "resourceclaim in use" in cond["message"]


def test_pod_waits_for_a_claim_that_does_not_exist_yet(cluster: tuple[MemoryStore, Scheduler]) -> None:
    s, sch = cluster
    s.create(pod("p", claim_name="later"))
    assert sch.run(0) == []  # gated by PreEnqueue
    s.create(claim("later"))
    (res,) = sch.run(1)
    assert res.node is not None


def test_extended_resource_served_by_dra(cluster: tuple[MemoryStore, Scheduler]) -> None:
    """KEP-5004: no node advertises example.com/gpu; DRA serves it via the class's extendedResourceName."""
    s, sch = cluster
    s.create(pod("legacy", limits={"example.com/gpu": "2"}))
    (res,) = sch.run(0)
    assert res.node is not None
    p = s.get("Pod", "legacy", "default")
    st = p["status"]["extendedResourceClaimStatus"]
    c = s.get("ResourceClaim", st["resourceClaimName"], "default")
    assert c["metadata"]["annotations"]["resource.kubernetes.io/extended-resource-claim"] == "true"
    assert c["metadata"]["generateName"] == "legacy-extended-resources-"
    assert [r["name"] for r in c["spec"]["devices"]["requests"]] == ["container-0-request-0"]
    assert len(c["status"]["allocation"]["devices"]["results"]) == 2
    assert st["requestMappings"] == [
        {"containerName": "main", "resourceName": "example.com/gpu", "requestName": "container-0-request-0"}
    ]
    finish(s, "legacy")
    assert s.try_get("ResourceClaim", st["resourceClaimName"], "default") is None


def test_shares_release_their_consumed_capacity_exactly() -> None:
    s = MemoryStore()
    s.create(device_class())
    s.create(node("n1"))
    sl = gpu_slice("n1", 1)
    dev = sl["spec"]["devices"][0]
    dev["allowMultipleAllocations"] = True
    dev["capacity"]["memory"]["requestPolicy"] = {"default": "10Gi"}
    s.create(sl)
    tpl = template("share")
    tpl["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {"requests": {"memory": "20Gi"}}
    s.create(tpl)
    sch = Scheduler(s)
    for name in ("a", "b", "c"):
        s.create(pod(name, template_name="share"))
    assert all(r.node == "n1" for r in sch.run(0))
    key = ("gpu.example.com", "n1", "gpu-0")
    gi = 2**30 * 10**9
    assert sch.dra.state.consumed[key] == {"memory": 60 * gi}
    ids = sorted(
        r["shareID"] for c in s.list("ResourceClaim") for r in c["status"]["allocation"]["devices"]["results"]
    )
    assert len(set(ids)) == 3
    finish(s, "a")
    assert sch.dra.state.consumed[key] == {"memory": 40 * gi} and key in sch.dra.state.shared
    finish(s, "b")
    finish(s, "c")
    assert key not in sch.dra.state.consumed and key not in sch.dra.state.shared


def test_prebind_rechecks_a_claim_someone_else_allocated_meanwhile(
    cluster: tuple[MemoryStore, Scheduler],
) -> None:
    """Issue 18 item 6: between kdra's finalizer write and its status write another scheduler allocates
    the claim (other devices, reserved for the same pod). PreBind must not write its own allocation over
    it: the attempt fails, and the pod's retry binds where the other allocation is."""
    from builders import DRIVER

    s, sch = cluster
    created = s.create(pod("p", template_name="one"))
    ref = {"resource": "pods", "name": "p", "uid": created["metadata"]["uid"]}
    theirs = {
        "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "n2", "device": "gpu-1"}]},
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}
            ]
        },
    }
    status_writes: list[object] = []

    def other_scheduler(ev: object) -> None:
        obj = ev.object  # type: ignore[attr-defined]
        fins = obj["metadata"].get("finalizers") or []
        if DELETE_PROTECTION_FINALIZER in fins and not (obj.get("status") or {}).get("allocation"):
            upd = clone(obj)
            upd["status"] = {"allocation": theirs, "reservedFor": [ref]}
            s.update(upd, subresource="status")
        elif (obj.get("status") or {}).get("allocation"):
            status_writes.append(obj["status"]["allocation"])

    s.watch(other_scheduler, kinds=("ResourceClaim",))
    (first,) = sch.run(0)
    assert first.node is None and "allocated meanwhile by someone else" in first.message
    c = s.list("ResourceClaim")[0]
    assert c["status"]["allocation"] == theirs  # not overwritten
    assert status_writes == [theirs]
    (second,) = sch.run(100)  # after the backoff: the claim is allocated and reserved for the pod
    assert second.node == "n2"
    assert s.get("Pod", "p", "default")["spec"]["nodeName"] == "n2"
    assert s.list("ResourceClaim")[0]["status"]["allocation"] == theirs


def test_extended_resource_pods_asking_for_different_counts_do_not_share_a_fit(
    cluster: tuple[MemoryStore, Scheduler],
) -> None:
    """KEP-5004: the claim made for `example.com/gpu: 2` asks for twice the devices of `: 1`. A fit found on
    a node for the 1-GPU pod (which then went elsewhere) must not answer for the 2-GPU pod: n1 has 1 GPU
    free, n2 has 1 GPU free once the 1-GPU pod took the other one, so the 2-GPU pod fits nowhere."""
    s, sch = cluster
    s.create(pod("hold", cpu="4", template_name="one", node_selector={"kubernetes.io/hostname": "n1"}))
    assert [r.node for r in sch.run(0)] == ["n1"]
    s.create(pod("one-gpu", limits={"example.com/gpu": "1"}))
    assert [r.node for r in sch.run(1)] == ["n2"]  # LeastAllocated: n1 runs a 4-cpu pod
    s.create(pod("two-gpus", limits={"example.com/gpu": "2"}))
    (res,) = sch.run(2)
    assert res.node is None, [c["status"].get("allocation") for c in s.list("ResourceClaim")]
