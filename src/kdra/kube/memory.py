"""Give memory back to the operating system once a burst of load has gone.

CPython frees objects at once, but the C allocator keeps what it got: glibc keeps freed heap memory
for reuse, so the resident set of `kdra scheduler` stayed at its peak after the pods of a burst were
deleted. `HeapTrimmer` watches how many objects the scheduler's informers cache; when that number has
fallen well below its peak since the last trim and the scheduling loop is idle, it runs a full garbage
collection and glibc's `malloc_trim(0)`, which returns free pages from every heap arena to the system.
Before that, the scheduler drops what it derived for the pods that went (Filter answers per pod shape and
node): those entries were allocated among the pods' objects and would keep CPython's small-object arenas
from being freed. What CPython still holds in partly used arenas stays (fragmentation, not a leak).
Elsewhere than glibc `trim()` only collects.

`settle()` tunes the cyclic collector for a process that keeps what it watches: after the initial
lists, everything alive (modules, informer caches, the allocator index) is frozen, so that no collection
scans it again, and the young generation is collected every `YOUNG_THRESHOLD` new container objects
instead of Python's 700. Each bound pod leaves dozens of long-lived containers (the API's shapes) and the
scheduler makes almost no cyclic garbage, so with the defaults the collections were nearly all cost:
~14% of the process's CPU in a burst of 8,000 pods, most of it oldest-generation collections rescanning
every cached pod, claim and node. Objects that die are still freed at once by reference counting;
only a reference cycle among frozen objects would wait, and `trim()` unfreezes, collects and freezes
again.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("kdra.kube.memory")

_malloc_trim: Any = None
_looked = False


def _trim_function() -> Any:
    global _malloc_trim, _looked
    if not _looked:
        _looked = True
        name = ctypes.util.find_library("c")
        try:
            libc = ctypes.CDLL(name) if name else None
            _malloc_trim = getattr(libc, "malloc_trim", None)
        except OSError:
            _malloc_trim = None
    return _malloc_trim


YOUNG_THRESHOLD = 50_000


def settle() -> None:
    """Freeze what is alive now and collect the young generation less often (see the module's text)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *gc.get_threshold()[1:])


def trim() -> bool:
    """Collect garbage, frozen objects included, and hand free heap pages back to the system; False where
    there is no malloc_trim."""
    frozen = gc.get_freeze_count() > 0
    if frozen:
        gc.unfreeze()  # a cycle among frozen objects that died since is collected too
    gc.collect()
    if frozen:
        gc.freeze()
    fn = _trim_function()
    if fn is None:
        return False
    fn(0)
    return True


class HeapTrimmer:
    """`note(objects, idle)` from the loop: trims when `objects` dropped to at most (1 - `drop`) of its peak
    since the last trim, by at least `minimum` objects, the loop is idle, and `interval` seconds passed
    since the last trim."""

    def __init__(self, *, drop: float = 0.25, minimum: int = 500, interval: float = 30.0) -> None:
        self.drop = drop
        self.minimum = minimum
        self.interval = interval
        self.peak = 0
        self.last = 0.0
        self.trims = 0

    def note(self, objects: int, idle: bool, drop_caches: Callable[[], None] | None = None) -> bool:
        """`drop_caches` runs first: what was derived for the pods that went (their answers per node)
        would otherwise keep the memory pages it shares with them."""
        self.peak = max(self.peak, objects)
        if not idle or self.peak - objects < max(self.minimum, self.drop * self.peak):
            return False
        now = time.monotonic()
        if self.trims and now - self.last < self.interval:
            return False
        t0 = time.perf_counter()
        if drop_caches is not None:
            drop_caches()
        trim()
        self.trims += 1
        self.last = now
        log.info(
            "gave freed memory back after %d of %d cached objects went (%.0f ms)",
            self.peak - objects,
            self.peak,
            (time.perf_counter() - t0) * 1000,
        )
        self.peak = objects
        return True
