"""The one e2e wait: a timeout factor for slower runners, and failures that explain themselves."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.wait import (
    TIMEOUT_FACTOR_ENV,
    WaitTimeout,
    clear_diagnostics,
    diagnose,
    file_tail,
    lines_naming,
    scaled,
    stays,
    wait_for,
)


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(TIMEOUT_FACTOR_ENV, raising=False)
    clear_diagnostics()
    yield
    clear_diagnostics()


def test_a_timed_out_wait_says_what_it_last_saw_and_prints_the_registered_logs(tmp_path: Path) -> None:
    log = tmp_path / "kdra.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)) + "E1204 status of Queue a: timeout\n")
    diagnose("kdra scheduler", file_tail(log))
    with pytest.raises(WaitTimeout) as e:
        wait_for(lambda: {}, 0.05, "12 and 4", interval=0.01)
    text = str(e.value)
    assert text.startswith("timed out after 0s waiting for 12 and 4")
    assert "last seen: {}" in text
    assert "----- kdra scheduler (last 40 lines) -----" in text and "status of Queue a: timeout" in text
    assert "line 10\n" not in text  # only the tail
    assert isinstance(e.value, AssertionError) and isinstance(e.value, TimeoutError)


def test_a_shared_components_log_is_read_for_one_namespaces_lines(tmp_path: Path) -> None:
    log = tmp_path / "kube-scheduler.log"
    log.write_text(
        'I1205 "Successfully bound pod to node" pod="e2e-other/a" node="n0"\n'
        'I1205 "Unable to schedule pod; no fit; waiting" pod="e2e-mine/trainer" err="0/2 nodes"\n'
        'I1205 "Added node to NodeTree" node="n1"\n'
    )
    diagnose("kube-scheduler on e2e-mine", lines_naming(log, '"e2e-mine/'))
    with pytest.raises(WaitTimeout) as e:
        wait_for(lambda: False, 0.01, "trainer bound", interval=0.01)
    text = str(e.value)
    assert 'pod="e2e-mine/trainer" err="0/2 nodes"' in text
    assert "e2e-other" not in text and "NodeTree" not in text


def test_the_timeout_factor_stretches_every_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TIMEOUT_FACTOR_ENV, "3")
    assert scaled(10) == 30
    start = time.monotonic()
    with pytest.raises(WaitTimeout, match="timed out after 0s"):
        wait_for(lambda: None, 0.1, "nothing", interval=0.01)
    assert time.monotonic() - start >= 0.3
    monkeypatch.setenv(TIMEOUT_FACTOR_ENV, "fast")
    with pytest.raises(ValueError, match="KDRA_E2E_TIMEOUT_FACTOR='fast': must be a number >= 1"):
        scaled(1)


def test_a_wait_inside_a_probe_that_runs_out_is_the_failure_not_a_not_yet() -> None:
    def probe() -> bool:
        wait_for(lambda: None, 0.01, "the inner thing", interval=0.01)
        return True

    with pytest.raises(WaitTimeout, match="the inner thing"):
        wait_for(probe, 5, "the outer thing", interval=0.01)


def test_stays_fails_with_what_broke_it() -> None:
    values = iter([True, True, "", True])
    with pytest.raises(AssertionError, match="the standby stays one did not hold: got ''"):
        stays(lambda: next(values), 5, "the standby stays one", interval=0.001)
    stays(lambda: True, 0.02, "always", interval=0.001)


def test_a_failed_e2e_test_shows_the_components_logs_not_the_audit_log(tmp_path: Path) -> None:
    """The control plane's part of a failure report: each component's last lines; the audit log (one
    JSON line per write, megabytes) is evidence for a checker, not a tail to read."""
    from support.shared_plane import AttachedControlPlane

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "kube-apiserver.log").write_text("".join(f"line {i}\n" for i in range(100)))
    (logs / "audit.log").write_text('{"kind":"Event","verb":"create"}\n')
    apiserver = tmp_path / "kube-apiserver"  # the plane asks its binaries for their version
    apiserver.write_text("#!/bin/sh\necho Kubernetes v1.37.2\n")
    apiserver.chmod(0o755)
    state = {
        "version": "1.37",
        "bin_dir": str(tmp_path),
        "work_dir": str(tmp_path),
        "certs": {
            f: str(tmp_path / f)
            for f in ("ca_cert", "ca_key", "server_cert", "server_key", "sa_key", "sa_pub", "token_file")
        }
        | {"token": "t"},
        "server": "https://127.0.0.1:1",
        "kubeconfig": str(tmp_path / "kubeconfig"),
        "ports": {"etcd": 1, "apiserver": 1, "kcm": 1, "scheduler": 1},
    }
    tails = AttachedControlPlane(state).logs(lines=3)
    assert tails == "== kube-apiserver\nline 97\nline 98\nline 99", tails
