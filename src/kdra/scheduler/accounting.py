"""What bound pods hold, per queue: the figures queue limits, fair share and the victim search read.

Kept as pods are bound and end, so that a session reads them without walking every running pod: the
running jobs (victim candidates) are rebuilt only for jobs whose pods changed, and the per-queue sums fair
share starts from are kept exact (integers in steps of 2**-1074, the finest step of a float), so a pod
that ends is taken out without re-adding the others (every session re-added every running pod of its
queue: 20,000 pods each churned pod at 5,000 nodes) and each sum is the pods' usage correctly rounded
(math.fsum's answer), whatever order pods came and went in.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kdra.scheduler.preemption import RunningJob
from kdra.scheduler.queuetree import QueueTree, Vector, add

_EXACT_BITS = 1074  # every finite float is a whole multiple of 2**-1074
_EXACT_ONE = 1 << _EXACT_BITS


def _exact(x: float) -> int:
    """`x` in steps of 2**-1074, exactly (a float's denominator is a power of two)."""
    n, d = x.as_integer_ratio()
    return n << (_EXACT_BITS + 1 - d.bit_length())


def _add_exact(sums: dict[str, list[Any]], usage: Vector, sign: int) -> None:
    """Per resource: [how many pods name it, their exact sum]; a resource no pod names any more goes."""
    for r, v in usage.items():
        e = sums.get(r)
        if e is None:
            e = sums[r] = [0, 0]
        e[0] += sign
        e[1] += sign * _exact(v)
        if not e[0]:
            del sums[r]


@dataclass
class PodUsage:
    queue: str
    usage: Vector
    start: float
    job: str
    priority: int
    preemptible: bool
    name: str


class QueueAccounting:
    """Bound pods' usage (`usage`, by pod uid), what each queue and its ancestors hold (`allocated`), the
    running jobs, and per-queue totals for fair share."""

    def __init__(self, tree: QueueTree) -> None:
        self.tree = tree
        self.usage: dict[str, PodUsage] = {}
        self.allocated: dict[str, Vector] = {}
        self._seq = 0
        self._order: dict[str, int] = {}  # uid -> when it was accounted (the order of `usage`)
        self._by_queue: dict[str, dict[str, PodUsage]] = {}  # `usage` per queue, in the same order
        self._queue_sums: dict[str, dict[str, list[Any]]] = {}  # queue -> resource -> [pods, exact sum]
        self._job_uids: dict[str, list[str]] = {}  # running job -> its pods' uids, sorted
        self._jobs: list[tuple[str, str]] = []  # (first uid, job), sorted: the jobs' order
        self._running: dict[str, RunningJob] = {}  # job -> built from its pods (while unchanged)

    def __contains__(self, uid: str) -> bool:
        return uid in self.usage

    def get(self, uid: str) -> PodUsage | None:
        return self.usage.get(uid)

    def account(self, uid: str, u: PodUsage) -> None:
        self.unaccount(uid)
        self.usage[uid] = u
        self._seq += 1
        self._order[uid] = self._seq
        self._by_queue.setdefault(u.queue, {})[uid] = u
        _add_exact(self._queue_sums.setdefault(u.queue, {}), u.usage, 1)
        for q in self.tree.ancestors(u.queue):
            add(self.allocated.setdefault(q, {}), u.usage)
        uids = self._job_uids.get(u.job)
        if uids is None:
            self._job_uids[u.job] = [uid]
            bisect.insort(self._jobs, (uid, u.job))
        else:
            first = uids[0]
            bisect.insort(uids, uid)
            if uids[0] != first:
                self._jobs.remove((first, u.job))
                bisect.insort(self._jobs, (uid, u.job))
        self._running.pop(u.job, None)

    def unaccount(self, uid: str) -> PodUsage | None:
        u = self.usage.pop(uid, None)
        if u is None:
            return None
        del self._order[uid]
        members = self._by_queue[u.queue]
        del members[uid]
        if not members:
            del self._by_queue[u.queue]
        _add_exact(self._queue_sums[u.queue], u.usage, -1)
        if not members:
            del self._queue_sums[u.queue]
        for q in self.tree.ancestors(u.queue):
            add(self.allocated.setdefault(q, {}), u.usage, -1.0)
        uids = self._job_uids[u.job]
        first = uids[0]
        del uids[bisect.bisect_left(uids, uid)]
        self._jobs.remove((first, u.job))
        if uids:
            bisect.insort(self._jobs, (uids[0], u.job))
        else:
            del self._job_uids[u.job]
        self._running.pop(u.job, None)
        return u

    def retree(self, tree: QueueTree) -> None:
        """The queue tree changed: every pod's queue is resolved again and the totals added up afresh."""
        self.tree = tree
        self.allocated = {}
        self._by_queue = {}
        self._queue_sums = {}
        self._running = {}
        for uid, u in self.usage.items():
            u.queue = tree.leaf_or_default(u.queue)
            self._by_queue.setdefault(u.queue, {})[uid] = u
            _add_exact(self._queue_sums.setdefault(u.queue, {}), u.usage, 1)
            for q in tree.ancestors(u.queue):
                add(self.allocated.setdefault(q, {}), u.usage)

    def requested(self) -> dict[str, Vector]:
        """Per leaf queue, what its bound pods hold (fresh dicts the caller may add to), queues in the
        order of their first accounted pod."""
        sums = self._queue_sums
        return {
            q: {r: e[1] / _EXACT_ONE for r, e in sums[q].items()}
            for q in sorted(self._by_queue, key=lambda q: self._order[next(iter(self._by_queue[q]))])
        }

    def running_jobs(self) -> list[RunningJob]:
        """The running jobs (victim candidates), in the order of their first pod's uid; a job's pods in uid
        order. Callers read them and never change them."""
        out = []
        for _first, key in self._jobs:
            job = self._running.get(key)
            if job is None:
                job = self._running[key] = self._build(key)
            out.append(job)
        return out

    def _build(self, key: str) -> RunningJob:
        uids = self._job_uids[key]
        first = self.usage[uids[0]]
        job = RunningJob(first.job, first.queue, first.priority, first.start, first.preemptible)
        for uid in uids:
            u = self.usage[uid]
            job.pods.append(uid)
            job.names.append(u.name)
            job.start = max(job.start, u.start)
            add(job.usage, u.usage)
        return job

    def __iter__(self) -> Iterator[str]:
        return iter(self.usage)
