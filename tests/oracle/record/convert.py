"""Recorder JSON (record_test.go.txt) -> conformance files, one YAML per subtest.

The format is the one /work/shared/conformance/README.md documents for the 1.36 table (kept in
tests/allocator/conformance/README.md): name, description, source, features, nodes, deviceClasses,
resourceSlices, claims, allocatedDevices, node, expect. Not recorded here: apiServerValidation (no
kube-apiserver of that version is run). Skipped like the 1.36 recording: subtests whose claims share a
name (results are keyed by claim name) and the interrupt/{timeout,deadline,cancel} subtests (their
context is already done).

Usage: python3 convert.py JSON_DIR OUT_DIR VERSION
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml


def clean(value: Any) -> Any:
    """Null fields dropped (as the 1.36 files do)."""
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [clean(v) for v in value]
    return value


def obj(kind: str, o: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in (o.get("metadata") or {}).items() if k != "creationTimestamp"}
    out = {"apiVersion": "resource.k8s.io/v1", "kind": kind, "metadata": meta}
    for k, v in o.items():
        if k not in ("metadata", "apiVersion", "kind", "status"):
            out[k] = v
    return clean(out)


def _no_share_id(result: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if k != "shareID"}


def _node(node: dict[str, Any]) -> dict[str, Any]:
    out = {"name": node["metadata"]["name"], "labels": node["metadata"].get("labels") or {}}
    declared = (node.get("status") or {}).get("declaredFeatures")
    if declared:
        out["declaredFeatures"] = declared  # Node status.declaredFeatures (DRAOptionalNodeOperations)
    return out


# Subtests whose inputs do not survive being written down, with the reason.
NOT_SERIALIZABLE = {
    # Go's resource.Quantity prints MustParse("1000000000000000000000") as "1" (apimachinery's canonical
    # form has no suffix for 1e21), so the recorded request and default would be 1, not 1e21.
    "consumable-capacity-requests-are-not-modified",
    # device-1's attribute is an empty, non-nil version list, device-2's a nil one; both serialize as {}
    # (omitempty), so which device fails CEL first cannot be written down.
    "list-attributes-distinct-constaint-with-empty-or-unknown-type",
}


def convert(rec: dict[str, Any], version: str) -> tuple[str, dict[str, Any]] | None:
    source = "TestAllocator/" + rec["source"].split("/", 1)[1]
    sub = source.split("/", 1)[1]
    if sub.startswith("interrupt/") and sub != "interrupt/off":
        return None
    if re.sub(r"[^a-z0-9]+", "-", sub.lower()).strip("-") in NOT_SERIALIZABLE:
        return None
    claims = rec.get("claims") or []
    names = [c["metadata"].get("name") for c in claims]
    if len(set(names)) != len(names):
        return None
    name = re.sub(r"[^a-z0-9]+", "-", sub.lower()).strip("-")
    node = rec["node"]
    out: dict[str, Any] = {
        "name": name,
        "description": f"Upstream allocator test {source}, inputs and what the real "
        f"k8s.io/dynamic-resource-allocation {version} experimental allocator returned.",
        "source": f"{source} (as run under structured/internal/experimental, {version})",
        "features": sorted(rec.get("features") or []),
        "nodes": [_node(node)],
        "deviceClasses": [obj("DeviceClass", c) for c in rec.get("deviceClasses") or []],
        "resourceSlices": [obj("ResourceSlice", s) for s in rec.get("resourceSlices") or []],
        "claims": [obj("ResourceClaim", c) for c in claims],
        "allocatedDevices": rec.get("allocatedDevices") or [],
        "node": node["metadata"]["name"],
    }
    if rec.get("error") is not None:
        out["expect"] = {"error": rec["error"]}
    elif not rec.get("results"):
        out["expect"] = {"unschedulable": True} if claims else {"allocation": []}
    else:
        allocation = []
        for claim, res in zip(claims, rec["results"], strict=True):
            devices = res.get("devices") or {}
            entry: dict[str, Any] = {
                "claim": claim["metadata"]["name"],
                "results": [clean(_no_share_id(r)) for r in devices.get("results") or []],
                "nodeSelector": clean(res.get("nodeSelector")),
            }
            if devices.get("config"):
                entry["config"] = clean(devices["config"])
            allocation.append(entry)
        out["expect"] = {"allocation": allocation}
    return name, out


def main() -> None:
    src, dst, version = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    dst.mkdir(parents=True, exist_ok=True)
    for old in dst.glob("*.yaml"):
        old.unlink()
    written = skipped = 0
    for f in sorted(src.glob("*.json")):
        got = convert(json.loads(f.read_text()), version)
        if got is None:
            skipped += 1
            continue
        name, doc = got
        (dst / f"{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False, width=120))
        written += 1
    print(f"[convert.py] {written} files written to {dst}, {skipped} subtests skipped", file=sys.stderr)


if __name__ == "__main__":
    main()
