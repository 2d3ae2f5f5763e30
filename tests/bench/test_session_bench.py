"""The gang/queue benchmark (benchmarks/bench_kube_session.py) hands both schedulers the same gangs, as
upstream Workload API objects kdra reads too, and its gang figures count from the right creation."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_kube_session as bench  # noqa: E402
from kdra.scheduler.gang import parse_pod_group, pod_group_ref, pod_queue  # noqa: E402

API = "scheduling.k8s.io/v1beta1"
ARGS = argparse.Namespace(seed=3, gangs=5, singles=20, queues=2, nodes=10, devices=4)


def objects(scheduler: str) -> list[dict[str, Any]]:
    return bench.session_objects("ns", ARGS, "gpu", scheduler, API)[0]


def test_both_schedulers_get_the_same_pods_in_the_same_order_and_the_same_upstream_gangs() -> None:
    kdra, kube = objects("kdra"), objects("default-scheduler")
    assert [(o["kind"], o["metadata"]["name"]) for o in kdra] == [
        (o["kind"], o["metadata"]["name"]) for o in kube
    ]
    for a, b in zip(kdra, kube, strict=True):
        if a["kind"] == "Pod":
            assert (a["spec"]["schedulerName"], b["spec"]["schedulerName"]) == ("kdra", "default-scheduler")
            b = {**b, "spec": {**b["spec"], "schedulerName": "kdra"}}
        assert a == b
    pods = [o for o in kdra if o["kind"] == "Pod"]
    groups = [o for o in kdra if o["kind"] == "PodGroup"]
    assert len(groups) == ARGS.gangs and len(pods) == ARGS.singles + sum(
        g["spec"]["schedulingPolicy"]["gang"]["minCount"] for g in groups
    )
    assert [bench.gang_of(p) for p in pods] != sorted(bench.gang_of(p) or "" for p in pods)  # shuffled


def test_kdra_reads_each_bench_pod_group_as_a_gang_of_all_its_members_charged_to_its_queue() -> None:
    objs = objects("kdra")
    workloads = {f"ns/{o['metadata']['name']}": o for o in objs if o["kind"] == "Workload"}
    for g in (o for o in objs if o["kind"] == "PodGroup"):
        assert g["apiVersion"] == API
        spec = parse_pod_group(g, workloads)
        members = [o for o in objs if o["kind"] == "Pod" and pod_group_ref(o) == ("PodGroup", spec.key)]
        assert spec.min_count == len(members) >= 4
        assert spec.queue in {"bench-q0", "bench-q1"}
    singles = [o for o in objs if o["kind"] == "Pod" and pod_group_ref(o) is None]
    assert len(singles) == ARGS.singles and all(pod_queue(p) for p in singles)


def audit(verb: str, name: str, sub: str | None, at: str, code: int = 201) -> dict[str, Any]:
    ref = {"resource": "pods", "namespace": "ns", "name": name}
    if sub:
        ref["subresource"] = sub
    return {"verb": verb, "objectRef": ref, "responseStatus": {"code": code}, "stageTimestamp": at}


def pod(name: str, gang: str | None) -> dict[str, Any]:
    spec = {"schedulingGroup": {"podGroupName": gang}} if gang else {}
    meta = {"name": name, "namespace": "ns", "creationTimestamp": "2026-01-01T00:00:00Z"}
    return {"metadata": meta, "spec": spec}


def test_pod_times_are_the_audit_logs_create_and_successful_binding_to_the_microsecond() -> None:
    events = [
        audit("create", "a", None, "2026-01-01T00:00:00.250000Z"),
        audit("create", "a", "binding", "2026-01-01T00:00:00.900000Z", code=409),  # refused
        audit("patch", "a", "status", "2026-01-01T00:00:01.000000Z", code=200),
        audit("create", "a", "binding", "2026-01-01T00:00:01.500000Z"),
        audit("create", "b", None, "2026-01-01T00:00:00.750000Z"),
    ]
    a, b = bench.pod_times(events, [pod("a", "g"), pod("b", None)])
    assert (a.gang, round(a.bound - a.created, 6)) == ("g", 1.25) and (b.gang, b.bound) == (None, None)


def test_a_member_bound_before_its_gang_is_complete_counts_and_ready_latency_starts_at_the_last_member() -> (
    None
):
    times = [
        bench.PodTimes("a", 0.0, 5.0),
        bench.PodTimes("a", 4.0, 5.0),
        bench.PodTimes("b", 0.0, 2.5),  # before b's last member exists
        bench.PodTimes("b", 3.0, 3.25),
        bench.PodTimes(None, 1.0, 1.5),
        bench.PodTimes("a", 1.0, None),  # pending
    ]
    assert bench.early_binds(times) == 1
    # a: 5 - 4 twice; b: 2.5 - 3 and 3.25 - 3; the single from its own creation
    assert bench.ready_latencies(times) == [-0.5, 0.25, 0.5, 1.0, 1.0]


def test_gang_ready_latency_counts_gang_members_alone_from_their_last_member() -> None:
    times = [
        bench.PodTimes("a", 0.0, 5.0),
        bench.PodTimes("a", 4.0, 5.5),
        bench.PodTimes(None, 1.0, 1.25),  # a single: not a gang member
    ]
    assert bench.gang_ready_latencies(times) == [1.0, 1.5]


def test_gang_phases_split_a_gangs_time_at_the_schedulers_first_claim_write() -> None:
    def claim_write(verb: str, claim: str, sub: str | None, received: str, done: str) -> dict[str, Any]:
        ev = audit(verb, claim, sub, done, code=200)
        ev["objectRef"]["resource"] = "resourceclaims"
        ev["requestReceivedTimestamp"] = received
        return ev

    t = "2026-01-01T00:00:0{}Z".format
    members = [pod("a", "g"), pod("b", "g"), pod("s", None)]
    for p, claim in zip(members, ("a-gpu", "b-gpu", "s-gpu"), strict=True):
        p["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": claim}]}
    events = [
        audit("create", "a", None, t("0.0")),
        audit("create", "b", None, t("1.0")),  # the last member: the gang's time starts here
        claim_write("update", "s-gpu", None, t("1.1"), t("1.1")),  # a single's claim: not the gang's
        claim_write("update", "b-gpu", None, t("1.2"), t("1.3")),  # received at 1.2: the start
        claim_write("update", "a-gpu", None, t("1.25"), t("1.3")),
        claim_write("update", "a-gpu", "status", t("1.3"), t("1.4")),
        audit("create", "a", "binding", t("1.5")),
        audit("create", "b", "binding", t("1.75")),
    ]
    [(start, commit)] = bench.gang_phases(events, members)
    assert (round(start, 6), round(commit, 6)) == (0.2, 0.55)
