"""The attribute and capacity names a fleet's devices publish, with an example value and a CEL snippet.

A selector must name attributes exactly as the driver publishes them (`device.attributes["gpu.nvidia.com"]
.productName`, not `.model`), and the names differ by driver and device type. This lists, per driver and
device type (the `type` attribute: gpu, mig, ...), every attribute and capacity name the fleet's rendered
ResourceSlices carry, how many devices have it, one value, and a selector that matches that value, which
compiles in the DRA CEL environment (tests check it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

_VALUE_KINDS = ("string", "int", "bool", "version")


@dataclass
class NameInfo:
    name: str  # as in the slice: unqualified (the driver's domain) or domain/name
    kind: str  # string | int | bool | version | capacity
    example: str
    devices: int = 0
    values: set[str] = field(default_factory=set)

    def qualified(self, driver: str) -> str:
        """The fully qualified name, as matchAttribute/distinctAttribute take it."""
        return self.name if "/" in self.name else f"{driver}/{self.name}"

    def cel(self, driver: str, guard: bool = False) -> str:
        """A selector matching the example value. `guard`: not every device of the type has the name, and a
        selector that reads a missing key is a runtime error that fails the whole allocation, so test for
        it first."""
        domain, _, ident = self.qualified(driver).rpartition("/")
        where = "capacity" if self.kind == "capacity" else "attributes"
        ref = f'device.{where}["{domain}"].{ident}'
        if self.kind == "capacity":
            expr = f'{ref}.compareTo(quantity("{self.example}")) >= 0'
        elif self.kind == "string":
            expr = f"{ref} == {json.dumps(self.example)}"
        elif self.kind == "version":
            expr = f'{ref}.compareTo(semver("{self.example}")) >= 0'
        else:
            expr = f"{ref} == {self.example}"
        return f'"{ident}" in device.{where}["{domain}"] && {expr}' if guard else expr

    def to_dict(self, driver: str, of: int = 0) -> dict[str, Any]:
        return {
            "name": self.name,
            "qualifiedName": self.qualified(driver),
            "kind": self.kind,
            "example": self.example,
            "devices": self.devices,
            "distinctValues": len(self.values),
            "cel": self.cel(driver, guard=self.devices < of),
        }


@dataclass
class DeviceType:
    driver: str
    type: str
    devices: int = 0
    attributes: dict[str, NameInfo] = field(default_factory=dict)
    capacity: dict[str, NameInfo] = field(default_factory=dict)
    classes: dict[str, int] = field(default_factory=dict)  # DeviceClass -> devices of this type it selects

    def to_dict(self) -> dict[str, Any]:
        return {
            "driver": self.driver,
            "type": self.type,
            "devices": self.devices,
            "deviceClasses": [{"name": k, "devices": v} for k, v in sorted(self.classes.items())],
            "attributes": [
                a.to_dict(self.driver, self.devices) for a in sorted(self.attributes.values(), key=_order)
            ],
            "capacity": [
                c.to_dict(self.driver, self.devices) for c in sorted(self.capacity.values(), key=_order)
            ],
        }


def _order(n: NameInfo) -> tuple[bool, str]:
    return ("/" in n.name, n.name)


def _attr_value(raw: Mapping[str, Any]) -> tuple[str, str] | None:
    for kind in _VALUE_KINDS:
        if kind in raw:
            v = raw[kind]
            return kind, ("true" if v is True else "false" if v is False else str(v))
    return None


def _class_matchers(objects: Iterable[Mapping[str, Any]]) -> list[tuple[str, list[Any]]]:
    from kdra.cel import compile_selector

    out = []
    for obj in objects:
        if obj.get("kind") == "DeviceClass":
            exprs = [
                ((sel or {}).get("cel") or {}).get("expression", "")
                for sel in (obj.get("spec") or {}).get("selectors") or []
            ]
            out.append((str(obj["metadata"]["name"]), [compile_selector(e) for e in exprs if e]))
    return out


def collect(objects: Iterable[Mapping[str, Any]]) -> list[DeviceType]:
    """Scan ResourceSlices: per (driver, device type) every attribute and capacity name, and which of the
    DeviceClasses among the objects select how many of its devices."""
    from kdra.cel import CELRuntimeError, device_input

    objects = list(objects)
    classes = _class_matchers(objects)
    types: dict[tuple[str, str], DeviceType] = {}
    for obj in objects:
        if obj.get("kind") != "ResourceSlice":
            continue
        spec = obj.get("spec") or {}
        driver = str(spec.get("driver", ""))
        for dev in spec.get("devices") or []:
            attrs = dev.get("attributes") or {}
            tv = _attr_value(attrs.get("type") or {})
            key = (driver, tv[1] if tv else "-")
            dt = types.get(key)
            if dt is None:
                dt = types[key] = DeviceType(*key)
            dt.devices += 1
            if classes:
                inp = device_input(driver, attrs, dev.get("capacity") or {}, False)
                for cname, programs in classes:
                    try:
                        selected = all(p.matches(inp) for p in programs)
                    except CELRuntimeError:
                        selected = False
                    if selected:
                        dt.classes[cname] = dt.classes.get(cname, 0) + 1
            for name, raw in attrs.items():
                got = _attr_value(raw or {})
                if got is None:
                    continue
                info = dt.attributes.get(name)
                if info is None:
                    info = dt.attributes[name] = NameInfo(name, got[0], got[1])
                info.devices += 1
                if len(info.values) < 1000:
                    info.values.add(got[1])
            for name, raw in (dev.get("capacity") or {}).items():
                value = str((raw or {}).get("value", ""))
                info = dt.capacity.get(name)
                if info is None:
                    info = dt.capacity[name] = NameInfo(name, "capacity", value)
                info.devices += 1
                if len(info.values) < 1000:
                    info.values.add(value)
    return [types[k] for k in sorted(types)]


__all__ = ["DeviceType", "NameInfo", "collect"]
