"""The fault tests' invariant checker must catch each violation it names (and pass a consistent cluster)."""

from __future__ import annotations

from typing import Any

from support.invariants import check_cluster, holdings

Obj = dict[str, Any]


class FakeLister:
    def __init__(self, objs: list[Obj]) -> None:
        self.objs = objs

    def list(self, kind: str, namespace: str | None = None) -> list[Obj]:
        return [
            o
            for o in self.objs
            if o["kind"] == kind and (namespace is None or o["metadata"].get("namespace") == namespace)
        ]


def node(name: str) -> Obj:
    return {"kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}}


def slice_(node_name: str, devices: list[Obj]) -> Obj:
    return {
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-gpu"},
        "spec": {
            "driver": "gpu.example.com",
            "pool": {"name": node_name},
            "nodeName": node_name,
            "devices": devices,
        },
    }


def pod(name: str, node_name: str | None = None, claim: str | None = None, **meta: Any) -> Obj:
    spec: Obj = {"schedulerName": "kdra"}
    if node_name:
        spec["nodeName"] = node_name
    if claim:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", **meta},
        "spec": spec,
    }


def claim(name: str, node_name: str, device: str, reserved: list[str], **result: Any) -> Obj:
    return {
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "finalizers": ["resource.kubernetes.io/delete-protection"],
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "gpu",
                            "driver": "gpu.example.com",
                            "pool": node_name,
                            "device": device,
                            **result,
                        }
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
                    ]
                },
            },
            "reservedFor": [{"resource": "pods", "name": p, "uid": f"uid-{p}"} for p in reserved],
        },
    }


def rules(objs: list[Obj], **kw: Any) -> list[str]:
    return sorted(v.rule for v in check_cluster(FakeLister(objs), **kw))


def world() -> list[Obj]:
    return [node("n1"), node("n2"), slice_("n1", [{"name": "gpu-0"}, {"name": "gpu-1"}])]


def test_consistent_cluster_has_no_violation() -> None:
    objs = [*world(), pod("a", "n1", "ca"), claim("ca", "n1", "gpu-0", ["a"])]
    assert rules(objs) == []


def test_device_in_two_claims_is_a_double_allocation() -> None:
    objs = [*world(), pod("a", "n1", "ca"), pod("b", "n1", "cb")]
    objs += [claim("ca", "n1", "gpu-0", ["a"]), claim("cb", "n1", "gpu-0", ["b"])]
    assert rules(objs) == ["double-allocation"]


def test_shares_within_capacity_are_fine_and_past_it_are_not() -> None:
    shared = {"name": "gpu-0", "allowMultipleAllocations": True, "capacity": {"memory": {"value": "80Gi"}}}
    base = [node("n1"), slice_("n1", [shared]), pod("a", "n1", "ca"), pod("b", "n1", "cb")]
    ok = [
        claim("ca", "n1", "gpu-0", ["a"], consumedCapacity={"memory": "40Gi"}),
        claim("cb", "n1", "gpu-0", ["b"], consumedCapacity={"memory": "40Gi"}),
    ]
    assert rules(base + ok) == []
    over = [
        claim("ca", "n1", "gpu-0", ["a"], consumedCapacity={"memory": "60Gi"}),
        claim("cb", "n1", "gpu-0", ["b"], consumedCapacity={"memory": "40Gi"}),
    ]
    assert rules(base + over) == ["double-allocation"]


def test_bound_pod_without_reservation_or_on_the_wrong_node() -> None:
    assert rules([*world(), pod("a", "n1", "ca"), claim("ca", "n1", "gpu-0", [])]) == ["leak", "unreserved"]
    assert rules([*world(), pod("a", "n2", "ca"), claim("ca", "n1", "gpu-0", ["a"])]) == ["wrong-node"]


def test_a_pod_group_claim_reserved_for_the_members_pod_group_is_held_kep_5729() -> None:
    """A PodGroup-level claim is reserved for the scheduling.k8s.io PodGroup, not its pods (resourceclaim.go
    IsReservedForPod): held by each bound member of that group, by no pod of another."""

    def member(name: str, group: str) -> Obj:
        p = pod(name, "n1", "shared")
        p["spec"]["schedulingGroup"] = {"podGroupName": group}
        return p

    shared = claim("shared", "n1", "gpu-0", [])
    ref = {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "g1", "uid": "uid-g1"}
    shared["status"]["reservedFor"] = [ref]
    assert rules([*world(), member("a", "g1"), member("b", "g1"), shared]) == []
    assert rules([*world(), member("a", "g2"), shared]) == ["unreserved"]


def test_reservation_for_a_gone_pod_is_a_leak() -> None:
    assert rules([*world(), claim("ca", "n1", "gpu-0", ["gone"])]) == ["leak"]


def test_pending_pod_without_explanation() -> None:
    explained = pod("p")
    explained["status"] = {
        "conditions": [{"type": "PodScheduled", "status": "False", "message": "0/2 nodes"}]
    }
    assert rules([*world(), pod("q"), explained]) == ["unexplained"]


def test_an_explanation_naming_another_pods_claim_or_namespace() -> None:
    def pending(name: str, message: str, namespace: str = "ns") -> Obj:
        p = pod(name, claim=f"{name}-dev")
        p["metadata"]["namespace"] = namespace
        p["status"] = {"conditions": [{"type": "PodScheduled", "status": "False", "message": message}]}
        return p

    spaces = [{"kind": "Namespace", "metadata": {"name": n}} for n in ("ns", "other")]
    own = pending("a", "claim ns/a-dev, request g: adding 100 devices exceeds the claim limit")
    assert rules([*world(), *spaces, own]) == []
    same_ns = pending("b", "0/2 nodes are available\n  claim ns/a-dev: request gpu cannot be satisfied")
    other_ns = pending("c", "claim other/c-dev, request g: ...", namespace="ns")
    event = {
        "kind": "Event",
        "metadata": {"name": "e", "namespace": "ns"},
        "involvedObject": {"kind": "Pod", "name": "a", "namespace": "ns"},
        "message": "preempted by other/hi",
    }
    assert rules([*world(), *spaces, same_ns, other_ns]) == ["foreign-name", "foreign-name"]
    assert rules([*world(), *spaces, own, event]) == ["foreign-name"]
    # a pod of a claim template whose status names a second claim (kube-controller-manager made one after the
    # pod ended): its Events still name the claim it ran with, its own; a look-alike name is not
    ended = pending("d", "0/1 nodes are available\n  claim ns/d-gpu-x7k2p: request gpu cannot be satisfied")
    ended["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one"}]
    ended["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": "d-gpu-q9w4z"}]
    assert rules([*world(), *spaces, ended]) == []
    ended["status"]["conditions"][0]["message"] += "\n  claim ns/d-gpu-other-x7k2p: ..."
    assert rules([*world(), *spaces, ended]) == ["foreign-name"]


def test_partial_gang() -> None:
    group = {"kind": "PodGroup", "metadata": {"name": "g", "namespace": "ns"}, "spec": {"minMember": 2}}
    member = {"annotations": {"kdra.dev/pod-group": "g"}}
    a = pod("a", "n1", "ca", **member)
    b = pod("b", None, None, **member)
    b["status"] = {"conditions": [{"type": "PodScheduled", "status": "False", "message": "gang waits"}]}
    assert rules([*world(), group, a, b, claim("ca", "n1", "gpu-0", ["a"])]) == ["partial-gang"]
    assert rules([*world(), group, b]) == []


def test_devices_drawing_more_than_a_counter_set_holds_are_a_double_allocation() -> None:
    """A MIG-shaped pool: the whole GPU and two halves draw on one counter set; the whole GPU and one half
    allocated at once overuse it, the two halves do not."""
    from support.invariants import counter_overuse

    def dev(name: str, mem: str) -> dict:
        return {
            "name": name,
            "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": mem}}}],
        }

    slices = [
        {
            "spec": {
                "driver": "d",
                "pool": {"name": "n"},
                "sharedCounters": [{"name": "gpu-0", "counters": {"memory": {"value": "80Gi"}}}],
            }
        },
        {
            "spec": {
                "driver": "d",
                "pool": {"name": "n"},
                "devices": [dev("whole", "80Gi"), dev("a", "40Gi"), dev("b", "40Gi")],
            }
        },
    ]

    def claim(name: str, device: str) -> dict:
        result = {"request": "r", "driver": "d", "pool": "n", "device": device}
        return {
            "metadata": {"name": name, "namespace": "ns"},
            "status": {"allocation": {"devices": {"results": [result]}}},
        }

    assert counter_overuse([claim("x", "a"), claim("y", "b")], slices) == []
    found = counter_overuse([claim("x", "whole"), claim("y", "a")], slices)
    assert [(v.rule, v.object) for v in found] == [("double-allocation", "counter set d/n/gpu-0")]
    assert "120Gi of 80Gi" in found[0].message and "ns/x" in found[0].message


def _audit(t: float, verb: str, resource: str, name: str, agent: str, code: int = 200, sub: str = "") -> Obj:
    import datetime as dt

    ts = dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    ref = {"resource": resource, "namespace": "ns", "name": name}
    if sub:
        ref["subresource"] = sub
    kind = f"{resource}/{name}" if name else resource
    return {
        "stage": "ResponseComplete",
        "verb": verb,
        "requestURI": f"/api/v1/namespaces/ns/{kind}" + (f"/{sub}" if sub else "") + "?timeout=30s",
        "userAgent": agent,
        "objectRef": ref,
        "responseStatus": {"code": code},
        "requestReceivedTimestamp": ts,
    }


def test_writes_after_the_lease_ran_out_are_stale_whatever_their_answer(tmp_path: Any) -> None:
    import json

    from support.invariants import audit_events, writes_after_lease_loss

    a, b = "kdra/0.1.0 (scheduler/a)", "kdra/0.1.0 (scheduler/b)"
    events = [
        _audit(100.0, "create", "leases", "", a, 201),  # a acquires
        _audit(100.5, "update", "resourceclaims", "c1", a, sub="status"),
        _audit(101.0, "update", "leases", "kdra", a),  # last renewal: a leads until 102.0 at the latest
        _audit(101.9, "create", "pods", "p1", a, 201, sub="binding"),
        _audit(102.5, "update", "leases", "kdra", b),  # b takes over
        _audit(103.0, "update", "resourceclaims", "c2", a, 504, sub="status"),  # may have committed
        _audit(103.1, "update", "leases", "kdra", a, 409),  # a conditional Lease write that failed
        _audit(103.2, "create", "pods", "p2", b, 201, sub="binding"),
        _audit(99.0, "patch", "pods", "p0", b, sub="status"),  # b before it led
    ]
    log = tmp_path / "audit.log"
    log.write_text(
        "\n".join(json.dumps(e) for e in sorted(events, key=lambda e: e["requestReceivedTimestamp"]))
    )
    log.write_text(log.read_text() + '\n{"stage": "ResponseComp')  # a line being written
    evs = audit_events(log)
    assert len(evs) == len(events)
    stale_a = writes_after_lease_loss(evs, writer="(scheduler/a)", lease="kdra", renew_deadline=1.0)
    assert [v.message for v in stale_a] == [
        "update resourceclaims/status ns/c2 -> 504, received 1.00s after its lease ran out"
    ]
    stale_b = writes_after_lease_loss(evs, writer="(scheduler/b)", lease="kdra", renew_deadline=1.0)
    assert [v.message for v in stale_b] == ["patch pods/status ns/p0 -> 200, received before it led"]
    assert writes_after_lease_loss(evs, writer="(scheduler/a)", lease="kdra", renew_deadline=2.5) == []
    # a write the writer itself reported sent after its lease ran out (paused past its last check) is not
    # one it missed; any other still is
    late = ("PUT", "/api/v1/namespaces/ns/resourceclaims/c2/status")
    assert (
        writes_after_lease_loss(
            evs, writer="(scheduler/a)", lease="kdra", renew_deadline=1.0, reported=[late]
        )
        == []
    )
    other = ("PUT", "/api/v1/namespaces/ns/resourceclaims/c1/status")
    assert (
        len(
            writes_after_lease_loss(
                evs, writer="(scheduler/a)", lease="kdra", renew_deadline=1.0, reported=[other]
            )
        )
        == 1
    )


def test_a_preemptions_outcome_forgotten_preemptor_excess_victims_and_intruder() -> None:
    from support.invariants import preemption_outcome

    high = pod("high", "n1", "ch")
    waiting = pod("high2")
    waiting["status"] = {"nominatedNodeName": "n1"}
    intruder = pod("intruder", "n1", "ci")
    survivor = pod("low-b", "n1", "cb")
    going = pod("low-c", "n1", "cc", deletionTimestamp="2026-01-01T00:00:00Z")
    objs = [
        *world(),
        high,
        waiting,
        intruder,
        survivor,
        going,
        claim("ch", "n1", "gpu-0", ["high"]),
        claim("ci", "n1", "gpu-1", ["intruder"]),
        claim("cb", "n1", "gpu-2", ["low-b"]),
    ]
    got = preemption_outcome(
        FakeLister(objs),
        "ns",
        preemptors=["high", "high2"],
        preemptible=["low-a", "low-b", "low-c"],  # low-a gone, low-c terminating: 2 victims
        minimum=1,
        intruders=["intruder"],
        freed=["gpu.example.com/n1/gpu-1"],
    )
    assert sorted(v.rule for v in got) == ["excess-victims", "forgotten-preemptor", "intruder"], got
    assert "nominated to n1" in next(v.message for v in got if v.rule == "forgotten-preemptor")
    ok = preemption_outcome(
        FakeLister(objs),
        "ns",
        preemptors=["high"],
        preemptible=["low-a", "low-b", "low-c"],
        minimum=2,
        intruders=["intruder"],
        freed=["gpu.example.com/n1/gpu-0"],
    )
    assert ok == []


def test_who_holds_what_says_why_a_pod_is_not_bound() -> None:
    waiting = pod("server", claim="infer")
    waiting["status"] = {
        "phase": "Pending",
        "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/2 nodes fit"}
        ],
    }
    untried = pod("trainer", claim="train")
    text = holdings(FakeLister([waiting, untried, pod("done", node_name="n0")]), "ns")
    assert "pod server: node=- phase=Pending PodScheduled=False Unschedulable: 0/2 nodes fit" in text
    assert "pod trainer: node=- phase=- (no scheduler has written PodScheduled)" in text
    assert "pod done: node=n0 phase=-\n" in text
