"""The session's in-memory seams and what Kubernetes mode relies on, decided the same way in memory: the
binder's groups and listeners, the evictor's outcomes (refusals free nothing), stale gangs evicted whole,
claims of pending members released, invalid objects reported, the clock's timestamps, upstream v1beta1
PodGroups, and preemption across DeviceClasses of one physical GPU."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from builders import device_class, node, pod, template
from helpers import bound, condition, fleet, gang_pods, pod_group, queue, queued_pod, scheduler

from kdra.cluster import MemoryStore, VirtualClock, WallClock
from kdra.cluster.clock import formatter
from kdra.cluster.store import clone
from kdra.scheduler.framework import SUCCESS
from kdra.scheduler.gang import group_condition_type, parse_pod_group
from kdra.scheduler.gangqueues import GangQueueOptions, GangQueues
from kdra.scheduler.preemption import evict
from kdra.scheduler.scheduler import Scheduler, SchedulerConfig
from kdra.scheduler.seams import (
    EVICTED_FOR_ANNOTATION,
    EvictionOutcome,
    StoreBinder,
    StoreEvictor,
    StoreStatusWriter,
)

Obj = dict[str, Any]


def group_cond(store: MemoryStore, name: str) -> Obj:
    pg = store.get("PodGroup", name, "default")
    return next(c for c in pg["status"]["conditions"] if c["type"] == "PodGroupScheduled")


def test_clocks_format_their_own_timestamps() -> None:
    assert formatter(VirtualClock())(90) == "2026-01-01T00:01:30Z"
    assert formatter(WallClock())(0) == "1970-01-01T00:00:00Z"
    assert formatter(lambda: 0.0)(3600) == "2026-01-01T01:00:00Z"  # a bare callable: virtual dates


def test_a_gang_binds_as_one_group_and_its_status_counts_the_members() -> None:
    store = MemoryStore()
    fleet(store, 2, gpus=4)
    sched, gq = scheduler(store)
    store.create(pod_group("g", 3))
    gang_pods(store, "g", 3, gpus=2)
    groups: list[list[str]] = []
    commit = sched.binder.commit_group

    def spy(s: Any, group: Any) -> None:
        groups.append(sorted(pi.name for pi, _ in group.pods))
        commit(s, group)

    sched.binder.commit_group = spy  # type: ignore[method-assign]
    decided: list[str] = []
    sched.bind_listeners.append(lambda pi, node: decided.append(pi.name))
    sched.run(0)
    assert len(bound(store, "g-")) == 3
    assert ["g-000", "g-001", "g-002"] in groups  # one group for the three members
    assert sorted(decided) == ["g-000", "g-001", "g-002"]
    pg = store.get("PodGroup", "g", "default")
    assert pg["status"]["phase"] == "Scheduled" and pg["status"]["scheduled"] == 3
    assert group_cond(store, "g")["status"] == "True"
    assert isinstance(gq.status, StoreStatusWriter)
    assert any(e[2] == "Scheduled" for e in gq.status.events)


class RefusingEvictor(StoreEvictor):
    """Refuses every eviction, as a PodDisruptionBudget with no disruption allowed would."""

    def __init__(self, store: MemoryStore) -> None:
        super().__init__(store)
        self.asked: list[str] = []

    def refusals(self, pods: Sequence[Obj]) -> dict[str, str]:
        names = [f"{p['metadata'].get('namespace') or 'default'}/{p['metadata']['name']}" for p in pods]
        self.asked.extend(names)
        return {n: "Cannot evict pod as it would violate the pod's disruption budget." for n in names}

    def evict(
        self,
        pods: Sequence[Obj],
        message: str,
        *,
        dry_run_first: bool = True,
        evicted_for: str = "",
        nominate: Mapping[str, str] | None = None,
    ) -> EvictionOutcome:
        names = [f"{p['metadata'].get('namespace') or 'default'}/{p['metadata']['name']}" for p in pods]
        self.asked.extend(names)
        return EvictionOutcome(
            refused={n: "Cannot evict pod as it would violate the pod's disruption budget." for n in names}
        )


def test_a_refused_eviction_frees_nothing_and_the_preemptor_says_why() -> None:
    store = MemoryStore()
    fleet(store, 1, gpus=1)
    store.create(template("t1", count=1))
    evictor = RefusingEvictor(store)
    gq = GangQueues(store, GangQueueOptions(), evictor=evictor)
    sched = Scheduler(store, gq.config(SchedulerConfig()))
    store.create(pod("low", cpu="1", template_name="t1", priority=1))
    sched.run(0)
    assert bound(store) == {"low": "n000"}
    store.create(pod("high", cpu="1", template_name="t1", priority=100))
    sched.run(1)
    assert evictor.asked == ["default/low"]
    assert bound(store) == {"low": "n000"}  # nothing evicted, and the preemptor did not bind over it
    msg = condition(store, "high")
    assert "eviction of pod default/low refused" in msg and "disruption budget" in msg, msg
    assert gq.usage and any(u.name == "default/low" for u in gq.usage.values())  # still counted


def test_a_gang_running_below_its_minimum_is_evicted_whole_after_the_grace() -> None:
    store = MemoryStore()
    fleet(store, 1, gpus=8)
    sched, _gq = scheduler(store, stale_gang_grace=30)
    store.create(pod_group("g", 3))
    gang_pods(store, "g", 3, gpus=1)
    sched.run(0)
    assert len(bound(store, "g-")) == 3
    store.delete("Pod", "g-002", "default")  # a member is gone and nobody recreates it
    sched.run(10)
    assert len(bound(store, "g-")) == 2  # within the grace: the owner may still bring it back
    sched.run(45)
    assert bound(store, "g-") == {}  # evicted whole
    for name in ("g-000", "g-001"):
        p = store.get("Pod", name, "default")
        dt = next(c for c in p["status"]["conditions"] if c["type"] == "DisruptionTarget")
        assert p["status"]["phase"] == "Failed" and dt["reason"] == "PreemptionByScheduler"
    c = group_cond(store, "g")
    assert c["reason"] == "GangBelowMinimum" and "stale gang" in c["message"], c


def test_members_that_completed_keep_a_gang_from_being_stale() -> None:
    store = MemoryStore()
    fleet(store, 1, gpus=8)
    sched, _gq = scheduler(store, stale_gang_grace=1)
    store.create(pod_group("g", 2))
    gang_pods(store, "g", 2, gpus=1)
    sched.run(0)
    p = clone(store.get("Pod", "g-000", "default"))
    p["status"]["phase"] = "Succeeded"
    store.update(p, subresource="status")
    sched.run(100)
    partner = store.get("Pod", "g-001", "default")
    assert partner["spec"]["nodeName"] and partner["status"].get("phase") != "Failed"  # not rolled back


def test_claims_held_by_pending_members_are_released_when_the_gang_cannot_be_placed() -> None:
    """A binding cut short (a crash between writing a member's claim and binding it) leaves the claim
    allocated and reserved for a pending pod; if the gang cannot be placed now, the claim goes back."""
    store = MemoryStore()
    fleet(store, 1, gpus=4)
    sched, _gq = scheduler(store)
    store.create(pod_group("g", 3))
    gang_pods(store, "g", 3, gpus=2)  # 6 GPUs wanted, 4 there
    claims = sorted(store.list("ResourceClaim"), key=lambda c: c["metadata"]["name"])
    first = clone(claims[0])
    owner = first["metadata"]["ownerReferences"][0]
    first["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": "gpu.example.com", "pool": "n000", "device": f"gpu-{i}"}
                    for i in range(2)
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n000"]}]}
                ]
            },
        },
        "reservedFor": [{"resource": "pods", "name": owner["name"], "uid": owner["uid"]}],
    }
    store.update(first, subresource="status")
    sched.run(0)
    assert bound(store, "g-") == {}
    assert not [c for c in store.list("ResourceClaim") if (c.get("status") or {}).get("allocation")]
    assert "released the claims its pending members held" in condition(store, owner["name"])


def test_a_queue_naming_a_missing_parent_is_reported_and_its_jobs_wait() -> None:
    store = MemoryStore()
    fleet(store, 1, gpus=2)
    store.create(queue("orphan", gpu_quota=2, parentQueue="nope"))
    sched, gq = scheduler(store)
    queued_pod(store, "o", "orphan", 1)
    store.create(template("t1x", count=1))
    store.create(pod("free", cpu="1", template_name="t1x"))
    sched.run(0)
    assert bound(store) == {"free": "n000"}
    assert "its queue is invalid: Queue orphan: spec.parentQueue: Not found: 'nope'" in condition(store, "o")
    q = store.get("Queue", "orphan")
    valid = next(c for c in q["status"]["conditions"] if c["type"] == "Valid")
    assert valid["status"] == "False" and valid["reason"] == "InvalidSpec"
    assert isinstance(gq.status, StoreStatusWriter)
    assert [e for e in gq.status.events if e[2] == "InvalidSpec"] == [
        ("Queue orphan", "Warning", "InvalidSpec", valid["message"])
    ]
    sched.run(1)
    assert len([e for e in gq.status.events if e[2] == "InvalidSpec"]) == 1  # reported once


def test_queue_status_shows_allocated_deserved_and_fair_share() -> None:
    store = MemoryStore()
    fleet(store, 1, gpus=4)
    store.create(queue("a", gpu_quota=1, weight=1))
    store.create(queue("b", gpu_quota=1, weight=1))
    sched, _gq = scheduler(store)
    for i in range(3):
        queued_pod(store, f"a{i}", "a", 1)
        queued_pod(store, f"b{i}", "b", 1)
    sched.run(0)
    st = store.get("Queue", "a")["status"]
    assert st["allocated"]["deviceclass/gpu"] == "2" and st["fairShare"]["deviceclass/gpu"] == "2"
    assert st["deserved"] == {"deviceclass/gpu": "1"} and st["pendingJobs"] == 1
    waiting = next(c for c in st["conditions"] if c["type"] == "JobsWaiting")
    assert waiting["status"] == "True" and waiting["message"]


class FailingOnceStatusWriter(StoreStatusWriter):
    """The first status write fails, as one the API server times out or refuses under load would."""

    def __init__(self, store: MemoryStore) -> None:
        super().__init__(store)
        self.failed = 0

    def write_status(self, obj: Obj, status: Any) -> bool:
        if not self.failed:
            self.failed += 1
            return False
        return super().write_status(obj, status)


def test_a_queue_status_write_that_failed_is_written_at_the_next_report() -> None:
    store = MemoryStore()
    fleet(store, 1, gpus=4)
    store.create(queue("a", gpu_quota=1, weight=1))
    sched, gq = scheduler(store)
    gq.status = writer = FailingOnceStatusWriter(store)
    queued_pod(store, "a0", "a", 1)
    sched.run(0)
    assert writer.failed == 1 and "allocated" not in (store.get("Queue", "a").get("status") or {})
    sched.run(gq.options.status_interval)  # nothing changed since, but the status never landed
    assert store.get("Queue", "a")["status"]["allocated"]["deviceclass/gpu"] == "1"


def test_upstream_v1beta1_pod_group_reads_its_workload_template_and_topology() -> None:
    wl = {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": "w", "namespace": "ns"},
        "spec": {
            "podGroupTemplates": [
                {
                    "name": "workers",
                    "schedulingPolicy": {"gang": {"minCount": 4}},
                    "schedulingConstraints": {"topology": [{"key": "kdra.dev/rack"}]},
                    "priority": 7,
                }
            ]
        },
    }
    pg = {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "w-workers", "namespace": "ns"},
        "spec": {"workloadRef": {"workloadName": "w", "templateName": "workers"}},
    }
    g = parse_pod_group(pg, {"ns/w": wl})
    assert (g.min_count, g.topology.required, g.priority) == (4, "kdra.dev/rack", 7)
    assert group_condition_type(pg) == "PodGroupInitiallyScheduled"
    assert group_condition_type(dict(pg, apiVersion="scheduling.k8s.io/v1alpha2")) == "PodGroupScheduled"
    assert group_condition_type({"apiVersion": "kdra.dev/v1alpha1"}) == "PodGroupScheduled"


def partitioned_cluster(*names: str) -> MemoryStore:
    """Classes `gpu` (whole GPUs) and `part` (halves), and a node of one partitioned GPU per name."""
    store = MemoryStore()
    for cls in ("gpu", "part"):
        dc = device_class(cls)
        dc["spec"]["selectors"] = [
            {"cel": {"expression": f"device.attributes['gpu.example.com'].type == '{cls}'"}}
        ]
        store.create(dc)
    for name in names:
        partitioned_node(store, name)
    return store


def partitioned_node(store: MemoryStore, name: str) -> None:
    """One GPU offered as a whole device and as two halves, all drawing on one counter set (MIG's shape)."""
    counters = {"memory": {"value": "80Gi"}}
    half = {"memory": {"value": "40Gi"}}

    def dev(dname: str, kind: str, draw: Obj) -> Obj:
        return {
            "name": dname,
            "attributes": {"type": {"string": kind}},
            "consumesCounters": [{"counterSet": "gpu-0", "counters": draw}],
        }

    store.create(node(name, cpu="64", memory="256Gi"))
    pool = {"name": name, "generation": 1, "resourceSliceCount": 2}
    for suffix, spec in (
        ("counters", {"sharedCounters": [{"name": "gpu-0", "counters": counters}]}),
        (
            "gpus",
            {
                "devices": [
                    dev("gpu-0", "gpu", counters),
                    dev("gpu-0-a", "part", half),
                    dev("gpu-0-b", "part", half),
                ]
            },
        ),
    ):
        store.create(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{name}-{suffix}"},
                "spec": {"driver": "gpu.example.com", "nodeName": name, "pool": pool, **spec},
            }
        )


def test_preemption_across_device_classes_of_one_gpu_looks_node_by_node() -> None:
    """The victim holds half the GPU (class `part`); the preemptor wants the whole GPU (class `gpu`): no set
    of victims covers the need class by class, so the search goes by node, as kube-scheduler's does."""
    store = partitioned_cluster("n0")
    store.create(template("half", count=1, cls="part"))
    store.create(template("whole", count=1, cls="gpu"))
    sched, gq = scheduler(store)
    store.create(pod("low", cpu="1", template_name="half", priority=1))
    sched.run(0)
    assert bound(store) == {"low": "n0"}
    store.create(pod("high", cpu="1", template_name="whole", priority=100))
    sched.run(1)
    assert bound(store) == {"high": "n0"}
    assert gq.evicted == ["default/low"]


@pytest.mark.parametrize("whole_first", [True, False])
def test_each_preemptor_evicts_only_what_it_needs_and_a_second_one_takes_what_the_first_freed(
    whole_first: bool,
) -> None:
    """Two partitioned GPUs: a low pod on the whole of n0, a newer low pod on a half of n1. A preemptor for
    a whole GPU and one for both halves arrive together, in either order. Each evicts one victim, the one
    on the node it takes: the whole-GPU preemptor must not evict the half pod as well (that frees nothing
    of its class), and the second preemptor must still preempt in that session (once the first had
    evicted both, no lower-priority pod was left running, so it was skipped and waited for the victims to
    be gone, unnominated, while any pod could take what they free)."""
    store = partitioned_cluster("n0", "n1")
    store.create(template("half", count=1, cls="part"))
    store.create(template("halves", count=2, cls="part"))
    store.create(template("whole", count=1, cls="gpu"))
    sched, gq = scheduler(store)
    for t, (n, name, tmpl) in enumerate((("n0", "low-whole", "whole"), ("n1", "low-half", "half"))):
        store.create(pod(name, template_name=tmpl, priority=1, node_selector={"kubernetes.io/hostname": n}))
        sched.run(t)
    assert bound(store) == {"low-whole": "n0", "low-half": "n1"}
    # Jobs of one priority go in name order.
    names = (
        {"whole": "high-a", "halves": "high-b"} if whole_first else {"halves": "high-a", "whole": "high-b"}
    )
    for tmpl, name in names.items():
        store.create(pod(name, template_name=tmpl, priority=100))
    sched.run(5)
    assert sorted(gq.evicted) == ["default/low-half", "default/low-whole"]
    placed = {k: v for k, v in bound(store).items() if k.startswith("high")}
    assert sorted(placed) == ["high-a", "high-b"], placed
    for victim, where in (("low-whole", "n0"), ("low-half", "n1")):
        msg = (condition_of(store, victim, "DisruptionTarget") or {}).get("message", "")
        by = next(k for k, v in placed.items() if v == where)
        uid = store.get("Pod", by, "default")["metadata"]["uid"]
        assert f"preempted by pod {uid} " in msg, (victim, msg, placed)  # by uid, as kube-scheduler names it


def test_a_victim_on_a_node_the_preemptor_does_not_take_is_spared() -> None:
    """Two nodes of 2 GPUs, three low pods of 1 GPU (the newest on n000, where another one runs; one on
    n001). A preemptor for 2 GPUs on one node: the newest-first victims v1 (n000) and v2 (n001) cover its
    need, and it lands on n001, so only v2 is evicted; v1, on a node it does not take, keeps running (it was
    evicted for nothing before)."""
    store = MemoryStore()
    fleet(store, 2, gpus=2)
    store.create(template("one", count=1))
    store.create(template("two", count=2))
    sched, gq = scheduler(store)
    for t, (name, n) in enumerate((("v3", "n000"), ("v2", "n001"), ("v1", "n000"))):
        store.create(pod(name, template_name="one", priority=1, node_selector={"kubernetes.io/hostname": n}))
        sched.run(t)
    assert bound(store) == {"v1": "n000", "v2": "n001", "v3": "n000"}
    store.create(pod("high", template_name="two", priority=100))
    sched.run(10)
    assert gq.evicted == ["default/v2"]
    assert bound(store) == {"high": "n001", "v1": "n000", "v3": "n000"}
    assert not condition_of(store, "v1", "DisruptionTarget")
    sched.run(11)  # the spared victim's devices and claims are still its own: nothing moves
    assert bound(store) == {"high": "n001", "v1": "n000", "v3": "n000"}
    claims = {c["metadata"]["name"]: c for c in store.list("ResourceClaim")}
    v1_claim = next(c for n, c in claims.items() if n.startswith("v1-"))
    assert v1_claim["status"]["allocation"] and v1_claim["status"]["reservedFor"][0]["name"] == "v1"


def condition_of(store: MemoryStore, name: str, kind: str) -> Obj | None:
    conds = (store.get("Pod", name, "default").get("status") or {}).get("conditions") or []
    return next((c for c in conds if c["type"] == kind), None)


def test_preemptors_nominated_before_a_restart_keep_the_free_devices_and_evict_one_victim_more() -> None:
    """kdra was killed after two preemptors were nominated and the victims of one were gone: the restarted
    kdra finds 2 devices free for 3 wanted. The nominations are resumed first, the lower-priority pod
    arriving meanwhile waits (upstream counts nominated pods against lower priorities), and preempt takes
    what is free before choosing victims: one more victim, not two (victims minimal, no intruder)."""
    store = MemoryStore()
    fleet(store, 1, gpus=4)
    store.create(template("t1", count=1))
    store.create(template("t2", count=2))
    first, _ = scheduler(store)
    for name in ("low-a", "low-b"):
        store.create(pod(name, cpu="1", template_name="t1", priority=1))
    first.run(0)
    assert set(bound(store)) == {"low-a", "low-b"}
    restarted, _ = scheduler(store)
    for name, tmpl in (("high-one", "t1"), ("high-two", "t2")):
        p = pod(name, cpu="1", template_name=tmpl, priority=100)
        p["status"] = {"nominatedNodeName": "n000"}
        store.create(p)
    store.create(pod("intruder", cpu="1", template_name="t1", priority=1))
    for t in range(1, 4):
        restarted.run(t)
    placed = set(bound(store))
    assert {"high-one", "high-two"} <= placed and "intruder" not in placed, placed
    assert len(placed & {"low-a", "low-b"}) == 1, placed  # one victim: 2 free + 1 = the 3 wanted


def test_a_nominated_pod_its_queue_no_longer_admits_waits_and_says_why() -> None:
    """A pod nominated before a restart whose queue's limit was lowered meanwhile: the restarted kdra must
    park it with the queue's reason (PodScheduled=False), not leave it in flight with no word, and a pod of
    another queue still binds."""
    store = MemoryStore()
    fleet(store, 1, gpus=4)
    store.create(queue("small", limit=1))
    store.create(queue("other"))
    store.create(template("t2", count=2))
    restarted, _ = scheduler(store)
    p = pod("nominated", cpu="1", template_name="t2", priority=100)
    p["metadata"]["labels"] = {"kdra.dev/queue": "small"}
    p["status"] = {"nominatedNodeName": "n000"}
    store.create(p)
    queued_pod(store, "plain", "other", gpus=1)
    for t in range(3):
        restarted.run(t)
    assert set(bound(store)) == {"plain"}
    cond = condition_of(store, "nominated", "PodScheduled")
    assert cond is not None and cond["status"] == "False", cond
    assert "limit" in cond["message"], cond["message"]


def test_a_nominated_pod_that_preemption_cannot_place_loses_its_nomination() -> None:
    """A pod nominated before a restart that can never fit (2 GPUs wanted, the node has 1) and has no
    lower-priority pod to preempt: its nominatedNodeName is cleared, as kube-scheduler clears it when
    preemption finds no candidate (schedule_one.go clearNominatedNode, preemption.go Preempt), so it is no
    longer resumed first and the lower-priority pod behind it binds. A nomination whose recorded victims
    are still on their node is kept (PodEligibleToPreemptOthers)."""
    store = MemoryStore()
    fleet(store, 1, gpus=1)
    store.create(template("t1", count=1))
    store.create(template("t2", count=2))
    sched, _ = scheduler(store)
    big = pod("big", cpu="1", template_name="t2", priority=100)
    big["status"] = {"nominatedNodeName": "n000"}
    store.create(big)
    sched.run(0)
    assert "nominatedNodeName" not in store.get("Pod", "big", "default")["status"]
    assert "0/1 nodes are available" in condition(store, "big")
    store.create(pod("low", cpu="1", template_name="t1", priority=1))
    for t in range(1, 3):
        sched.run(t)
    assert bound(store) == {"low": "n000"}


def test_a_nomination_is_kept_while_its_recorded_victim_is_on_its_node() -> None:
    store = MemoryStore()
    fleet(store, 1, gpus=1)
    store.create(template("t1", count=1))
    store.create(template("t2", count=2))
    sched, _ = scheduler(store)
    store.create(pod("low", cpu="1", template_name="t1", priority=1))
    sched.run(0)
    assert bound(store) == {"low": "n000"}
    big = pod("big", cpu="1", template_name="t2", priority=100)
    big["status"] = {"nominatedNodeName": "n000"}
    big = store.create(big)
    low = clone(store.get("Pod", "low", "default"))
    low["metadata"].setdefault("annotations", {})["kdra.dev/evicted-for"] = big["metadata"]["uid"]
    store.update(low)
    evictor = RefusingEvictor(store)  # the victim stays (a budget refuses it)
    gq = GangQueues(store, GangQueueOptions(), evictor=evictor)
    restarted = Scheduler(store, gq.config(SchedulerConfig()))
    restarted.run(1)
    assert bound(store) == {"low": "n000"}
    assert store.get("Pod", "big", "default")["status"]["nominatedNodeName"] == "n000"


def test_members_waiting_for_their_pod_group_are_tried_when_it_arrives() -> None:
    """Pods naming a PodGroup that does not exist yet wait for it ("waiting for its PodGroup"); when it is
    created (after the pods, as a job controller may, or seen later through its own watch) they are tried
    at once, not after the unschedulable pods' 5-minute flush."""
    store = MemoryStore()
    fleet(store, 1, gpus=4)
    sched, _ = scheduler(store)
    names = gang_pods(store, "late", 3, gpus=1)
    sched.run(0)
    assert not bound(store)
    cond = condition_of(store, names[0], "PodScheduled")
    assert cond is not None and "waiting for its PodGroup" in cond["message"], cond
    store.create(pod_group("late", 3))
    sched.run(1)
    assert set(bound(store)) == set(names)


def test_a_job_waiting_for_its_queues_limit_is_tried_when_the_limit_is_raised() -> None:
    """A Queue's spec change (a limit raised) tries the jobs its limit held at once, not at the
    unschedulable pods' periodic flush."""
    store = MemoryStore()
    fleet(store, 1, gpus=4)
    store.create(queue("small", limit=1))
    sched, _ = scheduler(store)
    queued_pod(store, "big", "small", gpus=2)
    sched.run(0)
    assert not bound(store)
    q = clone(store.get("Queue", "small"))
    q["spec"]["resources"]["deviceclass/gpu"]["limit"] = 4
    store.update(q)
    sched.run(1)
    assert set(bound(store)) == {"big"}


class GracefulEvictor(StoreEvictor):
    """Victims with a long termination grace period, as on a cluster: each is marked (DisruptionTarget and
    the record naming what it is evicted for) and keeps running, its claims allocated, until it ends."""

    def evict(
        self,
        pods: Sequence[Obj],
        message: str,
        *,
        dry_run_first: bool = True,
        evicted_for: str = "",
        nominate: Mapping[str, str] | None = None,
    ) -> EvictionOutcome:
        out = EvictionOutcome()
        for p in pods:
            meta = p["metadata"]
            out.evicted.append(f"{meta.get('namespace') or 'default'}/{meta['name']}")
            if EVICTED_FOR_ANNOTATION in (meta.get("annotations") or {}):
                continue  # asked for already: terminating

            def mark(q: Obj) -> None:
                q["metadata"].setdefault("annotations", {})[EVICTED_FOR_ANNOTATION] = evicted_for

            self.store.update_with_retry("Pod", meta["name"], meta.get("namespace") or "default", mark)
        return out


class GivingUpBinder(StoreBinder):
    """Holds back the bind of the pods named in `give_up` and gives it up on commit, as the Kubernetes
    binder does when a preemptor's victims still hold its devices after the preemption wait."""

    def __init__(self, store: MemoryStore, give_up: dict[str, int]) -> None:
        super().__init__(store, formatter(VirtualClock()))
        self.give_up = give_up
        self.held: list[tuple[Any, list[Any], float]] = []
        self.gave_up: list[str] = []

    def bind(self, sched: Any, state: Any, pi: Any, node: str, now: float, pre_bind: Any, group: Any) -> Any:
        if self.give_up.get(pi.name):
            self.give_up[pi.name] -= 1
            self.held.append((pi, list(state.get("dra_allocations") or []), now))
            return SUCCESS
        return super().bind(sched, state, pi, node, now, pre_bind, group)

    def commit_group(self, sched: Any, group: Any) -> None:
        super().commit_group(sched, group)
        held, self.held = self.held, []
        for pi, allocate, now in held:
            self.gave_up.append(pi.name)
            sched.bind_failed(
                pi, "claims default/low-x still hold the devices after 120s", allocate, False, now
            )


def test_a_preemptor_whose_bind_gave_up_leaves_its_victims_devices_to_no_lower_priority_pod() -> None:
    """The preemptor's victim terminates slowly (a long grace period); its bind gives up waiting for the
    victim's device and the preemptor is retried after backoff, three times. The victim's claim still
    holds the device in the API meanwhile: a lower-priority pod arriving must not be placed on it (it
    would take what the preemption was for, and become the next victim). When the victim ends, the
    preemptor takes the device without a second eviction."""
    store = MemoryStore()
    fleet(store, 1, gpus=1)
    store.create(template("t1", count=1))
    evictor = GracefulEvictor(store)
    binder = GivingUpBinder(store, {"high": 3})
    gq = GangQueues(store, GangQueueOptions(), evictor=evictor)
    sched = Scheduler(store, gq.config(SchedulerConfig()), binder=binder)
    store.create(pod("low", cpu="1", template_name="t1", priority=1))
    sched.run(0)
    assert bound(store) == {"low": "n000"}
    store.create(pod("high", cpu="1", template_name="t1", priority=100))
    sched.run(1)
    assert binder.gave_up == ["high"] and bound(store) == {"low": "n000"}
    for t in (3, 8):  # resumed over the same victim, which still terminates; gives up again
        sched.run(t)
    assert binder.gave_up == ["high"] * 3 and bound(store) == {"low": "n000"}
    store.create(pod("intruder", cpu="1", template_name="t1", priority=1))
    sched.run(8.1)  # the preemptor is in backoff
    assert bound(store) == {"low": "n000"}, "the intruder took the device the victim still holds"
    assert "intruder" in {p["metadata"]["name"] for p in store.list("Pod") if not p["spec"].get("nodeName")}
    evict(store, "default", "low", "2026-01-01T00:00:09Z", "preempted")  # the victim ends
    for t in (9, 16, 32, 64):
        sched.run(t)
    assert bound(store) == {"high": "n000"}
    assert evictor_victims(store) == ["low"]  # no second victim


def evictor_victims(store: MemoryStore) -> list[str]:
    return sorted(
        p["metadata"]["name"]
        for p in store.list("Pod")
        if EVICTED_FOR_ANNOTATION in (p["metadata"].get("annotations") or {})
        or (p.get("status") or {}).get("phase") == "Failed"
    )
