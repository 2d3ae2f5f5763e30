"""A small Kubernetes API client: configuration, REST verbs, rate limits, retries and watches.

kdra's only REST client (`kdra scheduler`, `kdra driver sim`, `kdra exporter`, the test harness, ...).
Standard library only: `http.client` with one keep-alive TLS connection per thread, so a scheduler that
writes thousands of objects pays one TLS handshake, not thousands; and for coroutines (`arequest`, the
binder's event loop: many requests in flight on one thread) asyncio streams, one kept-alive connection
per request in flight, with the same rules (the connections themselves: kdra.kube.connection).

- Configuration (kdra.kube.kubeconfig): `KubeConfig.resolve(kubeconfig, context)` in client-go's order
  (--kubeconfig, $KUBECONFIG merged, in-cluster, ~/.kube/config); credentials (kdra.kube.credentials:
  tokens, rotating token files, exec plugins, client certificates) re-read or re-run after a 401.
- `KubeClient(config, qps=..., burst=...)`: client-go's token-bucket rate limit (qps 0: unlimited);
  `get/list/create/update/patch/delete`, subresources (`status`, `binding`), errors mapped to the store's
  (`NotFoundError`, `ConflictError`, `AlreadyExistsError`, `InvalidObjectError`) plus `ExpiredError`
  (410 Gone), `UnauthorizedError` (401), `ForbiddenError` (403, the API server's message names the verb
  and resource) and `UnavailableError` (connection failures, 5xx, 429 after retries).
- Retries (docs/kube-commands.md, "Connections and retries"): a kept-alive connection the server has
  closed (idle ones are closed after ~90 s) is noticed before it is reused, and one idle for
  `idle_timeout` is not reused. A request that failed before it was sent (connect refused or reset, a
  stale connection) is retried whatever its verb; one that failed after it was sent, and 5xx answers
  without Retry-After, only when a replay cannot do harm: reads, watches, PUTs conditional on a
  resourceVersion and merge or strategic-merge patches (condition patches). 429 and 5xx with Retry-After
  are retried for every verb, as client-go does. Any other write that fails after it was sent raises
  `UnavailableError` with `maybe_applied = True`.
- Paths: kdra.kube.resources (which kind lives at which API path, in which group and version).
- `watch_stream(kind, resource_version)`: one watch request, yielding (type, object) events including
  BOOKMARKs; `Reflector` (kdra.kube.store) turns it into a resuming, relisting watch.
- `kdra.kube.requests` logs one DEBUG line per request (verb, path, status, milliseconds; never a
  header or a body), as kubectl -v=6 does.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import functools
import http.client
import json
import logging
import os
import re
import socket
import ssl
import threading
import time
import urllib.parse
import urllib.request
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypedDict, Unpack, cast

from kdra.api.types import Obj
from kdra.cluster.store import (
    AlreadyExistsError,
    ConflictError,
    InvalidObjectError,
    NotFoundError,
    StoreError,
)
from kdra.kube.connection import (
    AsyncConnection,
    HTTPConnection,
    HTTPSConnection,
    dropped,
    host_header,
    proxy_for,
    read_head,
    read_response,
)
from kdra.kube.kubeconfig import KubeConfig
from kdra.kube.resources import is_namespaced, object_path, resource_info, resource_path
from kdra.kube.tls import client_context

log = logging.getLogger("kdra.kube")
request_log = logging.getLogger("kdra.kube.requests")


class ClientOptions(TypedDict, total=False):
    """KubeClient's options besides its config (the constructor's keyword arguments)."""

    qps: float
    burst: int
    timeout: float
    retries: int
    user_agent: str
    idle_timeout: float | None
    connect_timeout: float


Response = Obj | str | None  # a response body: JSON decoded, text (`/readyz`), or nothing

__all__ = ["KubeConfig"]


class ExpiredError(StoreError):
    """410 Gone: the requested resourceVersion is too old (compacted); relist."""

    reason = "Expired"


class UnavailableError(StoreError):
    """The API server could not be reached, or answered 5xx/429: retry later. `maybe_applied`: the
    request was sent before the connection failed, so a write may have been applied; `unreachable`: no
    connection could be made within CONNECT_TIMEOUT, or TLS refused the server's certificate (the message
    names the address). The input was valid: a command that ends on it exits 1, not 2."""

    reason = "ServiceUnavailable"
    exit_code = 1
    maybe_applied = False
    unreachable = False


class FencedError(StoreError):
    """A write refused before it was sent: this process may no longer write (its leader lease ran out)."""

    reason = "Fenced"


class ApiError(StoreError):
    """Any other error status; `code` is the HTTP status."""

    reason = "InternalError"


class UnauthorizedError(ApiError):
    """401: the API server did not accept the credentials (after one refresh of a token file or exec
    plugin credential). The command was valid but cannot be carried out: exit 1, as `kdra top` and
    `exporter --once` always did (every other command exited 2, "invalid input")."""

    reason = "Unauthorized"
    exit_code = 1


class ForbiddenError(ApiError):
    """403: RBAC (or an admission plugin) refused; the message says which verb on which resource. Exit 1,
    as for a 401."""

    reason = "Forbidden"
    exit_code = 1


_API_PATH = re.compile(r"^/apis/([^/]+/[^/]+)/(?:namespaces/[^/]+/)?([^/?]+)")


def _error_for(code: int, status: Obj, method: str, path: str) -> StoreError:
    reason = str(status.get("reason") or "")
    msg = f"{method} {path}: {code} {reason}: {status.get('message') or status}"
    served = _API_PATH.match(path.split("?", 1)[0]) if code == 404 and not reason else None
    if served is not None:
        # Not a Status: the API server's mux ("404 page not found"), so the group/version itself is not
        # served (DRA's resource.k8s.io/v1 before Kubernetes 1.34, a CRD not installed). It read
        # "404 : 404 page not found".
        msg = f"{method} {path}: 404 NotFound: the API server does not serve {served[1]} {served[2]}"
    cls: type[StoreError]
    if code == 404:
        cls = NotFoundError
    elif code == 409 and reason == "AlreadyExists":
        cls = AlreadyExistsError
    elif code == 409:
        cls = ConflictError
    elif code == 410:
        cls = ExpiredError
    elif code == 422:
        cls = InvalidObjectError
    elif code == 401:
        cls = UnauthorizedError
    elif code == 403:
        cls = ForbiddenError
    elif code == 429 or code >= 500:
        cls = UnavailableError
    else:
        cls = ApiError
    err = cls(msg)
    err.code = code
    err.status = status
    if served is not None:
        setattr(err, "not_served", served[1])  # noqa: B010 (an attribute of this error only: a NotFoundError)
        err.exit_code = 1  # valid, but this cluster cannot carry it out
    return err


# -- rate limit -----------------------------------------------------------------------------------------


class TokenBucket:
    """client-go's flowcontrol token bucket: `qps` tokens a second, at most `burst` saved; qps <= 0 off."""

    def __init__(self, qps: float, burst: int) -> None:
        self.qps = float(qps)
        self.burst = max(1, int(burst))
        self._tokens = float(self.burst)
        self._last = time.monotonic()
        self._lock = threading.Lock()

    def wait_time(self) -> float:
        """Take a token; return how long the caller must sleep before using it."""
        if self.qps <= 0:
            return 0.0
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1.0
            if self._tokens >= 0:
                return 0.0
            return -self._tokens / self.qps

    def accept(self) -> None:
        delay = self.wait_time()
        if delay > 0:
            time.sleep(delay)


# A kept-alive connection idle this long is replaced before use: the API server closes idle ones after
# ~90 s, and client-go's transport retires them (IdleConnTimeout) before that too.
IDLE_CONNECTION_SECONDS = 30.0

# -- the client -----------------------------------------------------------------------------------------

_CONTENT_TYPES = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
    "apply": "application/apply-patch+yaml",
}
_IDEMPOTENT_PATCHES = (_CONTENT_TYPES["merge"], _CONTENT_TYPES["strategic"], _CONTENT_TYPES["apply"])
_warned: set[tuple[str, str]] = set()


def _warn_once(source: str, what: str, text: str) -> None:
    if (source, what) not in _warned:
        _warned.add((source, what))
        log.warning("%s", text)


def replayable(method: str, body: object, content_type: str | None) -> bool:
    """Whether sending the request twice has the effect of sending it once (or fails harmlessly): reads,
    PUTs conditional on metadata.resourceVersion (a replay after success gets 409), merge, strategic-merge
    and apply patches. Creates, bindings, deletes, unconditional PUTs and JSON patches are not."""
    if method == "GET":
        return True
    if method == "PUT":
        return bool(isinstance(body, dict) and (body.get("metadata") or {}).get("resourceVersion"))
    return method == "PATCH" and content_type in _IDEMPOTENT_PATCHES


# How long a request waits for the API server to take a connection (TCP, a proxy's CONNECT, TLS), over all
# its attempts, before it fails naming the address: client-go's TLS handshake timeout, and what every kdra
# command (top, exporter --once, allocate, explain, export, driver sim, the scheduler) promises.
CONNECT_TIMEOUT = 10.0


class KubeClient:
    """REST client for one API server. Thread-safe: each thread keeps its own keep-alive connection."""

    def __init__(
        self,
        config: KubeConfig,
        *,
        qps: float = 50.0,
        burst: int = 100,
        timeout: float = 30.0,
        retries: int = 3,
        user_agent: str = "kdra",
        idle_timeout: float | None = None,
        connect_timeout: float = CONNECT_TIMEOUT,
    ) -> None:
        self.config = config
        url = urllib.parse.urlsplit(config.server)
        self.scheme = url.scheme or "https"
        self.host = url.hostname or "127.0.0.1"
        self.port = url.port or (443 if self.scheme == "https" else 80)
        self.prefix = url.path.rstrip("/")
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.retries = retries
        self.idle_timeout = idle_timeout  # None: IDLE_CONNECTION_SECONDS
        self.user_agent = user_agent
        self.limiter = TokenBucket(qps, burst)
        self.credentials = config.credentials()
        self._proxy = proxy_for(config, self.scheme, self.host)
        self._ssl: ssl.SSLContext | None = None
        self._ssl_generation = -1
        self._ssl_lock = threading.Lock()
        self._local = threading.local()
        # arequest's kept-alive connections, per event loop.
        self._async_pools: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, builtins.list[AsyncConnection]
        ]
        self._async_pools = weakref.WeakKeyDictionary()
        self.requests = 0  # counted, for benchmarks
        self.writes = 0  # of which writes (attempts sent)
        self.retried = 0  # requests sent again after a connection failure or a retryable status
        self.stale_connections = 0  # kept-alive connections found closed (or idle too long) before reuse
        # Called with (method, path) immediately before every write is sent (after the connect, the
        # credential and the request's bytes: see HTTPConnection); raising FencedError stops it.
        # The leader elector installs its lease-deadline check here, so no write of a replica that lost
        # its lease (paused, starved) reaches the API server, whichever thread sends it.
        self.write_fence: Callable[[str, str], None] | None = None
        # Called with (method, path) once a write that passed the fence was handed to the socket (or failed
        # to be): the elector reports one the lease ran out for meanwhile (a pause between the two).
        self.write_sent: Callable[[str, str], None] | None = None
        source = config.describe()
        if config.insecure and self.scheme == "https":
            _warn_once(
                source,
                "insecure",
                f"warning: {source}: insecure-skip-tls-verify is set: the API server's certificate is not "
                "verified, so anyone on the path can read and change this traffic",
            )
        if self.scheme == "http" and (
            config.token or config.token_file or config.exec or config.username is not None
        ):
            _warn_once(
                source,
                "cleartext",
                f"warning: {source}: server {config.server} is plain http://: the credentials are sent "
                "in cleartext",
            )

    @classmethod
    def from_kubeconfig(
        cls, path: str | os.PathLike[str], *, context: str | None = None, **kw: Unpack[ClientOptions]
    ) -> KubeClient:
        """From one kubeconfig file (`--kubeconfig FILE`)."""
        return cls(KubeConfig.load(path, context), **kw)

    @classmethod
    def from_config(
        cls,
        kubeconfig: str | os.PathLike[str] | None = None,
        *,
        context: str | None = None,
        **kw: Unpack[ClientOptions],
    ) -> KubeClient:
        """By client-go's loading rules: --kubeconfig, $KUBECONFIG, in-cluster, ~/.kube/config."""
        return cls(KubeConfig.resolve(kubeconfig, context), **kw)

    # -- transport -------------------------------------------------------------------------------------
    def _ssl_context(self) -> ssl.SSLContext:
        creds = self.credentials
        with self._ssl_lock:
            cert = creds.client_cert()  # may run an exec plugin once, which may bump the generation
            if self._ssl is None or self._ssl_generation != creds.generation:
                cfg = self.config
                self._ssl = client_context(
                    ca_file=cfg.ca_file,
                    ca_data=cfg.ca_data,
                    insecure=cfg.insecure,
                    cert=cert,
                    source=cfg.describe(),
                )
                self._ssl_generation = creds.generation
            return self._ssl

    def _connect(self, timeout: float | None, connect_timeout: float | None = None) -> HTTPConnection:
        proxy = self._proxy
        host, port = (proxy[0], proxy[1]) if proxy else (self.host, self.port)
        conn: HTTPConnection
        if self.scheme == "https":
            https = HTTPSConnection(host, port, timeout=timeout, context=self._ssl_context())
            https.server_name = self.config.tls_server_name
            conn = https
        else:
            conn = HTTPConnection(host, port, timeout=timeout)
        if proxy:
            conn.set_tunnel(self.host, self.port, headers=proxy[2])
        conn.connect_timeout = self.connect_timeout if connect_timeout is None else connect_timeout
        return conn

    def unreachable(self, what: str, exc: BaseException) -> UnavailableError:
        """The error of a request that could not connect (within connect_timeout, or refused on every
        attempt): the address, where it came from and why, worded the same for every request, so a command
        that reads several kinds says it once (`what` goes to the debug log)."""
        request_log.debug("%s: no connection: %s", what, exc)
        if isinstance(exc, TimeoutError | socket.timeout):
            why = f"no answer within {self.connect_timeout:g} s"
        else:
            why = getattr(exc, "strerror", None) or f"{type(exc).__name__}: {exc}"
        proxy = f" through proxy {self._proxy[0]}:{self._proxy[1]}" if self._proxy else ""
        err = UnavailableError(
            f"cannot reach the API server at {self.config.server}{proxy} ({self.config.describe()}): {why}"
        )
        err.unreachable = True
        return err

    def untrusted(self, what: str, exc: ssl.SSLCertVerificationError) -> UnavailableError:
        """The error of a request whose TLS handshake refused the API server's certificate (a wrong CA, a
        name the certificate does not carry). Retrying cannot help, so it is `unreachable` too: `kdra top`
        and `kdra exporter --once` stop at once instead of retrying until their timeout, as for a refused
        connection; worded the same for every request, so a command reading several kinds says it once."""
        request_log.debug("%s: certificate refused: %s", what, exc)
        err = UnavailableError(
            f"the API server's certificate at {self.config.server} is not trusted "
            f"({exc.verify_message}; {self.config.describe()})"
        )
        err.unreachable = True
        return err

    def _pooled(self) -> tuple[HTTPConnection, bool]:
        """This thread's kept-alive connection and whether it is being reused; a connection the server
        closed, idle for `idle_timeout`, or made with an older client certificate is replaced."""
        st = self._local
        conn: HTTPConnection | None = getattr(st, "conn", None)
        if conn is not None and conn.sock is not None:
            idle = IDLE_CONNECTION_SECONDS if self.idle_timeout is None else self.idle_timeout
            stale = (
                time.monotonic() - st.used_at > idle
                or st.generation != self.credentials.generation
                or dropped(conn)
            )
            if stale:
                self.stale_connections += 1
                self._drop_conn()
                conn = None
            else:
                return conn, True
        if conn is None:
            conn = st.conn = self._connect(self.timeout)
        st.generation = self.credentials.generation
        return conn, False

    def _drop_conn(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()
        self._local.conn = None

    def _headers(self, content_type: str | None) -> tuple[dict[str, str], str | None]:
        h = {"Accept": "application/json", "User-Agent": self.user_agent}
        creds = self.credentials
        token = creds.token()
        if token:
            h["Authorization"] = f"Bearer {token}"
        else:
            basic = creds.basic_auth()
            if basic:
                h["Authorization"] = f"Basic {basic}"
        for name, values in self.config.impersonate.items():
            h[name] = ",".join(values)  # http.client sends one header line; the server splits on ","
        if content_type:
            h["Content-Type"] = content_type
        return h, token

    def _unauthorized(self, token: str | None) -> bool:
        """A 401: refresh the credential that was used; True when a retry is worth it."""
        return self.credentials.refresh_after_unauthorized(token)

    def _prepare(
        self, method: str, path: str, body: object, params: dict[str, str] | None, content_type: str
    ) -> tuple[str, bytes | None, str | None, bool]:
        """What both transports send: the URL, the encoded body, its content type (none without a body)
        and whether the request may be sent again after a failure that leaves its fate unknown."""
        url = self.prefix + path
        if params:
            url += "?" + urllib.parse.urlencode(params)
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        ctype = content_type if data is not None else None
        return url, data, ctype, replayable(method, body, ctype)

    def request(
        self,
        method: str,
        path: str,
        body: object = None,
        *,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
        timeout: float | None = None,
        retry_429: bool = True,
    ) -> Response:
        """One API call, retried as the module docstring says. Raises the store's errors. JSON bodies
        come back decoded, others (`/readyz`'s `ok`) as text. `timeout` uses a connection of its own."""
        url, data, ctype, safe = self._prepare(method, path, body, params, content_type)
        attempt = 0
        refreshed = False
        connect_deadline = time.monotonic() + self.connect_timeout
        while True:
            self.limiter.accept()
            headers, token = self._headers(ctype)
            self.requests += 1
            if method != "GET":
                self.writes += 1
            t0 = time.monotonic()
            own = timeout is not None
            conn, reused = (self._connect(timeout), False) if own else self._pooled()
            conn.connect_timeout = max(0.05, connect_deadline - time.monotonic())
            fence = self.write_fence if method != "GET" else None
            phase = "connect"
            try:
                if conn.sock is None:
                    conn.connect()
                phase = "send"
                conn.request(method, url, body=data, headers=headers)
                if fence is None:
                    conn.release()
                else:
                    sent = self.write_sent
                    conn.release(
                        functools.partial(fence, method, path),
                        None if sent is None else functools.partial(sent, method, path),
                    )
                phase = "response"
                resp = conn.getresponse()
                raw = resp.read()
            except FencedError:
                self._close(conn, own)  # it holds a request that was never sent
                raise
            except ssl.SSLCertVerificationError as e:
                self._close(conn, own)
                raise self.untrusted(f"{method} {path}", e) from None
            except (OSError, http.client.HTTPException) as e:
                self._close(conn, own)
                attempt += 1
                time.sleep(
                    self._after_failure(method, path, url, phase, e, attempt, safe, reused, connect_deadline)
                )
                continue
            if own:
                conn.close()
            else:
                self._local.used_at = time.monotonic()
            request_log.debug("%s %s %d %.0fms", method, url, resp.status, (time.monotonic() - t0) * 1000)
            if resp.status >= 400:
                if resp.status == 401 and not refreshed and self._unauthorized(token):
                    refreshed = True  # the token file rotated, or the exec plugin gave a new credential
                    continue
                attempt += 1
                delay = self._after_error_status(
                    method, path, resp.status, raw, resp.getheader("Retry-After"), attempt, safe, retry_429
                )
                time.sleep(delay)
                continue
            return _decoded(raw)

    # -- the asyncio transport -------------------------------------------------------------------------
    async def arequest(
        self,
        method: str,
        path: str,
        body: object = None,
        *,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
        retry_429: bool = True,
    ) -> Response:
        """`request` for coroutines on an asyncio event loop (the binder's): many requests in flight on
        one thread, each on a keep-alive connection of that loop's own pool (HTTP/1.1, as the threads'),
        with the same rate limit, credentials, write fence (checked immediately before the request's
        bytes are handed to the socket, in the same step), retries and errors."""
        url, data, ctype, safe = self._prepare(method, path, body, params, content_type)
        attempt = 0
        refreshed = False
        connect_deadline = time.monotonic() + self.connect_timeout
        pool = self._async_pool()
        while True:
            delay = self.limiter.wait_time()
            if delay > 0:
                await asyncio.sleep(delay)
            headers, token = self._headers(ctype)
            self.requests += 1
            if method != "GET":
                self.writes += 1
            t0 = time.monotonic()
            conn, reused = self._async_pooled(pool)
            fence = self.write_fence if method != "GET" else None
            phase = "connect"
            try:
                if conn is None:
                    conn = await self._async_connect(connect_deadline)
                phase = "send"
                out = self._request_bytes(method, url, headers, data)
                if fence is None:
                    conn.writer.write(out)
                else:
                    fence(method, path)
                    try:
                        conn.writer.write(out)
                    finally:
                        if self.write_sent is not None:
                            self.write_sent(method, path)
                phase = "response"
                code, resp_headers, raw, keep = await asyncio.wait_for(
                    read_response(conn.reader, method), self.timeout
                )
            except FencedError:
                if conn is not None:
                    pool.append(conn)  # nothing of the request was sent
                raise
            except ssl.SSLCertVerificationError as e:
                raise self.untrusted(f"{method} {path}", e) from None
            except (OSError, http.client.HTTPException, EOFError, ValueError) as e:
                if conn is not None:
                    conn.close()
                attempt += 1
                await asyncio.sleep(
                    self._after_failure(method, path, url, phase, e, attempt, safe, reused, connect_deadline)
                )
                continue
            except BaseException:  # cancelled mid-request: the connection's state is unknown
                if conn is not None:
                    conn.close()
                raise
            if keep:
                conn.used_at = time.monotonic()
                pool.append(conn)
            else:
                conn.close()
            request_log.debug("%s %s %d %.0fms", method, url, code, (time.monotonic() - t0) * 1000)
            if code >= 400:
                if code == 401 and not refreshed and self._unauthorized(token):
                    refreshed = True
                    continue
                attempt += 1
                delay = self._after_error_status(
                    method, path, code, raw, resp_headers.get("retry-after"), attempt, safe, retry_429
                )
                await asyncio.sleep(delay)
                continue
            return _decoded(raw)

    def _async_pool(self) -> builtins.list[AsyncConnection]:
        """The running event loop's idle connections (a loop's connections are used on it alone)."""
        loop = asyncio.get_running_loop()
        with self._ssl_lock:
            pool = self._async_pools.get(loop)
            if pool is None:
                pool = self._async_pools[loop] = []
        return pool

    def _async_pooled(self, pool: builtins.list[AsyncConnection]) -> tuple[AsyncConnection | None, bool]:
        """A kept-alive connection of the loop's pool (most recently used first) and whether one was
        found; closed, long idle or older-credential connections are dropped, as `_pooled` does."""
        idle = IDLE_CONNECTION_SECONDS if self.idle_timeout is None else self.idle_timeout
        while pool:
            conn = pool.pop()
            if (
                conn.dead()
                or time.monotonic() - conn.used_at > idle
                or conn.generation != self.credentials.generation
            ):
                self.stale_connections += 1
                conn.close()
                continue
            return conn, True
        return None, False

    async def _async_connect(self, deadline: float) -> AsyncConnection:
        """TCP (through the proxy's CONNECT tunnel when there is one) and TLS, within the connection
        timeout that is left."""
        ctx = self._ssl_context() if self.scheme == "https" else None
        server_hostname = (self.config.tls_server_name or self.host) if ctx is not None else None
        proxy = self._proxy
        generation = self.credentials.generation

        async def open_() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            if proxy is None:
                return await asyncio.open_connection(
                    self.host, self.port, ssl=ctx, server_hostname=server_hostname
                )
            reader, writer = await asyncio.open_connection(proxy[0], proxy[1])
            try:
                target = host_header(self.host, self.port, None)
                head = f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n"
                head += "".join(f"{k}: {v}\r\n" for k, v in proxy[2].items()) + "\r\n"
                writer.write(head.encode("latin-1"))
                _version, code, _headers = await read_head(reader)
                if code != 200:
                    raise OSError(f"Tunnel connection failed: {code}")
                if ctx is not None:
                    await writer.start_tls(ctx, server_hostname=server_hostname)
            except BaseException:
                writer.close()
                raise
            return reader, writer

        reader, writer = await asyncio.wait_for(open_(), max(0.05, deadline - time.monotonic()))
        return AsyncConnection(reader, writer, generation)

    def _request_bytes(self, method: str, url: str, headers: dict[str, str], data: bytes | None) -> bytes:
        """The whole request, head and body, as http.client would send it."""
        default = 443 if self.scheme == "https" else 80
        lines = [f"{method} {url} HTTP/1.1", f"Host: {host_header(self.host, self.port, default)}"]
        lines.append("Accept-Encoding: identity")
        lines += [f"{k}: {v}" for k, v in headers.items()]
        if data is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(data or b'')}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (data or b"")

    async def aclose(self) -> None:
        """Close the running loop's kept-alive connections (before the loop itself is closed)."""
        loop = asyncio.get_running_loop()
        with self._ssl_lock:
            pool = self._async_pools.pop(loop, [])
        for conn in pool:
            conn.close()

    # The rules both transports (the threads' and the binding loop's, arequest) follow after an attempt.
    def _after_failure(
        self,
        method: str,
        path: str,
        url: str,
        phase: str,
        exc: BaseException,
        attempt: int,
        safe: bool,
        reused: bool,
        connect_deadline: float,
    ) -> float:
        """A request failed at `phase` (connect, send, response) with `exc`: how long to wait before the
        next attempt, or raise (UnavailableError, `maybe_applied` when it was sent)."""
        sent = phase == "response"
        request_log.debug("%s %s failed (%s, %s): %s", method, url, phase, type(exc).__name__, exc)
        if phase == "connect" and time.monotonic() >= connect_deadline - 0.01:
            raise self.unreachable(f"{method} {path}", exc) from None
        if attempt <= self.retries and (not sent or safe):
            self.retried += 1
            if reused and phase != "connect":  # a stale keep-alive: at once
                return 0.0
            return min(2.0, 0.1 * 2.0**attempt, max(0.0, connect_deadline - time.monotonic()))
        if phase == "connect":
            raise self.unreachable(f"{method} {path}", exc) from None
        failed = UnavailableError(
            f"{method} {path}: {type(exc).__name__}: {exc}"
            + (" (sent before the connection failed: it may have been applied)" if sent else "")
        )
        failed.maybe_applied = sent
        raise failed from None

    def _after_error_status(
        self,
        method: str,
        path: str,
        code: int,
        raw: bytes,
        retry_after: str | None,
        attempt: int,
        safe: bool,
        retry_429: bool,
    ) -> float:
        """The API server answered `code` >= 400 (a 401 after its one refresh): how long to wait before
        the next attempt (429; 5xx when replayable or with Retry-After), or raise the store's error."""
        try:
            status = json.loads(raw)
        except ValueError:
            status = {"message": raw.decode(errors="replace")[:500]}
        err = _error_for(code, status if isinstance(status, dict) else {}, method, path)
        retryable = (code == 429 and retry_429) or (code >= 500 and (safe or retry_after))
        if retryable and attempt <= self.retries:
            self.retried += 1
            delay = float(retry_after) if retry_after and retry_after.isdigit() else 0.2 * attempt
            return min(delay, 5.0)
        if code == 401:
            err.args = (f"{err.args[0]} ({self.config.describe()}: the credentials were refused)",)
        raise err

    def _close(self, conn: HTTPConnection, own: bool) -> None:
        if own:
            with contextlib.suppress(Exception):
                conn.close()
        else:
            self._drop_conn()

    # -- objects ---------------------------------------------------------------------------------------
    def get(self, kind: str, name: str, namespace: str | None = None) -> Obj:
        result = cast(Obj, self.request("GET", resource_path(kind, namespace, name)))
        result.setdefault("kind", kind)
        return result

    async def aget(self, kind: str, name: str, namespace: str | None = None) -> Obj:
        result = cast(Obj, await self.arequest("GET", resource_path(kind, namespace, name)))
        result.setdefault("kind", kind)
        return result

    def try_get(self, kind: str, name: str, namespace: str | None = None) -> Obj | None:
        try:
            return self.get(kind, name, namespace)
        except NotFoundError:
            return None

    def list_with_version(
        self,
        kind: str,
        namespace: str | None = None,
        *,
        page_size: int = 500,
        api_version: str | None = None,
        **params: str,
    ) -> tuple[builtins.list[Obj], str]:
        """All items (paginated with `limit`/`continue`) and the list's resourceVersion. Items get their
        `kind` and `apiVersion` filled in (a List's items lack them)."""
        gv = resource_info(kind, api_version)[0]
        items: builtins.list[Obj] = []
        q = dict(params)
        if page_size:
            q["limit"] = str(page_size)
        rv = ""
        while True:
            result = cast(Obj, self.request("GET", resource_path(kind, namespace, api_version=gv), params=q))
            for it in result.get("items") or []:
                it.setdefault("kind", kind)
                it.setdefault("apiVersion", gv)
                items.append(it)
            meta = result.get("metadata") or {}
            rv = str(meta.get("resourceVersion") or rv)
            cont = meta.get("continue")
            if not cont:
                return items, rv
            q["continue"] = cont

    def list(self, kind: str, namespace: str | None = None, **params: str) -> builtins.list[Obj]:
        return self.list_with_version(kind, namespace, page_size=500, **params)[0]

    def create(self, obj: Obj, namespace: str | None = None) -> Obj:
        result = cast(Obj, self.request("POST", self._create_path(obj, namespace), obj))
        return result

    async def acreate(self, obj: Obj, namespace: str | None = None) -> Obj:
        result = cast(Obj, await self.arequest("POST", self._create_path(obj, namespace), obj))
        return result

    def _create_path(self, obj: Obj, namespace: str | None) -> str:
        kind = obj["kind"]
        ns = namespace or (obj.get("metadata") or {}).get("namespace")
        if is_namespaced(kind) and not ns:
            ns = self.config.namespace
        return resource_path(kind, ns, api_version=obj.get("apiVersion"))

    def update(self, obj: Obj, subresource: str | None = None) -> Obj:
        """PUT; a metadata.resourceVersion makes it conditional (ConflictError when stale)."""
        result = cast(Obj, self.request("PUT", object_path(obj, subresource), obj))
        return result

    async def aupdate(self, obj: Obj, subresource: str | None = None) -> Obj:
        result = cast(Obj, await self.arequest("PUT", object_path(obj, subresource), obj))
        return result

    def patch(
        self,
        kind: str,
        name: str,
        patch: Obj | Sequence[Obj],
        namespace: str | None = None,
        subresource: str | None = None,
        patch_type: str = "merge",
        params: dict[str, str] | None = None,
        api_version: str | None = None,
    ) -> Obj:
        """PATCH: `merge`, `strategic`, `json` or `apply` (server-side apply: the patch is the whole
        object as its manager wants it; give params fieldManager=... and force=true). The path follows
        `api_version` when the kind lives in several API groups (kdra.kube.resources.GROUP_RESOURCES)."""
        path = resource_path(kind, namespace, name, subresource, api_version)
        result = cast(
            Obj, self.request("PATCH", path, patch, content_type=_CONTENT_TYPES[patch_type], params=params)
        )
        return result

    async def apatch(
        self,
        kind: str,
        name: str,
        patch: Obj | Sequence[Obj],
        namespace: str | None = None,
        subresource: str | None = None,
        patch_type: str = "merge",
        api_version: str | None = None,
    ) -> Obj:
        """PATCH on the binding loop (patch, on its transport)."""
        path = resource_path(kind, namespace, name, subresource, api_version)
        result = cast(Obj, await self.arequest("PATCH", path, patch, content_type=_CONTENT_TYPES[patch_type]))
        return result

    def apply(self, obj: Obj, field_manager: str, *, force: bool = True) -> Obj:
        """Server-side apply of a whole object (kubectl apply --server-side)."""
        md = obj["metadata"]
        ns = md.get("namespace") if is_namespaced(obj["kind"]) else None
        if is_namespaced(obj["kind"]) and not ns:
            ns = self.config.namespace
        path = resource_path(obj["kind"], ns, md["name"], api_version=obj.get("apiVersion"))
        params = {"fieldManager": field_manager, "force": "true" if force else "false"}
        result = cast(
            Obj, self.request("PATCH", path, obj, content_type=_CONTENT_TYPES["apply"], params=params)
        )
        return result

    def delete(
        self,
        kind: str,
        name: str,
        namespace: str | None = None,
        *,
        grace_period: int | None = None,
        resource_version: str | None = None,
        uid: str | None = None,
        missing_ok: bool = False,
    ) -> Obj | None:
        body: Obj = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if grace_period is not None:
            body["gracePeriodSeconds"] = grace_period
        preconditions = {}
        if resource_version:
            preconditions["resourceVersion"] = resource_version
        if uid:
            preconditions["uid"] = uid  # not a newer object of the same name
        if preconditions:
            body["preconditions"] = preconditions
        try:
            result = self.request("DELETE", resource_path(kind, namespace, name), body)
        except NotFoundError:
            if missing_ok:
                return None
            raise
        if isinstance(result, dict) and result.get("kind") not in (None, "Status"):
            return result
        return None

    def delete_collection(self, kind: str, namespace: str | None = None, **params: str) -> None:
        """DELETE on the collection (`labelSelector=...` narrows it)."""
        self.request("DELETE", resource_path(kind, namespace), params=params or None)

    def bind(self, namespace: str, pod: str, uid: str, node: str) -> None:
        """pods/binding: what a scheduler does instead of writing spec.nodeName."""
        self.request(
            "POST", resource_path("Pod", namespace, pod, "binding"), _binding(namespace, pod, uid, node)
        )

    async def abind(self, namespace: str, pod: str, uid: str, node: str) -> None:
        path = resource_path("Pod", namespace, pod, "binding")
        await self.arequest("POST", path, _binding(namespace, pod, uid, node))

    def evict(self, namespace: str, pod: str, *, uid: str | None = None, dry_run: bool = False) -> None:
        """pods/eviction (policy/v1): the API server checks PodDisruptionBudgets; a refusal is a 429
        (UnavailableError with `code` 429, not retried here: the budget decides, not load)."""
        body: Obj = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod, "namespace": namespace},
        }
        options: Obj = {}
        if uid:
            options["preconditions"] = {"uid": uid}
        if dry_run:
            options["dryRun"] = ["All"]
        if options:
            body["deleteOptions"] = {"apiVersion": "v1", "kind": "DeleteOptions", **options}
        self.request("POST", resource_path("Pod", namespace, pod, "eviction"), body, retry_429=False)

    def served_version(
        self, group: str, plural: str, prefer: tuple[str, ...] = (), cache: dict[str, Any] | None = None
    ) -> str | None:
        """The group/version under which the API server serves `plural` of `group` (discovery): its
        preferred version when that has the resource, else the first of `prefer`, else any; None when the
        group or the resource is not served (a CRD that is not installed, a feature gate that is off).
        `cache` (a dict the caller keeps) shares the discovery documents between calls."""
        cache = {} if cache is None else cache
        if "/apis" not in cache:
            cache["/apis"] = self.request("GET", "/apis")
        info = next((g for g in (cache["/apis"] or {}).get("groups") or [] if g.get("name") == group), None)
        if not info:
            return None
        versions = [str(v.get("version")) for v in info.get("versions") or [] if v.get("version")]
        preferred = str((info.get("preferredVersion") or {}).get("version") or "")
        order = list(dict.fromkeys([v for v in (preferred, *prefer) if v in versions] + versions))
        for version in order:
            path = f"/apis/{group}/{version}"
            if path not in cache:
                try:
                    cache[path] = self.request("GET", path)
                except NotFoundError:
                    cache[path] = {}
            if any(r.get("name") == plural for r in (cache[path] or {}).get("resources") or []):
                return f"{group}/{version}"
        return None

    def service_account_token(
        self, namespace: str, name: str, seconds: int = 3600, bound_to: Obj | None = None
    ) -> str:
        """A bound token for a ServiceAccount (TokenRequest API); `bound_to` (a Secret or Pod) makes it
        invalid once that object is deleted."""
        spec: Obj = {"expirationSeconds": seconds}
        if bound_to is not None:
            md = bound_to["metadata"]
            spec["boundObjectRef"] = {
                "apiVersion": bound_to.get("apiVersion", "v1"),
                "kind": bound_to["kind"],
                "name": md["name"],
                "uid": md["uid"],
            }
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        path = resource_path("ServiceAccount", namespace, name, "token")
        result = cast(Obj, self.request("POST", path, body))
        return str(result["status"]["token"])

    # -- watch -----------------------------------------------------------------------------------------
    def watch_stream(
        self,
        kind: str,
        resource_version: str,
        *,
        namespace: str | None = None,
        timeout_seconds: int = 300,
        stop: threading.Event | None = None,
        api_version: str | None = None,
    ) -> Iterator[tuple[str, Obj]]:
        """One watch request from `resource_version`: yields (type, object) for ADDED, MODIFIED, DELETED
        and BOOKMARK; returns when the server ends the request; raises ExpiredError on 410 (as a status
        or as an ERROR event), UnavailableError when the connection fails."""
        params = {
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds),
        }
        gv = resource_info(kind, api_version)[0]
        path = resource_path(kind, namespace, api_version=gv)
        url = self.prefix + path + "?" + urllib.parse.urlencode(params)
        refreshed = False
        while True:
            self.limiter.accept()
            # A read timeout a little above the server's own, so a silent dead connection is noticed.
            conn = self._connect(timeout_seconds + 30)
            headers, token = self._headers(None)
            try:
                try:
                    conn.connect()
                except (OSError, http.client.HTTPException) as e:
                    if isinstance(e, ssl.SSLCertVerificationError):
                        raise
                    conn.close()
                    raise self.unreachable(f"watch {path}", e) from None
                conn.request("GET", url, headers=headers)
                conn.release()
                resp = conn.getresponse()
            except ssl.SSLCertVerificationError as e:
                conn.close()
                raise self.untrusted(f"watch {path}", e) from None
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                raise UnavailableError(f"watch {path}: {type(e).__name__}: {e}") from None
            request_log.debug("GET %s %d (watch)", url, resp.status)
            if resp.status == 401 and not refreshed and self._unauthorized(token):
                refreshed = True
                conn.close()
                continue
            break
        try:
            if resp.status >= 400:
                raw = resp.read()
                try:
                    status = json.loads(raw)
                except ValueError:
                    status = {"message": raw.decode(errors="replace")[:500]}
                raise _error_for(resp.status, status, "WATCH", path)
            while True:
                try:
                    line = resp.readline()
                except (OSError, http.client.HTTPException, ValueError) as e:
                    if stop is not None and stop.is_set():
                        return
                    raise UnavailableError(f"watch {path}: {type(e).__name__}: {e}") from None
                if not line or (stop is not None and stop.is_set()):
                    return
                line = line.strip()
                if not line:
                    continue
                ev = json.loads(line)
                etype = ev.get("type")
                obj = ev.get("object") or {}
                if etype == "ERROR":
                    code = int(obj.get("code") or 500)
                    raise _error_for(code, obj, "WATCH", path)
                obj.setdefault("kind", kind)
                obj.setdefault("apiVersion", gv)
                yield etype, obj
        finally:
            with contextlib.suppress(Exception):
                conn.close()

    def close(self) -> None:
        self._drop_conn()


def _binding(namespace: str, pod: str, uid: str, node: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod, "namespace": namespace, "uid": uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


def _decoded(raw: bytes) -> Response:
    """A response body: JSON decoded, other text (`/readyz`'s `ok`) as a string, nothing as None."""
    if not raw:
        return None
    try:
        return cast(Obj, json.loads(raw))  # the API server answers with objects (Status for errors)
    except ValueError:
        return raw.decode(errors="replace")


def rv_int(rv: str | None) -> int:
    """resourceVersions are opaque strings; the API server's (etcd revisions) are integers, and comparing
    them is what lets a cache tell a stale watch event from a newer write of its own."""
    try:
        return int(rv or 0)
    except ValueError:
        return 0
