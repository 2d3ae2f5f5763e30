"""Queues: KAI fair share, DRF order, limits, reclaim with KAI's strategies, preemption, min runtime."""

from __future__ import annotations

from builders import pod
from helpers import bound, condition, fleet, gang_pods, pod_group, queue, queued_pod, scheduler

from kdra.cluster import MemoryStore
from kdra.scheduler.queuetree import QueueSpec, QueueTree, divide, parse_queue


def gpus_by_queue(s: MemoryStore) -> dict[str, int]:
    out: dict[str, int] = {}
    for p in s.list("Pod"):
        if p["spec"].get("nodeName") and (p.get("status") or {}).get("phase") != "Failed":
            q = p["metadata"]["labels"]["kdra.dev/queue"]
            out[q] = out.get(q, 0) + 1
    return out


def test_divide_deserved_first_then_weights_by_priority_tier() -> None:
    got = divide(100, [("a", 10, 3, 1000, 100), ("b", 10, 1, 1000, 100), ("c", 0, 1, 5, 100)])
    assert round(got["c"], 6) == 5
    assert round(got["a"] - 10, 6) == round(3 * (got["b"] - 10), 6)
    assert round(sum(got.values()), 6) == 100
    tiers = divide(10, [("hi", 0, 1, 8, 200), ("lo", 0, 5, 8, 100)])
    assert tiers == {"hi": 8, "lo": 2}


def test_hierarchy_and_queue_shapes() -> None:
    tree = QueueTree(
        [
            QueueSpec("org", quota={"gpu": 60}),
            QueueSpec("a", parent="org", weight={"gpu": 1}),
            QueueSpec("b", parent="org", weight={"gpu": 1}),
            QueueSpec("other", quota={"gpu": 40}),
        ]
    )
    fs = tree.fair_share({"gpu": 100}, {"a": {"gpu": 100}, "b": {"gpu": 100}, "other": {"gpu": 100}})
    assert fs["org"]["gpu"] == 60 and fs["a"]["gpu"] == 30 and fs["other"]["gpu"] == 40
    kai = parse_queue(
        {
            "apiVersion": "scheduling.run.ai/v2",
            "kind": "Queue",
            "metadata": {"name": "k"},
            "spec": {"resources": {"gpu": {"quota": 8, "limit": 0}, "cpu": {"quota": 4000, "limit": -1}}},
        }
    )
    assert kai.quota == {"deviceclass/gpu.nvidia.com": 8, "cpu": 4}
    assert kai.limit["deviceclass/gpu.nvidia.com"] == 8
    vol = parse_queue(
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": "v"},
            "spec": {
                "weight": 3,
                "capability": {"deviceclass/gpu": 16},
                "deserved": {"memory.deviceclass/gpu": "80Gi"},
            },
        }
    )
    assert vol.default_weight == 3 and vol.limit == {"deviceclass/gpu": 16}
    assert vol.quota == {"memory.deviceclass/gpu": 80 * 2**30}


def test_two_queues_3_to_1_under_contention() -> None:
    s = MemoryStore()
    fleet(s, 16)  # 128 GPUs
    sched, gq = scheduler(s)
    s.create(queue("a", weight=3))
    s.create(queue("b", weight=1))
    for i in range(200):
        queued_pod(s, f"a-{i:03d}", "a", 1)
        queued_pod(s, f"b-{i:03d}", "b", 1)
    sched.run(0)
    got = gpus_by_queue(s)
    assert sum(got.values()) == 128
    ratio = got["a"] / got["b"]
    assert abs(ratio - 3) / 3 <= 0.05, got
    # churn: a quarter of each queue's pods finish; the freed GPUs keep the 3:1 split
    for q, n in (("a", 24), ("b", 8)):
        for p in [
            p for p in s.list("Pod") if p["spec"].get("nodeName") and p["metadata"]["name"].startswith(q)
        ][:n]:
            upd = dict(p, status=dict(p.get("status") or {}, phase="Succeeded"))
            s.update(upd, subresource="status")
    sched.run(10)
    got = gpus_by_queue(s)
    live = {
        q: sum(
            1
            for p in s.list("Pod")
            if p["spec"].get("nodeName")
            and p["status"].get("phase") != "Succeeded"
            and p["metadata"]["name"].startswith(q)
        )
        for q in ("a", "b")
    }
    assert abs(live["a"] / live["b"] - 3) / 3 <= 0.05, live
    fs = gq.fair_shares()
    assert round(fs["a"]["deviceclass/gpu"]) == 96 and round(fs["b"]["deviceclass/gpu"]) == 32


def test_queue_limit_explained() -> None:
    s = MemoryStore()
    fleet(s, 2)
    sched, _gq = scheduler(s)
    s.create(queue("capped", limit=4))
    for i in range(6):
        queued_pod(s, f"c-{i}", "capped", 1)
    sched.run(0)
    assert len(bound(s, "c-")) == 4
    msg = condition(s, "c-5")
    assert "queue capped would exceed its limit on deviceclass/gpu (4 + 1 > 4)" in msg


def test_reclaim_returns_a_queue_to_its_deserved_quota() -> None:
    s = MemoryStore()
    fleet(s, 4)  # 32 GPUs
    sched, gq = scheduler(s)
    s.create(queue("a", gpu_quota=16))
    s.create(queue("b", gpu_quota=16))
    for i in range(32):
        queued_pod(s, f"a-{i:02d}", "a", 1)
    sched.run(0)
    assert gpus_by_queue(s) == {"a": 32}  # a borrows b's idle quota
    for i in range(16):
        queued_pod(s, f"b-{i:02d}", "b", 1)
    sched.run(100)
    assert gpus_by_queue(s) == {"a": 16, "b": 16}
    assert gq.allocated["b"]["deviceclass/gpu"] == 16
    victims = [p for p in s.list("Pod") if (p.get("status") or {}).get("phase") == "Failed"]
    assert len(victims) == 16 and len(gq.evicted) == 16
    cond = next(c for c in victims[0]["status"]["conditions"] if c["type"] == "DisruptionTarget")
    assert cond["reason"] == "PreemptionByScheduler" and "reclaimed by queue b" in cond["message"]
    # the victims' template claims are gone; every allocated claim belongs to a running pod
    running = {p["metadata"]["uid"] for p in s.list("Pod") if p["status"].get("phase") != "Failed"}
    for c in s.list("ResourceClaim"):
        assert {r["uid"] for r in c["status"].get("reservedFor", [])} <= running
    assert len(sched.dra.state.dedicated) == 32


def test_reclaim_takes_no_victim_that_frees_nothing_the_reclaimer_lacks() -> None:
    """Queue a borrows all 8 GPUs and also runs a CPU-only pod, its newest; queue b reclaims one GPU. The
    CPU-only pod comes first among the victims but frees no GPU: it keeps running, one GPU pod goes."""
    s = MemoryStore()
    fleet(s, 1)  # 8 GPUs
    sched, gq = scheduler(s)
    s.create(queue("a", gpu_quota=0))
    s.create(queue("b", gpu_quota=8))
    for i in range(8):
        queued_pod(s, f"a-{i}", "a", 1)
    sched.run(0)
    cpu_only = pod("a-cpu", cpu="1")
    cpu_only["metadata"]["labels"] = {"kdra.dev/queue": "a"}
    s.create(cpu_only)
    sched.run(10)
    assert "a-cpu" in bound(s)
    queued_pod(s, "b-0", "b", 1)
    sched.run(20)
    assert gpus_by_queue(s) == {"a": 8, "b": 1}  # 7 GPU pods and the CPU-only pod of a
    assert len(gq.evicted) == 1 and gq.evicted[0].startswith("default/a-") and "a-cpu" in bound(s)


def test_reclaim_blocked_by_strategies_and_min_runtime() -> None:
    s = MemoryStore()
    fleet(s, 1)  # 8 GPUs
    sched, _gq = scheduler(s)
    s.create(queue("a", gpu_quota=8))
    s.create(queue("b", gpu_quota=0))
    for i in range(8):
        queued_pod(s, f"a-{i}", "a", 1)
    sched.run(0)
    queued_pod(s, "b-0", "b", 1)
    sched.run(10)
    assert bound(s, "b-") == {}
    msg = condition(s, "b-0")
    assert "reclaim blocked" in msg
    assert "MaintainFairShare: queue b would exceed its fair share on deviceclass/gpu" in msg
    assert "GuaranteeDeservedQuota: queue b would exceed its deserved quota" in msg
    # min runtime
    s2 = MemoryStore()
    fleet(s2, 1)
    sched2, _ = scheduler(s2)
    s2.create(queue("a", gpu_quota=0, reclaimMinRuntime="1h"))
    s2.create(queue("b", gpu_quota=8))
    for i in range(8):
        queued_pod(s2, f"a-{i}", "a", 1)
    sched2.run(0)
    queued_pod(s2, "b-0", "b", 1)
    sched2.run(60)
    assert bound(s2, "b-") == {}
    assert "within reclaimMinRuntime" in condition(s2, "b-0")
    sched2.queue.flush_unschedulable_leftover(4000)
    sched2.run(4000)
    assert len(bound(s2, "b-")) == 1


def test_a_gang_whose_reclaim_is_blocked_keeps_its_groups_verdict_and_one_event() -> None:
    """Reclaim's note joins the gang's verdict as a detail: its group object keeps the reason it waits for
    (Unschedulable), so sessions that repeat the same decisions leave it, and its Events, alone."""
    s = MemoryStore()
    fleet(s, 1)  # 8 GPUs
    sched, gq = scheduler(s)
    s.create(queue("a", gpu_quota=8))
    s.create(queue("b", gpu_quota=0))
    for i in range(8):
        queued_pod(s, f"a-{i}", "a", 1)
    sched.run(0)
    s.create(pod_group("g", 2, queue="b"))
    gang_pods(s, "g", 2, gpus=1)
    sched.run(10)
    sched.run(20)
    assert bound(s, "g-") == {}
    pg = s.get("PodGroup", "g", "default")["status"]["conditions"][0]
    assert pg["reason"] == "Unschedulable" and "reclaim blocked" in pg["message"]
    assert [e[2] for e in gq.status.events if e[0] == "PodGroup default/g"] == ["Unschedulable"]


def test_a_gang_still_gathering_its_members_is_no_reclaimer() -> None:
    """A gang with fewer members than minCount cannot be placed whatever is freed: reclaim does not try
    for it (KAI's actions consider only jobs whose pending pods reach minAvailable), so its pods say only
    that they wait for members."""
    s = MemoryStore()
    fleet(s, 1)  # 8 GPUs
    sched, _gq = scheduler(s)
    s.create(queue("a", gpu_quota=8))
    s.create(queue("b", gpu_quota=0))
    for i in range(8):
        queued_pod(s, f"a-{i}", "a", 1)
    sched.run(0)
    s.create(pod_group("g", 3, queue="b"))
    gang_pods(s, "g", 2, gpus=1)
    sched.run(10)
    assert condition(s, "g-000") == (
        "PodGroup default/g waits for members: fewer than minCount 3 pods exist and are ready for scheduling"
    )


def test_preemption_within_a_queue_by_priority() -> None:
    s = MemoryStore()
    fleet(s, 1)
    sched, gq = scheduler(s)
    s.create(queue("q", gpu_quota=8, preemptMinRuntime="10m"))
    for i in range(8):
        queued_pod(s, f"low-{i}", "q", 1, priority=0)
    sched.run(0)
    queued_pod(s, "high", "q", 4, priority=100)
    sched.run(60)
    assert "high" not in bound(s)
    assert "within preemptMinRuntime" in condition(s, "high")
    sched.queue.flush_unschedulable_leftover(1000)
    sched.run(1000)
    assert "high" in bound(s)
    assert len(gq.evicted) == 4 and len(bound(s, "low-")) == 4


def test_reclaim_evicts_whole_gangs_only_when_the_strategies_allow() -> None:
    from helpers import gang_pods, pod_group

    s = MemoryStore()
    fleet(s, 4)  # 32 GPUs
    sched, gq = scheduler(s)
    s.create(queue("a", gpu_quota=16))
    s.create(queue("b", gpu_quota=16))
    for g in ("g1", "g2"):
        s.create(pod_group(g, 2, queue="a"))
        gang_pods(s, g, 2, gpus=8, tmpl="eight")
    sched.run(0)
    assert len(bound(s, "g")) == 4
    for i in range(2):
        queued_pod(s, f"b-{i}", "b", 8)
    sched.run(100)
    # one whole gang (16 GPUs) goes; a keeps its deserved 16, b gets its 16
    assert len(bound(s, "b-")) == 2
    left = bound(s, "g")
    assert len(left) == 2 and len({n[:2] for n in left}) == 1  # both members of the same gang remain
    assert len(gq.evicted) == 2


def test_reclaim_never_splits_a_gang() -> None:
    from helpers import gang_pods, pod_group

    s = MemoryStore()
    fleet(s, 4)
    sched, _gq = scheduler(s)
    s.create(queue("a", gpu_quota=16))
    s.create(queue("b", gpu_quota=16))
    s.create(pod_group("big", 4, queue="a"))
    gang_pods(s, "big", 4, gpus=8)
    sched.run(0)
    queued_pod(s, "b-0", "b", 8)
    sched.run(100)
    assert bound(s, "b-") == {} and len(bound(s, "big")) == 4
    assert "would fall below its fair share" in condition(s, "b-0")


def test_parent_limit_and_gpu_memory_quota() -> None:
    s = MemoryStore()
    fleet(s, 2)  # 16 GPUs of 80Gi
    sched, _gq = scheduler(s)
    s.create(
        {
            "apiVersion": "kdra.dev/v1alpha1",
            "kind": "Queue",
            "metadata": {"name": "org"},
            "spec": {"resources": {"deviceclass/gpu": {"limit": 5}}},
        }
    )
    s.create(queue("team", parentQueue="org"))
    s.create(
        {
            "apiVersion": "kdra.dev/v1alpha1",
            "kind": "Queue",
            "metadata": {"name": "mem"},
            "spec": {"resources": {"memory.deviceclass/gpu": {"limit": "160Gi"}}},
        }
    )
    for i in range(6):
        queued_pod(s, f"t-{i}", "team", 1)
        queued_pod(s, f"m-{i}", "mem", 1)
    sched.run(0)
    assert len(bound(s, "t-")) == 5
    assert "queue org would exceed its limit on deviceclass/gpu (5 + 1 > 5)" in condition(s, "t-5")
    assert len(bound(s, "m-")) == 2  # two whole 80Gi GPUs reach the GPU-memory limit
    assert "queue mem would exceed its limit on memory.deviceclass/gpu (160Gi + 80Gi > 160Gi)" in condition(
        s, "m-2"
    )
