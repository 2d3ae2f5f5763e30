"""End to end: each corpus case schedules with kdra's scheduler on a matching simulated fleet, pod for pod the
same after migration (DRA view: ResourceSlices) as before it (device-plugin view: extended resources).

"The same" is: every pod schedules in both views or in neither, onto a node of the same pool. The exact node
may differ among equal nodes, because NodeResourcesFit scores extended resources and not DRA devices.
"""

from __future__ import annotations

import copy
import importlib
from pathlib import Path
from typing import Any

import pytest
import yaml

from kdra.migrate import Options, classes_text, join_outputs, migrate_text

from .conftest import MANIFESTS, case_args, pod_specs

scheduler_mod = importlib.import_module("kdra.scheduler.scheduler")
store_mod = importlib.import_module("kdra.cluster.store")
fleet_spec = importlib.import_module("kdra.fleets.spec")
fleet_render = importlib.import_module("kdra.fleets.render")

FLEET = Path(__file__).parent / "fleet.yaml"
POOL_LABEL = "kdra.dev/pool"

# Cases whose devices the simulated fleet has in both views. Left out: hami-shares (no HAMi driver is
# simulated), already-migrated (no device-plugin original), extended-resource (manifests unchanged; see the
# extended-resource test below).
E2E_CASES = [
    "amd-deployment",
    "cronjob-mig",
    "helm-rendered",
    "init-containers",
    "jobset",
    "kubectl-list",
    "leaderworkerset",
    "mixed-indent",
    "mpijob",
    "multi-container-pod",
    "pytorchjob",
    "raycluster",
    "rayservice-llm",
    "statefulset-affinity",
    "tfjob",
    "tpu-job",
    "vllm-deployment",
    "volcano-job",
]


def _objects(text: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for doc in yaml.safe_load_all(text):
        if isinstance(doc, dict) and str(doc.get("kind", "")).endswith("List") and "items" in doc:
            out.extend(doc["items"])
        elif isinstance(doc, dict):
            out.append(doc)
    return out


def _replicas(obj: dict[str, Any], role: str, path: tuple[Any, ...]) -> int:
    """How many pods the controller of `obj` runs from the pod spec at `path`."""
    kind, spec = obj["kind"], obj.get("spec") or {}
    if kind in ("Deployment", "StatefulSet", "ReplicaSet", "ReplicationController"):
        return int(spec.get("replicas", 1))
    if kind == "Job" and obj["apiVersion"].startswith("batch.volcano.sh"):
        return int(spec["tasks"][path[2]].get("replicas", 1))
    if kind == "Job":
        return int(spec.get("parallelism", 1))
    if kind == "CronJob":
        return int(spec["jobTemplate"]["spec"].get("parallelism", 1))
    if kind == "PodTemplate":
        return 0
    if kind.endswith("Job") and "ReplicaSpecs" in str(path[1]):
        return int(spec[path[1]][path[2]].get("replicas", 1))
    if kind in ("RayCluster", "RayJob", "RayService"):
        if role == "head":
            return 1
        group = obj
        for key in path[:-2]:
            group = group[key]
        return int(group.get("replicas", group.get("minReplicas", 1)))
    if kind == "JobSet":
        job = spec["replicatedJobs"][path[2]]
        return int(job.get("replicas", 1)) * int(job["template"]["spec"].get("parallelism", 1))
    if kind == "LeaderWorkerSet":
        size = int(spec["leaderWorkerTemplate"].get("size", 1))
        return int(spec.get("replicas", 1)) * (1 if role == "leader" else size - 1)
    return 1


def _pods(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods the workloads' controllers would create, with stable names."""
    pods = []
    for obj in objs:
        for path, role, spec in pod_specs(obj):
            meta = obj.get("metadata") or {}
            base = "-".join(
                p for p in (meta.get("name") or meta.get("generateName", "w").rstrip("-"), role) if p
            )
            single = obj["kind"] == "Pod"
            for index in range(1 if single else _replicas(obj, role, path)):
                pods.append(
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {
                            "name": base if single else f"{base}-{index}",
                            "namespace": meta.get("namespace", "default"),
                            "uid": f"uid-{base}-{index}",
                        },
                        "spec": copy.deepcopy(spec),
                    }
                )
    return pods


def _fleet_objects(dra: bool) -> list[dict[str, Any]]:
    fleet = fleet_spec.parse_fleet(yaml.safe_load(FLEET.read_text()), str(FLEET))
    objs = copy.deepcopy(fleet_render.render(fleet, dra=dra, legacy=not dra))
    for obj in objs:
        if obj["kind"] == "Node":
            # What the manifests also ask for and fleets do not model: local disk, EFA and RDMA devices.
            extra = {"ephemeral-storage": "3Ti"}
            if obj["metadata"]["labels"].get(POOL_LABEL) == "h100":
                extra.update({"vpc.amazonaws.com/efa": "32", "rdma/rdma_shared_device_a": "1000"})
            obj["status"]["capacity"].update(extra)
            obj["status"]["allocatable"].update(extra)
        if obj["kind"] == "Node" and not dra:
            # The device plugin advertises MIG profile '1g.10gb+me' as 'nvidia.com/mig-1g.10gb.me'.
            for section in ("capacity", "allocatable"):
                status = obj["status"][section]
                for key in [k for k in status if "+" in k]:
                    status[key.replace("+", ".")] = status.pop(key)
    return objs


def _schedule(cluster: list[dict[str, Any]], workloads: list[dict[str, Any]]) -> dict[str, str | None]:
    """Pod name -> pool of the node it was bound to (None: unschedulable)."""
    store = store_mod.MemoryStore()
    # The DeviceClasses that come with the workloads replace the drivers' classes of the same name.
    classes = {o["metadata"]["name"] for o in workloads if o["kind"] == "DeviceClass"}
    for obj in cluster:
        if obj["kind"] != "DeviceClass" or obj["metadata"]["name"] not in classes:
            store.create(obj)
    for obj in workloads:
        if obj["kind"] in ("ResourceClaimTemplate", "DeviceClass"):
            store.create(copy.deepcopy(obj))
    pods = _pods(workloads)
    sched = scheduler_mod.Scheduler(store)
    for pod in pods:
        store.create(pod)
    for _ in range(5):  # claims from templates are created by the controller between cycles
        sched.run()
    pools = {n["metadata"]["name"]: n["metadata"]["labels"].get(POOL_LABEL) for n in store.list("Node")}
    placed: dict[str, str | None] = {}
    for pod in pods:
        bound = store.get("Pod", pod["metadata"]["name"], pod["metadata"]["namespace"])
        node = (bound.get("spec") or {}).get("nodeName")
        placed[pod["metadata"]["name"]] = pools[node] if node else None
    return placed


@pytest.mark.parametrize("case", E2E_CASES)
def test_migrated_workloads_schedule_like_the_originals(case: str) -> None:
    assert not case_args(case)
    original = _objects((MANIFESTS / f"{case}.yaml").read_text())
    migrated = _objects((MANIFESTS / f"{case}.expected.yaml").read_text())
    before = _schedule(_fleet_objects(dra=False), original)
    after = _schedule(_fleet_objects(dra=True), migrated)
    assert before, "the case has no pods"
    assert all(before.values()), f"the fleet cannot run the original: {before}"
    assert after == before


def test_a_product_the_fleet_lacks_leaves_the_pod_pending_in_both_views() -> None:
    text = (MANIFESTS / "helm-rendered.yaml").read_text().replace("NVIDIA-L40S", "NVIDIA-B200")
    result = migrate_text(text, "helm.yaml", Options())
    migrated = join_outputs([result.text, classes_text([result], "claims")])
    assert "== 'NVIDIA-B200'" in migrated
    before = _schedule(_fleet_objects(dra=False), _objects(text))
    after = _schedule(_fleet_objects(dra=True), _objects(migrated))
    assert before == after
    assert before["tgi-text-generation-0"] is None


@pytest.mark.parametrize("case", ["cronjob-mig", "vllm-deployment", "amd-deployment", "tpu-job"])
def test_extended_resource_mode_serves_the_unchanged_manifests_through_dra(case: str) -> None:
    text = (MANIFESTS / f"{case}.yaml").read_text()
    result = migrate_text(text, case, Options(mode="extended-resource"))
    assert result.text == text
    classes = _objects(classes_text([result], "extended-resource"))
    before = _schedule(_fleet_objects(dra=False), _objects(text))
    after = _schedule(_fleet_objects(dra=True), _objects(text) + classes)
    assert after == before
