"""`kdra scheduler`'s flags (and the other cluster commands'): a value no run can use is refused before
anything starts, in one line naming the flag and the rule, exit 2; never taken in silence (a busy loop, a
replica waiting for a Lease it can never create, a scheduler serving a name no pod can carry)."""

from __future__ import annotations

import json
import logging
import socket
from pathlib import Path

import pytest

from kdra.cli.main import main
from kdra.cluster.store import NotFoundError
from kdra.kube.leader import LeaderElector


def _kubeconfig(tmp_path: Path) -> str:
    """A cluster at a closed port: a flag error must come before any connection."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = tmp_path / "kc"
    path.write_text(json.dumps(cfg))
    return str(path)


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        # Named the wrong flag ('--leader-elect-renew-deadline: ...' for a bad lease duration).
        (
            ["--leader-elect", "--leader-elect-lease-duration", "0"],
            "--leader-elect-lease-duration: Invalid value: 0",
        ),
        # Taken: a retry period of 0 re-read and re-wrote the Lease in a busy loop.
        (
            ["--leader-elect", "--leader-elect-retry-period", "0"],
            "--leader-elect-retry-period: Invalid value: 0",
        ),
        (
            ["--leader-elect", "--leader-elect-retry-period", "9"],
            "--leader-elect-renew-deadline: Invalid value: 10",
        ),
        # Taken: the replica waited for the Lease for ever (the API server refuses the name).
        (
            ["--leader-elect", "--leader-elect-resource-namespace", "Kube_System"],
            "--leader-elect-resource-namespace",
        ),
        (["--leader-elect", "--leader-elect-resource-name", "my lease"], "--leader-elect-resource-name"),
        # Taken: served a name no pod can carry (and broke the quarantine's label selector).
        (["--scheduler-name", ""], "--scheduler-name: Invalid value: ''"),
        (["--scheduler-name", "GPU Batch"], "--scheduler-name: Invalid value: 'GPU Batch'"),
        (
            ["--scheduler-name", "x" * 64],
            f"--scheduler-name: Invalid value: '{'x' * 64}': must be no more than 63",
        ),
        # Taken in silence.
        (["--resync", "-5"], "--resync: Invalid value: -5.0"),
        (["--gang-timeout", "-1"], "--gang-timeout: Invalid value: -1.0"),
        (["--stale-gang-grace", "nan"], "--stale-gang-grace: Invalid value: nan"),
        (["--cel-attempt-budget", "-1"], "--cel-attempt-budget: Invalid value: -1"),
        (["--cel-run-budget", "-1"], "--cel-run-budget: Invalid value: -1"),
    ],
)
def test_scheduler_flags_no_run_can_use_are_refused_first(
    flags: list[str], expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["scheduler", "--kubeconfig", _kubeconfig(tmp_path), *flags])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith(f"error: {expected}"), err
    assert len(err.strip().splitlines()) == 1 and "cannot reach" not in err


class _NoNamespace:
    """A client whose Lease namespace does not exist."""

    def get(self, kind: str, name: str, namespace: str) -> None:
        raise NotFoundError(f'leases "{name}" not found')

    def create(self, obj: object) -> None:
        raise NotFoundError('POST .../namespaces/team-a/leases: 404 NotFound: namespaces "team-a" not found')


def test_a_lease_that_cannot_be_created_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    """The error was logged at INFO, which `kdra scheduler` does not show without -v: the replica printed
    'waiting for the leader lease' and nothing more, for ever."""
    elector = LeaderElector(_NoNamespace(), "kdra", "team-a", "a")  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="kdra.kube.leader"):
        for _ in range(3):
            assert not elector.try_acquire_or_renew()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert (
        'Lease team-a/kdra: POST .../namespaces/team-a/leases: 404 NotFound: namespaces "team-a"'
        in warnings[0]
    )


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        # Matched nothing in silence, or went into the request path unescaped ('x?y=1' a query string).
        (["top", "-n", "Team_A"], "-n/--namespace: Invalid value: 'Team_A'"),
        (["explain", "-n", "x?y=1"], "-n/--namespace: Invalid value: 'x?y=1'"),
        (["export", "-n", "a/b"], "-n/--namespace: Invalid value: 'a/b'"),
        (["allocate", "-n", "../.."], "-n/--namespace: Invalid value: '../..'"),
        # 0 re-published the fleet in a busy loop; -1 was 'internal error: ValueError'.
        (["driver", "sim", "-c", "mixed", "--watch", "--interval", "0"], "--interval: Invalid value: 0"),
        (["driver", "sim", "-c", "mixed", "--watch", "--interval", "-1"], "--interval: Invalid value: -1"),
    ],
)
def test_cluster_command_flags_are_checked_before_the_cluster_is_read(
    argv: list[str], expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main([*argv, "--kubeconfig", _kubeconfig(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith(f"error: {expected}"), err
    assert len(err.strip().splitlines()) == 1


def test_a_namespace_is_escaped_in_request_paths() -> None:
    from kdra.kube.resources import resource_path

    assert resource_path("Pod", "x?y=1", "p") == "/api/v1/namespaces/x%3Fy%3D1/pods/p"


@pytest.mark.parametrize("command", ["scheduler", "exporter"])
def test_a_listen_address_in_use_is_one_line_exit_1(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A port another process holds is the machine's state, not bad input: exit 1 (was 2), and one line
    naming the flag and the address (was Python's "(while attempting to bind on address ('127.0.0.1',
    N))" appended)."""
    flag = "--metrics-listen" if command == "scheduler" else "--listen"
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        address = f"127.0.0.1:{held.getsockname()[1]}"
        extra = ["--kubeconfig", _kubeconfig(tmp_path)] if command == "scheduler" else ["--from-simulation"]
        assert main([command, flag, address, *extra]) == 1
    err = capsys.readouterr().err
    assert err == f"error: {flag} {address}: cannot listen there: Address already in use\n"


def test_a_listen_host_that_does_not_resolve_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["scheduler", "--metrics-listen", "nosuch.invalid:9", "--kubeconfig", _kubeconfig(tmp_path)])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --metrics-listen nosuch.invalid:9: cannot resolve the host: ")
    assert "while attempting" not in err and err.count("\n") == 1
