"""The scheduling queue: priority then FIFO, PreEnqueue gating, the unschedulable pool, backoff."""

from __future__ import annotations

from builders import pod

from kdra.scheduler.framework import (
    EV_NODE_ADD,
    EV_POD_DELETE,
    SUCCESS,
    PreEnqueuePlugin,
    Status,
    unschedulable,
)
from kdra.scheduler.plugins.basic import PrioritySort
from kdra.scheduler.podinfo import PodInfo
from kdra.scheduler.scheduling_queue import SchedulingQueue


def info(name: str, priority: int = 0) -> PodInfo:
    p = pod(name, priority=priority)
    p["metadata"]["uid"] = name
    return PodInfo(p)


def test_priority_then_fifo() -> None:
    q = SchedulingQueue(PrioritySort().sort_key)
    for t, (name, prio) in enumerate([("a", 0), ("b", 10), ("c", 0), ("d", 10)]):
        q.add(info(name, prio), float(t))
    assert [q.pop(10).name for _ in range(4)] == ["b", "d", "a", "c"]  # type: ignore[union-attr]
    assert q.pop(10) is None


def test_unschedulable_pods_wait_for_an_event_their_plugin_cares_about() -> None:
    q = SchedulingQueue(
        PrioritySort().sort_key, plugin_events={"NodeResourcesFit": frozenset({EV_POD_DELETE})}
    )
    q.add(info("a"), 0)
    pi = q.pop(0)
    assert pi is not None
    q.add_unschedulable(pi, 0, {"NodeResourcesFit"})
    assert q.pop(100) is None
    assert q.on_event(EV_NODE_ADD, 100) == 0
    assert q.on_event(EV_POD_DELETE, 100) == 1
    assert q.pop(100) is pi


def test_moved_pod_waits_out_its_backoff_and_leftovers_are_flushed() -> None:
    q = SchedulingQueue(PrioritySort().sort_key, plugin_events={"X": frozenset({EV_POD_DELETE})})
    q.add(info("a"), 0)
    pi = q.pop(0)
    assert pi is not None
    pi.last_attempt = 0
    q.add_unschedulable(pi, 0, {"X"})
    q.on_event(EV_POD_DELETE, 0.5)  # backoff after the first attempt is 1 s
    assert q.pop(0.5) is None
    assert q.next_wakeup() == 1.0
    assert q.pop(1.0) is pi
    pi.last_attempt = 1.0
    q.add_unschedulable(pi, 1.0, {"X"})
    assert q.next_leftover_flush() == 301.0
    q.flush_unschedulable_leftover(301.0)
    assert q.pop(301.0) is pi


def test_pre_enqueue_gates_until_rechecked() -> None:
    class Gate(PreEnqueuePlugin):
        name = "Gate"
        open = False

        def pre_enqueue(self, pi: PodInfo) -> Status:
            return SUCCESS if self.open else unschedulable("closed")

    gate = Gate()
    q = SchedulingQueue(PrioritySort().sort_key, pre_enqueue=[gate])
    q.add(info("a"), 0)
    assert q.pop(0) is None and "a" in q.gated
    gate.open = True
    q.recheck_gated(["a"], 1)
    assert q.pop(1) is not None


def test_with_pod_is_podinfo_of_a_status_only_update():
    # A gated pod's status-only update takes its PodInfo through with_pod, which must give exactly what
    # parsing the new version would, the queue's own fields fresh included.
    p = pod(
        "a",
        cpu="2",
        template_name="gpu",
        priority=7,
        node_selector={"zone": "a"},
        tolerations=[{"key": "k", "operator": "Exists"}],
        limits={"example.com/foo": "1"},
    )
    p["metadata"]["uid"] = "uid-a"
    old = PodInfo(p)
    old.attempts, old.continuing, old.seq = 3, True, 9
    old.unschedulable_plugins.add("DynamicResources")
    updated = dict(p, status={"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "a-gpu-x"}]})
    fresh, reused = PodInfo(updated), old.with_pod(updated)
    for slot in PodInfo.__slots__:
        assert getattr(reused, slot) == getattr(fresh, slot), slot
    assert reused.pod is updated
