"""A real host: read the GPUs NVML reports (nvidia-ml-py) and publish them like the simulated driver does.

Discovery runs in two steps so live hosts and recorded fixtures share one path:

1. `capture(nvml)` asks NVML everything the NVIDIA DRA driver asks (devices, MIG mode, GPU-instance
   profiles and their possible placements, existing MIG devices) plus the sysfs facts it reads (PCIe root,
   NUMA node), and returns a JSON-compatible record (format `kdra-nvml-fixture/v1`, see
   tests/drivers/fixtures/);
2. `gpus_from_capture(record)` turns that record into GpuInfos for kdra.drivers.nvidia.

`scripts/capture_nvml_fixture.py` writes step 1's record to a file on a GPU machine; tests replay it through
`FixtureNvml`, a stand-in for the pynvml module.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kdra.api.types import Obj
from kdra.drivers.catalog import MigProfile, mig_memory_size_gb
from kdra.drivers.nvidia import GpuInfo, MigDevice, NvidiaConfig, NvidiaRenderer
from kdra.errors import InputError

FORMAT = "kdra-nvml-fixture/v1"

# nvmlBrandType_t -> the string the driver publishes (go-nvml BrandType names, capitalised like the driver's).
BRANDS = {
    0: "Unknown",
    1: "Quadro",
    2: "Tesla",
    3: "NVS",
    4: "Grid",
    5: "GeForce",
    6: "Titan",
    7: "NvidiaVApps",
    8: "NvidiaVPC",
    9: "NvidiaVCS",
    10: "NvidiaVWS",
    11: "NvidiaCloudGaming",
    12: "QuadroRTX",
    13: "NvidiaRTX",
    14: "Nvidia",
    15: "GeForceRTX",
    16: "TitanRTX",
}
# nvmlDeviceArchitecture_t -> go-nvlib architecture names.
ARCHITECTURES = {
    2: "Kepler",
    3: "Maxwell",
    4: "Pascal",
    5: "Volta",
    6: "Turing",
    7: "Ampere",
    8: "Ada Lovelace",
    9: "Hopper",
    10: "Blackwell",
}
# GPU-instance profile index -> name suffix (go-nvlib MigProfile attributes).
PROFILE_SUFFIX = {
    7: "+me",
    10: "+gfx",
    11: "+gfx",
    12: "+gfx",
    13: "-me",
    14: "-me",
    15: "+me.all",
    16: "+me.all",
}
MAX_PROFILE_INDEX = 17


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _try(fn: Any, nvml: Any) -> Any:
    try:
        return fn()
    except nvml.NVMLError:
        return None


def sysfs_pci(bus_id: str, sysfs: str = "/sys") -> tuple[str | None, int | None]:
    """(pcieRoot, numaNode) of a PCI device from sysfs (deviceattribute.GetPCIeRootAttributeByPCIBusID)."""
    dev = Path(sysfs, "bus/pci/devices", bus_id)
    root = None
    numa = None
    try:
        real = os.path.realpath(dev)
        parts = Path(real).parts
        for part in parts:
            if part.startswith("pci") and ":" in part:
                root = part
                break
    except OSError:
        pass
    with contextlib.suppress(OSError, ValueError):
        numa = int(Path(dev, "numa_node").read_text().strip())
    return root, numa


def normalize_bus_id(bus_id: str) -> str:
    """NVML's '00000000:18:00.0' -> sysfs/Kubernetes '0000:18:00.0'."""
    b = bus_id.lower()
    domain, rest = b.split(":", 1)
    return f"{int(domain, 16):04x}:{rest}"


def capture(nvml: Any, sysfs: str = "/sys") -> Obj:
    """Everything the driver needs from NVML (and sysfs), as a JSON-compatible record (NVML initialised)."""
    record: Obj = {
        "format": FORMAT,
        "driverVersion": _s(nvml.nvmlSystemGetDriverVersion()),
        "cudaDriverVersion": int(nvml.nvmlSystemGetCudaDriverVersion_v2()),
        "devices": [],
    }
    # A stand-in module (FixtureNvml) also answers the sysfs questions; the real pynvml has no such hook.
    pci: Callable[[str], tuple[str | None, int | None]] = getattr(nvml, "kdra_sysfs_pci", None) or (
        lambda bus: sysfs_pci(bus, sysfs)
    )
    for i in range(nvml.nvmlDeviceGetCount()):
        h = nvml.nvmlDeviceGetHandleByIndex(i)
        bus = normalize_bus_id(_s(nvml.nvmlDeviceGetPciInfo(h).busId))
        root, numa = pci(bus)
        nv_numa = (
            _try(lambda h=h: nvml.nvmlDeviceGetNumaNodeId(h), nvml)
            if hasattr(nvml, "nvmlDeviceGetNumaNodeId")
            else None
        )
        cc = nvml.nvmlDeviceGetCudaComputeCapability(h)
        mig = _try(lambda h=h: list(nvml.nvmlDeviceGetMigMode(h)), nvml)
        addressing = None
        if hasattr(nvml, "nvmlDeviceGetAddressingMode"):
            addressing = _try(lambda h=h: nvml.nvmlDeviceGetAddressingMode(h), nvml)
        dev: Obj = {
            "index": i,
            "minor": int(nvml.nvmlDeviceGetMinorNumber(h)),
            "uuid": _s(nvml.nvmlDeviceGetUUID(h)),
            "name": _s(nvml.nvmlDeviceGetName(h)),
            "brand": int(nvml.nvmlDeviceGetBrand(h)),
            "architecture": int(nvml.nvmlDeviceGetArchitecture(h)),
            "cudaComputeCapability": [int(cc[0]), int(cc[1])],
            "memoryTotal": int(nvml.nvmlDeviceGetMemoryInfo(h).total),
            "pciBusId": bus,
            "pcieRoot": root,
            "numaNode": numa if numa is not None else nv_numa,
            "migMode": mig,
            "addressingMode": _addressing_name(addressing),
            "gpuInstanceProfiles": [],
            "migDevices": [],
        }
        if mig is not None:
            dev["gpuInstanceProfiles"] = _profiles(nvml, h)
            if mig[0]:
                dev["migDevices"] = _mig_devices(nvml, h)
        record["devices"].append(dev)
    return record


def _addressing_name(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, (str, bytes)):
        return _s(v)
    value = getattr(v, "value", v)
    return {1: "HMM", 2: "ATS"}.get(int(value))  # nvmlDeviceAddressingModeType_t; 0 = none


def _profiles(nvml: Any, h: Any) -> list[Obj]:
    out = []
    count = int(getattr(nvml, "NVML_GPU_INSTANCE_PROFILE_COUNT", MAX_PROFILE_INDEX))
    for idx in range(count):
        info = _try(lambda idx=idx: nvml.nvmlDeviceGetGpuInstanceProfileInfo(h, idx), nvml)
        if info is None:  # drivers without the V2 entry point: fall back to version 1 (no name field)
            info = _try(lambda idx=idx: nvml.nvmlDeviceGetGpuInstanceProfileInfo(h, idx, version=1), nvml)
        if info is None:
            continue
        placements = _try(lambda info=info: _possible_placements(nvml, h, int(info.id)), nvml) or []
        out.append(
            {
                "profileIndex": idx,
                "id": int(info.id),
                "sliceCount": int(info.sliceCount),
                "instanceCount": int(info.instanceCount),
                "multiprocessorCount": int(info.multiprocessorCount),
                "copyEngineCount": int(info.copyEngineCount),
                "decoderCount": int(info.decoderCount),
                "encoderCount": int(info.encoderCount),
                "jpegCount": int(info.jpegCount),
                "ofaCount": int(info.ofaCount),
                "memorySizeMB": int(info.memorySizeMB),
                "nvmlName": _s(getattr(info, "name", b"")) or None,
                "placements": [[int(p.start), int(p.size)] for p in placements],
            }
        )
    return out


def _possible_placements(nvml: Any, h: Any, profile_id: int) -> list[Any]:
    """pynvml exposes nvmlDeviceGetGpuInstancePossiblePlacements_v2 C-style: ask for the count with a NULL
    array, then fill an array of c_nvmlGpuInstancePlacement_t."""
    count = ctypes.c_uint(0)
    nvml.nvmlDeviceGetGpuInstancePossiblePlacements(h, profile_id, None, ctypes.byref(count))
    if count.value == 0:
        return []
    array = (nvml.c_nvmlGpuInstancePlacement_t * count.value)()
    nvml.nvmlDeviceGetGpuInstancePossiblePlacements(h, profile_id, array, ctypes.byref(count))
    return list(array[: count.value])


def _mig_devices(nvml: Any, h: Any) -> list[Obj]:
    out = []
    for i in range(int(nvml.nvmlDeviceGetMaxMigDeviceCount(h))):
        mh = _try(lambda i=i: nvml.nvmlDeviceGetMigDeviceHandleByIndex(h, i), nvml)
        if mh is None:
            continue
        gi_id = int(nvml.nvmlDeviceGetGpuInstanceId(mh))
        gi = nvml.nvmlDeviceGetGpuInstanceById(h, gi_id)
        info = nvml.nvmlGpuInstanceGetInfo(gi)
        out.append(
            {
                "uuid": _s(nvml.nvmlDeviceGetUUID(mh)),
                "gpuInstanceId": gi_id,
                "profileId": int(info.profileId),
                "placement": [int(info.placement.start), int(info.placement.size)],
            }
        )
    return out


def gpus_from_capture(record: Obj) -> list[GpuInfo]:
    """GpuInfos for kdra.drivers.nvidia from a capture record (live or recorded)."""
    if record.get("format") != FORMAT:
        raise InputError(f"NVML capture: format {record.get('format')!r}, expected {FORMAT!r}")
    gpus = []
    for d in record["devices"]:
        total = int(d["memoryTotal"])
        profiles: list[MigProfile] = []
        for p in d.get("gpuInstanceProfiles", []):
            starts = tuple(sorted(pl[0] for pl in p["placements"]))
            size = p["placements"][0][1] if p["placements"] else p["sliceCount"]
            name = f"{p['sliceCount']}g.{mig_memory_size_gb(total, p['memorySizeMB'])}gb"
            name += PROFILE_SUFFIX.get(p["profileIndex"], "")
            profiles.append(
                MigProfile(
                    name,
                    p["id"],
                    p["sliceCount"],
                    size,
                    p["memorySizeMB"],
                    p["multiprocessorCount"],
                    p["copyEngineCount"],
                    p["decoderCount"],
                    p["encoderCount"],
                    p["jpegCount"],
                    p["ofaCount"],
                    p["instanceCount"],
                    starts,
                )
            )
        by_id = {p.gi_profile_id: p for p in profiles}
        migs = tuple(
            MigDevice(m["uuid"], by_id[m["profileId"]], m["placement"][0])
            for m in d.get("migDevices", [])
            if m["profileId"] in by_id
        )
        mig_mode = d.get("migMode")
        arch = ARCHITECTURES.get(d["architecture"], "Unknown")
        slices = max(
            (s + sz for p in d.get("gpuInstanceProfiles", []) for s, sz in p["placements"]), default=0
        )
        gpus.append(
            GpuInfo(
                minor=d["minor"],
                uuid=d["uuid"],
                product_name=d["name"],
                brand=BRANDS.get(d["brand"], "Unknown"),
                architecture=arch,
                cuda_compute_capability=f"{d['cudaComputeCapability'][0]}.{d['cudaComputeCapability'][1]}",
                memory_bytes=total,
                pci_bus_id=d.get("pciBusId"),
                pcie_root=d.get("pcieRoot"),
                numa_node=d.get("numaNode"),
                addressing_mode=d.get("addressingMode"),
                mig_enabled=bool(mig_mode and mig_mode[0]),
                mig_toggle_without_reset=arch in ("Hopper", "Blackwell"),
                mig_profiles=tuple(sorted(profiles, key=lambda p: p.name)),
                memory_slice_count=slices,
                mig_devices=migs,
                model_key=d["name"],
            )
        )
    return gpus


def cuda_version(record: Obj) -> str:
    v = int(record["cudaDriverVersion"])
    return f"{v // 1000}.{(v % 1000) // 10}.0"


def render_capture(
    record: Obj, node: str, *, dynamic_mig: bool = False, consumable_shares: str | int | None = None
) -> list[Obj]:
    """The ResourceSlices the driver would publish for a captured host."""
    from kdra.drivers.common import make_slices

    config = NvidiaConfig(record["driverVersion"], cuda_version(record), dynamic_mig, consumable_shares)
    return make_slices(NvidiaRenderer(config).layout(node, gpus_from_capture(record)))


def load_pynvml() -> Any:
    """Import pynvml and initialise NVML, or explain plainly why this host has no usable NVIDIA driver."""
    try:
        nvml = importlib.import_module("pynvml")
    except ImportError:
        raise InputError(
            "nvidia-ml-py is not installed (pip install 'kdra[nvml]'); cannot query NVML"
        ) from None
    try:
        nvml.nvmlInit()
    except Exception as e:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        raise InputError(f"no NVIDIA driver on this host: NVML could not be initialised ({e})") from None
    return nvml


def capture_host(sysfs: str = "/sys") -> Obj:
    nvml = load_pynvml()
    try:
        return capture(nvml, sysfs)
    except nvml.NVMLError as e:
        raise InputError(f"NVML failed while reading the GPUs of this host: {e}") from None
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


# --- a pynvml stand-in fed by a capture record ------------------------------------------------------------


class FixtureNvml:
    """Implements the pynvml calls `capture` makes, answering from a recorded capture. Inject it as the
    `pynvml` module (sys.modules) to test discovery without a GPU."""

    class NVMLError(Exception):
        pass

    class NVMLError_NotFound(NVMLError):
        pass

    NVML_GPU_INSTANCE_PROFILE_COUNT = MAX_PROFILE_INDEX

    def __init__(self, record: Obj) -> None:
        self.record = record
        self.initialised = False

    @classmethod
    def from_file(cls, path: str | Path) -> FixtureNvml:
        try:
            return cls(json.loads(Path(path).read_text()))
        except (OSError, json.JSONDecodeError) as e:
            raise InputError(f"{path}: cannot read NVML fixture: {e}") from None

    def kdra_sysfs_pci(self, bus: str) -> tuple[str | None, int | None]:
        for d in self.record["devices"]:
            if d["pciBusId"] == bus:
                return d.get("pcieRoot"), d.get("numaNode")
        return None, None

    def _dev(self, h: Any) -> Obj:
        d: Obj = self.record["devices"][h]
        return d

    def nvmlInit(self) -> None:
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self.initialised = False

    def nvmlSystemGetDriverVersion(self) -> str:
        return str(self.record["driverVersion"])

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return int(self.record["cudaDriverVersion"])

    def nvmlDeviceGetCount(self) -> int:
        return len(self.record["devices"])

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        return SimpleNamespace(busId=("0000" + self._dev(h)["pciBusId"]).encode())

    def nvmlDeviceGetNumaNodeId(self, h: int) -> int:
        v = self._dev(h).get("numaNode")
        if v is None:
            raise self.NVMLError("Not Supported")
        return int(v)

    def nvmlDeviceGetCudaComputeCapability(self, h: int) -> tuple[int, int]:
        a, b = self._dev(h)["cudaComputeCapability"]
        return int(a), int(b)

    def nvmlDeviceGetMigMode(self, h: int) -> list[int]:
        v = self._dev(h).get("migMode")
        if v is None:
            raise self.NVMLError("Not Supported")
        return list(v)

    def nvmlDeviceGetAddressingMode(self, h: int) -> Any:
        v = self._dev(h).get("addressingMode")
        if v is None:
            raise self.NVMLError("Not Supported")
        return v

    def nvmlDeviceGetMinorNumber(self, h: int) -> int:
        return int(self._dev(h)["minor"])

    def nvmlDeviceGetUUID(self, h: Any) -> str:
        if isinstance(h, tuple):
            return str(self._dev(h[0])["migDevices"][h[1]]["uuid"])
        return str(self._dev(h)["uuid"])

    def nvmlDeviceGetName(self, h: int) -> str:
        return str(self._dev(h)["name"])

    def nvmlDeviceGetBrand(self, h: int) -> int:
        return int(self._dev(h)["brand"])

    def nvmlDeviceGetArchitecture(self, h: int) -> int:
        return int(self._dev(h)["architecture"])

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return SimpleNamespace(total=int(self._dev(h)["memoryTotal"]))

    def nvmlDeviceGetGpuInstanceProfileInfo(self, h: int, idx: int, version: int = 2) -> Any:
        for p in self._dev(h).get("gpuInstanceProfiles", []):
            if p["profileIndex"] == idx:
                return SimpleNamespace(
                    **{k: v for k, v in p.items() if k not in ("placements", "profileIndex", "nvmlName")},
                    name=(p.get("nvmlName") or "").encode(),
                )
        raise self.NVMLError("Not Supported")

    class c_nvmlGpuInstancePlacement_t(ctypes.Structure):
        _fields_ = [("start", ctypes.c_uint), ("size", ctypes.c_uint)]

    def nvmlDeviceGetGpuInstancePossiblePlacements(
        self, h: int, profile_id: int, placements_ref: Any, count_ref: Any
    ) -> int:
        """Same calling convention as pynvml: a NULL array asks for the count."""
        for p in self._dev(h).get("gpuInstanceProfiles", []):
            if p["id"] == profile_id:
                count = count_ref._obj
                if placements_ref is not None:
                    for k, (start, size) in enumerate(p["placements"][: count.value]):
                        placements_ref[k].start = start
                        placements_ref[k].size = size
                count.value = len(p["placements"])
                return 0
        raise self.NVMLError("Not Supported")

    def nvmlDeviceGetMaxMigDeviceCount(self, h: int) -> int:
        return 7 if self._dev(h).get("migMode") else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: int, i: int) -> tuple[int, int]:
        if i >= len(self._dev(h).get("migDevices", [])):
            raise self.NVMLError_NotFound("Not Found")
        return (h, i)

    def nvmlDeviceGetGpuInstanceId(self, mh: tuple[int, int]) -> int:
        return int(self._dev(mh[0])["migDevices"][mh[1]]["gpuInstanceId"])

    def nvmlDeviceGetGpuInstanceById(self, h: int, gi_id: int) -> tuple[int, int]:
        for i, m in enumerate(self._dev(h)["migDevices"]):
            if m["gpuInstanceId"] == gi_id:
                return (h, i)
        raise self.NVMLError_NotFound("Not Found")

    def nvmlGpuInstanceGetInfo(self, gi: tuple[int, int]) -> Any:
        m = self._dev(gi[0])["migDevices"][gi[1]]
        start, size = m["placement"]
        return SimpleNamespace(profileId=m["profileId"], placement=SimpleNamespace(start=start, size=size))
