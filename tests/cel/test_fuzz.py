"""Property tests: whatever the expression, kdra.cel raises only CELCompileError or CELRuntimeError."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kdra.cel import CELCompileError, CELRuntimeError, compile_selector, device_input

DEVICES = [
    device_input(
        "dra.example.com",
        {
            "model": {"string": "H100"},
            "gen": {"int": 9},
            "ok": {"bool": True},
            "v": {"version": "1.2.3"},
            "ids": {"ints": [1, 2]},
        },
        {"memory": {"value": "80Gi"}},
        True,
    ),
    device_input("other", {}, {}, None),
    device_input("bad", {"x": {}}, {}, False),
]

TOKENS = [
    "device",
    ".",
    "driver",
    "attributes",
    "capacity",
    "allowMultipleAllocations",
    "[",
    "]",
    "(",
    ")",
    "{",
    "}",
    '"dra.example.com"',
    '"model"',
    "model",
    "gen",
    "ok",
    "v",
    "ids",
    "memory",
    "==",
    "!=",
    "<",
    "<=",
    ">",
    ">=",
    "&&",
    "||",
    "!",
    "-",
    "+",
    "*",
    "/",
    "%",
    "?",
    ":",
    ",",
    "in",
    "1",
    "0",
    "-1",
    "1u",
    "2.5",
    "true",
    "false",
    "null",
    '"a"',
    "b'x'",
    "x",
    "y",
    "all",
    "exists",
    "exists_one",
    "map",
    "filter",
    "has",
    "size",
    "cel",
    "bind",
    "quantity",
    '"1Gi"',
    "semver",
    '"1.0.0"',
    "compareTo",
    "isGreaterThan",
    "isLessThan",
    "int",
    "uint",
    "double",
    "string",
    "bytes",
    "dyn",
    "type",
    "matches",
    "contains",
    "startsWith",
    "split",
    "join",
    "sets",
    "includes",
    "9223372036854775807",
    "18446744073709551615u",
    '"\\u00e9"',
    "'''",
    '"',
    "`",
    "\\",
    "#",
    "1e400",
    "0x",
]

IDENT = st.sampled_from(["x", "y"])
ATOM = st.sampled_from(
    [
        "device.driver",
        'device.attributes["dra.example.com"]',
        'device.attributes["dra.example.com"].model',
        'device.attributes["dra.example.com"].gen',
        'device.attributes["dra.example.com"].v',
        'device.attributes["dra.example.com"].ids',
        'device.capacity["dra.example.com"].memory',
        'device.attributes["nope"]',
        "device.allowMultipleAllocations",
        "1",
        "0",
        "-1",
        "2u",
        "1.5",
        "true",
        "false",
        "null",
        '"abc"',
        "b'ab'",
        "[1, 2, 3]",
        '{"a": 1}',
        'quantity("1Gi")',
        'semver("1.2.3")',
        "x",
        "9223372036854775807",
        "[]",
        "{}",
    ]
)


def _expr(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    binop = st.sampled_from(["==", "!=", "<", ">=", "&&", "||", "+", "-", "*", "/", "%", "in"])
    method = st.sampled_from(
        [
            "size()",
            'compareTo(quantity("1"))',
            'isGreaterThan(semver("1.0.0"))',
            'contains("a")',
            'startsWith("H")',
            "major()",
            "asInteger()",
            'split(",")',
            "join()",
            "includes(1)",
            "sum()",
            "min()",
            "indexOf(1)",
            "isSorted()",
            "lowerAscii()",
            "charAt(1)",
            "substring(1)",
        ]
    )
    return st.one_of(
        st.tuples(children, binop, children).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(children, method).map(lambda t: f"{t[0]}.{t[1]}"),
        children.map(lambda c: f"!({c})"),
        children.map(lambda c: f"-({c})"),
        st.tuples(children, children, children).map(lambda t: f"({t[0]} ? {t[1]} : {t[2]})"),
        st.tuples(
            children, st.sampled_from(["all", "exists", "exists_one", "map", "filter"]), IDENT, children
        ).map(lambda t: f"{t[0]}.{t[1]}({t[2]}, {t[3]})"),
        st.tuples(IDENT, children, children).map(lambda t: f"cel.bind({t[0]}, {t[1]}, {t[2]})"),
        st.tuples(children, children).map(lambda t: f"{t[0]}[{t[1]}]"),
        st.tuples(
            st.sampled_from(["size", "int", "uint", "double", "string", "bytes", "dyn", "type", "has"]),
            children,
        ).map(lambda t: f"{t[0]}({t[1]})"),
        st.lists(children, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"),
    )


ATOM_OR_DYN = st.one_of(ATOM, ATOM.map(lambda a: f"dyn({a})"))
STRUCTURED = st.recursive(ATOM_OR_DYN, _expr, max_leaves=12)
SOUP = st.lists(st.sampled_from(TOKENS), min_size=1, max_size=25).map(" ".join)
TEXT = st.text(max_size=40)


def _check(expr: str) -> None:
    for consumable in (True, False):
        for lists in (False, True):
            try:
                prog = compile_selector(expr, consumable_capacity=consumable, list_type_attributes=lists)
            except CELCompileError as e:
                assert str(e)
                continue
            for dev in DEVICES:
                try:
                    r = prog.matches(dev)
                except CELRuntimeError as e:
                    assert str(e)
                    continue
                assert r is True or r is False


SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(STRUCTURED)
def test_structured_expressions_only_raise_cel_errors(expr: str) -> None:
    _check(expr)


@SETTINGS
@given(SOUP)
def test_token_soup_only_raises_cel_errors(expr: str) -> None:
    _check(expr)


@SETTINGS
@given(TEXT)
def test_arbitrary_text_only_raises_cel_errors(expr: str) -> None:
    _check(expr)
