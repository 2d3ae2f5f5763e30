"""The exporter's metric computation on in-memory stores: values, incremental updates, exposition format."""

from __future__ import annotations

import gzip
import shutil
import subprocess
import urllib.request
from typing import Any

import pytest

from kdra.cluster.store import MemoryStore, clone
from kdra.observe.exposition import parse_text
from kdra.observe.model import FleetState
from kdra.observe.server import MetricsServer
from kdra.observe.sources import attach_store

GI = 1024**3


def node(name: str, gpu_mem_mib: int | None = None) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name}
    if gpu_mem_mib:
        labels["nvidia.com/gpu.memory"] = str(gpu_mem_mib)
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def gpu(name: str, mem: str = "80Gi", **extra: Any) -> dict[str, Any]:
    d: dict[str, Any] = {
        "name": name,
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": f"GPU-{name}"},
            "productName": {"string": "NVIDIA H100 80GB HBM3"},
        },
        "capacity": {"memory": {"value": mem}},
    }
    d.update(extra)
    return d


def slice_(node_name: str, devices: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-gpu"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
            **spec,
        },
    }


def claim(
    name: str,
    results: list[dict[str, Any]],
    *,
    pods: tuple[str, ...] = (),
    requests: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
    ns: str = "team-a",
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": ns, "annotations": annotations or {}},
        "spec": {
            "devices": {
                "requests": requests or [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]
            }
        },
    }
    if results:
        obj["status"] = {
            "allocation": {"devices": {"results": results}},
            "reservedFor": [{"resource": "pods", "name": p, "uid": f"uid-{p}"} for p in pods],
        }
    return obj


def result(device: str, pool: str = "n1", request: str = "gpu", **extra: Any) -> dict[str, Any]:
    return {"request": request, "driver": "gpu.nvidia.com", "pool": pool, "device": device, **extra}


def pod(name: str, claims: list[str], node_name: str = "", **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a", **meta},
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "c", "image": "x"}],
            "resourceClaims": [{"name": c, "resourceClaimName": c} for c in claims],
        },
        "status": {"phase": "Pending" if not node_name else "Running"},
    }


def samples(state: FleetState, name: str) -> list[tuple[dict[str, str], float]]:
    # the incrementally kept aggregates always equal a recomputation from the records
    recomputed = state.sums.fleet()
    assert state.sums.fleet_groups() == {g: [round(v, 6) for v in row] for g, row in recomputed.items()}
    return [(lb, v) for n, lb, v in parse_text(state.render().decode()) if n == name]


def value(state: FleetState, name: str, **want: str) -> float:
    hits = [v for lb, v in samples(state, name) if all(lb.get(k) == x for k, x in want.items())]
    assert len(hits) == 1, (name, want, hits)
    return hits[0]


@pytest.fixture
def store() -> MemoryStore:
    s = MemoryStore()
    s.create(node("n1", gpu_mem_mib=81920))
    s.create(slice_("n1", [gpu("gpu-0"), gpu("gpu-1"), gpu("gpu-2", allowMultipleAllocations=True)]))
    return s


def test_device_series_carry_claim_pod_and_dcgm_labels(store: MemoryStore) -> None:
    state = FleetState()
    attach_store(state, store)
    store.create(claim("train", [result("gpu-0"), result("gpu-1")], pods=("trainer",)))
    info = samples(state, "kdra_claim_device_info")
    assert len(info) == 2
    lb = next(lb for lb, _ in info if lb["device"] == "gpu-1")
    assert lb == {
        "claim": "train",
        "namespace": "team-a",
        "pod": "trainer",
        "driver": "gpu.nvidia.com",
        "pool": "n1",
        "device": "gpu-1",
        "request": "gpu",
        "node": "n1",
        "device_class": "gpu.nvidia.com",
        "product": "NVIDIA H100 80GB HBM3",
        "dra_claim_name": "train",
        "dra_claim_namespace": "team-a",
        "dra_driver_name": "gpu.nvidia.com",
        "dra_pool_name": "n1",
        "dra_device_name": "gpu-1",
    }
    assert value(state, "kdra_claim_device_memory_bytes", dra_device_name="gpu-1") == 80 * GI
    assert value(state, "kdra_claim_device_gpu_equivalents", dra_device_name="gpu-1") == 1
    assert value(state, "kdra_device_allocations", device="gpu-0") == 1
    assert value(state, "kdra_device_allocations", device="gpu-2") == 0
    assert value(state, "kdra_fleet_devices_allocated", node="n1") == 2
    assert value(state, "kdra_fleet_devices", node="n1") == 3
    assert value(state, "kdra_fleet_gpus", node="n1") == 3
    assert value(state, "kdra_fleet_gpu_equivalents_allocated", node="n1") == 2


def test_shares_count_consumed_capacity_and_stranded_memory(store: MemoryStore) -> None:
    state = FleetState()
    attach_store(state, store)
    req = [
        {
            "name": "gpu",
            "exactly": {
                "deviceClassName": "gpu.nvidia.com",
                "capacity": {"requests": {"memory": "20Gi"}},
            },
        }
    ]
    store.create(
        claim(
            "a",
            [result("gpu-2", shareID="s1", consumedCapacity={"memory": "24Gi"})],
            pods=("pa",),
            requests=req,
        )
    )
    store.create(
        claim("b", [result("gpu-2", shareID="s2", consumedCapacity={"memory": "16Gi"})], pods=("pb",))
    )
    assert value(state, "kdra_device_allocations", device="gpu-2") == 2
    assert value(state, "kdra_device_allocated_ratio", device="gpu-2") == pytest.approx(0.5)
    assert value(state, "kdra_claim_device_consumed_capacity", dra_claim_name="a") == 24 * GI
    assert value(state, "kdra_claim_device_gpu_equivalents", dra_claim_name="a") == pytest.approx(0.3)
    assert samples(state, "kdra_claim_device_info")[0][0]["share_id"] in ("s1", "s2")
    # a asked for 20Gi and holds 24Gi: 4Gi stranded; b says nothing, so nothing is counted for it
    assert value(state, "kdra_claim_stranded_memory_bytes", claim="a") == 4 * GI
    assert [lb["claim"] for lb, _ in samples(state, "kdra_claim_stranded_memory_bytes")] == ["a"]
    assert value(state, "kdra_fleet_stranded_memory_bytes", node="n1") == 4 * GI
    assert value(state, "kdra_fleet_memory_requested_bytes", node="n1") == 20 * GI
    assert value(state, "kdra_fleet_memory_allocated_bytes", node="n1") == 40 * GI


def test_stranded_from_annotations_and_selectors(store: MemoryStore) -> None:
    state = FleetState()
    attach_store(state, store)
    sel = [
        {
            "name": "gpu",
            "exactly": {
                "deviceClassName": "gpu.nvidia.com",
                "selectors": [
                    {
                        "cel": {
                            "expression": "device.capacity['gpu.nvidia.com'].memory"
                            ".compareTo(quantity('40Gi')) >= 0"
                        }
                    }
                ],
            },
        }
    ]
    store.create(claim("by-selector", [result("gpu-0")], pods=("p1",), requests=sel))
    store.create(claim("by-annotation", [result("gpu-1")], annotations={"kdra.dev/gpu-memory": "70Gi"}))
    assert value(state, "kdra_claim_stranded_memory_bytes", claim="by-selector") == 40 * GI
    assert value(state, "kdra_claim_stranded_memory_bytes", claim="by-annotation") == 10 * GI
    assert value(state, "kdra_fleet_stranded_memory_bytes", node="n1") == 50 * GI


def test_pod_annotation_counts_when_the_claim_says_nothing(store: MemoryStore) -> None:
    state = FleetState()
    attach_store(state, store)
    store.create(claim("c", [result("gpu-0")], pods=("p",)))
    assert samples(state, "kdra_claim_stranded_memory_bytes") == []
    store.create(pod("p", ["c"], "n1", annotations={"kdra.dev/gpu-memory": "60Gi"}))
    assert value(state, "kdra_claim_stranded_memory_bytes", claim="c") == 20 * GI


def test_updates_and_deletes_are_incremental(store: MemoryStore) -> None:
    state = FleetState()
    attach_store(state, store)
    c = store.create(claim("c", [result("gpu-0")], pods=("p1",)))
    assert value(state, "kdra_claim_device_info", device="gpu-0", pod="p1") == 1
    upd = clone(c)
    upd["status"]["reservedFor"].append({"resource": "pods", "name": "p0", "uid": "u0"})
    store.update(upd, subresource="status")
    assert value(state, "kdra_claim_device_info", device="gpu-0") == 1
    assert samples(state, "kdra_claim_device_info")[0][0]["pod"] == "p0,p1"
    # deallocated: its series go, the device is free again
    upd = clone(store.get("ResourceClaim", "c", "team-a"))
    upd["status"] = {}
    store.update(upd, subresource="status")
    assert samples(state, "kdra_claim_device_info") == []
    assert value(state, "kdra_device_allocations", device="gpu-0") == 0
    assert value(state, "kdra_fleet_devices_allocated", node="n1") == 0
    assert value(state, "kdra_pending_claims", reason="NoConsumer") == 1
    store.delete("ResourceClaim", "c", "team-a")
    assert samples(state, "kdra_pending_claims") == []


def test_slice_changes_relabel_the_claims_holding_its_devices(store: MemoryStore) -> None:
    state = FleetState()
    attach_store(state, store)
    store.create(claim("c", [result("gpu-0")], pods=("p",)))
    s = clone(store.get("ResourceSlice", "n1-gpu"))
    s["spec"]["devices"][0]["attributes"]["productName"] = {"string": "NVIDIA H200"}
    store.update(s)
    assert samples(state, "kdra_claim_device_info")[0][0]["product"] == "NVIDIA H200"
    before = samples(state, "kdra_claim_device_info")[0][0]
    store.delete("ResourceSlice", "n1-gpu")
    assert samples(state, "kdra_device_allocations") == []
    # the claim still holds its (now unpublished) device: still exported, with the labels it had, so the
    # series keeps its identity
    assert samples(state, "kdra_claim_device_info")[0][0] == before


def test_a_claim_known_before_its_slice_is_exported_only_with_every_label() -> None:
    # Prometheus drops empty labels: a series written with product="" and then with the product would be
    # two series for one device. Nothing is written until the device is known.
    store = MemoryStore()
    state = FleetState()
    attach_store(state, store)
    store.create(claim("c", [result("gpu-0")], pods=("p",)))
    store.create(claim("admin", [result("gpu-0", adminAccess=True)], pods=("q",)))
    assert samples(state, "kdra_claim_device_info") == []
    assert samples(state, "kdra_claim_device_gpu_equivalents") == []
    store.create(node("n1", gpu_mem_mib=81920))
    store.create(slice_("n1", [gpu("gpu-0")]))
    info = {lb["claim"]: lb for lb, _ in samples(state, "kdra_claim_device_info")}
    assert info["c"]["product"] == info["admin"]["product"] == "NVIDIA H100 80GB HBM3"
    assert info["admin"]["admin_access"] == "true"
    assert value(state, "kdra_claim_device_gpu_equivalents", dra_claim_name="c") == 1


def test_mig_partitions_count_their_memory_fraction_and_counters() -> None:
    state = FleetState()
    counters = {
        "memory": {"value": "40Gi"},
        "memory-slice-0": {"value": "1"},
        "memory-slice-1": {"value": "1"},
    }
    mig = {
        "name": "gpu-0-mig-1g10gb",
        "attributes": {
            "type": {"string": "mig"},
            "profile": {"string": "1g.10gb"},
            "uuid": {"string": "MIG-1"},
        },
        "capacity": {"memory": {"value": "10Gi"}},
        "consumesCounters": [
            {
                "counterSet": "gpu-0-cs",
                "counters": {"memory": {"value": "10Gi"}, "memory-slice-0": {"value": "1"}},
            }
        ],
    }
    state.apply(
        "ADDED",
        "ResourceSlice",
        slice_("a1", [mig], sharedCounters=[{"name": "gpu-0-cs", "counters": counters}]),
    )
    state.apply("ADDED", "ResourceClaim", claim("m", [result("gpu-0-mig-1g10gb", pool="a1")], pods=("p",)))
    assert value(state, "kdra_claim_device_gpu_equivalents", dra_claim_name="m") == pytest.approx(0.25)
    assert value(state, "kdra_claim_device_consumes", counter="memory-slice-0") == 1
    assert value(state, "kdra_claim_device_consumes", counter="memory") == 10 * GI
    info = samples(state, "kdra_claim_device_info")[0][0]
    assert info["dra_mig_profile"] == "1g.10gb" and info["dra_mig_device_uuid"] == "MIG-1"
    assert samples(state, "kdra_device_allocations")[0][0]["partition"] == "true"
    assert value(state, "kdra_fleet_gpus", node="a1") == 1


def test_pending_pods_and_claims_by_reason(store: MemoryStore) -> None:
    state = FleetState()
    attach_store(state, store)
    store.create(claim("c1", []))
    store.create(claim("c2", []))
    p = pod("p1", ["c1"])
    p["status"]["conditions"] = [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/3 nodes are available: 1 Insufficient cpu, 2 cannot allocate all claims. "
            "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.",
        }
    ]
    store.create(p)
    gated = pod("p2", [])
    gated["spec"]["schedulingGates"] = [{"name": "x"}]
    store.create(gated)
    store.create(pod("p3", ["c2"]))
    assert value(state, "kdra_pending_pods", reason="Unschedulable") == 1
    assert value(state, "kdra_pending_pods", reason="SchedulingGated") == 1
    assert value(state, "kdra_pending_pods", reason="NotYetAttempted") == 1
    reasons = {lb["reason"]: v for lb, v in samples(state, "kdra_pending_pod_node_reasons")}
    assert reasons == {"Insufficient cpu": 1, "cannot allocate all claims": 1}
    assert value(state, "kdra_pending_claims", reason="PodUnschedulable") == 1
    assert value(state, "kdra_pending_claims", reason="WaitingForScheduling") == 1


def test_scheduling_latency_from_pod_timestamps() -> None:
    state = FleetState()
    p = pod("p", [], "n1")
    p["metadata"]["uid"] = "u1"
    p["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    p["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:07Z"}
    ]
    state.apply("ADDED", "Pod", p)
    state.apply("MODIFIED", "Pod", p)  # counted once
    assert value(state, "kdra_pod_scheduling_duration_seconds_count") == 1
    assert value(state, "kdra_pod_scheduling_duration_seconds_sum") == 7
    assert value(state, "kdra_pod_scheduling_duration_seconds_bucket", le="5") == 0
    assert value(state, "kdra_pod_scheduling_duration_seconds_bucket", le="10") == 1


def test_render_is_cached_until_something_changes(store: MemoryStore) -> None:
    state = FleetState()
    attach_store(state, store)
    first = state.render_parts()
    assert state.render_parts() is first
    store.create(claim("c", [result("gpu-0")]))
    assert state.render_parts() is not first


def test_relist_drops_objects_that_went_away(store: MemoryStore) -> None:
    state = FleetState()
    attach_store(state, store)
    store.create(claim("c1", [result("gpu-0")]))
    store.create(claim("c2", [result("gpu-1")]))
    state.replace("ResourceClaim", [store.get("ResourceClaim", "c2", "team-a")])
    assert [lb["claim"] for lb, _ in samples(state, "kdra_claim_device_info")] == ["c2"]
    assert value(state, "kdra_device_allocations", device="gpu-0") == 0


def test_label_values_are_escaped() -> None:
    state = FleetState()
    odd = slice_("n1", [gpu('dev"\\x')], pool={"name": "p\nq", "generation": 1, "resourceSliceCount": 1})
    state.apply("ADDED", "ResourceSlice", odd)
    state.apply("ADDED", "ResourceClaim", claim("c", [result('dev"\\x', pool="p\nq")], ns="n"))
    info = samples(state, "kdra_claim_device_info")[0][0]
    assert info["device"] == 'dev"\\x' and info["pool"] == "p\nq"


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian's prometheus package) missing")
def test_promtool_accepts_the_exposition(store: MemoryStore) -> None:
    state = FleetState()
    attach_store(state, store)
    store.create(claim("c", [result("gpu-2", shareID="s", consumedCapacity={"memory": "8Gi"})], pods=("p",)))
    state.observe_attempt("scheduled", 0.003)
    out = subprocess.run(
        ["promtool", "check", "metrics"], input=state.render(), capture_output=True, check=False
    )
    assert out.returncode == 0, out.stdout.decode() + out.stderr.decode()


def test_http_endpoint_serves_plain_and_gzip(store: MemoryStore) -> None:
    state = FleetState()
    attach_store(state, store)
    server = MetricsServer(state, ("127.0.0.1", 0))
    server.ready.set()
    server.serve_in_thread()
    try:
        with urllib.request.urlopen(server.url, timeout=10) as resp:
            plain = resp.read()
            assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        req = urllib.request.Request(server.url, headers={"Accept-Encoding": "gzip"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.headers["Content-Encoding"] == "gzip"
            assert gzip.decompress(resp.read()) == plain
        health = server.url.replace("/metrics", "/healthz")
        with urllib.request.urlopen(health, timeout=10) as resp:
            assert resp.read() == b"ok\n"
    finally:
        server.shutdown()
        server.server_close()
    assert b"kdra_device_allocations{" in plain


def test_unreadable_objects_are_counted_and_change_nothing(store: MemoryStore) -> None:
    state = FleetState()
    attach_store(state, store)
    store.create(claim("c", [result("gpu-0")], pods=("p",)))
    before = state.render()
    bad = claim("c", [result("gpu-1")])
    bad["status"]["allocation"]["devices"]["results"] = [7]  # not an object
    state.apply("MODIFIED", "ResourceClaim", bad)
    bad_slice = slice_("n1", [gpu("gpu-0")])
    bad_slice["spec"]["devices"][0]["capacity"] = "80Gi"
    state.apply("MODIFIED", "ResourceSlice", bad_slice)
    state.apply(
        "ADDED", "Pod", {"metadata": {"name": "p", "namespace": "team-a"}, "spec": {"resourceClaims": 3}}
    )
    after = state.render().decode()
    assert value(state, "kdra_exporter_watch_event_errors_total", kind="ResourceClaim") == 1
    assert value(state, "kdra_exporter_watch_event_errors_total", kind="ResourceSlice") == 1
    assert value(state, "kdra_exporter_watch_event_errors_total", kind="Pod") == 1
    keep = ("kdra_claim_", "kdra_device_", "kdra_fleet_", "kdra_pending_")
    assert [ln for ln in before.decode().splitlines() if ln.startswith(keep)] == [
        ln for ln in after.splitlines() if ln.startswith(keep)
    ]


def test_a_driver_replacing_its_slices_keeps_the_devices(store: MemoryStore) -> None:
    state = FleetState()
    attach_store(state, store)
    store.create(claim("c", [result("gpu-0")], pods=("p",)))
    replacement = slice_("n1", [gpu("gpu-0"), gpu("gpu-1"), gpu("gpu-2")])
    replacement["metadata"]["name"] = "n1-gpu-gen2"
    store.create(replacement)
    store.delete("ResourceSlice", "n1-gpu")
    assert value(state, "kdra_device_allocations", device="gpu-0") == 1
    assert value(state, "kdra_fleet_devices", node="n1") == 3
    assert samples(state, "kdra_claim_device_info")[0][0]["node"] == "n1"
