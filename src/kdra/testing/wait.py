"""Polling for tests and harnesses: wait until the cluster shows what a test expects."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from kdra.cluster.store import StoreError

T = TypeVar("T")


def wait_for(fn: Callable[[], T | None], timeout: float, what: str, interval: float = 0.2) -> T:
    """Poll `fn` until it returns something truthy; raise TimeoutError naming `what` otherwise. API errors
    and connection errors count as "not yet" (components are still starting)."""
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            value = fn()
            if value:
                return value
        except (StoreError, OSError) as e:
            last_exc = e
        if time.monotonic() >= deadline:
            extra = f" (last error: {last_exc})" if last_exc else ""
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}{extra}")
        time.sleep(interval)
