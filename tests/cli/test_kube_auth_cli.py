"""Every command that reads a cluster finds it by the same loading rules and never prints a credential:
a canary token in the kubeconfig must not appear in any output of any command, whatever goes wrong
(server refuses it, is unreachable, the kubeconfig is broken), at any verbosity."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from kdra.cli.main import main

CANARY = "canary-7c1b1f0e9a4d4e6b8f2a3c5d7e9f1a2b"

COMMANDS = [
    ["explain", "pod-a", "-n", "default"],
    ["export", "--output-file", "-"],
    ["allocate"],
    ["driver", "sim", "-c", "mixed"],
    ["exporter", "--once"],
    ["scheduler", "-v", "-v"],
]


class Refuse(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        body = b'{"kind": "Status", "code": 401, "reason": "Unauthorized", "message": "Unauthorized"}'
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_PUT = do_PATCH = do_GET


class RefusingServer(ThreadingHTTPServer):
    daemon_threads = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def refusing() -> Iterator[RefusingServer]:
    srv = RefusingServer(("127.0.0.1", 0), Refuse)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


def write_kc(path: Path, server: str, token_line: str | None = None) -> Path:
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": CANARY}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    text = json.dumps(cfg, indent=1)
    if token_line is not None:
        text = text.replace(f'"token": "{CANARY}"', token_line)
    path.write_text(text)
    return path


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_no_command_prints_the_token(
    argv: list[str],
    refusing: RefusingServer,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    outputs = []
    cases = {
        "refused": write_kc(tmp_path / "refused", refusing.url),
        "unreachable": write_kc(tmp_path / "down", "https://127.0.0.1:9"),
        "broken": write_kc(tmp_path / "broken", refusing.url, f'"token": "{CANARY}\n  oops: [{CANARY}'),
    }
    for name, kc in cases.items():
        # --kubeconfig for most; $KUBECONFIG for one command, to cover that route too
        if argv[0] == "export":
            monkeypatch.setenv("KUBECONFIG", str(kc))
            args = argv
        else:
            monkeypatch.delenv("KUBECONFIG", raising=False)
            args = [*argv, "--kubeconfig", str(kc)]
        if argv[0] == "allocate":
            args = [*argv, "--kubeconfig", str(kc)]
        code = main(args)
        out = capfd.readouterr()
        outputs.append(out.out + out.err)
        assert code != 0, (name, out.err)
        assert out.err.strip(), name  # it says something
    everything = "\n".join(outputs)
    assert CANARY not in everything
    assert CANARY[:12] not in everything
    assert "401" in outputs[0] or "Unauthorized" in outputs[0] or "credentials were refused" in outputs[0]
