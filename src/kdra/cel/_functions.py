"""CEL standard functions plus the Kubernetes libraries that the apiserver base environment declares.

Every implementation takes already-evaluated Python values and raises EvalError with cel-go's wording.
Functions whose work grows with their input take the evaluation frame first and charge the cost budget.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kdra.api.quantity import Quantity
from kdra.cel._regex import compile_regex
from kdra.cel._values import (
    INT64_MAX,
    INT64_MIN,
    UINT64_MAX,
    CelType,
    CostExceeded,
    EvalError,
    Semver,
    UInt,
    format_double,
    no_such_overload,
    normalize_and_parse_semver,
    type_of,
)

COST_LIMIT_MESSAGE = "operation cancelled: actual cost limit exceeded"
# ResourceSliceMaxAttributeValuesPerDevice (k8s.io/api/resource/v1): bound for includes()
MAX_ATTRIBUTE_VALUES = 64


def charge(a: list[Any], n: int) -> None:
    b = a[1] - n
    a[1] = b
    if b < 0:
        raise CostExceeded(COST_LIMIT_MESSAGE)


# ---------------------------------------------------------------------------------------------------------
# equality and ordering


def cel_eq(x: Any, y: Any) -> bool:
    """cel-go heterogeneous equality (numeric values compare across int/uint/double)."""
    if x is None or y is None:
        return x is y  # types.Equal: null against anything compares before any Equal method
    tx = type(x)
    ty = type(y)
    if tx in _QUANTITIES and ty in _QUANTITIES:
        if ty is CelQuantity and y.ref:
            raise no_such_overload()  # Quantity.Equal: other.(Quantity) fails for a *Quantity
        return bool(x == y)
    if tx is ty:
        if tx is list:
            return _list_eq(x, y)
        if tx is dict:
            return _map_eq(x, y)
        return bool(x == y)
    if tx in _NUM and ty in _NUM:
        return _num_cmp(x, y) == 0
    if isinstance(x, dict) and isinstance(y, dict):
        return _map_eq(x, y)
    if (tx is list or tx is tuple) and (ty is list or ty is tuple):
        return _list_eq(x, y)
    if tx in _QUANTITIES or tx is Semver:
        # apiserver Quantity/Semver Equal: MaybeNoSuchOverloadErr for other types
        raise no_such_overload()
    return False


def cel_ne(x: Any, y: Any) -> bool:
    """cel-go's `!=`: Equal(x, y) != True, so an Equal that fails (a Quantity or Semver against another
    type) makes `!=` true."""
    try:
        return not cel_eq(x, y)
    except CostExceeded:
        raise
    except EvalError:
        return True


def _eq_true(a: Any, b: Any) -> bool:
    """a.Equal(b) == True, as Contains, indexOf and the sets library test it (an error is not a match)."""
    try:
        return cel_eq(a, b)
    except CostExceeded:
        raise
    except EvalError:
        return False


def _elem_eq(a: Any, b: Any) -> bool:
    """An element of list/map equality: cel-go stops only on False, an Equal error counts as equal."""
    try:
        return cel_eq(a, b)
    except CostExceeded:
        raise
    except EvalError:
        return True


def _list_eq(x: Any, y: Any) -> bool:
    if len(x) != len(y):
        return False
    return all(_elem_eq(a, b) for a, b in zip(x, y, strict=True))


def _map_eq(x: dict[Any, Any], y: dict[Any, Any]) -> bool:
    if len(x) != len(y):
        return False
    for k, v in x.items():
        if k not in y:
            return False
        if not _elem_eq(v, y[k]):
            return False
    return True


_NUM = frozenset((int, UInt, float))
_ORDERED = frozenset((int, UInt, float, str, bytes, bool))
_F_INT_MAX = float(2**63)  # math.MaxInt64 as a float64 constant (rounds to 2**63)
_F_UINT_MAX = float(2**64)


def _double_cmp(d: float, n: Any) -> int:
    """cel-go compareDoubleInt / compareDoubleUint: the integer is converted to a double (lossy)."""
    if type(n) is UInt:
        if d < 0:
            return -1
        if d > _F_UINT_MAX:
            return 1
    else:
        if d < -_F_INT_MAX:
            return -1
        if d > _F_INT_MAX:
            return 1
    f = float(n)
    return -1 if d < f else (1 if d > f else 0)


def _num_cmp(x: Any, y: Any) -> int | None:
    """Heterogeneous numeric comparison as cel-go's Int/Uint/Double Compare; None for NaN."""
    tx = type(x)
    ty = type(y)
    if tx is float:
        if x != x:
            return None
        if ty is float:
            if y != y:
                return None
            return -1 if x < y else (1 if x > y else 0)
        return _double_cmp(x, y)
    if ty is float:
        if y != y:
            return None
        return -_double_cmp(y, x)
    return -1 if x < y else (1 if x > y else 0)  # int and uint compare exactly


def cel_cmp(x: Any, y: Any, op: str = "_<_") -> int | None:
    """Ordering for <, <=, >, >=. None means unordered (NaN). Raises no such overload for bad types."""
    tx = type(x)
    ty = type(y)
    if tx in _NUM and ty in _NUM:
        return _num_cmp(x, y)
    if tx is ty and tx in _ORDERED:
        if x < y:
            return -1
        if x > y:
            return 1
        if x == y:
            return 0
        return None
    if tx not in _ORDERED:
        raise EvalError(f"no such overload: {op}")  # no Comparer trait on the left operand
    raise no_such_overload()


_NAN_ORDER = "NaN values cannot be ordered"


def lt(x: Any, y: Any) -> bool:
    c = cel_cmp(x, y, "_<_")
    if c is None:
        raise EvalError(_NAN_ORDER)
    return c < 0


def le(x: Any, y: Any) -> bool:
    c = cel_cmp(x, y, "_<=_")
    if c is None:
        raise EvalError(_NAN_ORDER)
    return c <= 0


def gt(x: Any, y: Any) -> bool:
    c = cel_cmp(x, y, "_>_")
    if c is None:
        raise EvalError(_NAN_ORDER)
    return c > 0


def ge(x: Any, y: Any) -> bool:
    c = cel_cmp(x, y, "_>=_")
    if c is None:
        raise EvalError(_NAN_ORDER)
    return c >= 0


# ---------------------------------------------------------------------------------------------------------
# arithmetic


def _int_result(v: int) -> int:
    if v < INT64_MIN or v > INT64_MAX:
        raise EvalError("integer overflow")
    return v


def _uint_result(v: int) -> UInt:
    if v < 0 or v > UINT64_MAX:
        raise EvalError("unsigned integer overflow")
    return UInt(v)


_ADDER = frozenset((int, UInt, float, str, bytes, list, tuple))
_SUBTRACTOR = frozenset((int, UInt, float))
_MODDER = frozenset((int, UInt))


def _trait(x: Any, allowed: frozenset[type], op: str) -> None:
    """cel-go evalBinary: a left operand without the operator's trait is 'no such overload: <op>'."""
    if type(x) not in allowed:
        if type(x) is str:
            raise no_such_overload()  # strings are a ReceiverType: Receive() answers
        raise EvalError(f"no such overload: {op}")


def add(a: list[Any], x: Any, y: Any) -> Any:
    tx = type(x)
    ty = type(y)
    _trait(x, _ADDER, "_+_")
    if tx is not ty:
        if (tx is list or tx is tuple) and (ty is list or ty is tuple):
            charge(a, (len(x) + len(y)) // 10)
            return list(x) + list(y)
        raise no_such_overload()
    if tx is int:
        return _int_result(x + y)
    if tx is float:
        return x + y
    if tx is str or tx is bytes:
        charge(a, (len(x) + len(y)) // 10)
        return x + y
    if tx is list or tx is tuple:
        charge(a, (len(x) + len(y)) // 10)
        return list(x) + list(y)
    if tx is UInt:
        return _uint_result(x + y)
    raise no_such_overload()


def sub(x: Any, y: Any) -> Any:
    tx = type(x)
    _trait(x, _SUBTRACTOR, "_-_")
    if tx is not type(y):
        raise no_such_overload()
    if tx is int:
        return _int_result(x - y)
    if tx is float:
        return x - y
    if tx is UInt:
        return _uint_result(x - y)
    raise no_such_overload()


def mul(x: Any, y: Any) -> Any:
    tx = type(x)
    _trait(x, _SUBTRACTOR, "_*_")
    if tx is not type(y):
        raise no_such_overload()
    if tx is int:
        return _int_result(x * y)
    if tx is float:
        return x * y
    if tx is UInt:
        return _uint_result(x * y)
    raise no_such_overload()


def div(x: Any, y: Any) -> Any:
    tx = type(x)
    _trait(x, _SUBTRACTOR, "_/_")
    if tx is not type(y):
        raise no_such_overload()
    if tx is int or tx is UInt:
        if y == 0:
            raise EvalError("division by zero")
        q = abs(x) // abs(y)
        if (x < 0) != (y < 0):
            q = -q
        return _int_result(q) if tx is int else UInt(q)
    if tx is float:
        if y == 0.0:
            if x == 0.0 or x != x:
                return float("nan")
            neg = (x < 0) != (str(y).startswith("-"))
            return float("-inf") if neg else float("inf")
        return x / y
    raise no_such_overload()


def mod(x: Any, y: Any) -> Any:
    tx = type(x)
    _trait(x, _MODDER, "_%_")
    if tx is not type(y):
        raise no_such_overload()
    if tx is int or tx is UInt:
        if y == 0:
            raise EvalError("modulus by zero")
        if tx is int and x == INT64_MIN and y == -1:
            raise EvalError("integer overflow")
        r = abs(x) % abs(y)
        if x < 0:
            r = -r
        return r if tx is int else UInt(r)
    raise no_such_overload()


def neg(x: Any) -> Any:
    tx = type(x)
    if tx is int:
        return _int_result(-x)
    if tx is float:
        return -x
    if tx is bool or tx is str:
        # bool has the Negater trait and string is a ReceiverType: the call itself fails
        raise no_such_overload()
    raise EvalError("no such overload: -_")  # cel-go evalUnary: operand lacks the Negater trait


def logical_not(x: Any) -> bool:
    if x is True:
        return False
    if x is False:
        return True
    raise no_such_overload()


def runtime_type_name(v: Any) -> str:
    """ref.Type.TypeName() of a runtime value, as cel-go prints it in 'no such overload: f(...)'."""
    return type_of(v).name


def go_type_name(v: Any) -> str:
    """Go's %T of a cel-go value (used in a few upstream messages)."""
    t = type(v)
    if v is None:
        return "types.Null"
    return {
        bool: "types.Bool",
        int: "types.Int",
        UInt: "types.Uint",
        float: "types.Double",
        str: "types.String",
        bytes: "types.Bytes",
        list: "*types.baseList",
        tuple: "*types.baseList",
        Quantity: "cel.Quantity",
        CelQuantity: "cel.Quantity",
        Semver: "cel.Semver",
        CelType: "*types.Type",
    }.get(t, "*types.baseMap" if isinstance(v, dict) else t.__name__)


def in_(a: list[Any], x: Any, c: Any) -> bool:
    tc = type(c)
    if tc is list or tc is tuple:
        charge(a, len(c) // 10)
        for v in c:
            try:  # baseList.Contains: only a true Equal counts, errors are skipped
                if cel_eq(x, v):
                    return True
            except CostExceeded:
                raise
            except EvalError:
                pass
        return False
    if isinstance(c, dict):
        tx = type(x)
        if tx is bool or tx is int or tx is str or tx is UInt:
            if tx is bool:
                return any(type(k) is bool and k == x for k in c)
            return x in c
        if tx is float:
            if x == int(x) if x == x and x not in (float("inf"), float("-inf")) else False:
                return int(x) in c
            return False
        raise no_such_overload()
    raise no_such_overload()


# ---------------------------------------------------------------------------------------------------------
# core functions


def size(x: Any) -> int:
    tx = type(x)
    if tx is str or tx is bytes or tx is list or tx is tuple or isinstance(x, dict):
        return len(x)
    raise no_such_overload()


def to_int(x: Any) -> int:
    tx = type(x)
    if tx is int:
        return x
    if tx is UInt:
        if x > INT64_MAX:
            raise EvalError("integer overflow")
        return int(x)
    if tx is float:
        if (
            x != x
            or not (-9.223372036854775808e18 <= x < 9.223372036854775808e18)
            or x in (-9.223372036854775808e18,)
        ):
            raise EvalError("integer overflow")
        return int(x)
    if tx is str:
        return _parse_int(x)
    raise no_such_overload()


_INT_RE = re.compile(r"[+-]?[0-9]+\Z")


def _parse_int(s: str) -> int:
    if not _INT_RE.match(s):
        raise EvalError("type conversion error from 'string' to 'int'")
    v = int(s)
    if v < INT64_MIN or v > INT64_MAX:
        raise EvalError("type conversion error from 'string' to 'int'")
    return v


def to_uint(x: Any) -> UInt:
    tx = type(x)
    if tx is UInt:
        return x
    if tx is int:
        if x < 0:
            raise EvalError("unsigned integer overflow")
        return UInt(x)
    if tx is float:
        if x != x or x < 0 or x >= 1.8446744073709552e19:
            raise EvalError("unsigned integer overflow")
        return UInt(int(x))
    if tx is str:
        if not re.fullmatch(r"\+?[0-9]+", x) or int(x) > UINT64_MAX:
            raise EvalError("type conversion error from 'string' to 'uint'")
        v = int(x)
        return UInt(v)
    raise no_such_overload()


_FLOAT_DEC = re.compile(r"(?:[0-9_]+\.?[0-9_]*|\.[0-9_]+)(?:[eE][+-]?[0-9_]+)?\Z")
_FLOAT_HEX = re.compile(r"0[xX](?:[0-9a-fA-F_]+\.?[0-9a-fA-F_]*|\.[0-9a-fA-F_]+)[pP][+-]?[0-9_]+\Z")
_FLOAT_SPECIAL = re.compile(r"(?:[+-]?(?:inf|infinity)|nan)\Z", re.I)


def _underscore_ok(s: str) -> bool:
    """Go strconv.underscoreOK: an underscore only between digits (or after a base prefix)."""
    saw = "^"
    i = 0
    hexa = False
    if len(s) >= 2 and s[0] == "0" and s[1] in "xX":
        i, saw, hexa = 2, "0", True
    for ch in s[i:]:
        if "0" <= ch <= "9" or (hexa and ch in "abcdefABCDEF"):
            saw = "0"
        elif ch == "_":
            if saw != "0":
                return False
            saw = "_"
        elif saw == "_":
            return False
        else:
            saw = "!"
    return saw != "_"


def parse_go_float(x: str) -> float | None:
    """strconv.ParseFloat(x, 64) as cel-go's double(string) uses it; None where Go returns an error
    (bad syntax, or a finite literal out of range: Go gives ErrRange, cel-go a conversion error)."""
    if _FLOAT_SPECIAL.match(x):
        return float(x)
    body = x[1:] if x[:1] in ("+", "-") else x
    hexa = _FLOAT_HEX.match(body) is not None
    if not hexa and not _FLOAT_DEC.match(body):
        return None
    if "_" in body:
        if not _underscore_ok(body):
            return None
        body = body.replace("_", "")
    if not any(c.isdigit() for c in body.split("e")[0].split("E")[0]) and not hexa:
        return None
    try:
        v = float.fromhex(body) if hexa else float(body)
    except (ValueError, OverflowError):
        return None
    if v in (float("inf"), float("-inf")):
        return None
    return -v if x[:1] == "-" else v


def to_double(x: Any) -> float:
    tx = type(x)
    if tx is float:
        return x
    if tx is int or tx is UInt:
        return float(x)
    if tx is str:
        v = parse_go_float(x)
        if v is None:
            raise EvalError("type conversion error from 'string' to 'double'")
        return v
    raise no_such_overload()


def to_string(x: Any) -> str:
    tx = type(x)
    if tx is str:
        return x
    if tx is bool:
        return "true" if x else "false"
    if tx is int or tx is UInt:
        return str(int(x))
    if tx is float:
        return format_double(x)
    if tx is bytes:
        try:
            return x.decode("utf-8")
        except UnicodeDecodeError:
            raise EvalError("invalid UTF-8 in bytes, cannot convert to string") from None
    # no string() overload for kubernetes.Quantity / kubernetes.Semver (reached through dyn)
    raise no_such_overload()


_TRUE = frozenset(("1", "t", "T", "TRUE", "true", "True"))
_FALSE = frozenset(("0", "f", "F", "FALSE", "false", "False"))


def to_bool(x: Any) -> bool:
    if type(x) is bool:
        return x
    if type(x) is str:
        if x in _TRUE:
            return True
        if x in _FALSE:
            return False
        raise EvalError("type conversion error from 'string' to 'bool'")
    raise no_such_overload()


def to_bytes(x: Any) -> bytes:
    if type(x) is bytes:
        return x
    if type(x) is str:
        return x.encode("utf-8")
    raise no_such_overload()


def cel_type(x: Any) -> CelType:
    return type_of(x)


# ---------------------------------------------------------------------------------------------------------
# regular expressions (RE2 syntax mapped onto Python's re)


def matches(a: list[Any], s: Any, pattern: Any) -> bool:
    if type(s) is not str or type(pattern) is not str:
        raise no_such_overload()
    charge(a, len(s) * max(1, len(pattern)) // 10)
    return compile_regex(pattern).search(s) is not None


def find(a: list[Any], s: Any, pattern: Any) -> str:
    if type(s) is not str or type(pattern) is not str:
        raise no_such_overload()
    charge(a, len(s) * max(1, len(pattern)) // 10)
    m = compile_regex(pattern).search(s)
    return s[m[0] : m[1]] if m else ""


def find_all(a: list[Any], s: Any, pattern: Any, limit: Any = -1) -> list[str]:
    if type(s) is not str or type(pattern) is not str or type(limit) is not int:
        raise no_such_overload()
    charge(a, len(s) * max(1, len(pattern)) // 10)
    if limit == 0:
        return []
    return compile_regex(pattern).find_all(s, limit)


# ---------------------------------------------------------------------------------------------------------
# strings (cel-go ext.Strings)


def _str(x: Any) -> str:
    if type(x) is not str:
        raise no_such_overload()
    return x


def _int(x: Any) -> int:
    if type(x) is not int:
        raise no_such_overload()
    return x


def contains(a: list[Any], s: Any, sub_: Any) -> bool:
    charge(a, len(_str(s)) // 10)
    return _str(sub_) in s


def starts_with(s: Any, p: Any) -> bool:
    return _str(s).startswith(_str(p))


def ends_with(s: Any, p: Any) -> bool:
    return _str(s).endswith(_str(p))


def char_at(s: Any, i: Any) -> str:
    s = _str(s)
    i = _int(i)
    if i < 0 or i > len(s):
        raise EvalError(f"index out of range: {i}")
    return s[i : i + 1]


def index_of(a: list[Any], s: Any, sub_: Any, start: Any = 0) -> int:
    """cel-go ext/strings.go indexOfOffset: offset past the end gives -1, negative is an error."""
    s = _str(s)
    sub_ = _str(sub_)
    start = _int(start)
    charge(a, len(s) // 10)
    if sub_ == "":
        return start
    if start < 0:
        raise EvalError(f"index out of range: {start}")
    if start >= len(s):
        return -1
    return s.find(sub_, start)


def last_index_of(a: list[Any], s: Any, sub_: Any, end: Any = None) -> int:
    """cel-go lastIndexOf/lastIndexOfOffset."""
    s = _str(s)
    sub_ = _str(sub_)
    charge(a, len(s) // 10)
    if end is None:
        if sub_ == "":
            return len(s)
        if len(s) < len(sub_):
            return -1
        end = len(s) - 1
    end = _int(end)
    if sub_ == "":
        return end
    if end < 0:
        raise EvalError(f"index out of range: {end}")
    if end >= len(s):
        return -1
    end = min(end, len(s) - len(sub_))
    return s.rfind(sub_, 0, end + len(sub_))


def lower_ascii(a: list[Any], s: Any) -> str:
    s = _str(s)
    charge(a, len(s) // 10)
    return "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in s) if not s.isascii() else s.lower()


def upper_ascii(a: list[Any], s: Any) -> str:
    s = _str(s)
    charge(a, len(s) // 10)
    return "".join(chr(ord(c) - 32) if "a" <= c <= "z" else c for c in s) if not s.isascii() else s.upper()


def replace(a: list[Any], s: Any, old: Any, new: Any, n: Any = -1) -> str:
    s = _str(s)
    old = _str(old)
    new = _str(new)
    n = _int(n)
    if old == "" and len(s) * max(1, len(new)) > 1 << 20:
        raise EvalError(COST_LIMIT_MESSAGE)
    count = s.count(old) if old else len(s) + 1
    if n >= 0:
        count = min(count, n)
    charge(a, (len(s) + count * len(new)) // 10)
    return s.replace(old, new, n if n >= 0 else -1)


def split(a: list[Any], s: Any, sep: Any, n: Any = -1) -> list[str]:
    s = _str(s)
    sep = _str(sep)
    n = _int(n)
    charge(a, len(s) // 10)
    if n == 0:
        return []
    if sep == "":
        chars = list(s)
        if n > 0 and len(chars) > n:
            chars = [*chars[: n - 1], "".join(chars[n - 1 :])]
        return chars
    if n < 0:
        return s.split(sep)
    return s.split(sep, n - 1)


def substring(s: Any, start: Any, end: Any = None) -> str:
    s = _str(s)
    start = _int(start)
    if end is None:
        if start < 0 or start > len(s):
            raise EvalError(f"index out of range: {start}")
        return s[start:]
    end = _int(end)
    if start > end:  # ext/strings.go substrRange checks the order first
        raise EvalError(f"invalid substring range. start: {start}, end: {end}")
    if start < 0 or start > len(s):
        raise EvalError(f"index out of range: {start}")
    if end < 0 or end > len(s):
        raise EvalError(f"index out of range: {end}")
    return s[start:end]


_UNICODE_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001"
    "\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


def trim(s: Any) -> str:
    return _str(s).strip(_UNICODE_SPACE)


def join(a: list[Any], lst: Any, sep: Any = "") -> str:
    if type(lst) is not list and type(lst) is not tuple:
        raise no_such_overload()
    sep = _str(sep)
    for v in lst:
        if type(v) is not str:
            raise no_such_overload()
    charge(a, len(lst) // 10)
    return sep.join(lst)


# ---------------------------------------------------------------------------------------------------------
# Kubernetes lists library (apiserver/pkg/cel/library/lists.go)


def _list(x: Any) -> list[Any] | tuple[Any, ...]:
    if type(x) is not list and type(x) is not tuple:
        raise no_such_overload()
    return x


def is_sorted(a: list[Any], lst: Any) -> bool:
    lst = _list(lst)
    charge(a, len(lst) // 10)
    for i in range(1, len(lst)):
        c = cel_cmp(lst[i - 1], lst[i])
        if c is not None and c > 0:
            return False
    return True


def list_sum(a: list[Any], lst: Any) -> Any:
    lst = _list(lst)
    charge(a, len(lst) // 10)
    if not lst:
        return 0
    acc = lst[0]
    if type(acc) not in _NUM:
        raise no_such_overload()
    for v in lst[1:]:
        acc = add(a, acc, v)
    return acc


def list_min(a: list[Any], lst: Any) -> Any:
    lst = _list(lst)
    if not lst:
        raise EvalError("min called on empty list")
    charge(a, len(lst) // 10)
    best = lst[0]
    for v in lst[1:]:
        c = cel_cmp(v, best)  # the lists library keeps the current one when Compare fails (NaN)
        if c is not None and c < 0:
            best = v
    return best


def list_max(a: list[Any], lst: Any) -> Any:
    lst = _list(lst)
    if not lst:
        raise EvalError("max called on empty list")
    charge(a, len(lst) // 10)
    best = lst[0]
    for v in lst[1:]:
        c = cel_cmp(v, best)
        if c is not None and c > 0:
            best = v
    return best


def list_index_of(a: list[Any], lst: Any, x: Any) -> int:
    lst = _list(lst)
    charge(a, len(lst) // 10)
    for i, v in enumerate(lst):
        if _eq_true(v, x):
            return i
    return -1


def list_last_index_of(a: list[Any], lst: Any, x: Any) -> int:
    lst = _list(lst)
    charge(a, len(lst) // 10)
    for i in range(len(lst) - 1, -1, -1):
        if _eq_true(lst[i], x):
            return i
    return -1


# sets (cel-go ext.Sets)


def sets_contains(a: list[Any], x: Any, y: Any) -> bool:
    x = _list(x)
    y = _list(y)
    charge(a, len(x) * len(y) // 10)
    return all(any(_eq_true(e, f) for f in x) for e in y)


def sets_equivalent(a: list[Any], x: Any, y: Any) -> bool:
    return sets_contains(a, x, y) and sets_contains(a, y, x)


def sets_intersects(a: list[Any], x: Any, y: Any) -> bool:
    x = _list(x)
    y = _list(y)
    charge(a, len(x) * len(y) // 10)
    return any(any(_eq_true(e, f) for f in y) for e in x)  # lB.Contains(a) for each a of listA


# ---------------------------------------------------------------------------------------------------------
# quantity (apiserver/pkg/cel/library/quantity.go)


# Go's resource.Quantity holds an int64Amount (value * 10^scale) or an inf.Dec; AsInt64 (isInteger,
# asInteger) succeeds only for an int64Amount whose scale is >= 0 and whose value fits, so "1000m"
# (1000 * 10^-3), "2.5Ti" and "1Ei" (inf.Dec) are not integers there. A CEL quantity carries that
# representation: (value, scale), or None for inf.Dec.
Amount = tuple[int, int] | None
_GO_QTY = re.compile(r"([+-]?)0*([0-9]*)(?:\.([0-9]*))?(.*)\Z", re.S)
_DEC_EXP = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BIN_EXP = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}


def go_amount(text: str) -> Amount:
    """The representation ParseQuantity gives a (valid) quantity string: its int64 fast path or inf.Dec."""
    if text == "0":
        return (0, 0)
    m = _GO_QTY.match(text)
    if m is None:
        return None
    sign, num, denom, suffix = m.group(1), m.group(2) or "0", m.group(3) or "", m.group(4)
    neg = sign == "-"
    if suffix in _BIN_EXP:
        exp = _BIN_EXP[suffix]
        if denom or 15 - len(num) - exp * 3 // 10 - 1 < 0:
            return None
        v = int(num) << exp
        if v > INT64_MAX:
            return None
        return (-v if neg else v, 0)
    if suffix in _DEC_EXP:
        exp = _DEC_EXP[suffix]
    else:
        try:
            exp = int(suffix[1:])
        except ValueError:
            return None
    if 18 - len(num) - len(denom) < 0:
        return None
    scale = exp - len(denom)
    if scale < -9:
        return None
    v = int(num + denom)
    return (-v if neg else v, scale)


def _amount_int64(a: Amount) -> int | None:
    """int64Amount.AsInt64."""
    if a is None:
        return None
    v, scale = a
    if scale == 0:
        return v
    if scale < 0:
        return None
    r = v * 10**scale
    return r if INT64_MIN <= r <= INT64_MAX else None


def _fits(v: int) -> bool:
    return INT64_MIN <= v <= INT64_MAX


def _amount_add(a: Amount, b: Amount) -> Amount:
    """int64Amount.Add; None (inf.Dec) once either side is inf.Dec or the sum overflows."""
    if a is None or b is None:
        return None
    av, asc = a
    bv, bsc = b
    if bv == 0:
        return a
    if av == 0:
        return b
    if asc == bsc:
        c = av + bv
        return (c, asc) if _fits(c) else None
    if asc > bsc:
        c = av * 10 ** (asc - bsc)
        if not _fits(c) or not _fits(c + bv):
            return None
        return (c + bv, bsc)
    c = bv * 10 ** (bsc - asc)
    if not _fits(c) or not _fits(av + c):
        return None
    return (av + c, asc)


class CelQuantity(Quantity):
    """A quantity as the CEL library holds it: `go` is Go's representation (see go_amount); `ref` marks
    the *cel.Quantity that add() and sub() return (quantity() and capacities are cel.Quantity values):
    apiserver's Quantity.Equal accepts only a value as the other operand, so `q == a.add(b)` fails with
    "no such overload" while `a.add(b) == q` compares."""

    __slots__ = ("_go", "_text", "ref")

    _go: Any
    _text: str
    ref: bool

    @property
    def go(self) -> Amount:
        # A capacity's is read from its text on first use: only isInteger()/asInteger() and sums need it,
        # and every device's capacities become CelQuantity values (a regex each cost 5% of a scheduling
        # benchmark's throughput).
        if self._go is _UNREAD:
            self._go = go_amount(self._text)
        return self._go


_UNREAD = object()


def cel_quantity(q: Quantity, go: Amount, ref: bool = False) -> CelQuantity:
    c = CelQuantity(q.nanos, q.format)
    c._go = go
    c.ref = ref
    return c


def cel_quantity_of(q: Quantity, text: str) -> CelQuantity:
    """`q` parsed from `text` (a capacity's value), Go's representation read from `text` when needed."""
    c = CelQuantity(q.nanos, q.format)
    c._go = _UNREAD
    c._text = text
    c.ref = False
    return c


def _amount_of(q: Quantity) -> Amount:
    if type(q) is CelQuantity:
        return q.go
    n = q.nanos  # a plain Quantity: its exact value
    return (n // 1_000_000_000, 0) if n % 1_000_000_000 == 0 else (n, -9)


_QUANTITIES = frozenset((Quantity, CelQuantity))


def _q(x: Any) -> Quantity:
    if type(x) is not Quantity and type(x) is not CelQuantity:
        raise no_such_overload()
    return x


def quantity(s: Any) -> Quantity:
    s = _str(s)
    try:
        return cel_quantity(Quantity.parse(s), go_amount(s))
    except ValueError as e:
        raise EvalError(str(e)) from None


def is_quantity(s: Any) -> bool:
    s = _str(s)
    try:
        Quantity.parse(s)
    except ValueError:
        return False
    return True


def q_compare_to(x: Any, y: Any) -> int:
    if type(x) in _QUANTITIES and type(y) in _QUANTITIES:
        return x.cmp(y)
    if type(x) is Semver and type(y) is Semver:
        return x.compare(y)
    raise no_such_overload()


def q_is_greater_than(x: Any, y: Any) -> bool:
    return q_compare_to(x, y) == 1


def q_is_less_than(x: Any, y: Any) -> bool:
    return q_compare_to(x, y) == -1


def q_sign(x: Any) -> int:
    return _q(x).sign()


def q_as_float(x: Any) -> float:
    return _q(x).as_float()


def _as_int64(q: Quantity) -> int | None:
    """Quantity.AsInt64 (see go_amount)."""
    return _amount_int64(_amount_of(q))


def q_as_integer(x: Any) -> int:
    v = _as_int64(_q(x))
    if v is None:
        raise EvalError("cannot convert value to integer")
    return v


def q_is_integer(x: Any) -> bool:
    return _as_int64(_q(x)) is not None


def q_add(x: Any, y: Any) -> Quantity:
    q = _q(x)
    if type(y) is int:
        return cel_quantity(q + Quantity.from_int(y), _amount_add(_amount_of(q), (y, 0)), True)
    y = _q(y)
    return cel_quantity(q + y, _amount_add(_amount_of(q), _amount_of(y)), True)


def q_sub(x: Any, y: Any) -> Quantity:
    q = _q(x)
    if type(y) is int:
        return cel_quantity(q - Quantity.from_int(y), _amount_add(_amount_of(q), (-y, 0)), True)
    y = _q(y)
    ya = _amount_of(y)
    return cel_quantity(q - y, None if ya is None else _amount_add(_amount_of(q), (-ya[0], ya[1])), True)


# ---------------------------------------------------------------------------------------------------------
# semver (apiserver/pkg/cel/library/semverlib.go)


def semver(s: Any, normalize: Any = False) -> Semver:
    s = _str(s)
    if type(normalize) is not bool:
        raise no_such_overload()
    try:
        return normalize_and_parse_semver(s) if normalize else Semver.parse(s)
    except ValueError as e:
        raise EvalError(str(e)) from None


def is_semver(s: Any, normalize: Any = False) -> bool:
    try:
        semver(s, normalize)
    except EvalError:
        if type(s) is not str or type(normalize) is not bool:
            raise
        return False
    return True


def _sv(x: Any) -> Semver:
    if type(x) is not Semver:
        raise no_such_overload()
    return x


def sv_major(x: Any) -> int:
    return _sv(x).major


def sv_minor(x: Any) -> int:
    return _sv(x).minor


def sv_patch(x: Any) -> int:
    return _sv(x).patch


# DRAListTypeAttributes: <attribute>.includes(<value>) (dynamic-resource-allocation/cel/compile.go)


def includes(target: Any, arg: Any) -> bool:
    if type(target) is list or type(target) is tuple:
        for i, item in enumerate(target):
            if i >= MAX_ATTRIBUTE_VALUES:
                raise EvalError(
                    "'includes' function cannot be applied to lists longer than "
                    f"{MAX_ATTRIBUTE_VALUES} values"
                )
            try:
                if cel_eq(item, arg):
                    return True
            except EvalError:
                pass
        return False
    try:
        return cel_eq(target, arg)
    except EvalError:
        return False


# ---------------------------------------------------------------------------------------------------------
# overload table used by the checker and the compiler


@dataclass(frozen=True, slots=True)
class Overload:
    member: bool
    params: tuple[str, ...]
    result: str
    impl: Callable[..., Any]
    frame: bool = False  # impl takes the evaluation frame first (cost accounting)


def _o(member: bool, params: str, result: str, impl: Callable[..., Any], frame: bool = False) -> Overload:
    return Overload(member, tuple(p for p in params.split(",") if p), result, impl, frame)


Q = "kubernetes.Quantity"
S = "kubernetes.Semver"

FUNCTIONS: dict[str, list[Overload]] = {
    "size": [
        _o(False, "string", "int", size),
        _o(False, "bytes", "int", size),
        _o(False, "list", "int", size),
        _o(False, "map", "int", size),
        _o(True, "string", "int", size),
        _o(True, "bytes", "int", size),
        _o(True, "list", "int", size),
        _o(True, "map", "int", size),
    ],
    "int": [
        _o(False, "int", "int", to_int),
        _o(False, "uint", "int", to_int),
        _o(False, "double", "int", to_int),
        _o(False, "string", "int", to_int),
    ],
    "uint": [
        _o(False, "int", "uint", to_uint),
        _o(False, "uint", "uint", to_uint),
        _o(False, "double", "uint", to_uint),
        _o(False, "string", "uint", to_uint),
    ],
    "double": [
        _o(False, "int", "double", to_double),
        _o(False, "uint", "double", to_double),
        _o(False, "double", "double", to_double),
        _o(False, "string", "double", to_double),
    ],
    "string": [
        _o(False, "int", "string", to_string),
        _o(False, "uint", "string", to_string),
        _o(False, "double", "string", to_string),
        _o(False, "string", "string", to_string),
        _o(False, "bool", "string", to_string),
        _o(False, "bytes", "string", to_string),
    ],
    "bool": [_o(False, "bool", "bool", to_bool), _o(False, "string", "bool", to_bool)],
    "bytes": [_o(False, "bytes", "bytes", to_bytes), _o(False, "string", "bytes", to_bytes)],
    "dyn": [_o(False, "dyn", "dyn", lambda x: x)],
    "type": [_o(False, "dyn", "type", cel_type)],
    "matches": [
        _o(False, "string,string", "bool", matches, True),
        _o(True, "string,string", "bool", matches, True),
    ],
    "contains": [_o(True, "string,string", "bool", contains, True)],
    "startsWith": [_o(True, "string,string", "bool", starts_with)],
    "endsWith": [_o(True, "string,string", "bool", ends_with)],
    # strings ext
    "charAt": [_o(True, "string,int", "string", char_at)],
    "indexOf": [
        _o(True, "string,string", "int", index_of, True),
        _o(True, "string,string,int", "int", index_of, True),
        _o(True, "list,dyn", "int", list_index_of, True),
    ],
    "lastIndexOf": [
        _o(True, "string,string", "int", last_index_of, True),
        _o(True, "string,string,int", "int", last_index_of, True),
        _o(True, "list,dyn", "int", list_last_index_of, True),
    ],
    "lowerAscii": [_o(True, "string", "string", lower_ascii, True)],
    "upperAscii": [_o(True, "string", "string", upper_ascii, True)],
    "replace": [
        _o(True, "string,string,string", "string", replace, True),
        _o(True, "string,string,string,int", "string", replace, True),
    ],
    "split": [
        _o(True, "string,string", "list(string)", split, True),
        _o(True, "string,string,int", "list(string)", split, True),
    ],
    "substring": [
        _o(True, "string,int", "string", substring),
        _o(True, "string,int,int", "string", substring),
    ],
    "trim": [_o(True, "string", "string", trim)],
    "join": [_o(True, "list", "string", join, True), _o(True, "list,string", "string", join, True)],
    # regex library
    "find": [_o(True, "string,string", "string", find, True)],
    "findAll": [
        _o(True, "string,string", "list(string)", find_all, True),
        _o(True, "string,string,int", "list(string)", find_all, True),
    ],
    # lists library
    "isSorted": [_o(True, "list", "bool", is_sorted, True)],
    "sum": [_o(True, "list", "@elem", list_sum, True)],
    "min": [_o(True, "list", "@elem", list_min, True)],
    "max": [_o(True, "list", "@elem", list_max, True)],
    # sets
    "sets.contains": [_o(False, "list,list", "bool", sets_contains, True)],
    "sets.equivalent": [_o(False, "list,list", "bool", sets_equivalent, True)],
    "sets.intersects": [_o(False, "list,list", "bool", sets_intersects, True)],
    # quantity
    "quantity": [_o(False, "string", Q, quantity)],
    "isQuantity": [_o(False, "string", "bool", is_quantity)],
    "sign": [_o(False, Q, "int", q_sign)],
    "asApproximateFloat": [_o(True, Q, "double", q_as_float)],
    "asInteger": [_o(True, Q, "int", q_as_integer)],
    "isInteger": [_o(True, Q, "bool", q_is_integer)],
    "add": [_o(True, f"{Q},{Q}", Q, q_add), _o(True, f"{Q},int", Q, q_add)],
    "sub": [_o(True, f"{Q},{Q}", Q, q_sub), _o(True, f"{Q},int", Q, q_sub)],
    "compareTo": [_o(True, f"{Q},{Q}", "int", q_compare_to), _o(True, f"{S},{S}", "int", q_compare_to)],
    "isGreaterThan": [
        _o(True, f"{Q},{Q}", "bool", q_is_greater_than),
        _o(True, f"{S},{S}", "bool", q_is_greater_than),
    ],
    "isLessThan": [
        _o(True, f"{Q},{Q}", "bool", q_is_less_than),
        _o(True, f"{S},{S}", "bool", q_is_less_than),
    ],
    # semver
    "semver": [_o(False, "string", S, semver), _o(False, "string,bool", S, semver)],
    "isSemver": [_o(False, "string", "bool", is_semver), _o(False, "string,bool", "bool", is_semver)],
    "major": [_o(True, S, "int", sv_major)],
    "minor": [_o(True, S, "int", sv_minor)],
    "patch": [_o(True, S, "int", sv_patch)],
}

LIST_TYPE_FUNCTIONS: dict[str, list[Overload]] = {
    "includes": [_o(True, "dyn,dyn", "bool", includes)],
}

RUNTIME_CHECK: dict[str, Callable[[Any], bool]] = {
    "int": lambda v: type(v) is int,
    "uint": lambda v: type(v) is UInt,
    "double": lambda v: type(v) is float,
    "string": lambda v: type(v) is str,
    "bytes": lambda v: type(v) is bytes,
    "bool": lambda v: type(v) is bool,
    "list": lambda v: type(v) is list or type(v) is tuple,
    "map": lambda v: isinstance(v, dict),
    "dyn": lambda v: True,
    Q: lambda v: type(v) is Quantity or type(v) is CelQuantity,
    S: lambda v: type(v) is Semver,
}
