"""The binder's event loop: binding cycles as coroutines on one thread, and the Events posted after them.

kube-scheduler binds every pod in a goroutine of its own; a thread per binding cycle costs Python far more,
so the cycles (kdra.kube.bindjob) run as coroutines on one asyncio loop (KubeClient.arequest: a keep-alive
connection per request in flight, from the loop's pool), at most `limit` at once. What the loop thread
does between awaits is JSON and the client's bookkeeping; the waits on the API server overlap.

Events are kube-scheduler's event broadcaster in small (k8s.io/client-go/tools/events): queued, at most
MAX_QUEUED_EVENTS (client-go's maxQueuedEvents; more are dropped and counted, as it drops them), and posted
by coroutines of their own, so a Scheduled Event never delays a binding. client-go posts each Event in a
goroutine of its own; here half as many are in flight as binding cycles, enough to keep up with them (a
cycle makes three writes, its pod one Event).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

from kdra.api.types import Obj
from kdra.cluster.store import StoreError
from kdra.kube.client import KubeClient

log = logging.getLogger("kdra.kube.scheduler")

MAX_QUEUED_EVENTS = 1000
EVENT_FLUSH_SECONDS = 10.0  # how long close() waits for queued Events to be posted

T = TypeVar("T")


class BindLoop:
    """An asyncio loop on a daemon thread, for coroutines submitted from other threads."""

    def __init__(self, client: KubeClient, limit: int, name: str = "kdra-bind") -> None:
        self.client = client
        self.loop = asyncio.new_event_loop()
        self.slots = asyncio.Semaphore(max(1, limit))  # binding cycles in flight at once
        self.running: set[concurrent.futures.Future[Any]] = set()
        self.background: set[concurrent.futures.Future[Any]] = set()
        self._lock = threading.Lock()
        self.events = EventPoster(client, self.loop, max(4, limit // 2))
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def submit(
        self, coro: Coroutine[object, None, T], *, background: bool = False
    ) -> concurrent.futures.Future[T]:
        """Run `coro` on the loop (RuntimeError once the loop is closed). close() waits for it, or cancels
        it when it runs in the `background`."""
        if self.loop.is_closed() or not self.loop.is_running():
            coro.close()
            raise RuntimeError("the binding loop is closed")
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        running = self.background if background else self.running
        with self._lock:
            running.add(fut)
        fut.add_done_callback(self._finished)
        return fut

    def _finished(self, fut: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self.running.discard(fut)
            self.background.discard(fut)

    def close(self, wait: bool) -> None:
        """With `wait`, let what runs finish and post the queued Events (up to EVENT_FLUSH_SECONDS); then
        close the loop's connections and the loop. Without, leave the thread to finish on its own."""
        if self.loop.is_closed():
            return
        if not wait:
            return
        with self._lock:
            running = list(self.running)
        concurrent.futures.wait(running)
        with self._lock:
            background = list(self.background)
        for fut in background:
            fut.cancel()
        with contextlib.suppress(RuntimeError, concurrent.futures.TimeoutError):
            self.submit(self._shutdown()).result(EVENT_FLUSH_SECONDS + 5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self.loop.close()

    async def _shutdown(self) -> None:
        await self.events.flush(EVENT_FLUSH_SECONDS)
        await self.client.aclose()


class EventPoster:
    """Events posted off the caller's path: `post` from any thread queues one; up to `posters` coroutines
    post them in order. An Event is best effort: one the API server refuses is counted and dropped."""

    def __init__(self, client: KubeClient, loop: asyncio.AbstractEventLoop, posters: int) -> None:
        self.client = client
        self.loop = loop
        self.max_posters = posters
        self._queue: collections.deque[Obj] = collections.deque()
        self._posters = 0
        self.posted = 0
        self.failed = 0
        self.dropped = 0  # the queue was full

    def post(self, event: Obj) -> None:
        """Queue an Event (any thread)."""
        try:
            self.loop.call_soon_threadsafe(self._enqueue, event)
        except RuntimeError:  # the loop is closed: this process is done binding
            self.dropped += 1

    def _enqueue(self, event: Obj) -> None:
        if len(self._queue) >= MAX_QUEUED_EVENTS:
            self.dropped += 1
            log.debug("event queue full, dropping %s", event.get("reason"))
            return
        self._queue.append(event)
        if self._posters < self.max_posters:
            self._posters += 1
            self.loop.create_task(self._drain())

    async def _drain(self) -> None:
        try:
            while self._queue:
                event = self._queue.popleft()
                try:
                    await self.client.acreate(event)
                    self.posted += 1
                except StoreError as e:
                    self.failed += 1
                    log.debug("posting %s Event: %s", event.get("reason"), e)
        finally:
            self._posters -= 1

    async def flush(self, timeout: float) -> None:
        """Wait until every queued Event was posted (or `timeout` passed)."""
        deadline = time.monotonic() + timeout
        while (self._queue or self._posters) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
