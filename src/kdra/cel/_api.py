"""compile_selector, Program and the error types: the only place engine details meet callers."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from kdra.cel._compiler import CheckError, Compiler, Env, ProgramError, display
from kdra.cel._device import CelDevice
from kdra.cel._parser import ParseError, parse
from kdra.cel._values import EvalError, Semver, type_of
from kdra.errors import AllocationError, InputError

# k8s.io/api/resource/v1 CELSelectorExpressionMaxCost and CELSelectorExpressionMaxLength
CEL_SELECTOR_EXPRESSION_MAX_COST = 1_000_000
CEL_SELECTOR_EXPRESSION_MAX_LENGTH = 10 * 1024


class CELCompileError(InputError):
    """The expression does not compile; str() is cel-go's text, prefixed like compile.go does."""

    def __init__(self, message: str, expression: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.expression = expression


class CELRuntimeError(AllocationError):
    """Evaluation failed for one device; str() is cel-go's error text (e.g. 'no such key: foo')."""

    def __init__(self, message: str, cost: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.cost = cost  # runtime cost spent before the error


def _display(src: str, pos: int, message: str) -> str:
    """cel-go common.Error.ToDisplayString: location, message and a caret under the column."""
    line = src.count("\n", 0, pos) + 1
    line_start = src.rfind("\n", 0, pos) + 1
    col = pos - line_start
    line_end = src.find("\n", pos)
    snippet = src[line_start : line_end if line_end >= 0 else len(src)]
    out = f"ERROR: <input>:{line}:{col + 1}: {message}"
    snippet = snippet.replace("\t", " ")
    if any(ord(c) > 127 for c in snippet):
        ind = "".join("\uff0e" if ord(c) > 127 else "." for c in snippet[:col])
        caret = "\uff3e" if col < len(snippet) and ord(snippet[col]) > 127 else "^"
    else:
        ind = "." * col
        caret = "^"
    return f"{out}\n | {snippet}\n | {ind}{caret}"


_CONVERSION = {
    "list": "type conversion error from list to 'bool'",
    "map": "type conversion error from map to 'bool'",
    "int": "unsupported type conversion from 'int' to bool",
    "uint": "unsupported type conversion from 'uint' to bool",
    "double": "unsupported type conversion from 'double' to bool",
    "string": "unsupported native conversion from string to 'bool'",
}


def _type_string(t: str) -> str:
    """cel-go's Type.String() (compile.go's output-type message): `any` is google.protobuf.Any there,
    while checker errors spell it "any"."""
    return re.sub(r"\bany\b", "google.protobuf.Any", display(t))


def _overload_spelling(msg: str) -> str:
    """Overload messages spell null_type as null but keep 'any' (cel-go's checker formatting)."""
    if "applied to '" not in msg:
        return msg
    head, _, tail = msg.partition("applied to '")
    tail = tail.replace("null_type", "null").replace("google.protobuf.Any", "any")
    if "error" in tail and "!error!" not in tail:
        tail = tail.replace("error", "!error!")
    return head + "applied to '" + tail


class Program:
    """A compiled selector. matches() is safe to call from several threads."""

    __slots__ = ("_fn", "_lists", "_nslots", "expression", "max_cost", "output_type")

    def __init__(self, expression: str, fn: Any, nslots: int, output_type: str, lists: bool, max_cost: int):
        self.expression = expression
        self._fn = fn
        self._nslots = nslots
        self._lists = lists
        self.output_type = output_type
        self.max_cost = max_cost

    def matches(self, device: CelDevice) -> bool:
        """True/False for this device; CELRuntimeError (cel-go wording) for any evaluation error."""
        return self.matches_with_cost(device)[0]

    def matches_with_cost(self, device: CelDevice, lazy: bool = False) -> tuple[bool, int]:
        """matches() and the runtime cost it took (cost units, the budget CEL_SELECTOR_EXPRESSION_MAX_COST
        bounds); a CELRuntimeError carries its cost in `.cost`. `lazy`: attributes as Kubernetes 1.38
        gives them (an unrepresentable value fails only the expression that reads it)."""
        if device.attributes is None:
            device.prepare()
        err = device._err_capacity if lazy else device._err_lists if self._lists else device._err_scalar
        if err is not None:
            raise CELRuntimeError(err)
        frame: list[Any] = [device.lazy_view() if lazy else device, CEL_SELECTOR_EXPRESSION_MAX_COST]
        if self._nslots > 2:
            frame.extend([None] * (self._nslots - 2))
        try:
            r = self._fn(frame)
        except EvalError as e:
            raise CELRuntimeError(e.message, CEL_SELECTOR_EXPRESSION_MAX_COST - frame[1]) from None
        except RecursionError:
            raise CELRuntimeError("max recursion depth exceeded") from None
        cost = CEL_SELECTOR_EXPRESSION_MAX_COST - frame[1]
        if r is True or r is False:
            return r, cost
        tn = type_of(r).name
        detail = _CONVERSION.get(tn, f"type conversion error from '{tn}' to 'bool'")
        raise CELRuntimeError(f"CEL result of type {tn} could not be converted to bool: {detail}", cost)

    def evaluate(self, device: CelDevice) -> Any:
        """The expression's value for this device; CELRuntimeError for any evaluation error."""
        if device.attributes is None:
            device.prepare()
        err = device._err_lists if self._lists else device._err_scalar
        if err is not None:
            raise CELRuntimeError(err)
        frame: list[Any] = [device, CEL_SELECTOR_EXPRESSION_MAX_COST]
        if self._nslots > 2:
            frame.extend([None] * (self._nslots - 2))
        try:
            return self._fn(frame)
        except EvalError as e:
            raise CELRuntimeError(e.message) from None
        except RecursionError:
            raise CELRuntimeError("max recursion depth exceeded") from None

    def attribute(self, device: CelDevice) -> dict[str, Any]:
        """The value as a DeviceAttribute dict (valToDeviceAttribute): {"int": 1}, {"strings": [...]}."""
        value = self.evaluate(device)
        scalar = _attribute_field(value)
        if scalar is not None:
            return {scalar[0]: scalar[1]}
        if isinstance(value, list):
            if not value:
                return {"strings": []}
            first = _attribute_field(value[0])
            if first is None:
                raise CELRuntimeError(f"unsupported list element type: {type_of(value[0]).name}")
            out = []
            for i, item in enumerate(value):
                got = _attribute_field(item)
                if got is None or got[0] != first[0]:
                    raise CELRuntimeError(
                        f"expected list element at index {i} to be {first[0]}, got {type_of(item).name}"
                    )
                out.append(got[1])
            return {first[0] + "s": out}
        raise CELRuntimeError(f"unsupported CEL return type: {type_of(value).name}")

    def __repr__(self) -> str:
        return f"Program({self.expression!r})"


def _attribute_field(v: Any) -> tuple[str, Any] | None:
    if v is True or v is False:
        return "bool", v
    if type(v) is int:
        return "int", v
    if type(v) is str:
        return "string", v
    if isinstance(v, Semver):
        return "version", str(v)
    return None


_DERIVED_SCALARS = ("bool", "int", "string", "any", "dyn", "kubernetes.Semver")


def _derived_type_ok(t: str, allow_list: bool) -> bool:
    """validateOutputType for derived attributes: a primitive scalar or (allow_list) a list of them."""
    if t in _DERIVED_SCALARS:
        return True
    return allow_list and t.startswith("list(") and t[5:-1] in _DERIVED_SCALARS


def _compile(
    expression: str,
    consumable_capacity: bool,
    list_type_attributes: bool,
    stored: bool,
    derived: bool = False,
) -> Program:
    if len(expression.encode("utf-8")) > CEL_SELECTOR_EXPRESSION_MAX_LENGTH:
        raise CELCompileError(
            f"Too long: may not be more than {CEL_SELECTOR_EXPRESSION_MAX_LENGTH} bytes", expression
        )
    try:
        ast = parse(expression)
        env = Env(consumable_capacity, list_type_attributes, stored)
        comp = Compiler(env)
        c = comp.compile(ast)
        errors: list[CheckError | ParseError] = sorted(comp.errors, key=lambda e: e.pos)
        if not errors and comp.program_error is not None:
            raise comp.program_error
    except ProgramError as e:
        raise CELCompileError("program instantiation failed: " + e.message, expression) from None
    except ParseError as e:
        errors = [e]
    except RecursionError:
        raise CELCompileError(
            "compilation failed: ERROR: <input>:1:1: expression recursion limit exceeded", expression
        ) from None
    if errors:
        shown_errors = "\n".join(_display(expression, e.pos, _overload_spelling(e.message)) for e in errors)
        raise CELCompileError("compilation failed: " + shown_errors, expression)
    t = c.t
    if derived:
        allow_list = list_type_attributes or stored
        if not _derived_type_ok(t, allow_list):
            what = "a primitive scalar (string, integer, boolean, semver)"
            if allow_list:
                what += " or a list of these scalars"
            raise CELCompileError(f"must evaluate to {what}, not {_type_string(t)}", expression)
    elif not (t in ("bool", "any") or (list_type_attributes and t == "dyn")):
        shown = _type_string(t)
        raise CELCompileError(f"must evaluate to bool or the unknown type, not {shown}", expression)
    from kdra.cel._cost import estimate

    return Program(
        expression, c.fn, comp.nslots, t, list_type_attributes, estimate(ast, env, comp.types, expression)
    )


@lru_cache(maxsize=4096)
def _cached(
    expression: str,
    consumable_capacity: bool,
    list_type_attributes: bool,
    stored: bool,
    derived: bool = False,
) -> Program | CELCompileError:
    try:
        return _compile(expression, consumable_capacity, list_type_attributes, stored, derived)
    except CELCompileError as e:
        return e


def compile_derived_attribute(
    expression: str,
    *,
    consumable_capacity: bool = True,
    list_type_attributes: bool = False,
    stored_expressions: bool = True,
) -> Program:
    """Compile a derived attribute's expression (DRADerivedAttributes, 1.37 alpha): the result must be a
    primitive scalar, or a list of them where list-typed attributes are allowed (the stored-expression
    environment always allows them). Evaluate with `Program.attribute(device)`."""
    r = _cached(expression, consumable_capacity, list_type_attributes, stored_expressions, True)
    if isinstance(r, CELCompileError):
        raise CELCompileError(r.message, r.expression)
    return r


def compile_selector(
    expression: str,
    *,
    consumable_capacity: bool = True,
    list_type_attributes: bool = False,
    stored_expressions: bool = False,
) -> Program:
    """Compile a DRA selector (cached by expression and environment).

    consumable_capacity: DRAConsumableCapacity (declares device.allowMultipleAllocations).
    list_type_attributes: DRAListTypeAttributes (list attribute values, dyn results).
    stored_expressions: compile like kube-scheduler does (environment.StoredExpressions): every
      declaration of the 1.36 environment is present whatever the feature gates, so
      allowMultipleAllocations and includes() always compile; the gates still decide how attribute
      values convert and whether a dyn result is accepted. The default (False) is the
      NewExpressions environment that API validation uses for new or changed expressions.
    """
    r = _cached(expression, consumable_capacity, list_type_attributes, stored_expressions)
    if isinstance(r, CELCompileError):
        raise CELCompileError(r.message, r.expression)
    return r


def without_container_note(message: str) -> str:
    """A compile error as cel.dev/cel-go 0.33 (Kubernetes 1.38) spells it: "undeclared reference to
    'x'" without the " (in container '')" that earlier cel-go appended for the empty container."""
    return message.replace(" (in container '')", "")


def estimate_cost(
    expression: str, *, consumable_capacity: bool = True, list_type_attributes: bool = False
) -> int:
    """Worst-case cost estimate of a selector (compile first; raises CELCompileError)."""
    return compile_selector(
        expression, consumable_capacity=consumable_capacity, list_type_attributes=list_type_attributes
    ).max_cost
