"""kdra.kube.client against the real API server: a bound service-account token that stops working (its
bound object deleted, as an expired projected token does) is replaced by re-reading the token file after
the 401; idle keep-alive connections closed under the client (a loopback proxy closing them after 1 s, as
kube-apiserver does after ~90 s) cost no failed write; a request swallowed after it was sent is replayed
only when that is harmless. The last two for both transports: the threads' (`request`) and the binding
loop's (`arequest`, asyncio)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kdra.kube.client import KubeClient, KubeConfig, UnavailableError
from support.controlplane import ControlPlane
from support.tcpproxy import IdleClosingProxy
from support.wait import wait_for

pytestmark = pytest.mark.e2e


def test_a_rotated_service_account_token_is_picked_up_after_a_401(
    control_plane: ControlPlane, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    assert control_plane.certs is not None
    sa = f"rot-{uuid.uuid4().hex[:5]}"
    kube.create(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa, "namespace": namespace}}
    )
    kube.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": sa, "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}],
        }
    )

    def bound_token(secret: str) -> tuple[str, dict]:
        obj = kube.create(
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret, "namespace": namespace}}
        )
        obj["kind"] = "Secret"
        return kube.service_account_token(namespace, sa, 600, bound_to=obj), obj

    first, _ = bound_token("holder-1")
    token_file = tmp_path / "token"
    token_file.write_text(first)
    client = KubeClient(
        KubeConfig(
            server=control_plane.server, token_file=str(token_file), ca_file=str(control_plane.certs.ca_cert)
        ),
        qps=0,
    )
    assert client.list("ConfigMap", namespace) is not None
    # The kubelet writes the next token; the old one is revoked (its bound object is gone).
    second, _ = bound_token("holder-2")
    token_file.write_text(second)
    kube.delete("Secret", "holder-1", namespace)

    def rotated() -> bool:  # the API server's token cache may accept the old one a moment longer
        assert client.list("ConfigMap", namespace) is not None  # never an error meanwhile
        return client.credentials.token() == second

    wait_for(rotated, 30, "the client to use the new token", interval=0.5)
    # once revoked, the old token is refused by the API server: the client never used it after the 401
    stale = KubeClient(
        KubeConfig(server=control_plane.server, token=first, ca_file=str(control_plane.certs.ca_cert)), qps=0
    )
    from kdra.kube.client import UnauthorizedError

    with pytest.raises(UnauthorizedError):
        stale.list("ConfigMap", namespace)


@pytest.fixture
def proxied(control_plane: ControlPlane) -> Iterator[tuple[IdleClosingProxy, KubeClient]]:
    assert control_plane.certs is not None
    proxy = IdleClosingProxy(("127.0.0.1", control_plane.apiserver_port), idle_close=1.0)
    client = KubeClient(
        KubeConfig(
            server=proxy.url, token=control_plane.certs.token, ca_file=str(control_plane.certs.ca_cert)
        ),
        qps=0,
        retries=0,  # nothing may need a retry: stale connections are replaced before they are used
    )
    yield proxy, client
    client.close()
    proxy.close()


def event(namespace: str, name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": {"kind": "ConfigMap", "name": "c", "namespace": namespace},
        "reason": "Test",
        "message": "idle connection test",
        "type": "Normal",
    }


def test_writes_after_idle_connections_were_closed_all_succeed(
    proxied: tuple[IdleClosingProxy, KubeClient], namespace: str
) -> None:
    proxy, client = proxied
    cm = client.create(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": namespace}}
    )
    writes = [
        lambda: client.create(event(namespace, "e1")),  # a create: never replayed, so it must not fail
        lambda: client.update(dict(cm, kind="ConfigMap", data={"a": "1"})),  # conditional PUT
        lambda: client.patch("ConfigMap", "c", {"data": {"b": "2"}}, namespace),
        lambda: client.create(event(namespace, "e2")),
    ]
    for write in writes:
        wait_for(lambda: proxy.open == 0, 10, "the proxy to close the idle keep-alive connections")
        write()
    assert proxy.idle_closed >= len(writes)
    assert client.stale_connections >= len(writes) - 1 and client.retried == 0
    assert client.get("ConfigMap", "c", namespace)["data"] == {"a": "1", "b": "2"}


def test_a_swallowed_request_is_replayed_only_when_harmless(
    proxied: tuple[IdleClosingProxy, KubeClient], namespace: str
) -> None:
    proxy, client = proxied
    client.retries = 2
    cm = client.create(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "d", "namespace": namespace}}
    )

    def swallow_next() -> None:
        client.get("Namespace", namespace)  # a warm connection...
        time.sleep(0.2)
        proxy.drop_next_request()  # ...on which the next request is lost after it was sent

    swallow_next()
    cm = client.update(dict(cm, kind="ConfigMap", data={"x": "1"}))  # conditional PUT: replayed
    swallow_next()
    client.patch("ConfigMap", "d", {"data": {"y": "2"}}, namespace)  # merge patch: replayed
    swallow_next()
    assert client.get("ConfigMap", "d", namespace)["data"] == {"x": "1", "y": "2"}  # read: replayed
    assert proxy.dropped == 3 and client.retried == 3
    swallow_next()
    with pytest.raises(UnavailableError) as e:
        client.create(event(namespace, "once"))  # a create is not replayed blindly: the caller decides
    assert e.value.maybe_applied
    assert client.try_get("Event", "once", namespace) is None  # and it was indeed never sent twice


def test_async_writes_after_idle_connections_were_closed_all_succeed(
    proxied: tuple[IdleClosingProxy, KubeClient], namespace: str
) -> None:
    """The binding loop's pool: a connection the server closed while it sat idle is replaced before use,
    even when the loop has not run since (the socket is asked), so a create never fails for it."""
    proxy, client = proxied
    cm = client.create(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": namespace}}
    )

    async def run() -> None:
        for write in (
            lambda: client.acreate(event(namespace, "e1")),
            lambda: client.aupdate(dict(cm, kind="ConfigMap", data={"a": "1"})),
            lambda: client.acreate(event(namespace, "e2")),
        ):
            wait_for(lambda: proxy.open == 0, 10, "the proxy to close the idle keep-alive connections")
            await write()
        await client.aclose()

    asyncio.run(run())
    assert proxy.idle_closed >= 3
    assert client.stale_connections >= 2 and client.retried == 0
    assert client.get("ConfigMap", "c", namespace)["data"] == {"a": "1"}


def test_async_swallowed_request_is_replayed_only_when_harmless(
    proxied: tuple[IdleClosingProxy, KubeClient], namespace: str
) -> None:
    proxy, client = proxied
    client.retries = 2
    cm = client.create(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "d", "namespace": namespace}}
    )

    async def swallow_next() -> None:
        await client.aget("Namespace", namespace)  # a warm connection...
        await asyncio.sleep(0.2)
        proxy.drop_next_request()  # ...on which the next request is lost after it was sent

    async def run() -> tuple[dict, UnavailableError | None]:
        await swallow_next()
        await client.aupdate(dict(cm, kind="ConfigMap", data={"x": "1"}))  # conditional PUT: replayed
        await swallow_next()
        got = await client.aget("ConfigMap", "d", namespace)  # read: replayed
        await swallow_next()
        refused = None
        try:
            await client.acreate(event(namespace, "once"))  # not replayed blindly: the caller decides
        except UnavailableError as e:
            refused = e
        await client.aclose()
        return got, refused

    got, refused = asyncio.run(run())
    assert got["data"] == {"x": "1"}
    assert refused is not None and refused.maybe_applied
    assert proxy.dropped == 3 and client.retried == 2
    assert client.try_get("Event", "once", namespace) is None  # and it was indeed never sent twice
