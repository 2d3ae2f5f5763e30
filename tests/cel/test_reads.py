"""What of the device an expression reads (kdra.cel.device_reads) and the key a shared result is kept
under (selector_input_key): devices share a result only where every input the expressions can read is
the same, so a shared result is always the one the device's own evaluation gives."""

from __future__ import annotations

import itertools

import pytest

from kdra.cel import (
    CelDevice,
    CELRuntimeError,
    compile_selector,
    device_input,
    device_reads,
    selector_input_key,
)

D = "gpu.example.com"


@pytest.mark.parametrize(
    ("expression", "reads"),
    [
        ('device.driver == "x"', {("driver",)}),
        ("device.allowMultipleAllocations", {("allowMultipleAllocations",)}),
        (f'device.attributes["{D}"].model == "a"', {("attributes", D, "model")}),
        (f'device.attributes["{D}"]["model"] == "a"', {("attributes", D, "model")}),
        (f'has(device.attributes["{D}"].model)', {("attributes", D, "model")}),
        (
            f'device.capacity["{D}"].memory.compareTo(quantity("1Gi")) >= 0 && device.driver == "x"',
            {("capacity", D, "memory"), ("driver",)},
        ),
        ("[1, 2].all(x, x > 0)", set()),
        # Anything that may read more than fixed paths: the whole device is the input.
        ("device.attributes.size() > 0", None),
        (f'device.attributes["{D}"].size() > 0', None),
        (f'"model" in device.attributes["{D}"]', None),
        (f'device.attributes["{D}"][device.driver] == "a"', None),
        ("[1].all(device, device > 0)", None),  # a macro variable named device
        ("device == device", None),
        ("device.attributes[", None),  # does not parse
    ],
)
def test_device_reads(expression: str, reads: set[tuple[str, ...]] | None) -> None:
    assert device_reads(expression) == (None if reads is None else frozenset(reads))


def dev(
    attrs: dict[str, object], driver: str = D, capacity: dict[str, object] | None = None, multi: bool = False
) -> CelDevice:
    return device_input(driver, attrs, capacity or {}, multi)


MODEL = (f'device.attributes["{D}"].model == "a"',)


def test_devices_share_a_key_only_where_what_is_read_is_the_same() -> None:
    base = dev({"model": {"string": "a"}, "uuid": {"string": "GPU-1"}})
    # an attribute the expression does not read: the same key
    assert selector_input_key(MODEL, base) == selector_input_key(
        MODEL, dev({"model": {"string": "a"}, "uuid": {"string": "GPU-2"}})
    )
    others = [
        dev({"model": {"string": "b"}, "uuid": {"string": "GPU-1"}}),  # another value
        dev({"model": {"int": 1}}),  # another type
        dev({"model": {"bool": True}}),  # True == 1 in Python, not in CEL
        dev({"uuid": {"string": "GPU-1"}}),  # missing
        dev({f"{D}/model": {"string": "b"}, "model": {"string": "a"}}),  # two spellings: order decides
        dev({"model": {"string": "a"}, f"{D}/model": {"string": "b"}}),
        dev({"model": {"string": "a"}}, driver="other.example.com"),  # bare names are another domain's
        dev({"model": {"string": "a"}, "bad": {"version": "x.y"}}),  # a conversion error
        dev({"model": {"string": "a"}}, multi=True),
    ]
    keys = [selector_input_key(MODEL, d) for d in [base, *others]]
    assert all(k is not None for k in keys)
    assert len(set(keys)) == len(keys), keys


def test_capacity_paths_are_keyed_by_the_value_as_published() -> None:
    sel = (f'device.capacity["{D}"].memory.compareTo(quantity("40Gi")) >= 0',)
    a = dev({}, capacity={"memory": {"value": "40Gi"}})
    b = dev({}, capacity={"memory": {"value": "80Gi"}})
    c = dev({"uuid": {"string": "x"}}, capacity={"memory": {"value": "40Gi"}})
    assert selector_input_key(sel, a) != selector_input_key(sel, b)
    assert selector_input_key(sel, a) == selector_input_key(sel, c)


def test_an_expression_that_may_read_anything_has_no_key() -> None:
    assert selector_input_key((*MODEL, "device.attributes.size() > 0"), dev({})) is None


def outcome(expression: str, d: CelDevice) -> tuple[object, ...]:
    try:
        return ("ok", *compile_selector(expression, stored_expressions=True).matches_with_cost(d))
    except CELRuntimeError as e:
        return ("error", e.message, e.cost)


@pytest.mark.parametrize(
    "expression",
    [
        f'device.attributes["{D}"].model == "a"',
        f'device.attributes["{D}"].model.startsWith("a")',  # no such key where it is missing
        f'has(device.attributes["{D}"].model) && device.attributes["{D}"].model == "a"',
        f'device.attributes["{D}"].v.isGreaterThan(semver("1.0.0"))',
        # over the runtime cost limit: the same abort, and the same cost, for every device that shares it
        "[" + ",".join(map(str, range(400))) + "].all(x, [" + ",".join(map(str, range(400))) + "]"
        f'.all(y, x + y >= 0 && device.driver == "{D}"))',
    ],
)
def test_devices_with_one_key_have_one_outcome_and_cost(expression: str) -> None:
    values = [
        {},
        {"model": {"string": "a"}},
        {"model": {"string": "b"}},
        {"model": {"int": 1}},
        {f"{D}/model": {"string": "a"}},
        {"v": {"version": "1.2.3"}},
        {"v": {"version": "0.1.0"}},
        {"bad": {"version": "x"}},
    ]
    devices = [
        dev({**attrs, "uuid": {"string": f"GPU-{i}-{u}"}}, driver=drv)
        for i, (attrs, drv) in enumerate(itertools.product(values, (D, "other.example.com")))
        for u in range(2)
    ]
    by_key: dict[object, tuple[object, ...]] = {}
    for d in devices:
        key = selector_input_key((expression,), d)
        assert key is not None
        got = outcome(expression, d)
        assert by_key.setdefault(key, got) == got, (expression, d)
    assert len(by_key) < len(devices)  # uuids differ, yet results are shared
