"""Scheduler throughput, DRA with template claims (the shape of SchedulingWithResourceClaimTemplate).

Workloads (each in a fresh process, so peak memory is its own):
  template-500   uniform-500 (500 nodes x 10 GPUs), 5,000 pods with one template claim for one device
                 (upstream's CI floor is 40-56 pods/s, developer machines ~260 pods/s; kdra's target: 1,000)
  gpus-5000      5,000 nodes x 8 H100, 40,000 pods with one template claim for one GPU (target: 300 pods/s)
  mixed-mig      the bundled `mixed` fleet (A100s in dynamic MIG mode), 400 pods asking for any MIG device

Each pod's time counts from its creation (the resourceclaim controller creates its claim) to its binding
(claim allocated and reserved, pod bound); throughput = pods / (time of the last binding - first creation).
Peak memory is the process's ru_maxrss (fleet objects, store, scheduler and allocator index included).
Resident memory (RSS): idle (fleet loaded, index built, no pods), growth per 1,000 bound pods (pods, claims
and the scheduler's view of them), and after churn: five rounds in which a tenth of the pods complete and
are deleted (their claims go with them) and as many new pods arrive and are bound; a scheduler that keeps
nothing of the pods that left ends near where it was before the churn.

    python benchmarks/bench_scheduler.py [--only NAME] [--pods N]
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

WORKLOADS = ("template-500", "gpus-5000", "mixed-mig")


def _fleet(name: str) -> Any:
    from kdra.fleets import load_fleet, parse_fleet

    if name != "gpus-5000":
        return load_fleet("uniform-500" if name == "template-500" else "mixed")
    return parse_fleet(
        {
            "apiVersion": "kdra.dev/v1alpha1",
            "kind": "Fleet",
            "metadata": {"name": "h100-5000"},
            "spec": {
                "pools": [
                    {
                        "name": "h100",
                        "count": 5000,
                        "namePattern": "h100-{index:05d}",
                        "cpu": "224",
                        "memory": "2Ti",
                        "accelerator": {"model": "H100-SXM-80GB", "count": 8},
                    }
                ]
            },
        }
    )


def _template(name: str) -> dict[str, Any]:
    exactly: dict[str, Any] = {
        "deviceClassName": "mig.nvidia.com" if name == "mixed-mig" else "gpu.nvidia.com"
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-device", "namespace": "default"},
        "spec": {"spec": {"devices": {"requests": [{"name": "dev", "exactly": exactly}]}}},
    }


def _pod(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"pod-{i:05d}", "namespace": "default"},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "100Mi"},
                        "claims": [{"name": "dev"}],
                    },
                }
            ],
            "resourceClaims": [{"name": "dev", "resourceClaimTemplateName": "one-device"}],
        },
    }


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def settle_setup() -> None:
    """The fleet, store and index made before timing go where a running scheduler has them by then: in
    the collector's oldest generation, which young collections do not scan. Left young, the first
    generation-1 collection inside the timed window scans all of them (1.6-2 s of a 9 s window at
    5,000 nodes) and the figure measures when that collection happens to fall."""
    gc.collect()
    gc.freeze()


def _churn(store: Any, sched: Any, first: int, rounds: int, per_round: int) -> int:
    """Complete and delete the oldest `per_round` bound pods, create as many new ones, schedule; returns
    the next pod number."""
    n = first
    for _ in range(rounds):
        done = [p for p in store.list("Pod") if (p.get("spec") or {}).get("nodeName")][:per_round]
        for p in done:
            meta = p["metadata"]
            store.update(dict(p, status=dict(p.get("status") or {}, phase="Succeeded")), subresource="status")
            store.delete("Pod", meta["name"], meta["namespace"])
        for i in range(n, n + len(done)):
            store.create(_pod(i))
        n += len(done)
        sched.run(0)
    return n


def run_one(name: str, pods: int | None) -> dict[str, Any]:
    from kdra.cluster import MemoryStore, clone
    from kdra.fleets import render
    from kdra.scheduler.scheduler import Scheduler
    from kdra.sim.engine import gc_tuned

    n = pods or {"template-500": 5000, "gpus-5000": 40000, "mixed-mig": 400}[name]
    t0 = time.perf_counter()
    with gc_tuned():
        objs = render(_fleet(name), dra=True, legacy=False)
        store = MemoryStore()
        order = {"DeviceClass": 0, "Node": 1, "ResourceSlice": 2}
        for obj in sorted(objs, key=lambda o: order.get(o["kind"], 3)):
            store.create(clone(obj))
        store.create(_template(name))
        sched = Scheduler(store)
        sched.dra.index  # noqa: B018 - build the allocator index before timing, as a running scheduler has it
        setup = time.perf_counter() - t0
        settle_setup()
        rss_idle = _rss_mib()
        half = n // 2
        t1 = time.perf_counter()
        # Like scheduler_perf: half the pods first (init), then the measured half.
        for i in range(half):
            store.create(_pod(i))
        first = sched.run(0)
        t2 = time.perf_counter()
        for i in range(half, n):
            store.create(_pod(i))
        second = sched.run(0)
        t3 = time.perf_counter()
        rss_bound = _rss_mib()
        bound_before = sum(1 for p in store.list("Pod") if (p.get("spec") or {}).get("nodeName"))
        _churn(store, sched, n, 5, n // 10)
        rss_churn = _rss_mib()
        bound_after = sum(1 for p in store.list("Pod") if (p.get("spec") or {}).get("nodeName"))
        claims_after = len(store.list("ResourceClaim"))
    results = first + second
    scheduled = sum(1 for r in results if r.node)
    return {
        "workload": name,
        "nodes": len(sched.cache.nodes),
        "devices": sum(len(s["spec"].get("devices") or []) for s in objs if s["kind"] == "ResourceSlice"),
        "pods": n,
        "scheduled": scheduled,
        "setup_seconds": round(setup, 2),
        "pods_per_second": round(n / (t3 - t1), 1),
        "pods_per_second_measured_half": round((n - half) / (t3 - t2), 1),
        "node_evaluations_per_pod": round(sched.node_evaluations / max(1, sched.cycles), 2),
        "peak_memory_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "rss_idle_mib": round(rss_idle, 1),
        "rss_per_1000_pods_mib": round((rss_bound - rss_idle) * 1000 / n, 1),
        "rss_bound_mib": round(rss_bound, 1),
        "rss_after_churn_mib": round(rss_churn, 1),
        "bound_before_churn": bound_before,
        "bound_after_churn": bound_after,
        "claims_after_churn": claims_after,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=WORKLOADS)
    ap.add_argument("--pods", type=int)
    ap.add_argument("--child", choices=WORKLOADS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(run_one(args.child, args.pods)))
        return 0
    print(
        f"{'workload':<14}{'nodes':>7}{'devices':>9}{'pods':>8}{'sched':>8}{'pods/s':>9}{'meas/s':>9}"
        f"{'evals/pod':>10}{'setup s':>9}{'peak MiB':>10}{'idle MiB':>10}{'MiB/1k':>8}{'churned':>9}"
    )
    for name in [args.only] if args.only else WORKLOADS:
        cmd = [sys.executable, __file__, "--child", name] + (["--pods", str(args.pods)] if args.pods else [])
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        print(
            f"{r['workload']:<14}{r['nodes']:>7}{r['devices']:>9}{r['pods']:>8}{r['scheduled']:>8}"
            f"{r['pods_per_second']:>9}{r['pods_per_second_measured_half']:>9}{r['node_evaluations_per_pod']:>10}"
            f"{r['setup_seconds']:>9}{r['peak_memory_mib']:>10}{r['rss_idle_mib']:>10}"
            f"{r['rss_per_1000_pods_mib']:>8}{r['rss_after_churn_mib']:>9}"
        )
        if r["bound_after_churn"] != r["bound_before_churn"] or r["claims_after_churn"] != r["pods"]:
            raise SystemExit(
                f"{r['workload']}: after churn {r['bound_after_churn']} pods bound and "
                f"{r['claims_after_churn']} claims, expected {r['bound_before_churn']} and {r['pods']}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
