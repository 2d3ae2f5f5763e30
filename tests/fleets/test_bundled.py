"""Every bundled fleet loads, renders and validates with kdra's own API validation."""

from __future__ import annotations

import hashlib
import importlib
from collections import Counter
from pathlib import Path

import pytest

from kdra.fleets import bundled_names, load_fleet, render, summarize

validation = importlib.import_module("kdra.validation.rules")
OPENB_CSV = Path("/work/shared/traces/alibaba-gpu-2023/openb_node_list_gpu_node.csv")


@pytest.mark.parametrize("name", bundled_names())
def test_bundled_fleet_renders_and_validates(name: str) -> None:
    fleet = load_fleet(name)
    objs = render(fleet)
    validation.validate_objects(objs)
    kinds = Counter(o["kind"] for o in objs)
    assert kinds["Node"] == fleet.node_count
    # every slice belongs to a rendered node, pool = node name, counts consistent per pool
    nodes = {o["metadata"]["name"] for o in objs if o["kind"] == "Node"}
    per_pool: dict[str, list[dict]] = {}
    for s in (o for o in objs if o["kind"] == "ResourceSlice"):
        assert s["spec"]["nodeName"] in nodes
        per_pool.setdefault(s["spec"]["driver"] + "/" + s["spec"]["pool"]["name"], []).append(s)
    for slices in per_pool.values():
        assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {len(slices)}
    assert (
        len({o["metadata"]["name"] for o in objs if o["kind"] == "ResourceSlice"}) == kinds["ResourceSlice"]
    )


def test_mixed_fleet_contents() -> None:
    fleet = load_fleet("mixed")
    assert 20 <= fleet.node_count <= 60
    rows = {r.pool: r for r in summarize(fleet)}
    assert rows["a100"].partitioning.startswith("dynamic MIG")
    assert rows["l4"].sharing.startswith("consumable shares")
    objs = render(fleet)
    zones = {o["metadata"]["labels"].get("topology.kubernetes.io/zone") for o in objs if o["kind"] == "Node"}
    assert zones == {"zone-a", "zone-b"}
    h100 = [o for o in objs if o["kind"] == "Node" and o["metadata"]["labels"]["kdra.dev/pool"] == "h100"]
    assert {n["metadata"]["labels"]["kdra.dev/nvlink-domain"] for n in h100} == {
        "zone-a-h100-nvl0",
        "zone-b-h100-nvl0",
    }
    dev = next(o for o in objs if o["kind"] == "ResourceSlice" and o["spec"]["nodeName"] == "h100-zone-a-0")
    assert dev["spec"]["devices"][0]["attributes"]["kdra.dev/nvlinkDomain"] == {"string": "zone-a-h100-nvl0"}
    tpu = [o for o in objs if o["kind"] == "Node" and o["metadata"]["labels"]["kdra.dev/pool"] == "tpu-v6e"]
    assert all(n["spec"]["taints"][0]["key"] == "google.com/tpu" for n in tpu)
    assert tpu[0]["metadata"]["labels"]["cloud.google.com/gke-tpu-topology"] == "4x4"


def test_uniform_500() -> None:
    fleet = load_fleet("uniform-500")
    rows = summarize(fleet)
    assert fleet.node_count == 500 and rows[0].devices == 5000


def test_alibaba_openb_matches_trace_totals() -> None:
    fleet = load_fleet("alibaba-openb")
    assert fleet.node_count == 1213
    assert sum(r.accelerators for r in summarize(fleet)) == 6212
    by_code: Counter[str] = Counter()
    for p in fleet.pools:
        by_code[p.labels["kdra.dev/trace-gpu-model"]] += p.count
    assert by_code == {"G2": 549, "T4": 404, "G3": 39, "P100": 134, "V100M32": 30, "V100M16": 55, "A10": 2}
    cpu_milli = sum(p.count * int(p.cpu) * 1000 for p in fleet.pools)
    assert cpu_milli == 107_018_000


@pytest.mark.skipif(not OPENB_CSV.exists(), reason="trace CSV not available")
def test_alibaba_openb_bundled_equals_csv() -> None:
    assert hashlib.sha256(OPENB_CSV.read_bytes()).hexdigest().startswith("2beca64b")
    from_csv = load_fleet(str(OPENB_CSV))
    bundled = load_fleet("alibaba-openb")
    assert [
        (p.names, p.cpu, p.memory, p.accelerator.count if p.accelerator else 0) for p in from_csv.pools
    ] == [(p.names, p.cpu, p.memory, p.accelerator.count if p.accelerator else 0) for p in bundled.pools]
