"""The Statement (kdra.scheduler.statement): tentative changes to the scheduler's view, committed or given
back — pods held at Permit, victims taken out for a trial — with checkpoint and rollback."""

from __future__ import annotations

from builders import pod, template
from helpers import fleet, gang_pods, pod_group, scheduler

from kdra.cluster import MemoryStore
from kdra.scheduler.framework import Code, Status
from kdra.scheduler.preemption import RunningJob
from kdra.scheduler.statement import Statement


def _running(store: MemoryStore, name: str) -> RunningJob:
    p = store.get("Pod", name, "default")
    job = RunningJob(f"pod:default/{name}", "default", 0, 0.0, True)
    job.pods, job.names = [p["metadata"]["uid"]], [f"default/{name}"]
    return job


def test_a_trial_eviction_frees_the_devices_until_it_is_given_back() -> None:
    s = MemoryStore()
    fleet(s, 1, gpus=2)
    s.create(template("two", count=2))
    sched, _gq = scheduler(s)
    s.create(pod("low", template_name="two"))
    sched.run(0)
    assert sched.dra.free_devices("n000", "gpu") == 0
    stmt = Statement(sched, 1.0)
    stmt.evict([_running(s, "low")])
    assert sched.dra.free_devices("n000", "gpu") == 2 and not sched.cache.assigned
    stmt.discard()
    assert sched.dra.free_devices("n000", "gpu") == 0 and list(sched.cache.assigned.values()) == ["n000"]


def test_rollback_gives_back_only_what_came_after_the_checkpoint() -> None:
    s = MemoryStore()
    fleet(s, 2, gpus=2)
    s.create(template("two", count=2))
    sched, _gq = scheduler(s)
    for name in ("a", "b"):
        s.create(pod(name, template_name="two"))
    sched.run(0)
    stmt = Statement(sched, 1.0)
    stmt.evict([_running(s, "a")])
    mark = stmt.checkpoint()
    stmt.evict([_running(s, "b")])
    assert len(sched.cache.assigned) == 0
    stmt.rollback(mark)
    b_uid = s.get("Pod", "b", "default")["metadata"]["uid"]
    assert list(sched.cache.assigned) == [b_uid]  # b is back, a still out for the trial
    stmt.discard()
    assert len(sched.cache.assigned) == 2


def test_held_members_bind_in_order_on_commit_and_are_released_on_discard() -> None:
    s = MemoryStore()
    fleet(s, 2, gpus=4)
    sched, gq = scheduler(s)
    for g in ("g", "h"):
        s.create(pod_group(g, 2))
        gang_pods(s, g, 2, gpus=2)
    members = {p.name: p for p in sched.queue.pods.values()}
    gq.permit.holding.update({"default/g", "default/h"})  # the placement holds them at Permit

    stmt = Statement(sched, 0.0)
    got = [stmt.place(members[n]).status.code for n in ("g-000", "g-001")]
    assert got == [Code.WAIT, Code.WAIT] and [p.name for p in stmt.held] == ["g-000", "g-001"]
    assert [r.pod for r in stmt.commit()] == ["default/g-000", "default/g-001"]
    assert all(s.get("Pod", n, "default")["spec"].get("nodeName") for n in ("g-000", "g-001"))

    stmt = Statement(sched, 0.0)
    for n in ("h-000", "h-001"):
        stmt.place(members[n])
    assert sched.dra.free_devices("n000", "gpu") + sched.dra.free_devices("n001", "gpu") == 0
    st = Status(Code.UNSCHEDULABLE, ("not now",), "Gang")
    assert [r.pod for r in stmt.discard(st, "not now")] == ["default/h-000", "default/h-001"]
    assert sched.dra.free_devices("n000", "gpu") + sched.dra.free_devices("n001", "gpu") == 4
    assert not sched.waiting
