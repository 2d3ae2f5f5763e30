"""A binding cycle cut between its claim's finalizer write and its status write (kdra SIGKILLed there, found
by a seeded kill explorer on a real control plane): the restarted scheduler takes the finalizer off."""

from __future__ import annotations

from kdra.api.types import Obj
from kdra.cluster.store import MemoryStore
from kdra.kube.bindjob import drop_stray_finalizers
from kdra.scheduler.dra import DELETE_PROTECTION_FINALIZER


def pod(name: str, claim: str, *, scheduler: str = "kdra", node: str | None = None) -> Obj:
    spec: Obj = {
        "schedulerName": scheduler,
        "containers": [{"name": "c", "resources": {"claims": [{"name": "gpu"}]}}],
        "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
    }
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ns"}, "spec": spec}


def claim(name: str, *, allocated: bool = False) -> Obj:
    status: Obj = {}
    if allocated:
        status = {
            "allocation": {
                "devices": {"results": [{"driver": "d", "pool": "n", "device": "g0", "request": "gpu"}]}
            },
            "reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}],
        }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "finalizers": [DELETE_PROTECTION_FINALIZER, "other/keep"],
        },
        "spec": {"devices": {"requests": []}},
        "status": status,
    }


def finalizers(store: MemoryStore, name: str) -> list[str]:
    return list(store.get("ResourceClaim", name, "ns")["metadata"].get("finalizers") or [])


def test_killed_between_finalizer_and_allocation_the_restart_drops_the_finalizer() -> None:
    store = MemoryStore()
    for c in (claim("cut"), claim("held", allocated=True), claim("theirs"), claim("bound"), claim("shared")):
        store.create(c)
    store.create(pod("pending", "cut"))  # its binding wrote the finalizer, then kdra was killed
    store.create(pod("running", "held"))  # allocated: the finalizer protects it
    store.create(pod("other", "theirs", scheduler="default-scheduler"))  # not this scheduler's
    store.create(pod("placed", "bound", node="n"))  # bound: not this repair's business
    # Shared with kube-scheduler's pod: its own finalizer-then-status writes may be half-way.
    store.create(pod("mine", "shared"))
    store.create(pod("upstream", "shared", scheduler="default-scheduler"))
    assert drop_stray_finalizers(store, "kdra") == ["ns/cut"]
    assert finalizers(store, "cut") == ["other/keep"]
    for kept in ("held", "theirs", "bound", "shared"):
        assert DELETE_PROTECTION_FINALIZER in finalizers(store, kept)
    assert drop_stray_finalizers(store, "kdra") == []  # idempotent
