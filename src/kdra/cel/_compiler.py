"""Type-check a parsed CEL expression and compile it into nested Python closures.

Each closure takes the evaluation frame `a`: a[0] is the CelDevice, a[1] the remaining cost budget, and
a[2:] hold comprehension and cel.bind variables (slots assigned at compile time, so no name lookups at
run time). Static types are strings in cel-go's spelling ("int", "list(string)", "map(string, dyn)").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from kdra.cel import _functions as F
from kdra.cel._parser import Call, Ident, Index, ListLit, Lit, MapLit, MessageLit, Node, Select
from kdra.cel._regex import compile_regex
from kdra.cel._values import (
    TYPE_IDENTS,
    CostExceeded,
    EvalError,
    UInt,
    no_such_overload,
)

Fn = Callable[[list[Any]], Any]

DEVICE_T = "kubernetes.DRADevice"
Q = F.Q
S = F.S
DYN = frozenset(("dyn", "any", "error"))  # "error": a subexpression that failed to check
PRIMITIVES = frozenset(("int", "uint", "double", "bool", "string", "bytes", "null_type", "type", Q, S))
NUMERIC = frozenset(("int", "uint", "double"))


_UNSET = object()


def _raise_unchecked(a: list[Any]) -> Any:
    raise EvalError("internal error: expression failed to type-check")


# Constant folding runs at compile time: bound it, and leave anything costlier to the runtime limit.
_FOLD_BUDGET = 100_000


class ProgramError(Exception):
    """cel-go fails Program() (not Compile()) for these: 'program instantiation failed: ...'."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class CheckError(Exception):
    def __init__(self, message: str, pos: int) -> None:
        super().__init__(message)
        self.message = message
        self.pos = pos


def display(t: str) -> str:
    """cel-go's spelling of a static type in messages."""
    out = re.sub(r"\bnull_type\b", "null", t)  # the attribute type `any` is spelled "any"
    return out.replace("error", "!error!") if "error" in out else out


def base(t: str) -> str:
    i = t.find("(")
    return t if i < 0 else t[:i]


def _params(t: str) -> list[str]:
    inner = t[t.find("(") + 1 : -1]
    out: list[str] = []
    depth = 0
    cur = ""
    for ch in inner:
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        cur += ch
    out.append(cur.strip())
    return out


def elem_type(t: str) -> str:
    if t.startswith("list("):
        return _params(t)[0]
    return "dyn"


def key_type(t: str) -> str:
    if t.startswith("map("):
        return _params(t)[0]
    return "dyn"


def value_type(t: str) -> str:
    if t.startswith("map("):
        return _params(t)[1]
    return "dyn"


def join_types(a: str, b: str) -> str:
    if a == b:
        return a
    if a in DYN:
        return a
    if b in DYN:
        return b
    if a == "null_type":
        return b
    if b == "null_type":
        return a
    return "dyn"


def _is_dyn(t: str) -> bool:
    return t in DYN


def _const(v: Any) -> Fn:
    return lambda a: v


class Compiled:
    __slots__ = ("const", "fn", "is_const", "nodes", "plan", "t")

    def __init__(
        self, fn: Fn, t: str, *, is_const: bool = False, const: Any = None, nodes: int = 1, plan: bool = False
    ) -> None:
        self.fn = fn
        self.t = t
        self.is_const = is_const
        self.const = const
        self.nodes = nodes
        # a constant to cel-go's planner too (InterpretableConst): a literal, a list or map literal of
        # such, a type conversion of such. kdra folds more (quantity("1"), 1 + 2), but only these fail
        # at program instantiation when a conversion or a regex of them is invalid.
        self.plan = plan


class Env:
    def __init__(self, consumable_capacity: bool, list_type_attributes: bool, stored: bool = False) -> None:
        # StoredExpressions declares everything the environment ever declared (compile.go, EnvSet)
        self.consumable_capacity = consumable_capacity or stored
        self.list_type_attributes = list_type_attributes
        self.attr_value_t = "dyn" if list_type_attributes else "any"
        self.functions = dict(F.FUNCTIONS)
        if list_type_attributes or stored:
            self.functions.update(F.LIST_TYPE_FUNCTIONS)


class Compiler:
    def __init__(self, env: Env) -> None:
        self.env = env
        self.scopes: list[dict[str, tuple[int, str, Fn | None]]] = []
        self.nslots = 2
        self.errors: list[CheckError] = []
        self.program_error: ProgramError | None = None
        # Static type of every checked node (id(node) -> type): the cost estimate (_cost.py) reads it.
        self.types: dict[int, str] = {}

    # -- helpers ----------------------------------------------------------------------------------------

    def lookup_var(self, name: str) -> tuple[int, str, Fn | None] | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    def new_slot(self) -> int:
        s = self.nslots
        self.nslots += 1
        return s

    @staticmethod
    def fold(fn: Fn, t: str, children: list[Compiled], nodes: int) -> Compiled:
        """Constant-fold when every child is constant; errors stay runtime errors."""
        if children and all(c.is_const for c in children):
            frame: list[Any] = [None, _FOLD_BUDGET]
            try:
                v = fn(frame)
            except EvalError:
                return Compiled(fn, t, nodes=nodes)
            return Compiled(_const(v), t, is_const=True, const=v, nodes=0)
        return Compiled(fn, t, nodes=nodes)

    # -- entry ---------------------------------------------------------------------------------------------

    def compile(self, n: Node) -> Compiled:
        """Check and compile n; a check error is recorded and n becomes error-typed, so that (like
        cel-go's checker) every independent error in the expression is reported."""
        try:
            c = self._compile(n)
            self.types[id(n)] = c.t
            return c
        except CheckError as e:
            self.errors.append(e)
        except ProgramError as e:
            if self.program_error is None:
                self.program_error = e
        return Compiled(_raise_unchecked, "error")

    def report(self, e: CheckError) -> None:
        self.errors.append(e)

    def _compile(self, n: Node) -> Compiled:
        k = type(n)
        if k is Lit:
            return self.c_lit(n)  # type: ignore[arg-type]
        if k is Ident:
            return self.c_ident(n)  # type: ignore[arg-type]
        if k is Select:
            return self.c_select(n)  # type: ignore[arg-type]
        if k is Index:
            return self.c_index(n)  # type: ignore[arg-type]
        if k is Call:
            return self.c_call(n)  # type: ignore[arg-type]
        if k is ListLit:
            return self.c_list(n)  # type: ignore[arg-type]
        if k is MapLit:
            return self.c_map(n)  # type: ignore[arg-type]
        if k is MessageLit:
            assert isinstance(n, MessageLit)
            raise CheckError(f"undeclared reference to '{n.type_name}' (in container '')", n.pos)
        raise CheckError("unsupported expression", n.pos)

    def _unify(self, have: str, got: str, pos: int) -> str:
        try:
            return _unify_elem(have, got, pos)
        except CheckError as e:
            self.report(e)
            return "dyn"

    def c_lit(self, n: Lit) -> Compiled:
        v = n.value
        t = {
            "int": "int",
            "uint": "uint",
            "double": "double",
            "string": "string",
            "bytes": "bytes",
            "bool": "bool",
            "null": "null_type",
        }[n.kind]
        if n.kind == "uint":
            v = UInt(v)
        return Compiled(_const(v), t, is_const=True, const=v, nodes=0, plan=True)

    def c_ident(self, n: Ident) -> Compiled:
        var = self.lookup_var(n.name)
        if var is not None:
            slot, t, init = var
            if init is None:
                return Compiled(lambda a: a[slot], t)

            def lazy(a: list[Any]) -> Any:
                # cel.bind evaluates its initializer on first use (cel-go: unused bindings never fail)
                v = a[slot]
                if v is _UNSET:
                    v = a[slot] = init(a)
                return v

            return Compiled(lazy, t)
        if n.name == "device":
            return Compiled(lambda a: a[0], DEVICE_T)
        if n.name in TYPE_IDENTS:
            v = TYPE_IDENTS[n.name]
            return Compiled(_const(v), f"type({n.name})", is_const=True, const=v, nodes=0, plan=True)
        if n.name in ("kubernetes.Quantity", "kubernetes.Semver"):
            pass
        raise CheckError(f"undeclared reference to '{n.name}' (in container '')", n.pos)

    # -- field selection -------------------------------------------------------------------------------

    def c_select(self, n: Select) -> Compiled:
        operand = n.operand
        # device.<field>
        if isinstance(operand, Ident) and operand.name == "device" and self.lookup_var("device") is None:
            return self._device_field(n)
        # device.attributes[<const>].<id> / device.capacity[<const>].<id>: one closure
        if (
            isinstance(operand, Index)
            and isinstance(operand.operand, Select)
            and isinstance(operand.operand.operand, Ident)
            and operand.operand.operand.name == "device"
            and self.lookup_var("device") is None
            and operand.operand.field in ("attributes", "capacity")
            and isinstance(operand.index, Lit)
            and operand.index.kind == "string"
        ):
            which = operand.operand.field
            dom = operand.index.value
            fld = n.field
            msg = f"no such key: {fld}"
            if which == "attributes":
                t = self.env.attr_value_t

                def sel_attr(a: list[Any]) -> Any:
                    m = a[0].attributes.get(dom)
                    if m is not None:
                        try:
                            return m[fld]
                        except KeyError:
                            pass
                    raise EvalError(msg)

                return Compiled(sel_attr, t, nodes=3)

            def sel_cap(a: list[Any]) -> Any:
                m = a[0].capacity.get(dom)
                if m is not None:
                    try:
                        return m[fld]
                    except KeyError:
                        pass
                raise EvalError(msg)

            return Compiled(sel_cap, Q, nodes=3)

        c = self.compile(operand)
        t = c.t
        f = c.fn
        fld = n.field
        if t == DEVICE_T:
            return self._device_field_of(c, fld, n.pos)
        if base(t) == "map" or t in DYN:
            rt = value_type(t) if base(t) == "map" else "dyn"
            if t == "any":
                rt = "dyn"
            msg = f"no such key: {fld}"

            def sel(a: list[Any]) -> Any:
                m = f(a)
                if isinstance(m, dict):
                    try:
                        return m[fld]
                    except KeyError:
                        raise EvalError(msg) from None
                raise no_such_overload()

            return self.fold(sel, rt, [c], c.nodes + 1)
        raise CheckError(f"type '{t}' does not support field selection", n.pos)

    def _device_field(self, n: Select) -> Compiled:
        fld = n.field
        if fld == "driver":
            return Compiled(lambda a: a[0].driver, "string")
        if fld == "attributes":
            return Compiled(lambda a: a[0].attributes, f"map(string, map(string, {self.env.attr_value_t}))")
        if fld == "capacity":
            return Compiled(lambda a: a[0].capacity, f"map(string, map(string, {Q}))")
        if fld == "allowMultipleAllocations" and self.env.consumable_capacity:
            return Compiled(lambda a: a[0].allow_multiple_allocations, "bool")
        raise CheckError(f"undefined field '{fld}'", n.pos)

    def _device_field_of(self, c: Compiled, fld: str, pos: int) -> Compiled:
        f = c.fn
        if fld == "driver":
            return Compiled(lambda a: f(a).driver, "string")
        if fld == "attributes":
            return Compiled(lambda a: f(a).attributes, f"map(string, map(string, {self.env.attr_value_t}))")
        if fld == "capacity":
            return Compiled(lambda a: f(a).capacity, f"map(string, map(string, {Q}))")
        if fld == "allowMultipleAllocations" and self.env.consumable_capacity:
            return Compiled(lambda a: f(a).allow_multiple_allocations, "bool")
        raise CheckError(f"undefined field '{fld}'", pos)

    def c_has(self, n: Call) -> Compiled:
        if len(n.args) != 1 or not isinstance(n.args[0], Select):
            raise CheckError("invalid argument to has() macro", n.args[0].pos if n.args else n.pos)
        sel = n.args[0]
        c = self.compile(sel.operand)
        f = c.fn
        fld = sel.field
        t = c.t
        if t == DEVICE_T:
            if fld in ("driver", "attributes", "capacity") or (
                fld == "allowMultipleAllocations" and self.env.consumable_capacity
            ):
                return Compiled(lambda a: (f(a), True)[1], "bool", nodes=c.nodes + 1)
            raise CheckError(f"undefined field '{fld}'", n.pos)
        if not (base(t) == "map" or t in DYN):
            raise CheckError(f"type '{t}' does not support field selection", sel.pos)
        from kdra.cel._device import AttributeMap, DomainMap

        def has(a: list[Any]) -> bool:
            m = f(a)
            if isinstance(m, dict):
                if type(m) is DomainMap:
                    return True  # compile.go mapper.Find reports every domain as present
                if type(m) is AttributeMap:
                    return m.has(fld)
                return fld in m
            raise no_such_overload()

        return self.fold(has, "bool", [c], c.nodes + 1)

    # -- indexing --------------------------------------------------------------------------------------

    def c_index(self, n: Index) -> Compiled:
        c = self.compile(n.operand)
        i = self.compile(n.index)
        t = c.t
        it = i.t
        f = c.fn
        g = i.fn
        bt = base(t)
        if bt == "list":
            if not (_is_dyn(it) or it == "int"):
                raise CheckError(
                    f"found no matching overload for '_[_]' applied to '({display(t)}, {display(it)})'", n.pos
                )
            rt = elem_type(t)
        elif bt == "map":
            kt = key_type(t)
            if not (_is_dyn(it) or _is_dyn(kt) or it == kt):
                raise CheckError(
                    f"found no matching overload for '_[_]' applied to '({display(t)}, {display(it)})'", n.pos
                )
            rt = value_type(t)
        elif t in DYN:
            rt = "dyn"
        else:
            raise CheckError(
                f"found no matching overload for '_[_]' applied to '({display(t)}, {display(it)})'", n.pos
            )

        if i.is_const and type(i.const) is str and bt == "map":
            key = i.const
            msg = f"no such key: {key}"

            def idx_const(a: list[Any]) -> Any:
                m = f(a)
                try:
                    return m[key]
                except KeyError:
                    raise EvalError(msg) from None
                except TypeError:
                    raise no_such_overload() from None

            return self.fold(idx_const, rt, [c, i], c.nodes + 1)

        def idx(a: list[Any]) -> Any:
            return index_value(f(a), g(a))

        return self.fold(idx, rt, [c, i], c.nodes + i.nodes + 1)

    # -- literals ----------------------------------------------------------------------------------------

    def c_list(self, n: ListLit) -> Compiled:
        items = [self.compile(x) for x in n.items]
        et = "dyn"
        if items:
            # the Kubernetes environment type-checks aggregate literals as homogeneous
            et = items[0].t
            for node, it in zip(n.items[1:], items[1:], strict=True):
                et = self._unify(et, it.t, node.pos)
        fns = [x.fn for x in items]
        nodes = sum(x.nodes for x in items) + 1
        if all(x.is_const for x in items):
            v = [x.const for x in items]
            plan = all(x.plan for x in items)
            return Compiled(lambda a: v, f"list({et})", is_const=True, const=v, nodes=0, plan=plan)

        def mk(a: list[Any]) -> list[Any]:
            return [fn(a) for fn in fns]

        return Compiled(mk, f"list({et})", nodes=nodes)

    def c_map(self, n: MapLit) -> Compiled:
        entries = [(self.compile(k), self.compile(v)) for k, v in n.entries]
        kt = vt = "dyn"
        for idx, (k, v) in enumerate(entries):
            if not (_is_dyn(k.t) or k.t in ("int", "uint", "bool", "string")):
                raise CheckError(f"unsupported map key type: {display(k.t)}", n.entries[idx][0].pos)
            if idx == 0:
                kt, vt = k.t, v.t
            else:
                kt = self._unify(kt, k.t, n.entries[idx][0].pos)
                vt = self._unify(vt, v.t, n.entries[idx][1].pos)
        pairs = [(k.fn, v.fn) for k, v in entries]

        def mk(a: list[Any]) -> dict[Any, Any]:
            out: dict[Any, Any] = {}
            for kf, vf in pairs:
                key = kf(a)
                tk = type(key)
                if not (tk is str or tk is int or tk is UInt or tk is bool):
                    raise EvalError(f"unsupported key type: {F.type_of(key).name}")
                out[key] = vf(a)  # cel-go keeps the last value of a repeated key
            return out

        children = [x for kv in entries for x in kv]
        folded = self.fold(mk, f"map({kt}, {vt})", children, sum(x.nodes for x in children) + 1)
        folded.plan = folded.is_const and all(x.plan for x in children)
        return folded

    # -- calls -------------------------------------------------------------------------------------------

    def c_call(self, n: Call) -> Compiled:
        name = n.function
        target = n.target
        if target is None:
            if name == "has":
                return self.c_has(n)
            op = _OPERATORS.get(name)
            if op is not None:
                return op(self, n)
        else:
            if (
                isinstance(target, Ident)
                and target.name in ("cel", "sets")
                and self.lookup_var(target.name) is None
            ):
                if target.name == "cel" and name == "bind" and len(n.args) == 3:
                    return self.c_bind(n)
                full = f"{target.name}.{name}"
                if full in self.env.functions:
                    return self.c_function(n, full, None)
                raise CheckError(f"undeclared reference to '{full}' (in container '')", n.pos)
            if name in _MACROS and len(n.args) in _MACROS[name]:
                return self.c_comprehension(n)
        if name not in self.env.functions:
            raise CheckError(f"undeclared reference to '{name}' (in container '')", n.pos)
        return self.c_function(n, name, target)

    def c_function(self, n: Call, name: str, target: Node | None) -> Compiled:
        args = [self.compile(x) for x in n.args]
        member = target is not None
        if target is not None:
            args.insert(0, self.compile(target))
        types = [x.t for x in args]
        cands: list[F.Overload] = []
        for ov in self.env.functions[name]:
            if ov.member != member or len(ov.params) != len(args):
                continue
            if all(_matches(p, t) for p, t in zip(ov.params, types, strict=True)):
                cands.append(ov)
        if (
            name.startswith("sets.")
            and cands
            and not (_is_dyn(types[0]) or _is_dyn(types[1]) or _compatible(types[0], types[1]))
        ):
            cands = []  # sets.*(list(A), list(A))
        if not cands:
            shown = [display(t) for t in types]
            sig = f"{shown[0]}.({', '.join(shown[1:])})" if member else f"({', '.join(shown)})"
            raise CheckError(f"found no matching overload for '{name}' applied to '{sig}'", n.pos)
        rts = {_result_type(ov, types) for ov in cands}
        rt = rts.pop() if len(rts) == 1 else "dyn"
        if name == "type":
            rt = f"type({types[0]})"
        if name == "matches" and args[-1].plan and type(args[-1].const) is str:
            try:  # cel-go checks literal patterns at compile time and constant ones when planning
                compile_regex(args[-1].const)
            except EvalError as e:
                if isinstance(n.args[-1], Lit):
                    raise CheckError("invalid matches argument", n.args[-1].pos) from None
                if self.program_error is None:
                    self.program_error = ProgramError(e.message)
        fns = [x.fn for x in args]
        nodes = sum(x.nodes for x in args) + 1
        if len(cands) == 1 or _same_impl(cands):
            ov = cands[0]
            impl = ov.impl
            plain = _UNGUARDED.get(name)
            if name in ("find", "findAll") and not args[1].plan:
                plain = None  # only a constant pattern takes the regex optimizer's unguarded binding
            elif name == "matches" and not args[-1].plan:
                plain = "@matches"  # a receiver that is no traits.Matcher: "no such overload: matches"
            fn = _guarded(name, cands, types, _bind_call(impl, fns, ov.frame), fns, plain)
        else:
            fn = _dispatch_call(name, cands, fns)
        if name in _CONVERSIONS and all(x.plan for x in args):
            # cel-go evaluates conversions of constants while planning the program
            try:
                v = fn([None, _FOLD_BUDGET])
            except EvalError as e:
                if self.program_error is None:
                    self.program_error = ProgramError(e.message)
                return Compiled(fn, rt, nodes=nodes)
            return Compiled(_const(v), rt, is_const=True, const=v, nodes=0, plan=True)
        return self.fold(fn, rt, args, nodes)

    # -- macros --------------------------------------------------------------------------------------------

    def c_bind(self, n: Call) -> Compiled:
        var, init, body = n.args
        if not isinstance(var, Ident):
            raise CheckError("cel.bind() variable names must be simple identifiers", var.pos)
        ci = self.compile(init)
        slot = self.new_slot()
        self.scopes.append({var.name: (slot, ci.t, ci.fn)})
        try:
            cb = self.compile(body)
        finally:
            self.scopes.pop()
        fi = ci.fn
        fb = cb.fn

        del fi

        def bind(a: list[Any]) -> Any:
            a[slot] = _UNSET
            return fb(a)

        return Compiled(bind, cb.t, nodes=ci.nodes + cb.nodes + 1)

    def c_comprehension(self, n: Call) -> Compiled:
        name = n.function
        assert n.target is not None
        rng = self.compile(n.target)
        var = n.args[0]
        if not isinstance(var, Ident):
            raise CheckError("argument must be a simple name", var.pos)
        rt = rng.t
        if base(rt) == "list":
            vt = elem_type(rt)
        elif base(rt) == "map":
            vt = key_type(rt)
        elif rt == "dyn":
            vt = "dyn"
        else:
            raise CheckError(
                f"expression of type '{rt}' cannot be range of a comprehension "
                "(must be list, map, or dynamic)",
                n.target.pos,
            )
        if vt == "any":
            vt = "dyn"
        slot = self.new_slot()
        self.scopes.append({var.name: (slot, vt, None)})
        try:
            bodies = [self.compile(x) for x in n.args[1:]]
        finally:
            self.scopes.pop()
        step = 3 + sum(b.nodes for b in bodies)  # cel-go: loop condition + accumulator step + body
        frng = rng.fn
        if name in ("all", "exists", "exists_one", "filter") or (name == "map" and len(bodies) == 2):
            pt = bodies[0].t
            if not (pt == "bool" or pt in DYN):
                raise CheckError(
                    f"expected type 'bool' but found '{display(pt)}'"
                    if name in ("all", "exists")
                    else f"found no matching overload for '_?_:_' applied to '({display(pt)}, int, int)'",
                    n.args[1].pos,
                )
        pred = bodies[0].fn
        nodes = rng.nodes + step + 1

        def items(a: list[Any]) -> Any:
            r = frng(a)
            tr = type(r)
            if tr is list or tr is tuple:
                return r
            if isinstance(r, dict):
                return list(r)
            raise EvalError(f"got '{F.go_type_name(r)}', expected iterable type")

        if name == "all":

            def all_(a: list[Any]) -> bool:
                err: EvalError | None = None
                for v in items(a):
                    b = a[1] - step
                    a[1] = b
                    if b < 0:
                        raise CostExceeded(F.COST_LIMIT_MESSAGE)
                    a[slot] = v
                    try:
                        r = pred(a)
                    except CostExceeded:
                        raise
                    except EvalError as e:
                        err = err or e
                        continue
                    if r is False:
                        return False
                    if r is not True:
                        err = err or no_such_overload()
                if err is not None:
                    raise err
                return True

            return Compiled(all_, "bool", nodes=nodes)
        if name == "exists":

            def exists(a: list[Any]) -> bool:
                err: EvalError | None = None
                for v in items(a):
                    b = a[1] - step
                    a[1] = b
                    if b < 0:
                        raise CostExceeded(F.COST_LIMIT_MESSAGE)
                    a[slot] = v
                    try:
                        r = pred(a)
                    except CostExceeded:
                        raise
                    except EvalError as e:
                        err = err or e
                        continue
                    if r is True:
                        return True
                    if r is not False:
                        err = err or no_such_overload()
                if err is not None:
                    raise err
                return False

            return Compiled(exists, "bool", nodes=nodes)
        if name == "exists_one":

            def exists_one(a: list[Any]) -> bool:
                count = 0
                for v in items(a):
                    b = a[1] - step
                    a[1] = b
                    if b < 0:
                        raise CostExceeded(F.COST_LIMIT_MESSAGE)
                    a[slot] = v
                    r = pred(a)
                    if r is True:
                        count += 1
                    elif r is not False:
                        raise no_such_overload()
                return count == 1

            return Compiled(exists_one, "bool", nodes=nodes)
        if name == "filter":

            def filter_(a: list[Any]) -> list[Any]:
                out = []
                for v in items(a):
                    b = a[1] - step
                    a[1] = b
                    if b < 0:
                        raise CostExceeded(F.COST_LIMIT_MESSAGE)
                    a[slot] = v
                    r = pred(a)
                    if r is True:
                        out.append(v)
                    elif r is not False:
                        raise no_such_overload()
                return out

            return Compiled(filter_, f"list({vt})", nodes=nodes)
        # map
        if len(bodies) == 1:
            tf = pred

            def map_(a: list[Any]) -> list[Any]:
                out = []
                for v in items(a):
                    b = a[1] - step
                    a[1] = b
                    if b < 0:
                        raise CostExceeded(F.COST_LIMIT_MESSAGE)
                    a[slot] = v
                    out.append(tf(a))
                return out

            return Compiled(map_, f"list({_undyn(bodies[0].t)})", nodes=nodes)
        tf = bodies[1].fn

        def map_filter(a: list[Any]) -> list[Any]:
            out = []
            for v in items(a):
                b = a[1] - step
                a[1] = b
                if b < 0:
                    raise CostExceeded(F.COST_LIMIT_MESSAGE)
                a[slot] = v
                r = pred(a)
                if r is True:
                    out.append(tf(a))
                elif r is not False:
                    raise no_such_overload()
            return out

        return Compiled(map_filter, f"list({_undyn(bodies[1].t)})", nodes=nodes)

    # -- operators -------------------------------------------------------------------------------------

    def c_and_or(self, n: Call) -> Compiled:
        lc = self.compile(n.args[0])
        rc = self.compile(n.args[1])
        is_and = n.function == "_&&_"
        for c, node in ((lc, n.args[0]), (rc, n.args[1])):
            if not (c.t == "bool" or c.t in DYN):
                raise CheckError(f"expected type 'bool' but found '{display(c.t)}'", node.pos)
        lf = lc.fn
        rf = rc.fn
        nodes = lc.nodes + rc.nodes + 1
        if is_and:

            def and_(a: list[Any]) -> Any:
                try:
                    x = lf(a)
                except CostExceeded:
                    raise
                except EvalError as e:
                    x = e
                if x is False:
                    return False
                try:
                    y = rf(a)
                except CostExceeded:
                    raise
                except EvalError as e:
                    y = e
                if y is False:
                    return False
                if x is True and y is True:
                    return True
                if isinstance(x, EvalError):
                    raise x
                if x is not True:
                    raise no_such_overload()
                if isinstance(y, EvalError):
                    raise y
                raise no_such_overload()

            return self.fold(and_, "bool", [lc, rc], nodes)

        def or_(a: list[Any]) -> Any:
            try:
                x = lf(a)
            except CostExceeded:
                raise
            except EvalError as e:
                x = e
            if x is True:
                return True
            try:
                y = rf(a)
            except CostExceeded:
                raise
            except EvalError as e:
                y = e
            if y is True:
                return True
            if x is False and y is False:
                return False
            if isinstance(x, EvalError):
                raise x
            if x is not False:
                raise no_such_overload()
            if isinstance(y, EvalError):
                raise y
            raise no_such_overload()

        return self.fold(or_, "bool", [lc, rc], nodes)

    def c_not(self, n: Call) -> Compiled:
        c = self.compile(n.args[0])
        if not (c.t == "bool" or c.t in DYN):
            raise CheckError(f"found no matching overload for '!_' applied to '({c.t})'", n.pos)
        f = c.fn

        def not_(a: list[Any]) -> bool:
            x = f(a)
            if x is True:
                return False
            if x is False:
                return True
            raise no_such_overload()

        return self.fold(not_, "bool", [c], c.nodes + 1)

    def c_neg(self, n: Call) -> Compiled:
        c = self.compile(n.args[0])
        if not (c.t in ("int", "double") or c.t in DYN):
            raise CheckError(f"found no matching overload for '-_' applied to '({c.t})'", n.pos)
        f = c.fn
        return self.fold(lambda a: F.neg(f(a)), c.t if c.t in ("int", "double") else "dyn", [c], c.nodes + 1)

    def c_cond(self, n: Call) -> Compiled:
        cc = self.compile(n.args[0])
        tc = self.compile(n.args[1])
        ec = self.compile(n.args[2])
        if not (cc.t == "bool" or cc.t in DYN):
            raise CheckError(
                f"found no matching overload for '_?_:_' applied to '({cc.t}, {tc.t}, {ec.t})'", n.pos
            )
        cf, tf, ef = cc.fn, tc.fn, ec.fn

        def cond(a: list[Any]) -> Any:
            x = cf(a)
            if x is True:
                return tf(a)
            if x is False:
                return ef(a)
            raise no_such_overload()

        rt = join_types(tc.t, ec.t)
        if (
            tc.t != ec.t
            and not (_is_dyn(tc.t) or _is_dyn(ec.t))
            and "null_type" not in (tc.t, ec.t)
            and not _compatible(tc.t, ec.t)
        ):
            raise CheckError(
                f"found no matching overload for '_?_:_' applied to '({cc.t}, {tc.t}, {ec.t})'", n.pos
            )
        if cc.is_const and cc.const in (True, False) and type(cc.const) is bool:
            # the branch taken, typed as the whole conditional (cel-go: (Semver, any) is dyn); never a
            # planner constant, cel-go does not fold conditionals
            b = tc if cc.const else ec
            return Compiled(b.fn, rt, is_const=b.is_const, const=b.const, nodes=b.nodes)
        return Compiled(cond, rt, nodes=cc.nodes + tc.nodes + ec.nodes + 1)

    def c_eq(self, n: Call) -> Compiled:
        lc = self.compile(n.args[0])
        rc = self.compile(n.args[1])
        _check_same(n, lc.t, rc.t)
        lf, rf = lc.fn, rc.fn
        nodes = lc.nodes + rc.nodes + 1
        ne = n.function == "_!=_"
        if rc.is_const and type(rc.const) in (str, int, bool):
            c = rc.const
            tcv = type(c)
            if ne:

                def ne_c(a: list[Any]) -> bool:
                    x = lf(a)
                    if type(x) is tcv:
                        return bool(x != c)
                    return F.cel_ne(x, c)

                return self.fold(ne_c, "bool", [lc, rc], nodes)

            def eq_c(a: list[Any]) -> bool:
                x = lf(a)
                if type(x) is tcv:
                    return bool(x == c)
                return F.cel_eq(x, c)

            return self.fold(eq_c, "bool", [lc, rc], nodes)
        if ne:
            return self.fold(lambda a: F.cel_ne(lf(a), rf(a)), "bool", [lc, rc], nodes)
        return self.fold(lambda a: F.cel_eq(lf(a), rf(a)), "bool", [lc, rc], nodes)

    def c_rel(self, n: Call) -> Compiled:
        lc = self.compile(n.args[0])
        rc = self.compile(n.args[1])
        lt_, rt_ = lc.t, rc.t
        if not (_is_dyn(lt_) or _is_dyn(rt_)):
            ok = (lt_ == rt_ and lt_ in ("int", "uint", "double", "string", "bytes", "bool")) or (
                lt_ in NUMERIC and rt_ in NUMERIC
            )
            if not ok:
                raise CheckError(
                    f"found no matching overload for '{n.function}' applied to '({lt_}, {rt_})'", n.pos
                )
        elif not (_is_dyn(lt_) or lt_ in ("int", "uint", "double", "string", "bytes", "bool")) or not (
            _is_dyn(rt_) or rt_ in ("int", "uint", "double", "string", "bytes", "bool")
        ):
            raise CheckError(
                f"found no matching overload for '{n.function}' applied to '({lt_}, {rt_})'", n.pos
            )
        lf, rf = lc.fn, rc.fn
        nodes = lc.nodes + rc.nodes + 1
        op = n.function
        if rc.is_const and type(rc.const) is int:
            c = rc.const
            fast: Fn
            if op == "_>=_":

                def fast(a: list[Any]) -> bool:
                    x = lf(a)
                    return x >= c if type(x) is int else F.ge(x, c)

            elif op == "_>_":

                def fast(a: list[Any]) -> bool:
                    x = lf(a)
                    return x > c if type(x) is int else F.gt(x, c)

            elif op == "_<=_":

                def fast(a: list[Any]) -> bool:
                    x = lf(a)
                    return x <= c if type(x) is int else F.le(x, c)

            else:

                def fast(a: list[Any]) -> bool:
                    x = lf(a)
                    return x < c if type(x) is int else F.lt(x, c)

            return self.fold(fast, "bool", [lc, rc], nodes)
        impl = {"_<_": F.lt, "_<=_": F.le, "_>_": F.gt, "_>=_": F.ge}[op]
        return self.fold(lambda a: impl(lf(a), rf(a)), "bool", [lc, rc], nodes)

    def c_arith(self, n: Call) -> Compiled:
        lc = self.compile(n.args[0])
        rc = self.compile(n.args[1])
        lt_, rt_ = lc.t, rc.t
        op = n.function
        allowed = {
            "_+_": ("int", "uint", "double", "string", "bytes", "list"),
            "_-_": ("int", "uint", "double"),
            "_*_": ("int", "uint", "double"),
            "_/_": ("int", "uint", "double"),
            "_%_": ("int", "uint"),
        }[op]
        rt = "dyn"
        if not (_is_dyn(lt_) or _is_dyn(rt_)):
            if base(lt_) != base(rt_) or base(lt_) not in allowed or not _compatible(lt_, rt_):
                raise CheckError(f"found no matching overload for '{op}' applied to '({lt_}, {rt_})'", n.pos)
            rt = lt_ if lt_ == rt_ else f"list({join_types(elem_type(lt_), elem_type(rt_))})"
        else:
            for t in (lt_, rt_):
                if not (_is_dyn(t) or base(t) in allowed):
                    raise CheckError(
                        f"found no matching overload for '{op}' applied to '({lt_}, {rt_})'", n.pos
                    )
            rt = rt_ if _is_dyn(lt_) else lt_
            if rt == "any":
                rt = "dyn"
        lf, rf = lc.fn, rc.fn
        nodes = lc.nodes + rc.nodes + 1
        fn: Fn
        if op == "_+_":
            fn = lambda a: F.add(a, lf(a), rf(a))  # noqa: E731
        else:
            impl = {"_-_": F.sub, "_*_": F.mul, "_/_": F.div, "_%_": F.mod}[op]
            fn = lambda a: impl(lf(a), rf(a))  # noqa: E731
        return self.fold(fn, rt, [lc, rc], nodes)

    def c_in(self, n: Call) -> Compiled:
        lc = self.compile(n.args[0])
        rc = self.compile(n.args[1])
        ct = rc.t
        bt = base(ct)
        if bt == "list":
            et = elem_type(ct)
            if not (_is_dyn(et) or _is_dyn(lc.t) or et == lc.t):
                raise CheckError(f"found no matching overload for '@in' applied to '({lc.t}, {ct})'", n.pos)
        elif bt == "map":
            kt = key_type(ct)
            if not (_is_dyn(kt) or _is_dyn(lc.t) or kt == lc.t):
                raise CheckError(f"found no matching overload for '@in' applied to '({lc.t}, {ct})'", n.pos)
        elif ct not in DYN:
            raise CheckError(f"found no matching overload for '@in' applied to '({lc.t}, {ct})'", n.pos)
        lf, rf = lc.fn, rc.fn
        if bt == "list" and rc.plan:
            members = _set_membership(rc.const)
            if members is not None:
                if not members:  # cel-go: `x in []` is the constant false, x is never evaluated
                    return Compiled(_const(False), "bool", is_const=True, const=False, nodes=0, plan=True)

                def in_set(a: list[Any]) -> bool:
                    F.charge(a, len(rc.const) // 10)
                    return _member_key(lf(a)) in members

                return self.fold(in_set, "bool", [lc, rc], lc.nodes + 1)
        if bt == "map" and lc.is_const and type(lc.const) is str:
            key = lc.const

            def in_map(a: list[Any]) -> bool:
                m = rf(a)
                if isinstance(m, dict):
                    return key in m
                raise no_such_overload()

            return self.fold(in_map, "bool", [lc, rc], rc.nodes + 1)
        return self.fold(lambda a: F.in_(a, lf(a), rf(a)), "bool", [lc, rc], lc.nodes + rc.nodes + 1)


_NO_KEY = ("nan",)


def _member_key(v: Any) -> Any:
    """The key cel-go's evalSetMembership looks a value up by (a Go map of ref.Val: type and value)."""
    tv = type(v)
    if tv is float:
        return ("d", v) if v == v else _NO_KEY
    if tv is UInt:
        return ("u", int(v))
    if tv is int:
        return ("i", v)
    if tv is bool or tv is str:
        return (tv.__name__, v)
    return _NO_KEY


def _set_membership(items: list[Any]) -> set[Any] | None:
    """cel-go maybeOptimizeSetMembership: `x in <constant list>` of primitives (not bytes) becomes a
    lookup in a set that also holds each number's lossless int/uint/double conversions (an int's
    double conversion even when lossy); None when the list holds anything else."""
    out: set[Any] = set()
    for v in items:
        tv = type(v)
        if tv is bool or tv is str:
            out.add((tv.__name__, v))
        elif tv is float:
            out.add(("d", v) if v == v else ("nan-member",))
            if v == v and v not in (float("inf"), float("-inf")) and v == int(v):
                if -(2**63) <= int(v) < 2**63:
                    out.add(("i", int(v)))
                if 0 <= int(v) < 2**64:
                    out.add(("u", int(v)))
        elif tv is UInt:
            out.add(("u", int(v)))
            out.add(("d", float(v)))
            if v < 2**63:
                out.add(("i", int(v)))
        elif tv is int:
            out.add(("i", v))
            out.add(("d", float(v)))
            if v >= 0:
                out.add(("u", v))
        else:
            return None
    return out


# overloads.IsTypeConversionFunction (the ones this environment declares)
_CONVERSIONS = frozenset(("int", "uint", "double", "string", "bytes", "bool", "dyn", "type"))

_MACROS: dict[str, tuple[int, ...]] = {
    "all": (2,),
    "exists": (2,),
    "exists_one": (2,),
    "filter": (2,),
    "map": (2, 3),
}

_OPERATORS: dict[str, Callable[[Compiler, Call], Compiled]] = {
    "_&&_": Compiler.c_and_or,
    "_||_": Compiler.c_and_or,
    "!_": Compiler.c_not,
    "-_": Compiler.c_neg,
    "_?_:_": Compiler.c_cond,
    "_==_": Compiler.c_eq,
    "_!=_": Compiler.c_eq,
    "_<_": Compiler.c_rel,
    "_<=_": Compiler.c_rel,
    "_>_": Compiler.c_rel,
    "_>=_": Compiler.c_rel,
    "_+_": Compiler.c_arith,
    "_-_": Compiler.c_arith,
    "_*_": Compiler.c_arith,
    "_/_": Compiler.c_arith,
    "_%_": Compiler.c_arith,
    "@in": Compiler.c_in,
}


def _compatible(a: str, b: str) -> bool:
    if a == b:
        return True
    ba, bb = base(a), base(b)
    if ba != bb or ba not in ("list", "map"):
        return False
    pairs = zip(_params(a), _params(b), strict=False)
    return all(x == y or x == "dyn" or y == "dyn" or _compatible(x, y) for x, y in pairs)


def _unify_elem(have: str, got: str, pos: int) -> str:
    if _compatible(have, got):
        return got if "dyn" in have and "dyn" not in got else have
    raise CheckError(f"expected type '{display(have)}' but found '{display(got)}'", pos)


def _undyn(t: str) -> str:
    return "dyn" if t == "any" else t


_NULLABLE = frozenset(("null_type", Q, S, DEVICE_T))  # cel-go isLegacyNullable: opaque and struct types


def _assignable(a: str, b: str) -> bool:
    """cel-go's internalIsAssignable for the operands of == and != (type parameter A bound to a)."""
    if _is_dyn(a) or _is_dyn(b):
        return True
    if a == "null_type":
        return b in _NULLABLE
    if b == "null_type":
        return a in _NULLABLE
    ba, bb = base(a), base(b)
    if ba in ("list", "map"):
        pa, pb = _params(a), _params(b)
        return ba == bb and len(pa) == len(pb) and all(_assignable(x, y) for x, y in zip(pa, pb, strict=True))
    if ba == "type":
        return bb == "type"
    return a == b


def _check_same(n: Call, a: str, b: str) -> None:
    if not _assignable(a, b):
        raise CheckError(f"found no matching overload for '{n.function}' applied to '({a}, {b})'", n.pos)


def _matches(param: str, t: str) -> bool:
    if param == "dyn" or t in DYN:
        return True
    return param == base(t)


def _result_type(ov: F.Overload, types: list[str]) -> str:
    if ov.result == "@elem":
        return _undyn(elem_type(types[0]))
    return ov.result


def _same_impl(cands: list[F.Overload]) -> bool:
    first = cands[0]
    return all(c.impl is first.impl and c.frame == first.frame for c in cands)


# Functions whose bindings run without cel-go's runtime type guard (the standard library's, and the
# Kubernetes regex library's): a wrong dynamic argument fails with the implementation's own error.
_UNGUARDED = {
    "startsWith": "no such overload",
    "endsWith": "no such overload",
    "contains": "no such overload",
    "matches": "no such overload",
    "find": "no such overload",
    "findAll": "no such overload",
    "size": "no such overload: size",
}


def _guarded(
    name: str, cands: list[F.Overload], static: list[str], fn: Fn, fns: list[Fn], plain: str | None = None
) -> Fn:
    """cel-go guards overload bindings with a runtime signature check when arguments are dynamic:
    a mismatch is 'no such overload: name(type, ...)' with the runtime type names. The check only
    runs when the implementation rejects its arguments, so the common path pays nothing."""
    if not any(t in DYN for t in static):
        return fn
    sigs = [tuple(F.RUNTIME_CHECK.get(p, F.RUNTIME_CHECK["dyn"]) for p in ov.params) for ov in cands]
    impl = cands[0].impl
    frame = cands[0].frame

    def detail(vals: list[Any], e: EvalError) -> EvalError:
        if e.message == "no such overload" and not any(
            all(ck(v) for ck, v in zip(sig, vals, strict=True)) for sig in sigs
        ):
            if plain == "@matches":
                return EvalError("no such overload" + ("" if type(vals[0]) is str else ": matches"))
            if plain is not None:
                return EvalError(plain)
            return EvalError(f"no such overload: {name}({', '.join(F.runtime_type_name(v) for v in vals)})")
        return e

    if len(fns) == 2 and not frame:
        f0, f1 = fns

        def guarded2(a: list[Any]) -> Any:
            x = f0(a)
            y = f1(a)
            try:
                return impl(x, y)
            except CostExceeded:
                raise
            except EvalError as e:
                raise detail([x, y], e) from None

        return guarded2

    def guarded(a: list[Any]) -> Any:
        vals = [f(a) for f in fns]
        try:
            return impl(a, *vals) if frame else impl(*vals)
        except CostExceeded:
            raise
        except EvalError as e:
            raise detail(vals, e) from None

    return guarded


def _bind_call(impl: Callable[..., Any], fns: list[Fn], frame: bool) -> Fn:
    n = len(fns)
    if frame:
        if n == 1:
            (f0,) = fns
            return lambda a: impl(a, f0(a))
        if n == 2:
            f0, f1 = fns
            return lambda a: impl(a, f0(a), f1(a))
        return lambda a: impl(a, *[f(a) for f in fns])
    if n == 1:
        (f0,) = fns
        return lambda a: impl(f0(a))
    if n == 2:
        f0, f1 = fns
        return lambda a: impl(f0(a), f1(a))
    return lambda a: impl(*[f(a) for f in fns])


def _dispatch_call(name: str, cands: list[F.Overload], fns: list[Fn]) -> Fn:
    checks = [(tuple(F.RUNTIME_CHECK.get(p, F.RUNTIME_CHECK["dyn"]) for p in ov.params), ov) for ov in cands]

    def dispatch(a: list[Any]) -> Any:
        vals = [f(a) for f in fns]
        for cks, ov in checks:
            if all(ck(v) for ck, v in zip(cks, vals, strict=True)):
                if ov.frame:
                    return ov.impl(a, *vals)
                return ov.impl(*vals)
        sig = ", ".join(F.runtime_type_name(v) for v in vals)
        raise EvalError(f"no such overload: {name}({sig})")

    return dispatch


def index_value(c: Any, i: Any) -> Any:
    tc = type(c)
    if tc is list or tc is tuple:
        ti = type(i)
        if ti is int or ti is UInt:
            idx = int(i)
        elif ti is float:
            if i != int(i):
                raise EvalError(f"unsupported index value {i} in list")
            idx = int(i)
        else:
            raise no_such_overload()
        if idx < 0 or idx >= len(c):
            raise EvalError(f"index out of bounds: {idx}")
        return c[idx]
    if isinstance(c, dict):
        ti = type(i)
        if ti is str or ti is int or ti is UInt:
            try:
                return c[i]
            except KeyError:
                raise EvalError(f"no such key: {_fmt_key(i)}") from None
        if ti is bool:
            for k, v in c.items():
                if type(k) is bool and k == i:
                    return v
            raise EvalError(f"no such key: {_fmt_key(i)}")
        if ti is float:
            if i == i and i not in (float("inf"), float("-inf")) and i == int(i) and int(i) in c:
                return c[int(i)]
            raise EvalError(f"no such key: {i}")
        raise no_such_overload()
    if isinstance(i, str | int | float | bool):
        raise EvalError(f"no such key: {_fmt_key(i)}")
    raise EvalError(f"invalid qualifier type: {F.go_type_name(i)}")


def _fmt_key(k: Any) -> str:
    if type(k) is bool:
        return "true" if k else "false"
    return str(k)
