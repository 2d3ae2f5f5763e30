"""Preemption and gang eviction on a real API server, with kdra SIGKILLed at random points of them and
restarted, ten times each: what kdra decided is on the API (each victim's record, written before any is
evicted; the preemptor's nominatedNodeName), and the restarted kdra resumes it. The independent checker
(support.invariants) then finds no preemptor forgotten, no victim beyond the fewest needed, no
intruder on the devices the victims freed, no gang left partly running past its eviction, and the
cluster consistent (explanations naming only each pod's own objects included)."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from kdra.api.types import Obj
from kdra.kube.client import KubeClient
from support.controlplane import ControlPlane
from support.invariants import check_cluster, devices_of, preemption_outcome

from .kubeutil import KdraProcess
from .sessionutil import (
    allocated_claims,
    bound,
    cleanup,
    create_all,
    gpu_fleet,
    gpu_pod,
    gpu_template,
    pod_group,
    pods,
    priority_class,
    queue,
    scheduled_message,
    session_scheduler,
    settled,
    wait,
)

# kdra scheduler under the default scheduler name: one such test at a time (hack/e2e.sh lanes).
pytestmark = [pytest.mark.e2e, pytest.mark.e2e_lane(name="kdra-scheduler")]

H100 = "H100-SXM-80GB"
KILLS = 10
# A slow client stretches the victims' marks and deletes over a few hundred ms, and KWOK finishes a victim
# a second after its delete, so that a kill lands before, inside and after the eviction and the wait.
SLOW = ("--kube-api-qps", "10", "--kube-api-burst", "4", "--bind-workers", "1")
TERMINATE_IN_1S = {"pod-delete.stage.kwok.x-k8s.io/delay": "1s"}


def live(kube: KubeClient, namespace: str, names: list[str]) -> list[str]:
    """Those of `names` that exist, are not terminating and not done."""
    out = []
    for name, p in pods(kube, namespace).items():
        done = (p.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        if name in names and not p["metadata"].get("deletionTimestamp") and not done:
            out.append(name)
    return out


def reset(kube: KubeClient, namespace: str) -> None:
    cleanup(kube, namespace)
    wait(lambda: not pods(kube, namespace) and not allocated_claims(kube, namespace), 60, "a clean namespace")


def restart(control_plane: ControlPlane, proc: KdraProcess, log: Path, *extra: str) -> KdraProcess:
    proc.kill()  # SIGKILL: nothing cleaned up, whatever was under way cut where it was
    return session_scheduler(control_plane, log, *SLOW, *extra)


def kill_rounds(
    control_plane: ControlPlane,
    kube: KubeClient,
    namespace: str,
    tmp_path: Path,
    rng: random.Random,
    victim: str,
    preemptor: str,
    names: tuple[str, str, str],
    by_queue: bool = False,
) -> dict[str, int]:
    """KILLS rounds: four victims (of the priority class `victim`, or with `by_queue` its queue) fill the
    fleet's 4-GPU node; two preemptors (2 GPUs and 1 GPU) take three of them while intruders of the
    victims' kind arrive (one before the kill, one while kdra is down); kdra is killed at a random point
    and restarted. Each round's outcome is checked; returns where the kills landed."""
    victims_of, preemptors_of, intruders_of = names
    with gpu_fleet(kube, [{"name": "a", "count": 1, "accelerator": {"model": H100, "count": 4}}]) as fleet:

        def pod(name: str, template: str, side: str, annotations: dict[str, str] | None = None) -> Obj:
            in_queue, priority = (side, None) if by_queue else (None, side)
            return gpu_pod(
                name,
                namespace,
                template,
                fleet.prefix,
                queue=in_queue,
                priority_class=priority,
                annotations=annotations,
            )

        kube.create(gpu_template("one", namespace, 1))
        kube.create(gpu_template("two", namespace, 2))
        proc = session_scheduler(control_plane, tmp_path / "kdra-0.log", *SLOW)
        landed: dict[str, int] = {"before the eviction": 0, "victims going": 0, "after the binds": 0}
        try:
            for i in range(KILLS):
                victims = [f"{victims_of}{i}-{k}" for k in range(4)]
                create_all(
                    kube,
                    [pod(n, "one", victim, TERMINATE_IN_1S) for n in victims],
                )
                wait(
                    lambda victims=victims: set(victims) <= set(bound(kube, namespace)),
                    60,
                    f"round {i}: the victims-to-be bound",
                )
                freed = devices_of(kube, namespace, victims)
                preemptors = [f"{preemptors_of}{i}-two", f"{preemptors_of}{i}-one"]
                intruders = [f"{intruders_of}{i}-two", f"{intruders_of}{i}-one"]
                create_all(
                    kube,
                    [
                        pod(preemptors[0], "two", preemptor),
                        pod(preemptors[1], "one", preemptor),
                        pod(intruders[0], "two", victim),
                    ],
                )
                if i % 2:  # inside the eviction: a victim's deletion is never undone, so these count surely
                    wait(
                        lambda victims=victims: len(live(kube, namespace, victims)) < 4,
                        30,
                        f"round {i}: the first victim going",
                        0.02,
                    )
                    time.sleep(rng.uniform(0.0, 0.3))
                else:  # anywhere: before the choice, while the victims are marked, while they go
                    time.sleep(rng.uniform(0.0, 2.0))
                proc.kill()
                going = 4 - len(live(kube, namespace, victims))
                placed = set(preemptors) <= set(bound(kube, namespace))
                landed[
                    "after the binds" if placed else "victims going" if going else "before the eviction"
                ] += 1
                kube.create(pod(intruders[1], "one", victim))
                proc = session_scheduler(control_plane, tmp_path / f"kdra-{i + 1}.log", *SLOW)
                wait(
                    lambda preemptors=preemptors: set(preemptors) <= set(bound(kube, namespace)),
                    60,
                    f"round {i}: the preemptors bound",
                )
                wait(
                    lambda intruders=intruders: all(scheduled_message(kube, namespace, n) for n in intruders),
                    30,
                    f"round {i}: the intruders explained",
                )
                problems = preemption_outcome(
                    kube,
                    namespace,
                    preemptors=preemptors,
                    preemptible=victims,
                    minimum=3,
                    intruders=intruders,
                    freed=freed,
                )
                problems += settled(kube, namespace, timeout=30)
                assert not problems, (i, [str(p) for p in problems])
                reset(kube, namespace)
        finally:
            proc.stop()
            cleanup(kube, namespace)
    return landed


def test_sigkill_during_preemption_forgets_no_preemptor_adds_no_victim_and_lets_no_intruder_in(
    control_plane: ControlPlane, kube: KubeClient, kdra_crds: list[str], namespace: str, tmp_path: Path
) -> None:
    """Four low-priority pods fill a 4-GPU node; two high-priority pods (2 GPUs and 1 GPU) preempt three
    of them while low-priority intruders of the same shapes arrive (one before the kill, one while kdra
    is down). kdra is killed at a random point and restarted."""
    low = priority_class(kube, "kdra-e2e-low", 10)
    high = priority_class(kube, "kdra-e2e-high", 1000)
    landed = kill_rounds(
        control_plane,
        kube,
        namespace,
        tmp_path,
        random.Random(27),
        victim=low,
        preemptor=high,
        names=("low", "hi", "in"),
    )
    print(f"\npreemption kills: {KILLS}, landed {landed}, violations 0")
    assert landed["victims going"] + landed["after the binds"] >= KILLS // 2, landed


def test_sigkill_during_a_gangs_eviction_leaves_no_member_running_alone(
    control_plane: ControlPlane, kube: KubeClient, kdra_crds: list[str], namespace: str, tmp_path: Path
) -> None:
    """A low-priority gang of four (minMember 3) fills a 4-GPU node; a high-priority pod asking for two
    GPUs preempts it, whole. kdra is killed in the middle of the eviction; the restarted kdra finishes it
    at once (the stale-gang grace is 600 s here), although what went already is enough for the preemptor,
    which binds; no member of the gang runs alone."""
    rng = random.Random(5)
    low = priority_class(kube, "kdra-e2e-low", 10)
    high = priority_class(kube, "kdra-e2e-high", 1000)
    grace = ("--stale-gang-grace", "600")
    with gpu_fleet(kube, [{"name": "a", "count": 1, "accelerator": {"model": H100, "count": 4}}]) as fleet:
        kube.create(gpu_template("one", namespace, 1))
        kube.create(gpu_template("two", namespace, 2))
        proc = session_scheduler(control_plane, tmp_path / "kdra-0.log", *SLOW, *grace)
        half_way = 0
        longest = 0.0  # seconds from the restart until no member of the gang ran
        try:
            for i in range(KILLS):
                g = f"g{i}"
                members = [f"{g}-{k}" for k in range(4)]
                kube.create(pod_group(g, namespace, 3, priorityClassName=low))
                create_all(
                    kube,
                    [
                        gpu_pod(
                            m,
                            namespace,
                            "one",
                            fleet.prefix,
                            group=g,
                            priority_class=low,
                            annotations=TERMINATE_IN_1S,
                        )
                        for m in members
                    ],
                )
                wait(
                    lambda members=members: set(members) <= set(bound(kube, namespace)),
                    60,
                    f"{g} bound",
                )
                freed = devices_of(kube, namespace, members)
                preemptor = f"hi{i}"
                kube.create(gpu_pod(preemptor, namespace, "two", fleet.prefix, priority_class=high))
                wait(
                    lambda: any(
                        p["metadata"].get("annotations", {}).get("kdra.dev/evicted-for")
                        for p in pods(kube, namespace).values()
                    ),
                    60,
                    f"{g}'s eviction to start",
                    0.02,
                )
                if i % 2:  # between the first member's deletion and the last one's (200 ms apart at qps 10)
                    wait(
                        lambda members=members: len(live(kube, namespace, members)) < 4,
                        30,
                        f"{g}'s first member going",
                        0.02,
                    )
                    time.sleep(rng.uniform(0.0, 0.15))
                else:  # anywhere from the first record on
                    time.sleep(rng.uniform(0.0, 0.6))
                proc.kill()
                if 0 < len(live(kube, namespace, members)) < 4:
                    half_way += 1
                start = time.monotonic()
                proc = session_scheduler(control_plane, tmp_path / f"kdra-{i + 1}.log", *SLOW, *grace)
                wait(
                    lambda members=members: not live(kube, namespace, members),
                    30,
                    f"{g} evicted whole",
                    0.1,
                )
                longest = max(longest, time.monotonic() - start)
                # Terminating members still count as bound for the partial-gang rule: check once they went.
                wait(
                    lambda members=members: not set(members) & set(pods(kube, namespace)),
                    30,
                    f"{g}'s members gone",
                    0.1,
                )
                wait(
                    lambda preemptor=preemptor: preemptor in bound(kube, namespace),
                    60,
                    f"{preemptor} bound",
                )
                problems = preemption_outcome(
                    kube,
                    namespace,
                    preemptors=[preemptor],
                    preemptible=members,
                    minimum=4,
                    intruders=[],
                    freed=freed,
                )
                problems += [v for v in check_cluster(kube, namespace) if v.rule == "partial-gang"]
                problems += settled(kube, namespace, timeout=30)
                assert not problems, (i, [str(p) for p in problems])
                kube.delete("PodGroup", g, namespace)
                reset(kube, namespace)
        finally:
            proc.stop()
            cleanup(kube, namespace)
        figures = f"half-way {half_way}, whole in <= {longest:.1f}s after the restart"
        print(f"\ngang eviction kills: {KILLS}, {figures}, violations 0")
        assert half_way >= 3, half_way


def test_sigkill_during_a_reclaim_forgets_no_reclaimer_adds_no_victim_and_lets_no_intruder_in(
    control_plane: ControlPlane, kube: KubeClient, kdra_crds: list[str], namespace: str, tmp_path: Path
) -> None:
    """Queue b (deserved 1 GPU) borrowed all four GPUs of a node while queue a (deserved 3) was idle; a's
    pods (2 GPUs and 1 GPU) reclaim three of b's, while b's pods of the same shapes arrive (one before the
    kill, one while kdra is down). kdra is killed at a random point and restarted: a's pods bind on what
    b's victims freed, no fourth victim is taken, no pod of b gets the freed devices."""
    gpus = "deviceclass/gpu.nvidia.com"
    qa, qb = f"{namespace}-a", f"{namespace}-b"
    kube.create(queue(qa, resources={gpus: {"quota": 3}}))
    kube.create(queue(qb, resources={gpus: {"quota": 1}}))
    try:
        landed = kill_rounds(
            control_plane,
            kube,
            namespace,
            tmp_path,
            random.Random(31),
            victim=qb,
            preemptor=qa,
            names=("b", "a", "in"),
            by_queue=True,
        )
    finally:
        for q in (qa, qb):
            kube.delete("Queue", q, missing_ok=True)
    print(f"\nreclaim kills: {KILLS}, landed {landed}, violations 0")
    assert landed["victims going"] + landed["after the binds"] >= KILLS // 2, landed
