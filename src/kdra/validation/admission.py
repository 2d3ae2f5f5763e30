"""What kube-apiserver does to an object it is asked to create, before anything reads it: a name for an
object that has only `metadata.generateName`, the v1 API's defaults, the fields of gates that are off
dropped, then validation (kdra.validation.rules).

Every command that reads objects (kdra allocate, the workloads of kdra simulate) admits them here, so a
pod with only generateName gets a name as it would in a cluster (its claims are then `<name>-<claim>-xxxxx`,
not `-<claim>-xxxxx` with an empty owner), and `count: 0` means what the API server stores: 1.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any

from kdra.api import workloadapi
from kdra.api.features import FeatureGates
from kdra.api.templates import generated_name
from kdra.api.types import CLUSTER_SCOPED_KINDS, kind_of, namespace_of, object_ref
from kdra.validation.rules import validate_objects


def generate_names(objs: Iterable[Any]) -> None:
    """names.SimpleNameGenerator: generateName (cut to 58 characters) plus five characters, derived from the
    object's kind, namespace, generateName and position instead of drawn at random (reproducible runs),
    never a name the input already uses."""
    objs = [o for o in objs if isinstance(o, dict) and isinstance(o.get("metadata"), dict)]
    taken: dict[tuple[str, str], set[str]] = {}
    for obj in objs:
        name = obj["metadata"].get("name")
        if isinstance(name, str) and name:
            taken.setdefault(_scope(obj), set()).add(name)
    for i, obj in enumerate(objs):
        meta = obj["metadata"]
        generate = meta.get("generateName")
        if meta.get("name") or not isinstance(generate, str) or not generate:
            continue
        scope = _scope(obj)
        names = taken.setdefault(scope, set())
        meta["name"] = generated_name(generate, f"{scope[0]}/{scope[1]}/{generate}#{i}", names)
        names.add(meta["name"])


def _scope(obj: dict[str, Any]) -> tuple[str, str]:
    kind = kind_of(obj)
    return kind, "" if kind in CLUSTER_SCOPED_KINDS else namespace_of(obj)


def apply_defaults(obj: Any) -> None:
    """The v1 defaults that change what a present field means (SetDefaults_ExactDeviceRequest,
    SetDefaults_DeviceSubRequest): an ExactCount request with `count: 0` is stored with count 1. Absent
    fields stay absent (every reader takes them as their default)."""
    kind = kind_of(obj)
    spec = obj.get("spec") if isinstance(obj, dict) else None
    if kind == "ResourceClaimTemplate" and isinstance(spec, dict):
        spec = spec.get("spec")
    if kind not in ("ResourceClaim", "ResourceClaimTemplate") or not isinstance(spec, dict):
        return
    devices = spec.get("devices")
    requests = devices.get("requests") if isinstance(devices, dict) else None
    for req in requests if isinstance(requests, list) else []:
        if not isinstance(req, dict):
            continue
        subs = req.get("firstAvailable")
        for r in [req.get("exactly"), *(subs if isinstance(subs, list) else [])]:
            if not isinstance(r, dict) or r.get("allocationMode") not in (None, "", "ExactCount"):
                continue
            if type(r.get("count")) is int and r["count"] == 0:
                r["count"] = 1


def drop_disabled_fields(
    objs: Iterable[Any], features: FeatureGates | None, warn: Callable[[str], None] | None = None
) -> None:
    """PrepareForCreate's drops of fields whose gate is off: PodGroup-level ResourceClaims without
    DRAWorkloadResourceClaims (kdra.api.workloadapi). The API server drops them silently; each drop is
    said here as a warning (default: `Warning: ...` on stderr, as kubectl prints them), because the pods
    then get claims of their own instead of the group's."""
    emit = warn or (lambda line: print(f"Warning: {line}", file=sys.stderr))
    version = features.version if features is not None else None
    for obj in objs:
        if isinstance(obj, dict) and workloadapi.drop_disabled_fields(obj, features):
            path = (
                "spec.resourceClaims"
                if obj.get("kind") == "PodGroup"
                else "spec.podGroupTemplates[].resourceClaims"
            )
            gate = workloadapi.CLAIMS_GATE
            where = f" in Kubernetes {version}" if version else ""
            emit(
                f"{object_ref(obj)}: {path} dropped: the {gate} feature gate is off{where}; its pods get "
                f"claims of their own (--feature-gates GenericWorkload=true,{gate}=true shares the group's)"
            )


def admit(
    objs: list[Any],
    *,
    cel: bool = True,
    list_type_attributes: bool = False,
    features: FeatureGates | None = None,
) -> None:
    """Name, default and validate `objs` in place as kube-apiserver's create would; InputError (every
    problem, one line each) when any is invalid."""
    generate_names(objs)
    for obj in objs:
        apply_defaults(obj)
    drop_disabled_fields(objs, features)
    validate_objects(objs, cel=cel, list_type_attributes=list_type_attributes, features=features)


__all__ = ["admit", "apply_defaults", "drop_disabled_fields", "generate_names"]
