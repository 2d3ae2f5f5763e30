"""kdra validates CEL selectors as the real API server does (issue 18 item 9): for expressions around the
cost limit (nested comprehensions, string and regex functions over bounded and unbounded sizes, list
attributes), a server-side dry run of a DeviceClass is accepted exactly when `kdra.validation.rules` accepts
it, and rejected with the same "too complex, exceeds cost limit". Dry runs store nothing, so this runs
beside any other test."""

from __future__ import annotations

import uuid

import pytest

from kdra.cluster.store import StoreError
from kdra.kube.client import KubeClient
from kdra.kube.resources import resource_path
from kdra.validation.rules import validate

pytestmark = pytest.mark.e2e


def _list(n: int) -> str:
    return "[" + ",".join(str(i) for i in range(n)) + "]"


ATTR = 'device.attributes["gpu.nvidia.com"]'
EXPRESSIONS = [
    f"{_list(300)}.all(x, {_list(300)}.all(y, x + y >= 0))",  # issue 18's hostile shape: 634,211
    f"{_list(370)}.all(x, {_list(370)}.all(y, x + y >= 0))",  # 963,491
    f"{_list(380)}.all(x, {_list(380)}.all(y, x + y >= 0))",  # 1,016,131: over
    f"{_list(330)}.exists(x, {_list(330)}.exists(y, x * y == 89401 && device.driver == 'a'))",
    f"{_list(300)}.exists(x, {_list(300)}.exists(y, x * y == 89401 && device.driver == 'a'))",
    f"{_list(90)}.all(x, {_list(90)}.all(y, {_list(90)}.exists_one(z, x + y == z)))",
    f"{_list(60)}.map(x, {_list(60)}.filter(y, y > x)).all(l, l.size() >= 0)",
    f"cel.bind(xs, {_list(200)}, xs.all(x, xs.all(y, x != y || x == y)))",
    '["a", "b"].join("-") == "a-b"',  # unknown element sizes: unbounded
    f'{ATTR}.productName.lowerAscii().split(" ").exists(p, p.matches("h[0-9]+"))',
    f'{ATTR}.productName.matches("' + "(a|b)" * 100 + '")',
    f'{ATTR}.productName.matches("' + "(a|b)" * 200 + '")',
    "device.attributes.all(d, device.attributes[d].all(k, k.size() < 32))",
    f'{ATTR}.exists(k, {ATTR}.exists(j, k + j == "ab"))',
    f"{_list(1000)}.all(x, {ATTR}.productName.contains(string(x)))",
    'device.driver == "gpu.nvidia.com"',
]


def _class(expression: str) -> dict[str, object]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": f"cost-{uuid.uuid4().hex[:8]}"},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


@pytest.mark.parametrize("expression", EXPRESSIONS, ids=range(len(EXPRESSIONS)))
def test_api_server_and_kdra_accept_the_same_selectors(kube: KubeClient, expression: str) -> None:
    obj = _class(expression)
    try:
        kube.request("POST", resource_path("DeviceClass"), obj, params={"dryRun": "All"})
        server: str = ""
    except StoreError as e:
        assert e.code == 422, e
        server = str(e)
    mine = [str(err) for err in validate(obj)]
    assert bool(server) == bool(mine), f"API server: {server or 'accepted'}\nkdra: {mine or 'accepted'}"
    if server:
        too_complex = "too complex, exceeds cost limit" in server
        assert too_complex == any("too complex, exceeds cost limit" in m for m in mine), (server, mine)
