"""Gang scheduling: all or nothing with claims, released reservations, explanations, timeout, shapes."""

from __future__ import annotations

from typing import Any

from builders import gpu_slice, node, pod
from helpers import bound, condition, fleet, gang_pods, pod_group, scheduler

from kdra.cluster import MemoryStore


def test_gang_binds_all_members_when_all_fit() -> None:
    s = MemoryStore()
    fleet(s, 4)
    sched, _gq = scheduler(s)
    s.create(pod_group("train", 4))
    gang_pods(s, "train", 4, gpus=8)
    sched.run(0)
    assert len(bound(s, "train")) == 4
    pg = s.get("PodGroup", "train", "default")["status"]["conditions"][0]
    assert (pg["status"], pg["reason"], pg["message"]) == ("True", "Scheduled", "4 members placed")
    claims = [c for c in s.list("ResourceClaim") if c["status"].get("allocation")]
    assert len(claims) == 4
    assert all(len(c["status"]["allocation"]["devices"]["results"]) == 8 for c in claims)


def test_a_gang_that_does_not_fit_explains_each_member_once_with_the_gangs_verdict() -> None:
    """Every attempt of a gang that fits nowhere writes each member's PodScheduled condition once, with the
    gang's verdict: never the member's own attempt first (a reader in between saw the wrong text, and on a
    live cluster every retry cost each member two status writes and two Events)."""
    s = MemoryStore()
    fleet(s, 2)
    sched, _gq = scheduler(s)
    s.create(pod_group("big", 2))
    gang_pods(s, "big", 2, gpus=9)
    written: list[tuple[str, str]] = []

    def on_pod(ev: Any) -> None:
        conds = (ev.object.get("status") or {}).get("conditions") or []
        old = ((ev.old or {}).get("status") or {}).get("conditions") or []
        if conds != old:
            c = next(c for c in conds if c["type"] == "PodScheduled")
            written.append((ev.object["metadata"]["name"], c["message"]))

    s.watch(on_pod, ["Pod"])
    sched.run(0)
    assert sorted(name for name, _ in written) == ["big-000", "big-001"], written
    assert all("PodGroup default/big" in msg and "fits nowhere" in msg for _, msg in written), written
    # a node arrives (still too small): the retry rewrites each member once, with the new verdict
    s.create(node("n002", cpu="128", memory="1Ti"))
    s.create(gpu_slice("n002", count=8))
    written.clear()
    sched.run(1000.0)
    assert sorted(name for name, _ in written) == ["big-000", "big-001"], written
    assert all("0/3 nodes" in msg and "fits nowhere" in msg for _, msg in written), written


def test_gang_that_does_not_fit_binds_nothing_and_releases_reservations() -> None:
    s = MemoryStore()
    fleet(s, 4)
    sched, _gq = scheduler(s)
    s.create(pod_group("big", 5))
    gang_pods(s, "big", 5, gpus=8)
    sched.run(0)
    assert bound(s, "big") == {}
    assert sched.waiting == {}
    assert not any((c.get("status") or {}).get("allocation") for c in s.list("ResourceClaim"))
    assert sched.dra.state.dedicated == set()  # partial reservations released
    msg = condition(s, "big-000")
    assert "PodGroup default/big" in msg and "only 4 of the 5 members" in msg
    assert "fits nowhere" in msg
    pg = s.get("PodGroup", "big", "default")["status"]["conditions"][0]
    assert (pg["type"], pg["status"], pg["reason"]) == ("PodGroupScheduled", "False", "Unschedulable")
    # the released devices serve a smaller gang at once
    s.create(pod_group("small", 2))
    gang_pods(s, "small", 2, gpus=8)
    sched.run(1)
    assert len(bound(s, "small")) == 2


def test_gang_waits_for_its_members_and_its_group() -> None:
    s = MemoryStore()
    fleet(s, 4)
    sched, _gq = scheduler(s)
    s.create(pod_group("g", 3))
    gang_pods(s, "g", 2, gpus=1)
    sched.run(0)
    assert bound(s, "g") == {}
    assert "fewer than minCount 3 pods exist" in condition(s, "g-000")
    pg = s.get("PodGroup", "g", "default")["status"]["conditions"][0]
    assert "2 of minCount 3 pods exist" in pg["message"]
    gang_pods(s, "orphan", 1, gpus=1)
    sched.run(1)
    assert "waiting for its PodGroup" in condition(s, "orphan-000")


def test_a_gathering_gangs_group_counts_its_members_below_the_verdict_with_one_event() -> None:
    """The group object counts the members that exist on the line below its verdict; a member arriving
    changes only that detail, which posts no new Event (one per verdict, not one per member)."""
    s = MemoryStore()
    fleet(s, 4)
    sched, gq = scheduler(s)
    s.create(pod_group("g", 4))
    gang_pods(s, "g", 2, gpus=1)
    sched.run(0)
    p = pod("g-002", cpu="1", template_name="g-t")
    p["metadata"]["annotations"] = {"kdra.dev/pod-group": "g"}
    s.create(p)
    sched.run(1)
    pg = s.get("PodGroup", "g", "default")["status"]["conditions"][0]
    assert pg["message"] == (
        "PodGroup default/g waits for members: fewer than minCount 4 pods exist and are ready for "
        "scheduling\n3 of minCount 4 pods exist"
    )
    assert [(e[0], e[2]) for e in gq.status.events] == [("PodGroup default/g", "Unschedulable")]
    assert bound(s, "g") == {}


def test_a_gang_with_a_member_not_ready_for_scheduling_waits_for_it() -> None:
    """Every member exists but one waits for its ResourceClaim (PreEnqueue): the gang waits for members, as
    upstream's GangScheduling waits at Permit, rather than failing a placement of the others; the group
    object says how many are not ready."""
    s = MemoryStore()
    fleet(s, 4)
    sched, _gq = scheduler(s)
    s.create(pod_group("g", 2))
    gang_pods(s, "g", 1, gpus=1)
    p = pod("g-001", cpu="1")
    p["metadata"]["annotations"] = {"kdra.dev/pod-group": "g"}
    p["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "not-yet"}]
    s.create(p)
    sched.run(0)
    assert bound(s, "g") == {}
    assert condition(s, "g-000") == (
        "PodGroup default/g waits for members: fewer than minCount 2 pods exist and are ready for scheduling"
    )
    pg = s.get("PodGroup", "g", "default")["status"]["conditions"][0]
    assert pg["message"].split("\n")[1] == (
        "2 of minCount 2 pods exist, 1 not ready for scheduling "
        "(their ResourceClaims not created yet, or gated)"
    )


def test_gang_timeout_marks_the_group_unschedulable() -> None:
    s = MemoryStore()
    fleet(s, 2)
    sched, gq = scheduler(s)
    s.create(pod_group("big", 3, scheduleTimeout="60s"))
    gang_pods(s, "big", 3, gpus=8)
    sched.run(0)
    sched.queue.flush_unschedulable_leftover(400)
    sched.run(400)
    pg = s.get("PodGroup", "big", "default")
    cond = pg["status"]["conditions"][0]
    assert cond["reason"] == "GangScheduleTimeout" and pg["status"]["phase"] == "Unschedulable"
    assert "scheduleTimeout (60s)" in condition(s, "big-000")
    assert "default/big" in gq.timed_out
    assert not sched.queue.in_flight_or_queued(s.get("Pod", "big-000", "default")["metadata"]["uid"])


def test_upstream_workload_and_kai_volcano_shapes() -> None:
    s = MemoryStore()
    fleet(s, 4)
    sched, gq = scheduler(s)
    s.create(
        {
            "apiVersion": "scheduling.k8s.io/v1alpha2",
            "kind": "Workload",
            "metadata": {"name": "job"},
            "spec": {
                "podGroupTemplates": [{"name": "workers", "schedulingPolicy": {"gang": {"minCount": 2}}}]
            },
        }
    )
    s.create(
        {
            "apiVersion": "scheduling.k8s.io/v1alpha2",
            "kind": "PodGroup",
            "metadata": {"name": "job-workers-0"},
            "spec": {
                "podGroupTemplateRef": {
                    "workload": {"workloadName": "job", "podGroupTemplateName": "workers"}
                }
            },
        }
    )
    assert gq.gangs.spec("default/job-workers-0").min_count == 2  # type: ignore[union-attr]
    from builders import pod, template

    s.create(template("t1", count=8))
    for i in range(3):
        p = pod(f"w{i}", template_name="t1")
        p["spec"]["schedulingGroup"] = {"podGroupName": "job-workers-0"}
        s.create(p)
    sched.run(0)
    assert len(bound(s, "w")) == 3
    for api, extra in (
        ("scheduling.run.ai/v2alpha2", {"queue": "q"}),
        (
            "scheduling.volcano.sh/v1beta1",
            {"networkTopology": {"mode": "hard", "highestTierName": "kdra.dev/rack"}},
        ),
    ):
        obj = {
            "apiVersion": api,
            "kind": "PodGroup",
            "metadata": {"name": api.split(".")[1]},
            "spec": {"minMember": 7, **extra},
        }
        s.create(obj)
    kai = gq.gangs.spec("default/run")
    vol = gq.gangs.spec("default/volcano")
    assert kai is not None and kai.min_count == 7 and kai.queue == "q"
    assert vol is not None and vol.topology.required == "kdra.dev/rack"


def test_gang_64_by_8_on_100_nodes() -> None:
    s = MemoryStore()
    fleet(s, 100)
    sched, _gq = scheduler(s)
    s.create(pod_group("llm", 64))
    gang_pods(s, "llm", 64, gpus=8)
    sched.run(0)
    got = bound(s, "llm")
    assert len(got) == 64 and len(set(got.values())) == 64
    s.create(pod_group("llm2", 64))
    gang_pods(s, "llm2", 64, gpus=8)
    sched.run(1)
    assert bound(s, "llm2") == {}
    assert len(sched.dra.state.dedicated) == 64 * 8


def test_scheduling_shard_sets_the_placement_policy() -> None:
    import pytest

    from kdra.errors import InputError
    from kdra.scheduler.gangqueues import options_from_shard

    shard = {
        "apiVersion": "kai.scheduler/v1",
        "kind": "SchedulingShard",
        "metadata": {"name": "default"},
        "spec": {
            "placementStrategy": {"gpu": "binpack"},
            "gangTimeout": "10m",
            "fragmentationShapes": {"8": 1},
        },
    }
    opts = options_from_shard(shard)
    assert (
        opts.placement == "binpack" and opts.gang_timeout == 600 and opts.fragmentation_shapes == {8.0: 1.0}
    )
    s = MemoryStore()
    s.create(shard)
    _sched, gq = scheduler(s)
    assert [p.name for p in gq.scorers] == ["DeviceBinPack"]
    with pytest.raises(InputError, match=r"placementStrategy.gpu: Unsupported value: 'tetris'"):
        options_from_shard({"metadata": {"name": "x"}, "spec": {"placementStrategy": {"gpu": "tetris"}}})


def test_min_member_below_replicas_places_what_fits_then_the_rest_one_by_one() -> None:
    s = MemoryStore()
    fleet(s, 3)
    sched, _gq = scheduler(s)
    s.create(pod_group("elastic", 2))
    gang_pods(s, "elastic", 4, gpus=8)
    sched.run(0)
    assert len(bound(s, "elastic")) == 3  # minMember met: every member that fits binds
    done = s.get("Pod", "elastic-000", "default")
    s.update(dict(done, status=dict(done.get("status") or {}, phase="Succeeded")), subresource="status")
    sched.run(5)
    assert "elastic-003" in bound(s, "elastic")


def test_upstream_1_35_workload_ref_one_gang_per_replica() -> None:
    s = MemoryStore()
    fleet(s, 2)
    sched, gq = scheduler(s)
    s.create(
        {
            "apiVersion": "scheduling.k8s.io/v1alpha1",
            "kind": "Workload",
            "metadata": {"name": "lws"},
            "spec": {"podGroups": [{"name": "leaders", "policy": {"gang": {"minCount": 2}}}]},
        }
    )
    from builders import pod, template

    s.create(template("t8", count=8))
    for replica in ("0", "1"):
        for i in range(2):
            p = pod(f"r{replica}-{i}", template_name="t8")
            p["spec"]["workloadRef"] = {"name": "lws", "podGroup": "leaders", "podGroupReplicaKey": replica}
            s.create(p)
    sched.run(0)
    got = bound(s, "r")
    assert sorted(got) == ["r0-0", "r0-1"]  # replica 0 fits whole; replica 1 waits whole
    spec = gq.gangs.spec("default/lws/leaders/1")
    assert spec is not None and spec.min_count == 2
    assert "only 0 of the 2 members" in condition(s, "r1-0")


def test_an_elastic_gangs_condition_counts_every_member_placed() -> None:
    """minMember 2 of 5: the first two bind together, the other three join one by one later; the
    condition counts the members bound, not those of the last session."""
    s = MemoryStore()
    fleet(s, 2)
    sched, _gq = scheduler(s)
    s.create(pod_group("elastic", 2))
    gang_pods(s, "elastic", 2, gpus=1)
    sched.run(0)
    pg = s.get("PodGroup", "elastic", "default")["status"]
    assert pg["conditions"][0]["message"] == "2 members placed"
    from builders import pod

    for i in range(2, 5):
        p = pod(f"elastic-{i:03d}", cpu="1", template_name="elastic-t")
        p["metadata"]["annotations"] = {"kdra.dev/pod-group": "elastic"}
        s.create(p)
        sched.run(i)
    assert len(bound(s, "elastic")) == 5
    pg = s.get("PodGroup", "elastic", "default")["status"]
    assert pg["conditions"][0]["message"] == "5 members placed" and pg["scheduled"] == 5
