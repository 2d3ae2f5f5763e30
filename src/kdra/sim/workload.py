"""Workloads in Kubernetes shape for simulation.

A workload is a list of Kubernetes objects: Pods, Deployments and Jobs (with their ResourceClaimTemplates and
ResourceClaims, Namespaces, PriorityClasses), and/or kdra's own `WorkloadGenerator` (kdra.sim.generator),
which expands into such objects. Simulation time comes from annotations on the top-level object:

- `kdra.dev/arrival-time`: when the object is created, a duration from the start (`0`, `90s`, `2h`, `3d4h`);
  default 0.
- `kdra.dev/run-time`: how long each pod runs once bound (Pods, Job pods), or how long a Deployment lives
  before it is scaled away. Without it a pod runs until the end of the simulation.
- `kdra.dev/gpu-memory`: GPU memory each pod actually needs (e.g. `10Gi`), to measure stranded memory
  (allocated but not needed). Without it, what a pod is given counts as needed.

Annotations on the pod template win over those on the Deployment/Job.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kdra.api.durations import parse_duration
from kdra.api.features import FeatureGates
from kdra.api.load import check_object_meta
from kdra.api.quantity import parse_quantity_any
from kdra.api.types import Obj
from kdra.errors import InputError

ARRIVAL_TIME = "kdra.dev/arrival-time"
RUN_TIME = "kdra.dev/run-time"
GPU_MEMORY = "kdra.dev/gpu-memory"
WORKLOAD_LABEL = "kdra.dev/workload"

# A workload of more pods than this is almost certainly a typo (replicas: 1000000): it fails at once with
# a clear error instead of running for hours; --max-pods lifts it. The bundled month has 2,389 pods.
MAX_PODS = 200_000
TOP_KINDS = ("Pod", "Deployment", "Job")
STATIC_KINDS = ("ResourceClaimTemplate", "ResourceClaim", "DeviceTaintRule", "Namespace", "PriorityClass")
GENERATOR_KIND = "WorkloadGenerator"


@dataclass
class Group:
    """One top-level object (Pod, Deployment, Job) and the pods it creates when it arrives."""

    kind: str
    namespace: str
    name: str
    arrival: float
    run_time: float | None  # per pod (Pod/Job) or lifetime (Deployment); None = until the end
    pods: list[Obj]

    @property
    def ref(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass
class Workload:
    name: str
    static: list[Obj] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)
    horizon: float | None = None  # a generator's duration: the simulation stops there

    @property
    def pod_count(self) -> int:
        return sum(len(g.pods) for g in self.groups)


def _desc(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    kind = obj.get("kind", "<no kind>")
    if kind in ("Namespace", "PriorityClass"):
        return f"{kind} {meta.get('name', '')}"
    return f"{kind} {meta.get('namespace') or 'default'}/{meta.get('name', '')}"


def _suffix(seed: str, n: int = 5) -> str:
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    digest = hashlib.sha256(seed.encode()).digest()
    return "".join(alphabet[b % len(alphabet)] for b in digest[:n])


def _annotation_duration(obj: Mapping[str, Any], key: str, where: str) -> float | None:
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(key)
    if raw is None:
        return None
    return parse_duration(raw, f"{where}: metadata.annotations[{key}]")


def _pod_from_template(
    owner: Obj, template: Mapping[str, Any], name: str, labels_extra: dict[str, str]
) -> Obj:
    import copy

    meta_t = template.get("metadata") or {}
    owner_meta = owner["metadata"]
    ns = owner_meta.get("namespace") or "default"
    annotations = dict(owner_meta.get("annotations") or {})
    annotations.pop(ARRIVAL_TIME, None)
    annotations.update(meta_t.get("annotations") or {})
    labels = dict(meta_t.get("labels") or {})
    labels.update(labels_extra)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": owner.get("apiVersion", ""),
                    "kind": owner["kind"],
                    "name": owner_meta["name"],
                    "controller": True,
                }
            ],
        },
        "spec": copy.deepcopy(template.get("spec") or {}),
    }


def _check_pod_spec(spec: Any, where: str, path: str) -> None:
    """The pod spec as kube-apiserver validates it (kdra.validation.rules, the one validator): every problem,
    one line each, naming the workload object and the field."""
    from kdra.validation.rules import pod_spec_errors

    errs = pod_spec_errors(spec, path)
    if errs:
        raise InputError("\n".join(f"{where}: {e}" for e in errs))


def _int_field(obj: Mapping[str, Any], key: str, default: int, where: str) -> int:
    v = obj.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise InputError(f"{where}.{key}: Invalid value: {v!r}: must be a non-negative integer")
    return v


def build_workload(
    objects: Iterable[Obj],
    name: str = "workload",
    seed: int = 0,
    max_pods: int = MAX_PODS,
    devices: Iterable[Obj] = (),
    features: FeatureGates | None = None,
) -> Workload:
    """Objects -> Workload of at most `max_pods` pods; expands generators (their whole GPUs fit to the
    shareable GPUs among `devices`, the fleet's objects); raises InputError naming object and field.
    `features`: the release (and gates) whose API server the objects are admitted by (default: kdra's
    default release)."""
    from kdra.scheduler.gang import is_scheduling_object
    from kdra.sim.generator import expand_generator, whole_gpus

    wl = Workload(name)
    expanded: list[Obj] = []
    for obj in objects:
        if not isinstance(obj, dict):
            raise InputError("workload: every document must be an object")
        if obj.get("kind") == GENERATOR_KIND:
            gen = expand_generator(obj, seed, max_pods=max_pods, whole=whole_gpus(devices))
            expanded.extend(gen.objects)
            wl.horizon = max(wl.horizon or 0.0, gen.horizon)
            wl.name = (obj.get("metadata") or {}).get("name") or wl.name
        else:
            expanded.append(obj)
    from kdra.validation.admission import apply_defaults, drop_disabled_fields, generate_names

    generate_names(expanded)  # a Pod with only generateName is named as the API server would
    for obj in expanded:
        apply_defaults(obj)
    templates: set[tuple[str, str]] = set()
    claims: set[tuple[str, str]] = set()
    seen: set[tuple[str, str, str]] = set()
    for obj in expanded:
        kind = obj.get("kind")
        meta = obj.get("metadata")
        if not isinstance(meta, Mapping) or not meta.get("name"):
            raise InputError(f"{kind or 'object'}: metadata.name: Required value")
        key = (str(kind), meta.get("namespace") or "default", meta["name"])
        if key in seen:
            raise InputError(f"{_desc(obj)}: metadata.name: Duplicate value: {meta['name']!r}")
        seen.add(key)
        if kind in STATIC_KINDS or is_scheduling_object(obj):  # PodGroup, Workload, Queue, Topology
            if kind == "Queue":
                # a live scheduler records an invalid Queue and leaves its pods pending; a simulation's input
                # is a file the user can fix, so it is refused here (exit 2) instead of a silent result
                from kdra.scheduler.queuetree import parse_queue

                parse_queue(obj)
            wl.static.append(obj)
            if kind == "ResourceClaimTemplate":
                templates.add((key[1], key[2]))
            elif kind == "ResourceClaim":
                claims.add((key[1], key[2]))
        elif kind not in TOP_KINDS:
            raise InputError(
                f"{_desc(obj)}: kind: Unsupported value: {kind!r}: supported kinds are "
                f"{', '.join(TOP_KINDS + STATIC_KINDS)} and kdra.dev/v1alpha1 {GENERATOR_KIND}"
            )
    for obj in wl.static:  # a bad PodGroup (deviceConstraints, minMember, ...) is an input error, not a wait
        if obj.get("kind") == "PodGroup":
            from kdra.scheduler.gang import parse_pod_group

            parse_pod_group(obj)
    from kdra.api.workloadapi import is_workload_api

    workload_api = [o for o in wl.static if is_workload_api(o)]
    drop_disabled_fields(workload_api, features)
    dra_objs = [o for o in wl.static if o.get("kind") in ("ResourceClaimTemplate", "ResourceClaim")]
    if dra_objs or workload_api:
        from kdra.validation.rules import validate_objects

        validate_objects(dra_objs + workload_api, cel=True, features=features)
    total = 0
    for obj in expanded:
        if obj.get("kind") in TOP_KINDS:
            group = _group(obj, max_pods - total, max_pods)
            total += len(group.pods)
            for pod in group.pods:
                _check_refs(pod, group, templates, claims)
            wl.groups.append(group)
    wl.groups.sort(key=lambda g: g.arrival)  # stable: file order within the same arrival time
    return wl


def _check_refs(
    pod: Obj, group: Group, templates: set[tuple[str, str]], claims: set[tuple[str, str]]
) -> None:
    ns = pod["metadata"]["namespace"]
    base = "spec" if group.kind == "Pod" else "spec.template.spec"
    for i, rc in enumerate(pod["spec"].get("resourceClaims") or []):
        t = rc.get("resourceClaimTemplateName")
        if t and (ns, t) not in templates:
            raise InputError(
                f"{group.ref}: {base}.resourceClaims[{i}].resourceClaimTemplateName: "
                f"Not found: {t!r} (no ResourceClaimTemplate {ns}/{t} in the workload)"
            )
        c = rc.get("resourceClaimName")
        if c and (ns, c) not in claims:
            raise InputError(
                f"{group.ref}: {base}.resourceClaims[{i}].resourceClaimName: "
                f"Not found: {c!r} (no ResourceClaim {ns}/{c} in the workload)"
            )


def _too_many(where: str, field: str, n: int, limit: int) -> InputError:
    return InputError(
        f"{where}: {field}: Invalid value: {n:,}: the workload would have more than {limit:,} pods "
        "(--max-pods N lifts the limit)"
    )


def _group(obj: Obj, room: int = MAX_PODS, limit: int = MAX_PODS) -> Group:
    kind = obj["kind"]
    meta = obj["metadata"]
    ns = meta.get("namespace") or "default"
    name = meta["name"]
    where = f"{kind} {ns}/{name}"
    arrival = _annotation_duration(obj, ARRIVAL_TIME, where) or 0.0
    spec = obj.get("spec")
    if kind == "Pod":
        _check_pod_spec(spec, where, "spec")
        run = _annotation_duration(obj, RUN_TIME, where)
        pod = {k: v for k, v in obj.items() if k != "status"}
        pod["metadata"] = dict(meta, namespace=ns)
        return Group(kind, ns, name, arrival, run, [pod])
    if not isinstance(spec, Mapping):
        raise InputError(f"{where}: spec: Required value")
    template = spec.get("template")
    if not isinstance(template, Mapping):
        raise InputError(f"{where}: spec.template: Required value")
    check_object_meta(template.get("metadata"), where, "spec.template.metadata")
    _check_pod_spec(template.get("spec"), where, "spec.template.spec")
    run = _annotation_duration(template, RUN_TIME, where + " spec.template") or _annotation_duration(
        obj, RUN_TIME, where
    )
    pods = []
    if kind == "Deployment":
        replicas = _int_field(spec, "replicas", 1, f"{where}: spec")
        if replicas > room:
            raise _too_many(where, "spec.replicas", replicas, limit)
        rs_hash = _suffix(f"{ns}/{name}/rs", 10)
        for i in range(replicas):
            pname = f"{name}-{rs_hash}-{_suffix(f'{ns}/{name}/{i}')}"
            pods.append(
                _pod_from_template(
                    obj, template, pname, {"app.kubernetes.io/instance": name, "pod-template-hash": rs_hash}
                )
            )
    else:  # Job
        parallelism = _int_field(spec, "parallelism", 1, f"{where}: spec")
        completions = _int_field(spec, "completions", parallelism, f"{where}: spec")
        if min(parallelism, completions) > room or (not completions and parallelism > room):
            raise _too_many(where, "spec.parallelism", parallelism, limit)
        for i in range(min(parallelism, completions) if completions else parallelism):
            pname = f"{name}-{_suffix(f'{ns}/{name}/{i}')}"
            pods.append(
                _pod_from_template(
                    obj,
                    template,
                    pname,
                    {"job-name": name, "batch.kubernetes.io/job-completion-index": str(i)},
                )
            )
    return Group(kind, ns, name, arrival, run, pods)


def gpu_memory_need(pod: Mapping[str, Any]) -> int | None:
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(GPU_MEMORY)
    if raw is None:
        return None
    try:
        return parse_quantity_any(raw).value()
    except (ValueError, TypeError) as exc:
        meta = pod.get("metadata") or {}
        raise InputError(
            f"Pod {meta.get('namespace') or 'default'}/{meta.get('name')}: "
            f"metadata.annotations[{GPU_MEMORY}]: Invalid value: {raw!r}: {exc}"
        ) from None
