"""The exporter's Kubernetes source: list then watch, per kind, straight into a FleetState.

It uses kdra's Kubernetes client (kdra.kube.client: kubeconfig, paginated lists, watch streams) but not
kdra.kube.store's KubeStore, which keeps every object: the exporter keeps only the compact records of
kdra.observe.model, so its memory stays small on a 40,000-claim cluster. Per kind a thread lists (pages of
500), replaces the kind in the state, then watches from the list's resourceVersion; a watch that ends is
resumed from the last resourceVersion seen (bookmarks included), one that expired (410 Gone) is re-listed.
Kinds the server does not serve (the kdra Queue custom resource, usually) are skipped.

A kind the credentials may not list or watch (401, 403: RBAC) is logged once with the API server's
message (which names the verb and the resource) and kept in `errors`; `failed` is set for a required
kind, so `kdra exporter --once` and `kdra top` stop at once and say what is forbidden instead of timing out.
For the optional Queue kind it is a warning and the exporter goes on without queue metrics.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterable

from kdra.cluster.store import NotFoundError, StoreError
from kdra.kube.client import ExpiredError, ForbiddenError, KubeClient, UnauthorizedError
from kdra.observe.model import KINDS, FleetState

OPTIONAL_KINDS = frozenset({"Queue"})
WATCH_TIMEOUT = 290
log = logging.getLogger("kdra.observe")


def client_for(kubeconfig: str | None, context: str | None = None) -> KubeClient:
    """By the loading rules every command uses (kdra.kube.kubeconfig); unthrottled: lists and watches."""
    return KubeClient.from_config(kubeconfig, context=context, qps=0)


class KubeSource:
    """Follows the kinds the exporter needs; `ready` is set once every kind has been listed."""

    def __init__(
        self, client: KubeClient, state: FleetState, kinds: Iterable[str] = KINDS, *, log_denials: bool = True
    ) -> None:
        self.client = client
        # False for the one-shot commands (`kdra top`, `exporter --once`), whose one error line says it all:
        # logged as well, each denial was a line of its own before it ('Unauthorized' four times).
        self.log_denials = log_denials
        self.state = state
        self.kinds = list(kinds)
        self.ready = threading.Event()
        self.errors: dict[str, str] = {}
        self.failed = threading.Event()  # a required kind cannot be read with these credentials
        self.unreachable = threading.Event()  # no connection to the API server within its connect timeout
        self._logged: dict[str, str] = {}
        self._denied_kinds: set[str] = set()
        self.relists: dict[str, int] = {}
        self._listed: set[str] = set()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def start(self) -> KubeSource:
        for kind in self.kinds:
            t = threading.Thread(target=self._run, args=(kind,), name=f"kdra-watch-{kind}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        """Stop following (threads blocked in a watch end at its next event or timeout; they are
        daemons, so they never keep the process alive)."""
        self._stop.set()
        for t in self._threads:  # daemons: a thread still blocked in a watch read never holds the process
            t.join(timeout=0.05)
        with contextlib.suppress(Exception):
            self.client.close()

    def _mark_listed(self, kind: str) -> None:
        with self._lock:
            self._listed.add(kind)
            if self._listed >= set(self.kinds):
                self.ready.set()

    def _run(self, kind: str) -> None:
        rv = ""
        backoff = 0.2
        while not self._stop.is_set():
            try:
                if not rv:
                    items, rv = self.client.list_with_version(kind)
                    self.state.replace(kind, items)
                    if kind in self._denied_kinds:
                        self._allowed(kind)
                    self.relists[kind] = self.relists.get(kind, 0) + 1
                    self._mark_listed(kind)
                for etype, obj in self.client.watch_stream(
                    kind, rv, timeout_seconds=WATCH_TIMEOUT, stop=self._stop
                ):
                    if kind in self._denied_kinds:
                        self._allowed(kind)  # RBAC was fixed
                    new_rv = (obj.get("metadata") or {}).get("resourceVersion")
                    if new_rv:
                        rv = str(new_rv)
                    if etype in ("ADDED", "MODIFIED", "DELETED"):
                        self.state.apply(etype, kind, obj)
                self.errors.pop(kind, None)
                backoff = 0.2
            except ExpiredError:
                rv = ""
            except NotFoundError as exc:
                if kind in OPTIONAL_KINDS:
                    self._mark_listed(kind)  # not served here: nothing to follow
                    return
                # A required kind this API server does not serve (DRA's resource.k8s.io/v1 before 1.34):
                # `kdra top` and `exporter --once` stop at once, as on a 403, instead of retrying until
                # their timeout in silence; the serving exporter keeps trying, slowly.
                served = getattr(exc, "not_served", None)
                self._denied(kind, exc, f"the API server does not serve {served}" if served else None)
                self._stop.wait(max(backoff, 5.0))
                backoff = min(backoff * 2, 30.0)
            except (ForbiddenError, UnauthorizedError) as exc:
                self._denied(kind, exc)
                if kind in OPTIONAL_KINDS:
                    self._mark_listed(kind)
                    return
                self._stop.wait(max(backoff, 5.0))  # RBAC may be fixed: try again, slowly
                backoff = min(backoff * 2, 30.0)
            except StoreError as exc:
                self.errors[kind] = str(exc)
                if getattr(exc, "unreachable", False) and kind not in self._listed:
                    self.unreachable.set()  # never listed: wait_ready need not wait out its timeout
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)

    def _allowed(self, kind: str) -> None:
        self._denied_kinds.discard(kind)
        self.errors.pop(kind, None)
        if not self._denied_kinds - OPTIONAL_KINDS:
            self.failed.clear()

    def _denied(self, kind: str, exc: Exception, message: str | None = None) -> None:
        status = getattr(exc, "status", None) or {}
        if message is None and isinstance(exc, UnauthorizedError):  # the server says only "Unauthorized"
            message = f"401 Unauthorized: the credentials were refused ({self.client.config.describe()})"
        if message is None:
            message = str(status.get("message") or exc)
        self._denied_kinds.add(kind)
        self.errors[kind] = message
        if self.log_denials and self._logged.get(kind) != message:
            self._logged[kind] = message
            if kind in OPTIONAL_KINDS:
                log.warning("%s; going on without %s metrics", message, kind)
            else:
                log.error("%s", message)
        if kind not in OPTIONAL_KINDS:
            self.failed.set()

    def problem(self) -> str:
        """What keeps the source from being ready: each distinct problem once, with the kinds it stops."""
        kinds: dict[str, list[str]] = {}
        for kind, message in sorted(self.errors.items()):
            kinds.setdefault(message, []).append(kind)
        return "; ".join(f"{', '.join(k)}: {m}" for m, k in kinds.items()) or "no answer yet"


def wait_ready(source: KubeSource, timeout: float) -> bool:
    """Until every kind is listed (True), a required kind is refused or the API server cannot be reached
    (False, at once) or `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if source.ready.wait(0.2):
            return True
        if source.failed.is_set() or source.unreachable.is_set():
            return False
    return source.ready.is_set()
