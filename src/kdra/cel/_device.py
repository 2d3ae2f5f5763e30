"""The `device` variable: a ResourceSlice device's attributes and capacity as native Python maps."""

from __future__ import annotations

from typing import Any

from kdra.api.quantity import parse_quantity_any
from kdra.cel._values import Semver


class DomainMap(dict[str, dict[str, Any]]):
    """device.attributes / device.capacity: an unknown domain reads as an empty map (compile.go mapper)."""

    __slots__ = ()

    def __missing__(self, key: Any) -> dict[str, Any]:
        return _EMPTY


_EMPTY: dict[str, Any] = {}

_LIST_FIELDS = ("ints", "bools", "strings", "versions")


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
        "_err_lists",
        "_err_scalar",
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

    def prepare(self) -> None:
        """Convert attributes and capacity once (DeviceMatches' eager conversion in compile.go)."""
        driver = self.driver
        attrs = DomainMap()
        err_lists: str | None = None
        err_scalar: str | None = None
        for name, raw in self._raw_attributes.items():
            value: Any = None
            scalar_ok = False
            list_ok = False
            msg: str | None = None
            if isinstance(raw, dict):
                for lf in _LIST_FIELDS:
                    lv = raw.get(lf)
                    if lv is not None:
                        list_ok = True
                        if lf == "versions":
                            try:
                                value = [Semver.parse(v) for v in lv]
                            except (ValueError, TypeError) as e:
                                msg = f"attribute {name}: parse semantic version: {e}"
                        else:
                            value = list(lv)
                        break
                if not list_ok:
                    if raw.get("int") is not None:
                        value = raw["int"]
                        scalar_ok = True
                    elif raw.get("bool") is not None:
                        value = raw["bool"]
                        scalar_ok = True
                    elif raw.get("string") is not None:
                        value = raw["string"]
                        scalar_ok = True
                    elif raw.get("version") is not None:
                        scalar_ok = True
                        try:
                            value = Semver.parse(raw["version"])
                        except (ValueError, TypeError) as e:
                            msg = f"attribute {name}: parse semantic version: {e}"
            unsupported = f"attribute {name}: unsupported attribute value"
            if list_ok:
                if err_lists is None and msg is not None:
                    err_lists = msg
                if err_scalar is None:
                    # without DRAListTypeAttributes a list value is not a supported value
                    scalar_fallback = isinstance(raw, dict) and any(
                        raw.get(k) is not None for k in ("int", "bool", "string", "version")
                    )
                    if not scalar_fallback:
                        err_scalar = unsupported
            elif scalar_ok:
                if msg is not None:
                    err_lists = err_lists or msg
                    err_scalar = err_scalar or msg
            else:
                err_lists = err_lists or unsupported
                err_scalar = err_scalar or unsupported
            domain, ident = _split(name, driver)
            inner = attrs.get(domain)
            if inner is None:
                inner = attrs[domain] = {}
            inner[ident] = value
        caps = DomainMap()
        for name, raw in self._raw_capacity.items():
            domain, ident = _split(name, driver)
            v = raw.get("value") if isinstance(raw, dict) else raw
            try:
                q = parse_quantity_any(v)
            except ValueError as e:
                err_lists = err_lists or f"capacity {name}: {e}"
                err_scalar = err_scalar or f"capacity {name}: {e}"
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
