"""The exporter's Kubernetes source: list then watch, per kind, into a FleetState (an informer, minimal).

Standard library only. kdra's production Kubernetes client (src/kdra/kube/) was being written at the
same time as this module; when it lands, `KubeSource` should sit on its watches instead of these few
requests. What it does: per kind a thread lists in pages (`limit`/`continue`), replaces the kind in the
state, then watches from the list's resourceVersion with bookmarks; a watch that ends is resumed from the
last resourceVersion seen, one that expired (410 Gone) is re-listed. Kinds the server does not serve (the
Queue custom resource, usually) are skipped.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import ssl
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kdra.errors import InputError
from kdra.observe.model import FleetState

# kind -> (API path prefix, plural)
PATHS: dict[str, tuple[str, str]] = {
    "Node": ("/api/v1", "nodes"),
    "Pod": ("/api/v1", "pods"),
    "DeviceClass": ("/apis/resource.k8s.io/v1", "deviceclasses"),
    "ResourceSlice": ("/apis/resource.k8s.io/v1", "resourceslices"),
    "ResourceClaim": ("/apis/resource.k8s.io/v1", "resourceclaims"),
    "Queue": ("/apis/kdra.dev/v1alpha1", "queues"),
}
OPTIONAL_KINDS = frozenset({"Queue"})


@dataclass
class KubeConfig:
    server: str
    context: ssl.SSLContext | None
    token: str | None

    def open(self, path: str, params: dict[str, str] | None = None, timeout: float = 30.0) -> Any:
        url = self.server.rstrip("/") + path
        if params:
            url += "?" + urllib.parse.urlencode(params)
        req = urllib.request.Request(url)
        req.add_header("Accept", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        return urllib.request.urlopen(req, context=self.context, timeout=timeout)

    def get(self, path: str, params: dict[str, str] | None = None) -> Any:
        with self.open(path, params) as resp:
            return json.loads(resp.read())


def _material(entry: dict[str, Any], key: str, base_dir: str, tmp: list[str]) -> str | None:
    """A file path for `key` (a path relative to the kubeconfig) or `key-data` (base64, written out)."""
    if entry.get(f"{key}-data"):
        fd, path = tempfile.mkstemp(prefix="kdra-kubeconfig-")
        with os.fdopen(fd, "wb") as f:
            f.write(base64.b64decode(entry[f"{key}-data"]))
        tmp.append(path)
        return path
    if entry.get(key):
        p = str(entry[key])
        return p if os.path.isabs(p) else os.path.join(base_dir, p)
    return None


def load_kubeconfig(path: str, context: str | None = None) -> KubeConfig:
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            cfg = yaml.safe_load(f) or {}
    except OSError as exc:
        raise InputError(f"--kubeconfig {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise InputError(f"--kubeconfig {path}: not YAML: {exc}") from None

    def named(section: str, name: str | None) -> dict[str, Any]:
        for item in cfg.get(section) or []:
            if item.get("name") == name:
                return dict(item.get(section[:-1]) or {})
        raise InputError(f"--kubeconfig {path}: {section[:-1]} {name!r} not found")

    ctx_name = context or cfg.get("current-context")
    if not ctx_name:
        contexts = cfg.get("contexts") or []
        if len(contexts) != 1:
            raise InputError(f"--kubeconfig {path}: no current-context")
        ctx_name = contexts[0].get("name")
    ctx = named("contexts", ctx_name)
    cluster = named("clusters", ctx.get("cluster"))
    user = named("users", ctx.get("user")) if ctx.get("user") else {}
    server = cluster.get("server")
    if not server:
        raise InputError(f"--kubeconfig {path}: cluster {ctx.get('cluster')!r} has no server")
    base_dir = os.path.dirname(os.path.abspath(path))
    tmp: list[str] = []
    try:
        ssl_ctx: ssl.SSLContext | None = None
        if server.startswith("https"):
            ca = _material(cluster, "certificate-authority", base_dir, tmp)
            ssl_ctx = ssl.create_default_context(cafile=ca) if ca else ssl.create_default_context()
            if cluster.get("insecure-skip-tls-verify"):
                ssl_ctx.check_hostname = False
                ssl_ctx.verify_mode = ssl.CERT_NONE
            cert = _material(user, "client-certificate", base_dir, tmp)
            key = _material(user, "client-key", base_dir, tmp)
            if cert:
                ssl_ctx.load_cert_chain(cert, key)
        token = user.get("token")
        if not token and user.get("tokenFile"):
            with open(user["tokenFile"], encoding="utf-8") as f:
                token = f.read().strip()
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise InputError(f"--kubeconfig {path}: {exc}") from None
    finally:
        for p in tmp:
            with contextlib.suppress(OSError):
                os.unlink(p)
    return KubeConfig(server, ssl_ctx, token)


def list_kind(cfg: KubeConfig, kind: str, page: int = 500) -> tuple[list[dict[str, Any]], str]:
    prefix, plural = PATHS[kind]
    items: list[dict[str, Any]] = []
    params = {"limit": str(page)}
    while True:
        body = cfg.get(f"{prefix}/{plural}", params)
        items.extend(body.get("items") or [])
        meta = body.get("metadata") or {}
        if not meta.get("continue"):
            return items, str(meta.get("resourceVersion") or "")
        params = {"limit": str(page), "continue": meta["continue"]}


class KubeSource:
    """Follows the kinds the exporter needs; `ready` is set once every kind has been listed."""

    def __init__(self, cfg: KubeConfig, state: FleetState, kinds: Iterable[str] = tuple(PATHS)) -> None:
        self.cfg = cfg
        self.state = state
        self.kinds = list(kinds)
        self.ready = threading.Event()
        self.errors: dict[str, str] = {}
        self._listed: set[str] = set()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._responses: dict[str, Any] = {}
        self._lock = threading.Lock()

    def start(self) -> KubeSource:
        for kind in self.kinds:
            t = threading.Thread(target=self._run, args=(kind,), name=f"kdra-watch-{kind}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            for resp in self._responses.values():
                with contextlib.suppress(Exception):
                    resp.close()
        for t in self._threads:
            t.join(timeout=5)

    def _mark_listed(self, kind: str) -> None:
        with self._lock:
            self._listed.add(kind)
            if self._listed >= set(self.kinds):
                self.ready.set()

    def _run(self, kind: str) -> None:
        rv = ""
        while not self._stop.is_set():
            try:
                if not rv:
                    items, rv = list_kind(self.cfg, kind)
                    self.state.replace(kind, items)
                    self._mark_listed(kind)
                    self.errors.pop(kind, None)
                rv = self._watch(kind, rv)
            except urllib.error.HTTPError as exc:
                if exc.code == 404 and kind in OPTIONAL_KINDS:
                    self._mark_listed(kind)  # not served here: nothing to follow
                    return
                if exc.code == 410:
                    rv = ""
                    continue
                self.errors[kind] = f"{exc.code} {exc.reason}"
                self._stop.wait(1.0)
            except (OSError, ValueError) as exc:
                if self._stop.is_set():
                    return
                self.errors[kind] = str(exc)
                self._stop.wait(1.0)

    def _watch(self, kind: str, rv: str) -> str:
        """Follow one watch request; returns the resourceVersion to resume from ("" to re-list)."""
        prefix, plural = PATHS[kind]
        params = {
            "watch": "1",
            "resourceVersion": rv,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "290",
        }
        resp = self.cfg.open(f"{prefix}/{plural}", params, timeout=330)
        with self._lock:
            self._responses[kind] = resp
        try:
            for raw in resp:
                if self._stop.is_set():
                    break
                if not raw.strip():
                    continue
                ev = json.loads(raw)
                etype = ev.get("type")
                obj = ev.get("object") or {}
                if etype == "ERROR":
                    if obj.get("code") == 410:
                        return ""
                    raise ValueError(f"watch {kind}: {obj.get('message', obj)}")
                new_rv = (obj.get("metadata") or {}).get("resourceVersion")
                if new_rv:
                    rv = str(new_rv)
                if etype in ("ADDED", "MODIFIED", "DELETED"):
                    self.state.apply(etype, kind, obj)
        finally:
            with self._lock:
                self._responses.pop(kind, None)
            with contextlib.suppress(Exception):
                resp.close()
        return rv


def wait_ready(source: KubeSource, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if source.ready.wait(0.2):
            return True
    return source.ready.is_set()
