"""kdra.kube.memory: memory goes back to the system after a burst, not in the middle of one."""

from __future__ import annotations

import gc
import weakref

from kdra.kube import memory
from kdra.kube.memory import HeapTrimmer


def test_trims_once_the_cache_shrank_well_below_its_peak_and_the_loop_is_idle(monkeypatch: object) -> None:
    calls: list[int] = []
    monkeypatch.setattr(memory, "trim", lambda: calls.append(1) or True)  # type: ignore[attr-defined]
    t = HeapTrimmer(drop=0.25, minimum=100, interval=30.0)
    assert not t.note(1000, idle=True)  # growing
    assert not t.note(900, idle=True)  # 10% below the peak: not yet
    assert not t.note(500, idle=False)  # a burst still being scheduled
    dropped: list[int] = []
    assert t.note(500, idle=True, drop_caches=lambda: dropped.append(len(calls)))
    assert calls == [1] and dropped == [0] and t.peak == 500  # caches dropped first, then the trim
    assert not t.note(2000, idle=True) and not t.note(100, idle=True)  # at most every 30 s
    t.last -= 31
    assert t.note(100, idle=True) and len(calls) == 2
    assert not t.note(60, idle=True)  # fewer than `minimum` objects went


class _Linked:
    peer: _Linked | None = None


def test_settle_freezes_what_is_alive_and_a_trim_still_frees_a_frozen_cycle_that_died() -> None:
    """After the initial lists the scheduler's long-lived objects are frozen (no collection scans them);
    a reference cycle among them that dies later must not stay for good: the trim collects it."""
    threshold = gc.get_threshold()
    a, b = _Linked(), _Linked()
    a.peer, b.peer = b, a
    alive = weakref.ref(a)
    try:
        memory.settle()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold()[0] == memory.YOUNG_THRESHOLD
        del a, b
        gc.collect()
        assert alive() is not None  # frozen: a full collection does not scan it
        memory.trim()
        assert alive() is None
        assert gc.get_freeze_count() > 0  # what is still alive is frozen again
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
