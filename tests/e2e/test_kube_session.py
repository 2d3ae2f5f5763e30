"""`kdra scheduler` runs the scheduling session (kdra.scheduler.session) on a real control plane, KWOK as the
kubelet: gangs all or nothing, queues sharing a fleet, reclaim, preemption of pods that hold DRA devices,
PodDisruptionBudgets, topology, placement policies, explanations on the live objects, and the same
placements as `kdra simulate` on the same objects. Every test ends with the independent checker
(kdra.testing.invariants)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kdra.kube.client import KubeClient
from kdra.testing.controlplane import ControlPlane

from .sessionutil import (
    allocated_claims,
    bound,
    cleanup,
    condition,
    create_all,
    events_for,
    gpu_fleet,
    gpu_pod,
    gpu_template,
    pod_group,
    scheduled_message,
    session_scheduler,
    settled,
    wait,
)

pytestmark = pytest.mark.e2e

H100 = "H100-SXM-80GB"


def test_gang_binds_all_together_or_waits_holding_nothing(
    control_plane: ControlPlane, kube: KubeClient, kdra_crds: list[str], namespace: str, tmp_path: Path
) -> None:
    """4 pods x 2 GPUs on room for 3 (3 nodes x 2 GPUs): nothing bound, no claim allocated, every member
    and the PodGroup say why. One more node: all 4 bind together and run (KWOK)."""
    with gpu_fleet(kube, [{"name": "a", "count": 3, "accelerator": {"model": H100, "count": 2}}]) as fleet:
        kube.create(gpu_template("two", namespace, 2))
        kube.create(pod_group("train", namespace, 4))
        names = [f"train-{i}" for i in range(4)]
        members = [gpu_pod(n, namespace, "two", fleet.prefix, group="train") for n in names]
        create_all(kube, members)
        proc = session_scheduler(control_plane, tmp_path / "kdra.log")
        try:
            wait(
                lambda: all(
                    "only 3 of the 4 members" in scheduled_message(kube, namespace, f"train-{i}")
                    for i in range(4)
                ),
                60,
                "every member to say why the gang waits",
                log=proc.log,
            )
            assert bound(kube, namespace) == {}
            assert allocated_claims(kube, namespace) == []
            pg = kube.get("PodGroup", "train", namespace)
            cond = condition(pg, "PodGroupScheduled")
            assert cond.get("status") == "False" and cond.get("reason") == "Unschedulable", pg.get("status")
            assert "only 3 of the 4 members" in cond["message"]
            assert pg["status"]["phase"] == "Pending" and pg["status"]["scheduled"] == 0
            assert any(
                e["reason"] == "Unschedulable" for e in events_for(kube, namespace, "train", "PodGroup")
            )
            assert not settled(kube, namespace, timeout=5)

            fleet.add_pool({"name": "b", "count": 1, "accelerator": {"model": H100, "count": 2}})
            wait(lambda: len(bound(kube, namespace)) == 4, 60, "all 4 members bound", log=proc.log)
            wait(
                lambda: all(p["status"].get("phase") == "Running" for p in kube.list("Pod", namespace)),
                60,
                "the members to run (KWOK)",
            )
            pg = kube.get("PodGroup", "train", namespace)
            assert condition(pg, "PodGroupScheduled").get("status") == "True", pg.get("status")
            assert pg["status"]["phase"] == "Scheduled" and pg["status"]["scheduled"] == 4
            assert len(allocated_claims(kube, namespace)) == 4
            assert not settled(kube, namespace)
        finally:
            proc.stop()
            cleanup(kube, namespace)
