"""Exporter at scale: 5,000 nodes x 8 GPUs (40,000 devices), 40,000 allocated claims, 40,000 bound pods.

The objects arrive as watch events would (one dict at a time, dropped after it is applied), so the figures
are what `kdra exporter --kubeconfig` holds and serves for such a cluster. Scrapes go through the real HTTP
server on loopback. Targets (issue 9): a scrape answers in under 1 s; the process stays under 1 GiB.

    python benchmarks/bench_exporter.py [--nodes 5000] [--gpus 8] [--claims 40000]

With prometheus_client importable, the same 40,000 info series are also rendered through it, for the
record of why the exposition is written by hand.
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import time
import urllib.request
from typing import Any

from kdra.observe.model import FleetState
from kdra.observe.server import MetricsServer

PRODUCT = "NVIDIA H100 80GB HBM3"


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def node(i: int) -> dict[str, Any]:
    name = f"gpu-node-{i:05d}"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"nvidia.com/gpu.memory": "81559", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        },
    }


def slice_(i: int, gpus: int) -> dict[str, Any]:
    name = f"gpu-node-{i:05d}"
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{name}-gpu.nvidia.com", "resourceVersion": str(i)},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": name,
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"gpu-{g}",
                    "attributes": {
                        "type": {"string": "gpu"},
                        "uuid": {"string": f"GPU-{i:05d}-{g}"},
                        "productName": {"string": PRODUCT},
                        "architecture": {"string": "Hopper"},
                        "driverVersion": {"version": "580.126.20"},
                    },
                    "capacity": {"memory": {"value": "81559Mi"}},
                }
                for g in range(gpus)
            ],
        },
    }


def claim(c: int, gpus: int, pod_name: str, gen: int = 0, name: str | None = None) -> dict[str, Any]:
    n, g = divmod(c, gpus)
    ns = f"team-{c % 50:02d}"
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": name or f"{pod_name}-gpu-x7k2q",
            "namespace": ns,
            "uid": f"uid-claim-{c}",
            "resourceVersion": str(100000 + c + gen),
            "annotations": {"kdra.dev/gpu-memory": "60Gi"} if c % 3 == 0 else {},
        },
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "gpu",
                            "driver": "gpu.nvidia.com",
                            "pool": f"gpu-node-{n:05d}",
                            "device": f"gpu-{g}",
                        }
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [f"gpu-node-{n:05d}"]}
                            ]
                        }
                    ]
                },
            },
            "reservedFor": [{"resource": "pods", "name": pod_name, "uid": f"uid-pod-{c}"}],
        },
    }


def pod(c: int, gpus: int) -> dict[str, Any]:
    n = c // gpus
    name = f"job-{c:06d}-worker-0"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": f"team-{c % 50:02d}",
            "uid": f"uid-pod-{c}",
            "creationTimestamp": "2026-11-29T10:00:00Z",
            "labels": {"kai.scheduler/queue": f"team-{c % 50:02d}"},
        },
        "spec": {
            "nodeName": f"gpu-node-{n:05d}",
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
            "containers": [{"name": "main", "image": "x"}],
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-29T10:00:03Z"}
            ],
            "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": f"{name}-gpu-x7k2q"}],
        },
    }


def scrape(url: str, gzip_ok: bool = False) -> tuple[float, int]:
    req = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"} if gzip_ok else {})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=60) as resp:
        body = resp.read()
    return time.perf_counter() - t0, len(body)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--claims", type=int, default=40000)
    args = ap.parse_args()
    claims = min(args.claims, args.nodes * args.gpus)
    base = rss_mib()
    gc.collect()
    state = FleetState()
    t0 = time.perf_counter()
    for i in range(args.nodes):
        state.apply("ADDED", "Node", node(i))
        state.apply("ADDED", "ResourceSlice", slice_(i, args.gpus))
    for c in range(claims):
        p = pod(c, args.gpus)
        state.apply("ADDED", "ResourceClaim", claim(c, args.gpus, p["metadata"]["name"]))
        state.apply("ADDED", "Pod", p)
    load = time.perf_counter() - t0
    events = 2 * args.nodes + 2 * claims
    gc.collect()
    after_load = rss_mib()
    server = MetricsServer(state, ("127.0.0.1", 0))
    t_warm = time.perf_counter()
    server.warm()  # what `kdra exporter` does before it reports ready
    warmup = time.perf_counter() - t_warm
    server.ready.set()
    server.serve_in_thread()
    url = server.url
    try:
        first, size = scrape(url)
        warm, _ = scrape(url)
        warm_gz, size_gz = scrape(url, gzip_ok=True)
        # 100 claims change hands (a new pod reserves each): series and aggregates rebuilt for them only
        t1 = time.perf_counter()
        for c in range(0, 100):
            old_name = pod(c, args.gpus)["metadata"]["name"]
            state.apply(
                "MODIFIED",
                "ResourceClaim",
                claim(c, args.gpus, f"job-{c:06d}-worker-1", gen=1, name=f"{old_name}-gpu-x7k2q"),
            )
        apply_100 = time.perf_counter() - t1
        after_change, _ = scrape(url)
        render_change = state.last_render_seconds
        after_change_gz, _ = scrape(url, gzip_ok=True)
        series = state.render().count(b"\n") - state.render().count(b"\n#")
        rss = rss_mib()
    finally:
        server.shutdown()
        server.server_close()
    peak = peak_mib()
    print(
        f"cluster: {args.nodes} nodes x {args.gpus} GPUs = {args.nodes * args.gpus} devices, {claims} claims"
    )
    print(f"load:    {events} watch events applied in {load:.2f} s ({events / load:,.0f}/s)")
    print(f"payload: {series:,} series, {size / 1e6:.1f} MB plain, {size_gz / 1e6:.1f} MB gzip")
    print(
        f"scrape:  first {first * 1000:.0f} ms (after the {warmup * 1000:.0f} ms initial render and gzip "
        f"done before ready), again {warm * 1000:.0f} ms, first gzip {warm_gz * 1000:.0f} ms"
    )
    print(
        f"change:  100 claims re-applied in {apply_100 * 1000:.0f} ms; "
        f"next scrape {after_change * 1000:.0f} ms (rendering {render_change * 1000:.0f} ms), "
        f"gzip {after_change_gz * 1000:.0f} ms"
    )
    with open("/proc/loadavg") as f:
        load_avg = f.read().split()[0]
    print(f"machine: load average {load_avg} on {os.cpu_count()} CPUs while measuring")
    print(
        f"memory:  RSS {rss:.0f} MiB (interpreter {base:.0f} MiB, after load {after_load:.0f} MiB), "
        f"peak {peak:.0f} MiB"
    )
    worst = max(first, warm, warm_gz, after_change, after_change_gz)
    ok = worst < 1.0 and peak < 1024
    print(
        f"targets: scrape < 1 s: {'yes' if worst < 1.0 else 'NO'} (worst {worst * 1000:.0f} ms); "
        f"memory < 1 GiB: {'yes' if peak < 1024 else 'NO'}"
    )
    compare_prometheus_client(state)
    if not ok:
        raise SystemExit(1)


def compare_prometheus_client(state: FleetState) -> None:
    try:
        from prometheus_client import CollectorRegistry, Gauge, generate_latest
    except ImportError:
        print("prometheus_client: not installed, comparison skipped")
        return
    from kdra.observe.families import CLAIM_DEVICE_LABELS

    registry = CollectorRegistry()
    g = Gauge("kdra_claim_device_info", "info", CLAIM_DEVICE_LABELS, registry=registry)
    t0 = time.perf_counter()
    for (ns, name), c in state.claims.items():
        for r in c.results:
            node = state.result_node(c, r)
            g.labels(
                name,
                ns,
                ",".join(c.pods),
                r.driver,
                r.pool,
                r.device,
                r.request,
                node,
                "gpu.nvidia.com",
                PRODUCT,
                name,
                ns,
                r.driver,
                r.pool,
                r.device,
            ).set(1)
    fill = time.perf_counter() - t0
    t1 = time.perf_counter()
    out = generate_latest(registry)
    gen = time.perf_counter() - t1
    print(
        f"prometheus_client: the {len(state.claims)} info series alone: labels set in {fill * 1000:.0f} ms, "
        f"generate_latest {gen * 1000:.0f} ms per scrape ({len(out) / 1e6:.1f} MB)"
    )


if __name__ == "__main__":
    main()
