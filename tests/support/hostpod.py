"""Run a pod's container as a host process, with the in-cluster layout a kubelet would give it.

What a kubelet does for a container and kdra relies on: the service account's token, CA and namespace
under a directory (/var/run/secrets/kubernetes.io/serviceaccount in a pod; here a directory the test
chooses, named by $KDRA_SERVICE_ACCOUNT_DIR), `KUBERNETES_SERVICE_HOST`/`_PORT`, the container's `env`
with downward-API `fieldRef`s resolved (metadata.name, metadata.namespace, status.podIP, spec.nodeName,
spec.serviceAccountName), and `$(VAR)` in `command`/`args` expanded from that env (`$$` escapes) as the
kubelet expands them. The image's entrypoint is replaced by a local command (e.g. the venv's `kdra`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(value: str, env: Mapping[str, str]) -> str:
    """Kubernetes' $(VAR) expansion: defined variables replaced, undefined ones left as written."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env[name] if name in env else m.group(0)

    return _VAR.sub(sub, value)


def write_service_account(directory: Path, token: str, ca_file: Path, namespace: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "token").write_text(token)
    (directory / "token").chmod(0o600)
    (directory / "ca.crt").write_bytes(Path(ca_file).read_bytes())
    (directory / "namespace").write_text(namespace)
    return directory


def container_env(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    *,
    pod_name: str,
    namespace: str,
    pod_ip: str = "127.0.0.1",
    node_name: str = "host",
) -> dict[str, str]:
    spec = pod.get("spec") or {}
    fields = {
        "metadata.name": pod_name,
        "metadata.namespace": namespace,
        "status.podIP": pod_ip,
        "status.hostIP": pod_ip,
        "spec.nodeName": node_name,
        "spec.serviceAccountName": str(spec.get("serviceAccountName") or "default"),
    }
    env: dict[str, str] = {}
    for e in container.get("env") or []:
        if "value" in e:
            env[e["name"]] = expand(str(e["value"]), env)
        elif (e.get("valueFrom") or {}).get("fieldRef"):
            path = e["valueFrom"]["fieldRef"]["fieldPath"]
            if path not in fields:
                raise ValueError(f"env {e['name']}: fieldRef {path} is not resolved by support.hostpod")
            env[e["name"]] = fields[path]
        else:
            raise ValueError(f"env {e['name']}: only value and fieldRef are supported")
    return env


def host_process(
    pod: Mapping[str, Any],
    container_name: str,
    *,
    entrypoint: Sequence[str],
    server_host: str,
    server_port: int,
    sa_dir: Path,
    pod_name: str,
    namespace: str,
    pod_ip: str = "127.0.0.1",
) -> tuple[list[str], dict[str, str]]:
    """(argv, environment) for the container: `entrypoint` stands for the image's ENTRYPOINT unless the
    container sets `command` (whose first word is then looked up as a local command)."""
    spec = pod["spec"]
    container = next(c for c in spec["containers"] if c["name"] == container_name)
    env = container_env(pod, container, pod_name=pod_name, namespace=namespace, pod_ip=pod_ip)
    command = [expand(str(a), env) for a in container.get("command") or []] or list(entrypoint)
    argv = command + [expand(str(a), env) for a in container.get("args") or []]
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH")}
    full = {
        **keep,
        "HOME": str(sa_dir.parent),
        **env,
        "KUBERNETES_SERVICE_HOST": server_host,
        "KUBERNETES_SERVICE_PORT": str(server_port),
        "KDRA_SERVICE_ACCOUNT_DIR": str(sa_dir),
    }
    return argv, full
