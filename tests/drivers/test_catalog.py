"""The catalog is data: check it is internally consistent and that the numbers we could source are pinned."""

from __future__ import annotations

import pytest

from kdra.drivers.catalog import (
    AMD_GPUS,
    NVIDIA_GPUS,
    SOURCES,
    TPUS,
    GpuModel,
    lookup,
    mig_memory_size_gb,
)
from kdra.errors import InputError

REQUIRED_NVIDIA = [
    "B200",
    "H200-141GB",
    "H100-SXM-80GB",
    "H100-PCIe-80GB",
    "A100-40GB",
    "A100-80GB",
    "L40S",
    "L4",
    "A10",
    "T4",
    "V100-16GB",
    "V100-32GB",
    "P100",
]


def test_every_required_model_is_present() -> None:
    keys = {m.key for m in NVIDIA_GPUS}
    assert set(REQUIRED_NVIDIA) <= keys
    assert {m.key for m in AMD_GPUS} == {"MI300X", "MI250X"}
    assert {m.key for m in TPUS} == {"tpu-v5e", "tpu-v5p", "tpu-v6e"}


@pytest.mark.parametrize("model", NVIDIA_GPUS, ids=lambda m: m.key)
def test_sources_are_known_keys(model: GpuModel) -> None:
    assert model.sources, "every entry cites where its numbers come from"
    assert set(model.sources.values()) <= set(SOURCES)


@pytest.mark.parametrize("model", [m for m in NVIDIA_GPUS if m.mig_capable], ids=lambda m: m.key)
def test_mig_tables_are_consistent(model: GpuModel) -> None:
    assert model.memory_slice_count == 8
    gi_ids = [p.gi_profile_id for p in model.mig_profiles]
    assert sorted(gi_ids) == [0, 5, 9, 14, 15, 19, 20]
    for p in model.mig_profiles:
        # Every placement fits in the memory slices, and there are at least max_instances placements.
        assert all(s >= 0 and s + p.memory_slices <= 8 for s in p.placements)
        assert len(p.placements) >= p.max_instances
        # Profile names match memory with NVIDIA's own rounding (go-nvlib getMigMemorySizeGB).
        gb = int(p.name.split(".")[1].split("gb")[0])
        assert mig_memory_size_gb(model.memory_bytes, p.memory_mib) == gb, p.name
        assert p.memory_mib < model.memory_mib
        assert p.multiprocessors <= model.multiprocessors


def test_h100_numbers_pinned_to_peers_capture() -> None:
    h = lookup("H100")
    assert h.key == "H100-SXM-80GB"
    assert h.memory_mib == 81559
    p = h.profile("1g.10gb")
    assert (p.gi_profile_id, p.memory_mib, p.multiprocessors, p.placements) == (19, 9984, 16, tuple(range(7)))
    assert h.max_mig_capacities() == {
        "multiprocessors": 132,
        "copyEngines": 8,
        "decoders": 7,
        "encoders": 0,
        "jpegEngines": 7,
        "ofaEngines": 1,
        "memory": 81152 << 20,
    }


def test_a100_40gb_numbers_pinned_to_kep_4815() -> None:
    a = lookup("A100-40GB")
    assert [(p.name, p.memory_mib, p.multiprocessors, p.decoders) for p in a.mig_profiles] == [
        ("1g.5gb", 4864, 14, 0),
        ("1g.5gb+me", 4864, 14, 1),
        ("1g.10gb", 9856, 14, 1),
        ("2g.10gb", 9856, 28, 1),
        ("3g.20gb", 19968, 42, 2),
        ("4g.20gb", 19968, 56, 2),
        ("7g.40gb", 40192, 98, 5),
    ]


def test_unverified_numbers_are_marked() -> None:
    b200 = lookup("B200")
    assert "mig_toggle_without_reset" in b200.unverified
    assert all("multiprocessors" in p.unverified for p in b200.mig_profiles)
    assert "multiprocessors" in lookup("H100").profile("1g.20gb").unverified


def test_lookup_aliases_and_unknown() -> None:
    assert lookup("v100m16").key == "V100-16GB"
    assert lookup("TPU-V6E").key == "tpu-v6e"
    with pytest.raises(InputError, match="unknown accelerator model 'H900'"):
        lookup("H900")


def test_tpu_topologies() -> None:
    v6e = lookup("v6e")
    assert v6e.hosts_per_slice("2x4") == (1, 8)
    assert v6e.hosts_per_slice("4x4") == (4, 4)
    v5p = lookup("v5p")
    assert v5p.hosts_per_slice("2x2x1") == (1, 4)
    assert v5p.hosts_per_slice("4x4x4") == (16, 4)


@pytest.mark.parametrize("model", [m for m in NVIDIA_GPUS if m.mig_capable], ids=lambda m: m.key)
def test_every_profile_fits_its_max_instances(model: GpuModel) -> None:
    """`all-<profile>` layouts exist for every profile (mig-parted's all-* configs): the catalog's engine and
    memory numbers must let max_instances of a profile fit the full GPU's counters, or DynamicMIG would be
    unable to allocate what the hardware can."""
    from kdra.drivers.nvidia import place_mig_layout

    for p in model.mig_profiles:
        placed = place_mig_layout(model, [p.name] * p.max_instances, model.key)
        assert len(placed) == p.max_instances
    # and the NVIDIA-documented mixed layouts fit too
    names = {p.gi_profile_id: p.name for p in model.mig_profiles}
    for layout in ([9, 5], [14, 14, 9], [9, 14, 19, 19], [15, 15, 15, 15], [14, 14, 14, 19]):
        place_mig_layout(model, [names[i] for i in layout], model.key)
