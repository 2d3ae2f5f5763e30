"""Generate src/kdra/api/data/fields.json: the fields the API server knows, for strict field validation.

kubectl's `--validate=strict` (the API server's strict decoding) rejects a field the object's schema does not
have. kdra checks the same against the OpenAPI v2 definitions (api/openapi-spec/swagger.json) of the
Kubernetes releases it follows, for the kinds its commands read. Fields a release lacks are recorded, so a
check can be made for one release; by default the union is used.

Usage (the module sources come from the Go module proxy, e.g. `go mod download k8s.io/kubernetes@v1.37.2`):

    python hack/gen_api_fields.py 1.36=$GOMODCACHE/k8s.io/kubernetes@v1.36.3 \
        1.37=$GOMODCACHE/k8s.io/kubernetes@v1.37.2 > src/kdra/api/data/fields.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

# apiVersion/kind -> definition, for every kind a kdra command reads from files.
ROOTS = {
    "v1/Pod": "io.k8s.api.core.v1.Pod",
    "v1/Node": "io.k8s.api.core.v1.Node",
    "v1/Namespace": "io.k8s.api.core.v1.Namespace",
    "resource.k8s.io/v1/DeviceClass": "io.k8s.api.resource.v1.DeviceClass",
    "resource.k8s.io/v1/ResourceSlice": "io.k8s.api.resource.v1.ResourceSlice",
    "resource.k8s.io/v1/ResourceClaim": "io.k8s.api.resource.v1.ResourceClaim",
    "resource.k8s.io/v1/ResourceClaimTemplate": "io.k8s.api.resource.v1.ResourceClaimTemplate",
    # v1 from 1.37; v1beta2 in 1.36 (where its API is on) and later.
    "resource.k8s.io/v1/DeviceTaintRule": "io.k8s.api.resource.v1.DeviceTaintRule",
    "resource.k8s.io/v1beta2/DeviceTaintRule": "io.k8s.api.resource.v1beta2.DeviceTaintRule",
    "apps/v1/Deployment": "io.k8s.api.apps.v1.Deployment",
    "batch/v1/Job": "io.k8s.api.batch.v1.Job",
    "scheduling.k8s.io/v1/PriorityClass": "io.k8s.api.scheduling.v1.PriorityClass",
}
PREFIX = "io.k8s."


def _short(ref: str) -> str:
    name = ref.rsplit("/", 1)[-1]
    return name.removeprefix(PREFIX)


def _field_type(prop: dict[str, Any], defs: dict[str, Any]) -> str:
    """"" (not checked further), "D" (an object of definition D), "[D" (a list of D), "{D" (a map of D)."""

    def ref_of(p: dict[str, Any]) -> str:
        ref = p.get("$ref")
        if not ref:
            return ""
        target = defs[ref.rsplit("/", 1)[-1]]
        return _short(ref) if target.get("properties") else ""

    if "$ref" in prop:
        return ref_of(prop)
    if prop.get("type") == "array" and isinstance(prop.get("items"), dict):
        inner = ref_of(prop["items"])
        return "[" + inner if inner else ""
    if prop.get("type") == "object" and isinstance(prop.get("additionalProperties"), dict):
        inner = ref_of(prop["additionalProperties"])
        return "{" + inner if inner else ""
    return ""


def _reachable(defs: dict[str, Any]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    todo = [r for r in ROOTS.values() if r in defs]  # a kind a release does not serve has no definition
    while todo:
        name = todo.pop()
        short = name.removeprefix(PREFIX)
        if short in out:
            continue
        props = defs[name].get("properties") or {}
        fields = {k: _field_type(v, defs) for k, v in sorted(props.items())}
        out[short] = fields
        for t in fields.values():
            if t:
                todo.append(PREFIX + t.lstrip("[{"))
    return out


def main(argv: list[str]) -> int:
    per_version: dict[str, dict[str, dict[str, str]]] = {}
    for arg in argv:
        version, _, root = arg.partition("=")
        spec = json.loads((Path(root) / "api" / "openapi-spec" / "swagger.json").read_text())
        per_version[version] = _reachable(spec["definitions"])
    versions = sorted(per_version)
    union: dict[str, dict[str, str]] = {}
    for v in versions:
        for d, fields in per_version[v].items():
            union.setdefault(d, {}).update(fields)
    only: dict[str, dict[str, list[str]]] = {}
    for d, fields in union.items():
        for f in fields:
            have = [v for v in versions if f in per_version[v].get(d, {})]
            if have != versions:
                only.setdefault(d, {})[f] = have
    doc = {
        "source": "api/openapi-spec/swagger.json of k8s.io/kubernetes, by hack/gen_api_fields.py",
        "versions": versions,
        "roots": {k: v.removeprefix(PREFIX) for k, v in ROOTS.items()},
        "definitions": {d: union[d] for d in sorted(union)},
        "onlyIn": only,
    }
    sys.stdout.write(json.dumps(doc, indent=0, sort_keys=False, separators=(",", ":")) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
