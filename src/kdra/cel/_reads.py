"""What of the device an expression can read: the inputs its result and runtime cost depend on.

CEL is deterministic: a selector's outcome on a device (true, false, or which error) and the cost it took
are a function of the device fields it reads. `device_reads` finds them in the parsed expression when every
use of `device` is a fixed path (`device.driver`, `device.allowMultipleAllocations`,
`device.attributes["domain"].name` or `["domain"]["name"]`, the same for `device.capacity`), so that a
result can be shared by devices that agree on those fields (every GPU of one model, whatever its uuid).
Any other use (the device or a domain map as a whole, a computed key, a macro variable named `device`)
gives None: the whole device is the input.
"""

from __future__ import annotations

from functools import lru_cache

from kdra.cel._device import CelDevice, _split
from kdra.cel._parser import (
    Call,
    Ident,
    Index,
    ListLit,
    Lit,
    MapLit,
    MessageLit,
    Node,
    ParseError,
    Select,
    parse,
)

DevicePath = tuple[str, ...]  # ("driver",) or ("attributes" | "capacity", domain, name)

_FIELDS = frozenset({"driver", "allowMultipleAllocations"})
_MAPS = frozenset({"attributes", "capacity"})


class _Opaque(Exception):
    """`device` is used in a way that reads more than fixed paths."""


def _is_device(n: Node) -> bool:
    return isinstance(n, Ident) and n.name == "device"


def _string(n: Node) -> str | None:
    return n.value if isinstance(n, Lit) and n.kind == "string" else None


def _path(n: Node) -> DevicePath | None:
    """The fixed device path `n` reads, if it is one."""
    if isinstance(n, Select) and _is_device(n.operand) and n.field in _FIELDS:
        return (n.field,)
    if isinstance(n, Select):
        leaf: str | None = n.field
        inner = n.operand
    elif isinstance(n, Index):
        leaf = _string(n.index)
        inner = n.operand
    else:
        return None
    if leaf is None or not isinstance(inner, Index):
        return None
    domain = _string(inner.index)
    top = inner.operand
    if domain is None or not (isinstance(top, Select) and _is_device(top.operand) and top.field in _MAPS):
        return None
    return (top.field, domain, leaf)


def _children(n: Node) -> list[Node]:
    if isinstance(n, Select):
        return [n.operand]
    if isinstance(n, Index):
        return [n.operand, n.index]
    if isinstance(n, Call):
        return [*([n.target] if n.target is not None else []), *n.args]
    if isinstance(n, ListLit):
        return list(n.items)
    if isinstance(n, MapLit):
        return [x for kv in n.entries for x in kv]
    if isinstance(n, MessageLit):
        return [v for _, v in n.fields]
    return []


def _collect(n: Node, out: set[DevicePath]) -> None:
    stack = [n]
    while stack:
        node = stack.pop()
        p = _path(node)
        if p is not None:
            out.add(p)
        elif _is_device(node):
            raise _Opaque
        else:
            stack.extend(_children(node))


@lru_cache(maxsize=1024)
def device_reads(expression: str) -> frozenset[DevicePath] | None:
    """The device paths `expression` can read, or None when it may read more (or does not parse)."""
    try:
        ast = parse(expression)
    except ParseError:  # it will not compile either: no result to share
        return None
    out: set[DevicePath] = set()
    try:
        _collect(ast, out)
    except _Opaque:
        return None
    return frozenset(out)


def selector_input_key(expressions: tuple[str, ...], device: CelDevice) -> tuple[object, ...] | None:
    """What the outcome of `expressions` on `device` depends on, as a hashable key: the driver (bare
    attribute names belong to its domain), whether it allows multiple allocations, the errors converting
    its attributes and capacity (they fail an evaluation before it starts), and, for each path the
    expressions read, every raw entry that gives it its value, in the device's order (the last spelling of
    a name wins). None when an expression may read more than fixed paths."""
    paths: set[DevicePath] = set()
    for expr in expressions:
        reads = device_reads(expr)
        if reads is None:
            return None
        paths |= reads
    if device.attributes is None:
        device.prepare()
    driver = device.driver
    key: list[object] = [
        driver,
        device.allow_multiple_allocations,
        device._err_lists,
        device._err_scalar,
        device._err_capacity,
    ]
    for path in sorted(paths):
        if len(path) == 3:
            raw = device._raw_attributes if path[0] == "attributes" else device._raw_capacity
            want = (path[1], path[2])
            key.append(tuple((name, repr(v)) for name, v in raw.items() if _split(name, driver) == want))
    return tuple(key)
