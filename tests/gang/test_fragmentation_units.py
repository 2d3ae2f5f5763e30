"""The fragmentation measure counts MIG partitions (counters and static) and fractional shares per GPU."""

from __future__ import annotations

from typing import Any

from kdra.cluster import MemoryStore
from kdra.fleets import load_fleet, render
from kdra.scheduler.fragmentation import DeviceUnits, cluster_fragmentation
from kdra.scheduler.gangqueues import GangQueueOptions, GangQueues
from kdra.scheduler.scheduler import Scheduler, SchedulerConfig


def claim_template(name: str, request: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"spec": {"devices": {"requests": [{"name": "r", "exactly": request}]}}},
    }


def pod(name: str, tmpl: str, pool: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeSelector": {"kdra.dev/pool": pool},
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}, "claims": [{"name": "r"}]}}],
            "resourceClaims": [{"name": "r", "resourceClaimTemplateName": tmpl}],
        },
    }


def test_units_of_mig_and_shares_on_the_mixed_fleet() -> None:
    s = MemoryStore()
    objs = render(load_fleet("mixed"), dra=True, legacy=False)
    order = {"DeviceClass": 0, "Node": 1, "ResourceSlice": 2}
    for o in sorted(objs, key=lambda o: order.get(o["kind"], 3)):
        s.create(o)
    gq = GangQueues(s, GangQueueOptions(placement="fragmentation", fragmentation_shapes={1.0: 1.0, 0.5: 1.0}))
    sched = Scheduler(s, gq.config(SchedulerConfig()))
    s.create(claim_template("mig", {"deviceClassName": "mig.nvidia.com", "count": 1}))
    s.create(
        claim_template(
            "share", {"deviceClassName": "gpu.nvidia.com", "capacity": {"requests": {"memory": "6Gi"}}}
        )
    )
    s.create(pod("dyn", "mig", "a100"))
    s.create(pod("static", "mig", "h100-mig"))
    s.create(pod("shared", "share", "l4"))
    results = sched.run(0)
    assert all(r.node for r in results), [r.message for r in results]
    units = DeviceUnits(sched.dra.index)
    partly = {}
    for r in results:
        frees = units.free(r.node or "", sched.dra)
        partly[r.pod] = sorted(round(f, 3) for f in frees.values() if f < 1.0)
    # one GPU partly used on each node, by a fraction that is neither nothing nor the whole GPU
    for key, fr in partly.items():
        assert len(fr) == 1 and 0.0 < fr[0] < 1.0, (key, fr)
    figures = cluster_fragmentation(sched.dra, {1.0: 1.0})
    assert figures["partly_used_units"] == 3
    # a whole-GPU job cannot use what is left of those three GPUs
    assert figures["fragmented_units"] >= sum(fr[0] for fr in partly.values())


def test_queue_counts_consumed_capacity_of_shares() -> None:
    s = MemoryStore()
    objs = render(load_fleet("mixed"), dra=True, legacy=False)
    order = {"DeviceClass": 0, "Node": 1, "ResourceSlice": 2}
    for o in sorted(objs, key=lambda o: order.get(o["kind"], 3)):
        s.create(o)
    s.create(
        {
            "apiVersion": "kdra.dev/v1alpha1",
            "kind": "Queue",
            "metadata": {"name": "notebooks"},
            "spec": {"resources": {"memory.deviceclass/gpu.nvidia.com": {"limit": "12Gi"}}},
        }
    )
    gq = GangQueues(s)
    sched = Scheduler(s, gq.config(SchedulerConfig()))
    s.create(
        claim_template(
            "share", {"deviceClassName": "gpu.nvidia.com", "capacity": {"requests": {"memory": "6Gi"}}}
        )
    )
    for i in range(3):
        p = pod(f"nb-{i}", "share", "l4")
        p["metadata"]["labels"] = {"kdra.dev/queue": "notebooks"}
        s.create(p)
    sched.run(0)
    placed = [p["metadata"]["name"] for p in s.list("Pod") if p["spec"].get("nodeName")]
    assert sorted(placed) == ["nb-0", "nb-1"]
    assert gq.allocated["notebooks"]["memory.deviceclass/gpu.nvidia.com"] == 12 * 2**30
