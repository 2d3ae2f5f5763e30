"""The exporter's HTTP endpoint: `/metrics` (text format 0.0.4, gzip when asked), `/healthz`."""

from __future__ import annotations

import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kdra.errors import InputError
from kdra.observe.exposition import CONTENT_TYPE
from kdra.observe.model import FleetState


def parse_listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InputError(f"--listen: Invalid value: {value!r}: must be HOST:PORT (e.g. 127.0.0.1:9405)")
    return host.strip("[]") or "0.0.0.0", int(port)


def gzip_member(data: bytes) -> bytes:
    comp = zlib.compressobj(1, zlib.DEFLATED, 31)  # wbits 31: gzip framing
    return comp.compress(data) + comp.flush()


class _Handler(BaseHTTPRequestHandler):
    server: MetricsServer

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            parts, encoding = self.server.payload("gzip" in (self.headers.get("Accept-Encoding") or ""))
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            if encoding:
                self.send_header("Content-Encoding", encoding)
            self.send_header("Content-Length", str(sum(len(p) for p in parts)))
            self.end_headers()
            self.wfile.writelines(parts)
            return
        if path in ("/healthz", "/readyz"):
            body, ok = self.server.health()
            self.send_response(200 if ok else 503)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
        elif path == "/":
            body = b'<html><body><a href="/metrics">metrics</a></body></html>\n'
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
        else:
            body = b"not found\n"
            self.send_response(404)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # quiet: one line per scrape is noise
        pass


class MetricsServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, state: FleetState, address: tuple[str, int]) -> None:
        super().__init__(address, _Handler)
        self.state = state
        self.ready = threading.Event()
        self.health_detail = "starting"
        self._gz: tuple[int, list[bytes]] | None = None
        self._gz_members: dict[int, tuple[bytes, bytes]] = {}
        self._gz_lock = threading.Lock()
        self.scrapes = 0

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        if isinstance(host, bytes):
            host = host.decode()
        return f"http://{host}:{port}/metrics"

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
        ok = self.ready.is_set()
        return (("ok\n" if ok else f"{self.health_detail}\n").encode(), ok)

    def serve_in_thread(self) -> threading.Thread:
        t = threading.Thread(target=self.serve_forever, name="kdra-exporter-http", daemon=True)
        t.start()
        return t
