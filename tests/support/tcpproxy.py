"""A loopback TCP proxy in front of the API server that does to connections what the API server and load
balancers do: close them when idle (`idle_close` seconds without a byte either way, as kube-apiserver closes
idle keep-alive connections after ~90 s), and, on request, hang up on the next request it is sent without
forwarding it (`drop_next_request()`: the request never reaches the server, the client sees the connection
end after sending). TLS passes through untouched, so the client verifies the real server certificate.
Bounded: it serves until `close()`, and every thread it starts ends with its connection."""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time


class IdleClosingProxy:
    def __init__(self, target: tuple[str, int], *, idle_close: float = 1.0) -> None:
        self.target = target
        self.idle_close = idle_close
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.idle_closed = 0  # connections closed for idleness
        self.dropped = 0  # requests swallowed by drop_next_request()
        self.connections = 0
        self.open = 0  # connections piped now
        self._drop = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True, name="kdra-test-proxy")
        self._thread.start()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def drop_next_request(self) -> None:
        with self._lock:
            self._drop += 1

    def _accept(self) -> None:
        self.listener.settimeout(0.2)
        while not self._stop.is_set():
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self.connections += 1
                self.open += 1
            threading.Thread(target=self._pipe, args=(client,), daemon=True).start()

    def _take_drop(self) -> bool:
        with self._lock:
            if self._drop > 0:
                self._drop -= 1
                return True
            return False

    def _pipe(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            client.close()
            with self._lock:
                self.open -= 1
            return
        sel = selectors.DefaultSelector()
        sel.register(client, selectors.EVENT_READ, upstream)
        sel.register(upstream, selectors.EVENT_READ, client)
        last = time.monotonic()
        idle_since_request = False  # the client has been idle since its last request completed
        try:
            while not self._stop.is_set():
                events = sel.select(timeout=0.05)
                now = time.monotonic()
                if not events:
                    if now - last > self.idle_close:
                        self.idle_closed += 1
                        return
                    if now - last > 0.05:
                        idle_since_request = True
                    continue
                for key, _ in events:
                    src = key.fileobj
                    assert isinstance(src, socket.socket)
                    data = src.recv(65536)
                    if not data:
                        return
                    if src is client and idle_since_request and self._take_drop():
                        self.dropped += 1  # a new request after a pause: swallowed, connection closed
                        return
                    key.data.sendall(data)
                    if src is client:
                        idle_since_request = False
                last = now
        except OSError:
            return
        finally:
            sel.close()
            for s in (client, upstream):
                with contextlib.suppress(OSError):
                    s.close()
            with self._lock:
                self.open -= 1

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self.listener.close()
        self._thread.join(2)
