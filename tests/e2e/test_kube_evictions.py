"""Preemption's writes on a real control plane, read from the API server's audit log: each victim is marked
(DisruptionTarget with kube-scheduler's reason, naming the preemptor by uid, and the record
`kdra.dev/evicted-for`) before it is deleted, as kube-scheduler writes it before deleting; a victim no
budget covers is deleted once, with no dry run and no eviction asked for again while it terminates; one
a PodDisruptionBudget covers goes through the Eviction API."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kdra.kube.client import KubeClient
from kdra.scheduler.seams import EVICTED_FOR_ANNOTATION
from support.controlplane import ControlPlane
from support.invariants import audit_events

from .sessionutil import (
    TERMINATE_SLOWLY,
    bound,
    cleanup,
    condition,
    create_all,
    gpu_fleet,
    gpu_pod,
    gpu_template,
    pod_group,
    pods,
    priority_class,
    session_scheduler,
    settled,
    victim_under_budget,
    wait,
)

# kdra scheduler under the default scheduler name: one such test at a time (hack/e2e.sh lanes).
pytestmark = [pytest.mark.e2e, pytest.mark.e2e_lane(name="kdra-scheduler")]

H100 = "H100-SXM-80GB"


def kdra_writes(cp: ControlPlane, namespace: str, pod: str) -> list[str]:
    """kdra's writes to one pod after it was bound, in order: "patch status", "delete pod",
    "create eviction"."""
    out = []
    for e in audit_events(cp.audit_log):
        ref = e.get("objectRef") or {}
        if (
            str(e.get("userAgent", "")).startswith("kdra/")
            and ref.get("resource") == "pods"
            and ref.get("namespace") == namespace
            and ref.get("name") == pod
            and e.get("verb") in ("patch", "update", "delete", "create")
        ):
            out.append(f"{e['verb']} {ref.get('subresource') or 'pod'}")
    return out[out.index("create binding") + 1 :] if "create binding" in out else out


def test_a_gangs_victims_are_marked_before_they_are_deleted_once_each(
    control_plane: ControlPlane, kube: KubeClient, kdra_crds: list[str], namespace: str, tmp_path: Path
) -> None:
    """A high-priority gang of two preempts a low-priority gang of two on a 2-GPU node; the victims take
    4 s to terminate, over many sessions."""
    low = priority_class(kube, "kdra-e2e-low", 10)
    high = priority_class(kube, "kdra-e2e-high", 1000)
    with gpu_fleet(kube, [{"name": "a", "count": 1, "accelerator": {"model": H100, "count": 2}}]) as fleet:
        kube.create(gpu_template("one", namespace, 1))
        proc = session_scheduler(control_plane, tmp_path / "kdra.log")
        try:
            kube.create(pod_group("low", namespace, 2, priorityClassName=low))
            create_all(
                kube,
                [
                    gpu_pod(
                        f"low-{k}",
                        namespace,
                        "one",
                        fleet.prefix,
                        group="low",
                        priority_class=low,
                        annotations=TERMINATE_SLOWLY,
                    )
                    for k in range(2)
                ],
            )
            wait(lambda: len(bound(kube, namespace)) == 2, 60, "the low gang bound", log=proc.log)
            kube.create(pod_group("high", namespace, 2, priorityClassName=high))
            create_all(
                kube,
                [
                    gpu_pod(f"high-{k}", namespace, "one", fleet.prefix, group="high", priority_class=high)
                    for k in range(2)
                ],
            )
            seen: dict[str, dict[str, Any]] = {}

            def victims_marked() -> bool:
                for name, p in pods(kube, namespace).items():
                    if name.startswith("low-") and p["metadata"].get("deletionTimestamp"):
                        seen[name] = p
                return len(seen) == 2

            wait(victims_marked, 60, "both victims terminating", 0.1, proc.log)
            lead = kube.get("Pod", "high-0", namespace)["metadata"]["uid"]
            for name, p in seen.items():
                assert p["metadata"]["annotations"][EVICTED_FOR_ANNOTATION] == lead, name
                cond = condition(p, "DisruptionTarget")
                assert cond.get("reason") == "PreemptionByScheduler", cond
                assert cond["message"] == "kdra: preempted by pod " + lead + " (priority 1000)", cond
            wait(lambda: set(bound(kube, namespace)) == {"high-0", "high-1"}, 60, "the preemptors bound")
            for name in seen:
                # one mark, then one delete: no dry run, no eviction asked for again while it terminated
                assert kdra_writes(control_plane, namespace, name) == ["patch status", "delete pod"], name
            group = condition(kube.get("PodGroup", "high", namespace), "PodGroupScheduled")
            assert group.get("message") == "2 members placed", group
            problems = settled(kube, namespace)
            assert not problems, [str(p) for p in problems]
        finally:
            proc.stop()
            cleanup(kube, namespace)


def test_a_victim_a_budget_covers_goes_through_the_eviction_api(
    control_plane: ControlPlane, kube: KubeClient, kdra_crds: list[str], namespace: str, tmp_path: Path
) -> None:
    """The budget allows one disruption: the victim is marked, then evicted (policy/v1), not deleted."""
    with victim_under_budget(control_plane, kube, namespace, tmp_path / "kdra.log", min_available=0) as v:
        kube.create(gpu_pod("high", namespace, "one", v.fleet.prefix, priority_class=v.high))
        wait(
            lambda: bound(kube, namespace) == {"high": v.fleet.nodes[0]},
            60,
            "the preemptor bound",
            log=v.proc.log,
        )
        assert kdra_writes(control_plane, namespace, "serving") == ["patch status", "create eviction"]
