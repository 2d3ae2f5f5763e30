"""`kdra scheduler` runs the scheduling session (kdra.scheduler.session) on a real control plane, KWOK as the
kubelet: gangs all or nothing, queues sharing a fleet, reclaim, preemption of pods that hold DRA devices,
PodDisruptionBudgets, topology, placement policies, explanations on the live objects, and the same
placements as `kdra simulate` on the same objects. Every test ends with the independent checker
(support.invariants)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from kdra.cluster.store import AlreadyExistsError
from kdra.kube.client import KubeClient
from kdra.kube.resources import resource_path
from support.controlplane import ControlPlane
from support.wait import stays

from .sessionutil import (
    TERMINATE_SLOWLY,
    GpuFleet,
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
    victim_under_budget,
    wait,
)

# kdra scheduler under the default scheduler name: one such test at a time (hack/e2e.sh lanes).
pytestmark = [pytest.mark.e2e, pytest.mark.e2e_lane(name="kdra-scheduler")]

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

            def waiting(prefix: str) -> int:
                """The queue's pods that exist and are not bound: while the fleet fills, a queue's pod bound
                beyond its share may be reclaimed (deleted, a bare pod: 15 of b's 16 are left)."""
                taken = set(bound(kube, namespace, prefix))
                return sum(
                    1
                    for p in kube.list("Pod", namespace)
                    if p["metadata"]["name"].startswith(prefix)
                    and p["metadata"]["name"] not in taken
                    and not p["metadata"].get("deletionTimestamp")
                )

            def status_says(q: str, allocated: str, fair: str, prefix: str) -> bool:
                st = kube.get("Queue", q).get("status") or {}
                return (
                    st.get("allocated", {}).get(gpus) == allocated
                    and st.get("fairShare", {}).get(gpus) == fair
                    and st.get("pendingJobs") == waiting(prefix)
                    and condition(kube.get("Queue", q), "JobsWaiting").get("status") == "True"
                )

            wait(
                lambda: status_says(qa, "12", "12", "a-") and status_says(qb, "4", "4", "b-"),
                30,
                "the Queues' status",
            )
            assert condition(kube.get("Queue", qb), "JobsWaiting")["message"]

            # Queue a now needs only 4 GPUs: the fair share follows, b takes what a let go.
            keep = {f"a-{i}" for i in sorted(int(n.split("-")[1]) for n in bound(kube, namespace, "a-"))[:4]}
            for i in range(16):
                if f"a-{i}" not in keep:
                    kube.delete("Pod", f"a-{i}", namespace, missing_ok=True)
            wait(lambda: per_queue(kube, namespace) == {"a": 4, "b": 12}, 90, "4 and 12 GPUs", log=proc.log)
            wait(lambda: status_says(qb, "12", "12", "b-"), 30, "queue b's status")
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

            def preemptors_bound() -> bool:
                now = set(bound(kube, namespace))
                assert "late" not in now, "the late pod took devices freed for a preemptor"
                return now == {"high-mig", "high-whole"}

            wait(preemptors_bound, 60, "the preemptors bound", 0.1)
            devs = devices_of(kube, namespace)
            assert devs["high-whole"] == [f"{h100}/gpu-0"], devs
            assert len(devs["high-mig"]) == 1 and "mig-7g40gb" in devs["high-mig"][0], devs
            for victim in ("low-whole", "low-mig"):
                ev = events_for(kube, namespace, victim, "Pod")
                assert any(e["reason"] == "Preempted" and "preempted by pod" in e["message"] for e in ev), ev
            wait(lambda: scheduled_message(kube, namespace, "late"), 30, "the late pod explained")
            assert "late" not in bound(kube, namespace)

            # A pod nominated before a restart that can never fit (2 whole GPUs; nothing lower to
            # preempt): the restarted kdra clears its nomination, as kube-scheduler does when preemption
            # finds no candidate (schedule_one.go clearNominatedNode).
            proc.stop()
            kube.create(gpu_template("two", namespace, 2))
            kube.create(gpu_pod("never", namespace, "two", fleet.prefix, priority_class=high))
            kube.patch("Pod", "never", {"status": {"nominatedNodeName": h100}}, namespace, "status")
            proc = session_scheduler(control_plane, tmp_path / "kdra-restarted.log")
            wait(
                lambda: "never" not in nominated() and scheduled_message(kube, namespace, "never"),
                60,
                "the nomination of a pod that cannot fit cleared",
                0.2,
                proc.log,
            )
            problems = settled(kube, namespace)
            assert not problems, [str(p) for p in problems]
        finally:
            proc.stop()
            cleanup(kube, namespace)


def test_a_preemptor_that_gave_up_waiting_keeps_its_victims_device_from_lower_priority_pods(
    control_plane: ControlPlane, kube: KubeClient, kdra_crds: list[str], namespace: str, tmp_path: Path
) -> None:
    """The victim takes longer to terminate than the preemption wait (--preemption-wait 2): the preemptor's
    bind gives up and it is retried after backoff. Meanwhile the victim's claim still holds the GPU in
    the API: a lower-priority pod arriving then must not get it (it would take what the preemption was
    for and be the next victim); once the victim is gone the preemptor binds, with no second victim."""
    low = priority_class(kube, "kdra-e2e-low", 10)
    high = priority_class(kube, "kdra-e2e-high", 1000)
    pools = [{"name": "h100", "count": 1, "accelerator": {"model": H100, "count": 1}}]
    with gpu_fleet(kube, pools) as fleet:
        kube.create(gpu_template("whole", namespace, 1))
        log = tmp_path / "kdra.log"
        proc = session_scheduler(control_plane, log, "--preemption-wait", "2")
        try:
            slow = {"pod-delete.stage.kwok.x-k8s.io/delay": "10s"}
            kube.create(
                gpu_pod("victim", namespace, "whole", fleet.prefix, priority_class=low, annotations=slow)
            )
            wait(lambda: "victim" in bound(kube, namespace), 60, "the victim bound", log=proc.log)
            kube.create(gpu_pod("high", namespace, "whole", fleet.prefix, priority_class=high))
            gave_up = f"binding cycle of {namespace}/high: claims {namespace}/victim-gpu-"
            wait(
                lambda: gave_up in log.read_text(errors="replace"),
                30,
                "the preemptor gave up waiting",
                0.1,
                proc.log,
            )
            kube.create(gpu_pod("late", namespace, "whole", fleet.prefix, priority_class=low))

            def preemptor_bound() -> bool:
                now = bound(kube, namespace)
                assert "late" not in now, "the late pod took the device the victim still held"
                return now.get("high") == fleet.nodes[0]

            wait(preemptor_bound, 60, "the preemptor bound", 0.1, proc.log)
            assert not [e for e in events_for(kube, namespace, "late", "Pod") if e["reason"] == "Preempted"]
            wait(lambda: scheduled_message(kube, namespace, "late"), 30, "the late pod explained")
            problems = settled(kube, namespace)
            assert not problems, [str(p) for p in problems]
        finally:
            proc.stop()
            cleanup(kube, namespace)


def test_pod_disruption_budget_blocks_the_eviction_and_the_preemptor_says_so(
    control_plane: ControlPlane, kube: KubeClient, kdra_crds: list[str], namespace: str, tmp_path: Path
) -> None:
    with victim_under_budget(control_plane, kube, namespace, tmp_path / "kdra.log", min_available=1) as v:
        kube.create(gpu_pod("high", namespace, "one", v.fleet.prefix, priority_class=v.high))
        msg = wait(
            lambda: (
                "disruption budget" in scheduled_message(kube, namespace, "high")
                and scheduled_message(kube, namespace, "high")
            ),
            60,
            "the preemptor to say the budget protects its victim",
            log=v.proc.log,
        )
        assert "eviction of pod" in msg and f"{namespace}/serving" in msg, msg
        assert bound(kube, namespace) == {"serving": v.fleet.nodes[0]}
        assert not condition(kube.get("Pod", "serving", namespace), "DisruptionTarget")
        problems = settled(kube, namespace)
        assert not problems, [str(p) for p in problems]


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
            text = "no kdra.dev/rack has room for 4 members"
            wait(lambda: text in scheduled_message(kube, namespace, "g3-0"), 60, "g3 explained", log=proc.log)
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


def test_simulate_and_the_live_cluster_make_the_same_placements(
    control_plane: ControlPlane, kube: KubeClient, kdra_crds: list[str], namespace: str, tmp_path: Path
) -> None:
    """One small deterministic workload (a queue, a gang that needs one rack, whole GPUs and MIG partitions)
    through `kdra simulate`'s Simulation and through `kdra scheduler` on the live cluster: the same node and
    the same devices for every pod."""
    from kdra.sim.engine import DRA, Simulation
    from kdra.sim.workload import build_workload

    from .sessionutil import fleet_spec, render_fleet

    prefix = f"c{namespace[-6:]}"
    pools = [
        {
            "name": "h100",
            "count": 3,
            "topology": {"nodesPerRack": 1},
            "accelerator": {"model": H100, "count": 4},
        },
        {
            "name": "a100",
            "count": 1,
            "accelerator": {"model": "A100-40GB", "count": 2, "mig": {"mode": "dynamic"}},
        },
    ]
    fleet_objs = render_fleet(fleet_spec(prefix, pools))
    q = f"{namespace}-team"
    profile = "device.attributes['gpu.nvidia.com'].profile == '{}'"
    objs = [
        queue(q, resources={"deviceclass/gpu.nvidia.com": {"quota": 6, "limit": 7}}),
        gpu_template("one", namespace, 1),
        gpu_template("two", namespace, 2),
        gpu_template("mig3g", namespace, 1, "mig.nvidia.com", profile.format("3g.20gb")),
        gpu_template("mig1g", namespace, 1, "mig.nvidia.com", profile.format("1g.5gb")),
        pod_group(
            "train", namespace, 2, queue=q, topologyConstraint={"requiredTopologyLevel": "kdra.dev/rack"}
        ),
        *[gpu_pod(f"train-{i}", namespace, "two", prefix, group="train") for i in range(2)],
        *[gpu_pod(f"one-{i}", namespace, "one", prefix, queue=q) for i in range(5)],
        *[gpu_pod(f"mig-{i}", namespace, "mig3g" if i % 2 else "mig1g", prefix, queue=q) for i in range(5)],
    ]
    # kdra simulate: the same objects in memory.
    from kdra.scheduler.scheduler import SchedulerConfig

    config = SchedulerConfig(scheduler_name="kdra")  # the pods' schedulerName
    sim = Simulation(fleet_objs, build_workload(objs), DRA, config=config, dra_objects=fleet_objs)
    sim.run()
    store = sim.store
    claims = {c["metadata"]["name"]: c for c in store.list("ResourceClaim", namespace)}

    def sim_devices(pod: dict) -> list[str]:
        out = []
        for st in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
            alloc = (claims[st["resourceClaimName"]].get("status") or {}).get("allocation") or {}
            out.extend(f"{r['pool']}/{r['device']}" for r in alloc["devices"]["results"])
        return sorted(out)

    simulated = {
        p["metadata"]["name"]: (
            p["spec"].get("nodeName"),
            sim_devices(p) if p["spec"].get("nodeName") else [],
        )
        for p in store.list("Pod", namespace)
    }
    assert sum(1 for n, _ in simulated.values() if n) >= 8, simulated  # the case is not trivial

    fleet = GpuFleet(kube, fleet_spec(prefix, pools)).create(fleet_objs)
    try:
        create_all(kube, objs)
        wait_for_claims(kube, namespace, len(simulated))
        proc = session_scheduler(control_plane, tmp_path / "kdra.log")
        try:
            expected = {n for n, (node, _) in simulated.items() if node}
            wait(
                lambda: set(bound(kube, namespace)) == expected, 60, "the simulated pods bound", log=proc.log
            )
            stays(lambda: set(bound(kube, namespace)) == expected, 2, "nothing else binds")
            devs = devices_of(kube, namespace)
            placed = bound(kube, namespace)
            live = {name: (placed.get(name), devs[name] if name in placed else []) for name in simulated}
            assert live == simulated
            problems = settled(kube, namespace)
            assert not problems, [str(p) for p in problems]
        finally:
            proc.stop()
            cleanup(kube, namespace)
    finally:
        fleet.delete()
        kube.delete("Queue", q, missing_ok=True)


VOLCANO_PODGROUP_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "podgroups.scheduling.volcano.sh"},
    "spec": {
        "group": "scheduling.volcano.sh",
        "scope": "Namespaced",
        "names": {
            "kind": "PodGroup",
            "plural": "podgroups",
            "singular": "podgroup",
            "listKind": "PodGroupList",
        },
        "versions": [
            {
                "name": "v1beta1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                        },
                    }
                },
            }
        ],
    },
}


def upstream_gang(version: str, name: str, namespace: str, min_count: int) -> list[dict]:
    """A Workload with one gang template and the PodGroup made from it, in the version the API serves."""
    group = "scheduling.k8s.io"
    gang = {"gang": {"minCount": min_count}}
    workload = {
        "apiVersion": f"{group}/{version}",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"podGroupTemplates": [{"name": "workers", "schedulingPolicy": gang}]},
    }
    if version == "v1alpha2":  # 1.36
        ref = {"podGroupTemplateRef": {"workload": {"workloadName": name, "podGroupTemplateName": "workers"}}}
    else:  # v1beta1, 1.37
        ref = {"workloadRef": {"workloadName": name, "templateName": "workers"}}
    pg = {
        "apiVersion": f"{group}/{version}",
        "kind": "PodGroup",
        "metadata": {"name": f"{name}-workers", "namespace": namespace},
        "spec": {**ref, "schedulingPolicy": gang},
    }
    return [workload, pg]


def test_upstream_workload_and_volcano_pod_groups_are_gangs(
    control_plane: ControlPlane, kube: KubeClient, kdra_crds: list[str], namespace: str, tmp_path: Path
) -> None:
    """scheduling.k8s.io's Workload/PodGroup (in the version this control plane serves) and a Volcano
    PodGroup (its CRD installed here; KAI's is not, and is simply absent): members wait until minCount
    exist, then bind together; the PodGroups' conditions say so."""
    version = kube.served_version("scheduling.k8s.io", "podgroups")
    assert version is not None, "the test control plane serves the Workload API (GenericWorkload)"
    version = version.split("/")[1]
    with contextlib.suppress(AlreadyExistsError):
        kube.create(VOLCANO_PODGROUP_CRD)
    wait(
        lambda: kube.served_version("scheduling.volcano.sh", "podgroups"),
        30,
        "the Volcano PodGroup CRD served",
    )
    with gpu_fleet(kube, [{"name": "a", "count": 1, "accelerator": {"model": H100, "count": 8}}]) as fleet:
        kube.create(gpu_template("one", namespace, 1))
        create_all(kube, upstream_gang(version, "wl", namespace, 3), workers=1)
        vc = {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "vc", "namespace": namespace},
            "spec": {"minMember": 2},
        }
        kube.create(vc)  # the path follows its apiVersion

        def upstream_pod(i: int) -> dict:
            p = gpu_pod(f"wl-{i}", namespace, "one", fleet.prefix)
            p["spec"]["schedulingGroup"] = {"podGroupName": "wl-workers"}
            return p

        def volcano_pod(i: int) -> dict:
            return gpu_pod(
                f"vc-{i}", namespace, "one", fleet.prefix, annotations={"scheduling.k8s.io/group-name": "vc"}
            )

        proc = session_scheduler(control_plane, tmp_path / "kdra.log")
        path = resource_path("PodGroup", namespace, "wl-workers", api_version=f"scheduling.k8s.io/{version}")
        ctype = "PodGroupScheduled" if version == "v1alpha2" else "PodGroupInitiallyScheduled"
        try:
            create_all(kube, [upstream_pod(0), upstream_pod(1), volcano_pod(0)])
            wait(
                lambda: (
                    "fewer than minCount 3 pods exist" in scheduled_message(kube, namespace, "wl-0")
                    and "fewer than minCount 2 pods exist" in scheduled_message(kube, namespace, "vc-0")
                    and "2 of minCount 3 pods exist"
                    in condition(kube.request("GET", path), ctype).get("message", "")
                ),
                60,
                "the members to wait for the rest",
                log=proc.log,
            )
            assert "PodGroup.scheduling.volcano.sh" in proc.log() and "scheduling.run.ai" not in proc.log()
            assert bound(kube, namespace) == {}
            create_all(kube, [upstream_pod(2), volcano_pod(1)])
            wait(lambda: len(bound(kube, namespace)) == 5, 60, "both gangs bound", log=proc.log)
            wait(
                lambda: condition(kube.request("GET", path), ctype).get("status") == "True",
                30,
                f"the upstream PodGroup's {ctype}",
            )
            vc_path = resource_path("PodGroup", namespace, "vc", api_version="scheduling.volcano.sh/v1beta1")
            wait(
                lambda: condition(kube.request("GET", vc_path), "PodGroupScheduled").get("status") == "True",
                30,
                "the Volcano PodGroup's condition",
            )
            problems = settled(kube, namespace)
            assert not problems, [str(p) for p in problems]
        finally:
            proc.stop()
            cleanup(kube, namespace)
            kube.delete("CustomResourceDefinition", "podgroups.scheduling.volcano.sh", missing_ok=True)


def test_invalid_pod_group_and_queues_are_reported_on_the_objects_and_the_rest_schedules(
    control_plane: ControlPlane, kube: KubeClient, kdra_crds: list[str], namespace: str, tmp_path: Path
) -> None:
    """Objects the API server accepts (their CRD schemas are loose) but kdra cannot use: a PodGroup whose
    scheduleTimeout is not a duration, a Queue naming a parent that does not exist, one with a negative
    quota. Each gets a condition and a Warning Event naming object, field and rule; their pods wait saying
    so; everything else is scheduled."""
    orphan, negative = f"{namespace}-orphan", f"{namespace}-negative"
    gpus = "deviceclass/gpu.nvidia.com"
    kube.create(queue(orphan, parentQueue=f"{namespace}-nope"))
    kube.create(queue(negative, resources={gpus: {"quota": -5}}))
    with gpu_fleet(kube, [{"name": "a", "count": 1, "accelerator": {"model": H100, "count": 4}}]) as fleet:
        kube.create(gpu_template("one", namespace, 1))
        kube.create(pod_group("bad", namespace, 1, scheduleTimeout="soon"))
        create_all(
            kube,
            [
                gpu_pod("bad-0", namespace, "one", fleet.prefix, group="bad"),
                gpu_pod("orphan-0", namespace, "one", fleet.prefix, queue=orphan),
                gpu_pod("negative-0", namespace, "one", fleet.prefix, queue=negative),
                gpu_pod("ok-0", namespace, "one", fleet.prefix),
            ],
        )
        proc = session_scheduler(control_plane, tmp_path / "kdra.log")
        try:
            wait(lambda: set(bound(kube, namespace)) == {"ok-0"}, 60, "the valid pod bound", log=proc.log)
            want = {
                "bad-0": f"PodGroup {namespace}/bad: spec.scheduleTimeout: Invalid value: 'soon'",
                "orphan-0": f"Queue {orphan}: spec.parentQueue: Not found: '{namespace}-nope'",
                "negative-0": f"Queue {negative}: spec.resources[{gpus}].quota: Invalid value: -5",
            }
            for pod, text in want.items():
                wait(
                    lambda pod=pod, text=text: text in scheduled_message(kube, namespace, pod),
                    30,
                    f"{pod} explained",
                )
            # The session reports invalid objects after it has tried the pods: wait, as for the Queues.
            pg = wait(
                lambda: condition(kube.get("PodGroup", "bad", namespace), "PodGroupScheduled"),
                30,
                "the PodGroup's condition",
            )
            assert pg.get("reason") == "InvalidSpec" and want["bad-0"] in pg["message"], pg
            assert any(
                e["reason"] == "InvalidSpec" and e["type"] == "Warning"
                for e in events_for(kube, namespace, "bad")
            )
            for q, text in ((orphan, want["orphan-0"]), (negative, want["negative-0"])):
                valid = wait(
                    lambda q=q: condition(kube.get("Queue", q), "Valid"), 30, f"Queue {q}'s condition"
                )
                assert (
                    valid["status"] == "False"
                    and valid["reason"] == "InvalidSpec"
                    and text in valid["message"]
                )
                assert any(e["reason"] == "InvalidSpec" for e in events_for(kube, "default", q, "Queue"))
            problems = settled(kube, namespace)
            assert not problems, [str(p) for p in problems]
        finally:
            proc.stop()
            cleanup(kube, namespace)
            for q in (orphan, negative):
                kube.delete("Queue", q, missing_ok=True)


def test_kwok_runs_the_pods_kdra_binds_jobs_complete_and_nodes_heartbeat(
    control_plane: ControlPlane, kube: KubeClient, kdra_crds: list[str], namespace: str, tmp_path: Path
) -> None:
    """KWOK is the test nodes' kubelet: a Job's pods bound by kdra run and complete (the Job too, and
    their claims are released), a deleted pod terminates without a force delete, the node renews its Lease."""
    with gpu_fleet(kube, [{"name": "a", "count": 1, "accelerator": {"model": H100, "count": 2}}]) as fleet:
        kube.create(gpu_template("one", namespace, 1))
        pod = gpu_pod(
            "x", namespace, "one", fleet.prefix, annotations={"pod-complete.stage.kwok.x-k8s.io/delay": "1s"}
        )
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "train", "namespace": namespace},
            "spec": {
                "completions": 2,
                "parallelism": 2,
                "template": {
                    "metadata": {"annotations": pod["metadata"]["annotations"]},
                    "spec": dict(pod["spec"], restartPolicy="Never"),
                },
            },
        }
        kube.create(job)
        kube.create(gpu_pod("deleted", namespace, "one", fleet.prefix))
        proc = session_scheduler(control_plane, tmp_path / "kdra.log")
        try:

            def job_complete() -> bool:
                conds = (kube.get("Job", "train", namespace).get("status") or {}).get("conditions") or []
                return any(c["type"] == "Complete" and c["status"] == "True" for c in conds)

            wait(job_complete, 90, "the Job to complete", log=proc.log)
            wait(lambda: "deleted" in bound(kube, namespace), 60, "the third pod bound", log=proc.log)
            assert kube.get("Pod", "deleted", namespace)["status"]["phase"] == "Running"
            kube.delete("Pod", "deleted", namespace)  # graceful: KWOK finishes it
            wait(lambda: kube.try_get("Pod", "deleted", namespace) is None, 60, "the deleted pod gone")
            wait(lambda: not allocated_claims(kube, namespace), 60, "the claims released")
            lease = kube.get("Lease", fleet.nodes[0], "kube-node-lease")
            assert lease["spec"].get("renewTime"), lease
            problems = settled(kube, namespace)
            assert not problems, [str(p) for p in problems]
        finally:
            proc.stop()
            cleanup(kube, namespace)


def _partitionable_slices(node: str, driver: str) -> list[dict]:
    """kubernetes#138765's device on `node`: published whole and as two halves sharing a counter set."""
    pool = {"name": f"{node}-{driver}", "generation": 1, "resourceSliceCount": 2}
    devices = [
        {
            "name": "dev-0" if size == "whole" else f"dev-0-half-{size[-1]}",
            "attributes": {"size": {"string": "whole" if size == "whole" else "half"}},
            "consumesCounters": [
                {
                    "counterSet": "dev-0-counters",
                    "counters": {"units": {"value": "2" if size == "whole" else "1"}},
                }
            ],
        }
        for size in ("whole", "half0", "half1")
    ]
    counters = {"sharedCounters": [{"name": "dev-0-counters", "counters": {"units": {"value": "2"}}}]}
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{driver}-{part}"},
            "spec": {"driver": driver, "nodeName": node, "pool": dict(pool), **spec},
        }
        for part, spec in (("counters", counters), ("devices", {"devices": devices}))
    ]


def test_gang_device_search_and_a_device_preference_by_flag_place_kubernetes_138765(
    control_plane: ControlPlane, kube: KubeClient, kdra_crds: list[str], namespace: str, tmp_path: Path
) -> None:
    """kubernetes#138765 on a live cluster: a 2-member gang whose claims ask for a whole partitionable
    device or else half of one, on one device. `kdra scheduler --gang-device-search --device-preference
    fragmentation`: the first member's whole device is re-assigned to a half, both bind, the PodGroup
    says the search did it, the second member's Scheduled Event says what decided its devices."""
    driver = f"{namespace}.example.com"
    cls = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": driver},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
    }

    def sub(size: str) -> dict:
        expr = f'device.attributes["{driver}"].size == "{size}"'
        return {"name": size, "deviceClassName": driver, "selectors": [{"cel": {"expression": expr}}]}

    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "whole-or-half", "namespace": namespace},
        "spec": {
            "spec": {
                "devices": {"requests": [{"name": "dev", "firstAvailable": [sub("whole"), sub("half")]}]}
            }
        },
    }
    with gpu_fleet(kube, [{"name": "p", "count": 1, "accelerator": {"model": H100, "count": 1}}]) as fleet:
        (node,) = fleet.nodes
        slices = _partitionable_slices(node, driver)
        kube.create(cls)
        try:
            create_all(kube, [*slices, template, pod_group("pair", namespace, 2)], workers=1)
            proc = session_scheduler(
                control_plane,
                tmp_path / "search.log",
                "--gang-device-search",
                "--device-preference",
                "fragmentation",
            )
            try:
                members = [
                    gpu_pod(f"pair-{i}", namespace, "whole-or-half", fleet.prefix, group="pair")
                    for i in range(2)
                ]
                create_all(kube, members)
                wait(lambda: len(bound(kube, namespace)) == 2, 60, "both members bound", log=proc.log)
                assert sorted(
                    d.rsplit("/", 1)[-1] for ds in devices_of(kube, namespace).values() for d in ds
                ) == [
                    "dev-0-half-0",
                    "dev-0-half-1",
                ], devices_of(kube, namespace)

                def scheduled() -> Mapping[str, Any]:
                    cond = condition(kube.get("PodGroup", "pair", namespace), "PodGroupScheduled")
                    return cond if cond.get("status") == "True" else {}

                cond = wait(scheduled, 30, "the PodGroup scheduled")  # written beside the binding cycles
                assert "re-assigned 1 member(s)' devices" in cond.get("message", ""), cond
                notes = [
                    e["message"]
                    for i in range(2)
                    for e in events_for(kube, namespace, f"pair-{i}", "Pod")
                    if e.get("reason") == "Scheduled"
                ]
                assert any("fragmentation preference" in n for n in notes), notes
                problems = settled(kube, namespace)
                assert not problems, [str(p) for p in problems]
            finally:
                proc.stop()
                cleanup(kube, namespace)
        finally:
            for s in slices:
                kube.delete("ResourceSlice", s["metadata"]["name"], missing_ok=True)
            kube.delete("DeviceClass", driver, missing_ok=True)
