"""Smoke tests for the selectors the allocator depends on first."""

from __future__ import annotations

import pytest

from kdra.cel import CELCompileError, CELRuntimeError, compile_selector, device_input

DEV = device_input(
    "driver-a",
    {"model": {"string": "H100"}, "gen": {"int": 5}, "driver-b/x": {"bool": True}},
    {"memory": {"value": "80Gi"}},
    False,
)


@pytest.mark.parametrize(
    ("expr", "want"),
    [
        ('device.driver == "driver-a"', True),
        ('device.driver == "driver-b"', False),
        ('device.attributes["driver-a"].model == "H100"', True),
        ('device.capacity["driver-a"].memory.compareTo(quantity("4Gi")) >= 0', True),
        ('device.capacity["driver-a"].memory.compareTo(quantity("100Gi")) >= 0', False),
        ('!(device.driver == "x") && (false || true)', True),
        ("device.allowMultipleAllocations == false", True),
    ],
)
def test_simple(expr: str, want: bool) -> None:
    assert compile_selector(expr).matches(DEV) is want


def test_missing_key_is_runtime_error() -> None:
    with pytest.raises(CELRuntimeError, match="no such key: nope"):
        compile_selector('device.attributes["driver-a"].nope == 1').matches(DEV)


def test_undeclared() -> None:
    with pytest.raises(CELCompileError) as ei:
        compile_selector("noSuchVar")
    assert str(ei.value).startswith(
        "compilation failed: ERROR: <input>:1:1: undeclared reference to 'noSuchVar' (in container '')"
    )
