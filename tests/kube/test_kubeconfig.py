"""kdra.kube.kubeconfig and kdra.kube.credentials: client-go's loading rules (--kubeconfig, merged
$KUBECONFIG, in-cluster, ~/.kube/config), contexts and namespaces, field-naming errors that never quote a
credential, exec credential plugins (a fake plugin script: token, expiry, failure, not found, 401), token
files re-read as they rotate, client certificates from memory, proxies and the warnings."""

from __future__ import annotations

import base64
import datetime as dt
import json
import logging
import os
import socket
import stat
import sys
import tempfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from kdra.errors import InputError
from kdra.kube.client import KubeClient, UnauthorizedError
from kdra.kube.credentials import CredentialError
from kdra.kube.kubeconfig import KubeConfig
from support.pki import make_pki

SECRET = "s3cr3t-t0ken-abcdefghijklmnopqrstuvwxyz0123456789"


def kubeconfig(
    clusters: dict[str, dict[str, Any]],
    users: dict[str, dict[str, Any]],
    contexts: dict[str, dict[str, Any]],
    current: str | None = None,
) -> str:
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": k, "cluster": v} for k, v in clusters.items()],
        "users": [{"name": k, "user": v} for k, v in users.items()],
        "contexts": [{"name": k, "context": v} for k, v in contexts.items()],
    }
    if current:
        doc["current-context"] = current
    return yaml.safe_dump(doc)


# -- loading rules --------------------------------------------------------------------------------------


def test_kubeconfig_list_is_merged_as_kubectl_does(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = tmp_path / "a" / "config"
    b = tmp_path / "b" / "config"
    a.write_text(
        kubeconfig(
            {"prod": {"server": "https://prod:6443", "certificate-authority": "ca.crt"}},
            {"alice": {"token": "from-a"}},
            {"prod": {"cluster": "prod", "user": "alice", "namespace": "ml"}},
            current=None,  # the first file that sets current-context wins: b's
        )
    )
    b.write_text(
        kubeconfig(
            {"prod": {"server": "https://shadowed:1"}, "dev": {"server": "https://dev:6443"}},
            {"alice": {"token": "shadowed"}, "bob": {"tokenFile": "bob.token"}},
            {"dev": {"cluster": "dev", "user": "bob"}, "prod": {"cluster": "dev", "user": "bob"}},
            current="prod",
        )
    )
    (tmp_path / "b" / "bob.token").write_text("bob-token\n")
    env = {"KUBECONFIG": f"{tmp_path / 'missing'}{os.pathsep}{a}{os.pathsep}{b}"}
    cfg = KubeConfig.resolve(environ=env)
    # current-context from b, but the context, cluster and user named "prod"/"alice" from a (first wins)
    assert (cfg.context, cfg.server, cfg.namespace) == ("prod", "https://prod:6443", "ml")
    assert cfg.ca_file == str(tmp_path / "a" / "ca.crt")  # relative to the file that defined it
    assert cfg.bearer_token() == "from-a"
    dev = KubeConfig.resolve(context="dev", environ=env)
    assert (dev.server, dev.namespace, dev.bearer_token()) == ("https://dev:6443", "default", "bob-token")
    assert dev.token_file == str(tmp_path / "b" / "bob.token")
    # --kubeconfig wins over $KUBECONFIG, and only that file is read
    only_b = KubeConfig.resolve(b, environ=env)
    assert only_b.server == "https://dev:6443"
    with pytest.raises(InputError, match=r"context 'nope' not found \(contexts: dev, prod\)"):
        KubeConfig.resolve(context="nope", environ=env)
    with pytest.raises(InputError, match=r"\$KUBECONFIG=.*none of these files exists"):
        KubeConfig.resolve(environ={"KUBECONFIG": str(tmp_path / "x")})


def write_service_account(root: Path, token: str = SECRET) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "token").write_text(token)
    (root / "namespace").write_text("kdra-system")
    (root / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    return root


def test_in_cluster_layout_comes_before_the_home_kubeconfig(tmp_path: Path) -> None:
    sa = write_service_account(tmp_path / "sa")
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    (home / ".kube" / "config").write_text(
        kubeconfig({"c": {"server": "https://home:1"}}, {"u": {}}, {"c": {"cluster": "c", "user": "u"}}, "c")
    )
    env = {
        "KUBERNETES_SERVICE_HOST": "10.0.0.1",
        "KUBERNETES_SERVICE_PORT": "443",
        "KDRA_SERVICE_ACCOUNT_DIR": str(sa),
        "HOME": str(home),
    }
    cfg = KubeConfig.resolve(environ=env)
    assert cfg.server == "https://10.0.0.1:443"
    assert cfg.namespace == "kdra-system"
    assert cfg.ca_file == str(sa / "ca.crt") and cfg.token_file == str(sa / "token")
    assert cfg.bearer_token() == SECRET
    assert cfg.source.startswith("in-cluster config")
    # IPv6 service host
    assert (
        KubeConfig.resolve(environ=dict(env, KUBERNETES_SERVICE_HOST="fd00::1")).server
        == "https://[fd00::1]:443"
    )
    # --context means a kubeconfig context: in-cluster is skipped, ~/.kube/config read
    assert KubeConfig.resolve(context="c", environ=env).server == "https://home:1"
    # not in a pod: ~/.kube/config
    assert KubeConfig.resolve(environ={"HOME": str(home)}).server == "https://home:1"
    # in a pod without a token: say so
    (sa / "token").unlink()
    with pytest.raises(InputError, match="token does not exist"):
        KubeConfig.resolve(environ=env)
    with pytest.raises(InputError, match="no Kubernetes configuration: give --kubeconfig"):
        KubeConfig.resolve(environ={"HOME": str(tmp_path / "nobody")})


def test_errors_name_file_context_and_field(tmp_path: Path) -> None:
    path = tmp_path / "kc"

    def err(clusters: Any, users: Any, contexts: Any, current: str | None = "x") -> str:
        path.write_text(kubeconfig(clusters, users, contexts, current))
        with pytest.raises(InputError) as e:
            KubeConfig.load(path)
        return str(e.value)

    ctx = {"x": {"cluster": "c", "user": "u"}}
    msg = err({"c": {"server": "https://s"}}, {}, ctx)
    assert msg == f"kubeconfig {path}, context x: contexts[x].context.user: user 'u' not found"
    msg = err({"c": {}}, {"u": {}}, ctx)
    assert (
        msg == f"kubeconfig {path}, context x: clusters[c].cluster.server: Required value: "
        "the cluster has no server"
    )
    msg = err({"c": {"server": "https://s"}}, {"u": {"client-certificate-data": "QQ=="}}, ctx)
    assert "users[u].user.client-key: Required value" in msg
    msg = err(
        {"c": {"server": "https://s", "insecure-skip-tls-verify": True, "certificate-authority": "x"}},
        {"u": {}},
        ctx,
    )
    assert "clusters[c].cluster.insecure-skip-tls-verify: Invalid value: true" in msg
    msg = err({"c": {"server": "https://s"}}, {"u": {"auth-provider": {"name": "gcp"}}}, ctx)
    assert "users[u].user.auth-provider: Unsupported value: 'gcp'" in msg and "exec plugin" in msg
    msg = err({"c": {"server": "https://s"}}, {"u": {"exec": {"command": "x", "apiVersion": "v9"}}}, ctx)
    assert "users[u].user.exec.apiVersion: Unsupported value: 'v9'" in msg
    v1 = {"command": "x", "apiVersion": "client.authentication.k8s.io/v1"}
    msg = err({"c": {"server": "https://s"}}, {"u": {"exec": v1}}, ctx)
    assert "users[u].user.exec.interactiveMode: Required value" in msg
    msg = err({"c": {"server": "https://s"}}, {"u": {}}, {"x": {"cluster": "c"}}, current=None)
    assert msg == f"kubeconfig {path}: no current-context (give --context NAME; contexts: x)"


def test_an_empty_kubeconfig_says_it_is_empty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty file (or one of comments only) was reported as "no current-context", which sent people
    looking for a context in a file with nothing in it."""
    empty = tmp_path / "empty"
    empty.write_text("")
    comments = tmp_path / "comments"
    comments.write_text("# to be filled in\n\n")
    for path in (empty, comments):
        with pytest.raises(InputError) as e:
            KubeConfig.load(path)
        assert str(e.value) == f"kubeconfig {path}: the file is empty"
    with pytest.raises(InputError, match=f"kubeconfig {empty}: the file is empty"):
        KubeConfig.load(empty, context="prod")
    header = tmp_path / "header"
    header.write_text("apiVersion: v1\nkind: Config\n")
    with pytest.raises(InputError, match=f"kubeconfig {header}: no contexts"):
        KubeConfig.load(header)


@pytest.mark.parametrize(
    ("cluster", "user", "context", "expected"),
    [
        # Server URLs urllib cannot take were internal errors (ValueError), or a strange address.
        (
            {"server": "https://127.0.0.1:99999"},
            {},
            {},
            "clusters[c].cluster.server: Invalid value: Port out of range",
        ),
        ({"server": "http://[::1"}, {}, {}, "clusters[c].cluster.server: Invalid value: Invalid IPv6 URL"),
        ({"server": "https://"}, {}, {}, "clusters[c].cluster.server: Invalid value: no host"),
        ({"server": "https://h:0"}, {}, {}, "clusters[c].cluster.server: Invalid value: port 0"),
        (
            {"server": 6443},
            {},
            {},
            "clusters[c].cluster.server: Invalid value: must be a string, not a number",
        ),
        (
            {"server": "https://h", "proxy-url": "http://p:123456"},
            {},
            {},
            "clusters[c].cluster.proxy-url: Invalid",
        ),
        # A quoted "false" read as true turned certificate verification off.
        (
            {"server": "https://h", "insecure-skip-tls-verify": "false"},
            {},
            {},
            "clusters[c].cluster.insecure-skip-tls-verify: Invalid value: must be true or false, "
            "not a string",
        ),
        # A string of groups was sent as one Impersonate-Group per letter.
        (
            {"server": "https://h"},
            {"as-groups": "admins"},
            {},
            "users[u].user.as-groups: Invalid value: must be a list",
        ),
        (
            {"server": "https://h"},
            {"token": 12345},
            {},
            "users[u].user.token: Invalid value: must be a string",
        ),
        (
            {"server": "https://h"},
            {
                "exec": {
                    "command": "x",
                    "apiVersion": "client.authentication.k8s.io/v1beta1",
                    "args": "get-token",
                }
            },
            {},
            "users[u].user.exec.args: Invalid value: must be a list of strings",
        ),
        (
            {"server": "https://h"},
            {},
            {"namespace": "Team_A"},
            "contexts[x].context.namespace: Invalid value: 'Team_A'",
        ),
    ],
)
def test_fields_of_the_wrong_shape_are_errors_naming_them(
    tmp_path: Path, cluster: Any, user: Any, context: Any, expected: str
) -> None:
    path = tmp_path / "kc"
    path.write_text(
        kubeconfig({"c": cluster}, {"u": user}, {"x": {"cluster": "c", "user": "u", **context}}, "x")
    )
    with pytest.raises(InputError) as e:
        KubeConfig.load(path)
    assert str(e.value).startswith(f"kubeconfig {path}, context x: {expected}"), str(e.value)
    assert "12345" not in str(e.value)


def test_a_missing_client_certificate_file_is_named(tmp_path: Path) -> None:
    """load_cert_chain's FileNotFoundError carries no file name: the error read 'client certificate: None'."""
    pki = make_pki()
    (tmp_path / "client.pem").write_bytes(pki["client"])
    (tmp_path / "client-key.pem").write_bytes(pki["client_key"])
    path = tmp_path / "kc"
    for cert, key, missing in (
        (str(tmp_path / "no-cert.pem"), str(tmp_path / "client-key.pem"), "client-certificate"),
        (str(tmp_path / "client.pem"), str(tmp_path / "no-key.pem"), "client-key"),
    ):
        user = {"client-certificate": cert, "client-key": key}
        path.write_text(
            kubeconfig({"c": {"server": "https://h"}}, {"u": user}, {"x": {"cluster": "c", "user": "u"}}, "x")
        )
        with pytest.raises(InputError) as e:
            KubeClient(KubeConfig.load(path))._ssl_context()
        name = cert if missing == "client-certificate" else key
        assert str(e.value) == f"kubeconfig {path}, context x: {missing} {name}: No such file or directory"
    # The scheduler's metrics endpoint: '--metrics-tls-cert-file/--metrics-tls-key-file: None: not found'.
    from kdra.kube.tls import server_context

    with pytest.raises(InputError) as e:
        server_context(str(tmp_path / "client.pem"), str(tmp_path / "no-key.pem"))
    assert str(e.value) == f"--metrics-tls-key-file {tmp_path / 'no-key.pem'}: No such file or directory"


def test_a_yaml_error_never_prints_the_token(tmp_path: Path) -> None:
    path = tmp_path / "kc"
    text = kubeconfig(
        {"c": {"server": "https://s"}}, {"u": {"token": SECRET}}, {"x": {"cluster": "c", "user": "u"}}, "x"
    )
    # a broken line holding the token (an unbalanced quote, a stray ": ")
    for broken in (f'    token: "{SECRET}\n', f"    token: {SECRET}: x\n", f"  token: [{SECRET}\n"):
        lines = [broken if "token:" in line else line for line in text.splitlines(keepends=True)]
        path.write_text("".join(lines))
        with pytest.raises(InputError) as e:
            KubeConfig.load(path)
        msg = str(e.value)
        assert msg.startswith(f"kubeconfig {path}: not valid YAML: line ")
        assert SECRET[:6] not in msg, msg
    assert SECRET not in repr(KubeConfig(server="https://x", token=SECRET))


# -- exec plugins ---------------------------------------------------------------------------------------

PLUGIN = r"""#!{python}
import json, os, sys
state = {state!r}
n = int(open(state).read()) if os.path.exists(state) else 0
open(state, "w").write(str(n + 1))
mode = os.environ.get("FAKE_MODE", "token")
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
seen = {{"info": info, "argv": sys.argv[1:]}}
open(state + ".info", "w").write(json.dumps(seen))
if mode == "fail":
    print("plugin: cannot reach the identity provider", file=sys.stderr)
    sys.exit(3)
if mode == "garbage":
    print("token=" + "{secret}")
    sys.exit(0)
status = {{"token": "tok-%d" % n}}
if os.environ.get("FAKE_EXPIRES"):
    status["expirationTimestamp"] = os.environ["FAKE_EXPIRES"]
print(json.dumps({{"apiVersion": info["apiVersion"], "kind": "ExecCredential", "status": status}}))
"""


def fake_plugin(tmp_path: Path) -> tuple[Path, Path]:
    state = tmp_path / "plugin.state"
    script = tmp_path / "bin" / "fake-auth-plugin"
    script.parent.mkdir(exist_ok=True)
    script.write_text(PLUGIN.format(python=sys.executable, state=str(state), secret=SECRET))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, state


def exec_config(tmp_path: Path, script: Path | str, **extra: Any) -> KubeConfig:
    ex = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": str(script),
        "args": ["get-token", "--cluster", "prod"],
        "env": [{"name": "FAKE_MODE", "value": extra.pop("mode", "token")}],
        "interactiveMode": "Never",
        "provideClusterInfo": True,
        "installHint": "install it with: apt-get install fake-auth-plugin",
    }
    if "expires" in extra:
        ex["env"].append({"name": "FAKE_EXPIRES", "value": extra.pop("expires")})
    ex.update(extra)
    path = tmp_path / "kc"
    path.write_text(
        kubeconfig(
            {
                "c": {
                    "server": "https://127.0.0.1:1",
                    "certificate-authority-data": base64.b64encode(b"CA").decode(),
                }
            },
            {"u": {"exec": ex}},
            {"x": {"cluster": "c", "user": "u"}},
            "x",
        )
    )
    return KubeConfig.load(path)


def test_exec_plugin_token_is_cached_until_it_expires(tmp_path: Path) -> None:
    script, state = fake_plugin(tmp_path)
    future = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    cfg = exec_config(tmp_path, script, expires=future)
    creds = cfg.credentials()
    assert creds.token() == "tok-0"
    assert creds.token() == "tok-0"  # cached: not run again
    assert creds.exec_runs == 1
    seen = json.loads((tmp_path / "plugin.state.info").read_text())
    assert seen["argv"] == ["get-token", "--cluster", "prod"]
    assert seen["info"]["kind"] == "ExecCredential"
    assert seen["info"]["spec"]["interactive"] is False
    assert seen["info"]["spec"]["cluster"]["server"] == "https://127.0.0.1:1"
    assert seen["info"]["spec"]["cluster"]["certificate-authority-data"] == base64.b64encode(b"CA").decode()
    # expiry passes: the next request runs the plugin again
    creds.clock = lambda: dt.datetime.now(dt.UTC).timestamp() + 7200
    assert creds.token() == "tok-1"
    creds.clock = lambda: dt.datetime.now(dt.UTC).timestamp()
    assert creds.token() == "tok-1" and creds.exec_runs == 2
    # a 401 with the current token runs it again; one with an older token does not
    assert creds.refresh_after_unauthorized("tok-1") and creds.token() == "tok-2"
    assert not creds.refresh_after_unauthorized("tok-0") and creds.exec_runs == 3
    # a kubeconfig token wins over the plugin, which then never runs
    cfg2 = exec_config(tmp_path, script)
    cfg2.token = "static"
    assert cfg2.credentials().token() == "static" and int(state.read_text()) == 3


def test_exec_plugin_failures_are_one_line_errors_without_the_output(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    script, _ = fake_plugin(tmp_path)
    with pytest.raises(CredentialError, match=r"fake-auth-plugin: failed with exit code 3$"):
        exec_config(tmp_path, script, mode="fail").credentials().token()
    assert "cannot reach the identity provider" in capfd.readouterr().err  # its stderr is the user's
    with pytest.raises(CredentialError) as e:
        exec_config(tmp_path, script, mode="garbage").credentials().token()
    assert "not an ExecCredential" in str(e.value) and SECRET not in str(e.value)
    with pytest.raises(CredentialError, match=r"no-such-plugin: executable not found\n\ninstall it with"):
        exec_config(tmp_path, tmp_path / "no-such-plugin").credentials().token()
    with pytest.raises(CredentialError, match="interactiveMode Always needs a terminal"):
        exec_config(tmp_path, script, interactiveMode="Always").credentials().token()
    # v1beta1 needs no interactiveMode
    beta = exec_config(
        tmp_path, script, apiVersion="client.authentication.k8s.io/v1beta1", interactiveMode=None
    )
    assert str(beta.credentials().token()).startswith("tok-")


class TokenServer(ThreadingHTTPServer):
    """Answers 200 only to `Bearer <accepted>`, 401 otherwise; records the tokens it saw."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), TokenHandler)
        self.accepted = ""
        self.seen: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class TokenHandler(BaseHTTPRequestHandler):
    server: TokenServer  # type: ignore[assignment]

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        auth = self.headers.get("Authorization") or ""
        self.server.seen.append(auth)
        ok = auth == f"Bearer {self.server.accepted}"
        body = json.dumps(
            {"kind": "Node", "metadata": {"name": "a"}}
            if ok
            else {"kind": "Status", "code": 401, "reason": "Unauthorized", "message": "Unauthorized"}
        ).encode()
        self.send_response(200 if ok else 401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def token_server() -> Iterator[TokenServer]:
    srv = TokenServer()
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def test_a_rotated_token_file_is_read_again_after_a_401(tmp_path: Path, token_server: TokenServer) -> None:
    tf = tmp_path / "token"
    tf.write_text("first")
    token_server.accepted = "first"
    c = KubeClient(KubeConfig(server=token_server.url, token_file=str(tf)), qps=0, retries=0)
    assert c.get("Node", "a")["metadata"]["name"] == "a"
    tf.write_text("second\n")  # the kubelet rotated the projected token; the old one is now refused
    token_server.accepted = "second"
    assert c.get("Node", "a")["metadata"]["name"] == "a"
    assert token_server.seen == ["Bearer first", "Bearer first", "Bearer second"]
    token_server.accepted = "third"  # refused and nothing new to read: a one-line 401
    with pytest.raises(UnauthorizedError, match="the credentials were refused"):
        c.get("Node", "a")


def test_exec_plugin_is_run_again_on_a_401(tmp_path: Path, token_server: TokenServer) -> None:
    script, _ = fake_plugin(tmp_path)
    cfg = exec_config(tmp_path, script)
    cfg.server = token_server.url
    token_server.accepted = "tok-0"
    c = KubeClient(cfg, qps=0, retries=0)
    assert c.get("Node", "a")
    token_server.accepted = "tok-1"  # the provider revoked tok-0
    assert c.get("Node", "a")
    assert token_server.seen == ["Bearer tok-0", "Bearer tok-0", "Bearer tok-1"]


# -- TLS from memory, proxies, warnings -------------------------------------------------------------------


def test_client_certificate_data_stays_in_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ssl

    pki = make_pki()
    (tmp_path / "srv.pem").write_bytes(pki["server"] + pki["server_key"])
    (tmp_path / "ca.pem").write_bytes(pki["ca"])
    srv = TokenServer()
    srv.accepted = "unused"
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(tmp_path / "srv.pem"))
    ctx.load_verify_locations(str(tmp_path / "ca.pem"))
    ctx.verify_mode = ssl.CERT_REQUIRED  # refuses clients without a certificate signed by the CA
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    subjects: list[str] = []

    class CertHandler(TokenHandler):
        def do_GET(self) -> None:
            peer = self.connection.getpeercert()  # type: ignore[attr-defined]
            subjects.append(dict(x[0] for x in peer["subject"])["commonName"])
            body = b'{"kind": "Node", "metadata": {"name": "a"}}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    srv.RequestHandlerClass = CertHandler
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    path = tmp_path / "kc"
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    path.write_text(
        kubeconfig(
            {
                "c": {
                    "server": f"https://127.0.0.1:{srv.server_address[1]}",
                    "certificate-authority-data": b64(pki["ca"]),
                }
            },
            {"u": {"client-certificate-data": b64(pki["client"]), "client-key-data": b64(pki["client_key"])}},
            {"x": {"cluster": "c", "user": "u"}},
            "x",
        )
    )
    # Temporary files go to a directory of this test's own (the machine's /tmp sees other processes' files
    # come and go: the check failed once in a loaded unit run).
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmpdir))
    before = set(tmpdir.iterdir())
    try:
        c = KubeClient.from_kubeconfig(path, qps=0)
        assert c.get("Node", "a")["metadata"]["name"] == "a"
        c.close()
    finally:
        srv.shutdown()
        srv.server_close()
    assert subjects == ["kdra-user"]
    assert set(tmpdir.iterdir()) - before == set()  # no kdra-kubeconfig-* (or any) file left behind
    # bad key material: one line naming the field, no PEM in it
    path.write_text(
        path.read_text().replace(b64(pki["client_key"]), b64(b"-----BEGIN PRIVATE KEY-----\nAAAA\n"))
    )
    with pytest.raises(InputError) as e:
        KubeClient.from_kubeconfig(path, qps=0).get("Node", "a")
    assert "client certificate and key: cannot be loaded" in str(e.value) and "BEGIN" not in str(e.value)


def test_proxy_url_tunnels_through_http_connect(tmp_path: Path, token_server: TokenServer) -> None:
    token_server.accepted = "t"
    connects: list[str] = []
    lsock = socket.create_server(("127.0.0.1", 0))

    def proxy() -> None:
        conn, _ = lsock.accept()
        head = b""
        while b"\r\n\r\n" not in head:
            head += conn.recv(1)
        connects.append(head.split(b"\r\n")[0].decode())
        target = head.split()[1].decode().rsplit(":", 1)
        up = socket.create_connection((target[0], int(target[1])))
        conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")

        def pipe(a: socket.socket, b: socket.socket) -> None:
            try:
                while data := a.recv(65536):
                    b.sendall(data)
            except OSError:
                pass
            finally:
                b.close()

        threading.Thread(target=pipe, args=(up, conn), daemon=True).start()
        pipe(conn, up)

    threading.Thread(target=proxy, daemon=True).start()
    cfg = KubeConfig(server=token_server.url.replace("127.0.0.1", "localhost"), token="t")
    cfg.proxy_url = f"http://127.0.0.1:{lsock.getsockname()[1]}"
    assert KubeClient(cfg, qps=0).get("Node", "a")
    assert connects == [f"CONNECT localhost:{token_server.server_address[1]} HTTP/1.0"]
    lsock.close()


def test_insecure_and_cleartext_are_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="kdra.kube"):
        KubeClient(KubeConfig(server="https://10.1.2.3:6443", insecure=True, source="kubeconfig k1"), qps=0)
        KubeClient(KubeConfig(server="http://10.1.2.3:8080", token=SECRET, source="kubeconfig k2"), qps=0)
    text = caplog.text
    assert "kubeconfig k1: insecure-skip-tls-verify is set" in text
    assert (
        "kubeconfig k2: server http://10.1.2.3:8080 is plain http://: the credentials are sent in cleartext"
        in text
    )
    assert SECRET not in text
