"""A worst-case cost estimate in the spirit of cel-go's EstimateCost, for validation.

Every evaluated node costs 1; a comprehension costs its range size times its body; sizes come from
literals or from the device's declared bounds (attribute strings <= 64 chars, list attributes <= 64
values, <= 32 attributes per device). The runtime limit in _compiler/_functions is what protects
kdra; this estimate only lets validation reject obviously unbounded expressions early.
"""

from __future__ import annotations

from kdra.cel._compiler import Env
from kdra.cel._parser import Call, Ident, Index, ListLit, Lit, MapLit, MessageLit, Node, Select

_MAX_VALUE_LEN = 64  # DeviceAttributeMaxValueLength
_MAX_ATTRS = 32  # ResourceSliceMaxAttributesAndCapacitiesPerDevice
_MACROS = frozenset(("all", "exists", "exists_one", "map", "filter"))
_LINEAR = frozenset(
    (
        "contains",
        "matches",
        "find",
        "findAll",
        "split",
        "replace",
        "lowerAscii",
        "upperAscii",
        "indexOf",
        "lastIndexOf",
        "join",
        "isSorted",
        "sum",
        "min",
        "max",
        "sets.contains",
        "sets.equivalent",
        "sets.intersects",
        "@in",
        "_+_",
    )
)
_CAP = (1 << 64) - 1
# functions upstream's estimator cannot bound (library.CostEstimator has no size for them): cel-go
# charges them ~MaxUint64/10, so validation rejects any expression using them as too complex
_UNBOUNDED = frozenset(("type", "join"))
_UNBOUNDED_COST = _CAP // 10


def _is_list(n: Node, sizes: dict[str, int]) -> bool:
    if isinstance(n, ListLit):
        return True
    if isinstance(n, Ident):
        return bool(sizes.get("@list:" + n.name))
    if isinstance(n, Call):
        if n.function in ("map", "filter", "split", "findAll") and n.target is not None:
            return True
        if n.function == "_+_":
            return any(_is_list(a, sizes) for a in n.args)
    return False


def _size(n: Node, sizes: dict[str, int]) -> int:
    """Upper bound of the number of elements (or characters) n can have."""
    if isinstance(n, ListLit):
        return len(n.items)
    if isinstance(n, MapLit):
        return len(n.entries)
    if isinstance(n, Lit):
        return len(n.value) if isinstance(n.value, str | bytes) else 1
    if isinstance(n, Ident):
        return sizes.get(n.name, _MAX_VALUE_LEN)
    if isinstance(n, Call):
        if n.function in ("map", "filter") and n.target is not None:
            return _size(n.target, sizes)
        if n.function == "_+_":
            if any(_is_list(a, sizes) for a in n.args):
                return _MAX_ATTRS  # upstream does not grow list sizes through concatenation
            return min(_CAP, sum(_size(a, sizes) for a in n.args))
        if n.function == "_?_:_":
            return max(_size(n.args[1], sizes), _size(n.args[2], sizes))
        if n.function == "split" and n.target is not None:
            return _size(n.target, sizes)
        if n.function == "bind" and isinstance(n.target, Ident) and n.target.name == "cel":
            var = n.args[0]
            inner = dict(sizes)
            if isinstance(var, Ident):
                inner[var.name] = _size(n.args[1], sizes)
                inner["@list:" + var.name] = int(_is_list(n.args[1], sizes))
            return _size(n.args[2], inner)
    if isinstance(n, Select | Index):
        return _MAX_VALUE_LEN
    return _MAX_ATTRS


def _cost(n: Node, sizes: dict[str, int]) -> int:
    if isinstance(n, Lit):
        return 0
    if isinstance(n, Ident):
        return 1
    if isinstance(n, Select):
        return 1 + _cost(n.operand, sizes)
    if isinstance(n, Index):
        return 1 + _cost(n.operand, sizes) + _cost(n.index, sizes)
    if isinstance(n, ListLit):
        return 1 + sum(_cost(x, sizes) for x in n.items)
    if isinstance(n, MapLit):
        return 1 + sum(_cost(k, sizes) + _cost(v, sizes) for k, v in n.entries)
    if isinstance(n, MessageLit):
        return 1 + sum(_cost(v, sizes) for _, v in n.fields)
    if isinstance(n, Call):
        if n.target is not None and n.function in _MACROS and n.args and isinstance(n.args[0], Ident):
            rng = _size(n.target, sizes)
            inner = dict(sizes)
            inner[n.args[0].name] = _MAX_VALUE_LEN
            body = sum(_cost(x, inner) for x in n.args[1:]) + 1
            return min(_CAP, _cost(n.target, sizes) + rng * body)
        if (
            n.function == "bind"
            and isinstance(n.target, Ident)
            and n.target.name == "cel"
            and len(n.args) == 3
        ):
            var = n.args[0]
            inner = dict(sizes)
            if isinstance(var, Ident):
                inner[var.name] = _size(n.args[1], sizes)
                inner["@list:" + var.name] = int(_is_list(n.args[1], sizes))
            return min(_CAP, _cost(n.args[1], sizes) + _cost(n.args[2], inner))
        if n.function in _UNBOUNDED:
            return _UNBOUNDED_COST
        total = 1 + sum(_cost(x, sizes) for x in n.args)
        if n.target is not None:
            total += _cost(n.target, sizes)
        if n.function in _LINEAR:
            args = ([n.target] if n.target is not None else []) + list(n.args)
            if n.function == "_+_" and any(_is_list(a, sizes) for a in args):
                return min(_CAP, total)
            total += sum(_size(x, sizes) for x in args) // 10
        return min(_CAP, total)
    return 1


def estimate(ast: Node, env: Env) -> int:
    del env
    return _cost(ast, {})
