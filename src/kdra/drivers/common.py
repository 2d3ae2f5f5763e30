"""Shared by every driver: quantity strings, ResourceSlice packing under the API limits, pool generations.

Limits are resource.k8s.io/v1 as of Kubernetes 1.35 (KEP-4815 §Limits; shared/reference/dra-semantics.md
§3): 128 devices per slice, 64 when any device has taints or consumesCounters, 8 counter sets per slice, 32
counters per set, 32 attributes+capacities per device, 16 taints per device, and since 1.35 sharedCounters
and devices never in the same slice.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kdra.api.types import Obj
from kdra.errors import InputError

API_VERSION = "resource.k8s.io/v1"
MAX_DEVICES_PER_SLICE = 128
MAX_DEVICES_WITH_TAINTS_OR_COUNTERS = 64
MAX_COUNTER_SETS_PER_SLICE = 8
MAX_COUNTERS_PER_SET = 32
MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_TAINTS_PER_DEVICE = 16
MAX_CONSUMES_COUNTERS = 2

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUFFIXES = (
    (1 << 60, "Ei"),
    (1 << 50, "Pi"),
    (1 << 40, "Ti"),
    (1 << 30, "Gi"),
    (1 << 20, "Mi"),
    (1 << 10, "Ki"),
)


def binary_quantity(n: int) -> str:
    """Kubernetes' canonical string of an integer BinarySI quantity: the largest exact binary suffix."""
    if n == 0:
        return "0"
    for size, suffix in _SUFFIXES:
        if n % size == 0:
            return f"{n // size}{suffix}"
    return str(n)


def int_quantity(n: int) -> str:
    return str(n)


def is_dns_label(name: str) -> bool:
    return len(name) <= 63 and bool(_DNS_LABEL.match(name))


def string_attr(v: str) -> Obj:
    return {"string": v}


def int_attr(v: int) -> Obj:
    return {"int": v}


def bool_attr(v: bool) -> Obj:
    return {"bool": v}


def version_attr(v: str) -> Obj:
    return {"version": semver(v)}


def semver(v: str) -> str:
    """Masterminds semver's String() of a loose version: '9.0' -> '9.0.0', '580.126.20' stays."""
    parts = str(v).split(".")
    nums = [str(int(p)) for p in parts[:3]]
    while len(nums) < 3:
        nums.append("0")
    return ".".join(nums)


def slice_name(node: str, driver: str, suffix: str) -> str:
    """Deterministic slice names '<node>-<driver>-<suffix>', shortened with a hash past the 253-char limit."""
    name = f"{node}-{driver}-{suffix}"
    if len(name) <= 253:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    return f"{name[: 253 - 11]}-{digest}"


def check_device(device: Obj, where: str) -> None:
    """The per-device limits the API server enforces; InputError names the device and the rule."""
    name = device["name"]
    if not is_dns_label(name):
        raise InputError(
            f"{where}: device name {name!r}: must be a DNS label (RFC 1123), at most 63 characters"
        )
    n = len(device.get("attributes", {})) + len(device.get("capacity", {}))
    if n > MAX_ATTRIBUTES_AND_CAPACITIES:
        raise InputError(
            f"{where}: device {name}: {n} attributes and capacities, "
            f"the limit is {MAX_ATTRIBUTES_AND_CAPACITIES}"
        )
    if len(device.get("taints", ())) > MAX_TAINTS_PER_DEVICE:
        raise InputError(f"{where}: device {name}: more than {MAX_TAINTS_PER_DEVICE} taints")
    if len(device.get("consumesCounters", ())) > MAX_CONSUMES_COUNTERS:
        raise InputError(
            f"{where}: device {name}: more than {MAX_CONSUMES_COUNTERS} consumesCounters entries"
        )


@dataclass
class SliceGroup:
    """Devices that belong in their own slice(s) (e.g. one physical GPU under DynamicMIG)."""

    suffix: str
    devices: list[Obj]


@dataclass
class PoolLayout:
    """A driver's view of one pool before it is cut into ResourceSlices."""

    driver: str
    node: str
    groups: list[SliceGroup] = field(default_factory=list)
    counter_sets: list[Obj] = field(default_factory=list)
    max_devices_per_slice: int = MAX_DEVICES_PER_SLICE


def device_limit(devices: Sequence[Obj], requested: int = MAX_DEVICES_PER_SLICE) -> int:
    for d in devices:
        if "consumesCounters" in d or "taints" in d:
            return min(requested, MAX_DEVICES_WITH_TAINTS_OR_COUNTERS)
    return min(requested, MAX_DEVICES_PER_SLICE)


def _chunks(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def layout_specs(layout: PoolLayout) -> list[tuple[str, Obj]]:
    """Cut a pool into (slice suffix, partial spec) pairs that respect every per-slice limit."""
    parts: list[tuple[str, Obj]] = []
    sets = layout.counter_sets
    for i, chunk in enumerate(_chunks(sets, MAX_COUNTER_SETS_PER_SLICE)):
        suffix = "counters" if len(sets) <= MAX_COUNTER_SETS_PER_SLICE else f"counters-{i}"
        parts.append((suffix, {"sharedCounters": list(chunk)}))
    for group in layout.groups:
        if not group.devices:
            continue
        limit = device_limit(group.devices, layout.max_devices_per_slice)
        chunks = list(_chunks(group.devices, limit))
        for i, chunk in enumerate(chunks):
            suffix = group.suffix if len(chunks) == 1 else f"{group.suffix}-{i}"
            parts.append((suffix, {"devices": list(chunk)}))
    return parts


def make_slices(layout: PoolLayout, generation: int = 1, pool: str | None = None) -> list[Obj]:
    """The ResourceSlices of one node-local pool (pool name = node name, as NVIDIA/AMD/TPU drivers do)."""
    parts = layout_specs(layout)
    pool_name = pool or layout.node
    count = len(parts)
    out: list[Obj] = []
    for suffix, partial in parts:
        spec: Obj = {
            "driver": layout.driver,
            "nodeName": layout.node,
            "pool": {"name": pool_name, "generation": generation, "resourceSliceCount": count},
        }
        spec.update(partial)
        out.append(
            {
                "apiVersion": API_VERSION,
                "kind": "ResourceSlice",
                "metadata": {"name": slice_name(layout.node, layout.driver, suffix)},
                "spec": spec,
            }
        )
    return out


def device_class(name: str, expression: str, extended_resource: str | None = None) -> Obj:
    spec: Obj = {"selectors": [{"cel": {"expression": expression}}]}
    if extended_resource:
        spec["extendedResourceName"] = extended_resource
    return {"apiVersion": API_VERSION, "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


def _fingerprint(slices: Sequence[Obj]) -> str:
    """Content hash of a pool ignoring generation, so republishing unchanged devices keeps the generation."""
    h = hashlib.sha256()
    for s in sorted(slices, key=lambda s: s["metadata"]["name"]):
        spec = dict(s["spec"])
        spec["pool"] = {k: v for k, v in spec["pool"].items() if k != "generation"}
        h.update(s["metadata"]["name"].encode())
        h.update(json.dumps(spec, sort_keys=True, separators=(",", ":")).encode())
    return h.hexdigest()


class PoolPublisher:
    """Tracks what a driver last published per pool and bumps `pool.generation` when the devices change.

    A real kubelet plugin republishes every slice of a pool with generation+1 whenever the pool's contents
    change (a MIG reconfiguration, a GPU gone missing); consumers ignore slices of older generations.
    Publishing the same content again keeps the generation, so a resync is a no-op.
    """

    def __init__(self) -> None:
        self._state: dict[tuple[str, str], tuple[int, str]] = {}

    def generation(self, driver: str, pool: str) -> int:
        return self._state.get((driver, pool), (0, ""))[0]

    def publish(self, layout: PoolLayout, pool: str | None = None) -> list[Obj]:
        pool_name = pool or layout.node
        key = (layout.driver, pool_name)
        slices = make_slices(layout, 1, pool_name)
        fp = _fingerprint(slices)
        gen, last = self._state.get(key, (0, ""))
        if fp != last:
            gen += 1
            self._state[key] = (gen, fp)
        for s in slices:
            s["spec"]["pool"]["generation"] = gen
        return slices
