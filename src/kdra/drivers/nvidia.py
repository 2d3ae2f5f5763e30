"""gpu.nvidia.com: the ResourceSlices NVIDIA's DRA driver publishes, from simulated or NVML-discovered GPUs.

Shapes follow kubernetes-sigs/dra-driver-nvidia-gpu (peers.md §2.1; cmd/gpu-kubelet-plugin deviceinfo.go,
partitions.go, consumable_shares.go, nvlib.go):

* one pool per node, named after the node;
* default mode: full GPUs `gpu-<minor>` (capacity `memory` = NVML total); a GPU in MIG mode is published only
  as its existing MIG devices `gpu-<minor>-mig-<profile>-<giProfileId>-<placementStart>` with `uuid` and
  `memorySlice<N>` capacities;
* DynamicMIG (k8s >= 1.35 split layout): one counter set `gpu-<minor>-counter-set` per GPU, all in their own
  slice(s), then one device slice per GPU holding the full GPU (Hopper+, or a GPU with MIG off) and every
  possible MIG placement, each consuming its counters and memory slices;
* consumable shares: `allowMultipleAllocations` and a `memory` requestPolicy (plus `shares` for a count);
* standard attributes resource.kubernetes.io/{pciBusID,pcieRoot,numaNode}.

Devices are announced sorted by name: the scheduler takes the first match, so order is part of the contract.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kdra.api.types import Obj
from kdra.api.versions import DEFAULT_VERSION
from kdra.api.wellknown import NVIDIA_GPU_CLASS, NVIDIA_GPU_DRIVER, NVIDIA_GPU_RESOURCE, NVIDIA_MIG_CLASS
from kdra.drivers.catalog import GpuModel, MigProfile
from kdra.drivers.common import (
    PoolLayout,
    SliceGroup,
    binary_quantity,
    device_class,
    int_attr,
    string_attr,
    version_attr,
)
from kdra.errors import InputError

DRIVER = NVIDIA_GPU_DRIVER
DEFAULT_DRIVER_VERSION = "580.126.20"
DEFAULT_CUDA_DRIVER_VERSION = "13.0.0"
STD = "resource.kubernetes.io"
NVLINK_DOMAIN_ATTRIBUTE = "kdra.dev/nvlinkDomain"  # kdra's own: no upstream driver publishes an NVLink domain
_UUID_NS = uuidlib.UUID("6f1c1f8e-5d2a-4c1b-9a57-2f6b6a2d4e10")

_COUNTER_NAMES = {
    "multiprocessors": "multiprocessors",
    "copyEngines": "copy-engines",
    "decoders": "decoders",
    "encoders": "encoders",
    "jpegEngines": "jpeg-engines",
    "ofaEngines": "ofa-engines",
    "memory": "memory",
}


@dataclass(frozen=True)
class MigDevice:
    """An existing (created) MIG device, as NVML lists it under its parent GPU."""

    uuid: str
    profile: MigProfile
    placement_start: int


@dataclass(frozen=True)
class GpuInfo:
    """One physical GPU: the inputs of the driver, whether they come from the catalog or from NVML."""

    minor: int
    uuid: str
    product_name: str
    brand: str
    architecture: str
    cuda_compute_capability: str
    memory_bytes: int
    pci_bus_id: str | None = None
    pcie_root: str | None = None
    numa_node: int | None = None
    addressing_mode: str | None = None
    mig_enabled: bool = False
    mig_toggle_without_reset: bool = False
    mig_profiles: tuple[MigProfile, ...] = ()
    memory_slice_count: int = 0
    mig_devices: tuple[MigDevice, ...] = ()
    model_key: str = ""

    @property
    def name(self) -> str:
        return f"gpu-{self.minor}"


@dataclass(frozen=True)
class NvidiaConfig:
    """Driver-wide settings: the feature gates and flags of the real kubelet plugin that change its output."""

    driver_version: str = DEFAULT_DRIVER_VERSION
    cuda_driver_version: str = DEFAULT_CUDA_DRIVER_VERSION
    dynamic_mig: bool = False  # feature gate DynamicMIG
    consumable_shares: str | int | None = None  # --consumable-shares=unlimited|memory|<N>
    # The cluster's Kubernetes release: resource.kubernetes.io/numaNode is a standard attribute from 1.37
    # (KEP-6072, deviceattribute.StandardDeviceAttributeNUMANode); a 1.36 driver does not publish it.
    kubernetes_version: str = DEFAULT_VERSION


def mig_device_name(minor: int, profile: MigProfile, start: int) -> str:
    return f"gpu-{minor}-mig-{profile.canonical}-{profile.gi_profile_id}-{start}"


# --- simulated hardware -------------------------------------------------------------------------------------

_BUSES_8 = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)  # peers.md §2.5 (an 8-GPU HGX board)


def pci_layout(index: int, count: int) -> tuple[str, str, int]:
    """Plausible (pciBusID, pcieRoot, numaNode) for GPU `index` of `count`: half the GPUs on each socket."""
    bus = _BUSES_8[(index * 8) // count] if count <= 8 else 0x18 + index * (0xE0 // count)
    numa = 0 if index < (count + 1) // 2 else 1
    return f"0000:{bus:02x}:00.0", f"pci0000:{bus - 3:02x}", numa


def pci_topology(
    index: int, count: int, roots: Sequence[int] = (), numa: Sequence[int] = ()
) -> tuple[str, str, int]:
    """(pciBusID, pcieRoot, numaNode) of GPU `index` of `count` for a given layout: `roots[i]` is the PCIe
    root (switch / root complex) GPU i hangs off, `numa[i]` its NUMA node; GPUs on one root share its
    `pci0000:xx` and get consecutive buses below it. Empty: `pci_layout`'s default."""
    bus, root, node = pci_layout(index, count)
    if roots:
        n_roots = max(roots) + 1
        r = roots[index]
        base = 0x15 + r * (0xE0 // max(n_roots, 1))
        k = sum(1 for g in range(index) if roots[g] == r)
        bus_n = base + 3 + 2 * k
        bus, root = f"0000:{bus_n:02x}:00.0", f"pci0000:{base:02x}"
    if numa:
        node = numa[index]
    return bus, root, node


def simulated_uuid(prefix: str, *parts: object) -> str:
    return f"{prefix}-{uuidlib.uuid5(_UUID_NS, '/'.join(str(p) for p in parts))}"


def simulated_gpu(
    model: GpuModel,
    node: str,
    index: int,
    count: int,
    *,
    mig_enabled: bool = False,
    mig_layout: Sequence[tuple[MigProfile, int]] = (),
    pcie_roots: Sequence[int] = (),
    numa_nodes: Sequence[int] = (),
) -> GpuInfo:
    """A GpuInfo for GPU `index` of a simulated node, as NVML would report it."""
    bus, root, numa = pci_topology(index, count, pcie_roots, numa_nodes)
    migs = tuple(
        MigDevice(simulated_uuid("MIG", node, index, p.gi_profile_id, start), p, start)
        for p, start in mig_layout
    )
    return GpuInfo(
        minor=index,
        uuid=simulated_uuid("GPU", node, index),
        product_name=model.product_name,
        brand=model.brand,
        architecture=model.architecture,
        cuda_compute_capability=model.compute_capability,
        memory_bytes=model.memory_bytes,
        pci_bus_id=bus,
        pcie_root=root,
        numa_node=numa,
        addressing_mode=model.addressing_mode,
        mig_enabled=mig_enabled,
        mig_toggle_without_reset=model.mig_toggle_without_reset,
        mig_profiles=model.mig_profiles,
        memory_slice_count=model.memory_slice_count,
        mig_devices=migs,
        model_key=model.key,
    )


def place_mig_layout(model: GpuModel, profiles: Sequence[str], where: str) -> list[tuple[MigProfile, int]]:
    """Place a static MIG layout on one GPU like `nvidia-smi mig -cgi` would, or explain why it cannot fit.

    A layout fits when every profile gets one of its placements on free memory slices and the sum of their
    capacities (SMs, engines, memory) stays within the GPU's — exactly the constraints DynamicMIG's counters
    express, so a static layout is valid iff the same devices could be allocated together dynamically.
    """
    if not model.mig_capable:
        raise InputError(f"{where}: model {model.key} does not support MIG")
    resolved: list[MigProfile] = []
    for name in profiles:
        try:
            resolved.append(model.profile(name))
        except KeyError:
            known = ", ".join(p.name for p in model.mig_profiles)
            raise InputError(
                f"{where}: unknown MIG profile {name!r} for {model.key}; known: {known}"
            ) from None
    for p in {p.name: p for p in resolved}.values():
        n = sum(1 for q in resolved if q.name == p.name)
        if n > p.max_instances:
            raise InputError(
                f"{where}: {n} x {p.name} exceeds the profile's maximum of {p.max_instances} instances"
            )
    limits = model.max_mig_capacities()
    for cap, limit in limits.items():
        total = sum(p.capacities()[cap] for p in resolved)
        if total > limit:
            raise InputError(
                f"{where}: layout {list(profiles)} needs {total} {cap}, {model.key} has {limit} "
                "(impossible MIG layout)"
            )
    order = sorted(
        range(len(resolved)), key=lambda i: (-resolved[i].memory_slices, -resolved[i].compute_slices, i)
    )
    used = [False] * model.memory_slice_count
    chosen: dict[int, int] = {}

    def search(k: int) -> bool:
        if k == len(order):
            return True
        i = order[k]
        p = resolved[i]
        for start in p.placements:
            span = range(start, start + p.memory_slices)
            if span.stop > len(used) or any(used[s] for s in span):
                continue
            for s in span:
                used[s] = True
            chosen[i] = start
            if search(k + 1):
                return True
            for s in span:
                used[s] = False
        return False

    if not search(0):
        raise InputError(
            f"{where}: MIG layout {list(profiles)} has no valid placement on {model.key} "
            f"({model.memory_slice_count} memory slices; impossible MIG layout)"
        )
    return sorted(((resolved[i], chosen[i]) for i in range(len(resolved))), key=lambda t: t[1])


# --- devices
# -------------------------------------------------------------------------------------------------


def _capacity_values(caps: Mapping[str, int]) -> Obj:
    return {k: {"value": binary_quantity(v) if k == "memory" else str(v)} for k, v in caps.items()}


def _counters(caps: Mapping[str, int], start: int, size: int) -> Obj:
    out: Obj = {
        _COUNTER_NAMES[k]: {"value": binary_quantity(v) if k == "memory" else str(v)} for k, v in caps.items()
    }
    for i in range(start, start + size):
        out[f"memory-slice-{i}"] = {"value": "1"}
    return out


def counter_set_name(minor: int) -> str:
    return f"gpu-{minor}-counter-set"


def _max_caps(profiles: Sequence[MigProfile]) -> dict[str, int]:
    out: dict[str, int] = {}
    for p in profiles:
        for k, v in p.capacities().items():
            out[k] = max(out.get(k, 0), v)
    return out


class NvidiaRenderer:
    """Turns GpuInfos into a PoolLayout.

    One renderer serves many nodes: the parts of a device that do not vary between identical nodes
    (capacity maps, counter consumptions, attribute values) are built once and shared by reference, so a
    5,000-node fleet costs one small dict per device, not a deep tree. Device dicts are new per node;
    treat what is below them as read-only."""

    def __init__(self, config: NvidiaConfig | None = None) -> None:
        self.config = config or NvidiaConfig()
        self._cache: dict[Any, Any] = {}
        self._keep: dict[int, Any] = {}
        c = self.config
        self._driver_attrs = {
            "driverVersion": version_attr(c.driver_version),
            "cudaDriverVersion": version_attr(c.cuda_driver_version),
        }

    # Shared, immutable pieces -------------------------------------------------------------------------------
    def _shared(self, key: Any, build: Any) -> Any:
        v = self._cache.get(key)
        if v is None:
            v = build()
            self._cache[key] = v
        return v

    def _common_attrs(self, gpu: GpuInfo) -> Obj:
        """Attributes a GPU shares with its MIG devices (CommonAttributesMig), minus the uuids."""
        key = (
            "common",
            gpu.product_name,
            gpu.brand,
            gpu.architecture,
            gpu.cuda_compute_capability,
            gpu.addressing_mode,
            gpu.pci_bus_id,
            gpu.pcie_root,
            gpu.numa_node,
        )

        def build() -> Obj:
            attrs: Obj = {
                "productName": string_attr(gpu.product_name),
                "brand": string_attr(gpu.brand),
                "architecture": string_attr(gpu.architecture),
                "cudaComputeCapability": version_attr(gpu.cuda_compute_capability),
                **self._driver_attrs,
            }
            if gpu.addressing_mode:
                attrs["addressingMode"] = string_attr(gpu.addressing_mode)
            if gpu.pci_bus_id:
                attrs[f"{STD}/pciBusID"] = string_attr(gpu.pci_bus_id)
            if gpu.pcie_root:
                attrs[f"{STD}/pcieRoot"] = string_attr(gpu.pcie_root)
            if gpu.numa_node is not None and gpu.numa_node >= 0 and self.config.kubernetes_version != "1.36":
                attrs[f"{STD}/numaNode"] = int_attr(gpu.numa_node)
            return attrs

        common: Obj = self._shared(key, build)
        return common

    def _shares(self, caps: Obj) -> tuple[Obj, bool]:
        """Apply --consumable-shares to a capacity map (consumable_shares.go)."""
        opt = self.config.consumable_shares
        if opt is None or opt == "disabled":
            return caps, False
        mem = caps.get("memory")
        if mem is None:
            return caps, True
        key = ("shares", opt, tuple((k, v["value"]) for k, v in caps.items()))

        def build() -> Obj:
            from kdra.drivers.common import binary_quantity as bq

            value = _parse_binary(mem["value"])
            mib = (value // (1 << 20)) * (1 << 20)
            maxq = bq(mib)
            if opt == "memory":
                policy = {"default": maxq, "validRange": {"min": "1Mi", "max": maxq, "step": "1Mi"}}
            else:
                policy = {"default": "0", "validRange": {"min": "0", "max": maxq, "step": "1Mi"}}
            out = dict(caps)
            out["memory"] = {"value": maxq, "requestPolicy": policy}
            if opt not in ("unlimited", "memory"):
                n = int(opt)
                out["shares"] = {
                    "value": str(n),
                    "requestPolicy": {"default": "1", "validRange": {"min": "1", "max": str(n), "step": "1"}},
                }
            return out

        shared: Obj = self._shared(key, build)
        return shared, True

    # Devices
    # ---------------------------------------------------------------------------------------------------
    def _full_gpu(self, gpu: GpuInfo, extra: Obj, dynamic: bool) -> Obj:
        attrs: Obj = {"type": string_attr("gpu"), "uuid": string_attr(gpu.uuid)}
        attrs.update(self._common_attrs(gpu))
        attrs.update(extra)
        dev: Obj = {"name": gpu.name, "attributes": attrs}
        if dynamic and gpu.mig_profiles:
            dev["capacity"] = self._shared(
                ("fullcap", self._pkey(gpu)), lambda: _capacity_values(self._max_caps(gpu))
            )
            dev["consumesCounters"] = [
                {"counterSet": counter_set_name(gpu.minor), "counters": self._full_counters(gpu)}
            ]
        else:
            dev["capacity"] = self._shared(
                ("mem", gpu.memory_bytes), lambda: _capacity_values({"memory": gpu.memory_bytes})
            )
        dev["capacity"], multi = self._shares(dev["capacity"])
        if multi:
            dev["allowMultipleAllocations"] = True
        return dev

    def _mig_attrs(self, gpu: GpuInfo, profile: MigProfile, extra: Obj, mig_uuid: str | None) -> Obj:
        attrs: Obj = {"type": string_attr("mig")}
        if mig_uuid:
            attrs["uuid"] = string_attr(mig_uuid)
        attrs["parentUUID"] = string_attr(gpu.uuid)
        attrs["profile"] = self._shared(("profile", profile.name), lambda: string_attr(profile.name))
        attrs.update(self._common_attrs(gpu))
        attrs.update(extra)
        return attrs

    def _mig_static(self, gpu: GpuInfo, mig: MigDevice, extra: Obj) -> Obj:
        p = mig.profile

        def caps() -> Obj:
            c = _capacity_values(p.capacities())
            for i in range(mig.placement_start, mig.placement_start + p.memory_slices):
                c[f"memorySlice{i}"] = {"value": "1"}
            return c

        dev: Obj = {
            "name": mig_device_name(gpu.minor, p, mig.placement_start),
            "attributes": self._mig_attrs(gpu, p, extra, mig.uuid),
            "capacity": self._shared(("scap", p, mig.placement_start), caps),
        }
        dev["capacity"], multi = self._shares(dev["capacity"])
        if multi:
            dev["allowMultipleAllocations"] = True
        return dev

    def _pkey(self, gpu: GpuInfo) -> int:
        """Cache key of a GPU's profile table: identical GPUs share one table object (catalog or NVML)."""
        k = id(gpu.mig_profiles)
        self._keep.setdefault(k, gpu.mig_profiles)  # keep alive so the id stays unique
        return k

    def _max_caps(self, gpu: GpuInfo) -> dict[str, int]:
        caps: dict[str, int] = self._shared(("maxcaps", self._pkey(gpu)), lambda: _max_caps(gpu.mig_profiles))
        return caps

    def _full_counters(self, gpu: GpuInfo) -> Obj:
        counters: Obj = self._shared(
            ("fullcnt", self._pkey(gpu), gpu.memory_slice_count),
            lambda: _counters(self._max_caps(gpu), 0, gpu.memory_slice_count),
        )
        return counters

    def _plan(self, gpu: GpuInfo) -> list[tuple[str, str, Obj, bool, list[Obj]]]:
        """Per (profile table, GPU minor): each placement's name, capacity and counter consumption."""

        def build() -> list[tuple[str, str, Obj, bool, list[Obj]]]:
            plan = []
            cs = counter_set_name(gpu.minor)
            for p in gpu.mig_profiles:
                cap, multi = self._shares(_capacity_values(p.capacities()))
                for start in p.placements:
                    consumes = [
                        {"counterSet": cs, "counters": _counters(p.capacities(), start, p.memory_slices)}
                    ]
                    plan.append((mig_device_name(gpu.minor, p, start), p.name, cap, multi, consumes))
            plan.sort(key=lambda t: t[0])
            return plan

        plan: list[tuple[str, str, Obj, bool, list[Obj]]] = self._shared(
            ("plan", self._pkey(gpu), gpu.minor), build
        )
        return plan

    def _mig_dynamic(self, gpu: GpuInfo, extra: Obj) -> list[Obj]:
        attrs = {p.name: self._mig_attrs(gpu, p, extra, None) for p in gpu.mig_profiles}
        out: list[Obj] = []
        for name, profile, cap, multi, consumes in self._plan(gpu):
            dev: Obj = {
                "name": name,
                "attributes": attrs[profile],
                "capacity": cap,
                "consumesCounters": consumes,
            }
            if multi:
                dev["allowMultipleAllocations"] = True
            out.append(dev)
        return out

    def counter_set(self, gpu: GpuInfo) -> Obj:
        return {"name": counter_set_name(gpu.minor), "counters": self._full_counters(gpu)}

    def gpu_devices(self, gpu: GpuInfo, extra: Obj | None = None) -> list[Obj]:
        """The devices one GPU contributes, in announcement (name) order."""
        extra = extra or {}
        if self.config.dynamic_mig and gpu.mig_profiles:
            devs = []
            if not gpu.mig_enabled or gpu.mig_toggle_without_reset:
                devs.append(self._full_gpu(gpu, extra, True))
            devs.extend(self._mig_dynamic(gpu, extra))
            return devs  # "gpu-N" sorts before every "gpu-N-mig-..." and the plan is sorted
        elif gpu.mig_enabled:
            devs = [self._mig_static(gpu, m, extra) for m in gpu.mig_devices]
        else:
            devs = [self._full_gpu(gpu, extra, False)]
        devs.sort(key=lambda d: d["name"])
        return devs

    def layout(self, node: str, gpus: Sequence[GpuInfo], extra: Obj | None = None) -> PoolLayout:
        """The pool of one node: a single device slice, or under DynamicMIG counters + one slice per GPU."""
        layout = PoolLayout(DRIVER, node)
        if self.config.dynamic_mig:
            for gpu in gpus:
                if gpu.mig_profiles:
                    layout.counter_sets.append(self.counter_set(gpu))
                layout.groups.append(SliceGroup(f"gpu{gpu.minor}", self.gpu_devices(gpu, extra)))
        else:
            devices: list[Obj] = []
            for gpu in gpus:
                devices.extend(self.gpu_devices(gpu, extra))
            devices.sort(key=lambda d: d["name"])
            layout.groups.append(SliceGroup("devices", devices))
        return layout


def _parse_binary(q: str) -> int:
    for suffix, shift in (("Ki", 10), ("Mi", 20), ("Gi", 30), ("Ti", 40), ("Pi", 50), ("Ei", 60)):
        if q.endswith(suffix):
            return int(q[: -len(suffix)]) << shift
    return int(q)


def device_classes() -> list[Obj]:
    """The DeviceClasses the driver's Helm chart installs for GPU allocation (peers.md §2.1)."""
    sel = f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == '{{}}'"
    return [
        device_class(NVIDIA_GPU_CLASS, sel.format("gpu"), NVIDIA_GPU_RESOURCE),
        device_class(NVIDIA_MIG_CLASS, sel.format("mig")),
    ]


@dataclass
class NvidiaNode:
    """Convenience for tests and scripts: a node's GPUs plus the per-node extra attributes."""

    name: str
    gpus: list[GpuInfo]
    extra_attributes: Obj = field(default_factory=dict)
