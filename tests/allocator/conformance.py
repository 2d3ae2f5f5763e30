"""Load upstream's allocator conformance vectors (tests/allocator/conformance/v1.XX, see its README)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kdra.allocator import Allocator, FeatureGates

HERE = Path(__file__).resolve().parent


def conformance_dir(version: str = "1.36") -> Path:
    """The recorded table of one Kubernetes version: tests/allocator/conformance/v1.XX (see its README)."""
    return HERE / "conformance" / f"v{version}"


def load_case(path: Path) -> dict[str, Any]:
    with path.open() as fh:
        data: dict[str, Any] = yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return data


def allocated_claims(case: dict[str, Any]) -> list[dict[str, Any]]:
    """One allocated ResourceClaim per allocatedDevices entry (README: "Reading allocatedDevices back")."""
    claims = []
    for i, entry in enumerate(case.get("allocatedDevices") or []):
        result: dict[str, Any] = {
            "request": "req",
            "driver": entry["driver"],
            "pool": entry["pool"],
            "device": entry["device"],
        }
        if "shareID" in entry:
            result["shareID"] = entry["shareID"]
        if "consumedCapacity" in entry:
            result["consumedCapacity"] = entry["consumedCapacity"]
        claims.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": f"allocated-{i}"},
                "spec": {"devices": {"requests": []}},
                "status": {"allocation": {"devices": {"results": [result]}}},
            }
        )
    return claims


def run_case(case: dict[str, Any], version: str = "1.36", **kwargs: Any) -> Any:
    features = FeatureGates.only(case.get("features") or [], version)
    classes = {c["metadata"]["name"]: c for c in case.get("deviceClasses") or []}
    allocator = Allocator(
        classes, case.get("resourceSlices") or [], allocated_claims(case), features, **kwargs
    )
    node = next(n for n in case["nodes"] if n["name"] == case["node"])
    node_obj: dict[str, Any] = {"metadata": {"name": node["name"], "labels": node.get("labels") or {}}}
    if node.get("declaredFeatures"):
        node_obj["status"] = {"declaredFeatures": node["declaredFeatures"]}
    return allocator.allocate(node_obj, case.get("claims") or [])


def normalise_results(
    allocations: list[dict[str, Any]], claims: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Our allocations in the files' `expect.allocation` shape (shareID left out)."""
    out = []
    for claim, alloc in zip(claims, allocations, strict=True):
        results = []
        for r in alloc["devices"]["results"]:
            r = {k: v for k, v in r.items() if k != "shareID"}
            results.append(r)
        entry: dict[str, Any] = {
            "claim": claim["metadata"]["name"],
            "results": results,
            "nodeSelector": alloc.get("nodeSelector"),
        }
        if alloc["devices"].get("config"):
            entry["config"] = alloc["devices"]["config"]
        out.append(entry)
    return out


def expected_results(expect: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for e in expect:
        entry = {
            "claim": e["claim"],
            "results": e.get("results") or [],
            "nodeSelector": e.get("nodeSelector"),
        }
        if e.get("config"):
            entry["config"] = e["config"]
        out.append(entry)
    return out
