"""Write the Go modules of each Kubernetes release kdra follows from the one place that pins them,
`kdra.api.versions.BUILDS`: hack/k8s/v1.XX/go.mod (the control plane: k8s.io/kubernetes and its staging
modules) and tests/oracle/v1.XX/go.mod (the allocator oracle: k8s.io/dynamic-resource-allocation), each
then completed by `go mod tidy` (modules from the Go module proxy).

Moving a pin (e.g. 1.38 from v1.38.0-beta.0 to v1.38.0): change its line in BUILDS, run `make pin`, then
the unit suite (tests/test_pins.py checks the modules agree with BUILDS and prints what is pinned) and
re-record upstream's allocator table (tests/oracle/record/record.sh). Only modules that disagree with
BUILDS are rewritten.

Usage: python hack/pin.py [MINOR...]       (default: every release in BUILDS)
       python hack/pin.py --check          (prints what is pinned; exit 1, naming them, if any module
                                            disagrees with BUILDS)
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from kdra.api.versions import BUILDS, DEFAULT_VERSION, is_final, library_version  # noqa: E402

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kdra"
K8S_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")


def go_env() -> dict[str, str]:
    """The environment the project's Go builds use."""
    env = dict(os.environ)
    env.setdefault("GOMODCACHE", str(CACHE / "gomod"))
    env.setdefault("GOCACHE", str(CACHE / "gocache"))
    env["GOFLAGS"] = "-mod=mod"
    env["CGO_ENABLED"] = "0"
    if shutil.which("go", path=env.get("PATH")) is None and Path("/usr/local/go/bin/go").exists():
        env["PATH"] = "/usr/local/go/bin:" + env.get("PATH", "")
    env["GOTOOLCHAIN"] = "auto"  # as hack/k8s/build.sh: the Go the module's go directive needs
    return env


def module_file(path: str, version: str) -> Path:
    """A module's go.mod from the proxy (downloaded into the shared module cache)."""
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "go.mod").write_text("module scratch\ngo 1.26.0\n")
        env = go_env()
        env["GOTOOLCHAIN"] = "local"  # only the .mod file is needed, which any toolchain can fetch
        subprocess.run(
            ["go", "mod", "download", "-json", f"{path}@{version}"],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
        )
    mod = Path(env["GOMODCACHE"]) / "cache" / "download" / path / "@v" / f"{version}.mod"
    if not mod.exists():
        raise SystemExit(f"pin: {path}@{version} is not served by the Go module proxy")
    return mod


def go_directive(mod: Path) -> str:
    m = re.search(r"^go (\S+)$", mod.read_text(), re.M)
    assert m, mod
    return m.group(1)


def pinned(go_mod: Path, module: str) -> str | None:
    """The version `go_mod` requires of `module` (a replace wins), None without the file."""
    if not go_mod.exists():
        return None
    text = go_mod.read_text()
    m = re.search(rf"^\s*{re.escape(module)} => {re.escape(module)} (\S+)$", text, re.M)
    if m is None:
        m = re.search(rf"^\s*(?:require )?{re.escape(module)} (v\S+)", text, re.M)
    return m.group(1) if m else None


def control_plane_mod(minor: str) -> Path:
    return ROOT / "hack" / "k8s" / f"v{minor}" / "go.mod"


def oracle_mod(minor: str) -> Path:
    return ROOT / "tests" / "oracle" / f"v{minor}" / "go.mod"


def stale(minor: str) -> list[str]:
    """What of `minor` disagrees with BUILDS (empty when nothing)."""
    build = BUILDS[minor]
    out = []
    if pinned(control_plane_mod(minor), "k8s.io/kubernetes") != build:
        out.append(f"{control_plane_mod(minor).relative_to(ROOT)} does not pin k8s.io/kubernetes {build}")
    lib = library_version(minor)
    if pinned(oracle_mod(minor), "k8s.io/dynamic-resource-allocation") != lib:
        out.append(
            f"{oracle_mod(minor).relative_to(ROOT)} does not pin k8s.io/dynamic-resource-allocation {lib}"
        )
    return out


def tidy(workdir: Path) -> None:
    subprocess.run(["go", "mod", "tidy"], cwd=workdir, env=go_env(), check=True)


def write_control_plane(minor: str) -> None:
    build = BUILDS[minor]
    staging = library_version(minor)
    k8s_mod = module_file("k8s.io/kubernetes", build)
    modules = re.findall(r"^\s*(k8s\.io/[\w.-]+) => \./staging/", k8s_mod.read_text(), re.M)
    replaces = "\n".join(f"\t{m} => {m} {staging}" for m in modules)
    tools = "\n".join(
        ["\tgo.etcd.io/etcd/server/v3"] + [f"\tk8s.io/kubernetes/cmd/{b}" for b in K8S_BINARIES]
    )
    target = control_plane_mod(minor)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(
        "// Builds the upstream Kubernetes control-plane binaries (and etcd) that kdra's\n"
        "// Kubernetes-mode tests run against. See hack/k8s/build.sh; written by hack/pin.py.\n"
        "module kdra.local/hack/k8s\n\n"
        f"go {go_directive(k8s_mod)}\n\n"
        f"require k8s.io/kubernetes {build}\n\n"
        f"replace (\n{replaces}\n)\n\n"
        f"tool (\n{tools}\n)\n"
    )
    (target.parent / "go.sum").unlink(missing_ok=True)
    tidy(target.parent)


def write_oracle(minor: str) -> None:
    lib = library_version(minor)
    target = oracle_mod(minor)
    if not (target.parent / "features.go").exists():
        raise SystemExit(
            f"pin: {target.parent.relative_to(ROOT)}/features.go is missing: map the gates as kube-scheduler "
            f"{BUILDS[minor]} does (its AllocatorFeatures) first"
        )
    dra_mod = module_file("k8s.io/dynamic-resource-allocation", lib)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for src in [
            ROOT / "tests/oracle/main.go",
            ROOT / "tests/oracle/marshal.go",
            *target.parent.glob("*.go"),
        ]:
            shutil.copy(src, work / src.name)
        (work / "go.mod").write_text(
            f"// The allocator oracle linked against Kubernetes {minor}'s structured allocator "
            "(see ../main.go, ../build.sh).\n"
            f"module kdra.local/tests/oracle/v{minor}\n\n"
            f"go {go_directive(dra_mod)}\n\n"
            "require (\n"
            f"\tk8s.io/api {lib}\n\tk8s.io/apimachinery {lib}\n"
            f"\tk8s.io/dynamic-resource-allocation {lib}\n)\n"
        )
        tidy(work)
        shutil.copy(work / "go.mod", target)
        shutil.copy(work / "go.sum", target.parent / "go.sum")


def main(argv: list[str]) -> int:
    if argv[:1] == ["--check"]:
        for minor, build in BUILDS.items():
            note = " (the default)" if minor == DEFAULT_VERSION else ""
            if not is_final(build):
                note = f" (a pre-release: selectable, not the default until v{minor}.0 is pinned)"
            print(f"pin: Kubernetes {minor} is {build}{note}")
        problems = [p for minor in BUILDS for p in stale(minor)]
        for p in problems:
            print(f"pin: {p} (run `make pin`)", file=sys.stderr)
        return 1 if problems else 0
    for minor in argv or list(BUILDS):
        if minor not in BUILDS:
            raise SystemExit(
                f"pin: Kubernetes {minor} is not in kdra.api.versions.BUILDS ({', '.join(BUILDS)})"
            )
        problems = stale(minor)
        if not problems:
            print(f"pin: Kubernetes {minor} is {BUILDS[minor]} already")
            continue
        if pinned(control_plane_mod(minor), "k8s.io/kubernetes") != BUILDS[minor]:
            write_control_plane(minor)
        if pinned(oracle_mod(minor), "k8s.io/dynamic-resource-allocation") != library_version(minor):
            write_oracle(minor)
        print(f"pin: Kubernetes {minor} is now {BUILDS[minor]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
