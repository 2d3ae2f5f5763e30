"""The API server's worst-case cost estimate of a selector, ported from cel-go v0.29 (checker/cost.go) with
Kubernetes' library.CostEstimator (k8s.io/apiserver/pkg/cel/library/cost.go) and the DRA size estimator
(k8s.io/dynamic-resource-allocation/cel/compile.go) — what kube-apiserver 1.37 compares with
CELSelectorExpressionMaxCost (1,000,000) when it validates a new or changed expression.

Each node gets a (min, max) cost and, where it has one, a (min, max) size; costs saturate at 2^64-1 like
cel-go's. Macros cost what cel-go's expansion into a comprehension costs (range, accumulator init and result,
plus the range size times loop condition and step). Sizes come from literals, from the declared bounds of the
`device` variable (driver <= 63 characters, domains <= 63, ids <= 32, attribute values <= 64, at most 32
attributes or capacities per domain), and from what functions return; anything else is unknown (0..2^64-1),
which makes e.g. a comprehension over an unbounded list "too complex", as upstream.

Static types come from kdra's checker (Compiler.types); where kdra compiles `device.attributes[...]`
shapes without visiting the inner nodes, the types follow from the `device` declaration. The differences
from 1.36 (cel-go v0.26) are two functions: the global `matches(s, re)` (1.36: constant 1) and `includes()`
(1.36: constant 1); kdra estimates the 1.37 way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from kdra.cel._compiler import DEVICE_T, Env, base, elem_type, value_type
from kdra.cel._functions import Q, S
from kdra.cel._parser import Call, Ident, Index, ListLit, Lit, MapLit, MessageLit, Node, Select

U64 = (1 << 64) - 1
STRING_TRAVERSAL = 0.1  # common.StringTraversalCostFactor
REGEX_LENGTH = 0.25  # common.RegexStringLengthCostFactor
LIST_CREATE = 10  # common.ListCreateBaseCost
MAP_CREATE = 30  # common.MapCreateBaseCost
STRUCT_CREATE = 40  # common.StructCreateBaseCost

# k8s.io/api/resource/v1 limits the DRA size estimator uses
_DRIVER_MAX = 63  # DriverNameMaxLength
_DOMAIN_MAX = 63  # DeviceMaxDomainLength
_ID_MAX = 32  # DeviceMaxIDLength
_ATTR_VALUE_MAX = 64  # DeviceAttributeMaxValueLength
_ATTR_LIST_MAX = 64  # max(DeviceAttributeMaxValueLength, ResourceSliceMaxAttributeValuesPerDevice=48)
_PER_DEVICE = 32  # ResourceSliceMaxAttributesAndCapacitiesPerDevice

Est = tuple[int, int]  # (min, max), for costs and sizes alike
UNKNOWN: Est = (0, U64)


def _add(a: Est, b: Est) -> Est:
    return (min(U64, a[0] + b[0]), min(U64, a[1] + b[1]))


def _mul(a: Est, b: Est) -> Est:
    return (min(U64, a[0] * b[0]), min(U64, a[1] * b[1]))


def _factor(x: int, f: float) -> int:
    """multiplyByCostFactor: x * f rounded up, saturating."""
    xf = float(x)
    if xf > 0 and f > 0 and xf > U64 / f:
        return U64
    c = math.ceil(xf * f)
    return U64 if c >= 2.0**64 else int(c)


def _by(a: Est, f: float) -> Est:
    return (_factor(a[0], f), _factor(a[1], f))


def _union(a: Est, b: Est) -> Est:
    return (min(a[0], b[0]), max(a[1], b[1]))


def _fixed(n: int) -> Est:
    return (n, n)


@dataclass
class _Entry:
    """Container kind and the sizes of its keys and values (entrySizeEstimate)."""

    kind: str  # list | map
    key: Est
    val: Est


def _union_entry(a: _Entry | None, b: _Entry | None) -> _Entry | None:
    if a is None or b is None:
        return None
    return _Entry(a.kind, _union(a.key, b.key), _union(a.val, b.val))


@dataclass
class _Local:
    path: list[str] | None
    size: Est | None
    entry: _Entry | None


# The `device` declaration as the DRA size estimator walks it: field -> (max size, subtree). "*" stands for
# the elements of a map (@values) or list (@items), "@keys" for map keys.
def _device_tree(list_type_attributes: bool) -> dict[str, Any]:
    attr: dict[str, Any] = {"max": _ATTR_LIST_MAX if list_type_attributes else _ATTR_VALUE_MAX, "attr": True}
    inner_attrs = {"max": _PER_DEVICE, "*": attr, "@keys": {"max": _ID_MAX}}
    inner_caps = {"max": _PER_DEVICE, "*": {"max": 0, "quantity": True}, "@keys": {"max": _ID_MAX}}
    return {
        "max": 0,
        "fields": {
            "driver": {"max": _DRIVER_MAX},
            "attributes": {"max": _PER_DEVICE, "*": inner_attrs, "@keys": {"max": _DOMAIN_MAX}},
            "capacity": {"max": _PER_DEVICE, "*": inner_caps, "@keys": {"max": _DOMAIN_MAX}},
            "allowMultipleAllocations": {"max": 1},
        },
    }


def _scalar(t: str) -> bool:
    return t in ("bool", "double", "int", "uint", "google.protobuf.Duration", "google.protobuf.Timestamp")


class _Coster:
    def __init__(self, env: Env, types: dict[int, str], source: str) -> None:
        self.env = env
        self.types = types
        self.source = source
        self.device = _device_tree(env.list_type_attributes)
        self.paths: dict[int, list[str]] = {}
        self.sizes: dict[int, Est] = {}
        self.entries: dict[int, _Entry] = {}
        self.locals: dict[str, list[_Local]] = {}

    # -- types, paths, sizes ----------------------------------------------------------------------------

    def type_of(self, n: Node) -> str:
        t = self.types.get(id(n))
        if t is not None:
            return t
        # kdra compiles device.<field> and device.attributes[<domain>].<id> in one step: the inner nodes
        # were not visited, their types follow from the declaration.
        if isinstance(n, Ident):
            return DEVICE_T if n.name == "device" and not self.locals.get("device") else "dyn"
        if isinstance(n, Select) and self.type_of(n.operand) == DEVICE_T:
            v = self.env.attr_value_t
            return {
                "driver": "string",
                "attributes": f"map(string, map(string, {v}))",
                "capacity": f"map(string, map(string, {Q}))",
                "allowMultipleAllocations": "bool",
            }.get(n.field, "dyn")
        if isinstance(n, Index):
            t = self.type_of(n.operand)
            if base(t) == "map":
                return value_type(t)
            if base(t) == "list":
                return elem_type(t)
        return "dyn"

    def path(self, n: Node) -> list[str] | None:
        if isinstance(n, Ident):
            stack = self.locals.get(n.name)
            if stack:
                return stack[-1].path
        return self.paths.get(id(n))

    def size(self, n: Node) -> Est | None:
        """computeSize: a recorded size, a literal's, the declaration's, a scalar's, a local's."""
        got = self.sizes.get(id(n))
        if got is not None:
            return got
        if isinstance(n, Lit):
            v = n.value
            if n.kind == "string":
                return _fixed(len(v))
            if n.kind == "bytes":
                return _fixed(len(v))
            return _fixed(1)
        if isinstance(n, ListLit):
            return _fixed(len(n.items))
        if isinstance(n, MapLit):
            return _fixed(len(n.entries))
        est = self._declared_size(self.path(n))
        if est is not None:
            self.sizes[id(n)] = est
            return est
        if _scalar(self.type_of(n)):
            return _fixed(1)
        if isinstance(n, Ident):
            stack = self.locals.get(n.name)
            if stack and stack[-1].size is not None:
                return stack[-1].size
        return None

    def size_or_unknown(self, n: Node) -> Est:
        s = self.size(n)
        return s if s is not None else UNKNOWN

    def _declared_size(self, path: list[str] | None) -> Est | None:
        """The DRA sizeEstimator: walk the device declaration along the path."""
        if not path or path[0] != "device":
            return None
        node = self.device
        for name in path[1:]:
            if name in ("@items", "@values"):
                nxt = node.get("*")
            elif name == "@keys":
                nxt = node.get("@keys")
            else:
                nxt = node.get("fields", {}).get(name)
                if nxt is None and node.get("*", {}).get("attr"):
                    nxt = node["*"]  # any id of an attribute map: the attribute value's bound
            if nxt is None:
                return None
            node = nxt
        return (0, int(node["max"]))

    def entry(self, n: Node) -> _Entry | None:
        got = self.entries.get(id(n))
        if got is not None:
            return got
        if isinstance(n, Ident):
            stack = self.locals.get(n.name)
            if stack and stack[-1].entry is not None:
                return stack[-1].entry
        return None

    def push(self, name: str, local: _Local) -> None:
        self.locals.setdefault(name, []).append(local)

    def pop(self, name: str) -> None:
        self.locals[name].pop()

    # -- costs ---------------------------------------------------------------------------------------------

    def cost(self, n: Node) -> Est:
        if isinstance(n, Lit):
            return (0, 0)
        if isinstance(n, Ident):
            self.paths[id(n)] = self.path(n) or [n.name]
            return _fixed(1)
        if isinstance(n, Select):
            return self.c_select(n)
        if isinstance(n, Index):
            return self.c_index(n)
        if isinstance(n, ListLit):
            return self.c_list(n)
        if isinstance(n, MapLit):
            return self.c_map(n)
        if isinstance(n, MessageLit):
            total = _fixed(STRUCT_CREATE)
            for _, v in n.fields:
                total = _add(total, self.cost(v))
            return total
        if isinstance(n, Call):
            return self.c_call(n)
        return (0, 0)

    def c_select(self, n: Select) -> Est:
        operand_cost = self.cost(n.operand)
        if n.test_only:
            return operand_cost  # presence tests cost nothing (the API server's PresenceTestHasCost(false))
        t = self.type_of(n.operand)
        total = operand_cost
        if base(t) == "map" or t == DEVICE_T or t in (Q, S):
            total = _add(total, _fixed(1))
        p = self.path(n.operand)
        self.paths[id(n)] = [*(p or []), n.field]
        return total

    def c_index(self, n: Index) -> Est:
        total = _add(_add(self.cost(n.operand), self.cost(n.index)), _fixed(1))
        t = self.type_of(n.operand)
        p = self.path(n.operand) or []
        size: Est | None = None
        kinds = ["list"] if base(t) == "list" else ["map"] if base(t) == "map" else ["list", "map"]
        for kind in kinds:  # the checker lists index_list before index_map
            e = self.entry(n.operand)
            size = e.val if e is not None else None
            self.paths[id(n)] = [*p, "@items" if kind == "list" else "@values"]
            if size is None:
                size = self.size(n)
        if size is not None:
            self.sizes[id(n)] = size
        return total

    def c_list(self, n: ListLit) -> Est:
        total: Est = (0, 0)
        item: Est = (0 if not n.items else U64, 0)
        for x in n.items:
            total = _add(total, self.cost(x))
            item = _union(item, self.size_or_unknown(x))
        self.entries[id(n)] = _Entry("list", _fixed(1), item)
        return _add(total, _fixed(LIST_CREATE))

    def c_map(self, n: MapLit) -> Est:
        total: Est = (0, 0)
        key: Est = (0 if not n.entries else U64, 0)
        val: Est = (0 if not n.entries else U64, 0)
        for k, v in n.entries:
            total = _add(_add(total, self.cost(k)), self.cost(v))
            key = _union(key, self.size_or_unknown(k))
            val = _union(val, self.size_or_unknown(v))
        self.entries[id(n)] = _Entry("map", key, val)
        return _add(total, _fixed(MAP_CREATE))

    # -- calls ---------------------------------------------------------------------------------------------

    def c_call(self, n: Call) -> Est:
        f = n.function
        if f == "has" and n.target is None and len(n.args) == 1 and isinstance(n.args[0], Select):
            return self.cost(n.args[0].operand)  # PresenceTestHasCost(false)
        if f in ("!_", "-_") and len(n.args) == 1:
            # cel-go's parser reads a run of the same unary operator (`!!x`, `- -x`, not `-(-x)`) as
            # the operand (even run) or one operator on it (odd run).
            run, member = 1, n.args[0]
            prev = n
            while (
                isinstance(member, Call)
                and member.function == f
                and len(member.args) == 1
                and not self.source[prev.pos + 1 : member.pos].strip()
            ):
                run, prev, member = run + 1, member, member.args[0]
            if run > 1:
                inner = self.cost(member)
                return inner if run % 2 == 0 else _add(inner, (1, 1))
        macro = f in ("all", "exists", "exists_one", "map", "filter") and n.target is not None
        if macro and n.args and isinstance(n.args[0], Ident):
            return self.c_macro(n)
        if f == "bind" and isinstance(n.target, Ident) and n.target.name == "cel" and len(n.args) == 3:
            return self.c_bind(n)
        if f == "dyn" and n.target is None and len(n.args) == 1:
            c = _add(_fixed(1), self.cost(n.args[0]))
            self._copy_sizes(n, n.args[0])
            return c
        if f.startswith("cel.") or (isinstance(n.target, Ident) and n.target.name in ("sets", "cel")):
            name = f"{n.target.name}.{f}" if isinstance(n.target, Ident) and not f.startswith("cel.") else f
            return self._function(n, name, None, list(n.args))
        return self._function(n, f, n.target, list(n.args))

    def _copy_sizes(self, dst: Node, src: Node) -> None:
        s = self.size(src)
        if s is not None:
            self.sizes[id(dst)] = s
        e = self.entry(src)
        if e is not None:
            self.entries[id(dst)] = e

    def _function(self, n: Node, name: str, target: Node | None, args: list[Node]) -> Est:
        arg_costs = [self.cost(a) for a in args]
        total: Est = (0, 0)
        if target is not None:
            total = self.cost(target)
        arg_sum: Est = (0, 0)
        for c in arg_costs:
            arg_sum = _add(arg_sum, c)
        fn_cost: Est | None = None
        result: Est | None = None
        for variant in self._variants(name, target, args):
            est, rsize = self._variant_cost(n, variant, target, args, arg_costs, arg_sum)
            fn_cost = est if fn_cost is None else _union(fn_cost, est)
            if rsize is not None:
                result = rsize if result is None else _union(result, rsize)
        if result is None:
            result = self.size(n)
        if result is not None:
            self.sizes[id(n)] = result
        return _add(total, fn_cost if fn_cost is not None else (1, 1))

    def _variants(self, name: str, target: Node | None, args: list[Node]) -> list[str]:
        """The overloads of `name` that remain for these argument types, as cost classes."""
        types = [self.type_of(a) for a in args]
        dyn = {"dyn", "any", "error"}

        def could(t: str, *kinds: str) -> bool:
            return t in dyn or base(t) in kinds or t in kinds

        if name == "_+_" and len(args) == 2:
            out = [f"add_{k}" for k in ("string", "bytes", "list") if all(could(t, k) for t in types)]
            if any(t in dyn or (t not in ("string", "bytes") and base(t) != "list") for t in types):
                out.append("plain")
            return out or ["plain"]
        if name in ("_<_", "_<=_", "_>_", "_>=_") and len(args) == 2:
            out = [f"cmp_{k}" for k in ("string", "bytes") if all(could(t, k) for t in types)]
            if not (types[0] in ("string", "bytes") or types[1] in ("string", "bytes")):
                out.append("plain")
            return out or ["plain"]
        if name in ("_==_", "_!=_"):
            return ["equals"]
        if name == "@in" and len(args) == 2:
            t = types[1]
            out = []
            if could(t, "list"):
                out.append("in_list")
            if could(t, "map"):
                out.append("plain")
            return out or ["plain"]
        if name == "matches":
            return ["matches"]
        if name in ("string", "bytes") and target is None and len(args) == 1:
            src = "bytes" if name == "string" else "string"  # the conversion that traverses its input
            return (
                [f"{src}_to_{name}"] + (["plain"] if types[0] != src else [])
                if could(types[0], src)
                else ["plain"]
            )
        if name in ("indexOf", "lastIndexOf") and target is not None:
            return ["list_scan"] if base(self.type_of(target)) == "list" else ["string_scan"]
        return [name]

    def _variant_cost(
        self, n: Node, variant: str, target: Node | None, args: list[Node], arg_costs: list[Est], arg_sum: Est
    ) -> tuple[Est, Est | None]:
        so = self.size_or_unknown
        if variant in ("_&&_", "_||_"):
            lhs, rhs = arg_costs
            return (lhs[0], _add(lhs, rhs)[1]), None
        if variant == "_?_:_":
            size = _union(so(args[1]), so(args[2]))
            e = _union_entry(self.entry(args[1]), self.entry(args[2]))
            if e is not None:
                self.entries[id(n)] = e
            return _add(arg_costs[0], _union(arg_costs[1], arg_costs[2])), size
        if variant in ("add_string", "add_bytes", "add_list"):
            size = _add(so(args[0]), so(args[1]))
            e = _union_entry(self.entry(args[0]), self.entry(args[1]))
            if e is not None:
                self.entries[id(n)] = e
            if variant == "add_list":  # O(1), but the size is tracked
                return _add((1, 1), arg_sum), size
            return _add(_by(size, STRING_TRAVERSAL), arg_sum), size
        if variant == "equals":
            if self._library_unit_equality(n, args):
                return _add((1, 1), arg_sum), None
            return _add(self._compare(args), arg_sum), None
        if variant in ("cmp_string", "cmp_bytes"):
            return _add(self._compare(args), arg_sum), None
        if variant in ("bytes_to_string", "string_to_bytes"):
            sz = so(args[0])
            size = (sz[0] // 4, sz[1]) if variant == "bytes_to_string" else (sz[0], min(U64, sz[1] * 4))
            return _add(_by(sz, STRING_TRAVERSAL), arg_sum), size
        if variant == "in_list":
            return _add(_by(so(args[1]), 1), arg_sum), None
        if variant == "matches":
            if target is not None and len(args) == 1:
                s, r = target, args[0]
            elif target is None and len(args) == 2:
                s, r = args[0], args[1]
            else:
                return _add((1, 1), arg_sum), None
            str_cost = _by(_add(so(s), (1, 1)), STRING_TRAVERSAL)
            return _add(_mul(str_cost, _by(so(r), REGEX_LENGTH)), arg_sum), None
        if variant == "contains" and target is not None and len(args) == 1 and self._stringish(target):
            return _add(
                _mul(_by(so(target), STRING_TRAVERSAL), _by(so(args[0]), STRING_TRAVERSAL)), arg_sum
            ), None
        if variant in ("startsWith", "endsWith") and len(args) == 1:
            return _add(_by(so(args[0]), STRING_TRAVERSAL), arg_sum), None
        lib = self._library(variant, target, args)
        if lib is not None:
            return _add(lib[0], arg_sum), lib[1]
        return _add((1, 1), arg_sum), None

    def _stringish(self, n: Node) -> bool:
        t = self.type_of(n)
        return t in ("string", "bytes", "dyn", "any")

    def _compare(self, args: list[Node]) -> Est:
        """Equality and string/bytes ordering: the smaller maximum size times the traversal factor."""
        lhs, rhs = self.size_or_unknown(args[0]), self.size_or_unknown(args[1])
        smallest = min(lhs[1], rhs[1])
        return _by((1 if smallest > 0 else 0, smallest), STRING_TRAVERSAL)

    def _library_unit_equality(self, n: Node, args: list[Node]) -> bool:
        if not (isinstance(n, Call) and n.function == "_==_" and len(args) == 2):
            return False
        a, b = self.type_of(args[0]), self.type_of(args[1])
        return a == b and a in (Q, S)

    def _library(self, name: str, target: Node | None, args: list[Node]) -> tuple[Est, Est | None] | None:
        """library.CostEstimator.EstimateCallCost (the parts the DRA environment declares)."""
        so = self.size_or_unknown
        if name in ("isSorted", "sum", "max", "min", "list_scan", "includes") and target is not None:
            t = self.type_of(target)
            el: Est = (1, 1)
            if base(t) == "list":
                et = elem_type(t)
                if et in ("string", "bytes"):
                    el = _add(el, _by(self._items_size(target), STRING_TRAVERSAL))
                return _mul(so(target), el), None
            if name == "includes":
                return _mul(so(target), el), None
            return _by(so(target), STRING_TRAVERSAL), None
        if name in ("string_scan",) and target is not None:
            return _by(so(target), STRING_TRAVERSAL), None
        if name in ("lowerAscii", "upperAscii", "substring", "trim") and target is not None:
            sz = so(target)
            return _by(sz, STRING_TRAVERSAL), sz
        if name == "replace" and target is not None and len(args) >= 2:
            sz, old, new = so(target), so(args[0]), so(args[1])
            count = [0, 0]
            kept = [0, 0]
            if old[0] == 0:
                count[1] = sz[1] + 1 if sz[1] < U64 else sz[1]
                kept[1] = sz[1]
            elif new[1] <= old[0]:
                kept[1] = sz[1]
            else:
                count[1] = math.ceil(sz[1] / old[0])
            if old[1] == 0:
                count[0] = sz[0] + 1 if sz[0] < U64 else sz[0]
                kept[0] = sz[0]
            elif old[1] <= new[0]:
                kept[0] = sz[0]
            else:
                count[0] = math.ceil(sz[0] / old[1])
            size = _add(_mul((count[0], count[1]), new), (kept[0], kept[1]))
            return _by(sz, 2 * STRING_TRAVERSAL), size
        if name == "split" and target is not None:
            sz = so(target)
            top = sz[1]
            if len(args) > 1 and isinstance(args[1], Lit) and args[1].kind == "int":
                top = int(args[1].value)
            return _by(sz, 2 * STRING_TRAVERSAL), (0, top)
        if name == "join" and target is not None:
            n_items = so(target)
            joined: Est = (0, 0)
            if base(self.type_of(target)) == "list":
                joined = _mul(n_items, self._items_size(target))
            if args:
                seps = (max(0, n_items[0] - 1), max(0, n_items[1] - 1))
                joined = _add(joined, _mul(so(args[0]), seps))
            return _by(joined, STRING_TRAVERSAL), joined
        if name in ("find", "findAll") and target is not None and args:
            sz = so(target)
            str_cost = _by(_add(sz, (1, 1)), STRING_TRAVERSAL)
            return _mul(str_cost, _by(so(args[0]), REGEX_LENGTH)), (0, sz[1])
        if name in ("sets.contains", "sets.intersects", "sets.equivalent") and len(args) == 2:
            factor = 2.0 if name == "sets.equivalent" else 1.0  # cel-go ext.Sets' estimateSetsCost
            return _add(_by(_mul(so(args[0]), so(args[1])), factor), (1, 1)), None
        if name in ("quantity", "isQuantity", "semver", "isSemver") and args:
            return _by(so(args[0]), STRING_TRAVERSAL), None
        if name in (
            "sign",
            "asInteger",
            "isInteger",
            "asApproximateFloat",
            "isGreaterThan",
            "isLessThan",
            "compareTo",
            "add",
            "sub",
            "major",
            "minor",
            "patch",
        ):
            return (1, 1), None
        return None

    def _items_size(self, list_node: Node) -> Est:
        """The size of a list's elements, by the declaration (listElementNode: path + @items)."""
        p = self.path(list_node)
        got = self._declared_size([*p, "@items"]) if p else None
        return got if got is not None else UNKNOWN

    # -- comprehensions ------------------------------------------------------------------------------------

    def c_macro(self, n: Call) -> Est:
        """cel-go's expansion of all/exists/exists_one/map/filter, costed like costComprehension."""
        assert n.target is not None
        rng = n.target
        var = n.args[0]
        assert isinstance(var, Ident)
        total = self.cost(rng)
        f = n.function
        accu_init = _fixed(LIST_CREATE) if f in ("map", "filter") else (0, 0)
        total = _add(total, accu_init)
        # the iteration variable: path and size of the range's elements (pushIterSingle)
        e = self.entry(rng)
        kind = e.kind if e is not None else ("list" if base(self.type_of(rng)) == "list" else "map")
        size = e.val if (e is not None and kind == "list") else (e.key if e is not None else None)
        p = self.path(rng)
        self.push(var.name, _Local([*(p or []), "@items" if kind == "list" else "@keys"], size, None))
        body = [self.cost(x) for x in n.args[1:]]
        self.pop(var.name)
        if f == "all":
            loop, step = (2, 2), _add((1, 1), body[0])  # @not_strictly_false(r); r && p
            step = (1, step[1])
        elif f == "exists":
            loop, step = (3, 3), _add((1, 1), body[0])  # @not_strictly_false(!r); r || p
            step = (1, step[1])
        elif f == "exists_one":
            loop, step = (0, 0), _add(body[0], (1, 2))  # true; p ? r + 1 : r
        elif f == "map" and len(body) == 1:
            loop, step = (0, 0), _add((12, 12), body[0])  # true; r + [f]
        elif f == "map":
            loop, step = (0, 0), _add(body[0], _union((1, 1), _add((12, 12), body[1])))  # p ? r + [f] : r
        else:  # filter: p ? r + [x] : r
            loop, step = (0, 0), _add(body[0], (1, 13))
        result = (2, 2) if f == "exists_one" else (1, 1)  # r == 1, or r
        total = _add(total, result)
        count = self.size_or_unknown(rng)
        total = _add(total, _mul(count, _add(step, loop)))
        if f in ("all", "exists", "exists_one"):
            self.sizes[id(n)] = (1, 1)
        else:
            self.sizes[id(n)] = count
        return total

    def c_bind(self, n: Call) -> Est:
        var, init, body = n.args
        total = _add(_fixed(LIST_CREATE), self.cost(init))  # the empty iteration range, then the init
        name = var.name if isinstance(var, Ident) else ""
        self.push(name, _Local(self.path(init), self.size(init), self.entry(init)))
        total = _add(total, self.cost(body))
        self.pop(name)
        self._copy_sizes(n, body)
        return total


def estimate(ast: Node, env: Env, types: dict[int, str] | None = None, source: str = "") -> int:
    """The API server's worst-case cost (the estimate's maximum) of a checked selector; `types` are the
    checker's (Compiler.types), `source` the expression text."""
    return _Coster(env, types or {}, source).cost(ast)[1]
