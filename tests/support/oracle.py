"""The allocator oracle: the real Kubernetes structured allocator, one process per version.

tests/oracle/ holds a small Go program (main.go) linked against k8s.io/dynamic-resource-allocation at
each supported Kubernetes version (tests/oracle/v1.XX, one Go module each). `tests/oracle/build.sh`
builds it from the Go module proxy into ~/.cache/kdra/oracle (outside the repository, reused). This
module finds or builds the binaries and talks to them: cases go in as JSON lines on stdin, answers come
back in order on stdout, so one process serves thousands of cases.

A case (see main.go): `gates` (every gate of the version), `nodes`, `deviceClasses`, `resourceSlices`,
`allocatedClaims`, `groups` (lists of claims allocated in turn, first node that fits wins). An answer:
`variant` (stable/incubating/experimental, picked from the gates as kube-scheduler does) and per group
`outcome` (allocation/unschedulable/error/timeout) with `node`, `allocations`, `error`, `nodeErrors`
(ErrFailedAllocationOnNode per node), `allocateOne` (upstream's search steps) and `seconds`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from kdra.api.features import SUPPORTED_VERSIONS
from support.controlplane import repo_root


class OracleError(RuntimeError):
    pass


_built: dict[str, Path] = {}


def build_oracles(versions: Iterable[str] = SUPPORTED_VERSIONS) -> dict[str, Path]:
    """Paths of the oracle binaries, building what is missing (tests/oracle/build.sh; minutes cold).

    KDRA_ORACLE_<1_36|1_37>=PATH uses a given binary instead."""
    wanted = [v for v in versions if v not in _built]
    for v in list(wanted):
        env = os.environ.get("KDRA_ORACLE_" + v.replace(".", "_"))
        if env:
            _built[v] = Path(env)
            wanted.remove(v)
    if wanted:
        script = repo_root() / "tests" / "oracle" / "build.sh"
        if shutil.which("go") is None and not Path("/usr/local/go/bin/go").exists():
            raise OracleError("Go is not installed: the allocator oracle needs go >= 1.26 to build")
        proc = subprocess.run(
            ["bash", str(script), *wanted], capture_output=True, text=True, timeout=3600, check=False
        )
        if proc.returncode != 0:
            raise OracleError(f"{script} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
        for line in proc.stdout.splitlines():
            version, _, path = line.partition(" ")
            if version in wanted:
                _built[version] = Path(path)
        missing = [v for v in wanted if v not in _built]
        if missing:
            raise OracleError(
                f"{script} printed no binary for {missing}:\n{proc.stdout}\n{proc.stderr[-2000:]}"
            )
    return {v: _built[v] for v in versions}


class Oracle:
    """A running kdra-oracle for one Kubernetes version. `run(cases)` streams cases through it."""

    def __init__(self, version: str, binary: Path | None = None) -> None:
        self.version = version
        self.binary = binary or build_oracles([version])[version]
        self._proc: subprocess.Popen[str] | None = None

    def _start(self) -> subprocess.Popen[str]:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen(
                [str(self.binary)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                bufsize=1 << 20,
            )
        return self._proc

    def run(self, cases: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """Answers in case order. A writer thread feeds stdin, so any number of cases can be queued."""
        proc = self._start()
        assert proc.stdin is not None and proc.stdout is not None
        items = list(cases)
        stdin: IO[str] = proc.stdin
        failure: list[BaseException] = []

        def feed() -> None:
            try:
                for case in items:
                    stdin.write(json.dumps(case, separators=(",", ":")) + "\n")
                stdin.flush()
            except BaseException as exc:  # the reader reports a dead process
                failure.append(exc)

        writer = threading.Thread(target=feed, daemon=True)
        writer.start()
        for case in items:
            line = proc.stdout.readline()
            if not line:
                raise OracleError(
                    f"the {self.version} oracle exited (code {proc.poll()}) at case {case.get('id')}"
                )
            answer: dict[str, Any] = json.loads(line)
            if answer.get("id") != case.get("id"):
                raise OracleError(f"oracle answered {answer.get('id')!r} for case {case.get('id')!r}")
            yield answer
        writer.join()
        if failure:
            raise OracleError(f"writing to the {self.version} oracle failed: {failure[0]!r}")

    def run_one(self, case: dict[str, Any]) -> dict[str, Any]:
        return next(iter(self.run([case])))

    def close(self) -> None:
        if self._proc is not None:
            if self._proc.stdin is not None:
                self._proc.stdin.close()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None

    def __enter__(self) -> Oracle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
