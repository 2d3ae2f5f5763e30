"""Where pod templates live in workload objects, built-in and common CRDs."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

Path = tuple[str | int, ...]


@dataclass
class PodTemplate:
    """A pod template inside a workload: `holder[key]` has `spec` (a PodSpec)."""

    path: Path  # from the object root to the template (for Pod: empty)
    role: str  # "" for single-template workloads, else the replica type / group / job name
    template: Any  # mapping with `spec` (and maybe `metadata`)


def _get(obj: Any, *keys: str | int) -> Any:
    for key in keys:
        if isinstance(key, int):
            if not isinstance(obj, list) or key >= len(obj):
                return None
        elif not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


def _template(obj: Any, path: Path, role: str) -> Iterator[PodTemplate]:
    found = _get(obj, *path)
    if isinstance(found, dict) and isinstance(found.get("spec"), dict):
        yield PodTemplate(path, role, found)


_SINGLE: dict[str, Path] = {
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "ReplicationController": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
    "PodTemplate": ("template",),
}

# Kubeflow training operator v1 kinds: spec.<x>ReplicaSpecs.<ReplicaType>.template
_KUBEFLOW = {
    "PyTorchJob": "pytorchReplicaSpecs",
    "TFJob": "tfReplicaSpecs",
    "MPIJob": "mpiReplicaSpecs",
    "XGBoostJob": "xgbReplicaSpecs",
    "PaddleJob": "paddleReplicaSpecs",
    "JAXJob": "jaxReplicaSpecs",
}

WORKLOAD_KINDS = frozenset(
    {"Pod", *_SINGLE, *_KUBEFLOW, "RayCluster", "RayJob", "RayService", "JobSet", "LeaderWorkerSet"}
)


def _ray(obj: Any, base: Path) -> Iterator[PodTemplate]:
    yield from _template(obj, (*base, "headGroupSpec", "template"), "head")
    groups = _get(obj, *base, "workerGroupSpecs")
    if isinstance(groups, list):
        for index, group in enumerate(groups):
            name = group.get("groupName") if isinstance(group, dict) else None
            yield from _template(
                obj, (*base, "workerGroupSpecs", index, "template"), str(name or f"worker-{index}")
            )


def pod_templates(obj: Any) -> list[PodTemplate]:
    """Every pod template of a workload, in document order; [] for anything that is not a known workload."""
    if not isinstance(obj, dict):
        return []
    kind = obj.get("kind")
    if kind == "Pod":
        return [PodTemplate((), "", obj)] if isinstance(obj.get("spec"), dict) else []
    if kind in _SINGLE:
        return list(_template(obj, _SINGLE[kind], ""))
    if kind in _KUBEFLOW:
        field = _KUBEFLOW[kind]
        specs = _get(obj, "spec", field)
        out: list[PodTemplate] = []
        if isinstance(specs, dict):
            for replica in specs:
                out.extend(_template(obj, ("spec", field, replica, "template"), str(replica).lower()))
        return out
    if kind == "RayCluster":
        return list(_ray(obj, ("spec",)))
    if kind == "RayJob":
        return list(_ray(obj, ("spec", "rayClusterSpec")))
    if kind == "RayService":
        return list(_ray(obj, ("spec", "rayClusterConfig")))
    if kind == "JobSet":
        jobs = _get(obj, "spec", "replicatedJobs")
        out = []
        if isinstance(jobs, list):
            for index, job in enumerate(jobs):
                name = job.get("name") if isinstance(job, dict) else None
                path: Path = ("spec", "replicatedJobs", index, "template", "spec", "template")
                out.extend(_template(obj, path, str(name or f"job-{index}")))
        return out
    if kind == "LeaderWorkerSet":
        base: Path = ("spec", "leaderWorkerTemplate")
        return [
            *_template(obj, (*base, "leaderTemplate"), "leader"),
            *_template(obj, (*base, "workerTemplate"), "worker"),
        ]
    return []


def path_text(path: Path) -> str:
    out = ""
    for key in path:
        if isinstance(key, int):
            out += f"[{key}]"
        elif "." in key or "/" in key:
            out += f'["{key}"]'
        else:
            out += ("." if out else "") + key
    return out
