"""The accelerator catalog: what each GPU/TPU model is, as the real drivers would discover it.

The catalog is data, not code: every simulated device a driver publishes is computed from these entries, so a
number that is wrong here is wrong everywhere. Each entry therefore carries `sources` (where its numbers come
from) and `unverified` (the fields nobody could check against a primary source; treat them as best guesses and
replace them with an NVML/amd-smi capture when one is available — `scripts/capture_nvml_fixture.py`).

Source keys (expanded in SOURCES):
  mig-guide   NVIDIA Multi-Instance GPU User Guide, "Supported MIG Profiles" (profile names, GI profile IDs,
              memory/compute fractions, instance counts, placements).
  kep-4815    KEP-4815 (kubernetes/enhancements) A100-40GB MIG table: exact MiB, SM and engine counts.
  peers-h100  kdra shared/reference/peers.md §2.5/§2.6 and examples/h100x8-dynamic-mig.yaml: H100 SXM5
              `nvidia-smi mig -lgip` capture (3rd-party) converted to MiB; H100 PCIe SM column.
  datasheet   the vendor's product datasheet / product page (memory size, SM/CU count).
  cuda-guide  CUDA C++ Programming Guide, "Compute Capabilities" table.
  nvml-obs    NVML/nvidia-smi totals seen in public logs; listed as verified where several independent
              captures agree (H200 143771, B200 183359, H100 PCIe 81559, A100-SXM4 40960/81920, L40S 46068,
              L4 23034, A10 23028, T4 15360, V100-SXM2 16384/32768, P100-PCIE 16276 MiB). 3rd-party; the MiB
              NVML reports is a little less than the marketing size and varies by board and driver.
  go-nvlib    NVIDIA go-nvlib `getMigMemorySizeGB` rounding, used to check that profile names match memory.
  amd-docs    AMD Instinct docs: "GPU partitioning" (MI300X compute/memory partition modes), CDNA3/CDNA2
              whitepapers (CU counts, 4 SIMD units per CU).
  gcp-tpu     Google Cloud TPU docs (v5e, v5p, v6e system architecture pages: chips per host, HBM, topologies)
              and GKE "Plan TPUs" (node labels, accelerator type names).
  scaled      derived by scaling the H100 SXM5 values by the full-memory ratio (no capture available).
  h200-lgip   public `nvidia-smi mig -lgip` captures of an H200 (3rd-party; three of the seven profiles).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kdra.errors import InputError

SOURCES: dict[str, str] = {
    "mig-guide": "NVIDIA MIG User Guide, 'Supported MIG Profiles' "
    "(docs.nvidia.com/datacenter/tesla/mig-user-guide)",
    "kep-4815": "KEP-4815 partitionable devices, A100-40GB MIG table (kubernetes/enhancements)",
    "peers-h100": "shared/reference/peers.md §2.5-2.6 + examples/h100x8-dynamic-mig.yaml "
    "(nvidia-smi capture, 3rd-party)",
    "datasheet": "vendor datasheet / product page",
    "cuda-guide": "CUDA C++ Programming Guide, Compute Capabilities",
    "nvml-obs": "NVML / nvidia-smi totals seen in public logs (3rd-party)",
    "go-nvlib": "NVIDIA go-nvlib getMigMemorySizeGB rounding",
    "amd-docs": "AMD Instinct documentation: GPU partitioning; CDNA2/CDNA3 whitepapers",
    "gcp-tpu": "Google Cloud TPU system architecture docs (v5e, v5p, v6e) and GKE TPU docs",
    "scaled": "scaled from the H100 SXM5 capture by the full-memory ratio (guess)",
    "h200-lgip": "public `nvidia-smi mig -lgip` captures of an H200 (3rd-party): 1g.18gb, 2g.35gb, 7g.141gb",
}

MIB = 1 << 20


@dataclass(frozen=True)
class MigProfile:
    """One GPU-instance profile (with its default full compute instance), as NVML describes it."""

    name: str  # e.g. "1g.10gb" or "1g.10gb+me"
    gi_profile_id: int
    compute_slices: int  # the "g" in 1g.10gb
    memory_slices: int  # placement size
    memory_mib: int
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg_engines: int
    ofa_engines: int
    max_instances: int
    placements: tuple[int, ...]  # possible placement starts (memory-slice index)
    unverified: tuple[str, ...] = ()

    @property
    def canonical(self) -> str:
        """The profile as it appears in NVIDIA device names: dots stripped, '+' -> '-' (ToCanonicalName)."""
        return self.name.replace(".", "").replace("+", "-")

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * MIB

    def capacities(self) -> dict[str, int]:
        """Capacities named as the NVIDIA driver publishes them (CommonCapacitiesMig); memory in bytes."""
        return {
            "multiprocessors": self.multiprocessors,
            "copyEngines": self.copy_engines,
            "decoders": self.decoders,
            "encoders": self.encoders,
            "jpegEngines": self.jpeg_engines,
            "ofaEngines": self.ofa_engines,
            "memory": self.memory_bytes,
        }


@dataclass(frozen=True)
class GpuModel:
    """An NVIDIA GPU model. `key` is what fleet files name; `aliases` are accepted too."""

    key: str
    aliases: tuple[str, ...]
    product_name: str  # NVML nvmlDeviceGetName
    architecture: str  # as the NVIDIA driver names it
    compute_capability: str  # "9.0"
    multiprocessors: int
    memory_mib: int  # NVML total
    brand: str = "Nvidia"
    addressing_mode: str | None = None
    mig_profiles: tuple[MigProfile, ...] = ()
    memory_slice_count: int = 0  # 8 on every MIG-capable model here
    mig_toggle_without_reset: bool = False  # Hopper+: the full GPU stays allocatable under DynamicMIG
    sources: dict[str, str] = field(default_factory=dict)
    unverified: tuple[str, ...] = ()
    vendor: str = "nvidia"

    @property
    def mig_capable(self) -> bool:
        return bool(self.mig_profiles)

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * MIB

    def profile(self, name_or_id: str | int) -> MigProfile:
        for p in self.mig_profiles:
            if name_or_id in (p.name, p.gi_profile_id, p.canonical):
                return p
        raise KeyError(name_or_id)

    def max_mig_capacities(self) -> dict[str, int]:
        """The full GPU's capacities under DynamicMIG: the maximum over all profiles (driver's
        maxCapacities)."""
        out: dict[str, int] = {}
        for p in self.mig_profiles:
            for k, v in p.capacities().items():
                out[k] = max(out.get(k, 0), v)
        return out


@dataclass(frozen=True)
class AmdPartitionMode:
    compute: str  # spx | dpx | qpx | cpx
    memory: str  # nps1 | nps4
    partitions: int

    @property
    def profile(self) -> str:
        return f"{self.compute}_{self.memory}"


@dataclass(frozen=True)
class AmdModel:
    key: str
    aliases: tuple[str, ...]
    product_name: str
    family: str
    device_id: str  # PCI device id
    memory_mib: int
    compute_units: int
    simd_units: int
    partition_modes: tuple[AmdPartitionMode, ...]
    sources: dict[str, str] = field(default_factory=dict)
    unverified: tuple[str, ...] = ()
    vendor: str = "amd"

    def mode(self, profile: str) -> AmdPartitionMode:
        for m in self.partition_modes:
            if m.profile == profile.lower():
                return m
        raise KeyError(profile)


@dataclass(frozen=True)
class TpuModel:
    key: str
    aliases: tuple[str, ...]
    tpu_gen: str  # driver attribute tpuGen
    accelerator: str  # GKE cloud.google.com/gke-tpu-accelerator value
    hbm_gib: int
    chips_per_host: tuple[int, ...]  # machine shapes
    multi_host_chips_per_host: int  # chips per host in multi-host slices
    topologies: tuple[str, ...]
    device_naming: str  # "vfio" -> 0,1,...; "accel" -> accel0,...
    sources: dict[str, str] = field(default_factory=dict)
    unverified: tuple[str, ...] = ()
    vendor: str = "google"

    @staticmethod
    def chips_in(topology: str) -> int:
        return math.prod(int(x) for x in topology.split("x"))

    def hosts_per_slice(self, topology: str) -> tuple[int, int]:
        """(hosts, chips per host) of a slice of this topology."""
        chips = self.chips_in(topology)
        single = [c for c in self.chips_per_host if c == chips]
        if single:
            return 1, chips
        per_host = self.multi_host_chips_per_host
        return max(1, chips // per_host), per_host


def mig_memory_size_gb(total_bytes: int, mig_memory_mib: int) -> int:
    """go-nvlib's getMigMemorySizeGB: how NVIDIA turns a profile's MiB into the 'Ngb' of its name."""
    frac = (mig_memory_mib * MIB) / total_bytes
    frac = math.ceil(frac * 8) / 8
    total_gb = (total_bytes + (1 << 30) - 1) // (1 << 30)
    return math.floor(frac * total_gb + 0.5)  # Go math.Round: half away from zero


# ---------------------------------------------------------------------------------------------------------
# MIG tables. Placement starts are the same on every 8-memory-slice/7-compute-slice part (mig-guide).
_P1 = (0, 1, 2, 3, 4, 5, 6)
_P2D = (0, 2, 4, 6)  # 1g with double memory
_P2 = (0, 2, 4)
_P4 = (0, 4)
_P0 = (0,)
_ME = ("placements",)  # NVML's placements for +me profiles are not in any source we have (peers.md: guess)


def _mig(
    name: str,
    gi: int,
    g: int,
    slices: int,
    mib: int,
    sm: int,
    ce: int,
    dec: int,
    enc: int,
    jpeg: int,
    ofa: int,
    max_inst: int,
    placements: tuple[int, ...],
    unverified: tuple[str, ...] = (),
) -> MigProfile:
    return MigProfile(name, gi, g, slices, mib, sm, ce, dec, enc, jpeg, ofa, max_inst, placements, unverified)


# A100 40GB: kep-4815 (exact). +me placements: guess.
A100_40GB_MIG = (
    _mig("1g.5gb", 19, 1, 1, 4864, 14, 1, 0, 0, 0, 0, 7, _P1),
    _mig("1g.5gb+me", 20, 1, 1, 4864, 14, 1, 1, 0, 1, 1, 1, _P1, _ME),
    _mig("1g.10gb", 15, 1, 2, 9856, 14, 1, 1, 0, 0, 0, 4, _P2D),
    _mig("2g.10gb", 14, 2, 2, 9856, 28, 2, 1, 0, 0, 0, 3, _P2),
    _mig("3g.20gb", 9, 3, 4, 19968, 42, 3, 2, 0, 0, 0, 2, _P4),
    _mig("4g.20gb", 5, 4, 4, 19968, 56, 4, 2, 0, 0, 0, 1, _P0),
    _mig("7g.40gb", 0, 7, 8, 40192, 98, 7, 5, 0, 1, 1, 1, _P0),
)

# A100 80GB: memory from nvidia-smi GiB (peers.md §2.6, 3rd-party); SMs as A100-40GB (peers.md); engine
# units as A100-40GB: the mig-guide's A100 table covers both ("for A100-SXM4-80GB the profile names change
# according to the memory proportion").
_A80E: tuple[str, ...] = ()
A100_80GB_MIG = (
    _mig("1g.10gb", 19, 1, 1, 9728, 14, 1, 0, 0, 0, 0, 7, _P1, _A80E),
    _mig("1g.10gb+me", 20, 1, 1, 9728, 14, 1, 1, 0, 1, 1, 1, _P1, (*_A80E, *_ME)),
    _mig("1g.20gb", 15, 1, 2, 19968, 14, 1, 1, 0, 0, 0, 4, _P2D, _A80E),
    _mig("2g.20gb", 14, 2, 2, 19968, 28, 2, 1, 0, 0, 0, 3, _P2, _A80E),
    _mig("3g.40gb", 9, 3, 4, 40192, 42, 3, 2, 0, 0, 0, 2, _P4, _A80E),
    _mig("4g.40gb", 5, 4, 4, 40192, 56, 4, 2, 0, 0, 0, 1, _P0, _A80E),
    _mig("7g.80gb", 0, 7, 8, 80896, 98, 7, 5, 0, 1, 1, 1, _P0, _A80E),
)

# H100 SXM5: peers-h100 capture (memory ±8Mi for 2-slice profiles; SM 26 for 1g.20gb disagrees with the PCIe
# capture and the 1/7 fraction -> unverified).
H100_SXM_MIG = (
    _mig("1g.10gb", 19, 1, 1, 9984, 16, 1, 1, 0, 1, 0, 7, _P1),
    _mig("1g.10gb+me", 20, 1, 1, 9984, 16, 1, 1, 0, 1, 1, 1, _P1, _ME),
    _mig("1g.20gb", 15, 1, 2, 20096, 26, 1, 1, 0, 1, 0, 4, _P2D, ("memory_mib", "multiprocessors")),
    _mig("2g.20gb", 14, 2, 2, 20096, 32, 2, 2, 0, 2, 0, 3, _P2, ("memory_mib",)),
    _mig("3g.40gb", 9, 3, 4, 40448, 60, 3, 3, 0, 3, 0, 2, _P4),
    _mig("4g.40gb", 5, 4, 4, 40448, 64, 4, 4, 0, 4, 0, 1, _P0),
    _mig("7g.80gb", 0, 7, 8, 81152, 132, 8, 7, 0, 7, 1, 1, _P0),
)

# H100 PCIe: SM column of the PCIe capture (peers.md §2.6); memory and engines assumed equal to SXM5.
_HPE = ("memory_mib", "copy_engines", "decoders", "jpeg_engines", "ofa_engines")
H100_PCIE_MIG = (
    _mig("1g.10gb", 19, 1, 1, 9984, 14, 1, 1, 0, 1, 0, 7, _P1, _HPE),
    _mig("1g.10gb+me", 20, 1, 1, 9984, 14, 1, 1, 0, 1, 1, 1, _P1, (*_HPE, *_ME)),
    _mig("1g.20gb", 15, 1, 2, 20096, 14, 1, 1, 0, 1, 0, 4, _P2D, _HPE),
    _mig("2g.20gb", 14, 2, 2, 20096, 30, 2, 2, 0, 2, 0, 3, _P2, _HPE),
    _mig("3g.40gb", 9, 3, 4, 40448, 46, 3, 3, 0, 3, 0, 2, _P4, _HPE),
    _mig("4g.40gb", 5, 4, 4, 40448, 62, 4, 4, 0, 4, 0, 1, _P0, _HPE),
    _mig("7g.80gb", 0, 7, 8, 81152, 114, 8, 7, 0, 7, 1, 1, _P0, _HPE),
)

# H200 141GB: names, IDs, instance counts, engine units and copy engines from mig-guide (H200 table).
# 1g.18gb 16.00 GiB/16 SMs, 2g.35gb 32.50 GiB/32 SMs, 7g.141gb 140.00 GiB/132 SMs from public
# `nvidia-smi mig -lgip` captures (h200-lgip, 3rd-party). 1g.35gb memory assumed = 2g.35gb (same memory
# fraction); 3g/4g.71gb memory and the 1g.35gb/3g/4g SM counts (H100 SXM5's) are guesses.
_G = ("memory_mib", "multiprocessors")
H200_MIG = (
    _mig("1g.18gb", 19, 1, 1, 16384, 16, 1, 1, 0, 1, 0, 7, _P1),
    _mig("1g.18gb+me", 20, 1, 1, 16384, 16, 1, 1, 0, 1, 1, 1, _P1, _ME),
    _mig("1g.35gb", 15, 1, 2, 33280, 26, 1, 1, 0, 1, 0, 4, _P2D, _G),
    _mig("2g.35gb", 14, 2, 2, 33280, 32, 2, 2, 0, 2, 0, 3, _P2),
    _mig("3g.71gb", 9, 3, 4, 71424, 60, 3, 3, 0, 3, 0, 2, _P4, _G),
    _mig("4g.71gb", 5, 4, 4, 71424, 64, 4, 4, 0, 4, 0, 1, _P0, _G),
    _mig("7g.141gb", 0, 7, 8, 143360, 132, 8, 7, 0, 7, 1, 1, _P0),
)

# B200: names, IDs, instance counts and copy engines (2, 2, 2, 3, 6, 8, 16) from mig-guide (B200 table). The
# guide lists 1 NVDEC / 1 JPEG for every B200 profile, which cannot add up (7 x 1g.23gb would need 7 of the
# full GPU's 1); kdra keeps one decoder and JPEG engine per compute slice (7 on the full GPU) -> unverified.
# MiB scaled from H100 (183359/81559, 64Mi steps); SMs guessed from 148 SMs (144 under MIG, 18 per slice).
_B = ("memory_mib", "multiprocessors", "decoders", "jpeg_engines")
B200_MIG = (
    _mig("1g.23gb", 19, 1, 1, 22464, 18, 2, 1, 0, 1, 0, 7, _P1, _B),
    _mig("1g.23gb+me", 20, 1, 1, 22464, 18, 2, 1, 0, 1, 1, 1, _P1, (*_B, *_ME)),
    _mig("1g.45gb", 15, 1, 2, 45184, 18, 2, 1, 0, 1, 0, 4, _P2D, _B),
    _mig("2g.45gb", 14, 2, 2, 45184, 36, 3, 2, 0, 2, 0, 3, _P2, _B),
    _mig("3g.90gb", 9, 3, 4, 90944, 54, 6, 3, 0, 3, 0, 2, _P4, _B),
    _mig("4g.90gb", 5, 4, 4, 90944, 72, 8, 4, 0, 4, 0, 1, _P0, _B),
    _mig("7g.180gb", 0, 7, 8, 182464, 144, 16, 7, 0, 7, 1, 1, _P0, _B),
)

_MIGSRC = {"mig_profiles": "mig-guide"}

NVIDIA_GPUS: tuple[GpuModel, ...] = (
    GpuModel(
        "B200",
        ("nvidia-b200", "b200-180gb"),
        "NVIDIA B200",
        "Blackwell",
        "10.0",
        148,
        183359,
        mig_profiles=B200_MIG,
        memory_slice_count=8,
        mig_toggle_without_reset=True,
        sources={
            "memory_mib": "nvml-obs",
            "multiprocessors": "datasheet",
            "compute_capability": "cuda-guide",
            **_MIGSRC,
            "mig_memory": "scaled",
        },
        unverified=("mig_toggle_without_reset",),
    ),
    GpuModel(
        "H200-141GB",
        ("H200", "nvidia-h200"),
        "NVIDIA H200",
        "Hopper",
        "9.0",
        132,
        143771,
        addressing_mode="HMM",
        mig_profiles=H200_MIG,
        memory_slice_count=8,
        mig_toggle_without_reset=True,
        sources={
            "memory_mib": "nvml-obs",
            "multiprocessors": "datasheet",
            "compute_capability": "cuda-guide",
            **_MIGSRC,
            "mig_memory": "h200-lgip",
        },
        unverified=("addressing_mode",),
    ),
    GpuModel(
        "H100-SXM-80GB",
        ("H100", "H100-SXM", "H100-80GB", "nvidia-h100-80gb"),
        "NVIDIA H100 80GB HBM3",
        "Hopper",
        "9.0",
        132,
        81559,
        addressing_mode="HMM",
        mig_profiles=H100_SXM_MIG,
        memory_slice_count=8,
        mig_toggle_without_reset=True,
        sources={
            "memory_mib": "peers-h100",
            "multiprocessors": "datasheet",
            "compute_capability": "cuda-guide",
            **_MIGSRC,
            "mig_memory": "peers-h100",
        },
    ),
    GpuModel(
        "H100-PCIe-80GB",
        ("H100-PCIe", "nvidia-h100-pcie"),
        "NVIDIA H100 PCIe",
        "Hopper",
        "9.0",
        114,
        81559,
        mig_profiles=H100_PCIE_MIG,
        memory_slice_count=8,
        mig_toggle_without_reset=True,
        sources={
            "memory_mib": "peers-h100",
            "multiprocessors": "datasheet",
            "compute_capability": "cuda-guide",
            **_MIGSRC,
            "mig_multiprocessors": "peers-h100",
        },
    ),
    GpuModel(
        "A100-80GB",
        ("A100-SXM4-80GB", "nvidia-a100-80gb"),
        "NVIDIA A100-SXM4-80GB",
        "Ampere",
        "8.0",
        108,
        81920,
        mig_profiles=A100_80GB_MIG,
        memory_slice_count=8,
        sources={
            "memory_mib": "nvml-obs",
            "multiprocessors": "datasheet",
            "compute_capability": "cuda-guide",
            **_MIGSRC,
            "mig_memory": "peers-h100",
        },
    ),
    GpuModel(
        "A100-40GB",
        ("A100", "A100-SXM4-40GB", "nvidia-a100"),
        "NVIDIA A100-SXM4-40GB",
        "Ampere",
        "8.0",
        108,
        40960,
        mig_profiles=A100_40GB_MIG,
        memory_slice_count=8,
        sources={
            "memory_mib": "nvml-obs",
            "multiprocessors": "datasheet",
            "compute_capability": "cuda-guide",
            **_MIGSRC,
            "mig_memory": "kep-4815",
        },
    ),
    GpuModel(
        "L40S",
        ("nvidia-l40s",),
        "NVIDIA L40S",
        "Ada Lovelace",
        "8.9",
        142,
        46068,
        sources={
            "memory_mib": "nvml-obs",
            "multiprocessors": "datasheet",
            "compute_capability": "cuda-guide",
        },
    ),
    GpuModel(
        "L4",
        ("nvidia-l4",),
        "NVIDIA L4",
        "Ada Lovelace",
        "8.9",
        58,
        23034,
        sources={
            "memory_mib": "nvml-obs",
            "multiprocessors": "datasheet",
            "compute_capability": "cuda-guide",
        },
    ),
    GpuModel(
        "A10",
        ("nvidia-a10",),
        "NVIDIA A10",
        "Ampere",
        "8.6",
        72,
        23028,
        sources={
            "memory_mib": "nvml-obs",
            "multiprocessors": "datasheet",
            "compute_capability": "cuda-guide",
        },
    ),
    GpuModel(
        "T4",
        ("nvidia-tesla-t4", "Tesla-T4"),
        "Tesla T4",
        "Turing",
        "7.5",
        40,
        15360,
        brand="Nvidia",
        sources={
            "memory_mib": "nvml-obs",
            "multiprocessors": "datasheet",
            "compute_capability": "cuda-guide",
        },
        unverified=("brand",),
    ),
    GpuModel(
        "V100-16GB",
        ("V100M16", "V100", "nvidia-tesla-v100"),
        "Tesla V100-SXM2-16GB",
        "Volta",
        "7.0",
        80,
        16384,
        sources={
            "memory_mib": "nvml-obs",
            "multiprocessors": "datasheet",
            "compute_capability": "cuda-guide",
        },
        unverified=("brand",),
    ),
    GpuModel(
        "V100-32GB",
        ("V100M32",),
        "Tesla V100-SXM2-32GB",
        "Volta",
        "7.0",
        80,
        32768,
        sources={
            "memory_mib": "nvml-obs",
            "multiprocessors": "datasheet",
            "compute_capability": "cuda-guide",
        },
        unverified=("brand",),
    ),
    GpuModel(
        "P100",
        ("P100-16GB", "nvidia-tesla-p100"),
        "Tesla P100-PCIE-16GB",
        "Pascal",
        "6.0",
        56,
        16276,
        sources={
            "memory_mib": "nvml-obs",
            "multiprocessors": "datasheet",
            "compute_capability": "cuda-guide",
        },
        unverified=("brand",),
    ),
)

_AMD_SRC = {"memory_mib": "datasheet", "compute_units": "amd-docs", "partition_modes": "amd-docs"}
AMD_GPUS: tuple[AmdModel, ...] = (
    AmdModel(
        "MI300X",
        ("amd-mi300x",),
        "AMD Instinct MI300X",
        "AI",
        "0x74a1",
        196592,  # rocm-smi VRAM Total 206141652992 B (several captures)
        304,
        1216,
        partition_modes=(
            AmdPartitionMode("spx", "nps1", 1),
            AmdPartitionMode("dpx", "nps1", 2),
            AmdPartitionMode("qpx", "nps1", 4),
            AmdPartitionMode("cpx", "nps1", 8),
            AmdPartitionMode("cpx", "nps4", 8),
        ),
        sources=_AMD_SRC,
        # family string, and whether DPX/QPX pair with NPS1 only.
        unverified=("family", "partition_modes"),
    ),
    AmdModel(
        # Each MI250X OAM module shows up as two GCDs, each its own GPU (card/render node): kdra counts GCDs.
        "MI250X",
        ("amd-mi250x",),
        "AMD Instinct MI250X",
        "AI",
        "0x740c",
        65520,  # KFD mem_banks size_in_bytes 68702699520 per GCD (one capture)
        110,
        440,
        partition_modes=(AmdPartitionMode("spx", "nps1", 1),),
        sources=_AMD_SRC,
        unverified=("family", "memory_mib"),
    ),
)

_2D = ("1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16")
TPUS: tuple[TpuModel, ...] = (
    TpuModel(
        "tpu-v5e",
        ("v5e", "v5litepod", "tpu-v5-lite-podslice"),
        "v5litepod",
        "tpu-v5-lite-podslice",
        16,
        (1, 4, 8),
        4,
        _2D,
        "vfio",
        sources={"hbm_gib": "gcp-tpu", "chips_per_host": "gcp-tpu", "topologies": "gcp-tpu"},
    ),
    TpuModel(
        "tpu-v5p",
        ("v5p", "tpu-v5p-slice"),
        "v5p",
        "tpu-v5p-slice",
        95,
        (4,),
        4,
        (
            "2x2x1",
            "2x2x2",
            "2x2x4",
            "2x4x4",
            "4x4x4",
            "4x4x8",
            "4x8x8",
            "8x8x8",
            "8x8x16",
            "8x16x16",
            "16x16x16",
            "16x16x24",
        ),
        "accel",
        sources={"hbm_gib": "gcp-tpu", "chips_per_host": "gcp-tpu", "topologies": "gcp-tpu"},
        unverified=("topologies",),  # the larger v5p shapes are a subset of what GKE lists
    ),
    TpuModel(
        "tpu-v6e",
        ("v6e", "trillium", "tpu-v6e-slice"),
        "v6e",
        "tpu-v6e-slice",
        32,
        (1, 4, 8),
        4,
        _2D,
        "vfio",
        sources={"hbm_gib": "gcp-tpu", "chips_per_host": "gcp-tpu", "topologies": "gcp-tpu"},
    ),
)

Model = GpuModel | AmdModel | TpuModel


def _index() -> dict[str, Model]:
    out: dict[str, Model] = {}
    models: list[Model] = [*NVIDIA_GPUS, *AMD_GPUS, *TPUS]
    for m in models:
        for name in (m.key, *m.aliases):
            out[name.lower()] = m
    return out


_BY_NAME = _index()


def all_models() -> list[Model]:
    return [*NVIDIA_GPUS, *AMD_GPUS, *TPUS]


def lookup(name: str) -> Model:
    """Find a model by key or alias, case-insensitively; InputError lists the known keys otherwise."""
    model = _BY_NAME.get(str(name).lower())
    if model is None:
        known = ", ".join(m.key for m in all_models())
        raise InputError(f"unknown accelerator model {name!r}; known models: {known}")
    return model
