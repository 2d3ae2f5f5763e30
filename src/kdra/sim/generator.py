"""`WorkloadGenerator` (kdra.dev/v1alpha1): a month of AI load in twenty lines, as Kubernetes objects.

    apiVersion: kdra.dev/v1alpha1
    kind: WorkloadGenerator
    metadata: {name: team-month}
    spec:
      duration: 30d            # arrivals happen in [0, duration); the simulation stops at duration
      namespace: ml            # default "default"
      streams:
      - name: chat             # unique DNS label; object names derive from it
        type: inference        # inference -> Deployment, job -> Job, notebook -> Pod
        arrivals: {every: 3d}  # Poisson, this mean gap; or {count: N} uniformly; or {at: [0, 2h]}
        replicas: {min: 2, max: 4}       # Deployments (int or range); jobs use parallelism
        runTime: {min: 1d, max: 7d}      # per pod, or a Deployment's lifetime; log-uniform
        cpu: "8"
        memory: 64Gi
        priority: 100
        gpu: {memory: 18Gi}    # a fraction of a GPU: a MIG slice, a memory share, or else a whole GPU
        # gpu: {count: 8, model: H100-SXM-80GB}   # whole GPUs, optionally of one catalog model
        # gpu: {count: 2, vendor: amd}             # AMD GPUs;  tpu: {count: 4}  # TPU chips

Every arrival becomes a Deployment, Job or Pod with `kdra.dev/arrival-time`, `kdra.dev/run-time` and, for
fractional GPUs, `kdra.dev/gpu-memory` annotations; each stream gets one ResourceClaimTemplate. A fractional
GPU is a DRA `firstAvailable` request: a MIG device with enough memory, then a share of a shareable GPU's
memory (consumable capacity), then a whole GPU. The same seed gives the same objects.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kdra.api.durations import format_duration, parse_duration
from kdra.api.quantity import parse_quantity_any
from kdra.api.types import Obj
from kdra.api.wellknown import AMD_GPU_CLASS, NVIDIA_GPU_CLASS, NVIDIA_GPU_DRIVER, NVIDIA_MIG_CLASS, TPU_CLASS
from kdra.errors import InputError
from kdra.sim.workload import ARRIVAL_TIME, GPU_MEMORY, RUN_TIME, WORKLOAD_LABEL

API_VERSION = "kdra.dev/v1alpha1"
TYPES = {"inference": "Deployment", "job": "Job", "training": "Job", "fine-tuning": "Job", "notebook": "Pod"}
_DNS = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
ACCELERATOR_LABEL = "kdra.dev/accelerator"


@dataclass
class Generated:
    objects: list[Obj]
    horizon: float


class _Ctx:
    def __init__(self, name: str) -> None:
        self.name = name

    def err(self, path: str, msg: str) -> InputError:
        return InputError(f"WorkloadGenerator {self.name}: {path}: {msg}")


def _mapping(ctx: _Ctx, path: str, v: Any, allowed: tuple[str, ...]) -> Mapping[str, Any]:
    if not isinstance(v, Mapping):
        raise ctx.err(path, f"Invalid value: {v!r}: must be an object")
    for k in v:
        if k not in allowed:
            raise ctx.err(f"{path}.{k}", f"Unsupported value: unknown field (allowed: {', '.join(allowed)})")
    return v


def _range(ctx: _Ctx, path: str, v: Any, parse: Any) -> tuple[float, float]:
    if isinstance(v, Mapping):
        _mapping(ctx, path, v, ("min", "max"))
        if "min" not in v or "max" not in v:
            raise ctx.err(path, "Required value: both min and max")
        lo, hi = parse(v["min"], f"{path}.min"), parse(v["max"], f"{path}.max")
        if hi < lo:
            raise ctx.err(f"{path}.max", f"Invalid value: {v['max']!r}: must not be less than min")
        return lo, hi
    x = parse(v, path)
    return x, x


def _dur(ctx: _Ctx) -> Any:
    def parse(v: Any, path: str) -> float:
        return parse_duration(v, f"WorkloadGenerator {ctx.name}: {path}")

    return parse


def _int(ctx: _Ctx) -> Any:
    def parse(v: Any, path: str) -> float:
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ctx.err(path, f"Invalid value: {v!r}: must be a non-negative integer")
        return float(v)

    return parse


def _quantity(ctx: _Ctx, path: str, v: Any) -> str:
    try:
        q = parse_quantity_any(v)
    except (ValueError, TypeError) as exc:
        raise ctx.err(path, f"Invalid value: {v!r}: {exc}") from None
    if q.sign() < 0:
        raise ctx.err(path, f"Invalid value: {v!r}: must not be negative")
    return str(q)


def _pick_duration(rng: random.Random, lo: float, hi: float) -> float:
    if hi <= lo:
        return lo
    if lo <= 0:
        return rng.uniform(lo, hi)
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def _claim_spec(
    ctx: _Ctx, path: str, gpu: Mapping[str, Any] | None, tpu: Mapping[str, Any] | None, whole: Whole
) -> tuple[Obj | None, str | None, str | None]:
    """(ResourceClaimSpec or None, GPU memory need annotation, accelerator model for nodeSelector)."""
    if gpu is not None and tpu is not None:
        raise ctx.err(path, "Invalid value: a stream asks for gpu or tpu, not both")
    if tpu is not None:
        _mapping(ctx, f"{path}.tpu", tpu, ("count",))
        n = int(_int(ctx)(tpu.get("count", 1), f"{path}.tpu.count"))
        if n < 1:
            raise ctx.err(f"{path}.tpu.count", "Invalid value: must be at least 1")
        return (
            {
                "devices": {
                    "requests": [{"name": "tpu", "exactly": {"deviceClassName": TPU_CLASS, "count": n}}]
                }
            },
            None,
            None,
        )
    if gpu is None:
        return None, None, None
    _mapping(ctx, f"{path}.gpu", gpu, ("count", "memory", "model", "vendor"))
    vendor = gpu.get("vendor", "nvidia")
    if vendor not in ("nvidia", "amd"):
        raise ctx.err(
            f"{path}.gpu.vendor", f'Unsupported value: {vendor!r}: supported values: "nvidia", "amd"'
        )
    model = gpu.get("model")
    if model is not None:
        _check_model(ctx, f"{path}.gpu.model", model, vendor)
    if "memory" in gpu:
        if "count" in gpu:
            raise ctx.err(
                f"{path}.gpu", "Invalid value: give count (whole GPUs) or memory (a fraction), not both"
            )
        if vendor != "nvidia":
            raise ctx.err(f"{path}.gpu.memory", "Invalid value: fractional GPUs are NVIDIA MIG or shares")
        mem = _quantity(ctx, f"{path}.gpu.memory", gpu["memory"])
        mig_sel = f'device.capacity["{NVIDIA_GPU_DRIVER}"].memory.compareTo(quantity("{mem}")) >= 0'
        subs: list[Obj] = [
            {
                "name": "mig",
                "deviceClassName": NVIDIA_MIG_CLASS,
                "selectors": [{"cel": {"expression": mig_sel}}],
            },
            {
                "name": "share",
                "deviceClassName": NVIDIA_GPU_CLASS,
                "selectors": [{"cel": {"expression": "device.allowMultipleAllocations"}}],
                "capacity": {"requests": {"memory": mem}},
            },
            {
                "name": "whole",
                "deviceClassName": NVIDIA_GPU_CLASS,
                "selectors": [{"cel": {"expression": mig_sel}}],
            },
        ]
        return {"devices": {"requests": [{"name": "gpu", "firstAvailable": subs}]}}, mem, model
    n = int(_int(ctx)(gpu.get("count", 1), f"{path}.gpu.count"))
    if n < 1:
        raise ctx.err(f"{path}.gpu.count", "Invalid value: must be at least 1")
    if vendor == "nvidia":
        # Whole GPUs, never a share: exclusive devices, or all of a shareable GPU's capacity.
        return {"devices": {"requests": [whole("gpu", NVIDIA_GPU_CLASS, n)]}}, None, model
    exactly: Obj = {"deviceClassName": AMD_GPU_CLASS, "count": n}
    return {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}, None, model


def _check_model(ctx: Any, path: str, model: object, vendor: str) -> None:
    """gpu.model becomes a nodeSelector on the label the fleet's nodes carry (kdra.dev/accelerator: the
    catalog key), so it must be a catalog key of that vendor: an alias or a typo would leave every pod of
    the stream pending for ever."""
    from kdra.drivers.catalog import AmdModel, GpuModel, all_models

    kind = GpuModel if vendor == "nvidia" else AmdModel
    keys = [m.key for m in all_models() if isinstance(m, kind)]
    if not isinstance(model, str):
        raise ctx.err(path, f"Invalid value: {model!r}: must be a string")
    if model in keys:
        return
    named = [
        m.key
        for m in all_models()
        if isinstance(m, kind) and model.lower() in (m.key.lower(), *(a.lower() for a in m.aliases))
    ]
    hint = f"did you mean {named[0]!r}? " if named else ""
    raise ctx.err(
        path,
        f"Unsupported value: {model!r}: {hint}a {vendor} model of the catalog (kdra cluster catalog): "
        + ", ".join(keys),
    )


Whole = Callable[[str, str, int], Obj]


def whole_gpus(devices: Iterable[Mapping[str, Any]] = ()) -> Whole:
    """A request for whole GPUs of a class (kdra.api.whole), with the capacity shapes of the
    shareable devices among `devices` (a fleet's DeviceClasses and ResourceSlices)."""
    from kdra.allocator.whole import device_index, shareable_shapes
    from kdra.api.whole import whole_request

    objs = [o for o in devices if o.get("kind") in ("DeviceClass", "ResourceSlice")]
    index = device_index(objs) if objs else None
    shapes: dict[str, list[Any]] = {}

    def request(name: str, class_name: str, count: int) -> Obj:
        if class_name not in shapes:
            shapes[class_name] = shareable_shapes(index, class_name) if index is not None else []
        return whole_request(name, class_name, count, (), shapes[class_name])

    return request


def expand_generator(
    doc: Mapping[str, Any], seed: int = 0, max_pods: int = 200_000, whole: Whole | None = None
) -> Generated:
    """The objects a WorkloadGenerator stands for; at most `max_pods` pods (InputError naming the stream
    field that would exceed it, before anything is generated). `whole` writes a request for whole GPUs
    (`whole_gpus(fleet objects)`; without a fleet, exclusive devices only)."""
    whole = whole or whole_gpus()
    meta = doc.get("metadata") or {}
    name = str(meta.get("name") or "generator")
    ctx = _Ctx(name)
    if doc.get("apiVersion") != API_VERSION:
        raise ctx.err(
            "apiVersion", f'Unsupported value: {doc.get("apiVersion")!r}: supported values: "{API_VERSION}"'
        )
    spec = _mapping(ctx, "spec", doc.get("spec"), ("duration", "namespace", "streams", "seed"))
    if "duration" not in spec:
        raise ctx.err("spec.duration", "Required value")
    duration = _dur(ctx)(spec["duration"], "spec.duration")
    if duration <= 0:
        raise ctx.err("spec.duration", "Invalid value: must be positive")
    ns = spec.get("namespace") or "default"
    if not isinstance(ns, str) or not _DNS.match(ns) or len(ns) > 63:
        # checked here, once: otherwise every generated object repeats it under a name built from it
        raise ctx.err(
            "spec.namespace",
            f"Invalid value: {ns!r}: must be a DNS label (RFC 1123) of at most 63 characters",
        )
    streams = spec.get("streams")
    if not isinstance(streams, list) or not streams:
        raise ctx.err("spec.streams", "Required value: at least one stream")
    rng = random.Random(f"{name}/{seed}/{spec.get('seed', 0)}")
    out: list[Obj] = []
    if ns != "default":
        out.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    names: set[str] = set()
    planned = 0  # pods the streams so far generate at most
    for si, raw in enumerate(streams):
        path = f"spec.streams[{si}]"
        st = _mapping(
            ctx,
            path,
            raw,
            (
                "name",
                "type",
                "arrivals",
                "replicas",
                "parallelism",
                "runTime",
                "cpu",
                "memory",
                "priority",
                "gpu",
                "tpu",
            ),
        )
        sname = st.get("name")
        if not isinstance(sname, str) or not _DNS.match(sname) or len(sname) > 40:
            raise ctx.err(f"{path}.name", f"Invalid value: {sname!r}: a DNS label of at most 40 characters")
        if sname in names:
            raise ctx.err(f"{path}.name", f"Duplicate value: {sname!r}")
        names.add(sname)
        stype = st.get("type")
        if not isinstance(stype, str) or stype not in TYPES:  # a list or map is no type (and unhashable)
            raise ctx.err(
                f"{path}.type",
                f"Unsupported value: {stype!r}: supported values: " + ", ".join(f'"{t}"' for t in TYPES),
            )
        kind = TYPES[stype]
        arrivals = _arrivals(ctx, f"{path}.arrivals", st.get("arrivals"), duration, rng, max_pods - planned)
        count_lo, count_hi = _range(
            ctx,
            f"{path}.replicas" if kind == "Deployment" else f"{path}.parallelism",
            st.get("replicas" if kind == "Deployment" else "parallelism", 1),
            _int(ctx),
        )
        if kind == "Pod" and (count_lo, count_hi) != (1, 1):
            raise ctx.err(f"{path}.parallelism", "Invalid value: notebooks are single pods")
        planned += int(len(arrivals) * count_hi)
        if planned > max_pods:
            field = "replicas" if kind == "Deployment" else "parallelism"
            raise ctx.err(
                f"{path}.{field}",
                f"Invalid value: {len(arrivals):,} arrivals of up to {int(count_hi):,} pods: the workload "
                f"would have more than {max_pods:,} pods (--max-pods N lifts the limit)",
            )
        run_lo, run_hi = (
            _range(ctx, f"{path}.runTime", st["runTime"], _dur(ctx)) if "runTime" in st else (-1.0, -1.0)
        )
        cpu = _quantity(ctx, f"{path}.cpu", st.get("cpu", "1"))
        memory = _quantity(ctx, f"{path}.memory", st.get("memory", "4Gi"))
        priority = st.get("priority", 0)
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise ctx.err(f"{path}.priority", f"Invalid value: {priority!r}: must be an integer")
        claim_spec, need, model = _claim_spec(ctx, path, st.get("gpu"), st.get("tpu"), whole)
        tmpl_name = f"{sname}-accel"
        if claim_spec is not None:
            out.append(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaimTemplate",
                    "metadata": {"name": tmpl_name, "namespace": ns, "labels": {WORKLOAD_LABEL: sname}},
                    "spec": {"spec": claim_spec},
                }
            )
        for ai, t in enumerate(arrivals):
            n = round(rng.uniform(count_lo, count_hi)) if count_hi > count_lo else int(count_lo)
            run = _pick_duration(rng, run_lo, run_hi) if run_lo >= 0 else None
            container: Obj = {
                "name": "main",
                "image": f"registry.example.com/{sname}:latest",
                "resources": {"requests": {"cpu": cpu, "memory": memory}},
            }
            pod_spec: Obj = {"containers": [container], "priority": priority}
            if claim_spec is not None:
                pod_spec["resourceClaims"] = [{"name": "accel", "resourceClaimTemplateName": tmpl_name}]
                container["resources"]["claims"] = [{"name": "accel"}]
            if model:
                pod_spec["nodeSelector"] = {ACCELERATOR_LABEL: model}
            if st.get("tpu") is not None:
                pod_spec["tolerations"] = [
                    {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}
                ]
            if kind == "Job":
                pod_spec["restartPolicy"] = "Never"
            annotations = {ARRIVAL_TIME: format_duration(t) if t else "0"}
            pod_annotations: dict[str, str] = {}
            if run is not None:
                pod_annotations[RUN_TIME] = f"{round(run)}s"
            if need:
                pod_annotations[GPU_MEMORY] = need
            labels = {WORKLOAD_LABEL: sname}
            obj_name = f"{sname}-{ai:04d}"
            if kind == "Pod":
                out.append(
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {
                            "name": obj_name,
                            "namespace": ns,
                            "labels": labels,
                            "annotations": {**annotations, **pod_annotations},
                        },
                        "spec": pod_spec,
                    }
                )
                continue
            workload_spec: Obj = {
                "template": {"metadata": {"labels": labels, "annotations": pod_annotations}, "spec": pod_spec}
            }
            if kind == "Deployment":
                workload_spec["replicas"] = n
                workload_spec["selector"] = {"matchLabels": labels}
                api = "apps/v1"
            else:
                workload_spec["parallelism"] = n
                workload_spec["completions"] = n
                api = "batch/v1"
            out.append(
                {
                    "apiVersion": api,
                    "kind": kind,
                    "metadata": {
                        "name": obj_name,
                        "namespace": ns,
                        "labels": labels,
                        "annotations": annotations,
                    },
                    "spec": workload_spec,
                }
            )
    return Generated(out, duration)


def _arrivals(
    ctx: _Ctx, path: str, raw: Any, duration: float, rng: random.Random, room: int = 200_000
) -> list[float]:
    a = _mapping(ctx, path, raw, ("every", "count", "at"))
    if len(a) != 1:
        raise ctx.err(path, "Invalid value: give exactly one of every, count, at")

    def bound(field: str, n: float) -> None:
        if n > room:
            raise ctx.err(
                f"{path}.{field}",
                f"Invalid value: about {n:,.0f} arrivals: more pods than the workload may have "
                "(--max-pods N lifts the limit)",
            )

    if "every" in a:
        mean = _dur(ctx)(a["every"], f"{path}.every")
        if mean <= 0:
            raise ctx.err(f"{path}.every", "Invalid value: must be positive")
        bound("every", duration / mean)
        times = []
        t = rng.expovariate(1.0 / mean) * 0.5  # the first arrival comes early, then a Poisson process
        while t < duration:
            times.append(t)
            t += rng.expovariate(1.0 / mean)
        return times
    if "count" in a:
        n = int(_int(ctx)(a["count"], f"{path}.count"))
        bound("count", n)
        return sorted(rng.uniform(0, duration) for _ in range(n))
    at = a["at"]
    if not isinstance(at, list):
        raise ctx.err(f"{path}.at", "Invalid value: must be a list of durations")
    bound("at", len(at))
    return sorted(_dur(ctx)(v, f"{path}.at[{i}]") for i, v in enumerate(at))
