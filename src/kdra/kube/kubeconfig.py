"""Where kdra's Kubernetes client gets its configuration, in client-go's (controller-runtime's) order.

`KubeConfig.resolve(kubeconfig, context)`:

1. `--kubeconfig FILE`: that file only (it must exist);
2. `$KUBECONFIG`: a colon-separated list of files, merged as kubectl merges them (files that do not exist
   are skipped; for clusters, users and contexts the first file that defines a name wins, and so does the
   first `current-context`); relative paths inside a file are relative to that file;
3. in-cluster: `KUBERNETES_SERVICE_HOST`/`KUBERNETES_SERVICE_PORT` and the pod's service-account token, CA
   and namespace (`/var/run/secrets/kubernetes.io/serviceaccount`, or `$KDRA_SERVICE_ACCOUNT_DIR`);
   skipped when `--context` is given;
4. `~/.kube/config`.

A context is `--context` or the `current-context`; its namespace (else `default`) is the client's. Users:
`token`, `tokenFile` (re-read as it rotates), client certificate and key (files or `*-data`), basic auth,
`exec` credential plugins (kdra.kube.credentials), impersonation (`as`, `as-groups`, `as-uid`).
Clusters: `server`, CA (file or data), `insecure-skip-tls-verify` (warned about), `tls-server-name`,
`proxy-url` (HTTP CONNECT). `*-data` fields stay in memory: nothing is written to disk.

Errors are `InputError`s naming the kubeconfig file, the context and the field; they never quote a
credential (a YAML syntax error gives line and column, not the line's text).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import logging
import os
import re
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from kdra.api.load import type_name
from kdra.api.types import Obj
from kdra.errors import InputError

if TYPE_CHECKING:
    from kdra.kube.credentials import Credentials

log = logging.getLogger("kdra.kube")

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
SERVICE_ACCOUNT_DIR_ENV = "KDRA_SERVICE_ACCOUNT_DIR"
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
INTERACTIVE_MODES = ("Never", "IfAvailable", "Always")


@dataclass
class ExecConfig:
    """A kubeconfig user's `exec` credential plugin (client.authentication.k8s.io v1 or v1beta1)."""

    command: str
    args: list[str] = field(default_factory=list)
    env: list[tuple[str, str]] = field(default_factory=list, repr=False)
    api_version: str = "client.authentication.k8s.io/v1"
    interactive_mode: str = "IfAvailable"
    install_hint: str = ""
    provide_cluster_info: bool = False
    cluster_info: Obj = field(default_factory=dict, repr=False)  # KUBERNETES_EXEC_INFO's spec.cluster
    source: str = ""  # "kubeconfig F, user U": for errors


@dataclass
class KubeConfig:
    """Everything the client needs to reach and authenticate to one API server. Secret fields are left
    out of repr()."""

    server: str
    token: str | None = field(default=None, repr=False)
    token_file: str | None = None
    ca_file: str | None = None
    ca_data: bytes | None = field(default=None, repr=False)
    insecure: bool = False
    cert_file: str | None = None
    key_file: str | None = None
    cert_data: bytes | None = field(default=None, repr=False)
    key_data: bytes | None = field(default=None, repr=False)
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    exec: ExecConfig | None = None
    impersonate: dict[str, list[str]] = field(default_factory=dict)  # header -> values
    proxy_url: str | None = None
    tls_server_name: str | None = None
    namespace: str = "default"
    source: str = ""  # where it came from ("kubeconfig F, context C", "in-cluster config"): for errors
    context: str = ""
    _credentials: Credentials | None = field(default=None, init=False, repr=False, compare=False)

    # -- loading ---------------------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | os.PathLike[str], context: str | None = None) -> KubeConfig:
        """One kubeconfig file (what `--kubeconfig FILE` means)."""
        return _from_files([Path(path)], context, explicit=True)

    @classmethod
    def resolve(
        cls,
        kubeconfig: str | os.PathLike[str] | None = None,
        context: str | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        home: str | os.PathLike[str] | None = None,
    ) -> KubeConfig:
        """The loading rules of the module docstring."""
        env = os.environ if environ is None else environ
        if kubeconfig:
            return _from_files([Path(kubeconfig)], context, explicit=True)
        listed = env.get("KUBECONFIG", "")
        if listed:
            paths: list[Path] = []
            for part in listed.split(os.pathsep):
                if part and Path(part) not in paths:
                    paths.append(Path(os.path.expanduser(part)))
            if not any(p.is_file() for p in paths):
                raise InputError(f"$KUBECONFIG={listed}: none of these files exists")
            return _from_files(paths, context, explicit=False, origin="$KUBECONFIG")
        if context is None:
            in_cluster = cls.in_cluster(environ=env)
            if in_cluster is not None:
                return in_cluster
        base = Path(home) if home is not None else Path(env.get("HOME") or os.path.expanduser("~"))
        default = base / ".kube" / "config"
        if not default.is_file():
            raise InputError(
                "no Kubernetes configuration: give --kubeconfig FILE, set $KUBECONFIG, run in a pod "
                f"(in-cluster: $KUBERNETES_SERVICE_HOST and a service-account token) or write {default}"
            )
        return _from_files([default], context, explicit=False)

    @classmethod
    def in_cluster(
        cls, directory: str | os.PathLike[str] | None = None, *, environ: Mapping[str, str] | None = None
    ) -> KubeConfig | None:
        """client-go's rest.InClusterConfig: None when not in a pod (no KUBERNETES_SERVICE_HOST/PORT)."""
        env = os.environ if environ is None else environ
        host = env.get("KUBERNETES_SERVICE_HOST", "")
        port = env.get("KUBERNETES_SERVICE_PORT", "")
        if not host or not port:
            return None
        sa = Path(directory or env.get(SERVICE_ACCOUNT_DIR_ENV) or SERVICE_ACCOUNT_DIR)
        token = sa / "token"
        if not token.is_file():
            raise InputError(
                f"in-cluster config: $KUBERNETES_SERVICE_HOST is set but {token} does not exist "
                "(is a service-account token mounted? automountServiceAccountToken: false?)"
            )
        ca = sa / "ca.crt"
        ns_file = sa / "namespace"
        try:
            namespace = ns_file.read_text().strip() if ns_file.is_file() else ""
        except OSError:
            namespace = ""
        server_host = f"[{host}]" if ":" in host else host
        return cls(
            server=f"https://{server_host}:{port}",
            token_file=str(token),
            ca_file=str(ca) if ca.is_file() else None,
            namespace=namespace or "default",
            source=f"in-cluster config ({sa})",
        )

    # -- use -------------------------------------------------------------------------------------------
    def credentials(self) -> Credentials:
        """The (shared, thread-safe) credential source of this configuration."""
        if self._credentials is None:
            from kdra.kube.credentials import Credentials

            self._credentials = Credentials(self)
        return self._credentials

    def bearer_token(self) -> str | None:
        return self.credentials().token()

    def describe(self) -> str:
        return self.source or self.server


# -- files ----------------------------------------------------------------------------------------------


def _yaml_error(path: Path, e: yaml.YAMLError) -> InputError:
    """Line, column and the parser's problem, never the offending text (it may be a token)."""
    mark = getattr(e, "problem_mark", None)
    problem = str(getattr(e, "problem", "") or "syntax error")
    problem = re.sub(r"'[^']{2,}'", "'…'", problem)  # "found undefined alias 'x...'": keep no content
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return InputError(f"kubeconfig {path}: not valid YAML: {where}{problem}")


def _read(path: Path, explicit: bool) -> Obj | None:
    try:
        text = path.read_text()
    except FileNotFoundError:
        if explicit:
            raise InputError(f"--kubeconfig {path}: No such file or directory") from None
        return None
    except OSError as e:
        raise InputError(f"kubeconfig {path}: {e.strerror or e}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise _yaml_error(path, e) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InputError(f"kubeconfig {path}: not a kubeconfig (kind: Config)")
    return data


@dataclass
class _Merged:
    clusters: dict[str, tuple[Obj, Path]] = field(default_factory=dict)
    users: dict[str, tuple[Obj, Path]] = field(default_factory=dict)
    contexts: dict[str, tuple[Obj, Path]] = field(default_factory=dict)
    current: tuple[str, Path] | None = None
    files: list[Path] = field(default_factory=list)
    read: dict[Path, Obj] = field(default_factory=dict)

    def add(self, path: Path, data: Obj) -> None:
        self.files.append(path)
        self.read[path] = data
        for section, key, table in (
            ("clusters", "cluster", self.clusters),
            ("users", "user", self.users),
            ("contexts", "context", self.contexts),
        ):
            items = data.get(section) or []
            if not isinstance(items, list):
                raise InputError(f"kubeconfig {path}: {section}: must be a list")
            for i, item in enumerate(items):
                if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                    raise InputError(f"kubeconfig {path}: {section}[{i}]: needs a name")
                body = item.get(key) or {}
                if not isinstance(body, dict):
                    raise InputError(f"kubeconfig {path}: {section}[{item['name']}].{key}: must be a mapping")
                table.setdefault(item["name"], (body, path))  # the first file that defines a name wins
        cur = data.get("current-context")
        if cur and self.current is None:
            self.current = (str(cur), path)


def _url(value: str, default_scheme: str, bad: Callable[[str], InputError]) -> str:
    """A server (or proxy) URL as client-go accepts it: the scheme defaults to `default_scheme`; http or
    https, a host, and a port in 1-65535 when one is given; a trailing / dropped. The URL itself is not
    quoted in errors (it may carry a user and password)."""
    url = value if "://" in value else f"{default_scheme}://{value}"
    scheme = url.split("://", 1)[0].lower()
    if scheme not in ("http", "https"):
        raise bad(f"Unsupported value: {scheme!r}: must be https or http")
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as e:  # "Port out of range 0-65535", "Invalid IPv6 URL", a port that is not a number
        raise bad(f"Invalid value: {e}") from None
    if not parts.hostname:
        raise bad("Invalid value: no host (expected https://HOST[:PORT])")
    if port == 0:
        raise bad("Invalid value: port 0: must be 1-65535")
    if any(c.isspace() for c in url):
        raise bad("Invalid value: must not contain spaces")
    return url.rstrip("/")


def _from_files(paths: list[Path], context: str | None, *, explicit: bool, origin: str = "") -> KubeConfig:
    merged = _Merged()
    for p in paths:
        data = _read(p, explicit)
        if data is not None:
            merged.add(p, data)
    where = origin + " " if origin else ""
    names = ", ".join(str(p) for p in merged.files) or ", ".join(str(p) for p in paths)
    label = f"{where}kubeconfig {names}" if where else f"kubeconfig {names}"
    if merged.files and not merged.contexts and merged.current is None:
        # Said as such: "no current-context" sent people looking for a context in a file with nothing in it.
        empty = [p for p in merged.files if not merged.read.get(p)]
        if len(empty) == len(merged.files):
            raise InputError(
                f"{label}: the file is empty" if len(empty) == 1 else f"{label}: the files are empty"
            )
        raise InputError(
            f"{label}: no contexts (a kubeconfig needs clusters, users, contexts and a current-context)"
        )
    if context:
        ctx_name = context
        if ctx_name not in merged.contexts:
            known = ", ".join(sorted(merged.contexts)) or "none"
            raise InputError(f"{label}: context {ctx_name!r} not found (contexts: {known})")
    elif merged.current is not None:
        ctx_name = merged.current[0]
        if ctx_name not in merged.contexts:
            raise InputError(f"kubeconfig {merged.current[1]}: current-context {ctx_name!r}: no such context")
    else:
        known = ", ".join(sorted(merged.contexts))
        hint = f" (give --context NAME; contexts: {known})" if known else ""
        raise InputError(f"{label}: no current-context{hint}")
    ctx, ctx_path = merged.contexts[ctx_name]
    at = f"kubeconfig {ctx_path}, context {ctx_name}"
    cluster_name = ctx.get("cluster")
    if not cluster_name or cluster_name not in merged.clusters:
        raise InputError(f"{at}: contexts[{ctx_name}].context.cluster: cluster {cluster_name!r} not found")
    cluster, cluster_path = merged.clusters[cluster_name]
    user_name = ctx.get("user")
    user: Obj = {}
    user_path = ctx_path
    if user_name:
        if user_name not in merged.users:
            raise InputError(f"{at}: contexts[{ctx_name}].context.user: user {user_name!r} not found")
        user, user_path = merged.users[user_name]
    return _build(
        cluster,
        cluster_path,
        str(cluster_name),
        user,
        user_path,
        str(user_name or ""),
        ctx,
        ctx_path,
        ctx_name,
        at,
    )


def _build(
    cluster: Obj,
    cluster_path: Path,
    cluster_name: str,
    user: Obj,
    user_path: Path,
    user_name: str,
    ctx: Obj,
    ctx_path: Path,
    ctx_name: str,
    at: str,
) -> KubeConfig:
    cfield = f"clusters[{cluster_name}].cluster"
    ufield = f"users[{user_name}].user"

    def bad(fieldpath: str, msg: str, path: Path) -> InputError:
        return InputError(f"kubeconfig {path}, context {ctx_name}: {fieldpath}: {msg}")

    def file_path(value: object, base: Path) -> str:
        f = Path(os.path.expanduser(str(value)))
        return str(f if f.is_absolute() else base.parent / f)

    # Field types as client-go decodes them (a kubeconfig of the wrong type is an error there too): a
    # quoted "false" must never read as true, nor a string of groups as a list of letters.
    def text(section: Obj, key: str, fieldpath: str, path: Path) -> str | None:
        value = section.get(key)
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            raise bad(
                f"{fieldpath}.{key}", f"Invalid value: must be a string, not a {type_name(value)}", path
            )
        return value

    def flag(section: Obj, key: str, fieldpath: str, path: Path) -> bool:
        value = section.get(key)
        if value is None:
            return False
        if not isinstance(value, bool):
            raise bad(
                f"{fieldpath}.{key}", f"Invalid value: must be true or false, not a {type_name(value)}", path
            )
        return value

    def texts(section: Obj, key: str, fieldpath: str, path: Path) -> list[str]:
        value = section.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise bad(f"{fieldpath}.{key}", "Invalid value: must be a list of strings", path)
        return value

    def data(section: Obj, key: str, fieldpath: str, path: Path) -> bytes | None:
        value = text(section, key, fieldpath, path)
        if not value:
            return None
        try:
            return base64.b64decode(value, validate=False)
        except (binascii.Error, ValueError):
            raise bad(f"{fieldpath}.{key}", "Invalid value: not base64", path) from None

    server = text(cluster, "server", cfield, cluster_path)
    if not server:
        raise bad(f"{cfield}.server", "Required value: the cluster has no server", cluster_path)
    server = _url(server, "https", lambda msg: bad(f"{cfield}.server", msg, cluster_path))
    namespace = text(ctx, "namespace", f"contexts[{ctx_name}].context", ctx_path) or "default"
    from kdra.validation.rules import is_dns1123_label

    for problem in is_dns1123_label(namespace):
        raise bad(
            f"contexts[{ctx_name}].context.namespace", f"Invalid value: {namespace!r}: {problem}", ctx_path
        )
    cfg = KubeConfig(server=server, namespace=namespace, context=ctx_name)
    cfg.source = at
    ca_file = text(cluster, "certificate-authority", cfield, cluster_path)
    if ca_file:
        cfg.ca_file = file_path(ca_file, cluster_path)
    cfg.ca_data = data(cluster, "certificate-authority-data", cfield, cluster_path)
    cfg.insecure = flag(cluster, "insecure-skip-tls-verify", cfield, cluster_path)
    if cfg.insecure and (cfg.ca_file or cfg.ca_data):
        # client-go: "specifying a root certificates file with the insecure flag is not allowed"
        raise bad(
            f"{cfield}.insecure-skip-tls-verify",
            "Invalid value: true: not allowed together with a certificate authority",
            cluster_path,
        )
    cfg.tls_server_name = text(cluster, "tls-server-name", cfield, cluster_path)
    proxy = text(cluster, "proxy-url", cfield, cluster_path)
    if proxy:
        if "://" in proxy and proxy.split("://", 1)[0].lower() not in ("http", "https"):
            raise bad(
                f"{cfield}.proxy-url",
                f"Unsupported value: {proxy.split('://', 1)[0]!r}: kdra supports http and https proxies",
                cluster_path,
            )
        _url(proxy, "http", lambda msg: bad(f"{cfield}.proxy-url", msg, cluster_path))
        cfg.proxy_url = proxy

    if user.get("auth-provider"):
        provider = (user.get("auth-provider") or {}).get("name", "")
        raise bad(
            f"{ufield}.auth-provider",
            f"Unsupported value: {provider!r}: auth providers were removed from client-go; use an exec "
            "plugin (gke-gcloud-auth-plugin, kubelogin, aws eks get-token)",
            user_path,
        )
    cfg.token = text(user, "token", ufield, user_path)
    for key, attr in (
        ("tokenFile", "token_file"),
        ("client-certificate", "cert_file"),
        ("client-key", "key_file"),
    ):
        value = text(user, key, ufield, user_path)
        if value:
            setattr(cfg, attr, file_path(value, user_path))
    cfg.cert_data = data(user, "client-certificate-data", ufield, user_path)
    cfg.key_data = data(user, "client-key-data", ufield, user_path)
    has_cert = bool(cfg.cert_file or cfg.cert_data)
    has_key = bool(cfg.key_file or cfg.key_data)
    if has_cert != has_key:
        missing = "client-key" if has_cert else "client-certificate"
        raise bad(
            f"{ufield}.{missing}",
            "Required value: a client certificate needs both certificate and key",
            user_path,
        )
    username = text(user, "username", ufield, user_path)
    password = text(user, "password", ufield, user_path)
    if username or password:
        cfg.username = username or ""
        cfg.password = password or ""
    for key, header in (("as", "Impersonate-User"), ("as-uid", "Impersonate-Uid")):
        value = text(user, key, ufield, user_path)
        if value:
            cfg.impersonate[header] = [value]
    groups = texts(user, "as-groups", ufield, user_path)
    if groups:
        cfg.impersonate["Impersonate-Group"] = groups
    if user.get("exec"):
        cfg.exec = _exec_config(user["exec"], f"{ufield}.exec", user_path, cfg, cluster, bad)
    return cfg


def _exec_config(
    raw: object,
    fieldpath: str,
    path: Path,
    cfg: KubeConfig,
    cluster: Obj,
    bad: Callable[[str, str, Path], InputError],
) -> ExecConfig:
    if not isinstance(raw, dict):
        raise bad(fieldpath, "must be a mapping", path)
    command = raw.get("command")
    if not command:
        raise bad(f"{fieldpath}.command", "Required value", path)
    if not isinstance(command, str):
        raise bad(
            f"{fieldpath}.command", f"Invalid value: must be a string, not a {type_name(command)}", path
        )
    args = raw.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise bad(f"{fieldpath}.args", "Invalid value: must be a list of strings", path)
    if not isinstance(raw.get("env") or [], list):
        raise bad(f"{fieldpath}.env", "Invalid value: must be a list of {name, value}", path)
    provide = raw.get("provideClusterInfo")
    if provide is not None and not isinstance(provide, bool):
        raise bad(
            f"{fieldpath}.provideClusterInfo",
            f"Invalid value: must be true or false, not a {type_name(provide)}",
            path,
        )
    api_version = str(raw.get("apiVersion") or "")
    if api_version not in EXEC_API_VERSIONS:
        raise bad(
            f"{fieldpath}.apiVersion",
            f"Unsupported value: {api_version!r}: supported values: {', '.join(EXEC_API_VERSIONS)}",
            path,
        )
    mode = raw.get("interactiveMode")
    if not mode:
        if api_version.endswith("/v1"):
            raise bad(f"{fieldpath}.interactiveMode", "Required value: (Never, IfAvailable or Always)", path)
        mode = "IfAvailable"  # v1beta1's default
    if mode not in INTERACTIVE_MODES:
        raise bad(
            f"{fieldpath}.interactiveMode",
            f"Unsupported value: {mode!r}: supported values: {', '.join(INTERACTIVE_MODES)}",
            path,
        )
    command = str(command)
    if os.sep in command and not os.path.isabs(command):  # client-go: relative to the kubeconfig
        command = str(path.parent / command)
    env: list[tuple[str, str]] = []
    for i, e in enumerate(raw.get("env") or []):
        if not isinstance(e, dict) or not e.get("name"):
            raise bad(f"{fieldpath}.env[{i}].name", "Required value", path)
        env.append((str(e["name"]), str(e.get("value") or "")))
    info: Obj = {"server": cfg.server}
    if cfg.tls_server_name:
        info["tls-server-name"] = cfg.tls_server_name
    if cfg.insecure:
        info["insecure-skip-tls-verify"] = True
    if cfg.ca_data:
        info["certificate-authority-data"] = base64.b64encode(cfg.ca_data).decode()
    elif cfg.ca_file:
        with contextlib.suppress(OSError):
            info["certificate-authority-data"] = base64.b64encode(Path(cfg.ca_file).read_bytes()).decode()
    if cfg.proxy_url:
        info["proxy-url"] = cfg.proxy_url
    ext = {e.get("name"): e.get("extension") for e in cluster.get("extensions") or [] if isinstance(e, dict)}
    if ext.get("client.authentication.k8s.io/exec") is not None:
        info["config"] = ext["client.authentication.k8s.io/exec"]
    return ExecConfig(
        command=command,
        args=list(args),
        env=env,
        api_version=api_version,
        interactive_mode=str(mode),
        install_hint=str(raw.get("installHint") or ""),
        provide_cluster_info=bool(provide),
        cluster_info=json.loads(json.dumps(info)),
        source=f"kubeconfig {path}, {fieldpath}",
    )
