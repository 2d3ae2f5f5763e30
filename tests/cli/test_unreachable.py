"""No command hangs on an API server it cannot reach: one connection timeout in the one client
(kdra.kube.client.CONNECT_TIMEOUT) serves them all; each fails naming the address, with exit 1 (the input was
valid, as docs/observability.md documents for `exporter --once`), never 2 ("invalid input")."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kdra.cli.main import main
from kdra.kube.client import KubeClient, UnavailableError
from kdra.kube.kubeconfig import KubeConfig

# Every command that reads or writes a cluster.
COMMANDS = [
    ["top"],
    ["exporter", "--once"],
    ["explain", "pod-a"],
    ["export"],
    ["allocate"],
    ["driver", "sim", "-c", "mixed"],
    ["scheduler"],
]


def _kubeconfig(path: Path, server: str) -> str:
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path.write_text(json.dumps(cfg))
    return str(path)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def stalled() -> Iterator[str]:
    """A server whose TCP port takes connections into its backlog and never answers (a hung API server, a
    blackholed load balancer): the TLS handshake never completes."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    yield f"https://127.0.0.1:{s.getsockname()[1]}"
    s.close()


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_a_refused_connection_fails_fast_naming_the_address(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    server = f"https://127.0.0.1:{_closed_port()}"
    started = time.monotonic()
    code = main([*argv, "--kubeconfig", _kubeconfig(tmp_path / "kc", server)])
    err = capsys.readouterr().err
    assert time.monotonic() - started < 10, err
    assert code == 1, err
    assert f"cannot reach the API server at {server}" in err and "Connection refused" in err
    assert "Traceback" not in err and "internal error" not in err
    assert len([line for line in err.splitlines() if "error" in line]) == 1, err


def test_a_server_that_never_answers_is_given_up_on_after_the_connect_timeout(
    stalled: str, tmp_path: Path
) -> None:
    client = KubeClient(KubeConfig.load(_kubeconfig(tmp_path / "kc", stalled)), connect_timeout=1.0)
    for call in (lambda: client.list("Node"), lambda: next(iter(client.watch_stream("Node", "1")))):
        started = time.monotonic()
        with pytest.raises(UnavailableError) as exc:
            call()
        assert time.monotonic() - started < 3
        assert exc.value.unreachable and exc.value.exit_code == 1
        assert f"cannot reach the API server at {stalled}" in str(
            exc.value
        ) and "no answer within 1 s" in str(exc.value)


def test_top_against_a_server_that_never_answers_ends_within_the_timeout(
    stalled: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`kdra top` and `kdra exporter --once` used to wait on with no output; now the client's 10 s."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    started = time.monotonic()
    assert main(["top", "--kubeconfig", _kubeconfig(tmp_path / "kc", stalled)]) == 1
    elapsed = time.monotonic() - started
    err = capsys.readouterr().err
    assert elapsed < 30, elapsed  # the client gives up after 10 s (30: a loaded CI machine)
    assert f"cannot reach the API server at {stalled}" in err and "no answer within 10 s" in err
    # four kinds, one problem: said once
    assert err.count("cannot reach") == 1, err


@pytest.fixture
def untrusted(tmp_path: Path) -> Iterator[str]:
    """A TLS server whose certificate the kubeconfig's CA did not sign (a kubeconfig of another cluster,
    a CA file not updated after a rotation): every handshake fails the same way."""
    import ssl
    import threading

    from support.controlplane import generate_certs

    certs = generate_certs(tmp_path / "server-pki")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(certs.server_cert), str(certs.server_key))
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    s.settimeout(0.2)
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = s.accept()
            except OSError:
                continue
            conn.settimeout(2)
            try:
                with ctx.wrap_socket(conn, server_side=True):
                    pass
            except OSError:
                conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield f"https://127.0.0.1:{s.getsockname()[1]}"
    done.set()
    t.join(2)
    s.close()


@pytest.mark.parametrize("argv", [["top"], ["exporter", "--once"], ["export"]], ids=lambda a: a[0])
def test_an_untrusted_server_certificate_fails_at_once(
    argv: list[str],
    untrusted: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A CA that did not sign the API server's certificate never starts working: `kdra top` and `kdra
    exporter --once` retried it until their 60/120 s timeout in silence; now every command stops at once,
    in one line naming the server and the kubeconfig, exit 1 as for an unreachable server."""
    from support.controlplane import generate_certs

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    other_ca = generate_certs(tmp_path / "other-pki").ca_cert
    kc = tmp_path / "kc"
    _kubeconfig(kc, untrusted)
    cfg = json.loads(kc.read_text())
    cfg["clusters"][0]["cluster"] = {"server": untrusted, "certificate-authority": str(other_ca)}
    kc.write_text(json.dumps(cfg))
    started = time.monotonic()
    code = main([*argv, "--kubeconfig", str(kc)])
    err = capsys.readouterr().err
    assert time.monotonic() - started < 8, err
    assert code == 1, err
    assert f"the API server's certificate at {untrusted} is not trusted" in err and str(kc) in err, err
    assert len(err.strip().splitlines()) == 1, err


def test_expensive_selectors_report_progress(tmp_path: Path) -> None:
    """A selector within the cost limit can still run for minutes on a large fleet (a 300 x 300
    comprehension on alibaba-openb took 88 s with no output): `kdra allocate` prints a line per period."""
    import io

    import yaml

    from kdra.cli.common import cel_progress

    items = ",".join(str(i) for i in range(60))
    expr = (
        f'[{items}].all(i, [{items}].exists(j, i == j)) && device.attributes["gpu.example.com"].model == "x"'
    )
    slices = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "n1"},
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": "n1",
            "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{i}", "attributes": {"model": {"string": "y"}}} for i in range(20)],
        },
    }
    cls = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu"},
        "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]},
    }
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "default"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "r",
                        "exactly": {"deviceClassName": "gpu", "selectors": [{"cel": {"expression": expr}}]},
                    }
                ]
            }
        },
    }
    (tmp_path / "in.yaml").write_text(yaml.safe_dump_all([cls, slices, claim]))
    out = io.StringIO()
    with cel_progress("kdra allocate", period=0.0, stream=out):
        assert main(["allocate", "-f", str(tmp_path / "in.yaml"), "-o", "name"]) == 1
    lines = out.getvalue().splitlines()
    assert lines and lines[0].startswith("kdra allocate: still evaluating CEL selectors after ")
    assert "device evaluations" in lines[-1] and "cost units" in lines[-1]


def _serve(answer: Callable[[str], tuple[int, str, bytes]]) -> Iterator[str]:
    """A plain-http API server whose every GET is `answer(path)`: (status, content type, body)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            code, ctype, body = answer(self.path)
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def refusing() -> Iterator[str]:
    """An API server that answers every request 401, as one does to a revoked token."""
    status = {"kind": "Status", "status": "Failure", "reason": "Unauthorized", "code": 401}
    yield from _serve(lambda _path: (401, "application/json", json.dumps(status).encode()))


@pytest.mark.parametrize("argv", [["top"], ["exporter", "--once"]], ids=lambda a: a[0])
def test_refused_credentials_are_one_line_naming_the_kubeconfig(
    argv: list[str],
    refusing: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`kdra top` printed the API server's bare 'Unauthorized' once per kind before its error, which named
    neither the kubeconfig nor the context; `exporter --once` logged each too."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    kc = _kubeconfig(tmp_path / "kc", refusing)
    assert main([*argv, "--kubeconfig", kc]) == 1
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 or (len(lines) == 2 and "cleartext" in lines[0]), err
    assert lines[-1].startswith("error: could not read the cluster: ") and lines[-1].endswith(
        f"401 Unauthorized: the credentials were refused (kubeconfig {kc}, context x)"
    ), err


def test_refused_credentials_exit_1_in_every_command(
    refusing: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 401 (or 403) was exit 2, 'invalid input', from export, explain, allocate and the scheduler, and
    exit 1 from top and exporter --once: the command is valid and cannot be carried out (exit 1)."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    kc = _kubeconfig(tmp_path / "kc", refusing)
    for argv in (["export"], ["explain", "p"], ["allocate"]):
        assert main([*argv, "--kubeconfig", kc]) == 1, argv
        err = capsys.readouterr().err
        assert (
            "401 Unauthorized" in err and f"kubeconfig {kc}, context x: the credentials were refused" in err
        )


@pytest.fixture
def without_dra() -> Iterator[str]:
    """An API server that does not serve resource.k8s.io/v1 (before Kubernetes 1.34): its mux answers
    such paths '404 page not found' in plain text; everything else is an empty list."""
    empty = {"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": []}

    def answer(path: str) -> tuple[int, str, bytes]:
        if path.startswith("/apis/"):
            return 404, "text/plain", b"404 page not found\n"
        return 200, "application/json", json.dumps(empty).encode()

    yield from _serve(answer)


@pytest.mark.parametrize("argv", [["top"], ["exporter", "--once"], ["export"]], ids=lambda a: a[0])
def test_a_cluster_without_dra_v1_is_said_at_once(
    argv: list[str],
    without_dra: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`kdra top` and `exporter --once` retried the 404s until their 60/120 s timeout, in silence; the
    others said 'GET /apis/resource.k8s.io/v1/deviceclasses: 404 : 404 page not found' (exit 2)."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    started = time.monotonic()
    assert main([*argv, "--kubeconfig", _kubeconfig(tmp_path / "kc", without_dra)]) == 1
    assert time.monotonic() - started < 8
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: ") and "the API server does not serve resource.k8s.io/v1" in err, err
