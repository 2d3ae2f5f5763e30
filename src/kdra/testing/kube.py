"""A deliberately small Kubernetes REST client for tests and harnesses (stdlib only).

Objects are plain dicts as the API server serves them. Only what the control-plane tests need:
get/list/create/replace/patch/delete, subresources, and polling. kdra's production client lives
elsewhere; this one exists so the test fixture has no dependency beyond the standard library.
"""

from __future__ import annotations

import builtins
import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any, TypeVar

Obj = dict[str, Any]
T = TypeVar("T")

# Plural resource names for the kinds the tests use: kind -> (group/version, plural, namespaced).
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
}


class KubeError(Exception):
    """An error status from the API server; `code` is the HTTP status, `status` the Status object."""

    def __init__(self, code: int, status: Obj, method: str, path: str) -> None:
        self.code = code
        self.status = status
        self.reason = str(status.get("reason", ""))
        super().__init__(f"{method} {path}: {code} {self.reason}: {status.get('message', status)}")


class NotFound(KubeError):
    pass


class Conflict(KubeError):
    pass


def resource_path(
    kind: str,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
    api_version: str | None = None,
) -> str:
    """The REST path of a kind (collection when name is None)."""
    try:
        gv, plural, namespaced = RESOURCES[kind]
    except KeyError as e:
        raise ValueError(f"kdra.testing.kube does not know kind {kind!r}; add it to RESOURCES") from e
    gv = api_version or gv
    base = "/api/v1" if gv == "v1" else f"/apis/{gv}"
    if namespaced and namespace:
        base += f"/namespaces/{namespace}"
    path = f"{base}/{plural}"
    if name is not None:
        path += f"/{name}"
        if subresource:
            path += f"/{subresource}"
    return path


class KubeClient:
    """Bearer-token client for one API server, verified against the cluster's CA."""

    def __init__(self, server: str, token: str, ca_file: str | None = None, timeout: float = 30.0) -> None:
        self.server = server.rstrip("/")
        self.token = token
        self.timeout = timeout
        if ca_file:
            self._ssl = ssl.create_default_context(cafile=ca_file)
        else:
            self._ssl = ssl.create_default_context()
            self._ssl.check_hostname = False
            self._ssl.verify_mode = ssl.CERT_NONE

    # -- raw -------------------------------------------------------------------------------------------
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
        url = self.server + path
        if params:
            url += "?" + urllib.parse.urlencode(params)
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self._ssl, timeout=timeout or self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                status = json.loads(raw)
            except ValueError:
                status = {"message": raw.decode(errors="replace")}
            cls = NotFound if e.code == 404 else Conflict if e.code == 409 else KubeError
            raise cls(e.code, status, method, path) from None
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode(errors="replace")

    # -- objects ---------------------------------------------------------------------------------------
    def get(self, kind: str, name: str, namespace: str | None = None) -> Obj:
        result: Obj = self.request("GET", resource_path(kind, namespace, name))
        return result

    def list(self, kind: str, namespace: str | None = None, **params: str) -> builtins.list[Obj]:
        result = self.request("GET", resource_path(kind, namespace), params=params or None)
        items: builtins.list[Obj] = result.get("items") or []
        return items

    def create(self, obj: Obj) -> Obj:
        kind = obj["kind"]
        ns = obj.get("metadata", {}).get("namespace") or (None if not RESOURCES[kind][2] else "default")
        result: Obj = self.request("POST", resource_path(kind, ns, api_version=obj.get("apiVersion")), obj)
        return result

    def replace(self, obj: Obj, subresource: str | None = None) -> Obj:
        md = obj["metadata"]
        path = resource_path(obj["kind"], md.get("namespace"), md["name"], subresource, obj.get("apiVersion"))
        result: Obj = self.request("PUT", path, obj)
        return result

    def patch(
        self, kind: str, name: str, patch: Obj, namespace: str | None = None, subresource: str | None = None
    ) -> Obj:
        """JSON merge patch."""
        path = resource_path(kind, namespace, name, subresource)
        result: Obj = self.request("PATCH", path, patch, content_type="application/merge-patch+json")
        return result

    def delete(
        self,
        kind: str,
        name: str,
        namespace: str | None = None,
        *,
        grace_period: int | None = None,
        missing_ok: bool = True,
    ) -> None:
        body: Obj | None = None
        if grace_period is not None:
            body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": grace_period}
        try:
            self.request("DELETE", resource_path(kind, namespace, name), body)
        except NotFound:
            if not missing_ok:
                raise

    def delete_collection(self, kind: str, namespace: str | None = None, **params: str) -> None:
        self.request("DELETE", resource_path(kind, namespace), params=params or None)


def wait_for(fn: Callable[[], T | None], timeout: float, what: str, interval: float = 0.2) -> T:
    """Poll `fn` until it returns something truthy; raise TimeoutError naming `what` otherwise."""
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            value = fn()
            if value:
                return value
        except (KubeError, OSError) as e:  # transient while components start
            last_exc = e
        if time.monotonic() >= deadline:
            extra = f" (last error: {last_exc})" if last_exc else ""
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}{extra}")
        time.sleep(interval)
