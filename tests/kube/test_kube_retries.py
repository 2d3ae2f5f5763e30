"""The client's connection handling against a keep-alive HTTP/1.1 server that behaves as the API server
does: it closes idle connections (here after 0.3 s, the API server after ~90 s), and — injected — drops a
connection after reading a request without answering. A stale kept-alive connection is noticed before a
request is sent on it; what may be replayed is replayed; a create that may have been applied is not."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from kdra.kube.client import KubeClient, KubeConfig, UnavailableError, replayable


class KeepAliveServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, idle: float) -> None:
        super().__init__(("127.0.0.1", 0), KeepAliveHandler)
        self.idle = idle
        self.drop_next = 0  # drop this many requests after reading them, without an answer
        self.handled: list[tuple[str, str]] = []
        self.connections = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class KeepAliveHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: KeepAliveServer  # type: ignore[assignment]

    def setup(self) -> None:
        self.timeout = self.server.idle  # idle keep-alive connections are closed after this
        self.server.connections += 1
        super().setup()

    def log_message(self, *args: Any) -> None:
        pass

    def _handle(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n)) if n else None
        if self.server.drop_next > 0:
            self.server.drop_next -= 1
            self.close_connection = True  # read, then hang up without a status line
            return
        self.server.handled.append((self.command, self.path))
        out = json.dumps(body or {"kind": "Node", "metadata": {"name": "a", "resourceVersion": "1"}}).encode()
        self.send_response(201 if self.command == "POST" else 200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle


@pytest.fixture
def srv() -> Iterator[KeepAliveServer]:
    s = KeepAliveServer(idle=0.3)
    threading.Thread(target=s.serve_forever, daemon=True).start()
    yield s
    s.shutdown()
    s.server_close()


def event(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Event", "metadata": {"name": name, "namespace": "default"}}


def test_a_connection_closed_while_idle_is_replaced_before_the_next_write(srv: KeepAliveServer) -> None:
    c = KubeClient(KubeConfig(server=srv.url), qps=0, retries=0)  # no retries: nothing may fail
    c.get("Node", "a")
    c.get("Node", "a")
    assert srv.connections == 1  # kept alive
    time.sleep(0.6)  # the server closes the idle connection
    c.create(event("e1"))  # a create, which must never be blindly replayed, still goes through
    assert c.stale_connections == 1 and c.retried == 0
    assert srv.connections == 2
    assert [m for m, _ in srv.handled] == ["GET", "GET", "POST"]


def test_idle_timeout_replaces_connections_before_the_server_would(srv: KeepAliveServer) -> None:
    srv.idle = 5.0
    c = KubeClient(KubeConfig(server=srv.url), qps=0, retries=0, idle_timeout=0.1)
    c.get("Node", "a")
    time.sleep(0.2)
    c.get("Node", "a")
    assert c.stale_connections == 1 and srv.connections == 2


def test_lost_answers_are_retried_only_when_a_replay_is_harmless(srv: KeepAliveServer) -> None:
    srv.idle = 5.0
    c = KubeClient(KubeConfig(server=srv.url), qps=0, retries=2)
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "a", "resourceVersion": "7"}}
    for call in (
        lambda: c.get("Node", "a"),
        lambda: c.update(node),  # conditional PUT: a replay after success gets 409
        lambda: c.patch("Pod", "p", {"status": {"conditions": []}}, "default", "status", "strategic"),
        lambda: c.patch("Node", "a", {"metadata": {"labels": {"x": "y"}}}),
    ):
        srv.drop_next = 1
        call()
    assert c.retried == 4
    srv.drop_next = 1
    with pytest.raises(UnavailableError) as e:
        c.create(event("e2"))
    assert e.value.maybe_applied and "it may have been applied" in str(e.value)
    srv.drop_next = 1
    unconditional = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "a"}}
    with pytest.raises(UnavailableError):
        c.update(unconditional)
    assert ("POST", "/api/v1/namespaces/default/events") not in srv.handled


def test_what_counts_as_replayable() -> None:
    assert replayable("GET", None, None)
    assert replayable("PUT", {"metadata": {"resourceVersion": "5"}}, "application/json")
    assert not replayable("PUT", {"metadata": {}}, "application/json")
    assert replayable("PATCH", {}, "application/merge-patch+json")
    assert replayable("PATCH", {}, "application/strategic-merge-patch+json")
    assert not replayable("PATCH", [], "application/json-patch+json")
    assert not replayable("POST", {}, "application/json")
    assert not replayable("DELETE", {}, "application/json")
