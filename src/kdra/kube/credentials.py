"""What each API request authenticates with, kept current: client-go's token sources and exec plugins.

- A `token` from the kubeconfig is used as is.
- A `tokenFile` (and the in-cluster service-account token) is re-read at most once a minute, as client-go's
  cached file token source does (bound service-account tokens are rotated by the kubelet and expire),
  and at once after a 401.
- An `exec` plugin (client.authentication.k8s.io/v1 or v1beta1) is run when there is no credential yet,
  when the cached one's `expirationTimestamp` has passed, and after a 401 with the credential it gave.
  The plugin gets the process environment plus its `env`, `KUBERNETES_EXEC_INFO` (with the cluster when
  `provideClusterInfo`), and our stdin only when interactive (`interactiveMode`: Never, IfAvailable — a
  terminal on stdin —, Always — which needs one). Its stderr is ours (prompts); its stdout must be an
  ExecCredential with a token or a client certificate and key.
- As in client-go, a token, a token file, basic auth or a client certificate in the kubeconfig wins over
  an exec plugin, which is then never run.

Nothing here puts a credential in an error message or a log line.
"""

from __future__ import annotations

import base64
import datetime as _dt
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdra.cluster.store import StoreError

if TYPE_CHECKING:
    from kdra.kube.kubeconfig import ExecConfig, KubeConfig
    from kdra.kube.tls import CertPair

log = logging.getLogger("kdra.kube")

TOKEN_FILE_PERIOD = 60.0  # client-go's NewCachedFileTokenSource
EXEC_TIMEOUT = 60.0  # a non-interactive plugin that hangs is an error, not a hang


class CredentialError(StoreError):
    """The credentials could not be obtained (exec plugin missing or failing, token file unreadable)."""

    reason = "CredentialError"


def _parse_time(value: str) -> float | None:
    try:
        t = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=_dt.UTC)
    return t.timestamp()


class Credentials:
    """The credential source of one KubeConfig; thread-safe. `generation` changes whenever the client
    certificate does (connections made with the old one must be dropped)."""

    def __init__(self, cfg: KubeConfig, *, clock: Callable[[], float] = time.time) -> None:
        self.cfg = cfg
        self.clock = clock
        self.generation = 0
        self.exec_runs = 0  # for tests
        self._lock = threading.Lock()
        self._file_token: str | None = None
        self._file_read_at = -1e18
        self._exec_token: str | None = None
        self._exec_cert: tuple[bytes, bytes] | None = None
        self._exec_expiry: float | None = None
        self._exec_done = False
        self.uses_exec = cfg.exec is not None and not (
            cfg.token or cfg.token_file or cfg.username or cfg.cert_file or cfg.cert_data
        )

    # -- what a request sends --------------------------------------------------------------------------
    def token(self) -> str | None:
        cfg = self.cfg
        if cfg.token_file:
            with self._lock:
                if time.monotonic() - self._file_read_at >= TOKEN_FILE_PERIOD:
                    self._read_token_file()
                if self._file_token:
                    return self._file_token
            return cfg.token
        if cfg.token:
            return cfg.token
        if self.uses_exec:
            with self._lock:
                self._ensure_exec()
                return self._exec_token
        return None

    def basic_auth(self) -> str | None:
        cfg = self.cfg
        if cfg.username is None or cfg.token or cfg.token_file:
            return None
        raw = f"{cfg.username}:{cfg.password or ''}".encode()
        return base64.b64encode(raw).decode()

    def client_cert(self) -> CertPair | None:
        cfg = self.cfg
        if cfg.cert_data and cfg.key_data:
            return (cfg.cert_data, cfg.key_data)
        if cfg.cert_file or cfg.key_file:
            if cfg.cert_data or cfg.key_data:  # one from a file, the other inline
                cert = cfg.cert_data or _read_bytes(cfg.cert_file, "client-certificate")
                key = cfg.key_data or _read_bytes(cfg.key_file, "client-key")
                return (cert, key)
            if cfg.cert_file and cfg.key_file:
                return (cfg.cert_file, cfg.key_file)
        if self.uses_exec:
            with self._lock:
                self._ensure_exec()
                return self._exec_cert
        return None

    def refresh_after_unauthorized(self, used_token: str | None) -> bool:
        """A request got 401: re-read or re-run what gave its credential. True when something changed,
        so one retry may succeed."""
        cfg = self.cfg
        with self._lock:
            if cfg.token_file:
                before = self._file_token
                self._read_token_file()
                return self._file_token is not None and self._file_token != before
            if self.uses_exec and (used_token is None or used_token == self._exec_token):
                before_token, before_cert = self._exec_token, self._exec_cert
                self._run_exec()
                return (self._exec_token, self._exec_cert) != (before_token, before_cert)
        return False

    # -- token file ------------------------------------------------------------------------------------
    def _read_token_file(self) -> None:
        path = self.cfg.token_file
        assert path is not None
        self._file_read_at = time.monotonic()
        try:
            value = Path(path).read_text().strip()
        except OSError as e:
            if self._file_token is None and not self.cfg.token:
                raise CredentialError(
                    f"{self.cfg.describe()}: tokenFile {path}: {e.strerror or type(e).__name__}"
                ) from None
            log.warning("tokenFile %s: %s; keeping the last token read", path, e.strerror or e)
            return
        if value:
            self._file_token = value

    # -- exec ------------------------------------------------------------------------------------------
    def _ensure_exec(self) -> None:
        expired = self._exec_expiry is not None and self.clock() >= self._exec_expiry
        if not self._exec_done or expired:
            self._run_exec()

    def _run_exec(self) -> None:
        ex = self.cfg.exec
        assert ex is not None
        interactive = self._interactive(ex)
        info: dict[str, Any] = {
            "apiVersion": ex.api_version,
            "kind": "ExecCredential",
            "spec": {"interactive": interactive},
        }
        if ex.provide_cluster_info:
            info["spec"]["cluster"] = ex.cluster_info
        env = dict(os.environ)
        env.update(dict(ex.env))
        env["KUBERNETES_EXEC_INFO"] = json.dumps(info)
        where = f"{ex.source}: {ex.command}"
        self.exec_runs += 1
        try:
            proc = subprocess.run(
                [ex.command, *ex.args],
                stdin=None if interactive else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=None,  # the plugin's prompts and errors reach the user
                env=env,
                timeout=None if interactive else EXEC_TIMEOUT,
                check=False,
            )
        except FileNotFoundError:
            hint = f"\n\n{ex.install_hint}" if ex.install_hint else ""
            raise CredentialError(f"{where}: executable not found{hint}") from None
        except PermissionError:
            raise CredentialError(f"{where}: not executable (permission denied)") from None
        except subprocess.TimeoutExpired:
            raise CredentialError(f"{where}: no answer after {EXEC_TIMEOUT:.0f}s") from None
        except OSError as e:
            raise CredentialError(f"{where}: cannot run: {e.strerror or type(e).__name__}") from None
        if proc.returncode != 0:
            raise CredentialError(f"{where}: failed with exit code {proc.returncode}")
        self._accept(ex, proc.stdout, where)

    def _interactive(self, ex: ExecConfig) -> bool:
        if ex.interactive_mode == "Never":
            return False
        tty = bool(sys.stdin is not None and sys.stdin.isatty())
        if ex.interactive_mode == "Always" and not tty:
            raise CredentialError(
                f"{ex.source}: interactiveMode Always needs a terminal on standard input, and there is none"
            )
        return tty

    def _accept(self, ex: ExecConfig, out: bytes, where: str) -> None:
        # Never quote the output: it holds the credential.
        try:
            cred = json.loads(out)
        except ValueError:
            raise CredentialError(f"{where}: its output is not an ExecCredential (not JSON)") from None
        if not isinstance(cred, dict) or cred.get("kind") != "ExecCredential":
            raise CredentialError(f"{where}: its output is not an ExecCredential (kind)")
        if cred.get("apiVersion") != ex.api_version:
            raise CredentialError(
                f"{where}: returned apiVersion {str(cred.get('apiVersion'))[:80]!r}, "
                f"configured {ex.api_version!r}"
            )
        status = cred.get("status")
        if not isinstance(status, dict):
            raise CredentialError(f"{where}: returned no status")
        token = status.get("token") or None
        cert = status.get("clientCertificateData") or None
        key = status.get("clientKeyData") or None
        if bool(cert) != bool(key):
            raise CredentialError(f"{where}: returned only one of clientCertificateData and clientKeyData")
        if not token and not cert:
            raise CredentialError(f"{where}: returned neither a token nor a client certificate and key")
        expiry = None
        if status.get("expirationTimestamp"):
            expiry = _parse_time(str(status["expirationTimestamp"]))
            if expiry is None:
                raise CredentialError(f"{where}: status.expirationTimestamp is not an RFC 3339 time")
        new_cert = (str(cert).encode(), str(key).encode()) if cert and key else None
        if new_cert != self._exec_cert:
            self.generation += 1
        self._exec_token = str(token) if token else None
        self._exec_cert = new_cert
        self._exec_expiry = expiry
        self._exec_done = True


def _read_bytes(path: str | None, what: str) -> bytes:
    try:
        return Path(str(path)).read_bytes()
    except OSError as e:
        raise CredentialError(f"{what} {path}: {e.strerror or type(e).__name__}") from None
