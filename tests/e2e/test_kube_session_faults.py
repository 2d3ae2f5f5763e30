"""Gang binding on a real API server, which has no transactions (kdra.kube.binder): kdra SIGKILLed in the
middle of a gang's binding and restarted, ten times; a member deleted half-way through the binding; a claim
write refused half-way through the first phase. None may leave a gang partly running or devices held;
the independent checker (support.invariants) reads the API after each."""

from __future__ import annotations

import contextlib
import random
import time
from pathlib import Path

import pytest

from kdra.cluster.store import StoreError
from kdra.kube.client import FencedError, KubeClient
from kdra.scheduler.gangqueues import GangQueueOptions
from support.controlplane import ControlPlane

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
    pods,
    session_scheduler,
    settled,
    wait,
)

# kdra scheduler under the default scheduler name: one such test at a time (hack/e2e.sh lanes).
pytestmark = [pytest.mark.e2e, pytest.mark.e2e_lane(name="kdra-scheduler")]

H100 = "H100-SXM-80GB"
# A slow client (and one binding worker) stretches a gang's binding over ~1-2 s, so a kill lands inside it.
SLOW = ("--kube-api-qps", "25", "--kube-api-burst", "10", "--bind-workers", "1")


def gang_state(kube: KubeClient, namespace: str, group: str) -> tuple[int, int]:
    """(members whose claims are allocated, members bound) of one gang."""
    members = {n for n, p in pods(kube, namespace).items() if n.startswith(f"{group}-")}
    claims = [c for c in allocated_claims(kube, namespace) if any(c.startswith(f"{m}-") for m in members)]
    return len(claims), len(bound(kube, namespace, f"{group}-"))


def test_sigkill_in_the_middle_of_gang_binding_never_leaves_a_partial_gang(
    control_plane: ControlPlane, kube: KubeClient, kdra_crds: list[str], namespace: str, tmp_path: Path
) -> None:
    rng = random.Random(7)
    n = 8
    with gpu_fleet(kube, [{"name": "a", "count": 4, "accelerator": {"model": H100, "count": 8}}]) as fleet:
        kube.create(gpu_template("two", namespace, 2))
        proc = session_scheduler(control_plane, tmp_path / "kdra-0.log", *SLOW)
        mid = []
        try:
            for i in range(10):
                g = f"g{i}"
                kube.create(pod_group(g, namespace, n))
                create_all(
                    kube, [gpu_pod(f"{g}-{k}", namespace, "two", fleet.prefix, group=g) for k in range(n)]
                )
                wait(
                    lambda g=g: sum(gang_state(kube, namespace, g)) > 0,
                    60,
                    f"{g}'s binding to start",
                    0.05,
                    proc.log,
                )
                time.sleep(rng.uniform(0.0, 0.8))
                proc.kill()  # SIGKILL: no clean-up, a binding cycle cut wherever it was
                claims, binds = gang_state(kube, namespace, g)
                if binds < n:
                    mid.append((g, claims, binds))
                proc = session_scheduler(control_plane, tmp_path / f"kdra-{i + 1}.log", *SLOW)
                wait(
                    lambda g=g: len(bound(kube, namespace, f"{g}-")) == n,
                    60,
                    f"{g} bound whole",
                    log=proc.log,
                )
                problems = settled(kube, namespace, timeout=30)
                assert not problems, [str(p) for p in problems]
                # Make room for the next gang: the group goes first, so the checker ignores its pods.
                kube.delete("PodGroup", g, namespace)
                for k in range(n):
                    kube.delete("Pod", f"{g}-{k}", namespace, missing_ok=True)
        finally:
            proc.stop()
            cleanup(kube, namespace)
        # Most kills land half-way: some members' claims written or some bound, not all.
        print(f"\nkills half-way through a binding: {len(mid)} of 10: {mid}")
        assert len(mid) >= 6, mid


def test_member_deleted_half_way_through_binding_the_gang_is_evicted_whole(
    control_plane: ControlPlane, kube: KubeClient, kdra_crds: list[str], namespace: str, tmp_path: Path
) -> None:
    """A member vanishes while its gang binds: the rest bound cannot run as a gang, so after the stale-gang
    grace kdra evicts them (Eviction API, graceful) and nothing of the gang stays bound or allocated."""
    with gpu_fleet(kube, [{"name": "a", "count": 2, "accelerator": {"model": H100, "count": 8}}]) as fleet:
        kube.create(gpu_template("two", namespace, 2))
        kube.create(pod_group("g", namespace, 4))
        create_all(kube, [gpu_pod(f"g-{k}", namespace, "two", fleet.prefix, group="g") for k in range(4)])
        proc = session_scheduler(control_plane, tmp_path / "kdra.log", *SLOW, "--stale-gang-grace", "3")
        try:
            wait(lambda: len(bound(kube, namespace, "g-")) >= 1, 60, "the first member bound", 0.05, proc.log)
            kube.delete("Pod", "g-3", namespace)
            wait(
                lambda: (
                    condition(kube.get("PodGroup", "g", namespace), "PodGroupScheduled").get("reason")
                    == "GangBelowMinimum"
                ),
                60,
                "the stale gang to be evicted",
                log=proc.log,
            )
            wait(lambda: not bound(kube, namespace, "g-"), 60, "no member left bound", log=proc.log)
            wait(lambda: not allocated_claims(kube, namespace), 60, "the claims released")
            problems = settled(kube, namespace)
            assert not problems, [str(p) for p in problems]
            msg = condition(kube.get("PodGroup", "g", namespace), "PodGroupScheduled")["message"]
            assert "stale gang" in msg and "minCount 4" in msg, msg
            assert any(e["reason"] == "Preempted" for e in events_for(kube, namespace, "g-0", "Pod"))
        finally:
            proc.stop()
            cleanup(kube, namespace)


def test_claim_write_refused_in_the_first_phase_rolls_the_gang_back(
    control_plane: ControlPlane, kube: KubeClient, kdra_crds: list[str], namespace: str
) -> None:
    """The third member's claim status write fails (a fence refuses it, as a lost leader lease would): what
    the first two members' claims got is rolled back, nobody is bound, and the retry binds the gang whole."""
    from kdra.kube.session import start_session_scheduler

    with gpu_fleet(kube, [{"name": "a", "count": 1, "accelerator": {"model": H100, "count": 8}}]) as fleet:
        kube.create(gpu_template("two", namespace, 2))
        kube.create(pod_group("g", namespace, 4))
        create_all(kube, [gpu_pod(f"g-{k}", namespace, "two", fleet.prefix, group="g") for k in range(4)])
        wait(
            lambda: all(
                (p.get("status") or {}).get("resourceClaimStatuses") for p in pods(kube, namespace).values()
            ),
            30,
            "the template claims",
        )
        client = control_plane.client()
        seen: list[str] = []

        def fence(method: str, path: str) -> None:
            if method == "PUT" and path.endswith("/status") and "/resourceclaims/" in path:
                seen.append(path)
                if len(seen) == 3:
                    raise FencedError(f"{method} {path}: refused by the test")

        client.write_fence = fence
        store, _gq, sched = start_session_scheduler(client, options=GangQueueOptions(), bind_workers=2)
        try:

            def step_until(pred: object, timeout: float) -> bool:
                deadline = time.monotonic() + timeout
                while time.monotonic() < deadline:
                    sched.step(wait=0.2)
                    if pred():  # type: ignore[operator]
                        return True
                return False

            # The failed attempt: rolled back, nothing bound, no claim left allocated.
            assert step_until(lambda: sched.bind_failures >= 4 and not sched.inflight, 30), (
                sched.bind_failures
            )
            assert bound(kube, namespace) == {}
            assert allocated_claims(kube, namespace) == []
            finalizers = [c["metadata"].get("finalizers") for c in kube.list("ResourceClaim", namespace)]
            assert not any(finalizers), finalizers
            # The retry (after backoff) binds all four.
            assert step_until(lambda: len(bound(kube, namespace)) == 4, 60), sched.bind_failures
            problems = settled(kube, namespace)
            assert not problems, [str(p) for p in problems]
        finally:
            with contextlib.suppress(StoreError):
                sched.close()
            store.stop()
            cleanup(kube, namespace)
