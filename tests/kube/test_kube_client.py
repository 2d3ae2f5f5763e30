"""kdra.kube's client and store against a scripted fake API server (plain HTTP on 127.0.0.1):
kubeconfig parsing, error mapping, watch resume from the last resourceVersion, relist on 410 Gone,
conflict retry with a live re-read, stale-event filtering, the token bucket, and Lease leader election."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from kdra.cluster.store import AlreadyExistsError, ConflictError, NotFoundError, WatchEvent
from kdra.kube.client import (
    ExpiredError,
    FencedError,
    KubeClient,
    KubeConfig,
    TokenBucket,
    UnavailableError,
)
from kdra.kube.kubeconfig import ExecConfig
from kdra.kube.leader import LeaderElector
from kdra.kube.store import KubeStore
from support.wait import wait_for

Route = Callable[["Handler", dict[str, list[str]], Any], None]


class Handler(BaseHTTPRequestHandler):
    server: FakeServer  # type: ignore[assignment]

    def log_message(self, *args: Any) -> None:
        pass

    def _handle(self) -> None:
        url = urlsplit(self.path)
        q = parse_qs(url.query)
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n)) if n else None
        self.server.log.append((self.command, url.path, {k: v[0] for k, v in q.items()}, body))
        for (method, path), fn in self.server.routes.items():
            if method == self.command and path == url.path:
                fn(self, q, body)
                return
        self.reply(404, {"kind": "Status", "reason": "NotFound", "message": f"{url.path} not found"})

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

    def reply(self, code: int, obj: Any) -> None:
        raw = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def stream(self, events: list[dict[str, Any]]) -> None:
        """A watch response: one JSON event per line, then the server ends the request."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Connection", "close")
        self.end_headers()
        for ev in events:
            self.wfile.write(json.dumps(ev).encode() + b"\n")
            self.wfile.flush()
        self.close_connection = True


class FakeServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.routes: dict[tuple[str, str], Route] = {}
        self.log: list[tuple[str, str, dict[str, str], Any]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def server() -> Iterator[FakeServer]:
    srv = FakeServer()
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def client_for(srv: FakeServer, **kw: Any) -> KubeClient:
    return KubeClient(KubeConfig(server=srv.url, token="t0k"), qps=0, retries=1, **kw)


def run_async(client: KubeClient, fn: Callable[[KubeClient], Any]) -> Any:
    """`await fn(client)` on an event loop of its own (the binder's transport, KubeClient.arequest)."""

    async def go() -> Any:
        try:
            return await fn(client)
        finally:
            await client.aclose()

    return asyncio.run(go())


def node(name: str, rv: int, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "resourceVersion": str(rv), "labels": labels or {}},
    }


# -- kubeconfig ---------------------------------------------------------------------------------------


def test_kubeconfig_token_and_inline_data(tmp_path: Path) -> None:
    ca = base64.b64encode(b"not a real CA").decode()
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "c", "cluster": {"server": "https://127.0.0.1:6443/", "certificate-authority-data": ca}}
        ],
        "users": [{"name": "u", "user": {"token": "abc"}}],
        "contexts": [
            {"name": "x", "context": {"cluster": "c", "user": "u", "namespace": "team"}},
            {"name": "y", "context": {"cluster": "c", "user": "u"}},
        ],
        "current-context": "x",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(cfg))
    kc = KubeConfig.load(path)
    assert kc.server == "https://127.0.0.1:6443"
    assert kc.bearer_token() == "abc"
    assert kc.namespace == "team"
    assert kc.ca_data == b"not a real CA" and kc.ca_file is None  # kept in memory, no file written
    assert KubeConfig.load(path, context="y").namespace == "default"


def test_kubeconfig_errors_name_the_file(tmp_path: Path) -> None:
    from kdra.errors import InputError

    path = tmp_path / "kc"
    path.write_text("clusters: []\ncontexts: []\n")
    with pytest.raises(InputError, match=f"kubeconfig {path}: no contexts"):
        KubeConfig.load(path)
    with pytest.raises(InputError, match="missing: No such file"):
        KubeConfig.load(tmp_path / "missing")


# -- verbs and errors ---------------------------------------------------------------------------------


def test_errors_map_to_store_errors(server: FakeServer) -> None:
    def conflict(h: Handler, q: Any, body: Any) -> None:
        h.reply(409, {"kind": "Status", "reason": "Conflict", "message": "the object has been modified"})

    def exists(h: Handler, q: Any, body: Any) -> None:
        h.reply(409, {"kind": "Status", "reason": "AlreadyExists", "message": "exists"})

    def gone(h: Handler, q: Any, body: Any) -> None:
        h.reply(410, {"kind": "Status", "reason": "Expired", "message": "too old resource version"})

    def broken(h: Handler, q: Any, body: Any) -> None:
        h.reply(503, {"kind": "Status", "reason": "ServiceUnavailable"})

    server.routes[("PUT", "/api/v1/nodes/a")] = conflict
    server.routes[("POST", "/api/v1/nodes")] = exists
    server.routes[("GET", "/api/v1/nodes")] = gone
    server.routes[("GET", "/api/v1/nodes/b")] = broken
    c = client_for(server)
    with pytest.raises(ConflictError):
        c.update(node("a", 1))
    with pytest.raises(AlreadyExistsError):
        c.create(node("a", 0))
    with pytest.raises(ExpiredError):
        c.list("Node")
    with pytest.raises(NotFoundError):
        c.get("Node", "zzz")
    with pytest.raises(UnavailableError):
        c.get("Node", "b")
    assert sum(1 for m, p, _, _ in server.log if p == "/api/v1/nodes/b") == 2  # a GET is retried
    assert c.try_get("Node", "zzz") is None


def test_write_fence_stops_writes_before_they_are_sent(server: FakeServer) -> None:
    def ok(h: Handler, q: Any, body: Any) -> None:
        h.reply(200, node("a", 2))

    server.routes[("PUT", "/api/v1/nodes/a")] = ok
    server.routes[("GET", "/api/v1/nodes/a")] = ok
    c = client_for(server)
    allowed = [True]

    def fence(method: str, path: str) -> None:
        if not allowed[0]:
            raise FencedError(f"{method} {path}: the leader lease ran out")

    c.write_fence = fence
    c.update(node("a", 1))
    allowed[0] = False
    with pytest.raises(FencedError):
        c.update(node("a", 1))
    assert c.get("Node", "a")["metadata"]["name"] == "a"  # reads are never fenced
    assert [m for m, p, _, _ in server.log] == ["PUT", "GET"]  # the fenced PUT never reached the server


SLOW_PLUGIN = """#!{python}
import json, time
time.sleep(0.6)
cred = {{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential"}}
print(json.dumps(dict(cred, status={{"token": "t0k"}})))
"""


def test_write_fence_is_the_last_step_before_the_request_is_sent(server: FakeServer, tmp_path: Path) -> None:
    """Whatever a request waits for (here a credential plugin taking 0.6 s: an exec plugin starts a process
    per new token; a TCP or TLS handshake; the GIL) comes before the fence: a lease that runs out
    meanwhile stops the write. Checked first, the write would be sent after the lease ran out."""
    server.routes[("PUT", "/api/v1/nodes/a")] = lambda h, q, body: h.reply(200, node("a", 2))
    plugin = tmp_path / "slow-auth-plugin"
    plugin.write_text(SLOW_PLUGIN.format(python=sys.executable))
    plugin.chmod(0o755)
    config = KubeConfig(server=server.url, exec=ExecConfig(command=str(plugin), interactive_mode="Never"))
    c = KubeClient(config, qps=0, retries=1)
    deadline = time.monotonic() + 0.3
    checked: list[float] = []

    def fence(method: str, path: str) -> None:
        checked.append(time.monotonic())
        if checked[-1] > deadline:
            raise FencedError(f"{method} {path}: the leader lease ran out")

    c.write_fence = fence
    with pytest.raises(FencedError):
        c.update(node("a", 1))
    assert [m for m, _, _, _ in server.log] == []  # nothing reached the server
    assert len(checked) == 1
    c.write_fence = None
    assert c.update(node("a", 1))["metadata"]["resourceVersion"] == "2"  # no half-used connection is left


def test_idle_keepalive_connection_is_replaced_before_the_server_drops_it(
    server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import kdra.kube.client as client_mod

    ports: list[int] = []

    def ok(h: Handler, q: Any, body: Any) -> None:
        ports.append(h.client_address[1])
        h.reply(200, node("a", 1))

    server.routes[("GET", "/api/v1/nodes/a")] = ok
    monkeypatch.setattr(client_mod, "IDLE_CONNECTION_SECONDS", 0.2)
    monkeypatch.setattr(Handler, "protocol_version", "HTTP/1.1")  # keep-alive, as the API server
    c = client_for(server)
    c.get("Node", "a")
    c.get("Node", "a")
    time.sleep(0.3)
    c.get("Node", "a")
    assert ports[0] == ports[1]  # kept alive while busy
    assert ports[2] != ports[1]  # a fresh connection after idling


# -- the asyncio transport (KubeClient.arequest: the binding loop's) -------------------------------------


def test_async_transport_maps_errors_and_retries_as_the_threads_do(server: FakeServer) -> None:
    server.routes[("PUT", "/api/v1/nodes/a")] = lambda h, q, b: h.reply(
        409, {"kind": "Status", "reason": "Conflict", "message": "the object has been modified"}
    )
    server.routes[("POST", "/api/v1/nodes")] = lambda h, q, b: h.reply(
        409, {"kind": "Status", "reason": "AlreadyExists", "message": "exists"}
    )
    server.routes[("GET", "/api/v1/nodes/b")] = lambda h, q, b: h.reply(503, {"kind": "Status"})
    server.routes[("POST", "/api/v1/namespaces/ns/pods/p/binding")] = lambda h, q, b: h.reply(
        500, {"kind": "Status", "reason": "InternalError"}
    )

    async def calls(c: KubeClient) -> list[type[BaseException]]:
        out: list[type[BaseException]] = []
        for call in (
            lambda: c.aupdate(node("a", 1)),
            lambda: c.acreate(node("a", 0)),
            lambda: c.aget("Node", "zzz"),
            lambda: c.aget("Node", "b"),
            lambda: c.abind("ns", "p", "pu", "n1"),
        ):
            try:
                await call()
            except Exception as e:
                out.append(type(e))
        return out

    assert run_async(client_for(server), calls) == [
        ConflictError,
        AlreadyExistsError,
        NotFoundError,
        UnavailableError,
        UnavailableError,
    ]
    sent = [(m, p) for m, p, _, _ in server.log]
    assert sent.count(("GET", "/api/v1/nodes/b")) == 2  # a read is retried after a 5xx
    assert sent.count(("POST", "/api/v1/namespaces/ns/pods/p/binding")) == 1  # a binding is not


def test_async_transport_keeps_connections_alive_and_reads_chunked_answers(
    server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Go's server answers large objects chunked; requests in flight at once each get a connection, and
    the connections are used again afterwards."""
    import kdra.kube.client as client_mod

    ports: list[int] = []
    gate = threading.Barrier(3, timeout=10)

    def chunked(h: Handler, q: Any, body: Any) -> None:
        ports.append(h.client_address[1])
        if q.get("wait"):
            gate.wait()  # three requests are in flight together
        raw = json.dumps(node("a", 7, {"x": "y" * 5000})).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        for i in range(0, len(raw), 1000):
            part = raw[i : i + 1000]
            h.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
        h.wfile.write(b"0\r\n\r\n")

    server.routes[("GET", "/api/v1/nodes/a")] = chunked
    monkeypatch.setattr(Handler, "protocol_version", "HTTP/1.1")
    monkeypatch.setattr(client_mod, "IDLE_CONNECTION_SECONDS", 30.0)

    async def calls(c: KubeClient) -> list[Any]:
        wait = {"wait": "1"}
        first = await asyncio.gather(*(c.arequest("GET", "/api/v1/nodes/a", params=wait) for _ in range(3)))
        again = [await c.aget("Node", "a") for _ in range(3)]
        return [*first, *again]

    got = run_async(client_for(server), calls)
    assert all(g["metadata"]["labels"]["x"] == "y" * 5000 for g in got)
    assert len(set(ports[:3])) == 3  # in flight together: three connections
    assert set(ports[3:]) <= set(ports[:3])  # then kept alive and used again


def test_async_transport_fence_is_the_last_step_before_the_request_is_sent(
    server: FakeServer, tmp_path: Path
) -> None:
    """As with the threads' transport: the credential plugin's 0.6 s come before the fence, a lease that
    ran out meanwhile stops the write, and nothing reaches the server; reads are not fenced."""
    server.routes[("PUT", "/api/v1/nodes/a")] = lambda h, q, body: h.reply(200, node("a", 2))
    server.routes[("GET", "/api/v1/nodes/a")] = lambda h, q, body: h.reply(200, node("a", 2))
    plugin = tmp_path / "slow-auth-plugin"
    plugin.write_text(SLOW_PLUGIN.format(python=sys.executable))
    plugin.chmod(0o755)
    config = KubeConfig(server=server.url, exec=ExecConfig(command=str(plugin), interactive_mode="Never"))
    c = KubeClient(config, qps=0, retries=1)
    deadline = time.monotonic() + 0.3
    checked: list[float] = []

    def fence(method: str, path: str) -> None:
        checked.append(time.monotonic())
        if checked[-1] > deadline:
            raise FencedError(f"{method} {path}: the leader lease ran out")

    c.write_fence = fence

    async def calls(c: KubeClient) -> tuple[str, str]:
        with pytest.raises(FencedError):
            await c.aupdate(node("a", 1))
        assert [m for m, _, _, _ in server.log] == []  # nothing reached the server
        read = await c.aget("Node", "a")
        c.write_fence = None
        written = await c.aupdate(node("a", 1))
        return read["metadata"]["name"], written["metadata"]["resourceVersion"]

    assert run_async(c, calls) == ("a", "2")
    assert len(checked) == 1


def test_async_transport_unreachable_server_is_unavailable() -> None:
    srv = FakeServer()
    url = srv.url
    srv.server_close()
    c = KubeClient(KubeConfig(server=url), qps=0, retries=1)
    with pytest.raises(UnavailableError) as e:
        run_async(c, lambda c: c.aget("Node", "a"))
    assert e.value.unreachable and url in str(e.value)


def test_unreachable_server_is_unavailable() -> None:
    srv = FakeServer()
    url = srv.url
    srv.server_close()  # nothing listens there any more
    c = KubeClient(KubeConfig(server=url), qps=0, retries=1)
    with pytest.raises(UnavailableError):
        c.get("Node", "a")


def test_list_pages_with_continue(server: FakeServer) -> None:
    def page(h: Handler, q: dict[str, list[str]], body: Any) -> None:
        if "continue" not in q:
            h.reply(200, {"metadata": {"resourceVersion": "7", "continue": "tok"}, "items": [node("a", 3)]})
        else:
            assert q["continue"] == ["tok"]
            h.reply(200, {"metadata": {"resourceVersion": "7"}, "items": [node("b", 5)]})

    server.routes[("GET", "/api/v1/nodes")] = page
    items, rv = client_for(server).list_with_version("Node", page_size=1)
    assert [i["metadata"]["name"] for i in items] == ["a", "b"]
    assert rv == "7"
    assert items[0]["kind"] == "Node"


def test_token_bucket_limits_rate() -> None:
    b = TokenBucket(qps=100, burst=5)
    waits = [b.wait_time() for _ in range(10)]
    assert waits[:5] == [0.0] * 5
    assert waits[5] > 0 and waits[9] == pytest.approx(0.05, abs=0.01)
    assert TokenBucket(qps=0, burst=1).wait_time() == 0.0


# -- the store: watch resume, relist, conflicts --------------------------------------------------------


def test_watch_resumes_from_last_resource_version_and_relists_on_410(server: FakeServer) -> None:
    watches: list[str] = []
    lists = {"n": 0}

    def list_nodes(h: Handler, q: dict[str, list[str]], body: Any) -> None:
        if "watch" in q:
            rv = q["resourceVersion"][0]
            watches.append(rv)
            if rv == "10":  # the first watch: two events, then the connection ends
                h.stream(
                    [
                        {"type": "ADDED", "object": node("b", 11)},
                        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "12"}}},
                    ]
                )
            elif rv == "12":  # resumed from the bookmark: compacted meanwhile
                h.stream([{"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}])
            elif rv == "20":  # after the relist: a modification
                h.stream([{"type": "MODIFIED", "object": node("c", 21, {"x": "y"})}])
            else:
                time.sleep(0.5)
                h.stream([])
            return
        lists["n"] += 1
        if lists["n"] == 1:
            h.reply(200, {"metadata": {"resourceVersion": "10"}, "items": [node("a", 5)]})
        else:  # a was deleted and c created while the watch was gone
            h.reply(200, {"metadata": {"resourceVersion": "20"}, "items": [node("b", 11), node("c", 19)]})

    server.routes[("GET", "/api/v1/nodes")] = list_nodes
    store = KubeStore(client_for(server), kinds=("Node",)).start()
    seen: list[tuple[str, str]] = []
    store.watch(lambda ev: seen.append((ev.type, ev.object["metadata"]["name"])), kinds=("Node",))
    try:
        ok = store.wait_for(
            lambda: (store.try_get("Node", "c") or {}).get("metadata", {}).get("labels") == {"x": "y"}, 10
        )
    finally:
        store.stop()
    assert ok, (watches, seen)
    assert watches[:3] == ["10", "12", "20"]
    assert [n["metadata"]["name"] for n in store.list("Node")] == ["b", "c"]
    assert seen == [("ADDED", "b"), ("DELETED", "a"), ("ADDED", "c"), ("MODIFIED", "c")]
    assert store.reflectors["Node"].relists == 1


def test_stale_events_are_skipped_after_own_writes(server: FakeServer) -> None:
    def list_nodes(h: Handler, q: dict[str, list[str]], body: Any) -> None:
        if "watch" in q:
            time.sleep(0.2)
            h.stream([])
            return
        h.reply(200, {"metadata": {"resourceVersion": "10"}, "items": [node("a", 5)]})

    def put(h: Handler, q: Any, body: Any) -> None:
        out = dict(body)
        out["metadata"] = dict(body["metadata"], resourceVersion="30")
        h.reply(200, out)

    server.routes[("GET", "/api/v1/nodes")] = list_nodes
    server.routes[("PUT", "/api/v1/nodes/a")] = put
    store = KubeStore(client_for(server), kinds=("Node",)).start()
    events: list[WatchEvent] = []
    store.watch(events.append)
    try:
        upd = dict(store.get("Node", "a"))
        upd["metadata"] = dict(upd["metadata"], labels={"v": "2"})
        store.update(upd)
        assert [e.type for e in events] == ["MODIFIED"]  # delivered at once, like MemoryStore
        # The watch brings an older version afterwards: it must not overwrite the newer write.
        store.inbox.put(("event", "Node", "MODIFIED", node("a", 29, {"v": "old"})))
        store.inbox.put(("event", "Node", "MODIFIED", node("a", 30, {"v": "2"})))
        store.process_events()
    finally:
        store.stop()
    assert store.get("Node", "a")["metadata"]["labels"] == {"v": "2"}
    assert len(events) == 1


def test_a_write_answered_before_the_deletion_does_not_bring_the_object_back(server: FakeServer) -> None:
    """A binding cycle's claim write is applied after the claim's DELETED event (its pod was deleted, the
    claim with it): the deleted object stays gone (it held devices in kdra's view for good); one created
    again afterwards (a newer resourceVersion) is taken in."""

    def list_nodes(h: Handler, q: dict[str, list[str]], body: Any) -> None:
        if "watch" in q:
            time.sleep(0.2)
            h.stream([])
            return
        h.reply(200, {"metadata": {"resourceVersion": "10"}, "items": [node("a", 5)]})

    server.routes[("GET", "/api/v1/nodes")] = list_nodes
    store = KubeStore(client_for(server), kinds=("Node",)).start()
    events: list[WatchEvent] = []
    store.watch(events.append)
    try:
        store.inbox.put(("event", "Node", "DELETED", node("a", 21)))
        store.process_events()
        store.apply_written("Node", node("a", 20, {"written": "yes"}))
        assert store.try_get("Node", "a") is None
        store.inbox.put(("event", "Node", "ADDED", node("a", 25, {"again": "yes"})))
        store.process_events()
    finally:
        store.stop()
    assert store.get("Node", "a")["metadata"]["labels"] == {"again": "yes"}
    assert [e.type for e in events] == ["DELETED", "ADDED"]


def test_update_with_retry_rereads_the_live_object_on_conflict(server: FakeServer) -> None:
    live = {"rv": 40}
    puts: list[str] = []

    def list_nodes(h: Handler, q: dict[str, list[str]], body: Any) -> None:
        if "watch" in q:
            time.sleep(0.2)
            h.stream([])
            return
        h.reply(200, {"metadata": {"resourceVersion": "10"}, "items": [node("a", 5)]})

    def get(h: Handler, q: Any, body: Any) -> None:
        h.reply(200, node("a", live["rv"], {"someone": "else"}))

    def put(h: Handler, q: Any, body: Any) -> None:
        rv = body["metadata"]["resourceVersion"]
        puts.append(rv)
        if rv != str(live["rv"]):
            h.reply(409, {"kind": "Status", "reason": "Conflict", "message": "the object has been modified"})
            return
        live["rv"] += 1
        out = dict(body)
        out["metadata"] = dict(body["metadata"], resourceVersion=str(live["rv"]))
        h.reply(200, out)

    server.routes[("GET", "/api/v1/nodes")] = list_nodes
    server.routes[("GET", "/api/v1/nodes/a")] = get
    server.routes[("PUT", "/api/v1/nodes/a")] = put
    store = KubeStore(client_for(server), kinds=("Node",)).start()

    def mutate(n: dict[str, Any]) -> None:
        n["metadata"]["labels"] = dict(n["metadata"].get("labels") or {}, mine="yes")

    try:
        out = store.update_with_retry("Node", "a", "", mutate)
    finally:
        store.stop()
    assert puts == ["5", "40"]  # stale cache first, then the live version
    assert out["metadata"]["labels"] == {"someone": "else", "mine": "yes"}
    assert store.get("Node", "a")["metadata"]["resourceVersion"] == "41"


# -- leader election ----------------------------------------------------------------------------------


class FakeLeases:
    """A Lease endpoint with resourceVersion preconditions, as the API server has."""

    def __init__(self, srv: FakeServer) -> None:
        self.lease: dict[str, Any] | None = None
        self.rv = 0
        self.lock = threading.Lock()
        base = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
        srv.routes[("GET", base + "/kdra")] = self.get
        srv.routes[("POST", base)] = self.create
        srv.routes[("PUT", base + "/kdra")] = self.put

    def get(self, h: Handler, q: Any, body: Any) -> None:
        with self.lock:
            if self.lease is None:
                h.reply(404, {"kind": "Status", "reason": "NotFound"})
            else:
                h.reply(200, self.lease)

    def create(self, h: Handler, q: Any, body: Any) -> None:
        with self.lock:
            if self.lease is not None:
                h.reply(409, {"kind": "Status", "reason": "AlreadyExists"})
                return
            self.rv += 1
            self.lease = dict(body, metadata=dict(body["metadata"], resourceVersion=str(self.rv)))
            h.reply(201, self.lease)

    def put(self, h: Handler, q: Any, body: Any) -> None:
        with self.lock:
            assert self.lease is not None
            if body["metadata"]["resourceVersion"] != self.lease["metadata"]["resourceVersion"]:
                h.reply(409, {"kind": "Status", "reason": "Conflict"})
                return
            self.rv += 1
            self.lease = dict(body, metadata=dict(body["metadata"], resourceVersion=str(self.rv)))
            h.reply(200, self.lease)


class LeaseClock:
    """The elector's clock, moved by the test: deadlines do not depend on how fast a loaded machine
    answers the fake server's requests."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = 1000.0
        monkeypatch.setattr("kdra.kube.leader.lease_clock", lambda: self.now)

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_leader_election_one_leader_and_takeover_after_expiry(
    server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = LeaseClock(monkeypatch)
    leases = FakeLeases(server)
    kw = {"lease_duration": 1.0, "renew_deadline": 0.6, "retry_period": 0.1}
    a = LeaderElector(client_for(server), "kdra", "kube-system", "a", **kw)
    b = LeaderElector(client_for(server), "kdra", "kube-system", "b", **kw)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()  # held, and b only now observed it
    assert a.is_leader and not b.is_leader
    assert a.try_acquire_or_renew()  # renew
    clock.sleep(0.4)
    assert not b.try_acquire_or_renew()  # renewed since b last looked
    # a stops renewing (crashed): b takes over once the lease has not changed for lease_duration.
    clock.sleep(1.1)
    assert not a.is_leader
    assert b.try_acquire_or_renew()
    assert leases.lease is not None
    assert leases.lease["spec"]["holderIdentity"] == "b"
    assert leases.lease["spec"]["leaseTransitions"] == 1


def test_leader_release_hands_over_at_once(server: FakeServer) -> None:
    FakeLeases(server)
    kw = {"lease_duration": 30.0, "renew_deadline": 20.0, "retry_period": 0.1}
    a = LeaderElector(client_for(server), "kdra", "kube-system", "a", **kw)
    b = LeaderElector(client_for(server), "kdra", "kube-system", "b", **kw)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    a.release()
    assert not a.is_leader
    assert b.try_acquire_or_renew()


def test_claim_without_leader_election_finds_a_second_scheduler_of_the_same_name(
    server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`kdra scheduler` without --leader-elect claims the same Lease: a second process serving the same
    name sees the first renew it and records it as `rival` (it then exits) instead of serving too; a Lease
    left by a process that died is taken once it has not changed for the lease duration, as an elector
    takes it; a claim is not lost to its own renewals failing (nothing is fenced), only to another
    holder."""
    clock = LeaseClock(monkeypatch)
    leases = FakeLeases(server)
    kw = {"lease_duration": 1.0, "renew_deadline": 0.6, "retry_period": 0.1, "claim": True}
    a = LeaderElector(client_for(server), "kdra", "kube-system", "a", **kw)
    b = LeaderElector(client_for(server), "kdra", "kube-system", "b", **kw)
    assert a.try_acquire_or_renew() and a.is_leader
    assert not b.try_acquire_or_renew() and b.holder == "a" and b.rival == ""  # one look proves nothing
    clock.sleep(0.3)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew() and b.rival == "a"  # a renewed: it is alive
    # An elector with --leader-elect also counts a claimant as the holder (it stands by, never serves).
    e = LeaderElector(client_for(server), "kdra", "kube-system", "e", **dict(kw, claim=False))
    assert not e.try_acquire_or_renew()
    # a cannot renew for a while: it keeps its claim (no deadline, nothing fenced) ...
    clock.sleep(5)
    assert a.is_leader and not a.lost
    # ... until another process took the expired Lease: then a has lost it to that one.
    c = LeaderElector(client_for(server), "kdra", "kube-system", "c", **kw)
    assert not c.try_acquire_or_renew()
    clock.sleep(1.1)
    assert c.try_acquire_or_renew() and leases.lease is not None
    assert leases.lease["spec"]["holderIdentity"] == "c"
    assert not a.try_acquire_or_renew() and a.lost and a.rival == "c"


def test_a_second_scheduler_without_leader_election_exits_naming_the_first(
    server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """run_scheduler in claim mode: a Lease another process keeps renewing ends the start-up with one
    line naming the scheduler name, the holder and the Lease, exit 1, before any pod is read."""
    from kdra.kube.partition import Partition
    from kdra.kube.run import DuplicateSchedulerError, run_scheduler
    from kdra.scheduler.gangqueues import GangQueueOptions
    from kdra.scheduler.scheduler import SchedulerConfig

    leases = FakeLeases(server)
    first = LeaderElector(client_for(server), "kdra", "kube-system", "host-1_77", claim=True)
    assert first.try_acquire_or_renew()
    renewing = threading.Event()

    def renew() -> None:  # the first scheduler, still running
        while not renewing.wait(0.05):
            first.try_acquire_or_renew()

    threading.Thread(target=renew, daemon=True).start()
    said: list[str] = []
    second = LeaderElector(
        client_for(server),
        "kdra",
        "kube-system",
        "host-2_88",
        retry_period=0.05,
        renew_deadline=0.5,
        claim=True,
    )
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(DuplicateSchedulerError) as err:
            run_scheduler(
                client_for(server),
                SchedulerConfig(scheduler_name="kdra"),
                GangQueueOptions(),
                identity="host-2_88",
                partition=Partition.parse(None, None),
                bind_workers=0,
                resync=0,
                preemption_wait=0,
                elector=second,
                say=said.append,
            )
    finally:
        renewing.set()
    assert str(err.value) == (
        "another scheduler serves schedulerName kdra: host-1_77 holds the Lease kube-system/kdra; stop it, "
        "or run every replica with --leader-elect"
    )
    assert err.value.exit_code == 1
    assert leases.lease is not None and leases.lease["spec"]["holderIdentity"] == "host-1_77"
    assert not [p for _m, p, _q, _b in server.log if "/leases" not in p]  # no pod, claim or node was read
    # The process's signal handlers are put back: left set, they only set the finished run's event, and a
    # process forked later in this one (replay's workers) ignored the SIGTERM that ends it.
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_a_scheduler_that_cannot_claim_its_lease_says_so_once_and_serves(
    server: FakeServer, caplog: pytest.LogCaptureFixture
) -> None:
    """No RBAC for the Lease (here: 403 on every Lease request): a scheduler without --leader-elect cannot
    tell whether another one serves its name; it says so in one warning line, and goes on to serve (the
    fake server then has no pods to list, which ends this test)."""
    from kdra.kube.partition import Partition
    from kdra.kube.run import run_scheduler
    from kdra.scheduler.gangqueues import GangQueueOptions
    from kdra.scheduler.scheduler import SchedulerConfig

    def forbidden(h: Handler, q: Any, body: Any) -> None:
        h.reply(403, {"kind": "Status", "reason": "Forbidden", "message": "leases is forbidden"})

    base = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
    server.routes[("GET", base + "/kdra")] = forbidden
    said: list[str] = []

    class Serving(Exception):
        pass

    def session(*a: Any, **kw: Any) -> Any:
        raise Serving

    elector = LeaderElector(client_for(server), "kdra", "kube-system", "a", retry_period=0.05, claim=True)
    with caplog.at_level(logging.WARNING), pytest.MonkeyPatch.context() as mp:
        mp.setattr("kdra.kube.run.start_session_scheduler", session)
        with pytest.raises(Serving):
            run_scheduler(
                client_for(server),
                SchedulerConfig(scheduler_name="kdra"),
                GangQueueOptions(),
                identity="a",
                partition=Partition.parse(None, None),
                bind_workers=0,
                resync=0,
                preemption_wait=0,
                elector=elector,
                say=said.append,
            )
    elector.stop(release=False)
    assert len(said) == 1 and said[0].startswith(
        "kdra scheduler a: warning: cannot tell whether another scheduler serves schedulerName kdra "
        "(without --leader-elect it claims the Lease kube-system/kdra): GET "
    )
    assert "403" in said[0] and not [r for r in caplog.records if r.name == "kdra.kube.leader"]


def test_fence_refuses_every_write_once_the_lease_deadline_passed(
    server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A paused leader (here: one that stops renewing) wakes up with writes in hand: from the deadline
    on, none is sent, whichever thread sends it; its own Lease writes still pass, and on_lost runs once."""
    clock = LeaseClock(monkeypatch)
    leases = FakeLeases(server)

    def ok(h: Handler, q: Any, body: Any) -> None:
        h.reply(200, node("a", 2))

    server.routes[("PUT", "/api/v1/nodes/a")] = ok
    client = client_for(server)
    kw = {"lease_duration": 1.0, "renew_deadline": 0.4, "retry_period": 0.1}
    a = LeaderElector(client, "kdra", "kube-system", "a", **kw).install_fence()
    lost: list[str] = []
    a.on_lost.append(lambda: lost.append(threading.current_thread().name))
    with pytest.raises(FencedError, match="does not hold the leader lease"):
        client.update(node("a", 1))  # a standby writes nothing but its Lease
    assert a.try_acquire_or_renew()  # the Lease is created (POST) and held, fence or not
    client.update(node("a", 1))
    clock.sleep(0.5)  # no renewal within the renew deadline
    sent = len([r for r in server.log if r[1] == "/api/v1/nodes/a"])
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            client.update(node("a", 1))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 4 and all(isinstance(e, FencedError) for e in errors)
    assert len([r for r in server.log if r[1] == "/api/v1/nodes/a"]) == sent  # nothing reached the server
    assert a.lost and lost and len(lost) == 1
    assert a.fenced_writes == 5
    assert not a.try_acquire_or_renew()  # a lost leadership is not taken up again by this process
    assert leases.lease is not None and leases.lease["spec"]["holderIdentity"] == "a"


def test_a_write_paused_between_the_fence_and_the_send_is_reported(
    server: FakeServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The few instructions between the fence's check and the send syscall cannot be fenced: a pause there
    (here: the clock moves past the deadline right after the check) sends the write late. The elector
    says so (a warning naming the write, `raced_writes`), and the exit waits for that report."""
    clock = LeaseClock(monkeypatch)
    FakeLeases(server)
    server.routes[("PUT", "/api/v1/nodes/a")] = lambda h, q, body: h.reply(200, node("a", 2))
    client = client_for(server)
    kw = {"lease_duration": 1.0, "renew_deadline": 0.4, "retry_period": 0.1}
    a = LeaderElector(client, "kdra", "kube-system", "a", **kw).install_fence()
    assert a.try_acquire_or_renew()
    client.update(node("a", 1))
    assert a.raced_writes == 0

    def paused_after_the_check(method: str, path: str) -> None:
        a.fence(method, path)
        clock.sleep(0.5)  # stopped here: the lease runs out before the bytes leave

    client.write_fence = paused_after_the_check
    with caplog.at_level("WARNING", logger="kdra.kube.leader"):
        client.update(node("a", 1))
    assert a.raced_writes == 1 and a.lost
    assert "PUT /api/v1/nodes/a passed the lease check and was sent after the lease ran out" in caplog.text
    t0 = time.monotonic()
    a.wait_sent()
    assert time.monotonic() - t0 < 0.5  # nothing left between a check and its report
    client.write_fence = a.fence
    with pytest.raises(FencedError):
        client.update(node("a", 1))
    assert a.raced_writes == 1 and a.fenced_writes == 1


def test_leader_thread_notices_the_deadline_and_stops_campaigning(server: FakeServer) -> None:
    FakeLeases(server)
    client = client_for(server)
    # A renew deadline a loaded machine can keep: with 0.3 s, an acquisition whose requests took longer
    # than that under load (t0 counts from before them) ended at once, and the test saw no leader.
    kw = {"lease_duration": 2.0, "renew_deadline": 1.0, "retry_period": 0.1}
    a = LeaderElector(client, "kdra", "kube-system", "a", **kw).install_fence()
    done = threading.Event()
    a.on_lost.append(done.set)
    a.start()
    try:
        deadline = time.monotonic() + 10
        while not a.ever_led and time.monotonic() < deadline:
            time.sleep(0.02)
        assert a.ever_led
        # Renewals are answered with 503 from now on: the thread itself notices the deadline.
        server.routes[("PUT", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kdra")] = (
            lambda h, q, b: h.reply(503, {"kind": "Status", "reason": "ServiceUnavailable"})
        )
        assert done.wait(10)
        assert a.lost
        assert a._thread is not None
        a._thread.join(2)
        assert not a._thread.is_alive()
    finally:
        a.stop(release=False)


# -- the binding cycle --------------------------------------------------------------------------------


def test_bind_job_retries_claim_writes_on_conflict_then_binds(server: FakeServer) -> None:
    from kdra.kube.bindjob import BindJob
    from kdra.scheduler.podinfo import PodInfo

    base = "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c1"
    live: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": "c1",
            "namespace": "ns",
            "uid": "cu",
            "resourceVersion": "8",
            "labels": {"a": "b"},
        },
        "spec": {},
    }
    puts: list[tuple[str, str]] = []

    def get(h: Handler, q: Any, body: Any) -> None:
        h.reply(200, live)

    def put(h: Handler, q: Any, body: Any, sub: str = "") -> None:
        puts.append((sub, body["metadata"]["resourceVersion"]))
        if body["metadata"]["resourceVersion"] != live["metadata"]["resourceVersion"]:
            h.reply(409, {"kind": "Status", "reason": "Conflict"})
            return
        live.update(body)
        live["metadata"] = dict(
            body["metadata"], resourceVersion=str(int(body["metadata"]["resourceVersion"]) + 1)
        )
        h.reply(200, live)

    bindings: list[Any] = []
    server.routes[("GET", base)] = get
    server.routes[("PUT", base)] = put
    server.routes[("PUT", base + "/status")] = lambda h, q, b: put(h, q, b, "status")
    server.routes[("POST", "/api/v1/namespaces/ns/pods/p/binding")] = lambda h, q, b: (
        bindings.append(b),
        h.reply(201, {}),
    )
    stale = dict(live, metadata=dict(live["metadata"], resourceVersion="3"))  # the cache lags behind
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "pu"}, "spec": {"containers": []}}
    alloc = {"devices": {"results": [{"driver": "d", "pool": "n1", "device": "x", "request": "r"}]}}
    job = run_async(client_for(server), BindJob(PodInfo(pod), "n1", [(stale, alloc)], []).run)
    assert not job.error, job.error
    assert puts == [("", "3"), ("", "8"), ("status", "9")]  # conflict, re-read, finalizer, then status
    assert live["metadata"]["finalizers"] == ["resource.kubernetes.io/delete-protection"]
    assert live["metadata"]["labels"] == {"a": "b"}
    assert live["status"] == {
        "allocation": alloc,
        "reservedFor": [{"resource": "pods", "name": "p", "uid": "pu"}],
    }
    assert bindings[0]["target"] == {"apiVersion": "v1", "kind": "Node", "name": "n1"}
    assert job.written[-1]["metadata"]["resourceVersion"] == "10"


def _claim_server(server: FakeServer, live: dict[str, Any], on_status: Any) -> list[tuple[str, int]]:
    """GET and PUT (metadata, status) of ResourceClaim ns/c1 with resourceVersion preconditions;
    `on_status(body)` may answer a status PUT itself (returns a code) before it is applied."""
    base = "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c1"
    answers: list[tuple[str, int]] = []

    def put(h: Handler, body: Any, sub: str) -> None:
        if body["metadata"]["resourceVersion"] != live["metadata"]["resourceVersion"]:
            answers.append((sub, 409))
            h.reply(409, {"kind": "Status", "reason": "Conflict"})
            return
        code = on_status(body) if sub == "status" else 200
        live.update(body)
        live["metadata"] = dict(
            body["metadata"], resourceVersion=str(int(body["metadata"]["resourceVersion"]) + 1)
        )
        answers.append((sub, code))
        if code >= 500:  # committed, but the answer says otherwise (a 504 "context canceled")
            h.reply(code, {"kind": "Status", "reason": "Timeout", "message": "context canceled"})
        else:
            h.reply(code, live)

    server.routes[("GET", base)] = lambda h, q, b: h.reply(200, live)
    server.routes[("PUT", base)] = lambda h, q, b: put(h, b, "")
    server.routes[("PUT", base + "/status")] = lambda h, q, b: put(h, b, "status")
    server.routes[("POST", "/api/v1/namespaces/ns/pods/p/binding")] = lambda h, q, b: h.reply(201, {})
    return answers


def _c1(rv: str, status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c1", "namespace": "ns", "uid": "cu", "resourceVersion": rv},
        "spec": {},
        "status": status or {},
    }


def test_bind_job_treats_a_committed_write_that_answered_504_as_written(server: FakeServer) -> None:
    from kdra.kube.bindjob import BindJob
    from kdra.scheduler.podinfo import PodInfo

    live = _c1("8")
    answers = _claim_server(server, live, lambda body: 504)
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "pu"}, "spec": {"containers": []}}
    alloc = {"devices": {"results": [{"driver": "d", "pool": "n1", "device": "x", "request": "r"}]}}
    job = run_async(client_for(server), BindJob(PodInfo(pod), "n1", [(_c1("8"), alloc)], []).run)
    assert not job.error, job.error
    # The 504 committed: a repeat of the conditional PUT (the client's own retry) only conflicts, and the
    # re-read finds the claim ours, so nothing is written again.
    assert answers[:2] == [("", 200), ("status", 504)] and all(a == ("status", 409) for a in answers[2:])
    assert live["status"]["allocation"] == alloc


def test_bind_job_stops_at_a_claim_someone_else_allocated_meanwhile(server: FakeServer) -> None:
    from kdra.kube.bindjob import BindJob
    from kdra.scheduler.podinfo import PodInfo

    theirs = {"devices": {"results": [{"driver": "d", "pool": "n2", "device": "y", "request": "r"}]}}
    live = _c1("8")
    answers = _claim_server(server, live, lambda body: 200)
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "pu"}, "spec": {"containers": []}}
    ref = {"resource": "pods", "name": "p", "uid": "pu"}
    mine = {"devices": {"results": [{"driver": "d", "pool": "n1", "device": "x", "request": "r"}]}}
    # Someone else allocates after kdra's finalizer write: kdra's status PUT conflicts. The meddling happens
    # as the status PUT arrives (after the finalizer write's answer, the client could be faster than it).
    live["status"] = {}
    status = ("PUT", "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c1/status")
    orig = server.routes[status]

    def meddle_then_status(h: Handler, q: Any, body: Any) -> None:
        if "allocation" not in live["status"]:
            live["status"] = {"allocation": theirs, "reservedFor": [ref]}
            live["metadata"] = dict(live["metadata"], resourceVersion="20")
        orig(h, q, body)

    server.routes[status] = meddle_then_status
    job = run_async(client_for(server), BindJob(PodInfo(pod), "n1", [(_c1("8"), mine)], []).run)
    assert "allocated meanwhile by someone else (d/n2/y)" in job.error
    assert answers == [("", 200), ("status", 409)]  # re-read, decided, not written again
    assert live["status"]["allocation"] == theirs
    assert not any(p.endswith("/binding") for _m, p, _q, _b in server.log)


def test_bind_job_reports_a_vanished_pod_as_gone(server: FakeServer) -> None:
    from kdra.kube.bindjob import BindJob
    from kdra.scheduler.podinfo import PodInfo

    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "pu"}, "spec": {"containers": []}}
    job = run_async(client_for(server), BindJob(PodInfo(pod), "n1", [], []).run)  # 404 on pods/binding
    assert job.gone and job.error


# -- the status writer on the binding loop (kdra.kube.session.KubeStatusWriter) -------------------------


def test_status_writer_writes_off_the_loop_retries_and_posts_events_after_the_write(
    server: FakeServer,
) -> None:
    """PodGroup status through the binding loop: write_status returns at once; a refused write (503) is
    tried again after backoff with the fields that came meanwhile folded in, and status_of answers with
    them until the cache has them; the Event about the group is posted after its status landed, and an
    identical Event again is not posted."""
    from types import SimpleNamespace

    from kdra.kube.bindloop import BindLoop
    from kdra.kube.session import KubeStatusWriter

    path = "/apis/kdra.dev/v1alpha1/namespaces/ns/podgroups/g/status"
    answers = [503, 200]
    patched: list[dict[str, Any]] = []

    def patch(h: Handler, q: Any, body: Any) -> None:
        code = answers.pop(0) if answers else 200
        if code == 200:
            patched.append(body["status"])
        h.reply(
            code, {"kind": "PodGroup", "metadata": {"name": "g", "namespace": "ns"}, "status": body["status"]}
        )

    server.routes[("PATCH", path)] = patch
    server.routes[("POST", "/api/v1/namespaces/ns/events")] = lambda h, q, b: h.reply(201, b)
    client = client_for(server)
    client.retries = 0  # the writer's own retry, not the client's
    loop = BindLoop(client, 4)
    applied: list[Any] = []
    binder = SimpleNamespace(
        submit=lambda coro, background=False: loop.submit(coro, background=background),
        in_loop_thread=lambda fn: fn(0.0),
        post_event=loop.events.post,
    )
    store = SimpleNamespace(client=client, apply_written=lambda kind, obj: applied.append((kind, obj)))
    writer = KubeStatusWriter(store, "kdra", "test")  # type: ignore[arg-type]
    writer.use(binder)  # type: ignore[arg-type]
    group = {
        "apiVersion": "kdra.dev/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "ns"},
    }
    t0 = time.monotonic()
    assert writer.write_status(group, {"phase": "Pending"})
    assert writer.write_status(group, {"scheduled": 0})  # folded into the waiting write
    # what the next write builds on: the fields asked for, though the cache does not have them yet
    assert writer.status_of(group) == {"phase": "Pending", "scheduled": 0}
    writer.event(group, "Warning", "Unschedulable", "waiting for 3 members")
    writer.event(group, "Warning", "Unschedulable", "waiting for 3 members")  # a repeat: not posted
    assert time.monotonic() - t0 < 0.5  # nothing waited for the API server
    wait_for(lambda: writer.events == 1 and loop.events.posted == 1, 10, "the status written and the Event")
    loop.close(wait=True)
    sent = [(m, p) for m, p, _q, _b in server.log]
    assert sent == [("PATCH", path), ("PATCH", path), ("POST", "/api/v1/namespaces/ns/events")]
    assert patched == [{"phase": "Pending", "scheduled": 0}]
    assert applied and applied[-1][1]["status"] == {"phase": "Pending", "scheduled": 0}
    assert writer.status_of(group) == {}  # caught up: the cache's own (here never updated) again


def test_status_writer_writes_details_below_the_verdict_at_most_every_interval(server: FakeServer) -> None:
    """A group's condition changed below the first line of its message only (how many members exist) is
    written at once the first time, then no sooner than the interval after the last such write, with the
    latest details; a new verdict meanwhile goes at once, taking the waiting details with it."""
    from types import SimpleNamespace

    from kdra.kube.bindloop import BindLoop
    from kdra.kube.session import KubeStatusWriter

    path = "/apis/kdra.dev/v1alpha1/namespaces/ns/podgroups/g/status"
    patched: list[tuple[float, str]] = []
    group: dict[str, Any] = {
        "apiVersion": "kdra.dev/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "ns"},
    }

    def patch(h: Handler, q: Any, body: Any) -> None:
        patched.append((time.monotonic(), body["status"]["conditions"][0]["message"]))
        h.reply(200, dict(group, status=body["status"]))

    server.routes[("PATCH", path)] = patch
    client = client_for(server)
    loop = BindLoop(client, 4)
    binder = SimpleNamespace(
        submit=lambda coro, background=False: loop.submit(coro, background=background),
        in_loop_thread=lambda fn: fn(0.0),
        post_event=loop.events.post,
    )

    def applied(kind: str, obj: dict[str, Any]) -> None:
        group["status"] = obj["status"]

    writer = KubeStatusWriter(SimpleNamespace(client=client, apply_written=applied), "kdra", "t")  # type: ignore[arg-type]
    writer.use(binder)  # type: ignore[arg-type]
    writer.detail_interval = 3.0

    def ask(message: str, reason: str = "Unschedulable") -> None:
        cond = {"type": "PodGroupScheduled", "status": "False", "reason": reason, "message": message}
        assert writer.write_status(group, {"conditions": [dict(cond, lastTransitionTime="t")]})

    def written(n: int) -> None:
        wait_for(lambda: len(patched) == n and "g" not in str(writer._pending), 10, f"{n} writes")

    try:
        ask("waits for members\n1 of 4")
        written(1)
        ask("waits for members\n2 of 4")  # details: the first such write goes at once
        written(2)
        t = time.monotonic()
        ask("waits for members\n3 of 4")  # details again: their turn comes after the interval
        ask("waits for members\n4 of 4")  # the latest details replace them
        written(3)
        assert [m for _t, m in patched] == [
            "waits for members\n1 of 4",
            "waits for members\n2 of 4",
            "waits for members\n4 of 4",
        ]
        assert patched[2][0] - t > 2.5
        t = time.monotonic()
        ask("waits for members\n5 of 4")  # waits its turn ...
        ask("fits nowhere", "Unschedulable")  # ... until a new verdict comes: at once, with it
        written(4)
        assert patched[3][1] == "fits nowhere" and patched[3][0] - t < 2.0
    finally:
        loop.close(wait=True)


@pytest.mark.parametrize("path", ["binding cycle", "in the loop"])
def test_a_pending_pods_status_write_in_flight_lands_before_its_binding(
    server: FakeServer, path: str
) -> None:
    """The PodScheduled=False patch of a pending pod goes out on the binding loop; when the pod is bound
    while it is still in flight (a binding cycle, or pods/binding from the scheduling loop), the binding
    waits for it: landing after the binding, it would mark a bound pod unschedulable."""
    from types import SimpleNamespace

    from kdra.kube.binder import KubeBinder, _PendingStatus
    from kdra.kube.bindjob import BindJob
    from kdra.scheduler.podinfo import PodInfo

    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "uid": "pu", "resourceVersion": "1"},
        "spec": {"containers": []},
    }
    release = threading.Event()
    landed: list[str] = []

    def status(h: Handler, q: Any, body: Any) -> None:
        release.wait(10)
        landed.append("PodScheduled=False")
        h.reply(200, dict(pod, status=body["status"]))

    def binding(h: Handler, q: Any, body: Any) -> None:
        landed.append("binding")
        h.reply(201, {"kind": "Status", "status": "Success"})

    server.routes[("PATCH", "/api/v1/namespaces/ns/pods/p/status")] = status
    server.routes[("POST", "/api/v1/namespaces/ns/pods/p/binding")] = binding
    server.routes[("POST", "/api/v1/namespaces/ns/events")] = lambda h, q, b: h.reply(201, b)
    client = client_for(server)
    store = SimpleNamespace(
        client=client,
        watch=lambda *a, **k: None,
        wake=lambda: None,
        try_get=lambda kind, name, namespace="": pod,
        apply_written=lambda kind, obj: obj,
        bind=client.bind,
    )
    binder = KubeBinder(store, None, scheduler_name="kdra", identity="t", bind_workers=4)  # type: ignore[arg-type]
    why = "0/1 nodes are available: 1 cannot allocate all claims."
    binder._record_status(_PendingStatus("ns", "p", "pu", "Unschedulable", why, why), 0.0)
    wait_for(lambda: any(m == "PATCH" for m, *_ in server.log), 10, "the status write sent")
    threading.Timer(0.5, release.set).start()  # the status write answered half a second later
    pi = PodInfo(pod)
    if path == "binding cycle":
        job = BindJob(pi, "n1", [], [])
        binder.inflight[pi.uid] = job
        binder._submit(job)
    else:
        binder._bind(SimpleNamespace(dra=SimpleNamespace(choices={})), pi, "n1", None, None)  # type: ignore[arg-type]
    wait_for(lambda: len(landed) == 2, 10, "both writes")
    binder._loop.close(wait=True)
    assert landed == ["PodScheduled=False", "binding"]


def test_a_pending_pods_explanation_changed_below_its_first_line_is_rewritten_at_most_every_10s(
    server: FakeServer,
) -> None:
    """A new verdict (first line) is written at once; the same verdict with other details (a note that
    comes and goes from one session to the next) at most every 10 s, the latest details then: a loop
    running many sessions a second does not rewrite the pod each time."""
    from types import SimpleNamespace

    from kdra.kube.binder import STATUS_DETAIL_INTERVAL, KubeBinder
    from kdra.scheduler.framework import unschedulable
    from kdra.scheduler.podinfo import PodInfo

    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "uid": "pu", "resourceVersion": "1"},
        "spec": {"containers": []},
    }
    cached = {"pod": pod}
    messages: list[str] = []

    def status(h: Handler, q: Any, body: Any) -> None:
        messages.append(body["status"]["conditions"][0]["message"])
        h.reply(200, dict(pod, status=body["status"]))

    server.routes[("PATCH", "/api/v1/namespaces/ns/pods/p/status")] = status
    server.routes[("POST", "/api/v1/namespaces/ns/events")] = lambda h, q, b: h.reply(201, b)
    client = client_for(server)
    store = SimpleNamespace(
        client=client,
        watch=lambda *a, **k: None,
        wake=lambda: None,
        try_get=lambda kind, name, namespace="": cached["pod"],
        apply_written=lambda kind, obj: cached.update(pod=obj),
    )
    binder = KubeBinder(store, None, scheduler_name="kdra", identity="t", bind_workers=4)  # type: ignore[arg-type]
    pi = PodInfo(pod)

    def settle(now: float) -> None:
        wait_for(
            lambda: binder.finish_binds(None, now) >= 0 and not binder._status_writes,  # type: ignore[arg-type]
            10,
            "the write taken in",
        )

    t = 1000.0
    binder.record_unschedulable(pi, t, unschedulable("gang g waits"), "gang g waits", "reclaim blocked: q1")
    settle(t)
    binder.record_unschedulable(pi, t + 1, unschedulable("gang g waits"), "gang g waits", None)
    settle(t + 1)
    binder.record_unschedulable(
        pi, t + 2, unschedulable("gang g waits"), "gang g waits", "reclaim blocked: q2"
    )
    settle(t + 2)
    # the details changed at t + 1, written; again at t + 2: not before t + 11
    assert messages == ["gang g waits\nreclaim blocked: q1", "gang g waits"]
    assert binder.next_status_retry() == t + 1 + STATUS_DETAIL_INTERVAL
    binder.retry_status_writes(t + 1 + STATUS_DETAIL_INTERVAL)
    settle(t + 1 + STATUS_DETAIL_INTERVAL)
    assert messages[-1] == "gang g waits\nreclaim blocked: q2"  # the latest, when due
    binder.record_unschedulable(pi, t + 12, unschedulable("only 2 of 4 fit"), "only 2 of 4 fit", None)
    settle(t + 12)
    assert messages[-1] == "only 2 of 4 fit"  # a new verdict: at once
    binder._loop.close(wait=True)


def test_wake_ends_the_loops_wait_for_watch_events(server: FakeServer) -> None:
    """What the binding loop leaves for the scheduling loop (a status write's answer, then the explanation
    that waited for it) is taken in at once: the write's own watch event may have woken the loop before
    it was there, and the loop would sleep until the next event or its timeout (0.5 s a time)."""
    store = KubeStore(client_for(server), kinds=("Node",))  # no watches: nothing else wakes it
    threading.Timer(0.2, store.wake).start()
    t0 = time.monotonic()
    assert store.process_events(timeout=30) == 0
    assert time.monotonic() - t0 < 10
