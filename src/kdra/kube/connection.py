"""The connections under kdra's Kubernetes client (kdra.kube.client): keep-alive HTTP/1.1 over TCP or TLS.

- `HTTPConnection`, `HTTPSConnection`: `http.client` connections that send a whole request in one write,
  after a last check (the client's write fence); one per thread in `KubeClient`'s pool.
- `AsyncConnection`, `read_head`, `read_response`: the same over asyncio streams, one per request in flight
  on an event loop (`KubeClient.arequest`).
- `dropped`: whether the server closed a kept-alive connection (urllib3's is_connection_dropped), so it is
  replaced before it is reused.
- `proxy_for`: the HTTP proxy a kubeconfig's cluster (proxy-url) or the environment names, if any.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import select
import ssl
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

from kdra.errors import InputError
from kdra.kube.kubeconfig import KubeConfig


class HTTPConnection(http.client.HTTPConnection):
    """HTTPConnection that sends a whole request (headers and body) in one write, after a last check.

    `request()` only builds it; `release(check)` runs `check` (the write fence) and then sends it. So the
    fence runs once the connection is made, the credential fetched and the request built, immediately
    before its first byte goes out: nothing slow (a TCP or TLS handshake, an exec credential plugin, the
    GIL wait of a busy process) lies between the check and the send, where a paused process would send a
    stale write when it wakes; and the server never holds half a request (headers without their body)
    across a pause, to apply it later."""

    _held: list[bytes] | None = None
    connect_timeout: float | None = None  # for the connection only; `timeout` is the read timeout

    def connect(self) -> None:
        read = self.timeout
        if self.connect_timeout is not None:
            self.timeout = self.connect_timeout if read is None else min(read, self.connect_timeout)
        try:
            self.open_socket()
        finally:
            self.timeout = read
        if self.sock is not None:
            self.sock.settimeout(read)

    def open_socket(self) -> None:
        http.client.HTTPConnection.connect(self)

    def request(self, *args: Any, **kw: Any) -> None:
        if self.sock is None:
            self.connect()  # a proxy's CONNECT is sent here, before the request is held
        self._held = []
        try:
            super().request(*args, **kw)
        except BaseException:
            self._held = None
            raise

    def send(self, data: Any) -> None:
        if self._held is None:
            super().send(data)
        else:
            self._held.append(bytes(data))

    def release(
        self, check: Callable[[], None] | None = None, after: Callable[[], None] | None = None
    ) -> None:
        """Send the request built by request(): `check` first (it may refuse by raising), `after` once the
        bytes are handed to the socket or failed to be (only when `check` passed)."""
        data, self._held = b"".join(self._held or ()), None
        if check is not None:
            check()
        assert self.sock is not None, "connect() before request()"
        try:
            self.sock.sendall(data)
        finally:
            if after is not None:
                after()


class HTTPSConnection(HTTPConnection, http.client.HTTPSConnection):
    """HTTPSConnection whose certificate check may use another name (kubeconfig tls-server-name)."""

    server_name: str | None = None

    def open_socket(self) -> None:
        http.client.HTTPConnection.connect(self)
        host = self.server_name or self._tunnel_host or self.host  # type: ignore[attr-defined]
        self.sock = self._context.wrap_socket(self.sock, server_hostname=host)  # type: ignore[attr-defined]


def dropped(conn: http.client.HTTPConnection) -> bool:
    """A kept-alive connection is dead when its socket is readable while no request is out: the server
    closed it (FIN, TLS close_notify) or sent something unasked for. urllib3's is_connection_dropped."""
    sock = conn.sock
    if sock is None:
        return False
    try:
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return True
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def proxy_for(config: KubeConfig, scheme: str, host: str) -> tuple[str, int, dict[str, str]] | None:
    """The HTTP CONNECT proxy for the API server: the kubeconfig's proxy-url, else $HTTPS_PROXY /
    $HTTP_PROXY minus $NO_PROXY (client-go's http.ProxyFromEnvironment); loopback is never proxied."""
    url = config.proxy_url
    if not url:
        if host in ("localhost", "::1") or host.startswith("127."):
            return None
        env = urllib.request.getproxies_environment()
        url = env.get(scheme)
        bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
        if not url or bypass(host, env):
            return None
    p = urllib.parse.urlsplit(url if "://" in url else "http://" + url)
    if p.scheme not in ("http", ""):
        raise InputError(f"{config.describe()}: proxy {p.scheme}://{p.hostname}: only http:// proxies")
    headers: dict[str, str] = {}
    if p.username:
        import base64

        raw = f"{urllib.parse.unquote(p.username)}:{urllib.parse.unquote(p.password or '')}".encode()
        headers["Proxy-Authorization"] = "Basic " + base64.b64encode(raw).decode()
    return (p.hostname or "", p.port or 80, headers)


class AsyncConnection:
    """One keep-alive HTTP/1.1 connection of an event loop's pool (KubeClient.arequest)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, generation: int) -> None:
        self.reader = reader
        self.writer = writer
        self.generation = generation  # of the credentials it was made with (a client certificate)
        self.used_at = time.monotonic()

    def dead(self) -> bool:
        """The server closed it (or it failed, or sent something unasked for) while it sat idle: as
        `dropped`, the socket is asked, since the loop may not have run since the FIN came."""
        if self.writer.is_closing() or self.reader.at_eof():
            return True
        sock = self.writer.get_extra_info("socket")
        if sock is None:
            return False
        try:
            readable, _, _ = select.select([sock], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(readable)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


def host_header(host: str, port: int, default: int | None) -> str:
    h = f"[{host}]" if ":" in host else host
    return h if port == default else f"{h}:{port}"


async def read_head(reader: asyncio.StreamReader) -> tuple[str, int, dict[str, str]]:
    """An HTTP response's status line and headers (names lower-cased)."""
    line = await reader.readline()
    if not line:
        raise http.client.RemoteDisconnected("Remote end closed connection without response")
    parts = line.decode("latin-1").split(None, 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise http.client.BadStatusLine(line.decode("latin-1").strip())
    headers: dict[str, str] = {}
    while True:
        h = await reader.readline()
        if not h:
            raise http.client.IncompleteRead(b"")
        if h in (b"\r\n", b"\n"):
            return parts[0], int(parts[1]), headers
        name, _, value = h.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()


async def read_response(reader: asyncio.StreamReader, method: str) -> tuple[int, dict[str, str], bytes, bool]:
    """(status, headers, body, whether the connection may be used again): Content-Length, chunked or
    up to the end of the connection, as http.client reads them."""
    version, code, headers = await read_head(reader)
    while 100 <= code < 200:  # 100 Continue and the like precede the answer
        version, code, headers = await read_head(reader)
    conn_hdr = headers.get("connection", "").lower()
    keep = conn_hdr != "close" if version == "HTTP/1.1" else "keep-alive" in conn_hdr
    if method == "HEAD" or code in (204, 304):
        return code, headers, b"", keep
    if "chunked" in headers.get("transfer-encoding", "").lower():
        parts: list[bytes] = []
        while True:
            size = int((await reader.readline()).split(b";", 1)[0].strip() or b"x", 16)
            if size == 0:
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return code, headers, b"".join(parts), keep
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)
    length = headers.get("content-length")
    if length is not None:
        return code, headers, await reader.readexactly(int(length)), keep
    return code, headers, await reader.read(), False
