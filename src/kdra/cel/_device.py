"""The `device` variable: a ResourceSlice device's attributes and capacity as native Python maps."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from kdra.api.quantity import parse_quantity_any
from kdra.cel._functions import cel_quantity_of
from kdra.cel._values import EvalError, Semver


class DomainMap(dict[str, dict[str, Any]]):
    """device.attributes / device.capacity: an unknown domain reads as an empty map (compile.go mapper)."""

    __slots__ = ()

    def __missing__(self, key: Any) -> dict[str, Any]:
        return _EMPTY


_EMPTY: dict[str, Any] = {}


class _Invalid:
    """An attribute value CEL cannot represent (unknown type, unparsable version)."""

    __slots__ = ()


INVALID = _Invalid()


class AttributeMap(dict[str, Any]):
    """One domain's attributes as Kubernetes 1.38 gives them to CEL (compile.go nameToAttributes): a
    value it cannot represent fails only the expression that reads it, `in` does not see it, size()
    counts it."""

    __slots__ = ()

    def __getitem__(self, key: str) -> Any:
        v = dict.__getitem__(self, key)
        if v is INVALID:
            raise EvalError(f"attribute {key}: value is invalid or its type is not supported by this version")
        return v

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if dict.__contains__(self, key) else default

    def __contains__(self, key: object) -> bool:
        return (
            isinstance(key, str)
            and dict.__contains__(self, key)
            and dict.__getitem__(self, key) is not INVALID
        )

    def has(self, key: str) -> bool:
        """has(m.key): true, false, or the value's error."""
        if not dict.__contains__(self, key):
            return False
        self[key]
        return True


class LazyView:
    """The device with 1.38's attribute maps (see AttributeMap); everything else as the device's."""

    __slots__ = ("allow_multiple_allocations", "attributes", "capacity", "driver")

    def __init__(self, device: CelDevice) -> None:
        self.driver = device.driver
        self.allow_multiple_allocations = device.allow_multiple_allocations
        self.capacity = device.capacity
        attrs = DomainMap()
        for name, raw in device._raw_attributes.items():
            kind, value, _ = _convert(raw)
            if kind is not _SCALAR and kind is not _LIST:
                value = INVALID
            domain, ident = _split(name, device.driver)
            inner = attrs.get(domain)
            if inner is None:
                inner = attrs[domain] = AttributeMap()
            if "/" in name or ident not in inner:  # the qualified spelling wins
                inner[ident] = value
        self.attributes = attrs


_LIST_FIELDS = ("ints", "bools", "strings", "versions")


_SCALAR = "scalar"
_LIST = "list"
_BAD = "bad"
_PARSE_ERROR = "parse-error"


@lru_cache(maxsize=4096)
def _semver(v: str) -> Semver:
    return Semver.parse(v)


def _convert(raw: Any) -> tuple[str, Any, str | None]:
    """getAttributeValue: (kind, value, error). Lists win over scalars, as in compile.go."""
    if type(raw) is not dict:
        return _BAD, None, None
    if len(raw) == 1:
        for k, v in raw.items():
            if v is None:
                return _BAD, None, None
            if k == "string" or k == "int" or k == "bool":
                return _SCALAR, v, None
            if k == "version":
                try:
                    return _SCALAR, _semver(v), None
                except (ValueError, TypeError) as e:
                    return _PARSE_ERROR, None, f"parse semantic version: {e}"
    for lf in _LIST_FIELDS:
        lv = raw.get(lf)
        if lv is not None:
            if lf == "versions":
                try:
                    return _LIST, [_semver(x) for x in lv], None
                except (ValueError, TypeError) as e:
                    return _LIST, None, f"parse semantic version: {e}"
            return _LIST, list(lv), None
    for k in ("int", "bool", "string"):
        v = raw.get(k)
        if v is not None:
            return _SCALAR, v, None
    v = raw.get("version")
    if v is not None:
        try:
            return _SCALAR, _semver(v), None
        except (ValueError, TypeError) as e:
            return _PARSE_ERROR, None, f"parse semantic version: {e}"
    return _BAD, None, None


def _split(name: str, driver: str) -> tuple[str, str]:
    sep = name.find("/")
    if sep == -1:
        return driver, name
    return name[:sep], name[sep + 1 :]


class CelDevice:
    """One device as seen by CEL selectors. Build once per device per slice version.

    Conversion is lazy: nothing is parsed until the first evaluation, then the converted maps and any
    conversion error are kept for every later evaluation.
    """

    __slots__ = (
        "_attributes",
        "_capacity",
        "_err_capacity",
        "_err_lists",
        "_err_scalar",
        "_lazy",
        "_raw_attributes",
        "_raw_capacity",
        "allow_multiple_allocations",
        "attributes",
        "capacity",
        "driver",
    )

    def __init__(
        self,
        driver: str,
        attributes: dict[str, Any] | None,
        capacity: dict[str, Any] | None,
        allow_multiple_allocations: bool | None,
    ) -> None:
        self.driver = driver
        self.allow_multiple_allocations = bool(allow_multiple_allocations)
        self._raw_attributes = attributes or {}
        self._raw_capacity = capacity or {}
        self.attributes: DomainMap | None = None
        self.capacity: DomainMap | None = None
        self._err_lists: str | None = None  # error with DRAListTypeAttributes enabled
        self._err_scalar: str | None = None  # error with it disabled
        self._err_capacity: str | None = None  # a capacity's error (1.38 reads attributes lazily)
        self._lazy: LazyView | None = None

    def lazy_view(self) -> LazyView:
        """The device as Kubernetes 1.38's CEL sees it (prepare() first)."""
        if self._lazy is None:
            self._lazy = LazyView(self)
        return self._lazy

    def prepare(self) -> None:
        """Convert attributes and capacity once (DeviceMatches' eager conversion in compile.go)."""
        driver = self.driver
        attrs = DomainMap()
        own: dict[str, Any] = {}
        err_lists: str | None = None
        err_scalar: str | None = None
        for name, raw in self._raw_attributes.items():
            kind, value, msg = _convert(raw)
            if kind is not _SCALAR:
                if kind is _LIST:
                    if msg is not None:
                        err_lists = err_lists or f"attribute {name}: {msg}"
                    # without DRAListTypeAttributes a list value is not a supported value
                    err_scalar = err_scalar or f"attribute {name}: unsupported attribute value"
                elif kind is _BAD:
                    msg = f"attribute {name}: unsupported attribute value"
                    err_lists = err_lists or msg
                    err_scalar = err_scalar or msg
                else:  # a value that failed to parse (version)
                    msg = f"attribute {name}: {msg}"
                    err_lists = err_lists or msg
                    err_scalar = err_scalar or msg
            sep = name.find("/")
            if sep == -1:
                own[name] = value
            else:
                domain = name[:sep]
                if domain == driver:
                    own[name[sep + 1 :]] = value
                else:
                    inner = attrs.get(domain)
                    if inner is None:
                        inner = attrs[domain] = {}
                    inner[name[sep + 1 :]] = value
        if own:
            prev = attrs.get(driver)
            attrs[driver] = {**prev, **own} if prev else own
        caps = DomainMap()
        for name, raw in self._raw_capacity.items():
            domain, ident = _split(name, driver)
            v = raw.get("value") if isinstance(raw, dict) else raw
            try:
                q = parse_quantity_any(v)
                if isinstance(v, str):
                    q = cel_quantity_of(q, v.strip())
            except ValueError as e:
                err_lists = err_lists or f"capacity {name}: {e}"
                err_scalar = err_scalar or f"capacity {name}: {e}"
                self._err_capacity = self._err_capacity or f"capacity {name}: {e}"
                continue
            inner = caps.get(domain)
            if inner is None:
                inner = caps[domain] = {}
            inner[ident] = q
        self._err_lists = err_lists
        self._err_scalar = err_scalar
        self.capacity = caps
        self.attributes = attrs

    def __repr__(self) -> str:
        return f"CelDevice(driver={self.driver!r}, attributes={self._raw_attributes!r})"


def device_input(
    driver: str,
    attributes: dict[str, Any] | None,
    capacity: dict[str, Any] | None,
    allow_multiple_allocations: bool | None = False,
) -> CelDevice:
    """Wrap a ResourceSlice device (its dicts as served) for evaluation; conversion happens lazily."""
    return CelDevice(driver, attributes, capacity, allow_multiple_allocations)
