"""helm for the chart tests: `ensure_helm()` builds (or reuses) it with hack/helm/build.sh, as
`ensure_binaries()` does the control plane's; `render()` runs `helm template` and returns the objects."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import yaml

from support.controlplane import ControlPlaneError, repo_root


def chart_dir() -> Path:
    return repo_root() / "deploy" / "helm" / "kdra"


def ensure_helm(log: IO[str] | None = None) -> Path:
    """The helm binary: $KDRA_HELM when set, else hack/helm/build.sh's (built on first use)."""
    prebuilt = os.environ.get("KDRA_HELM")
    if prebuilt:
        if not os.access(prebuilt, os.X_OK):
            raise ControlPlaneError(f"KDRA_HELM={prebuilt} is not executable")
        return Path(prebuilt)
    script = repo_root() / "hack" / "helm" / "build.sh"
    out = log or sys.stderr
    proc = subprocess.Popen(
        ["bash", str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        out.write(line)
        out.flush()
    if proc.wait() != 0:
        raise ControlPlaneError(f"{script} failed; the chart tests need helm.\n{''.join(lines[-40:])}")
    path = Path(lines[-1].strip())
    if not os.access(path, os.X_OK):
        raise ControlPlaneError(f"{script} reported {path}, which is not executable")
    return path


def helm(binary: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, HELM_CACHE_HOME="/tmp/kdra-helm/cache", HELM_CONFIG_HOME="/tmp/kdra-helm/config")
    env["HELM_DATA_HOME"] = "/tmp/kdra-helm/data"
    proc = subprocess.run([str(binary), *args], capture_output=True, text=True, env=env, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}{proc.stdout}")
    return proc


def render(
    binary: Path,
    release: str,
    namespace: str,
    values: Mapping[str, Any] | None = None,
    *,
    include_crds: bool = False,
    extra: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """`helm template RELEASE deploy/helm/kdra -n NAMESPACE --set-json k=v ...` as objects."""
    args = ["template", release, str(chart_dir()), "-n", namespace]
    for key, value in (values or {}).items():
        args += ["--set-json", f"{key}={json.dumps(value)}"]
    if include_crds:
        args.append("--include-crds")
    proc = helm(binary, *args, *extra)
    return [d for d in yaml.safe_load_all(proc.stdout) if d]
