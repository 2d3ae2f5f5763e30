"""One stream's documents migrated by worker processes and merged in stream order, byte for byte what one
process writes and reports.

A document's migration depends on the rest of the stream only through the ResourceClaimTemplate names taken
before it (a new template gets the first free name: `free_name`). Each worker starts from the names taken
when the stream began (pass 1 and earlier inputs) and never sees what other workers' documents take. The
parent merges results in stream order and keeps a worker's result only if none of the names that document
took was taken meanwhile by an earlier one; otherwise it migrates that document again itself. That is exact:
every name the worker skipped is also taken in the serial run (the worker's set only misses names), so where
the name it chose is free in the serial run too, the serial run chooses the same one.

Memory: at most two batches per worker are in flight, each about BATCH characters (or one larger document),
so each process holds what one process does: the largest document, not the input.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from kdra.migrate.documents import Chunk
from kdra.migrate.engine import StreamMigration
from kdra.migrate.report import Options, Report

if TYPE_CHECKING:
    from multiprocessing.pool import AsyncResult

BATCH = 2**17  # characters of documents sent to a worker at a time
MIN_INPUT = 2**20  # characters: smaller inputs migrate in this process (starting workers costs more)
MAX_JOBS = 8

# A document's result as a worker sends it: (migrated text or None when unchanged, changed, names taken,
# changes, notes, warnings, invalid, blocked, DeviceClasses needed).
Record = tuple[
    str | None, bool, list[str], list[str], list[str], list[str], list[str], list[str], dict[str, Any]
]

_worker: StreamMigration | None = None  # each worker's own migration of the stream


def default_jobs() -> int:
    """The CPUs this process may run on (its affinity, as `nproc` counts), at most MAX_JOBS."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, MAX_JOBS))


def can_fork() -> bool:
    """Workers are forked (they inherit the loaded modules and options); without fork, one process."""
    import multiprocessing  # here: most runs never start workers, and the import costs start-up time

    return "fork" in multiprocessing.get_all_start_methods()


def run(
    migration: StreamMigration, chunks: Iterable[Chunk], write: Callable[[str], None], jobs: int
) -> Report:
    """What `migration.run(chunks, write)` does, with `jobs` worker processes."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    args = (migration.source, migration.options, set(migration.taken.names))
    pool = context.Pool(jobs, _start, args)
    try:
        pending: deque[tuple[list[Chunk], AsyncResult[list[Record]]]] = deque()
        for batch in _batches(chunks):
            pending.append((batch, pool.apply_async(_migrate, (batch,))))
            if len(pending) >= 2 * jobs:
                _merge(migration, *pending.popleft(), write)
        while pending:
            _merge(migration, *pending.popleft(), write)
        pool.close()
    except BaseException:
        pool.terminate()
        raise
    finally:
        pool.join()
    migration.report.flush()
    return migration.report


def _batches(chunks: Iterable[Chunk]) -> Iterator[list[Chunk]]:
    batch: list[Chunk] = []
    size = 0
    for chunk in chunks:
        batch.append(chunk)
        size += len(chunk.body)
        if size >= BATCH:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _start(source: str, options: Options, taken: set[str]) -> None:
    global _worker
    _worker = StreamMigration(source, options, taken)


def _migrate(batch: list[Chunk]) -> list[Record]:
    """In a worker: each document migrated, with what it reported."""
    migration = _worker
    assert migration is not None
    out: list[Record] = []
    for chunk in batch:
        migration.report = report = Report()
        migration.changed = False
        text = migration.document(chunk)
        out.append(
            (
                None if text == chunk.text else text,
                migration.changed,
                migration.picked,
                list(report.changes),
                list(report.notes),
                list(report.warnings),
                list(report.invalid),
                list(report.blocked),
                report.classes,
            )
        )
    return out


def _merge(
    migration: StreamMigration,
    batch: list[Chunk],
    result: AsyncResult[list[Record]],
    write: Callable[[str], None],
) -> None:
    """In the parent, in stream order: a worker's results, or the document again where a name it took is no
    longer free."""
    taken = migration.taken
    report = migration.report
    for chunk, (text, changed, picked, changes, notes, warnings, invalid, blocked, classes) in zip(
        batch, result.get(), strict=True
    ):
        if any(name in taken for name in picked):
            write(migration.document(chunk))
            continue
        taken.update(picked)
        migration.changed |= changed
        report.changes += changes
        report.notes += notes
        report.warnings += warnings
        report.invalid += invalid
        report.blocked += blocked
        for name, device_class in classes.items():
            report.classes.setdefault(name, device_class)
        write(chunk.text if text is None else text)
