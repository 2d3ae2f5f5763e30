"""Builders for gang and queue tests: fleets with topology labels, PodGroups, Queues, gang pods."""

from __future__ import annotations

from typing import Any

from builders import device_class, gpu_slice, node, pod, template

from kdra.cluster import MemoryStore
from kdra.scheduler.gangqueues import GangQueueOptions, GangQueues
from kdra.scheduler.scheduler import Scheduler, SchedulerConfig

Obj = dict[str, Any]


def fleet(store: MemoryStore, n: int, gpus: int = 8, nodes_per_rack: int = 4, cpu: str = "128") -> None:
    store.create(device_class("gpu"))
    for i in range(n):
        name = f"n{i:03d}"
        store.create(
            node(name, cpu=cpu, memory="1Ti", labels={"kdra.dev/rack": f"rack{i // nodes_per_rack}"})
        )
        store.create(gpu_slice(name, count=gpus))


def pod_group(name: str, min_member: int, queue: str | None = None, **spec: Any) -> Obj:
    s: Obj = {"minMember": min_member, **spec}
    if queue:
        s["queue"] = queue
    return {"apiVersion": "kdra.dev/v1alpha1", "kind": "PodGroup", "metadata": {"name": name}, "spec": s}


def queue(name: str, gpu_quota: float = 0, weight: float = 1, limit: float | None = None, **spec: Any) -> Obj:
    res: Obj = {"quota": gpu_quota, "overQuotaWeight": weight}
    if limit is not None:
        res["limit"] = limit
    return {
        "apiVersion": "kdra.dev/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"resources": {"deviceclass/gpu": res}, **spec},
    }


def gang_pods(
    store: MemoryStore, group: str, n: int, gpus: int, tmpl: str | None = None, priority: int = 0
) -> list[str]:
    tmpl = tmpl or f"{group}-t"
    if store.try_get("ResourceClaimTemplate", tmpl, "default") is None:
        store.create(template(tmpl, count=gpus))
    names = []
    for i in range(n):
        p = pod(f"{group}-{i:03d}", cpu="1", template_name=tmpl, priority=priority)
        p["metadata"]["annotations"] = {"kdra.dev/pod-group": group}
        store.create(p)
        names.append(p["metadata"]["name"])
    return names


def queued_pod(store: MemoryStore, name: str, q: str, gpus: int, priority: int = 0) -> None:
    tmpl = f"t{gpus}"
    if store.try_get("ResourceClaimTemplate", tmpl, "default") is None:
        store.create(template(tmpl, count=gpus))
    p = pod(name, cpu="1", template_name=tmpl, priority=priority)
    p["metadata"]["labels"] = {"kdra.dev/queue": q}
    store.create(p)


def scheduler(store: MemoryStore, **opts: Any) -> tuple[Scheduler, GangQueues]:
    gq = GangQueues(store, GangQueueOptions(**opts))
    return Scheduler(store, gq.config(SchedulerConfig())), gq


def bound(store: MemoryStore, prefix: str = "") -> dict[str, str]:
    return {
        p["metadata"]["name"]: p["spec"]["nodeName"]
        for p in store.list("Pod")
        if p["metadata"]["name"].startswith(prefix)
        and p["spec"].get("nodeName")
        and (p.get("status") or {}).get("phase") != "Failed"
    }


def condition(store: MemoryStore, name: str) -> str:
    p = store.get("Pod", name, "default")
    c = next(c for c in p["status"]["conditions"] if c["type"] == "PodScheduled")
    return str(c.get("message", ""))
