"""The container image, built the way the Containerfile builds it, without a container runtime: a Debian
bookworm minbase root filesystem (hack/image/rootfs.sh: debootstrap + `install.sh runtime`, cached outside
the repository), the project's wheel and its dependencies' wheels installed by `install.sh venv`, then
`kdra --version` and `kdra scheduler --help` run inside it with chroot as uid 65532 on a read-only root."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kdra import __version__

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
COMPILERS = ("gcc", "cc", "c++", "g++", "clang", "make", "ld", "as", "rustc", "go")


def test_containerfile_uses_the_steps_the_test_runs() -> None:
    text = (ROOT / "Containerfile").read_text()
    final = text[text.rindex("\nFROM ") :]
    assert "kdra-image-install runtime" in final and "kdra-image-install venv /tmp/wheels" in final
    assert re.search(r"^ARG BASE=docker\.io/library/debian:bookworm-\d{8}-slim$", text, re.M)  # pinned
    assert 'ENTRYPOINT ["/opt/kdra/bin/kdra"]' in final and "USER 65532:65532" in final
    assert "pip" not in final.split("COPY --from=build", 1)[1].replace("/tmp/wheels", "")
    assert 'suite="${KDRA_IMAGE_SUITE:-bookworm}"' in (ROOT / "hack/image/rootfs.sh").read_text()


def run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)  # type: ignore[call-overload]
    assert proc.returncode == 0, f"{cmd}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_image_rootfs_runs_kdra_as_non_root_on_a_read_only_root(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("building a root filesystem needs root (debootstrap, chroot)")
    if shutil.which("debootstrap") is None:
        pytest.fail("debootstrap is not installed: `make e2e` installs it (apt-get install debootstrap)")
    base = Path(run(["bash", str(ROOT / "hack/image/rootfs.sh")]).stdout.strip().splitlines()[-1])
    wheels = tmp_path / "wheels"
    isolation = []
    if importlib.util.find_spec("setuptools") and importlib.util.find_spec("wheel"):
        isolation = ["--no-build-isolation"]
    run([sys.executable, "-m", "pip", "wheel", "-q", *isolation, "--wheel-dir", str(wheels), str(ROOT)])
    assert any(p.name.startswith(f"kdra-{__version__}-") for p in wheels.iterdir())
    rootfs = tmp_path / "rootfs"
    run(["cp", "-a", str(base), str(rootfs)])
    shutil.copytree(wheels, rootfs / "tmp" / "wheels")
    shutil.copy(ROOT / "hack/image/install.sh", rootfs / "usr/local/sbin/kdra-image-install")
    # RUN kdra-image-install venv /tmp/wheels (a private mount namespace: /dev goes away with it)
    run(
        [
            "unshare",
            "-m",
            "sh",
            "-c",
            'mount --bind /dev "$0/dev" && exec chroot "$0" kdra-image-install venv /tmp/wheels',
            str(rootfs),
        ]
    )
    shutil.rmtree(rootfs / "tmp" / "wheels")
    (rootfs / "usr/local/sbin/kdra-image-install").unlink()

    def in_image(*argv: str) -> subprocess.CompletedProcess[str]:
        # USER 65532:65532 on a read-only root filesystem (readOnlyRootFilesystem: true), ENV as the image's
        script = (
            'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && '
            'exec chroot --userspec=65532:65532 "$0" '
            '/usr/bin/env -i PATH=/opt/kdra/bin:/usr/bin:/bin PYTHONDONTWRITEBYTECODE=1 "$@"'
        )
        return subprocess.run(
            ["unshare", "-m", "sh", "-c", script, str(rootfs), *argv],
            capture_output=True,
            text=True,
            timeout=120,
        )

    version = in_image("/opt/kdra/bin/kdra", "--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"kdra {__version__}"
    helptext = in_image("/opt/kdra/bin/kdra", "scheduler", "--help")
    assert helptext.returncode == 0, helptext.stderr
    assert "--leader-elect" in helptext.stdout and "--metrics-listen" in helptext.stdout
    assert in_image(
        "/opt/kdra/bin/python", "-c", "import os; print(os.getuid(), os.getgid())"
    ).stdout.split() == [
        "65532",
        "65532",
    ]
    touch = in_image("/bin/sh", "-c", "echo x > /opt/kdra/x")
    assert touch.returncode != 0 and "Read-only file system" in touch.stderr  # the root really is read-only
    found = [
        f"{d}/{c}"
        for d in ("usr/bin", "usr/local/bin", "bin", "opt/kdra/bin")
        for c in COMPILERS
        if (rootfs / d / c).exists()
    ]
    assert found == [], f"compilers in the image: {found}"
    assert not (rootfs / "opt/kdra/bin/pip").exists()
