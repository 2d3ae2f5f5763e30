"""The binder seam (kdra.scheduler.seams.Binder) as the scheduler uses it: what the binder is told, a
binder that refuses while it does not lead, and a bind that fails after PreBind (the pod is retried, its
claims kept for it, nothing assumed)."""

from __future__ import annotations

from typing import Any

from builders import device_class, gpu_slice, node, pod, template

from kdra.cluster import MemoryStore
from kdra.scheduler.framework import Code, Status
from kdra.scheduler.podinfo import PodInfo
from kdra.scheduler.scheduler import Scheduler
from kdra.scheduler.seams import BindFailed, StoreBinder


class RecordingBinder(StoreBinder):
    def __init__(self, store: MemoryStore) -> None:
        from kdra.cluster.clock import format_time

        super().__init__(store, format_time)
        self.fail_binds = 0
        self.refuse = ""
        self.bound: list[tuple[str, str]] = []
        self.pending: list[tuple[str, str]] = []

    def refusing(self) -> str:
        return self.refuse

    def bind(
        self, sched: Any, state: Any, pi: PodInfo, node: str, now: float, pre_bind: Any, group: Any
    ) -> Status:
        if self.fail_binds:
            for bp in pre_bind:  # PreBind writes the claims; then the bind fails
                bp.pre_bind(state, pi, node)
            self.fail_binds -= 1
            raise BindFailed(f"binding {pi.key}: connection reset")
        st = super().bind(sched, state, pi, node, now, pre_bind, group)
        self.bound.append((pi.name, node))
        return st

    def record_unschedulable(
        self, pi: PodInfo, now: float, status: Status, message: str, explanation: Any
    ) -> None:
        self.pending.append((pi.name, message))
        super().record_unschedulable(pi, now, status, message, explanation)


def world() -> tuple[MemoryStore, Scheduler, RecordingBinder]:
    s = MemoryStore()
    s.create(device_class())
    s.create(node("n1"))
    s.create(gpu_slice("n1", 1))
    s.create(template("one"))
    binder = RecordingBinder(s)
    return s, Scheduler(s, binder=binder), binder


def test_the_binder_binds_what_the_cycle_placed_and_records_why_others_wait() -> None:
    s, sch, binder = world()
    s.create(pod("a", template_name="one"))
    s.create(pod("b", template_name="one"))
    got = {r.pod: r.node for r in sch.run(0)}
    assert got == {"default/a": "n1", "default/b": None}
    assert binder.bound == [("a", "n1")]
    assert [name for name, _ in binder.pending] == ["b"]
    assert binder.pending[0][1].startswith("0/1 nodes are available")
    assert s.get("Pod", "a", "default")["spec"]["nodeName"] == "n1"


def test_a_binder_that_refuses_leaves_every_pod_pending_and_undecided() -> None:
    s, sch, binder = world()
    binder.refuse = "not leading"
    s.create(pod("a", template_name="one"))
    (res,) = sch.run(0)
    assert res.node is None and res.status.code == Code.ERROR and res.message == "not leading"
    assert binder.bound == [] and binder.pending == []  # nothing decided, nothing written
    assert not sch.cache.assigned
    binder.refuse = ""
    assert [r.node for r in sch.run(600)] == ["n1"]


def test_a_bind_that_fails_after_prebind_retries_the_pod_on_the_claims_it_holds() -> None:
    s, sch, binder = world()
    binder.fail_binds = 1
    s.create(pod("a", template_name="one"))
    (res,) = sch.run(0)
    assert res.node is None and res.status.code == Code.ERROR
    assert res.message == "binding default/a: connection reset"
    assert not sch.cache.assigned  # the pod is no longer assumed on the node
    claim = next(c for c in s.list("ResourceClaim"))
    assert claim["status"]["allocation"] and claim["status"]["reservedFor"][0]["name"] == "a"  # kept for it
    assert binder.pending == []  # a failed bind is retried, not reported as unschedulable
    assert [r.node for r in sch.run(600)] == ["n1"]
    assert binder.bound == [("a", "n1")]
