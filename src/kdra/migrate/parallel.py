"""The documents of a run's inputs migrated by worker processes and merged in stream order, byte for byte what
one process writes and reports (each input's output is opened at its first document, closed after its last).

A document's migration depends on the rest of the run only through the ResourceClaimTemplate names taken
before it (a new template gets the first free name). Each worker starts from the names the inputs define (pass
1) and adds the names its own documents take. The parent merges results in stream order and keeps a worker's
result only if none of the names that document took was taken meanwhile by an earlier one; otherwise it
migrates that document again itself. That is exact: a worker only ever knows fewer names than the serial run
at that document, so where the name it chose is free in the serial run too, every name it skipped is taken
there as well and the serial run chooses the same one.

So that this rarely happens, a document goes to the worker its workload name hashes to: the same workload
again (in another namespace, another file, or repeated in a List) meets the names its earlier copies took, as
one process would. Memory: at most WINDOW characters of documents per worker are held, so each process holds
what one process does, the largest document and not the input.
"""

from __future__ import annotations

import os
import re
import sys
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kdra.errors import KdraError
from kdra.migrate.documents import Chunk
from kdra.migrate.engine import Output, StreamMigration
from kdra.migrate.report import Options, Report

if TYPE_CHECKING:
    from multiprocessing.context import ForkProcess
    from multiprocessing.queues import Queue

BATCH = 2**15  # characters of documents sent to a worker at a time
WINDOW = 2**17  # characters of documents in flight per worker (sent, or waiting to be sent)
MIN_INPUT = 2**20  # bytes of input in all: less migrates in this process (starting workers costs more)
MAX_JOBS = 8
MAX_HELD = 2**16  # entries in flight (many small inputs: each adds its start and end)
BEGIN, END = -1, -2  # the "worker" of an input's start and end in the order of merging
_POLL = 0.5  # seconds between checks that the process at the other end still runs

# A document as a worker is sent it: its input's name and a Chunk's fields (a tuple pickles five times faster
# than the dataclass).
Sent = tuple[str, str, str, str, int, int]
# A document's result as a worker sends it: (the edited text, or None when the document is left as it was;
# names taken; changes, notes, warnings, invalid, blocked; DeviceClasses needed).
Record = tuple[str | None, list[str], list[str], list[str], list[str], list[str], list[str], dict[str, Any]]

# The first `name:` key of a document (metadata comes before the spec in nearly every manifest); a guess only
# decides which worker gets the document, never what it outputs.
_NAME = re.compile(r'^[ \t]*(?:-[ \t]+)?"?name"?[ \t]*:[ \t]*"?([^\s",}]+)', re.MULTILINE)


def default_jobs() -> int:
    """The CPUs this process may run on (its affinity, as `nproc` counts), at most MAX_JOBS."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, MAX_JOBS))


def can_fork() -> bool:
    """Workers are forked (they inherit the loaded modules and options): on Linux. Elsewhere one process:
    Windows has no fork, and macOS's system libraries are not safe to use in a forked child."""
    import multiprocessing  # here: most runs never start workers, and the import costs start-up time

    return sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()


class WorkerFailed(KdraError):
    """A worker died (killed, out of memory) or hit a bug: the run stops, nothing is written."""

    exit_code = 1


class _Workers:
    """`jobs` forked processes, each with a task queue and a result queue, answering in the order asked."""

    def __init__(self, migration: StreamMigration, jobs: int) -> None:
        import multiprocessing

        context = multiprocessing.get_context("fork")
        self.tasks: list[Queue[list[Sent] | None]] = [context.Queue() for _ in range(jobs)]
        self.results: list[Queue[tuple[bool, Any]]] = [context.Queue() for _ in range(jobs)]
        names = set(migration.taken.names)
        self.processes: list[ForkProcess] = [
            context.Process(
                target=_work,
                args=(self.tasks[w], self.results[w], migration.options, names, os.getpid()),
                daemon=True,
            )
            for w in range(jobs)
        ]
        for process in self.processes:
            process.start()

    def result(self, worker: int) -> list[Record | None]:
        import queue

        while True:
            try:
                ok, value = self.results[worker].get(timeout=_POLL)
            except queue.Empty:
                if not self.processes[worker].is_alive():
                    raise WorkerFailed(
                        f"worker process {worker} exited with {self.processes[worker].exitcode}; nothing "
                        "was written (-j 1 migrates in this process only)"
                    ) from None
                continue
            if not ok:
                raise WorkerFailed(f"a worker process failed; nothing was written:\n{value}")
            records: list[Record | None] = value
            return records

    def close(self) -> None:
        for tasks in self.tasks:
            tasks.put(None)
        for process in self.processes:
            process.join()

    def kill(self) -> None:
        for tasks in self.tasks:
            tasks.cancel_join_thread()  # what is still queued for a killed worker is dropped at exit
        for process in self.processes:
            process.kill()
            process.join()


@dataclass
class Target:
    """One input as the parent merges it: its migration and documents; `begin` opens where its output goes (it
    is called when the input's first document is merged, in stream order) and returns the writer, `end`
    closes it after its last."""

    migration: StreamMigration
    chunks: Iterable[Chunk]
    begin: Callable[[], Callable[[str], object]]
    end: Callable[[], None]
    output: Output | None = None


def run_inputs(targets: Sequence[Target], jobs: int) -> None:
    """What migrating each input in turn does (`begin`, `migration.run`, `end`), with `jobs` worker processes
    for all of them. The inputs share one set of taken names and one Options, as a CLI run's do."""
    if not targets:
        return
    workers = _Workers(targets[0].migration, jobs)
    try:
        _Stream(workers, jobs).run(targets)
        workers.close()
    except BaseException:
        workers.kill()
        raise


class _Stream:
    """Routes documents to workers and merges their results in stream order."""

    def __init__(self, workers: _Workers, jobs: int) -> None:
        self.workers = workers
        self.jobs = jobs
        # documents (and the start and end of each input) not merged yet, in stream order
        self.order: deque[tuple[Chunk | None, int, Target]] = deque()
        self.buffers: list[list[Sent]] = [[] for _ in range(jobs)]  # not sent yet, per worker
        self.buffered = [0] * jobs
        self.sent = [0] * jobs  # batches sent whose results were not received
        self.received: list[deque[Record | None]] = [deque() for _ in range(jobs)]
        self.in_flight = 0  # characters of the documents in `order`

    def run(self, targets: Iterable[Target]) -> None:
        for target in targets:
            self._hold(None, BEGIN, target)
            source = target.migration.source
            for chunk in target.chunks:
                worker = _worker_for(chunk.body, self.jobs)
                self.buffers[worker].append(
                    (source, chunk.head, chunk.body, chunk.tail, chunk.line, chunk.number)
                )
                self.buffered[worker] += len(chunk.body)
                if self.buffered[worker] >= BATCH:
                    self._send(worker)
                self._hold(chunk, worker, target)
            self._hold(None, END, target)
        while self.order:
            self._merge_first()

    def _hold(self, chunk: Chunk | None, worker: int, target: Target) -> None:
        self.order.append((chunk, worker, target))
        if chunk is not None:
            self.in_flight += len(chunk.body)
        while self.in_flight > WINDOW * self.jobs or len(self.order) > MAX_HELD:
            self._merge_first()

    def _send(self, worker: int) -> None:
        self.workers.tasks[worker].put(self.buffers[worker])
        self.buffers[worker] = []
        self.buffered[worker] = 0
        self.sent[worker] += 1

    def _merge_first(self) -> None:
        chunk, worker, target = self.order.popleft()
        if chunk is None:
            if worker == BEGIN:
                target.output = Output(target.begin())
            else:
                assert target.output is not None
                target.output.flush()
                target.migration.report.flush()
                target.end()
            return
        self.in_flight -= len(chunk.body)
        received = self.received[worker]
        if not received:
            if not self.sent[worker]:
                self._send(worker)
            received.extend(self.workers.result(worker))
            self.sent[worker] -= 1
        assert target.output is not None
        self._merge(target.migration, chunk, received.popleft(), target.output.add)

    @staticmethod
    def _merge(
        migration: StreamMigration, chunk: Chunk, record: Record | None, write: Callable[[str], None]
    ) -> None:
        """A worker's result, or the document again where a name it took is no longer free."""
        if record is None:
            write(chunk.text)
            return
        text, picked, changes, notes, warnings, invalid, blocked, classes = record
        if any(name in migration.taken for name in picked):
            write(migration.document(chunk))
            return
        migration.taken.update(picked)
        migration.changed |= text is not None
        report = migration.report
        for messages, lines in (
            (report.changes, changes),
            (report.notes, notes),
            (report.warnings, warnings),
            (report.invalid, invalid),
            (report.blocked, blocked),
        ):
            if lines:
                messages += lines
        for name, device_class in classes.items():
            report.classes.setdefault(name, device_class)
        write(chunk.text if text is None else text)


def _worker_for(body: str, jobs: int) -> int:
    found = _NAME.search(body)
    key = found.group(1) if found else body[:256]
    return zlib.crc32(key.encode()) % jobs


def _work(
    tasks: Queue[list[Sent] | None],
    results: Queue[tuple[bool, Any]],
    options: Options,
    taken: set[str],
    parent: int,  # the parent's pid, read before the fork: it may be gone before this runs
) -> None:
    """A worker: migrates each batch it is sent, in order, until it is sent None, or its parent is gone."""
    import queue

    _die_with(parent)
    migration = StreamMigration("", options, taken)
    while True:
        try:
            batch = tasks.get(timeout=_POLL)
        except queue.Empty:
            if os.getppid() != parent:  # the parent was killed: nobody reads what this would write
                os._exit(1)
            continue
        if batch is None:
            return
        try:
            results.put((True, _migrate(migration, batch)))
        except BaseException:  # a bug: its traceback goes to the parent, which stops
            import traceback

            results.put((False, traceback.format_exc()))
            return


def _die_with(parent: int) -> None:
    """Have the kernel kill this worker when its parent dies (Linux's PR_SET_PDEATHSIG): a parent killed while
    writing a batch leaves half a message in the pipe, and a worker reading it would wait forever. The loop in
    `_work` also notices a parent gone while it waits, where prctl cannot be called."""
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - no prctl in this libc
        return
    if os.getppid() != parent:  # the parent died before the call
        os._exit(1)


def _migrate(migration: StreamMigration, batch: list[Sent]) -> list[Record | None]:
    """Each document migrated, with what it reported; None for one left as it was with nothing to report
    (most of a cluster dump: a record for each would cost more than checking its syntax)."""
    out: list[Record | None] = []
    report = migration.report = Report()
    for source, head, body, tail, line, number in batch:
        migration.source = source  # a batch may hold documents of several inputs
        chunk = Chunk(head, body, tail, line, number)
        migration.changed = False
        text = migration.document(chunk)
        if not (migration.changed or migration.picked or _reported(report)):
            out.append(None)
            continue
        out.append(
            (
                text if migration.changed else None,  # only an edited document's text differs
                migration.picked,
                list(report.changes),
                list(report.notes),
                list(report.warnings),
                list(report.invalid),
                list(report.blocked),
                report.classes,
            )
        )
        report = migration.report = Report()
    return out


def _reported(report: Report) -> bool:
    lists = (report.changes, report.notes, report.warnings, report.invalid, report.blocked)
    return bool(report.classes) or any(lists)
