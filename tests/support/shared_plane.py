"""One control plane shared by several pytest processes (pytest-xdist workers).

    python -m support.shared_plane [--version 1.37] -- pytest -n 2 --dist loadgroup -m e2e ...

builds or reuses the binaries, starts one `ControlPlane`, writes its coordinates to a state file named by
KDRA_E2E_CONTROL_PLANE in the command's environment, runs the command, and stops the plane when the command
ends (the plane's processes also die with this process, as always). The e2e fixture sees the variable and
attaches (`AttachedControlPlane`) instead of starting a plane per worker.

This process keeps owning the components: restarting kube-scheduler and kube-controller-manager with other
feature gates (the differential harness does that) is asked for over a Unix socket beside the state file
and done here, so restarted components do not die with the worker that asked. Tests that restart the API
server or etcd themselves cannot share a plane: they are marked `e2e_serial` and run in a pytest run of
their own (see Makefile and docs/kubernetes-mode.md).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import signal
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from support.controlplane import (
    Certs,
    ControlPlane,
    ControlPlaneConfig,
    ControlPlaneError,
    ensure_binaries,
    ensure_kwok,
    k8s_release,
    remove_tree,
)

STATE_ENV = "KDRA_E2E_CONTROL_PLANE"


def session_config(kwok_binary: Path | None = None) -> ControlPlaneConfig:
    """The configuration of the e2e session's control plane: the same whether one pytest process starts
    it (tests/e2e/conftest.py) or `shared_plane` starts it for every lane. Options the session's tests
    rely on belong here, so both ways get them: KWOK is every test node's kubelet (nodes made with
    kubelet=False have none); the audit log is what fault tests read to see who wrote what, and when
    (support.invariants); the Workload API is on (ControlPlaneConfig's default)."""
    return ControlPlaneConfig(kwok=True, kwok_binary=kwok_binary, audit_log=True)


def _state(cp: ControlPlane, sock: Path) -> dict[str, Any]:
    assert cp.certs is not None
    return {
        "version": cp.version,
        "bin_dir": str(cp.bin_dir),
        "work_dir": str(cp.work_dir),
        "server": cp.server,
        "kubeconfig": str(cp.kubeconfig),
        "certs": {k: str(v) for k, v in vars(cp.certs).items()},
        "ports": {
            "etcd": cp.etcd_port,
            "apiserver": cp.apiserver_port,
            "kcm": cp.kcm_port,
            "scheduler": cp.scheduler_port,
            "kwok": cp.kwok_port,
        },
        "feature_gates": cp.config.feature_gates,
        "socket": str(sock),
    }


class _Handler(socketserver.StreamRequestHandler):
    """One JSON request per line, one JSON answer per line; the work is done by the main thread."""

    server: _Server

    def handle(self) -> None:
        for line in self.rfile:
            reply: queue.Queue[dict[str, Any]] = queue.Queue(1)
            try:
                self.server.requests.put((json.loads(line), reply))
                answer = reply.get()
            except Exception as e:  # report every failure to the asking test, keep serving
                answer = {"error": f"{type(e).__name__}: {e}"}
            self.wfile.write((json.dumps(answer) + "\n").encode())
            self.wfile.flush()


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str) -> None:
        super().__init__(path, _Handler)
        self.requests: queue.Queue[tuple[dict[str, Any], queue.Queue[dict[str, Any]]]] = queue.Queue()


def _answer(cp: ControlPlane, req: Mapping[str, Any]) -> dict[str, Any]:
    """Runs on the main thread: components started here must not be started by a handler thread, since
    they die with the thread that started them (PR_SET_PDEATHSIG)."""
    op = req.get("op")
    if op == "set_feature_gates":
        restarted = cp.set_feature_gates(dict(req.get("gates") or {}))
        return {"restarted": restarted, "gates": cp.scheduler_feature_gates}
    if op == "gates":
        return {"gates": cp.scheduler_feature_gates}
    if op == "check_alive":
        cp.check_alive()
        return {}
    raise ControlPlaneError(f"unknown request {op!r}")


def _serve_until_done(cp: ControlPlane, server: _Server, proc: subprocess.Popen[bytes]) -> int:
    while True:
        rc = proc.poll()
        if rc is not None:
            return rc
        try:
            req, reply = server.requests.get(timeout=0.2)
        except queue.Empty:
            continue
        try:
            reply.put(_answer(cp, req))
        except Exception as e:
            reply.put({"error": f"{type(e).__name__}: {e}"})


class AttachedControlPlane(ControlPlane):
    """A `ControlPlane` started by another process (`shared_plane`): same coordinates and helpers; gate
    changes and liveness checks go to the owner; it never stops anything."""

    def __init__(self, state: Mapping[str, Any]) -> None:
        self.state = dict(state)
        cfg = ControlPlaneConfig(feature_gates=dict(state.get("feature_gates") or {}))
        super().__init__(Path(state["bin_dir"]), Path(state["work_dir"]), cfg, k8s_release(state["version"]))
        self.version = str(state["version"])
        certs: dict[str, Any] = {k: (v if k == "token" else Path(v)) for k, v in state["certs"].items()}
        self.certs = Certs(**certs)
        self.server = str(state["server"])
        self.kubeconfig = Path(state["kubeconfig"])
        ports = state["ports"]
        self.etcd_port, self.apiserver_port = int(ports["etcd"]), int(ports["apiserver"])
        self.kcm_port, self.scheduler_port = int(ports["kcm"]), int(ports["scheduler"])
        self.kwok_port = int(ports.get("kwok", 0))

    @classmethod
    def from_env(cls) -> AttachedControlPlane | None:
        path = os.environ.get(STATE_ENV)
        if not path:
            return None
        return cls(json.loads(Path(path).read_text()))

    def _ask(self, req: Mapping[str, Any]) -> dict[str, Any]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(300)
            s.connect(str(self.state["socket"]))
            s.sendall((json.dumps(req) + "\n").encode())
            data = b""
            while not data.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        answer: dict[str, Any] = json.loads(data or b"{}")
        if "error" in answer:
            raise ControlPlaneError(f"shared control plane: {answer['error']}")
        return answer

    def start(self, timeout: float = 180.0) -> ControlPlane:
        return self

    def stop(self) -> None:
        return None

    def check_alive(self) -> None:
        self._ask({"op": "check_alive"})

    def set_feature_gates(self, gates: Mapping[str, bool], timeout: float = 60.0) -> bool:
        return bool(self._ask({"op": "set_feature_gates", "gates": dict(gates)})["restarted"])

    set_scheduler_feature_gates = set_feature_gates

    @property
    def scheduler_feature_gates(self) -> dict[str, bool]:
        return dict(self._ask({"op": "gates"})["gates"])


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m support.shared_plane", description=__doc__.split("\n")[0])
    ap.add_argument("--version", default=None, help="Kubernetes minor (default KDRA_K8S_VERSION, else 1.37)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run against the plane")
    args = ap.parse_args(argv)
    cmd = list(args.command)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        ap.error("give the command to run after --")
    bin_dir = ensure_binaries(sys.stderr, args.version)
    kwok = ensure_kwok(sys.stderr)
    work = Path(tempfile.mkdtemp(prefix="kdra-e2e-plane-"))
    cp = ControlPlane(bin_dir, work, session_config(kwok))
    sock = work / "control.sock"
    server: _Server | None = None
    # SIGTERM (CI cancelling the job) unwinds like Ctrl-C: the plane is stopped in `finally`.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        cp.start()
        server = _Server(str(sock))
        threading.Thread(target=server.serve_forever, name="shared-plane", daemon=True).start()
        state = work / "state.json"
        state.write_text(json.dumps(_state(cp, sock), indent=2))
        sys.stderr.write(
            f"shared control plane {cp.version} up in {cp.startup_seconds:.1f}s at {cp.server} "
            f"(work dir {work})\n"
        )
        proc = subprocess.Popen(cmd, env={**os.environ, STATE_ENV: str(state)})
        try:
            return _serve_until_done(cp, server, proc)
        finally:
            if proc.poll() is None:  # interrupted: stop the command before the plane
                proc.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(30)
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
        cp.stop()
        if os.environ.get("KDRA_E2E_KEEP"):
            sys.stderr.write(f"control plane logs kept in {work}\n")
        else:
            with contextlib.suppress(OSError):
                remove_tree(work)


if __name__ == "__main__":
    sys.exit(main())
