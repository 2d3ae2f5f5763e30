"""A small Kubernetes API client: kubeconfig, REST verbs, rate limits and watches.

kdra's production client for Kubernetes mode (`kdra scheduler`, `kdra driver sim`, `kdra export`, ...).
Standard library only: `http.client` with one keep-alive TLS connection per thread, so a scheduler that
writes thousands of objects pays one TLS handshake, not thousands.

- `KubeConfig.load(path, context=None)`: server, CA (file or data, or insecure-skip-tls-verify), bearer
  token (or token file), client certificate and key (files or data).
- `KubeClient(config, qps=..., burst=...)`: client-go's token-bucket rate limit (qps 0: unlimited);
  `get/list/create/update/patch/delete`, subresources (`status`, `binding`), errors mapped to the store's
  (`NotFoundError`, `ConflictError`, `AlreadyExistsError`, `InvalidObjectError`) plus `ExpiredError`
  (410 Gone: a watch or list asked for a resourceVersion etcd has compacted) and `UnavailableError`
  (connection refused or reset, 5xx, 429 after retries).
- `watch_stream(kind, resource_version)`: one watch request, yielding (type, object) events including
  BOOKMARKs; `Reflector` (kdra.kube.store) turns it into a resuming, relisting watch.
"""

from __future__ import annotations

import base64
import builtins
import contextlib
import http.client
import json
import os
import ssl
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kdra.cluster.store import (
    AlreadyExistsError,
    ConflictError,
    InvalidObjectError,
    NotFoundError,
    StoreError,
)
from kdra.errors import InputError

Obj = dict[str, Any]

# kind -> (group/version, plural, namespaced). The DRA kinds, what a scheduler and a driver touch, what
# deploy/ installs (RBAC, CRDs) and kdra's own scheduling CRDs (deploy/crds).
RESOURCES: dict[str, tuple[str, str, bool]] = {
    "Namespace": ("v1", "namespaces", False),
    "Node": ("v1", "nodes", False),
    "Pod": ("v1", "pods", True),
    "Event": ("v1", "events", True),
    "ServiceAccount": ("v1", "serviceaccounts", True),
    "DeviceClass": ("resource.k8s.io/v1", "deviceclasses", False),
    "ResourceSlice": ("resource.k8s.io/v1", "resourceslices", False),
    "ResourceClaim": ("resource.k8s.io/v1", "resourceclaims", True),
    "ResourceClaimTemplate": ("resource.k8s.io/v1", "resourceclaimtemplates", True),
    "DeviceTaintRule": ("resource.k8s.io/v1beta2", "devicetaintrules", False),
    "Lease": ("coordination.k8s.io/v1", "leases", True),
    "PriorityClass": ("scheduling.k8s.io/v1", "priorityclasses", False),
    "ClusterRole": ("rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "Role": ("rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("rbac.authorization.k8s.io/v1", "rolebindings", True),
    "CustomResourceDefinition": ("apiextensions.k8s.io/v1", "customresourcedefinitions", False),
    "PodGroup": ("kdra.dev/v1alpha1", "podgroups", True),
    "Queue": ("kdra.dev/v1alpha1", "queues", False),
    "Topology": ("kdra.dev/v1alpha1", "topologies", False),
    "SchedulingShard": ("kdra.dev/v1alpha1", "schedulingshards", False),
}


class ExpiredError(StoreError):
    """410 Gone: the requested resourceVersion is too old (compacted); relist."""

    reason = "Expired"


class UnavailableError(StoreError):
    """The API server could not be reached, or answered 5xx/429: retry later."""

    reason = "ServiceUnavailable"


class FencedError(StoreError):
    """A write refused before it was sent: this process may no longer write (its leader lease ran out)."""

    reason = "Fenced"


class ApiError(StoreError):
    """Any other error status; `code` is the HTTP status."""

    reason = "InternalError"


def _error_for(code: int, status: Obj, method: str, path: str) -> StoreError:
    reason = str(status.get("reason") or "")
    msg = f"{method} {path}: {code} {reason}: {status.get('message') or status}"
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
    elif code == 429 or code >= 500:
        cls = UnavailableError
    else:
        cls = ApiError
    err = cls(msg)
    err.code = code
    err.status = status
    return err


# -- kubeconfig -----------------------------------------------------------------------------------------


@dataclass
class KubeConfig:
    server: str
    token: str | None = None
    token_file: str | None = None
    ca_file: str | None = None
    insecure: bool = False
    cert_file: str | None = None
    key_file: str | None = None
    namespace: str = "default"
    _temp: list[str] = field(default_factory=list, repr=False)

    @classmethod
    def load(cls, path: str | os.PathLike[str], context: str | None = None) -> KubeConfig:
        """Read a kubeconfig (YAML or JSON); InputError naming the file and the missing piece."""
        p = Path(path)
        try:
            data = yaml.safe_load(p.read_text())
        except OSError as e:
            raise InputError(f"--kubeconfig {p}: {e.strerror or e}") from None
        except yaml.YAMLError as e:
            raise InputError(f"--kubeconfig {p}: not valid YAML: {e}") from None
        if not isinstance(data, dict):
            raise InputError(f"--kubeconfig {p}: not a kubeconfig (kind: Config)")

        def named(section: str, name: str) -> Obj:
            for item in data.get(section) or []:
                if isinstance(item, dict) and item.get("name") == name:
                    return item
            raise InputError(f"--kubeconfig {p}: {section}: no entry named {name!r}")

        ctx_name = context or data.get("current-context")
        if not ctx_name:
            contexts = data.get("contexts") or []
            if len(contexts) != 1:
                raise InputError(f"--kubeconfig {p}: no current-context")
            ctx_name = contexts[0].get("name")
        ctx = named("contexts", str(ctx_name)).get("context") or {}
        cluster = named("clusters", str(ctx.get("cluster"))).get("cluster") or {}
        user = named("users", str(ctx.get("user"))).get("user") or {} if ctx.get("user") else {}
        server = cluster.get("server")
        if not server:
            raise InputError(f"--kubeconfig {p}: cluster {ctx.get('cluster')!r} has no server")
        base = p.parent
        cfg = cls(server=str(server).rstrip("/"), namespace=str(ctx.get("namespace") or "default"))

        def file_or_data(file_key: str, data_key: str, section: Obj) -> str | None:
            if section.get(file_key):
                f = Path(os.path.expanduser(str(section[file_key])))
                return str(f if f.is_absolute() else base / f)
            if section.get(data_key):
                fd, name = tempfile.mkstemp(prefix="kdra-kubeconfig-")
                with os.fdopen(fd, "wb") as out:
                    out.write(base64.b64decode(section[data_key]))
                cfg._temp.append(name)
                return name
            return None

        cfg.ca_file = file_or_data("certificate-authority", "certificate-authority-data", cluster)
        cfg.insecure = bool(cluster.get("insecure-skip-tls-verify"))
        cfg.cert_file = file_or_data("client-certificate", "client-certificate-data", user)
        cfg.key_file = file_or_data("client-key", "client-key-data", user)
        cfg.token = user.get("token")
        cfg.token_file = user.get("tokenFile")
        if (cfg.cert_file is None) != (cfg.key_file is None):
            raise InputError(f"--kubeconfig {p}: a client certificate needs both certificate and key")
        return cfg

    def bearer_token(self) -> str | None:
        if self.token:
            return self.token
        if self.token_file:
            with contextlib.suppress(OSError):
                return Path(self.token_file).read_text().strip()
        return None

    def ssl_context(self) -> ssl.SSLContext:
        ctx = (
            ssl.create_default_context(cafile=self.ca_file) if self.ca_file else ssl.create_default_context()
        )
        if self.insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.cert_file and self.key_file:
            ctx.load_cert_chain(self.cert_file, self.key_file)
        return ctx


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


# -- paths ----------------------------------------------------------------------------------------------


def resource_path(
    kind: str,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
    api_version: str | None = None,
) -> str:
    try:
        gv, plural, namespaced = RESOURCES[kind]
    except KeyError:
        raise InputError(f"kind {kind!r} is not one kdra reads or writes") from None
    if api_version and api_version.split("/")[0] == gv.split("/")[0] and "/" in api_version:
        gv = api_version
    base = "/api/v1" if gv == "v1" else f"/apis/{gv}"
    if namespaced and namespace:
        base += f"/namespaces/{namespace}"
    path = f"{base}/{plural}"
    if name is not None:
        path += f"/{urllib.parse.quote(name, safe='')}"
        if subresource:
            path += f"/{subresource}"
    return path


def is_namespaced(kind: str) -> bool:
    return RESOURCES[kind][2] if kind in RESOURCES else True


IDLE_CONNECTION_SECONDS = 30.0

# -- the client -----------------------------------------------------------------------------------------


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
    ) -> None:
        self.config = config
        url = urllib.parse.urlsplit(config.server)
        self.scheme = url.scheme or "https"
        self.host = url.hostname or "127.0.0.1"
        self.port = url.port or (443 if self.scheme == "https" else 80)
        self.prefix = url.path.rstrip("/")
        self.timeout = timeout
        self.retries = retries
        self.user_agent = user_agent
        self.limiter = TokenBucket(qps, burst)
        self._ssl = config.ssl_context() if self.scheme == "https" else None
        self._local = threading.local()
        self.requests = 0  # counted, for benchmarks
        # Called with (method, path) immediately before every write is sent; raising FencedError stops it.
        # The leader elector installs its lease-deadline check here, so no write of a replica that lost
        # its lease (paused, starved) reaches the API server, whichever thread sends it.
        self.write_fence: Callable[[str, str], None] | None = None

    @classmethod
    def from_kubeconfig(
        cls, path: str | os.PathLike[str], *, context: str | None = None, **kw: Any
    ) -> KubeClient:
        return cls(KubeConfig.load(path, context), **kw)

    # -- transport -------------------------------------------------------------------------------------
    def _connect(self, timeout: float | None) -> http.client.HTTPConnection:
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=self._ssl)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def _conn(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        now = time.monotonic()
        # The API server closes keep-alive connections idle for about 90 s; a request sent on one it is
        # closing fails with an EOF and, for a write, cannot be safely retried. So an idle connection is
        # replaced before it gets that old (client-go's transport does the same with IdleConnTimeout).
        if conn is not None and now - getattr(self._local, "used", now) > IDLE_CONNECTION_SECONDS:
            self._drop_conn()
            conn = None
        if conn is None:
            conn = self._local.conn = self._connect(self.timeout)
        self._local.used = now
        return conn

    def _drop_conn(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()
        self._local.conn = None

    def _headers(self, content_type: str | None) -> dict[str, str]:
        h = {"Accept": "application/json", "User-Agent": self.user_agent}
        token = self.config.bearer_token()
        if token:
            h["Authorization"] = f"Bearer {token}"
        if content_type:
            h["Content-Type"] = content_type
        return h

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> Any:
        """One API call; connection failures on a reused connection are retried on a fresh one, and
        reads (and 429s) are retried a few times with backoff. Raises the store's errors. JSON bodies
        come back decoded, others (`/readyz`'s `ok`) as text. `timeout` uses a connection of its own."""
        url = self.prefix + path
        if params:
            url += "?" + urllib.parse.urlencode(params)
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        headers = self._headers(content_type if data is not None else None)
        attempt = 0
        while True:
            self.limiter.accept()
            if method != "GET" and self.write_fence is not None:
                self.write_fence(method, path)  # after the rate limiter's sleep, right before sending
            self.requests += 1
            conn = self._conn() if timeout is None else self._connect(timeout)
            try:
                conn.request(method, url, body=data, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
            except (OSError, http.client.HTTPException) as e:
                if timeout is None:
                    self._drop_conn()
                else:
                    conn.close()
                attempt += 1
                # A write may have reached the server before the connection broke; only retry writes
                # when the connection failed before sending (refused) or on the first stale keep-alive.
                retry = attempt <= self.retries and (
                    method == "GET"
                    or (
                        isinstance(e, (ConnectionRefusedError, http.client.RemoteDisconnected))
                        and attempt == 1
                    )
                )
                if not retry:
                    raise UnavailableError(f"{method} {path}: {type(e).__name__}: {e}") from None
                time.sleep(min(2.0, 0.1 * 2**attempt))
                continue
            if timeout is not None:
                conn.close()
            if resp.status >= 400:
                try:
                    status = json.loads(raw)
                except ValueError:
                    status = {"message": raw.decode(errors="replace")}
                err = _error_for(resp.status, status if isinstance(status, dict) else {}, method, path)
                if resp.status == 429 or (resp.status >= 500 and method == "GET"):
                    attempt += 1
                    if attempt <= self.retries:
                        retry_after = resp.getheader("Retry-After")
                        delay = float(retry_after) if retry_after and retry_after.isdigit() else 0.2 * attempt
                        time.sleep(min(delay, 5.0))
                        continue
                raise err
            if not raw:
                return None
            try:
                return json.loads(raw)
            except ValueError:
                return raw.decode(errors="replace")

    # -- objects ---------------------------------------------------------------------------------------
    def get(self, kind: str, name: str, namespace: str | None = None) -> Obj:
        result: Obj = self.request("GET", resource_path(kind, namespace, name))
        result.setdefault("kind", kind)
        return result

    def try_get(self, kind: str, name: str, namespace: str | None = None) -> Obj | None:
        try:
            return self.get(kind, name, namespace)
        except NotFoundError:
            return None

    def list_with_version(
        self, kind: str, namespace: str | None = None, *, page_size: int = 500, **params: str
    ) -> tuple[builtins.list[Obj], str]:
        """All items (paginated with `limit`/`continue`) and the list's resourceVersion. Items get their
        `kind` and `apiVersion` filled in (a List's items lack them)."""
        gv = RESOURCES[kind][0]
        items: builtins.list[Obj] = []
        q = dict(params)
        if page_size:
            q["limit"] = str(page_size)
        rv = ""
        while True:
            result = self.request("GET", resource_path(kind, namespace), params=q)
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
        kind = obj["kind"]
        ns = namespace or (obj.get("metadata") or {}).get("namespace")
        if is_namespaced(kind) and not ns:
            ns = self.config.namespace
        result: Obj = self.request("POST", resource_path(kind, ns, api_version=obj.get("apiVersion")), obj)
        return result

    def update(self, obj: Obj, subresource: str | None = None) -> Obj:
        """PUT; a metadata.resourceVersion makes it conditional (ConflictError when stale)."""
        md = obj["metadata"]
        ns = md.get("namespace") if is_namespaced(obj["kind"]) else None
        path = resource_path(obj["kind"], ns, md["name"], subresource, obj.get("apiVersion"))
        result: Obj = self.request("PUT", path, obj)
        return result

    def patch(
        self,
        kind: str,
        name: str,
        patch: Any,
        namespace: str | None = None,
        subresource: str | None = None,
        patch_type: str = "merge",
    ) -> Obj:
        ctype = {
            "merge": "application/merge-patch+json",
            "strategic": "application/strategic-merge-patch+json",
            "json": "application/json-patch+json",
        }[patch_type]
        path = resource_path(kind, namespace, name, subresource)
        result: Obj = self.request("PATCH", path, patch, content_type=ctype)
        return result

    def delete(
        self,
        kind: str,
        name: str,
        namespace: str | None = None,
        *,
        grace_period: int | None = None,
        resource_version: str | None = None,
        missing_ok: bool = False,
    ) -> Obj | None:
        body: Obj = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if grace_period is not None:
            body["gracePeriodSeconds"] = grace_period
        if resource_version:
            body["preconditions"] = {"resourceVersion": resource_version}
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
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod, "namespace": namespace, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        self.request("POST", resource_path("Pod", namespace, pod, "binding"), body)

    def service_account_token(self, namespace: str, name: str, seconds: int = 3600) -> str:
        """A bound token for a ServiceAccount (TokenRequest API)."""
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": seconds},
        }
        path = resource_path("ServiceAccount", namespace, name, "token")
        result: Obj = self.request("POST", path, body)
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
        path = resource_path(kind, namespace)
        url = self.prefix + path + "?" + urllib.parse.urlencode(params)
        self.limiter.accept()
        # A read timeout a little above the server's own, so a silent dead connection is noticed.
        conn = self._connect(timeout_seconds + 30)
        gv = RESOURCES[kind][0]
        try:
            try:
                conn.request("GET", url, headers=self._headers(None))
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException) as e:
                raise UnavailableError(f"watch {path}: {type(e).__name__}: {e}") from None
            if resp.status >= 400:
                raw = resp.read()
                try:
                    status = json.loads(raw)
                except ValueError:
                    status = {"message": raw.decode(errors="replace")}
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
        for name in self.config._temp:
            with contextlib.suppress(OSError):
                os.unlink(name)
        self.config._temp.clear()


def rv_int(rv: str | None) -> int:
    """resourceVersions are opaque strings; the API server's (etcd revisions) are integers, and comparing
    them is what lets a cache tell a stale watch event from a newer write of its own."""
    try:
        return int(rv or 0)
    except ValueError:
        return 0
