"""Regenerate tests/cel/celgo_golden.jsonl from the real k8s.io/dynamic-resource-allocation v0.36.3.

Build the oracle (Go, offline, from the module cache that hack/k8s/build.sh fills):
    mkdir /tmp/celoracle && cp tests/cel/oracle/main.go.txt /tmp/celoracle/main.go
    sed "s#^module .*#module celoracle#" hack/k8s/v1.36/go.mod | sed '/^tool (/,$d' > /tmp/celoracle/go.mod
    cp hack/k8s/v1.36/go.sum /tmp/celoracle/ && cd /tmp/celoracle && \
      GOPROXY=off GOFLAGS=-mod=mod GOMODCACHE=~/.cache/kdra/gomod go build -o celoracle .
Then: PYTHONPATH=src python tests/cel/oracle/gen_golden.py /tmp/celoracle/celoracle
"""

import json
import os
import subprocess
import sys
import warnings

warnings.filterwarnings("ignore")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import test_fuzz  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from test_semantics import ATTRS, CAPS, CASES, DRIVER  # noqa: E402

LATTRS = {
    "ids": {"ints": [1, 2, 3]},
    "names": {"strings": ["a", "b"]},
    "flags": {"bools": [True]},
    "vs": {"versions": ["1.0.0", "2.0.0"]},
    "model": {"string": "x"},
    "empty": {"ints": []},
}
DEVICES = {
    "main": {"driver": DRIVER, "attributes": ATTRS, "capacity": CAPS, "multi": False},
    "multi": {"driver": DRIVER, "attributes": ATTRS, "capacity": CAPS, "multi": True},
    "lists": {"driver": DRIVER, "attributes": LATTRS, "capacity": {}, "multi": False},
    "ids": {
        "driver": DRIVER,
        "attributes": {**ATTRS, "ids": {"ints": [1, 2]}},
        "capacity": CAPS,
        "multi": False,
    },
    "noval": {"driver": DRIVER, "attributes": {"s": {}}, "capacity": {}, "multi": False},
    "badver": {"driver": DRIVER, "attributes": {"v": {"version": "1.x"}}, "capacity": {}, "multi": False},
}
EXTRA = [
    "has(device.attributes.nope)",
    'has(device.attributes["dra.example.com"].model)',
    'device.attributes["dra.example.com"]',
    "device.attributes",
    'device.capacity["dra.example.com"].memory',
    "1 == 1u",
    'null == "a"',
    '[1, "a"].size() == 2',
    '{1: "a", "b": 2}.size() == 2',
    '{"a": 1, "a": 2}.size() == 1',
    'device.attributes["dra.example.com"].gen + 1 == 10',
    'device.attributes["dra.example.com"].gen == 9.0',
    'device.attributes["dra.example.com"].gen == 9u',
    'device.attributes["dra.example.com"].model < "Z"',
    'device.attributes["dra.example.com"].driverVersion == semver("1.2.3")',
    'device.attributes["dra.example.com"].driverVersion == "1.2.3"',
    'device.capacity["dra.example.com"].memory == quantity("80Gi")',
    'device.capacity["dra.example.com"].memory.asInteger() == 85899345920',
    'quantity("1000m").isInteger()',
    'quantity("1000m").asInteger() == 1',
    'quantity("0.5").asApproximateFloat() == 0.5',
    'quantity("1Ki").sign() == 1',
    'sign(quantity("1Ki")) == 1',
    '[1, 2, 3].exists(x, x == 4) || device.attributes["dra.example.com"].nope',
    'device.attributes["dra.example.com"].nope.exists(x, true)',
    'type(device.attributes["dra.example.com"].driverVersion) == string',
    'string(type(1)) == "int"',
    'type(quantity("1")) == type(quantity("2"))',
    '"abc"[0] == "a"',
    'size("abc") == 3u',
    '"abc".size() == 3.0',
    "-(1u) == 1u",
    "!true == false",
    "(1 < 2) == true",
    "1 < 2 < 3",
    '"a" in ["a", "b"]',
    '1 in {"a": 1}',
    'device.driver in ["dra.example.com"]',
    "[1,2,3].map(x, x * 2).filter(y, y > 2) == [4, 6]",
    "[[1], [2]].all(l, l.all(x, x > 0))",
    '{"a": 1}.map(k, k) == ["a"]',
    "[1, 2, 3].sum() == 6.0",
    "[].sum() == 0",
    "[1, 2.0].sum() == 3.0",
    "[].min() == 0",
    '["b", "a"].min() == "a"',
    "[1, 2, 3].isSorted() == true",
    "[3, 1].isSorted()",
    '["a", 1].isSorted()',
    "sets.contains([], [])",
    "sets.contains([1], [1.0])",
    '"aBc".lowerAscii() == "abc"',
    '"a b".split(" ", 0) == []',
    '"abc".split("") == ["a", "b", "c"]',
    '"".split(",") == [""]',
    '"abc".indexOf("") == 0',
    '"abc".indexOf("c", 4) == 0',
    '"abc".lastIndexOf("") == 3',
    '"abc".replace("", "-") == "-a-b-c-"',
    '"hello".charAt(-1) == ""',
    '" \\t a".trim() == "a"',
    '["a", 1].join(",") == "a,1"',
    '"abc".find("x") == ""',
    '"abc".findAll("x") == []',
    '"a1b2".findAll("[0-9]", -1) == ["1", "2"]',
    '"a.b".matches("a.b")',
    '"ab".matches("^a")',
    '"AB".matches("(?i)ab")',
    '"abc".matches("\\\\d")',
    '"abc".matches("[[:alpha:]]+")',
    '"ab".matches("\\\\pL")',
    'int("0x10") == 16',
    'int(" 1") == 1',
    'int("+1") == 1',
    'uint("1") == 1u',
    'double("1e3") == 1000.0',
    'double("inf") > 0.0',
    'double("NaN") != double("NaN")',
    'string(-0.0) == "-0"',
    'string(1e21) == "1e+21"',
    'string(100.0) == "100"',
    'string(1.0/3.0) == "0.3333333333333333"',
    'string(b"\\xff") == ""',
    'bytes("é") == b"\\xc3\\xa9"',
    'bool("TRUE")',
    'bool("yes")',
    "int(9223372036854775807.0) == 0",
    "int(-9223372036854775808.0) == -9223372036854775808",
    "uint(18446744073709551615.0) == 0u",
    "int(1u) == 1",
    "double(18446744073709551615u) > 0.0",
    "9223372036854775807 + 0 == 9223372036854775807",
    "-9223372036854775808 / 1 == -9223372036854775808",
    '1.0 / 0.0 == double("inf")',
    "-1.0 / 0.0 < 0.0",
    "0.0 / 0.0 == 0.0 / 0.0",
    "5u / 0u == 0u",
    "5u % 2u == 1u",
    "2.5 % 1.0 == 0.5",
    "-5 % 3 == -2",
    "5 % -3 == 2",
    "[1, 2] + [3] == [1, 2, 3]",
    '[1] + ["a"] == [1, "a"]',
    'b"a" + b"b" == b"ab"',
    '"a" + 1 == "a1"',
    "cel.bind(x, [1, 2], x.map(y, y + 1)) == [2, 3]",
    "cel.bind(x, 1, cel.bind(x, 2, x)) == 2",
    "[1, 2].map(x, cel.bind(y, x * 2, y)) == [2, 4]",
    "[1, 2].exists(x, [3].exists(x, x == 3))",
    'device.attributes["dra.example.com"].healthy == true',
    '!device.attributes["dra.example.com"].healthy',
    'device.attributes["dra.example.com"].healthy && device.attributes["dra.example.com"].gen > 1',
    'device.attributes["dra.example.com"].model.startsWith("H") ? true : 1',
    'true ? 1 : "a"',
    "true ? 1 : 2.0",
    'true ? [1] : ["a"]',
    "true ? {} : []",
    'has({"a": 1}.a)',
    'has({"a": 1}.b)',
    '{"a": {"b": 1}}.a.b == 1',
    '{"a": 1}.b == 1',
    "[1,2,3][1u] == 2",
    "[1,2,3][1.0] == 2",
    "[1,2,3][-1] == 1",
    '{1u: "a"}[1] == "a"',
    "{true: 1}[true] == 1",
    '{1: "a"}[1.0] == "a"',
    "device.allowMultipleAllocations",
    "dyn(device.allowMultipleAllocations)",
    "device",
    "device == device",
    "device.driver.size() > 0",
    '"\\u00e9".size() == 1',
    'b"\\u00e9".size() == 2',
    "'\\''  == \"'\"",
    '"\\"" == \'"\'',
    '"""a"b""" == \'a"b\'',
    "r'\\d' == \"\\\\d\"",
    "1e3 == 1000.0",
    "0.5e-1 == 0.05",
    "1 + 2 * 3 == 7",
    "(1 + 2) * 3 == 9",
    "!!true",
    "--1 == 1",
    "-(-1) == 1",
    "- 1 == -1",
    "1 - -1 == 2",
    "a.b.c",
    '.device.driver == "dra.example.com"',
    'device.driver == "dra.example.com" && ',
    "device.driver.x",
    "device.attributes.x.y == 1",
    'device["driver"] == "dra.example.com"',
    "x",
    "true && 1",
    "1 || true",
    "[1][0] || true",
]

# Differences found by a grammar-based generator of well-typed selectors run against v0.36.3 and
# v0.37.2 (both agree on these): regex syntax checks, numeric comparison, set membership, Quantity
# equality and representation, null typing, conversion planning, error wording.
DIFFERENTIAL = [
    '"a".matches("x{1001}")',
    '"a".matches(device.driver + "x{1001}")',
    '"a".matches(device.driver + "x{3,2}")',
    '"a".matches(device.driver + "(x{500}){3}")',
    '"a".matches(device.driver + "((a{10}){10}){10}")',
    '"a".matches(device.driver + "a{2}{3}")',
    '"a".matches(device.driver + "a*?+")',
    '"a".matches("*a" + device.driver)',
    '"a".matches(device.driver + "|*a")',
    '"a".matches(device.driver + "^*")',
    '"a".matches(device.driver + "[a{2000}]")',
    'double("-1e400") < 1.0',
    'double("1_000.000_1") > 1.0',
    'double("1__0") == 10.0',
    'double("0x1.8p1") == 3.0',
    'double("0x10") == 16.0',
    'double("+nan") != 0.0',
    'double("1.5e-400") == 0.0',
    'string(dyn(quantity("1"))) == "1"',
    'string(device.attributes["dra.example.com"].driverVersion) == "1.2.3"',
    'int(quantity("1Ei").asApproximateFloat() * 1e10) == 1',
    "int(1e10 * 1e10) == 1",
    'int(double("1e19")) == 1',
    '"a".matches(["["][0])',
    'int({"a": 1e20}["a"]) == 1',
    'string(device.attributes["dra.example.com"].nope) in []',
    'device.attributes["dra.example.com"].nope in [1]',
    "dyn(9007199254740992.0) in [9007199254740993]",
    "dyn(9007199254740992.0) == 9007199254740993",
    'dyn(double("nan")) in [double("nan")]',
    "dyn(0.0) in [-0.0]",
    "dyn(true) in [1]",
    '1.0 < double(device.driver.size() > 0 ? "nan" : "1")',
    '1 < dyn(double(device.driver.size() > 0 ? "nan" : "1"))',
    "dyn(9007199254740993) > 9007199254740992.0",
    "dyn(9223372036854775807) < 9223372036854775807.0",
    "dyn(9223372036854775807) == 9223372036854775807.0",
    "dyn(18446744073709551615u) == 18446744073709551615.0",
    '[1.0, double("nan"), 0.5].min() == 0.5',
    '[double("nan"), 1.0].max() == 1.0',
    'device.capacity["dra.example.com"].memory == quantity("1").add(quantity("3.7"))',
    'quantity("1").add(quantity("3.7")) == quantity("4.7")',
    'quantity("1").add(1) == quantity("1").add(1)',
    'quantity("2") != quantity("1").add(1)',
    'dyn(quantity("1").add(1)) == 1',
    '[quantity("2")] == [quantity("1").add(1)]',
    '{"a": dyn(quantity("1"))} == {"a": dyn(1)}',
    'dyn(semver("1.0.0")) != 1',
    'dyn(quantity("1")) in [dyn(1), dyn(quantity("1"))]',
    'dyn(quantity("1")) in [dyn(1)]',
    'sets.contains([dyn(1)], [dyn(quantity("1"))])',
    'sets.intersects([dyn(1)], [dyn(quantity("1"))])',
    '[dyn(quantity("1"))].indexOf(dyn(1)) == 0',
    '[dyn(quantity("1"))].lastIndexOf(dyn(1)) == 0',
    "sets.contains([1, 2, 3], dyn([1]))",
    "sets.contains([1, 2, 3], dyn(1))",
    "sets.intersects(dyn(1), [1])",
    'sets.contains(dyn([1]), ["a"])',
    'semver("1.0.0") == null',
    'quantity("1") == null',
    'null != quantity("1")',
    'device.capacity["dra.example.com"].memory == null',
    'null == quantity("1").add(1)',
    "[1] == null",
    '{"a": 1} == null',
    "type(1) == null",
    "[null] == [1]",
    "[1] == [1.0]",
    '{"a": 1} == {"a": 1u}',
    "[[1]] == [[null]]",
    '"x".matches("(?P<n>x)")',
    '"x".matches(device.driver + "|(?P<1n>x)")',
    '"x".matches(device.driver + "|(?<n>x)")',
    '"x".matches(device.driver + "|(?P<n-x>x)")',
    '"x".matches(device.driver + "|(?P=n)")',
    '"x".matches(device.driver + "|(?i)X")',
    '"AC".matches(device.driver + "|a(?i)b|c")',
    '"aBC".matches("^a(?i)b(?-i)c$")',
    '"ab".matches("((?i)A|B)+")',
    '"a\\nb".matches("a(?s).b")',
    'quantity("1Ei").isInteger()',
    'quantity("2.5Ti").isInteger()',
    'quantity("9223372036854775807").isInteger()',
    'quantity("9223372036854775807").asInteger() > 0',
    'quantity("1e3").asInteger() == 1000',
    'quantity("0.5").isInteger()',
    'quantity("1500m").add(quantity("500m")).isInteger()',
    'quantity("1k").sub(quantity("1")).asInteger() == 999',
    'quantity("9e18").add(quantity("9e18")).isInteger()',
    'quantity("1000m").add(quantity("0")).isInteger()',
    'quantity("1e19").isInteger()',
    'quantity("12345678901234Ki").isInteger()',
    'device.capacity["dra.example.com"].memory.isInteger()',
    'device.capacity["other.example.org"].bw.asInteger() == 100000000',
    'string(false ? device.attributes["dra.example.com"].driverVersion : semver("1.2.3")) == ""',
    'string(true ? semver("1.2.3") : device.attributes["dra.example.com"].driverVersion) == ""',
    'int(true ? "x" : "y") == 1',
    '"a".matches(true ? "[" : "a")',
    '"abc".substring(10, 1) == ""',
    'device.attributes["dra.example.com"].gen.startsWith("a")',
    'device.attributes["dra.example.com"].gen.contains("a")',
    'device.attributes["dra.example.com"].gen.matches("a")',
    'device.attributes["dra.example.com"].gen.matches(device.driver)',
    '"a".matches(device.attributes["dra.example.com"].gen)',
    'size(device.attributes["dra.example.com"].healthy) == 1',
    'device.attributes["dra.example.com"].gen.find("a") == ""',
    'device.attributes["dra.example.com"].gen.find(device.driver) == ""',
    '"a".find(device.attributes["dra.example.com"].gen) == ""',
    '[device.attributes["dra.example.com"].gen, 80].size() == 2',
    '[80, device.attributes["dra.example.com"].gen].size() == 2',
    '[device.attributes["dra.example.com"].gen]',
    '"é".matches("^\\\\pL$")',
    '"1".matches("^\\\\PL$")',
    '"a1".matches("^[\\\\pL\\\\pN]+$")',
    '"1".matches("^\\\\p{^L}$")',
    '"x".matches(device.driver + "\\\\p{Foo}")',
    '"x y".matches("\\\\p{Zs}")',
]

cases = []
SRC = ["table"]


def add(expr, dev="main", consumable=True, lists=False, new=False):
    cases.append({"e": expr, "d": dev, "c": consumable, "l": lists, "n": new, "s": SRC[0]})


for e, _ in CASES:
    add(e)
    add(e, new=True)
for expr in EXTRA:
    add(expr)
    add(expr, new=True)
for expr in DIFFERENTIAL:
    add(expr)
    add(expr, new=True)
for e in [
    "device.allowMultipleAllocations",
    "device.allowMultipleAllocations == false",
    "has(device.allowMultipleAllocations)",
    'device.driver == "dra.example.com"',
]:
    for new in (False, True):
        for cons in (False, True):
            add(e, consumable=cons, new=new)
            add(e, dev="multi", consumable=cons, new=new)
L = 'device.attributes["dra.example.com"]'
for e in [
    f"{L}.ids.exists(x, x == 2)",
    f"{L}.ids.includes(3)",
    f'{L}.names.includes("c")',
    f'{L}.model.includes("x")',
    f"size({L}.ids) == 3",
    f"{L}.ids",
    f"{L}.ids[0] == 1",
    f'{L}.vs.exists(v, v.isGreaterThan(semver("1.5.0")))',
    f"{L}.flags.all(f, f)",
    f"{L}.empty.size() == 0",
    f"{L}.ids == [1, 2, 3]",
    f'{L}.names.join(",") == "a,b"',
    f"{L}.ids.sum() == 6",
    "dyn(true)",
    f"{L}.model",
    f"{L}.ids.includes(dyn(3.0))",
    f"{L}.ids.map(x, x * 2)[2] == 6",
    f'{L}.model == "x"',
    f"{L}.model.all(c, true)",
    f"{L}.vs[1].major() == 2",
]:
    for lists in (False, True):
        for new in (False, True):
            add(e, dev="lists", lists=lists, new=new)
for dev in ("noval", "badver"):
    add('device.driver == "dra.example.com"', dev=dev)
rnd = []


@settings(
    max_examples=600, deadline=None, suppress_health_check=list(HealthCheck), database=None, derandomize=True
)
@given(test_fuzz.STRUCTURED)
def collect(e):
    rnd.append(e)


collect()
SRC[0] = "fuzz"
for e in rnd:
    add(e, dev="ids", lists=True)
    add(e)

reqs = []
for c in cases:
    d = DEVICES[c["d"]]
    reqs.append({"expr": c["e"], "consumable": c["c"], "lists": c["l"], "new": c["n"], **d})
inp = "\n".join(json.dumps(r) for r in reqs) + "\n"
out = subprocess.run([sys.argv[1]], input=inp, capture_output=True, text=True, timeout=900)
assert out.returncode == 0, out.stderr
seen = set()
with open(os.path.join(os.path.dirname(HERE), "celgo_golden.jsonl"), "w") as f:
    f.write(json.dumps({"devices": DEVICES}, sort_keys=True) + "\n")
    for c, line in zip(cases, out.stdout.splitlines(), strict=True):
        key = json.dumps(c, sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        g = json.loads(line)
        if g.get("compile"):
            c["x"] = {"compile": g["compile"]}
        elif g.get("runtime"):
            c["x"] = {"runtime": g["runtime"]}
        else:
            c["x"] = {"result": g.get("result")}
        f.write(json.dumps(c, sort_keys=True, ensure_ascii=False) + "\n")
print(len(seen), "cases")
