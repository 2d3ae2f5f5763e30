"""kdra.kube.conflicts on the in-memory store: which devices count as over-allocated, the reports, and the
repair of kdra's side only (the API calls are the store's writes; Events and DeviceTaintRules go to a
recording client)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from builders import DRIVER, claim, device_class, gpu_slice, node, pod

from kdra.cluster import MemoryStore, clone
from kdra.cluster.store import NotFoundError, StoreError
from kdra.kube import conflicts as conflicts_mod
from kdra.kube.conflicts import ConflictDetector
from kdra.scheduler.scheduler import Scheduler, SchedulerConfig

Obj = dict[str, Any]


class RecordingClient:
    def __init__(self) -> None:
        self.created: list[Obj] = []
        self.deleted: list[str] = []
        self.evicted: list[str] = []
        self.refuse_evictions = 0  # the next N evictions are refused (429, a disruption budget)

    def evict(self, namespace: str, pod: str, *, uid: str | None = None, dry_run: bool = False) -> None:
        if self.refuse_evictions:
            self.refuse_evictions -= 1
            err = StoreError("Cannot evict pod as it would violate the pod's disruption budget.")
            err.code = 429
            raise err
        self.evicted.append(f"{namespace}/{pod}")

    def list(self, kind: str, **params: str) -> list[Obj]:
        return []

    def create(self, obj: Obj) -> Obj:
        self.created.append(obj)
        return obj

    def delete(self, kind: str, name: str, missing_ok: bool = False) -> None:
        self.deleted.append(name)


class KStore:
    """MemoryStore, plus the client the detector posts Events and DeviceTaintRules with."""

    def __init__(self, store: MemoryStore, client: RecordingClient) -> None:
        self._store = store
        self.client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def alloc(device: str, node_name: str, share: str | None = None, capacity: str | None = None) -> Obj:
    r: Obj = {"request": "gpu", "driver": DRIVER, "pool": node_name, "device": device}
    if share:
        r["shareID"] = share
        r["consumedCapacity"] = {"memory": capacity}
    return {
        "devices": {"results": [r]},
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
            ]
        },
    }


def allocated(s: MemoryStore, name: str, allocation: Obj, pod_name: str) -> None:
    p = s.get("Pod", pod_name, "default")
    c = clone(s.get("ResourceClaim", name, "default"))
    c["status"] = {
        "allocation": allocation,
        "reservedFor": [{"resource": "pods", "name": pod_name, "uid": p["metadata"]["uid"]}],
    }
    s.update(c, subresource="status")


def bound(s: MemoryStore, pod_name: str, node_name: str) -> None:
    p = clone(s.get("Pod", pod_name, "default"))
    p["spec"]["nodeName"] = node_name
    s.update(p)


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> tuple[MemoryStore, ConflictDetector, RecordingClient]:
    monkeypatch.setattr(conflicts_mod, "QUARANTINE_SETTLE", 0.0)
    s = MemoryStore()
    s.create(device_class())
    s.create(node("n1"))
    s.create(gpu_slice("n1", 3))
    base = Scheduler(s, SchedulerConfig(scheduler_name="kdra"))
    client = RecordingClient()
    sched = SimpleNamespace(
        kstore=KStore(s, client),
        store=s,
        dra=base.dra,
        config=base.config,
        identity="test",
        inflight={},
        profile=base.profile,
        cache=base.cache,
        queue=base.queue,
        clock=lambda: 0.0,
    )
    return s, ConflictDetector(sched), client  # type: ignore[arg-type]


def two_pods(s: MemoryStore) -> None:
    mine = pod("mine", claim_name="c-mine")
    mine["spec"]["schedulerName"] = "kdra"
    theirs = pod("theirs", claim_name="c-theirs")  # default-scheduler
    for p, c in ((mine, "c-mine"), (theirs, "c-theirs")):
        s.create(claim(c))
        s.create(p)
        bound(s, p["metadata"]["name"], "n1")


def test_kdras_side_of_an_exclusive_device_is_repaired_and_the_device_quarantined(world: Any) -> None:
    s, det, client = world
    two_pods(s)
    allocated(s, "c-theirs", alloc("gpu-0", "n1"), "theirs")
    allocated(s, "c-mine", alloc("gpu-0", "n1"), "mine")
    det.step()  # found, reported, quarantined
    det.step()  # repaired once the quarantine is in place (settled from the API's answer)
    det.step()  # the conflict is gone
    assert det.detected_total == 1 and det.repaired_total == 1 and not det.conflicts
    events = [o for o in client.created if o["kind"] == "Event"]
    conflict = [e for e in events if e["reason"] == "ConflictingAllocation"]
    assert {e["involvedObject"]["name"] for e in conflict} == {"mine", "theirs"}
    assert (
        "device gpu.example.com/n1/gpu-0 is allocated to more claims than it can serve"
        in conflict[0]["message"]
    )
    assert (
        "scheduler default-scheduler" in conflict[0]["message"] and "scheduler kdra" in conflict[0]["message"]
    )
    # Theirs untouched; mine re-allocated on its (bound) pod's node, reserved for it again.
    assert s.get("ResourceClaim", "c-theirs", "default")["status"]["allocation"] == alloc("gpu-0", "n1")
    mine = s.get("ResourceClaim", "c-mine", "default")["status"]
    assert [r["device"] for r in mine["allocation"]["devices"]["results"]] == ["gpu-1"]
    assert [r["name"] for r in mine["reservedFor"]] == ["mine"]
    repaired = [e for e in events if e["reason"] == "ConflictRepaired"]
    assert "gpu.example.com/n1/gpu-0 -> gpu.example.com/n1/gpu-1" in repaired[0]["message"]
    (rule,) = [o for o in client.created if o["kind"] == "DeviceTaintRule"]
    assert rule["spec"]["deviceSelector"] == {"driver": DRIVER, "pool": "n1", "device": "gpu-0"}
    assert client.deleted == []  # their claim still holds gpu-0
    theirs = clone(s.get("ResourceClaim", "c-theirs", "default"))
    theirs["status"] = {}
    s.update(theirs, subresource="status")
    det.step()
    assert client.deleted == [rule["metadata"]["name"]] and not det.quarantine


def test_a_running_pod_is_not_repaired(world: Any) -> None:
    s, det, client = world
    two_pods(s)
    p = clone(s.get("Pod", "mine", "default"))
    p.setdefault("status", {})["phase"] = "Running"
    s.update(p, subresource="status")
    allocated(s, "c-theirs", alloc("gpu-0", "n1"), "theirs")
    allocated(s, "c-mine", alloc("gpu-0", "n1"), "mine")
    det.step()
    det.step()
    assert det.repaired_total == 0 and len(det.conflicts) == 1
    assert any(
        o.get("reason") == "ConflictNotRepaired" and "already running" in o["message"] for o in client.created
    )


def test_shares_within_capacity_admin_access_and_other_schedulers_pairs(world: Any) -> None:
    s, det, _client = world
    sl = clone(s.get("ResourceSlice", f"n1-{DRIVER}", ""))
    sl["spec"]["devices"][2]["allowMultipleAllocations"] = True
    s.update(sl)
    names = ["a", "b", "c"]
    for n in names:
        s.create(claim(f"c-{n}"))
        s.create(pod(n, claim_name=f"c-{n}"))  # all default-scheduler: reported, never repaired
    allocated(s, "c-a", alloc("gpu-2", "n1", "s1", "40Gi"), "a")
    allocated(s, "c-b", alloc("gpu-2", "n1", "s2", "40Gi"), "b")
    det.step()
    assert not det.conflicts  # 80Gi of 80Gi
    allocated(s, "c-c", alloc("gpu-2", "n1", "s3", "1Gi"), "c")
    det.step()
    assert list(det.conflicts) == [(DRIVER, "n1", "gpu-2")] and det.repaired_total == 0
    admin = alloc("gpu-0", "n1")
    admin["devices"]["results"][0]["adminAccess"] = True
    for n in ("x", "y"):
        s.create(claim(f"c-{n}"))
        s.create(pod(n, claim_name=f"c-{n}"))
    allocated(s, "c-x", admin, "x")
    allocated(s, "c-y", alloc("gpu-0", "n1"), "y")
    det.step()
    assert (DRIVER, "n1", "gpu-0") not in det.conflicts


def test_no_device_taint_rules_served_repairs_all_the_same(world: Any) -> None:
    s, det, client = world

    def refuse(obj: Obj) -> Obj:
        if obj["kind"] == "DeviceTaintRule":
            raise NotFoundError("the server could not find the requested resource")
        client.created.append(obj)
        return obj

    client.create = refuse  # type: ignore[method-assign]
    two_pods(s)
    allocated(s, "c-theirs", alloc("gpu-0", "n1"), "theirs")
    allocated(s, "c-mine", alloc("gpu-0", "n1"), "mine")
    det.step()
    assert det.repaired_total == 1 and not det.quarantine_api


def test_a_bound_pod_whose_node_has_no_device_left_is_evicted(world: Any) -> None:
    """kdra's claim is deallocated and its node's other devices are taken: a bound pod without its devices
    would never start, so it is evicted (its owner recreates it); a refusal (its budget) is tried again."""
    s, det, client = world
    two_pods(s)
    for i, dev in ((1, "gpu-1"), (2, "gpu-2")):
        s.create(claim(f"c-other{i}"))
        s.create(pod(f"other{i}", claim_name=f"c-other{i}"))
        bound(s, f"other{i}", "n1")
        allocated(s, f"c-other{i}", alloc(dev, "n1"), f"other{i}")
    allocated(s, "c-theirs", alloc("gpu-0", "n1"), "theirs")
    allocated(s, "c-mine", alloc("gpu-0", "n1"), "mine")
    client.refuse_evictions = 1
    det.step()  # found, reported, quarantined
    det.step()  # deallocated; no device left on n1; the eviction is refused
    assert det.repaired_total == 1 and client.evicted == [] and "c-mine" not in [
        c["metadata"]["name"] for c in s.list("ResourceClaim") if (c.get("status") or {}).get("allocation")
    ]
    said = [o["message"] for o in client.created if o.get("reason") == "ConflictNotRepaired"]
    assert "found no free device on n1" in said[0] and "kdra evicts it" in said[0], said
    assert "could not evict the pod (Cannot evict pod as it would violate" in said[1], said
    det._stranded[next(iter(det._stranded))].next_try = 0.0  # the backoff has passed
    det.step()
    assert client.evicted == ["default/mine"] and det.evicted_total == 1 and not det._stranded


def test_the_quarantine_settles_from_the_api_answer_not_from_the_request(
    world: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loaded API server that takes longer than the settle time to create the rule: kdra must not release
    the device at once (the rule has only just come into existence), but a settle time after the answer."""
    s, det, client = world
    monkeypatch.setattr(conflicts_mod, "QUARANTINE_SETTLE", 0.5)
    clock = [100.0]
    monkeypatch.setattr(conflicts_mod.time, "monotonic", lambda: clock[0])
    answer = client.create

    def slow_create(obj: Obj) -> Obj:
        clock[0] += 0.8  # the answer comes 0.8 s after the request
        return answer(obj)

    monkeypatch.setattr(client, "create", slow_create)
    two_pods(s)
    allocated(s, "c-theirs", alloc("gpu-0", "n1"), "theirs")
    allocated(s, "c-mine", alloc("gpu-0", "n1"), "mine")
    det.step()  # found, reported, rule asked for (answered at 100.8 + the Events' answers)
    det.step()
    assert det.repaired_total == 0, "released before the rule had existed for the settle time"
    clock[0] += 0.5
    det.step()
    assert det.repaired_total == 1


def test_where_kdra_informs_rules_the_quarantine_settles_from_when_its_watch_delivered_the_rule(
    world: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lagging watch: the rule was created, but kdra's own informer has not delivered it yet, so
    kube-scheduler's may not have either; kdra keeps the device until its watch shows the rule and the
    settle time has passed since."""
    s, det, client = world
    monkeypatch.setattr(conflicts_mod, "QUARANTINE_SETTLE", 0.5)
    clock = [100.0]
    monkeypatch.setattr(conflicts_mod.time, "monotonic", lambda: clock[0])
    det.sched.kstore.served = lambda kind: {"DeviceTaintRule": "resource.k8s.io/v1"}
    two_pods(s)
    allocated(s, "c-theirs", alloc("gpu-0", "n1"), "theirs")
    allocated(s, "c-mine", alloc("gpu-0", "n1"), "mine")
    det.step()
    clock[0] += 5.0
    det.step()
    assert det.repaired_total == 0, "released before kdra's watch had delivered the rule"
    (rule,) = [o for o in client.created if o["kind"] == "DeviceTaintRule"]
    s.create(dict(rule, apiVersion="resource.k8s.io/v1"))  # the watch delivers it now
    det.step()
    assert det.repaired_total == 0
    clock[0] += 0.5
    det.step()
    assert det.repaired_total == 1
