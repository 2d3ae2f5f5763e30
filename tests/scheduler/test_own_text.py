"""Explanations are the pod's own: answers shared by pods of one shape (the scheduler's per-signature cache)
name, on each pod, only that pod's claims, never those of the pod that computed them (another namespace)."""

from __future__ import annotations

from typing import Any

from builders import claim, device_class, gpu_slice, node, pod, template

from kdra.cluster import MemoryStore
from kdra.cluster.store import clone
from kdra.scheduler.owntext import OwnNames, personal
from kdra.scheduler.scheduler import Scheduler

Obj = dict[str, Any]


def _texts(store: MemoryStore, ns: str, name: str) -> str:
    p = store.get("Pod", name, ns)
    return "\n".join(c.get("message", "") for c in (p.get("status") or {}).get("conditions") or [])


def _two_claim_pod(store: MemoryStore, ns: str, name: str, priority: int = 0) -> None:
    store.create(claim(f"{name}-x", count=3, namespace=ns))
    store.create(claim(f"{name}-y", count=1, namespace=ns))
    p = pod(name, namespace=ns, priority=priority)
    p["spec"]["resourceClaims"] = [
        {"name": "x", "resourceClaimName": f"{name}-x"},
        {"name": "y", "resourceClaimName": f"{name}-y"},
    ]
    p["spec"]["containers"][0]["resources"]["claims"] = [{"name": "x"}, {"name": "y"}]
    store.create(p)


def test_an_allocation_error_names_the_pods_own_claim_in_every_namespace() -> None:
    s = MemoryStore()
    s.create(device_class())
    s.create(node("n1"))
    s.create(gpu_slice("n1", 2))
    sch = Scheduler(s)
    for ns, name in (("tenant-a", "huge-1"), ("tenant-b", "huge-2")):
        s.create(claim(f"{name}-dev", count=100, namespace=ns))
        s.create(pod(name, claim_name=f"{name}-dev", namespace=ns))
    results = {r.pod: r for r in sch.run(0)}
    for ns, name, other in (("tenant-a", "huge-1", "tenant-b"), ("tenant-b", "huge-2", "tenant-a")):
        text = _texts(s, ns, name)
        assert f"claim {ns}/{name}-dev, request gpu: adding 100 devices exceeds the claim limit" in text
        assert other not in text and other not in results[f"{ns}/{name}"].message


def test_a_shared_summary_counts_like_reasons_together_and_names_the_readers_claims() -> None:
    """tenant-a/a is explained on three nodes; n2 then changes and the higher-priority tenant-b/b, of the
    same shape, is evaluated on n2 alone: its message and summary cover all three nodes in one group and
    name b's claims only, and a, explained again from answers b computed, names only its own."""
    s = MemoryStore()
    s.create(device_class())
    for n in ("n1", "n2", "n3"):
        s.create(node(n))
        s.create(gpu_slice(n, 2))
    sch = Scheduler(s)
    _two_claim_pod(s, "tenant-a", "a")
    sch.run(0)
    _two_claim_pod(s, "tenant-b", "b", priority=10)
    n2 = clone(s.get("Node", "n2"))
    n2["metadata"].setdefault("labels", {})["touched"] = "yes"
    s.update(n2)
    before = sch.node_evaluations
    results = {r.pod: r for r in sch.run(1)}
    assert sch.node_evaluations - before == 1  # still shared: only the changed node was evaluated again
    for me, other in (("tenant-b/b", "tenant-a"), ("tenant-a/a", "tenant-b")):
        r = results[me]
        assert r.message == "0/3 nodes are available: 3 cannot allocate all claims."
        summary = r.explanation.text(None, "")
        assert f"3 have fewer than 3 devices matching claim {me}-x request gpu" in summary
        assert f"claim {me}-y, request gpu" in summary
        assert other not in summary and other not in str(r.explanation)
        ns, name = me.split("/")
        assert other not in _texts(s, ns, name) and f"claim {me}-x" in _texts(s, ns, name)


def test_a_gangs_explanation_names_its_own_members_claims() -> None:
    from kdra.scheduler.gangqueues import GangQueueOptions, GangQueues
    from kdra.scheduler.scheduler import SchedulerConfig

    s = MemoryStore()
    s.create(device_class())
    s.create(node("n1"))
    s.create(gpu_slice("n1", 8))
    gq = GangQueues(s, GangQueueOptions())
    sch = Scheduler(s, gq.config(SchedulerConfig()))
    for ns in ("tenant-a", "tenant-b"):
        s.create(
            {
                "apiVersion": "kdra.dev/v1alpha1",
                "kind": "PodGroup",
                "metadata": {"name": "train", "namespace": ns},
                "spec": {"minMember": 2},
            }
        )
        s.create(template("nine", count=9, namespace=ns))
        for i in range(2):
            p = pod(f"train-{i}", namespace=ns, template_name="nine")
            p["metadata"]["annotations"] = {"kdra.dev/pod-group": "train"}
            s.create(p)
    sch.run(0)
    for ns, other in (("tenant-a", "tenant-b"), ("tenant-b", "tenant-a")):
        pg = s.get("PodGroup", "train", ns)["status"]["conditions"][0]["message"]
        member = _texts(s, ns, "train-0")
        assert "fits nowhere" in member and f"claim {ns}/train-" in member, member
        assert other not in member and other not in pg


def test_names_are_replaced_as_whole_references() -> None:
    own = OwnNames(["ns/a", "ns/a-b", "ns/"])
    text = "claim ns/a-b, request g; claim ns/a: x; claim ns/, request container-0; nodes/ns/a; ns/ab"
    neutral = own.neutral(text)
    assert "ns/ab" in neutral and "nodes/ns/a" in neutral  # not a reference to the pod's objects
    assert personal(neutral, ["q/x", "q/y", "q/"]) == (
        "claim q/y, request g; claim q/x: x; claim q/, request container-0; nodes/ns/a; ns/ab"
    )
