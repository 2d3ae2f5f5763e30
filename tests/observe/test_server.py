"""kdra.observe.server under hostile clients: idle sockets cost no thread and are closed after the read
timeout, connections beyond the limit are refused while scrapes go on; optional TLS, bearer-token and
client-certificate authentication of /metrics with the probes left open; health check listings."""

from __future__ import annotations

import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from kdra.errors import InputError
from kdra.observe.model import FleetState
from kdra.observe.server import HealthChecks, MetricsServer, ServingOptions
from support.pki import make_pki


def serve(options: ServingOptions | None = None) -> MetricsServer:
    server = MetricsServer(FleetState(), ("127.0.0.1", 0), options=options)
    server.ready.set()
    server.serve_in_thread()
    return server


@pytest.fixture
def plain() -> Iterator[MetricsServer]:
    s = serve(ServingOptions(workers=2, max_connections=40, read_timeout=0.5))
    yield s
    s.shutdown()
    s.server_close()


def get(url: str, **kw: object) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers=kw.pop("headers", {}))  # type: ignore[arg-type]
    try:
        with urllib.request.urlopen(req, timeout=5, **kw) as r:  # type: ignore[arg-type]
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_idle_connections_hold_no_thread_and_are_closed(plain: MetricsServer) -> None:
    threads_before = threading.active_count()
    idle = [socket.create_connection(plain.server_address[:2]) for _ in range(30)]
    try:
        time.sleep(0.1)
        assert get(plain.url)[0] == 200  # scrapes go on beside 30 silent sockets
        assert threading.active_count() <= threads_before + 1
        assert plain.open_connections >= 30
        time.sleep(1.0)  # past the read timeout: the server closed them
        assert plain.open_connections == 0
        for s in idle:
            s.settimeout(1)
            assert s.recv(1) == b""
    finally:
        for s in idle:
            s.close()


def test_connections_beyond_the_limit_are_refused(plain: MetricsServer) -> None:
    idle = [socket.create_connection(plain.server_address[:2]) for _ in range(45)]
    try:
        deadline = time.monotonic() + 3
        while plain.rejected < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert plain.rejected >= 5
        assert plain.open_connections <= 40
    finally:
        for s in idle:
            s.close()
    time.sleep(0.3)
    assert get(plain.url)[0] == 200


def test_a_slow_request_is_cut_at_the_read_timeout(plain: MetricsServer) -> None:
    s = socket.create_connection(plain.server_address[:2])
    s.sendall(b"GET /metrics HTTP/1.1\r\n")  # and never the rest
    s.settimeout(3)
    t0 = time.monotonic()
    assert s.recv(100) == b""
    assert time.monotonic() - t0 < 2.5
    s.close()


def test_token_and_client_certificate_guard_metrics_not_probes(tmp_path: Path) -> None:
    pki = make_pki()
    for name in ("ca", "server", "server_key", "client", "client_key"):
        (tmp_path / f"{name}.pem").write_bytes(pki[name])
    tokens = tmp_path / "tokens"
    tokens.write_text("scraper-token\n")
    server = serve(
        ServingOptions(
            tls_cert_file=str(tmp_path / "server.pem"),
            tls_key_file=str(tmp_path / "server_key.pem"),
            client_ca_file=str(tmp_path / "ca.pem"),
            token_file=str(tokens),
        )
    )
    try:
        assert server.url.startswith("https://127.0.0.1:")
        anon = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
        assert get(server.url, context=anon)[0] == 401
        assert get(server.url.replace("/metrics", "/readyz"), context=anon) == (200, b"ok\n")
        assert get(server.url, context=anon, headers={"Authorization": "Bearer wrong"})[0] == 401
        assert get(server.url, context=anon, headers={"Authorization": "Bearer scraper-token"})[0] == 200
        tokens.write_text("rotated\n")
        import os

        os.utime(tokens, (time.time() + 5, time.time() + 5))
        assert get(server.url, context=anon, headers={"Authorization": "Bearer scraper-token"})[0] == 401
        assert get(server.url, context=anon, headers={"Authorization": "Bearer rotated"})[0] == 200
        with_cert = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
        with_cert.load_cert_chain(str(tmp_path / "client.pem"), str(tmp_path / "client_key.pem"))
        assert get(server.url, context=with_cert)[0] == 200
        assert server.unauthorized == 3
    finally:
        server.shutdown()
        server.server_close()
    with pytest.raises(InputError, match="go together"):
        ServingOptions(tls_cert_file="x").validate()
    with pytest.raises(InputError, match="needs TLS"):
        ServingOptions(client_ca_file="x").validate()


def test_health_checks_list_what_fails() -> None:
    checks = HealthChecks()
    state = {"synced": False}
    checks.add("readyz", "informer-sync", lambda: None if state["synced"] else "waiting for the lists")
    assert checks.run("healthz") == (True, b"ok\n")
    ok, body = checks.run("readyz")
    assert not ok and body == b"[-]informer-sync failed: waiting for the lists\nreadyz check failed\n"
    state["synced"] = True
    assert checks.run("readyz", verbose=True) == (True, b"[+]informer-sync ok\nreadyz check passed\n")


def test_scheduler_endpoint_is_ready_as_standby_and_once_synced() -> None:
    from types import SimpleNamespace

    from kdra.cluster.store import MemoryStore
    from kdra.observe.sources import SchedulerEndpoint

    ep = SchedulerEndpoint(("127.0.0.1", 0))
    base = ep.url.replace("/metrics", "")
    try:
        ep.role = "starting"
        assert get(base + "/readyz")[0] == 503
        ep.role = "standby"  # waiting for the lease: Ready, so a rollout and the PDB count it
        assert get(base + "/readyz?verbose") == (
            200,
            b"[+]ready ok\n[+]informer-sync ok\n[+]shutdown ok\nreadyz check passed\n",
        )
        ep.elector = SimpleNamespace(lost=False)
        ep.role = "starting"
        ep.attach(MemoryStore(), SimpleNamespace(attempt_observers=[]))
        assert get(base + "/readyz")[0] == 200 and get(base + "/healthz") == (200, b"ok\n")
        ep.elector.lost = True
        status, body = get(base + "/healthz")
        assert status == 503 and b"[-]leader-election failed: the leader lease was lost" in body
        ep.elector.lost = False
        ep.stall_after = 0.0
        time.sleep(0.05)
        assert b"[-]scheduling-loop failed" in get(base + "/livez")[1]
    finally:
        ep.shutdown()
        ep.server_close()
    assert ep.stopping
