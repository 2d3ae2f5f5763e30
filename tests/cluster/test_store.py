"""The in-memory store: resourceVersion, conflicts, generateName, finalizers, status, watch order."""

from __future__ import annotations

import pytest

from kdra.cluster import (
    AlreadyExistsError,
    ConflictError,
    MemoryStore,
    NotFoundError,
    VirtualClock,
    WatchEvent,
    clone,
    parse_selector,
)
from kdra.errors import InputError


def pod(name: str, labels: dict[str, str] | None = None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"containers": [{"name": "c"}]},
    }


def test_create_stamps_metadata_and_bumps_resource_version() -> None:
    clock = VirtualClock(90)
    s = MemoryStore(clock=clock)
    a = s.create(pod("a"))
    b = s.create(pod("b"))
    assert a["metadata"]["namespace"] == "default"
    assert int(b["metadata"]["resourceVersion"]) > int(a["metadata"]["resourceVersion"])
    assert a["metadata"]["uid"] != b["metadata"]["uid"]
    assert a["metadata"]["creationTimestamp"] == "2026-01-01T00:01:30Z"
    with pytest.raises(AlreadyExistsError):
        s.create(pod("a"))


def test_generate_name_appends_five_characters_deterministically() -> None:
    names = []
    for _ in range(2):
        s = MemoryStore(seed=7)
        obj = {"kind": "ResourceClaim", "metadata": {"generateName": "p-gpu-"}, "spec": {}}
        names.append(s.create(obj)["metadata"]["name"])
    assert names[0] == names[1]
    assert names[0].startswith("p-gpu-") and len(names[0]) == len("p-gpu-") + 5


def test_update_with_stale_resource_version_conflicts() -> None:
    s = MemoryStore()
    a = s.create(pod("a"))
    first = clone(a)
    first["metadata"]["labels"] = {"x": "1"}
    s.update(first)
    stale = clone(a)
    stale["metadata"]["labels"] = {"x": "2"}
    with pytest.raises(ConflictError, match="the object has been modified"):
        s.update(stale)
    unconditional = clone(a)
    del unconditional["metadata"]["resourceVersion"]
    unconditional["metadata"]["labels"] = {"x": "3"}
    assert s.update(unconditional)["metadata"]["labels"] == {"x": "3"}


def test_status_is_a_subresource() -> None:
    s = MemoryStore()
    a = s.create(pod("a"))
    upd = clone(a)
    upd["status"] = {"phase": "Running"}
    upd["spec"]["nodeName"] = "ignored-by-status-update"
    got = s.update(upd, subresource="status")
    assert got["status"] == {"phase": "Running"}
    assert "nodeName" not in got["spec"]
    upd = clone(got)
    upd["status"] = {"phase": "Failed"}
    assert s.update(upd)["status"] == {"phase": "Running"}  # a plain update keeps status


def test_delete_with_finalizer_waits_for_the_finalizer() -> None:
    s = MemoryStore()
    c = {"kind": "ResourceClaim", "metadata": {"name": "c", "finalizers": ["f"]}, "spec": {}}
    s.create(c)
    kept = s.delete("ResourceClaim", "c", "default")
    assert kept is not None and kept["metadata"]["deletionTimestamp"]
    upd = clone(kept)
    upd["metadata"]["finalizers"] = []
    s.update(upd)
    with pytest.raises(NotFoundError):
        s.get("ResourceClaim", "c", "default")


def test_list_with_label_selectors() -> None:
    s = MemoryStore()
    s.create(pod("a", {"app": "x", "tier": "web"}))
    s.create(pod("b", {"app": "y"}))
    s.create(pod("c", {"app": "x"}))
    assert [p["metadata"]["name"] for p in s.list("Pod", label_selector="app=x")] == ["a", "c"]
    assert [p["metadata"]["name"] for p in s.list("Pod", label_selector="app in (x,y),!tier")] == ["b", "c"]
    assert [p["metadata"]["name"] for p in s.list("Pod", label_selector="app!=x")] == ["b"]
    with pytest.raises(InputError, match="cannot parse"):
        parse_selector("a=(b")


def test_watch_sees_writes_made_by_handlers_in_order() -> None:
    s = MemoryStore()
    seen: list[tuple[str, str, str]] = []

    def reactor(ev: WatchEvent) -> None:
        if ev.type == "ADDED" and ev.object["metadata"]["name"] == "a":
            upd = clone(ev.object)
            upd["metadata"]["labels"] = {"touched": "yes"}
            s.update(upd)

    s.watch(reactor, kinds=["Pod"])
    s.watch(
        lambda ev: seen.append(
            (ev.type, ev.object["metadata"]["name"], ev.object["metadata"]["resourceVersion"])
        )
    )
    s.create(pod("a"))
    assert [e[0] for e in seen] == ["ADDED", "MODIFIED"]
    assert int(seen[0][2]) < int(seen[1][2])
