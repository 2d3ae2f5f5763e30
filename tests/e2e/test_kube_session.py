"""`kdra scheduler` runs the scheduling session (kdra.scheduler.session) on a real control plane, KWOK as the
kubelet: gangs all or nothing, queues sharing a fleet, reclaim, preemption of pods that hold DRA devices,
PodDisruptionBudgets, topology, placement policies, explanations on the live objects, and the same
placements as `kdra simulate` on the same objects. Every test ends with the independent checker
(kdra.testing.invariants)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kdra.kube.client import KubeClient
from kdra.testing.controlplane import ControlPlane

from .sessionutil import (
    TERMINATE_SLOWLY,
    allocated_claims,
    bound,
    cleanup,
    condition,
    create_all,
    devices_of,
    events_for,
    gpu_fleet,
    gpu_pod,
    gpu_template,
    node_devices,
    pod_group,
    priority_class,
    queue,
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


def wait_for_claims(kube: KubeClient, namespace: str, n: int) -> None:
    """Every pod's template claim exists (so the first session sees all pods, as a simulation does)."""
    wait(
        lambda: (
            sum(
                bool((p.get("status") or {}).get("resourceClaimStatuses"))
                for p in kube.list("Pod", namespace)
            )
            >= n
        ),
        60,
        f"claims of {n} pods",
    )


def per_queue(kube: KubeClient, namespace: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for name in bound(kube, namespace):
        q = name.split("-", 1)[0]
        out[q] = out.get(q, 0) + 1
    return out


def test_two_queues_share_a_fleet_three_to_one_and_say_so(
    control_plane: ControlPlane, kube: KubeClient, kdra_crds: list[str], namespace: str, tmp_path: Path
) -> None:
    """Weights 3:1 on 16 GPUs, 16 one-GPU pods each: 12 and 4, written to each Queue's status with why its
    jobs wait. When queue a needs only 4, the fair share is recomputed and b gets 12."""
    qa, qb = f"{namespace}-a", f"{namespace}-b"
    gpus = "deviceclass/gpu.nvidia.com"
    kube.create(queue(qa, resources={gpus: {"quota": 0, "overQuotaWeight": 3}}))
    kube.create(queue(qb, resources={gpus: {"quota": 0, "overQuotaWeight": 1}}))
    with gpu_fleet(kube, [{"name": "a", "count": 2, "accelerator": {"model": H100, "count": 8}}]) as fleet:
        kube.create(gpu_template("one", namespace, 1))
        create_all(
            kube,
            [gpu_pod(f"a-{i}", namespace, "one", fleet.prefix, queue=qa) for i in range(16)]
            + [gpu_pod(f"b-{i}", namespace, "one", fleet.prefix, queue=qb) for i in range(16)],
        )
        wait_for_claims(kube, namespace, 32)
        proc = session_scheduler(control_plane, tmp_path / "kdra.log")
        try:
            wait(lambda: per_queue(kube, namespace) == {"a": 12, "b": 4}, 90, "12 and 4 GPUs", log=proc.log)

            def status_says(q: str, allocated: str, fair: str) -> bool:
                st = kube.get("Queue", q).get("status") or {}
                return (
                    st.get("allocated", {}).get(gpus) == allocated
                    and st.get("fairShare", {}).get(gpus) == fair
                    and condition(kube.get("Queue", q), "JobsWaiting").get("status") == "True"
                )

            wait(lambda: status_says(qa, "12", "12") and status_says(qb, "4", "4"), 30, "the Queues' status")
            st = kube.get("Queue", qb)["status"]
            assert st["pendingJobs"] == 12 and condition(kube.get("Queue", qb), "JobsWaiting")["message"], st

            # Queue a now needs only 4 GPUs: the fair share follows, b takes what a let go.
            keep = {f"a-{i}" for i in sorted(int(n.split("-")[1]) for n in bound(kube, namespace, "a-"))[:4]}
            for i in range(16):
                if f"a-{i}" not in keep:
                    kube.delete("Pod", f"a-{i}", namespace, missing_ok=True)
            wait(lambda: per_queue(kube, namespace) == {"a": 4, "b": 12}, 90, "4 and 12 GPUs", log=proc.log)
            wait(lambda: status_says(qb, "12", "12"), 30, "queue b's status")
            problems = settled(kube, namespace)
            assert not problems, [str(p) for p in problems]
        finally:
            proc.stop()
            cleanup(kube, namespace)
            for q in (qa, qb):
                kube.delete("Queue", q, missing_ok=True)


def test_queue_under_its_deserved_quota_reclaims_from_one_over_it(
    control_plane: ControlPlane, kube: KubeClient, kdra_crds: list[str], namespace: str, tmp_path: Path
) -> None:
    """b borrowed all 8 GPUs while a was idle; a (quota 4) arrives and reclaims 4: b's victims are evicted
    through the Eviction API and terminate gracefully, a's pods wait for their devices (nominated), then
    bind."""
    qa, qb = f"{namespace}-a", f"{namespace}-b"
    gpus = "deviceclass/gpu.nvidia.com"
    kube.create(queue(qa, resources={gpus: {"quota": 4}}))
    kube.create(queue(qb, resources={gpus: {"quota": 4}}))
    with gpu_fleet(kube, [{"name": "a", "count": 1, "accelerator": {"model": H100, "count": 8}}]) as fleet:
        kube.create(gpu_template("one", namespace, 1))
        proc = session_scheduler(control_plane, tmp_path / "kdra.log")
        try:
            slow = TERMINATE_SLOWLY
            create_all(
                kube,
                [
                    gpu_pod(f"b-{i}", namespace, "one", fleet.prefix, queue=qb, annotations=slow)
                    for i in range(8)
                ],
            )
            wait(lambda: per_queue(kube, namespace) == {"b": 8}, 60, "b on all 8 GPUs", log=proc.log)
            create_all(kube, [gpu_pod(f"a-{i}", namespace, "one", fleet.prefix, queue=qa) for i in range(4)])
            nominated = wait(
                lambda: [
                    p["status"]["nominatedNodeName"]
                    for p in kube.list("Pod", namespace)
                    if p["metadata"]["name"].startswith("a-")
                    and (p.get("status") or {}).get("nominatedNodeName")
                ],
                60,
                "a's pods nominated while b's victims terminate",
                0.1,
                proc.log,
            )
            assert set(nominated) == set(fleet.nodes)
            wait(lambda: per_queue(kube, namespace) == {"a": 4, "b": 4}, 60, "4 and 4", log=proc.log)
            victims = [
                e
                for e in kube.list("Event", namespace)
                if e["reason"] == "Preempted" and "reclaimed by queue" in e["message"]
            ]
            assert len({e["involvedObject"]["name"] for e in victims}) == 4, victims
            problems = settled(kube, namespace)
            assert not problems, [str(p) for p in problems]
        finally:
            proc.stop()
            cleanup(kube, namespace)
            for q in (qa, qb):
                kube.delete("Queue", q, missing_ok=True)


def test_higher_priority_pods_preempt_pods_holding_mig_partitions_and_whole_gpus(
    control_plane: ControlPlane, kube: KubeClient, kdra_crds: list[str], namespace: str, tmp_path: Path
) -> None:
    """An A100 in dynamic MIG mode, a low-priority pod on a 3g.20gb partition; an H100, a low-priority pod
    on the whole GPU. High-priority pods asking for the whole A100 (7g.40gb) and the H100 preempt them;
    while the victims terminate (slowly), a new pod asking for a 1g.5gb partition must not get what is
    being freed, and afterwards it says why it waits."""
    low = priority_class(kube, "kdra-e2e-low", 10)
    high = priority_class(kube, "kdra-e2e-high", 1000)
    pools = [
        {
            "name": "a100",
            "count": 1,
            "accelerator": {"model": "A100-40GB", "count": 1, "mig": {"mode": "dynamic"}},
        },
        {"name": "h100", "count": 1, "accelerator": {"model": H100, "count": 1}},
    ]
    profile = "device.attributes['gpu.nvidia.com'].profile == '{}'"
    with gpu_fleet(kube, pools) as fleet:
        a100, h100 = fleet.nodes
        kube.create(gpu_template("whole", namespace, 1))
        for name, prof in (("mig7g", "7g.40gb"), ("mig3g", "3g.20gb"), ("mig1g", "1g.5gb")):
            kube.create(gpu_template(name, namespace, 1, "mig.nvidia.com", profile.format(prof)))
        slow = TERMINATE_SLOWLY
        proc = session_scheduler(control_plane, tmp_path / "kdra.log")
        try:
            create_all(
                kube,
                [
                    gpu_pod(
                        "low-whole", namespace, "whole", fleet.prefix, priority_class=low, annotations=slow
                    ),
                    gpu_pod(
                        "low-mig", namespace, "mig3g", fleet.prefix, priority_class=low, annotations=slow
                    ),
                ],
            )
            wait(
                lambda: bound(kube, namespace) == {"low-whole": h100, "low-mig": a100},
                60,
                "the low-priority pods bound",
                log=proc.log,
            )
            create_all(
                kube,
                [
                    gpu_pod("high-mig", namespace, "mig7g", fleet.prefix, priority_class=high),
                    gpu_pod("high-whole", namespace, "whole", fleet.prefix, priority_class=high),
                ],
            )

            def nominated() -> dict[str, str]:
                return {
                    p["metadata"]["name"]: p["status"]["nominatedNodeName"]
                    for p in kube.list("Pod", namespace)
                    if (p.get("status") or {}).get("nominatedNodeName")
                }

            wait(
                lambda: nominated() == {"high-mig": a100, "high-whole": h100},
                60,
                "the preemptors nominated",
                0.1,
                proc.log,
            )
            kube.create(gpu_pod("late", namespace, "mig1g", fleet.prefix, priority_class=low))
            deadline = time.monotonic() + 60
            while set(bound(kube, namespace)) != {"high-mig", "high-whole"}:
                assert "late" not in bound(kube, namespace), "the late pod took devices freed for a preemptor"
                assert time.monotonic() < deadline, proc.log()
                time.sleep(0.1)
            devs = devices_of(kube, namespace)
            assert devs["high-whole"] == [f"{h100}/gpu-0"], devs
            assert len(devs["high-mig"]) == 1 and "mig-7g40gb" in devs["high-mig"][0], devs
            for victim in ("low-whole", "low-mig"):
                ev = events_for(kube, namespace, victim, "Pod")
                assert any(e["reason"] == "Preempted" and "preempted by pod" in e["message"] for e in ev), ev
            wait(lambda: scheduled_message(kube, namespace, "late"), 30, "the late pod explained")
            assert "late" not in bound(kube, namespace)
            problems = settled(kube, namespace)
            assert not problems, [str(p) for p in problems]
        finally:
            proc.stop()
            cleanup(kube, namespace)


def test_pod_disruption_budget_blocks_the_eviction_and_the_preemptor_says_so(
    control_plane: ControlPlane, kube: KubeClient, kdra_crds: list[str], namespace: str, tmp_path: Path
) -> None:
    low = priority_class(kube, "kdra-e2e-low", 10)
    high = priority_class(kube, "kdra-e2e-high", 1000)
    with gpu_fleet(kube, [{"name": "a", "count": 1, "accelerator": {"model": H100, "count": 1}}]) as fleet:
        kube.create(gpu_template("one", namespace, 1))
        kube.create(
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": "keep", "namespace": namespace},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "serving"}}},
            }
        )
        proc = session_scheduler(control_plane, tmp_path / "kdra.log")
        try:
            kube.create(
                gpu_pod(
                    "serving", namespace, "one", fleet.prefix, priority_class=low, labels={"app": "serving"}
                )
            )
            wait(
                lambda: bound(kube, namespace) == {"serving": fleet.nodes[0]},
                60,
                "the protected pod",
                log=proc.log,
            )
            wait(
                lambda: (
                    (kube.get("PodDisruptionBudget", "keep", namespace).get("status") or {}).get(
                        "currentHealthy"
                    )
                    == 1
                ),
                60,
                "the budget to count the running pod",
            )
            kube.create(gpu_pod("high", namespace, "one", fleet.prefix, priority_class=high))
            msg = wait(
                lambda: (
                    "disruption budget" in scheduled_message(kube, namespace, "high")
                    and scheduled_message(kube, namespace, "high")
                ),
                60,
                "the preemptor to say the budget protects its victim",
                log=proc.log,
            )
            assert "eviction of pod" in msg and f"{namespace}/serving" in msg, msg
            assert bound(kube, namespace) == {"serving": fleet.nodes[0]}
            assert not condition(kube.get("Pod", "serving", namespace), "DisruptionTarget")
            problems = settled(kube, namespace)
            assert not problems, [str(p) for p in problems]
        finally:
            proc.stop()
            cleanup(kube, namespace)


def test_required_rack_gangs_land_in_one_rack_each_and_a_third_says_why_it_waits(
    control_plane: ControlPlane, kube: KubeClient, kdra_crds: list[str], namespace: str, tmp_path: Path
) -> None:
    """Two racks of 2 nodes x 4 GPUs. Gangs of 4 x 2 GPUs that require one kdra.dev/rack: each takes a
    whole rack (spread by upstream scoring they would straddle both); a third names the level that is full."""
    pool = {
        "name": "a",
        "count": 4,
        "topology": {"nodesPerRack": 2},
        "accelerator": {"model": H100, "count": 4},
    }
    with gpu_fleet(kube, [pool]) as fleet:
        racks = {
            n["metadata"]["name"]: n["metadata"]["labels"]["kdra.dev/rack"]
            for n in kube.list("Node")
            if n["metadata"]["name"] in fleet.nodes
        }
        kube.create(gpu_template("two", namespace, 2))
        for g in ("g1", "g2", "g3"):
            kube.create(
                pod_group(g, namespace, 4, topologyConstraint={"requiredTopologyLevel": "kdra.dev/rack"})
            )
        proc = session_scheduler(control_plane, tmp_path / "kdra.log")
        try:
            for g in ("g1", "g2"):
                create_all(
                    kube, [gpu_pod(f"{g}-{i}", namespace, "two", fleet.prefix, group=g) for i in range(4)]
                )
                wait(lambda g=g: len(bound(kube, namespace, f"{g}-")) == 4, 60, f"{g} bound", log=proc.log)
            used = {g: {racks[n] for n in bound(kube, namespace, f"{g}-").values()} for g in ("g1", "g2")}
            assert len(used["g1"]) == 1 and len(used["g2"]) == 1 and used["g1"] != used["g2"], used
            create_all(
                kube, [gpu_pod(f"g3-{i}", namespace, "two", fleet.prefix, group="g3") for i in range(4)]
            )
            msg = wait(lambda: scheduled_message(kube, namespace, "g3-0"), 60, "g3 explained", log=proc.log)
            assert "no kdra.dev/rack has room for 4 members" in msg, msg
            assert not bound(kube, namespace, "g3-")
            problems = settled(kube, namespace)
            assert not problems, [str(p) for p in problems]
        finally:
            proc.stop()
            cleanup(kube, namespace)


def test_fragmentation_placement_keeps_an_8_gpu_node_whole_where_upstream_does_not(
    control_plane: ControlPlane, kube: KubeClient, kdra_crds: list[str], namespace: str, tmp_path: Path
) -> None:
    """Four 1-GPU pods on two 8-GPU nodes. Placement chosen by a SchedulingShard (fragmentation-aware, 8-GPU
    jobs expected): one node stays whole. Placement `upstream` by flag: the pods spread, no node is whole."""
    shard = {
        "apiVersion": "kdra.dev/v1alpha1",
        "kind": "SchedulingShard",
        "metadata": {"name": f"{namespace}-shard"},
        "spec": {"placementStrategy": {"gpu": "fragmentation"}, "fragmentationShapes": {"1": 3, "8": 1}},
    }
    with gpu_fleet(kube, [{"name": "a", "count": 2, "accelerator": {"model": H100, "count": 8}}]) as fleet:
        kube.create(gpu_template("one", namespace, 1))
        kube.create(shard)
        try:
            proc = session_scheduler(control_plane, tmp_path / "frag.log")
            try:
                create_all(kube, [gpu_pod(f"f-{i}", namespace, "one", fleet.prefix) for i in range(4)])
                wait(lambda: len(bound(kube, namespace, "f-")) == 4, 60, "4 pods bound", log=proc.log)
                assert "placement fragmentation" in proc.log()
                per_node = node_devices(kube, namespace)
                assert sorted(per_node.values()) == [4], per_node  # the other node has all 8 free
            finally:
                proc.stop()
        finally:
            kube.delete("SchedulingShard", shard["metadata"]["name"], missing_ok=True)
        for i in range(4):
            kube.delete("Pod", f"f-{i}", namespace)
        wait(
            lambda: not kube.list("Pod", namespace) and not allocated_claims(kube, namespace),
            60,
            "the first pods gone (KWOK finishes them) and their claims released",
        )
        proc = session_scheduler(control_plane, tmp_path / "upstream.log", "--placement", "upstream")
        try:
            create_all(kube, [gpu_pod(f"u-{i}", namespace, "one", fleet.prefix) for i in range(4)])
            wait(lambda: len(bound(kube, namespace, "u-")) == 4, 60, "4 pods bound", log=proc.log)
            per_node = node_devices(kube, namespace)
            assert "placement upstream" in proc.log(), proc.log()
            assert len(per_node) == 2, (per_node, proc.log())  # both used: neither takes an 8-GPU job
            problems = settled(kube, namespace)
            assert not problems, [str(p) for p in problems]
        finally:
            proc.stop()
            cleanup(kube, namespace)
