"""The HTTP(S) endpoint of `kdra exporter` and `kdra scheduler --metrics-listen`: `/metrics` (text format
0.0.4, gzip when asked), `/healthz` and `/livez` (liveness), `/readyz` (readiness).

Bounded, so that idle or slow clients cannot exhaust it: one thread accepts and waits (with a selector, at
no thread's cost) for a connection's first bytes; a fixed pool of `workers` threads serves requests, each
socket read bounded by `read_timeout`; a connection that sends nothing within `read_timeout` is closed, and
beyond `max_connections` open ones new connections are closed at once (`rejected`). One request per
connection (HTTP/1.0), which Prometheus handles as it handles any exporter.

Optional TLS (`tls_cert_file`/`tls_key_file`) and authentication of `/metrics`: a bearer token from
`token_file` (re-read when it changes; several tokens, one per line) and/or a client certificate signed by
`client_ca_file`. Either one admits. The health endpoints stay open, as kube-scheduler's do
(`--authorization-always-allow-paths`), because kubelet probes carry no credentials; they show check names
and states, nothing else.

Health checks (`HealthChecks`) follow the Kubernetes convention: `?verbose` lists `[+]name ok` /
`[-]name failed: reason`; a failing endpoint answers 503 with that list.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import queue
import selectors
import socket
import ssl
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from kdra.errors import InputError, KdraError
from kdra.observe.exposition import CONTENT_TYPE
from kdra.observe.model import FleetState

OPEN_PATHS = frozenset({"/healthz", "/livez", "/readyz"})


def parse_listen(value: str, flag: str = "--listen") -> tuple[str, int]:
    """HOST:PORT (IPv6 in brackets). An empty host means every address, as `:9405` does in Go."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InputError(f"{flag}: Invalid value: {value!r}: must be HOST:PORT (e.g. 127.0.0.1:9405)")
    return host.strip("[]") or "0.0.0.0", int(port)


class ListenError(KdraError):
    """A well-formed HOST:PORT that cannot be listened on (in use, not an address of this host, a port the
    process may not bind): the machine, not the input, so exit 1 (kdra.cli.conventions.EXIT_CODES)."""

    exit_code = 1


def listen_error(flag: str, value: str, exc: OSError) -> KdraError:
    """One line naming the flag and the address for a failed bind. socket.create_server re-raises the bind
    error with "(while attempting to bind on address (...))" appended; the original is its __context__. A
    host name that does not resolve is the input's mistake (exit 2)."""
    cause = exc.__context__ if isinstance(exc.__context__, OSError) else exc
    reason = cause.strerror or str(cause)
    if isinstance(cause, socket.gaierror):
        return InputError(f"{flag} {value}: cannot resolve the host: {reason}")
    return ListenError(f"{flag} {value}: cannot listen there: {reason}")


def gzip_member(data: bytes) -> bytes:
    comp = zlib.compressobj(1, zlib.DEFLATED, 31)  # wbits 31: gzip framing
    return comp.compress(data) + comp.flush()


@dataclass
class ServingOptions:
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    client_ca_file: str | None = None
    token_file: str | None = None
    workers: int = 4
    max_connections: int = 128
    read_timeout: float = 10.0

    def validate(self) -> None:
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise InputError("--metrics-tls-cert-file and --metrics-tls-key-file go together")
        if self.client_ca_file and not self.tls_cert_file:
            raise InputError(
                "--metrics-client-ca-file needs TLS (--metrics-tls-cert-file, --metrics-tls-key-file)"
            )
        if self.token_file and not os.path.isfile(self.token_file):
            raise InputError(f"--metrics-token-file {self.token_file}: No such file")
        if self.workers < 1 or self.max_connections < 1 or self.read_timeout <= 0:
            raise InputError("metrics server: workers, max connections and read timeout must be positive")


class HealthChecks:
    """Named checks per endpoint ("healthz", "readyz"); a check returns None when fine, else why not."""

    def __init__(self) -> None:
        self._checks: dict[str, dict[str, Callable[[], str | None]]] = {"healthz": {}, "readyz": {}}
        self.add("healthz", "ping", lambda: None)

    def add(self, endpoint: str, name: str, check: Callable[[], str | None]) -> None:
        self._checks[endpoint][name] = check

    def run(self, endpoint: str, verbose: bool = False) -> tuple[bool, bytes]:
        lines = []
        ok = True
        for name, check in self._checks[endpoint].items():
            try:
                why = check()
            except Exception as e:  # a broken check fails, it does not break the endpoint
                why = f"{type(e).__name__}"
            if why is None:
                lines.append(f"[+]{name} ok")
            else:
                ok = False
                lines.append(f"[-]{name} failed: {why}")
        if ok and not verbose:
            return True, b"ok\n"
        lines.append(f"{endpoint} check {'passed' if ok else 'failed'}")
        return ok, ("\n".join(lines) + "\n").encode()


class _Handler(BaseHTTPRequestHandler):
    server: MetricsServer  # type: ignore[assignment]
    protocol_version = "HTTP/1.0"

    def setup(self) -> None:
        self.request.settimeout(self.server.options.read_timeout)
        super().setup()

    def do_GET(self) -> None:
        path, _, query = self.path.partition("?")
        if path in OPEN_PATHS:
            endpoint = "readyz" if path == "/readyz" else "healthz"
            ok, body = self.server.checks.run(endpoint, verbose="verbose" in query)
            self._reply(200 if ok else 503, body, "text/plain; charset=utf-8")
            return
        if not self.server.authorized(self):
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Bearer realm="kdra"')
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", "13")
            self.end_headers()
            self.wfile.write(b"Unauthorized\n")
            return
        if path == "/metrics":
            parts, encoding = self.server.payload("gzip" in (self.headers.get("Accept-Encoding") or ""))
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            if encoding:
                self.send_header("Content-Encoding", encoding)
            self.send_header("Content-Length", str(sum(len(p) for p in parts)))
            self.end_headers()
            self.wfile.writelines(parts)
        elif path == "/":
            self._reply(200, b'<html><body><a href="/metrics">metrics</a></body></html>\n', "text/html")
        else:
            self._reply(404, b"not found\n", "text/plain; charset=utf-8")

    def _reply(self, code: int, body: bytes, ctype: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # quiet: one line per scrape is noise
        pass


class MetricsServer:
    """See the module docstring. `ready` and `health_detail` make the "ready" readiness check (the
    exporter sets `ready` once its first list is done); more checks go to `checks`."""

    def __init__(
        self,
        state: FleetState,
        address: tuple[str, int],
        *,
        options: ServingOptions | None = None,
        checks: HealthChecks | None = None,
    ) -> None:
        self.state = state
        self.options = options or ServingOptions()
        self.options.validate()
        self._tls: ssl.SSLContext | None = None
        if self.options.tls_cert_file and self.options.tls_key_file:
            from kdra.kube.tls import server_context

            self._tls = server_context(
                self.options.tls_cert_file, self.options.tls_key_file, self.options.client_ca_file
            )
        host = address[0]
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.socket = socket.create_server(address, family=family, backlog=128)
        self.socket.setblocking(False)
        self.server_address: tuple[Any, ...] = self.socket.getsockname()
        self.ready = threading.Event()
        self.health_detail = "starting"
        self.checks = checks or HealthChecks()
        self.checks.add("readyz", "ready", lambda: None if self.ready.is_set() else self.health_detail)
        self.scrapes = 0
        self.rejected = 0  # connections closed because max_connections were open
        self.unauthorized = 0
        self._gz: tuple[int, list[bytes]] | None = None
        self._gz_members: dict[int, tuple[bytes, bytes]] = {}
        self._gz_lock = threading.Lock()
        self._tokens: tuple[float, list[bytes]] = (-1.0, [])
        self._queue: queue.Queue[socket.socket | None] = queue.Queue()
        self._open = 0  # connections accepted and not yet closed
        self._open_lock = threading.Lock()
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._stopped.set()
        self._workers: list[threading.Thread] = []

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        if isinstance(host, bytes):
            host = host.decode()
        if ":" in host:
            host = f"[{host}]"
        return f"{'https' if self._tls else 'http'}://{host}:{port}/metrics"

    # -- what it serves --------------------------------------------------------------------------------
    def payload(self, gzip_ok: bool) -> tuple[list[bytes], str]:
        self.scrapes += 1
        version, parts = self.state.render_parts()
        if not gzip_ok:
            return parts, ""
        with self._gz_lock:  # compress once per state version, whatever the number of scrapers
            if self._gz is None or self._gz[0] != version:
                # One gzip member per piece, cached by the piece: pieces that did not change since the last
                # scrape (most of them) are not compressed again. A gzip stream may hold several members
                # (RFC 1952 2.2); Go's gzip reader, which Prometheus uses, reads them all.
                cache: dict[int, tuple[bytes, bytes]] = {}
                out = []
                for piece in parts:
                    hit = self._gz_members.get(id(piece))
                    if hit is None or hit[0] is not piece:
                        hit = (piece, gzip_member(piece))
                    cache[id(piece)] = hit
                    out.append(hit[1])
                self._gz_members = cache
                self._gz = (version, out)
            return self._gz[1], "gzip"

    def warm(self) -> None:
        """Render and compress once, so the first scrape costs what later ones do (before `ready`)."""
        self.payload(True)
        self.scrapes -= 1

    def health(self) -> tuple[bytes, bool]:
        ok, body = self.checks.run("readyz")
        return body, ok

    def authorized(self, handler: BaseHTTPRequestHandler) -> bool:
        opts = self.options
        if not opts.token_file and not opts.client_ca_file:
            return True
        if opts.client_ca_file and isinstance(handler.connection, ssl.SSLSocket):
            with contextlib.suppress(ValueError, ssl.SSLError):
                if handler.connection.getpeercert():  # verified against the client CA by the handshake
                    return True
        if opts.token_file:
            auth = handler.headers.get("Authorization") or ""
            if auth.startswith("Bearer "):
                given = auth[7:].strip().encode()
                if any(hmac.compare_digest(given, t) for t in self._valid_tokens()):
                    return True
        self.unauthorized += 1
        return False

    def _valid_tokens(self) -> list[bytes]:
        path = self.options.token_file
        assert path is not None
        try:
            mtime = os.stat(path).st_mtime
        except OSError:
            return self._tokens[1]  # keep the last tokens read while the file is being replaced
        if mtime != self._tokens[0]:
            try:
                with open(path, "rb") as f:
                    tokens = [line.strip() for line in f.read().splitlines() if line.strip()]
            except OSError:
                return self._tokens[1]
            self._tokens = (mtime, tokens)
        return self._tokens[1]

    # -- serving ---------------------------------------------------------------------------------------
    def serve_forever(self) -> None:
        self._stop.clear()
        self._stopped.clear()
        self._workers = [
            threading.Thread(target=self._work, name=f"kdra-http-{i}", daemon=True)
            for i in range(self.options.workers)
        ]
        for t in self._workers:
            t.start()
        sel = selectors.DefaultSelector()
        sel.register(self.socket, selectors.EVENT_READ)
        waiting: dict[socket.socket, float] = {}
        timeout = self.options.read_timeout
        try:
            while not self._stop.is_set():
                for key, _ in sel.select(timeout=0.2):
                    if key.fileobj is self.socket:
                        self._accept(sel, waiting)
                        continue
                    conn = key.fileobj
                    assert isinstance(conn, socket.socket)
                    sel.unregister(conn)
                    waiting.pop(conn, None)
                    self._queue.put(conn)  # bounded by max_connections, counted in _open
                now = time.monotonic()
                for conn, since in list(waiting.items()):
                    if now - since > timeout:  # connected and said nothing: closed
                        sel.unregister(conn)
                        del waiting[conn]
                        self._close(conn)
        finally:
            for conn in waiting:
                self._close(conn)
            sel.close()
            for _ in self._workers:
                self._queue.put(None)
            self._stopped.set()

    def _accept(self, sel: selectors.BaseSelector, waiting: dict[socket.socket, float]) -> None:
        while True:
            try:
                conn, _addr = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            with self._open_lock:
                full = self._open >= self.options.max_connections
                if not full:
                    self._open += 1
            if full:
                self.rejected += 1
                with contextlib.suppress(OSError):
                    conn.close()
                continue
            conn.setblocking(False)
            sel.register(conn, selectors.EVENT_READ)
            waiting[conn] = time.monotonic()

    def _close(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            conn.close()
        with self._open_lock:
            self._open -= 1

    def _work(self) -> None:
        while True:
            conn = self._queue.get()
            if conn is None:
                return
            sock: socket.socket = conn
            try:
                conn.setblocking(True)
                conn.settimeout(self.options.read_timeout)
                if self._tls is not None:
                    sock = self._tls.wrap_socket(conn, server_side=True)  # takes conn's descriptor over
                try:
                    addr = sock.getpeername()
                except OSError:
                    addr = ("", 0)
                _Handler(sock, addr, self)  # type: ignore[arg-type]
            except (OSError, ssl.SSLError, ValueError):
                pass  # a client that vanished, timed out or failed the handshake
            finally:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                if sock is not conn:
                    with contextlib.suppress(OSError):
                        sock.close()
                self._close(conn)

    def serve_in_thread(self) -> threading.Thread:
        t = threading.Thread(target=self.serve_forever, name="kdra-metrics-http", daemon=True)
        t.start()
        return t

    def shutdown(self) -> None:
        self._stop.set()
        self._stopped.wait(5)

    def server_close(self) -> None:
        with contextlib.suppress(OSError):
            self.socket.close()

    @property
    def open_connections(self) -> int:
        return self._open
