"""Adapt the recorded upstream allocator table (shared/conformance/upstream-allocator) into scenario cases.

Run from the repository root: `python tests/scenarios/tools/adapt_upstream.py [CONFORMANCE_DIR]`.
It writes tests/scenarios/cases/upstream/<name>.yaml, one per usable recorded subtest, and is the only
source of those files (re-running gives byte-identical output, keeping what was recorded per Kubernetes
version since: see `keep_version_facts`).

The recorded results are what the real Kubernetes v1.36.2 allocator returned, so the expectations are
upstream's, not ours. What the adaptation changes, and why it cannot change the outcome:
* names the API server would reject become valid ones, consistently in objects, CEL, and expected texts:
  `subReq-N` -> `subreq-N` (DNS label), capacity `capacity-N` -> `capacityN` (C identifier), drivers
  `driver-a` -> `gpu.nvidia.com` and `driver-b` -> `net.example.com` (order kept: pools sort by driver),
  a second ResourceSlice with an already used name gets `-dup` (names are labels in the table; slices
  sort by name, and the suffix keeps the order since the names are equal up to it);
* `count` is dropped from `allocationMode: All` requests (the allocator ignores it there);
* claims get `namespace: default` (kubectl's default), so upstream's `claim claim-0` reads
  `claim default/claim-0` (klog.KObj);
* `allocatedDevices` become allocated ResourceClaims `in-use-N` (how the conformance README says to
  reproduce the allocator state);
* the recorded feature set (complete, not an overlay) becomes `featureGates` overrides of the 1.36 defaults;
* `invalid resource pools were encountered` (ErrFailedAllocationOnNode) is unschedulable on that node in
  kube-scheduler, so `kdra allocate` exits 1 with that text in the explanation.
Skipped: DRAListTypeAttributes files (kube-scheduler 1.36.2 does not pass that switch to the allocator, see
the conformance README) and files whose objects the API server rejects for reasons a rename cannot fix;
a few of the latter become `invalid` cases (validation, exit 2) instead.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[3]
DEFAULT_SRC = ROOT.parent / "shared" / "conformance" / "upstream-allocator"
OUT = ROOT / "tests" / "scenarios" / "cases" / "upstream"

# Kubernetes 1.36 defaults of the gates the allocator reads (kdra.api.features.DEFAULTS_1_36).
ALLOCATOR_GATES = {
    "DRAAdminAccess": True,
    "DRAPrioritizedList": True,
    "DRAPartitionableDevices": True,
    "DRADeviceTaints": True,
    "DRAConsumableCapacity": True,
    "DRADeviceBindingConditions": True,
    "DRAResourceClaimDeviceStatus": True,
    "DRAListTypeAttributes": False,
}

RENAMES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"subReq-(\d+)"), r"subreq-\1"),
    (re.compile(r"(?<![\w-])capacity-(\d+)(?![\w-])"), r"capacity\1"),
    (re.compile(r"(?<![\w.-])driver-a(?![\w.-])"), "gpu.nvidia.com"),
    (re.compile(r"(?<![\w.-])driver-b(?![\w.-])"), "net.example.com"),
]

# Cases no supported release can run, with why (the corpus holds only cases some cluster can run).
NO_RELEASE_RUNS = {
    "admin-access-disabled": "DRAAdminAccess is locked on in every supported release",
}

# Files the API server rejects for a reason that is itself worth pinning: `invalid` expectations
# (substrings of the apiserver message: field path and rule).
INVALID_CASES: dict[str, list[str]] = {
    "invalid-cel-one-device": [
        "spec.devices.requests[0].exactly.selectors[0].cel.expression",
        "undeclared reference to 'noSuchVar'",
    ],
    "invalid-cel-one-device-class": [
        "spec.selectors[0].cel.expression",
        "undeclared reference to 'noSuchVar'",
    ],
    "unknown-allocation-mode": [
        "spec.devices.requests[0].exactly.allocationMode",
        "Unsupported value",
    ],
    "unknown-selector": ["spec.devices.requests[0].exactly.selectors[0].cel", "Required value"],
    "unknown-constraint": ["spec.devices.constraints[0]", "exactly one of"],
    "empty-class": ["spec.devices.requests[0].exactly.deviceClassName", "Required value"],
    "consumable-capacity-dedicated-device-with-multiple-consumable-capacity-request": [
        "requestPolicy",
        "allowMultipleAllocations must be true",
    ],
    "consumable-capacity-multi-allocatable-device-with-exceeded-consumable-capacity-request": [
        "requestPolicy.validRange.max",
        "max is larger than capacity value",
    ],
}

FIXABLE = (
    lambda e: "firstAvailable[" in e and "RFC 1123" in e,
    lambda e: "C identifier" in e,
    lambda e: "duplicate object name" in e,
    lambda e: ("constraints[" in e or "config[" in e) and "RFC 1123" in e,
    lambda e: "must not be specified when allocationMode is 'All'" in e,
)


def rename(value: Any) -> Any:
    if isinstance(value, str):
        for pattern, repl in RENAMES:
            value = pattern.sub(repl, value)
        return value
    if isinstance(value, list):
        return [rename(v) for v in value]
    if isinstance(value, dict):
        return {rename(k): rename(v) for k, v in value.items()}
    return value


def unfixable_errors(case: dict[str, Any]) -> list[str]:
    validation = case["apiServerValidation"]
    if validation.get("accepted"):
        return []
    rest = []
    for error in validation.get("errors", []):
        for part in error.split("; "):
            if not any(rule(part) for rule in FIXABLE):
                rest.append(part)
    return rest


def namespaced_claim_text(text: str) -> str:
    return re.sub(r"\bclaim (claim-\d+)\b", r"claim default/\1", text)


def convert(case: dict[str, Any]) -> dict[str, Any] | None:
    name = case["name"]
    if "DRAListTypeAttributes" in case["features"] or name in NO_RELEASE_RUNS:
        return None
    invalid = INVALID_CASES.get(name)
    if invalid is None and unfixable_errors(case):
        return None
    case = rename(case)
    objects: list[dict[str, Any]] = []
    for node in case["nodes"]:
        meta: dict[str, Any] = {"name": node["name"]}
        if node.get("labels"):
            meta["labels"] = node["labels"]
        objects.append({"apiVersion": "v1", "kind": "Node", "metadata": meta})
    objects.extend(case["deviceClasses"])
    seen: set[str] = set()
    for s in case["resourceSlices"]:
        slice_name = s["metadata"]["name"]
        while slice_name in seen:
            slice_name += "-dup"
        seen.add(slice_name)
        s = dict(s, metadata=dict(s["metadata"], name=slice_name))
        objects.append(s)
    in_use_class = case["deviceClasses"][0]["metadata"]["name"] if case["deviceClasses"] else "class-a"
    for i, dev in enumerate(case["allocatedDevices"]):
        result = {"request": "req-0", "driver": dev["driver"], "pool": dev["pool"], "device": dev["device"]}
        if "shareID" in dev:
            result["shareID"] = dev["shareID"]
        if "consumedCapacity" in dev:
            result["consumedCapacity"] = dev["consumedCapacity"]
        objects.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": f"in-use-{i}", "namespace": "default"},
                "spec": {
                    "devices": {"requests": [{"name": "req-0", "exactly": {"deviceClassName": in_use_class}}]}
                },
                "status": {"allocation": {"devices": {"results": [result]}}},
            }
        )
    for claim in case["claims"]:
        claim = dict(claim, metadata=dict(claim["metadata"], namespace="default"))
        for req in claim["spec"]["devices"].get("requests", []):
            for sub in [req.get("exactly"), *(req.get("firstAvailable") or [])]:
                if sub and sub.get("allocationMode") == "All":
                    sub.pop("count", None)
        objects.append(claim)

    gates = {
        g: (g in case["features"]) for g in ALLOCATOR_GATES if (g in case["features"]) != ALLOCATOR_GATES[g]
    }
    expect: dict[str, Any]
    recorded = case["expect"]
    if invalid is not None:
        expect = {"invalid": invalid}
    elif "allocation" in recorded:
        allocation: dict[str, Any] = {}
        for entry in recorded["allocation"]:
            item: dict[str, Any] = {"results": entry["results"]}
            item["nodeSelector"] = entry.get("nodeSelector")
            if entry.get("config"):
                item["config"] = entry["config"]
            allocation[entry["claim"]] = item
        expect = {"allocation": allocation}
    elif "unschedulable" in recorded:
        expect = {"unschedulable": True}
    elif recorded["error"] == "invalid resource pools were encountered":
        expect = {"unschedulable": True, "explanationContains": ["invalid resource pools were encountered"]}
    else:
        expect = {"error": namespaced_claim_text(recorded["error"])}

    out: dict[str, Any] = {
        "name": name,
        "description": (
            f"Upstream allocator test {case['source']} (recorded on the real v1.36.2 allocator), adapted to "
            "API-valid objects by tests/scenarios/tools/adapt_upstream.py."
        ),
        "cites": [
            f"{case['source']} in staging/src/k8s.io/dynamic-resource-allocation/structured/internal/"
            "allocatortesting/allocator_testing.go (v1.36.2)"
        ],
    }
    if gates:
        out["featureGates"] = gates
    out["node"] = case["node"]
    out["objects"] = objects
    out["expect"] = expect
    return out


def keep_version_facts(new: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
    """What was recorded per Kubernetes version after generation is kept: `expectByVersion` (written by
    `python -m support.corpus --record` where a later release answers otherwise), a `kubernetesVersion`
    restricting a case to the release that can run it, and the note appended to the description saying
    why. Regenerating must never drop them."""
    out: dict[str, Any] = {}
    for key, value in new.items():
        if key == "description" and str(old.get("description", "")).startswith(value):
            value = old["description"]
        out[key] = value
        if key == "cites" and "kubernetesVersion" in old:
            out["kubernetesVersion"] = old["kubernetesVersion"]
        if key == "expect" and old.get("expectByVersion"):
            out["expectByVersion"] = old["expectByVersion"]
    return out


def main(argv: list[str]) -> int:
    src = Path(argv[1]) if len(argv) > 1 else DEFAULT_SRC
    OUT.mkdir(parents=True, exist_ok=True)
    written = 0
    for path in sorted(src.glob("*.yaml")):
        case = yaml.safe_load(path.read_text())
        converted = convert(case)
        if converted is None:
            continue
        target = OUT / path.name
        if target.exists():
            converted = keep_version_facts(converted, yaml.safe_load(target.read_text()) or {})
        text = yaml.safe_dump(converted, sort_keys=False, default_flow_style=False, width=120)
        target.write_text(text)
        written += 1
    print(f"wrote {written} cases to {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
