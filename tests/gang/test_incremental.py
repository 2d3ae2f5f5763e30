"""What the session keeps up to date as pods come and go equals what walking every pod or node gives: the
running jobs (victim candidates), the per-queue totals fair share starts from, and each topology domain's
room for a gang."""

from __future__ import annotations

import math
import random

from builders import pod, template
from helpers import fleet, scheduler

from kdra.cluster import MemoryStore
from kdra.scheduler.accounting import PodUsage, QueueAccounting
from kdra.scheduler.preemption import RunningJob
from kdra.scheduler.queuetree import QueueSpec, QueueTree, Vector, add
from kdra.scheduler.topology import DomainRoom, domains


def _walk_running(acc: QueueAccounting) -> list[RunningJob]:
    jobs: dict[str, RunningJob] = {}
    for uid in sorted(acc.usage):
        u = acc.usage[uid]
        j = jobs.get(u.job)
        if j is None:
            j = jobs[u.job] = RunningJob(u.job, u.queue, u.priority, u.start, u.preemptible)
        j.pods.append(uid)
        j.names.append(u.name)
        j.start = max(j.start, u.start)
        add(j.usage, u.usage)
    return list(jobs.values())


def _walk_requested(acc: QueueAccounting) -> dict[str, Vector]:
    """Per queue in the order of its first pod, each resource's usage correctly rounded (math.fsum)."""
    values: dict[str, dict[str, list[float]]] = {}
    for u in acc.usage.values():
        per = values.setdefault(u.queue, {})
        for r, v in u.usage.items():
            per.setdefault(r, []).append(v)
    return {q: {r: math.fsum(vs) for r, vs in per.items()} for q, per in values.items()}


def _walk_allocated(acc: QueueAccounting) -> dict[str, Vector]:
    out: dict[str, Vector] = {}
    for u in acc.usage.values():
        for q in acc.tree.ancestors(u.queue):
            add(out.setdefault(q, {}), u.usage)
    return out


def test_accounting_kept_as_pods_come_and_go_equals_a_walk_over_every_pod() -> None:
    rng = random.Random(7)
    tree = QueueTree([QueueSpec("org"), QueueSpec("a", parent="org"), QueueSpec("b", parent="org")])
    acc = QueueAccounting(tree)
    live: list[str] = []
    for step in range(600):
        if live and rng.random() < 0.4:
            acc.unaccount(live.pop(rng.randrange(len(live))))
        else:
            uid = f"uid-{rng.randrange(10_000):05d}"
            job = f"gang-{rng.randrange(20)}" if rng.random() < 0.6 else f"pod:{uid}"
            usage = {"cpu": rng.choice((0.1, 0.25, 1.5)), "deviceclass/gpu": float(rng.randrange(1, 9))}
            acc.account(
                uid, PodUsage(rng.choice(("a", "b")), usage, float(step), job, rng.randrange(3), True, uid)
            )
            if uid not in live:
                live.append(uid)
        if step % 150 == 149:  # a Queue changed: every pod's queue is resolved again
            acc.retree(
                QueueTree([QueueSpec("a"), QueueSpec("b")] if step < 300 else list(tree.specs.values()))
            )
        if step % 7 == 0:
            assert acc.running_jobs() == _walk_running(acc)
            got = acc.requested()
            want = _walk_requested(acc)
            assert list(got) == list(want) and got == want  # the same queues in the same order, exact sums
    assert acc.running_jobs() == _walk_running(acc)
    assert acc.allocated.keys() >= _walk_allocated(acc).keys()


def test_domain_room_follows_the_nodes_that_changed() -> None:
    s = MemoryStore()
    fleet(s, 12, gpus=4, nodes_per_rack=3)
    s.create(template("t2", count=2))
    sched, _gq = scheduler(s)
    cache = sched.cache
    doms = dict(sorted(domains(cache.nodes, "kdra.dev/rack").items()))

    def free_pairs(ni: object) -> int:  # how many 2-GPU members the node still takes
        return sched.dra.free_devices(ni.name, "gpu") // 2  # type: ignore[attr-defined]

    rooms = DomainRoom(cache)
    assert rooms.room("k", doms, free_pairs) == {f"rack{r}": 6 for r in range(4)}
    for i in range(7):
        p = pod(f"p{i}", cpu="1", template_name="t2", node_selector={"kubernetes.io/hostname": f"n{i:03d}"})
        s.create(p)
    sched.run(0)
    kept = dict(rooms.room("k", doms, free_pairs))
    fresh = {value: sum(free_pairs(ni) for ni in nodes) for value, nodes in doms.items()}
    assert kept == fresh == {"rack0": 3, "rack1": 3, "rack2": 5, "rack3": 6}
