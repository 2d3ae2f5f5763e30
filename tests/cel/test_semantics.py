"""Semantic table for the DRA CEL environment, pinned to upstream behaviour.

Sources: k8s.io/dynamic-resource-allocation/cel/compile.go (device variable, default domain, empty map for
unknown domains, eager attribute conversion, bool result), apiserver/pkg/cel/library (quantity, semver,
lists, regex), cel-go (operators, macros, error absorption, overflow, error texts) and cel-spec.
Expected values: True/False, ("err", substring) for CELRuntimeError, ("compile", substring) for
CELCompileError.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from kdra.cel import CELCompileError, CELRuntimeError, compile_selector, device_input

DRIVER = "dra.example.com"
D = f'device.attributes["{DRIVER}"]'
C = f'device.capacity["{DRIVER}"]'

ATTRS: dict[str, Any] = {
    "model": {"string": "H100"},
    "gen": {"int": 9},
    "healthy": {"bool": True},
    "driverVersion": {"version": "1.2.3"},
    "pre": {"version": "1.2.3-rc.1"},
    "other.example.org/numa": {"int": 1},
    f"{DRIVER}/slot": {"int": 4},
}
CAPS: dict[str, Any] = {"memory": {"value": "80Gi"}, "other.example.org/bw": {"value": "100M"}}
DEV = device_input(DRIVER, ATTRS, CAPS, False)

ERR = "err"
COMPILE = "compile"

CASES: list[tuple[str, Any]] = [
    # --- the device variable and the default-domain rule (compile.go parseQualifiedName) ---
    (f'device.driver == "{DRIVER}"', True),
    (f'{D}.model == "H100"', True),
    (f"{D}.slot == 4", True),
    ('device.attributes["other.example.org"].numa == 1', True),
    (f'"numa" in {D}', False),
    (f'"model" in {D}', True),
    (f'{D}["model"] == "H100"', True),
    (f"{D}.healthy", True),
    (f'{D}["healthy"]', True),
    (f"cel.bind(d, {D}, d.healthy)", True),
    (f"{D}.gen > 5 ? {D}.healthy : false", True),
    ("device.allowMultipleAllocations == false", True),
    ('device.capacity["other.example.org"].bw.compareTo(quantity("100M")) == 0', True),
    # unknown domain = empty map; missing id = runtime error
    ('size(device.attributes["nope.example.com"]) == 0', True),
    ('"x" in device.attributes["nope.example.com"]', False),
    ('device.attributes["nope.example.com"].x == 1', (ERR, "no such key: x")),
    (f"{D}.nope == 1", (ERR, "no such key: nope")),
    (f"{C}.nope.isInteger()", (ERR, "no such key: nope")),
    ('device.capacity["nope"].memory.isInteger()', (ERR, "no such key: memory")),
    (f"has({D}.model)", True),
    (f"has({D}.nope)", False),
    (f'"{DRIVER}" in device.attributes', True),
    ('"nope" in device.attributes', False),
    # --- result must be bool ---
    (f"{D}.gen", (ERR, "CEL result of type int could not be converted to bool")),
    (f"{D}.model", (ERR, "CEL result of type string could not be converted to bool")),
    ("1 + 1", (COMPILE, "must evaluate to bool or the unknown type, not int")),
    ('"a"', (COMPILE, "must evaluate to bool or the unknown type, not string")),
    ("dyn(true)", (COMPILE, "must evaluate to bool or the unknown type, not dyn")),
    # --- error absorption (cel-go evalOr/evalAnd: commutative) ---
    (f"{D}.nope == 1 || true", True),
    (f"true || {D}.nope == 1", True),
    (f"{D}.nope == 1 && false", False),
    (f"false && {D}.nope == 1", False),
    (f"{D}.nope == 1 || false", (ERR, "no such key: nope")),
    (f"{D}.nope == 1 && true", (ERR, "no such key: nope")),
    (f"{D}.model || true", True),
    (f"{D}.model && true", (ERR, "no such overload")),
    ("!(1/0 == 1) || true", True),
    ("[0, 1].exists(x, 1 / x > 0)", True),
    ("[0, 1].all(x, 1 / x > 0)", (ERR, "division by zero")),
    ("[0, 1].all(x, x == 1 && 1 / x > 0)", False),
    # --- semver (apiserver semverlib.go, blang/semver) ---
    (f'{D}.driverVersion.isGreaterThan(semver("1.2.0"))', True),
    (f'{D}.driverVersion.isLessThan(semver("1.10.0"))', True),
    (f'{D}.driverVersion.compareTo(semver("1.2.3")) == 0', True),
    (f'{D}.pre.isLessThan(semver("1.2.3"))', True),
    (f'{D}.pre.compareTo(semver("1.2.3-rc.0")) == 1', True),
    (
        f"{D}.driverVersion.major() == 1 && {D}.driverVersion.minor() == 2 && {D}.driverVersion.patch() == 3",
        True,
    ),
    ('semver("1.2.3-alpha") < semver("1.2.3")', (COMPILE, "found no matching overload for '_<_'")),
    ('semver("1.2.3-alpha").isLessThan(semver("1.2.3-alpha.1"))', True),
    ('semver("1.2.3-alpha.1").isLessThan(semver("1.2.3-beta"))', True),
    ('semver("1.2.3+build") == semver("1.2.3")', True),
    ('isSemver("1.2.3")', True),
    ('isSemver("1.2")', False),
    ('isSemver("v1.2", true)', True),
    ('semver("v01.2", true) == semver("1.2.0")', True),
    ('semver("bad").major() == 1', (ERR, "No Major.Minor.Patch elements found")),
    ('semver("1.2.x").major() == 1', (ERR, 'Invalid character(s) found in patch number "x"')),
    ('semver("01.2.3").major() == 1', (ERR, 'Major number must not contain leading zeroes "01"')),
    # --- quantity (apiserver quantity.go) ---
    (f'{C}.memory.compareTo(quantity("24Gi")) >= 0', True),
    (f'{C}.memory.compareTo(quantity("80Gi")) == 0', True),
    (f'{C}.memory.isGreaterThan(quantity("40Gi"))', True),
    (f'{C}.memory.isLessThan(quantity("100Gi"))', True),
    ('quantity("1Gi") == quantity("1024Mi")', True),
    ('quantity("1.5").isInteger()', False),
    ('quantity("5").isInteger()', True),
    ('quantity("5").asInteger() == 5', True),
    ('quantity("1.5").asInteger() == 1', (ERR, "cannot convert value to integer")),
    ('quantity("1k").asApproximateFloat() == 1000.0', True),
    ('quantity("1").add(quantity("2")) == quantity("3")', True),
    ('quantity("1").add(2) == quantity("3")', True),
    ('quantity("5").sub(quantity("2")) == quantity("3")', True),
    ('quantity("5").sub(2) == quantity("3")', True),
    ('sign(quantity("-5")) == -1', True),
    ('isQuantity("1Gi")', True),
    ('isQuantity("1GG")', False),
    ('quantity("1GG").isInteger()', (ERR, "unable to parse quantity's suffix")),
    ('quantity("").isInteger()', (ERR, "quantities must match the regular expression")),
    ('quantity("1") == 1', (COMPILE, "found no matching overload for '_==_'")),
    ('quantity("1") == dyn(1)', (ERR, "no such overload")),
    ('dyn(1) == quantity("1")', False),
    # --- cel.bind (ext.Bindings) ---
    (f'cel.bind(d, {D}, d.model == "H100" && d.gen > 5)', True),
    ("cel.bind(x, 2, cel.bind(y, x * 3, y == 6))", True),
    ("cel.bind(x, 1 / 0, true)", True),  # bindings are lazy in cel-go
    ("cel.bind(x, 1 / 0, x == 1)", (ERR, "division by zero")),
    ("cel.bind(1, 2, true)", (COMPILE, "cel.bind() variable names must be simple identifiers")),
    # --- int64/uint64 arithmetic, division (cel-go overflow checks) ---
    ("9223372036854775807 + 1 > 0", (ERR, "integer overflow")),
    ("-9223372036854775808 - 1 < 0", (ERR, "integer overflow")),
    ("-9223372036854775808 < 0", True),
    ("-(-9223372036854775808) > 0", (ERR, "integer overflow")),
    ("9223372036854775807 * 2 > 0", (ERR, "integer overflow")),
    ("-9223372036854775808 / -1 == 0", (ERR, "integer overflow")),
    ("-9223372036854775808 % -1 == 0", (ERR, "integer overflow")),
    ("1u - 2u > 0u", (ERR, "unsigned integer overflow")),
    ("18446744073709551615u + 1u > 0u", (ERR, "unsigned integer overflow")),
    ("5 / 0 == 0", (ERR, "division by zero")),
    ("5 % 0 == 0", (ERR, "modulus by zero")),
    ("-7 / 2 == -3", True),
    ("-7 % 2 == -1", True),
    ("7 % -2 == 1", True),
    ("5.0 / 0.0 > 1.0", True),
    ("1 + 2 * 3 - 4 == 3", True),
    ("1 + 1u == 2", (COMPILE, "found no matching overload for '_+_' applied to '(int, uint)'")),
    # --- comparisons across numeric types (cel-go CrossTypeNumericComparisons) ---
    ("1 < 1.5", True),
    ("1u < 2", True),
    ("2.0 >= 2u", True),
    ("1 == 1.0", (COMPILE, "found no matching overload for '_==_' applied to '(int, double)'")),
    ("dyn(1) == 1.0", True),
    ("dyn(1) == 1u", True),
    ('dyn("1") == 1', False),
    ("dyn(true) == 1", False),
    ("[1, 2] == [1, 2]", True),
    ('{"a": 1} == {"a": 1}', True),
    ("[1, dyn(2.0)] == [1, 2]", (COMPILE, "<input>:1:8: expected type 'int' but found 'dyn'")),
    ("[dyn(1), dyn(2.0)] == [1, 2]", True),
    ('"abc" < "abd"', True),
    ("false < true", True),
    ('b"a" < b"b"', True),
    ("0.0 / 0.0 == 0.0 / 0.0", False),
    # --- strings (core + ext.Strings) ---
    ('"abc".contains("b")', True),
    ('"abc".startsWith("a") && "abc".endsWith("c")', True),
    ('"abc".matches("^a.c$")', True),
    ('matches("abc", "b")', True),
    ('"héllo".size() == 5 && size("héllo") == 5', True),
    ('size(b"h\\xc3\\xa9") == 3', True),
    ('"a" + "b" == "ab"', True),
    ('"abc".charAt(1) == "b"', True),
    ('"abc".charAt(3) == ""', True),
    ('"abc".charAt(4) == ""', (ERR, "index out of range: 4")),
    ('"abcabc".indexOf("c") == 2', True),
    ('"abcabc".indexOf("c", 3) == 5', True),
    ('"abcabc".lastIndexOf("c") == 5', True),
    ('"abcabc".lastIndexOf("c", 4) == 2', True),
    ('"ABC".lowerAscii() == "abc" && "abc".upperAscii() == "ABC"', True),
    ('"ÀB".lowerAscii() == "Àb"', True),
    ('"aaa".replace("a", "b") == "bbb"', True),
    ('"aaa".replace("a", "b", 1) == "baa"', True),
    ('"a,b,c".split(",") == ["a", "b", "c"]', True),
    ('"a,b,c".split(",", 2) == ["a", "b,c"]', True),
    ('"abc".substring(1) == "bc"', True),
    ('"abc".substring(1, 2) == "b"', True),
    ('"abc".substring(2, 1) == ""', (ERR, "invalid substring range. start: 2, end: 1")),
    ('"  a \\t".trim() == "a"', True),
    ('["a", "b"].join("-") == "a-b"', True),
    ('["a", "b"].join() == "ab"', True),
    ('"abc".find("b.") == "bc"', True),
    ('"a1b2".findAll("[0-9]") == ["1", "2"]', True),
    ('"a1b2c3".findAll("[0-9]", 2) == ["1", "2"]', True),
    ('"abc".matches("[")', (COMPILE, "<input>:1:15: invalid matches argument")),
    (
        '"abc".matches(dyn("["))',
        (COMPILE, "program instantiation failed: error parsing regexp: missing closing ]: `[`"),
    ),
    ('"abc".matches(device.driver + "[")', (ERR, "error parsing regexp: missing closing ]")),
    ('"a1".matches("[[:digit:]]")', True),
    ('"a\\n".matches("a$")', False),
    ('"xABCx".matches("(?i)abc")', True),
    (r'"gpu.example.com".matches("^([a-z0-9]+\\.)*[a-z]+$")', True),
    ('"aaa".matches("(?=a)")', (COMPILE, "invalid matches argument")),
    ('"aaa".matches(dyn("(?=a)"))', (COMPILE, "invalid or unsupported Perl syntax: `(?=`")),
    (r'"aa".matches("(a)\\1")', (COMPILE, "invalid matches argument")),
    ('"baaab".findAll("a*") == ["", "aaa", ""]', True),
    ('string(1000000.0) == "1e+06" && string(123456.0) == "123456" && string(0.00001) == "1e-05"', True),
    # --- lists and sets libraries ---
    ("[1, 2, 3].isSorted() && ![2, 1].isSorted()", True),
    ("[1, 2, 3].sum() == 6", True),
    ("[1.5, 2.5].sum() == 4.0", True),
    ("[3, 1, 2].min() == 1 && [3, 1, 2].max() == 3", True),
    ("[1, 2, 3].indexOf(2) == 1", True),
    ("[1, 2, 2].lastIndexOf(2) == 2", True),
    ("sets.contains([1, 2, 3], [1, 2])", True),
    ("sets.contains([1, 2], [3])", False),
    ("sets.equivalent([1, 2], [2, 1, 1])", True),
    ("sets.intersects([1, 2], [2, 3])", True),
    ("sets.intersects([1], [2])", False),
    # --- macros ---
    ("[1, 2, 3].all(x, x > 0)", True),
    ("[1, 2, 3].exists(x, x == 2)", True),
    ("[1, 2, 3].exists_one(x, x > 2)", True),
    ("[1, 2, 3].exists_one(x, x > 1)", False),
    ("[1, 2, 3].map(x, x * 2) == [2, 4, 6]", True),
    ("[1, 2, 3].filter(x, x > 1) == [2, 3]", True),
    ("[1, 2, 3].map(x, x > 1, x * 10) == [20, 30]", True),
    ('{"a": 1, "b": 2}.all(k, k == "a" || k == "b")', True),
    ('{"a": 1}.exists(k, k == "a")', True),
    ("[].all(x, x)", True),
    ("[].exists(x, x)", False),
    ("[1, 2].all(x, [3, 4].exists(y, y > x))", True),
    ("[1, 2].exists(x, dyn(x))", (ERR, "no such overload")),
    ("[1, 2].exists(x, x)", (COMPILE, "<input>:1:18: expected type 'bool' but found 'int'")),
    ("[1, 2].all(1, true)", (COMPILE, "argument must be a simple name")),
    ("has(1)", (COMPILE, "invalid argument to has() macro")),
    (f"{D}.model.all(x, true)", (COMPILE, "expression of type 'any' cannot be range of a comprehension")),
    # --- literals ---
    ("1u == 1u && 0x10 == 16 && 0xFFu == 255u", True),
    ("1.5e2 == 150.0 && .5 == 0.5", True),
    ('"\\x41" == "A" && "\\101" == "A" && "\\u00e9" == "é" && "\\U0001F600" == "😀"', True),
    ('r"\\n" == "\\\\n"', True),
    ("'''a\nb''' == \"a\\nb\"", True),
    ('"""x""" == "x"', True),
    ('b"abc" == bytes("abc")', True),
    ("null == null", True),
    ("true != false", True),
    ('"\\q" == "q"', (COMPILE, "Syntax error")),
    ("9223372036854775808 > 0", (COMPILE, "")),
    # --- conversions and type() ---
    ('int("42") == 42 && int(3.9) == 3 && int(-1.5) == -1 && int(5u) == 5', True),
    ('uint(5) == 5u && double(2) == 2.0 && double("1.5") == 1.5', True),
    ('string(12) == "12" && string(1.5) == "1.5" && string(true) == "true" && string(5u) == "5"', True),
    ('bool("true") && !bool("false")', True),
    ('bytes("a") == b"a" && string(b"abc") == "abc"', True),
    # conversions of constants are evaluated when cel-go builds the program
    (
        'int("x") == 0',
        (COMPILE, "program instantiation failed: type conversion error from 'string' to 'int'"),
    ),
    ("uint(-1) == 0u", (COMPILE, "program instantiation failed: unsigned integer overflow")),
    ("int(18446744073709551615u) == 0", (COMPILE, "program instantiation failed: integer overflow")),
    ("int(1e20) == 0", (COMPILE, "program instantiation failed: integer overflow")),
    (
        'int(dyn("x")) == 0',
        (COMPILE, "program instantiation failed: type conversion error from 'string' to 'int'"),
    ),
    ("int(device.driver) == 0", (ERR, "type conversion error from 'string' to 'int'")),
    ('type(1) == int && type("a") == string && type(1u) == uint && type(1.0) == double', True),
    ("type([]) == list && type({}) == map && type(true) == bool && type(null) == null_type", True),
    (f"type({D}.model) == string", True),
    ("type(int) == type", True),
    # --- ternary, in, indexing ---
    ("true ? true : false", True),
    ('device.driver == "x" ? false : true', True),
    ("(1/0 == 1) ? true : true", (ERR, "division by zero")),
    ("2 in [1, 2, 3]", True),
    ('"a" in {"a": 1}', True),
    ("[1, 2][1] == 2", True),
    ("[1, 2][2] == 2", (ERR, "index out of bounds: 2")),
    ('{"a": 1}["b"] == 1', (ERR, "no such key: b")),
    ('{"a": {"b": true}}.a.b', True),
    ('{1: "x"}[1] == "x"', True),
    # --- compile errors (cel-go checker wording and positions) ---
    ("noSuchVar", (COMPILE, "ERROR: <input>:1:1: undeclared reference to 'noSuchVar' (in container '')")),
    ("device.nope", (COMPILE, "ERROR: <input>:1:7: undefined field 'nope'")),
    ("foo(1)", (COMPILE, "undeclared reference to 'foo' (in container '')")),
    ('"a".nope()', (COMPILE, "undeclared reference to 'nope' (in container '')")),
    ("1 +", (COMPILE, "Syntax error")),
    ("1 == 1 ==", (COMPILE, "Syntax error")),
    ('1 == "a"', (COMPILE, "found no matching overload for '_==_' applied to '(int, string)'")),
    ('"a".size(1) == 1', (COMPILE, "found no matching overload for 'size' applied to 'string.(int)'")),
    ("!1", (COMPILE, "found no matching overload for '!_' applied to '(int)'")),
    ("device.driver.contains(1)", (COMPILE, "found no matching overload for 'contains'")),
    ("x.y == 1", (COMPILE, "undeclared reference to 'x'")),
    ("Foo{a: 1}", (COMPILE, "")),
    ("1 ? true : false", (COMPILE, "found no matching overload for '_?_:_'")),
]


def _run(expr: str) -> Any:
    try:
        prog = compile_selector(expr)
    except CELCompileError as e:
        return (COMPILE, str(e))
    try:
        return prog.matches(DEV)
    except CELRuntimeError as e:
        return (ERR, str(e))


@pytest.mark.parametrize(("expr", "want"), CASES, ids=[c[0][:60] for c in CASES])
def test_semantics(expr: str, want: Any) -> None:
    got = _run(expr)
    if isinstance(want, tuple):
        assert isinstance(got, tuple), f"{expr!r}: expected {want}, got {got!r}"
        assert got[0] == want[0], f"{expr!r}: expected {want}, got {got!r}"
        assert want[1] in got[1], f"{expr!r}: expected {want}, got {got!r}"
    else:
        assert got is want, f"{expr!r}: expected {want}, got {got!r}"


# --- environment options ---------------------------------------------------------------------------------


def test_allow_multiple_allocations_needs_consumable_capacity() -> None:
    # compile.go: the field only exists in the DRAConsumableCapacity device type
    dev = device_input(DRIVER, {}, {}, True)
    assert compile_selector("device.allowMultipleAllocations").matches(dev) is True
    with pytest.raises(CELCompileError, match="undefined field 'allowMultipleAllocations'"):
        compile_selector("device.allowMultipleAllocations", consumable_capacity=False)


def test_compile_error_display() -> None:
    with pytest.raises(CELCompileError) as ei:
        compile_selector("noSuchVar")
    assert str(ei.value) == (
        "compilation failed: ERROR: <input>:1:1: undeclared reference to 'noSuchVar' (in container '')\n"
        " | noSuchVar\n"
        " | ^"
    )
    with pytest.raises(CELCompileError) as ei:
        compile_selector('device.driver == "a" &&\n  device.nope')
    assert "ERROR: <input>:2:9: undefined field 'nope'\n |   device.nope\n | ........^" in str(ei.value)


def test_invalid_attribute_value_is_an_error_for_every_selector() -> None:
    # upstream conformance: list-attributes-*-with-empty-or-unknown-type: the class selector
    # `device.driver == "driver-a"` fails with "attribute stringAttribute: unsupported attribute value"
    dev = device_input("driver-a", {"stringAttribute": {}}, {}, False)
    with pytest.raises(CELRuntimeError) as ei:
        compile_selector('device.driver == "driver-a"').matches(dev)
    assert str(ei.value) == "attribute stringAttribute: unsupported attribute value"


def test_list_attributes() -> None:
    attrs = {"ids": {"ints": [1, 2, 3]}, "names": {"strings": ["a", "b"]}, "model": {"string": "x"}}
    dev = device_input(DRIVER, attrs, {}, False)
    on = {"list_type_attributes": True}
    assert compile_selector(f"{D}.ids.exists(x, x == 2)", **on).matches(dev) is True
    assert compile_selector(f"{D}.ids.includes(3)", **on).matches(dev) is True
    assert compile_selector(f'{D}.names.includes("c")', **on).matches(dev) is False
    assert compile_selector(f'{D}.model.includes("x")', **on).matches(dev) is True
    assert compile_selector(f"size({D}.ids) == 3", **on).matches(dev) is True
    # DRAListTypeAttributes off: list values are unsupported (compile.go getAttributeValue)
    with pytest.raises(CELRuntimeError, match="attribute ids: unsupported attribute value"):
        compile_selector(f'{D}.model == "x"').matches(dev)
    with pytest.raises(CELCompileError, match="undeclared reference to 'includes'"):
        compile_selector(f"{D}.ids.includes(3)")


def test_version_list_attribute() -> None:
    dev = device_input(DRIVER, {"vs": {"versions": ["1.0.0", "2.0.0"]}}, {}, False)
    prog = compile_selector(f'{D}.vs.exists(v, v.isGreaterThan(semver("1.5.0")))', list_type_attributes=True)
    assert prog.matches(dev) is True


def test_unchanged_device_reused_across_programs() -> None:
    progs = [compile_selector(f"{D}.gen == {i}") for i in range(20)]
    assert [p.matches(DEV) for p in progs] == [i == 9 for i in range(20)]


def test_cache_returns_same_program() -> None:
    assert compile_selector("true") is compile_selector("true")
    assert compile_selector("true", consumable_capacity=False) is not compile_selector("true")


def test_expression_length_limit() -> None:
    expr = "true || " * 1300 + "true"
    assert len(expr) > 10 * 1024
    with pytest.raises(CELCompileError, match="Too long"):
        compile_selector(expr)


# --- cost limit: hostile expressions terminate quickly ----------------------------------------------------

TEN = "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]"
HOSTILE = [
    # 10^7 iterations
    f"{TEN}.all(a, {TEN}.all(b, {TEN}.all(c, {TEN}.all(d, {TEN}.all(e, {TEN}.all(f, {TEN}.all(g, true)))))))",
    f"{TEN}.map(a, {TEN}.map(b, {TEN}.map(c, {TEN}.map(d, {TEN}.map(e, {TEN}.map(f, f)))))).size() > 0",
    # exponential string growth
    "cel.bind(a, 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx', "
    + "".join("cel.bind(a, a + a + a + a, " for _ in range(14))
    + "size(a) > 0"
    + ")" * 15,
    # exponential list growth
    "cel.bind(l, "
    + TEN
    + ", "
    + "".join("cel.bind(l, l + l + l + l, " for _ in range(14))
    + "size(l) > 0"
    + ")" * 15,
    # quadratic string work inside a comprehension
    "cel.bind(s, 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx', "
    + "".join("cel.bind(s, s + s + s + s, " for _ in range(5))
    + f"{TEN}.all(a, {TEN}.all(b, {TEN}.all(c, {TEN}.all(d, !s.contains('z'))))))"
    + ")" * 5,
]


@pytest.mark.parametrize("expr", HOSTILE, ids=[f"hostile-{i}" for i in range(len(HOSTILE))])
def test_cost_limit(expr: str) -> None:
    t0 = time.perf_counter()
    with pytest.raises(CELRuntimeError) as ei:
        compile_selector(expr).matches(DEV)
    assert str(ei.value) == "operation cancelled: actual cost limit exceeded"
    assert time.perf_counter() - t0 < 5.0


def test_cost_not_absorbed_by_or() -> None:
    expr = f"{TEN}.all(a, {TEN}.all(b, {TEN}.all(c, {TEN}.all(d, {TEN}.all(e, {TEN}.all(f, true)))))) || true"
    with pytest.raises(CELRuntimeError, match="actual cost limit exceeded"):
        compile_selector(expr).matches(DEV)


def test_cost_budget_is_per_evaluation() -> None:
    prog = compile_selector(f"{TEN}.all(a, {TEN}.all(b, {TEN}.all(c, {TEN}.all(d, true))))")
    for _ in range(3):
        assert prog.matches(DEV) is True


@pytest.mark.parametrize(
    ("pattern", "text"),
    [
        ("(a+)+$", "a" * 60 + "!"),
        ("(a|aa)*c", "a" * 60),
        ("a*a*a*a*a*a*b", "a" * 2000),
        ("(x+x+)+y", "x" * 64),
    ],
)
def test_regex_cannot_backtrack_exponentially(pattern: str, text: str) -> None:
    # RE2 is linear-time; kdra runs multi-repetition patterns on a Pike VM instead of backtracking
    t0 = time.perf_counter()
    assert compile_selector(f"!{text!r}.matches({pattern!r})").matches(DEV) is True
    assert time.perf_counter() - t0 < 2.0


def test_deep_nesting_is_a_compile_error_not_a_crash() -> None:
    with pytest.raises(CELCompileError):
        compile_selector("(" * 500 + "true" + ")" * 500)
    with pytest.raises(CELCompileError):
        compile_selector("!" * 5000 + "true")


def test_estimate_cost() -> None:
    from kdra.cel import estimate_cost

    assert estimate_cost('device.driver == "x"') < 10
    assert estimate_cost(HOSTILE[0]) > 1_000_000
