"""Scheduling cycle time with gangs and queues: 1,000 pending pods in 20 queues on a 1,000-node fleet.

Fleet: 1,000 nodes x 8 GPUs (DRA, one ResourceSlice per node), racks of 8 nodes. 20 queues (weights 1-4,
quota 200 GPUs each, a parent over every 5). Per queue 50 pods: two 8-member gangs of 8-GPU pods (one with
a required rack, one preferring a rack) and 34 single pods asking for 1, 2 or 4 GPUs.

Figures (each the wall-clock time of one `Scheduler.run`, i.e. one session: allocate, reclaim, preempt):
  cold   the first session: every pod pending, the cluster empty (8,000 GPUs, 3,800 asked for);
  full   a session with 1,000 more pending pods on a cluster whose free GPUs cannot hold them all, so many
         jobs are tried and parked with explanations (and reclaim/preempt look for victims);
  warm   a session after 100 pods ended, with the parked pods woken up.

    python benchmarks/bench_gang_queues.py [--nodes N] [--queues Q] [--per-queue P] [--placement POLICY]
"""

from __future__ import annotations

import argparse
import gc
import resource
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

DRIVER = "gpu.example.com"


def build(nodes: int, store: Any) -> None:
    store.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "gpu"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        }
    )
    for i in range(nodes):
        name = f"n{i:04d}"
        labels = {
            "kubernetes.io/hostname": name,
            "kdra.dev/rack": f"rack{i // 8}",
            "kdra.dev/block": f"b{i // 64}",
        }
        alloc = {"cpu": "128", "memory": "1Ti", "pods": "110"}
        store.create(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": labels},
                "status": {"allocatable": alloc, "capacity": dict(alloc)},
            }
        )
        store.create(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{name}-gpu"},
                "spec": {
                    "driver": DRIVER,
                    "nodeName": name,
                    "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                    "devices": [
                        {"name": f"gpu-{g}", "capacity": {"memory": {"value": "80Gi"}}} for g in range(8)
                    ],
                },
            }
        )
    for k in (1, 2, 4, 8):
        store.create(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": f"t{k}", "namespace": "default"},
                "spec": {
                    "spec": {
                        "devices": {
                            "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu", "count": k}}]
                        }
                    }
                },
            }
        )


def queues(store: Any, n: int) -> None:
    for p in range(max(1, n // 5)):
        store.create(
            {"apiVersion": "kdra.dev/v1alpha1", "kind": "Queue", "metadata": {"name": f"org{p}"}, "spec": {}}
        )
    for q in range(n):
        store.create(
            {
                "apiVersion": "kdra.dev/v1alpha1",
                "kind": "Queue",
                "metadata": {"name": f"q{q:02d}"},
                "spec": {
                    "parentQueue": f"org{q // 5}",
                    "resources": {"deviceclass/gpu": {"quota": 200, "overQuotaWeight": 1 + q % 4}},
                },
            }
        )


def pod(name: str, queue: str, gpus: int, group: str | None = None, priority: int = 0) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default", "labels": {"kdra.dev/queue": queue}}
    if group:
        meta["annotations"] = {"kdra.dev/pod-group": group}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "priority": priority,
            "containers": [
                {
                    "name": "c",
                    "resources": {"requests": {"cpu": "1", "memory": "4Gi"}, "claims": [{"name": "gpu"}]},
                }
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": f"t{gpus}"}],
        },
    }


def submit(store: Any, n_queues: int, per_queue: int, wave: int) -> int:
    count = 0
    for q in range(n_queues):
        qn = f"q{q:02d}"
        for g, tc in enumerate(
            ({"requiredTopologyLevel": "kdra.dev/rack"}, {"preferredTopologyLevel": "kdra.dev/rack"})
        ):
            group = f"w{wave}-{qn}-g{g}"
            store.create(
                {
                    "apiVersion": "kdra.dev/v1alpha1",
                    "kind": "PodGroup",
                    "metadata": {"name": group, "namespace": "default"},
                    "spec": {"minMember": 8, "queue": qn, "topologyConstraint": tc},
                }
            )
            for m in range(8):
                store.create(pod(f"{group}-{m}", qn, 8, group))
                count += 1
        for i in range(per_queue - 16):
            store.create(pod(f"w{wave}-{qn}-s{i:02d}", qn, (1, 2, 4)[i % 3], priority=i % 2))
            count += 1
    return count


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--queues", type=int, default=20)
    ap.add_argument("--per-queue", type=int, default=50)
    ap.add_argument("--placement", default="upstream")
    args = ap.parse_args()

    from kdra.cluster import MemoryStore
    from kdra.scheduler.gangqueues import GangQueueOptions, GangQueues
    from kdra.scheduler.scheduler import Scheduler, SchedulerConfig

    gc.set_threshold(200_000, 20, 50)
    store = MemoryStore()
    t0 = time.perf_counter()
    build(args.nodes, store)
    queues(store, args.queues)
    gq = GangQueues(store, GangQueueOptions(placement=args.placement))
    sched = Scheduler(store, gq.config(SchedulerConfig()))
    print(f"setup: {args.nodes} nodes x 8 GPUs, {args.queues} queues: {time.perf_counter() - t0:.2f}s")

    def session(label: str, now: float, pending: int) -> None:
        c0 = time.process_time()
        w0 = time.perf_counter()
        results = sched.run(now)
        wall = time.perf_counter() - w0
        cpu = time.process_time() - c0
        placed = sum(1 for r in results if r.node is not None)
        print(
            f"{label:5s} session: {pending:5d} pending pods -> {placed:5d} bound, "
            f"{len(gq.evicted):4d} evicted so far, "
            f"{wall * 1000:8.1f} ms wall, {cpu * 1000:8.1f} ms CPU, {sched.cycles} cycles in all"
        )

    n = submit(store, args.queues, args.per_queue, 0)
    session("cold", 0.0, n)
    n2 = submit(store, args.queues, args.per_queue, 1)
    n2 += submit(store, args.queues, args.per_queue, 2)
    session("full", 10.0, len(sched.queue.pods))
    ended = 0
    for p in store.list("Pod"):
        if p["spec"].get("nodeName") and ended < 100 and not p["metadata"].get("annotations"):
            store.update(dict(p, status=dict(p.get("status") or {}, phase="Succeeded")), subresource="status")
            ended += 1
    session("warm", 20.0, len(sched.queue.pods))
    print(f"peak memory: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
