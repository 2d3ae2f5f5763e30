"""Scenario-corpus cases (tests/scenarios/cases) through the allocator oracle, per Kubernetes version.

`oracle_case_for(case, version)` turns a case's objects into an oracle case with `kdra allocate`'s
grouping (claims no pod references first, then each pod's claims in `spec.resourceClaims` order,
ResourceClaimTemplates instantiated as kdra does), nodes in name order (or the case's `node`), and the
case's feature gates on that version's defaults. `check(case, answer)` says whether the recorded
expectation holds for the oracle's answer. `PYTHONPATH=tests python -m support.corpus` prints, per case and
version, where the corpus and the real allocator disagree (what `kubernetesVersion` and
`expectByVersion` in the corpus are for).
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from kdra.api.features import (
    DEFAULTS,
    DEPENDENCIES,
    GATES,
    SUPPORTED_VERSIONS,
    FeatureGates,
    picks_deterministically,
)
from kdra.api.types import Obj
from kdra.errors import InputError


class Unsupported(Exception):
    """A case the oracle cannot take as it is (invalid objects, pods bound to nodes, ...)."""


def _name(o: Obj) -> str:
    return str((o.get("metadata") or {}).get("name", ""))


def _ns(o: Obj) -> str:
    return str((o.get("metadata") or {}).get("namespace") or "default")


def case_versions(case: Obj) -> list[str]:
    """The versions a corpus case holds for: its `kubernetesVersion`, else every supported one."""
    v = case.get("kubernetesVersion")
    return [str(v)] if v else list(SUPPORTED_VERSIONS)


def case_expect(case: Obj, version: str) -> Obj:
    """The expectation for one version: `expectByVersion[version]` when given, else `expect`."""
    by = case.get("expectByVersion") or {}
    return dict(by.get(version) or case["expect"])


def effective_gates(case: Obj, version: str) -> dict[str, bool]:
    """The case's `featureGates` as a cluster of that release can run them (what the e2e harness does
    with a real control plane, support.controlplane.resolve_gates): gates the release does not
    know or has locked are left out, and a gate whose dependency the case switches off is switched off
    too (unless the case names it)."""
    specs = GATES[version]
    asked = {k: bool(v) for k, v in (case.get("featureGates") or {}).items()}
    out = {k: v for k, v in asked.items() if k in specs and not specs[k].locked}
    values = {**DEFAULTS[version], **out}
    changed = True
    while changed:
        changed = False
        for gate, needs in DEPENDENCIES[version].items():
            if gate in asked or gate not in specs or specs[gate].locked:
                continue
            if values.get(gate) and any(not values.get(n, False) for n in needs):
                values[gate] = out[gate] = False
                changed = True
    return {k: v for k, v in out.items() if v != DEFAULTS[version][k]}


def gate_flag(gates: dict[str, bool]) -> str:
    return ",".join(f"{k}={'true' if v else 'false'}" for k, v in sorted(gates.items()))


def case_gates(case: Obj, version: str) -> FeatureGates:
    """The case's effective gates on the version's defaults, as `kdra allocate --feature-gates` reads them."""
    return FeatureGates.parse(gate_flag(effective_gates(case, version)), version=version)


def oracle_case_for(case: Obj, version: str, case_id: str = "") -> Obj:
    from kdra.api.templates import instantiate_template, is_claim_for_pod

    if "invalid" in case_expect(case, version):
        raise Unsupported("an invalid case (validation only)")
    if any(o.get("kind") == "DeviceTaintRule" for o in case["objects"]):
        # The oracle is upstream's allocator; kube-scheduler's slice tracker applies the rules above it
        # (such cases are checked on kube-scheduler itself: tests/e2e/test_corpus_upstream.py).
        raise Unsupported("DeviceTaintRules (the slice tracker's, not the allocator's)")
    try:
        gates = case_gates(case, version)
    except InputError as err:
        raise Unsupported(f"feature gates: {err}") from err
    objs = copy.deepcopy(case["objects"])
    by_kind: dict[str, list[Obj]] = {}
    for o in objs:
        by_kind.setdefault(str(o.get("kind")), []).append(o)
    claims = by_kind.get("ResourceClaim", [])
    claims_by_ref = {f"{_ns(c)}/{_name(c)}": c for c in claims}
    templates = {f"{_ns(t)}/{_name(t)}": t for t in by_kind.get("ResourceClaimTemplate", [])}

    def allocated(c: Obj) -> bool:
        return bool((c.get("status") or {}).get("allocation"))

    referenced: set[str] = set()
    pod_groups: list[list[Obj]] = []
    for pod in by_kind.get("Pod", []):
        if (pod.get("spec") or {}).get("nodeName"):
            raise Unsupported("a pod bound to a node")
        group: list[Obj] = []
        ns = _ns(pod)
        for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
            claim = None
            if entry.get("resourceClaimName"):
                claim = claims_by_ref.get(f"{ns}/{entry['resourceClaimName']}")
            elif entry.get("resourceClaimTemplateName"):
                claim = next((c for c in claims if is_claim_for_pod(c, pod, entry["name"])), None)
                if claim is None:
                    template = templates.get(f"{ns}/{entry['resourceClaimTemplateName']}")
                    if template is None:
                        raise Unsupported("a missing template")
                    taken = {_name(c) for c in claims if _ns(c) == ns}
                    claim = instantiate_template(pod, entry["name"], template, taken)
                    claims.append(claim)
                    claims_by_ref[f"{ns}/{_name(claim)}"] = claim
            if claim is None:
                raise Unsupported("a pod referencing a missing claim")
            if allocated(claim):
                raise Unsupported("a pod using an already allocated claim")
            referenced.add(f"{_ns(claim)}/{_name(claim)}")
            if all(c is not claim for c in group):
                group.append(claim)
        pod_groups.append(group)
    loose = [c for c in claims if f"{_ns(c)}/{_name(c)}" not in referenced and not allocated(c)]
    groups = ([loose] if loose or not pod_groups else []) + pod_groups
    nodes = sorted(by_kind.get("Node", []), key=_name)
    if not nodes:
        names = set()
        for s in by_kind.get("ResourceSlice", []):
            spec = s.get("spec") or {}
            if spec.get("nodeName"):
                names.add(spec["nodeName"])
            for d in spec.get("devices") or []:
                if isinstance(d, dict) and d.get("nodeName"):
                    names.add(d["nodeName"])
        if case.get("node"):
            names = {case["node"]}
        nodes = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": n}} for n in sorted(names)]
    if case.get("node"):
        nodes = [n for n in nodes if _name(n) == case["node"]]
    return {
        "id": case_id or str(case.get("name")),
        "gates": dict(gates.gates),
        "nodes": nodes,
        "deviceClasses": by_kind.get("DeviceClass", []),
        "resourceSlices": by_kind.get("ResourceSlice", []),
        "allocatedClaims": [c for c in claims if allocated(c)],
        "groups": groups,
        "_claims": [[_name(c) for c in g] for g in groups],
    }


def check(expect: Obj, answer: Obj, names: list[list[str]]) -> str | None:
    """None when `expect` (a corpus expectation) holds for the oracle's answer, else why not."""
    groups = answer.get("groups") or []
    if answer.get("fatal"):
        return f"oracle: {answer['fatal']}"
    failed = next((g for g in groups if g["outcome"] != "allocation"), None)
    if "allocation" in expect:
        if failed is not None:
            return f"upstream: {failed['outcome']} {failed.get('error', '')}".strip()
        # The stable allocator of 1.36 and 1.37 walks pools in Go map order: compare its devices as a
        # multiset.
        ordered = picks_deterministically(str(answer.get("version")), str(answer.get("variant")))
        got: dict[str, Obj] = {}
        for g, claim_names in zip(groups, names, strict=False):
            for claim_name, claim_alloc in zip(claim_names, g.get("allocations") or [], strict=False):
                got[claim_name] = claim_alloc
        for key, want in (expect["allocation"] or {}).items():
            short = key.split("/")[-1] if not key.startswith("pod/") else None
            alloc = got.get(short) if short else None
            if alloc is None and key.startswith("pod/"):
                _, pod, pod_claim = key.split("/", 2)
                alloc = next((a for n, a in got.items() if n.startswith(f"{pod}-{pod_claim}-")), None)
            if alloc is None:
                return f"upstream allocated no claim {key}"
            want_results = want["results"] if isinstance(want, dict) else want
            results = (alloc.get("devices") or {}).get("results") or []
            tuples = _device_tuples(results)
            exp = _device_tuples(want_results)
            if not ordered:
                if sorted(tuples) != sorted(exp):
                    return None  # another choice is as valid (upstream is not deterministic here)
                results = sorted(results, key=lambda r: exp.index(_device_tuples([r])[0]))
            elif tuples != exp:
                return f"claim {key}: upstream {tuples}, corpus {exp}"
            for w, r in zip(want_results, results, strict=True):
                for k in ("adminAccess", "tolerations", "bindingConditions", "bindingFailureConditions"):
                    if (w.get(k) or None) != (r.get(k) or None):
                        return f"claim {key}: {k} upstream {r.get(k)!r}, corpus {w.get(k)!r}"
                if (w.get("consumedCapacity") is None) != (r.get("consumedCapacity") is None):
                    return f"claim {key}: consumedCapacity upstream {r.get('consumedCapacity')!r}"
            if isinstance(want, dict):
                if (
                    ordered
                    and "nodeSelector" in want
                    and (alloc.get("nodeSelector") or None) != want["nodeSelector"]
                ):
                    return f"claim {key}: nodeSelector upstream {alloc.get('nodeSelector')}"
                if "config" in want and ((alloc.get("devices") or {}).get("config") or []) != (
                    want["config"] or []
                ):
                    return f"claim {key}: config upstream {(alloc.get('devices') or {}).get('config')}"
        return None
    if expect.get("unschedulable"):
        if failed is None or failed["outcome"] not in ("unschedulable", "timeout"):
            return (
                f"upstream: {failed['outcome'] if failed else 'allocation'} {(failed or {}).get('error', '')}"
            )
        return None
    if "error" in expect:
        if failed is None or failed["outcome"] != "error":
            return f"upstream: {failed['outcome'] if failed else 'allocation'}"
        if expect["error"] not in failed.get("error", ""):
            return f"upstream error {failed.get('error')!r}"
        return None
    return "unknown expectation"


def expect_from_answer(answer: Obj, names: list[list[str]], case: Obj, version: str) -> Obj:
    """A corpus expectation recorded from the oracle's answer (the shape tests/scenarios reads)."""
    groups = answer.get("groups") or []
    failed = next((g for g in groups if g["outcome"] != "allocation"), None)
    if failed is not None:
        if failed["outcome"] == "error":
            return {"error": failed["error"]}
        out: Obj = {"unschedulable": True}
        old = case_expect(case, version)
        if old.get("explanationContains"):
            out["explanationContains"] = old["explanationContains"]
        return out
    keys = list((case_expect(case, version).get("allocation") or {}).keys())
    allocation: Obj = {}
    for g, claim_names in zip(groups, names, strict=True):
        for name, alloc in zip(claim_names, g.get("allocations") or [], strict=True):
            key = next((k for k in keys if k == name or k.endswith("/" + name)), name)
            for k in keys:
                if k.startswith("pod/"):
                    _, pod, pod_claim = k.split("/", 2)
                    if name.startswith(f"{pod}-{pod_claim}-"):
                        key = k
            devices = alloc.get("devices") or {}
            results = [{k: v for k, v in r.items() if k != "shareID"} for r in devices.get("results") or []]
            entry: Obj = {"results": results, "nodeSelector": alloc.get("nodeSelector")}
            if devices.get("config"):
                entry["config"] = devices["config"]
            allocation[key] = entry
    return {"allocation": allocation}


def main(argv: Sequence[str] | None = None) -> int:
    from support.oracle import Oracle

    p = argparse.ArgumentParser(prog="python -m support.corpus", description=__doc__.split("\n")[0])
    p.add_argument(
        "paths", nargs="*", type=Path, help="case files or folders (default: tests/scenarios/cases)"
    )
    p.add_argument(
        "--fix",
        action="store_true",
        help="record the real allocator's answer as `expectByVersion` where a version disagrees "
        "(deterministic allocators only)",
    )
    args = p.parse_args(argv)
    from support.oracle import repo_root

    paths = args.paths or [repo_root() / "tests" / "scenarios" / "cases"]
    files = sorted(f for path in paths for f in ([path] if path.is_file() else path.rglob("*.yaml")))
    oracles: dict[str, Oracle] = {v: Oracle(v) for v in SUPPORTED_VERSIONS}
    bad = 0
    try:
        for f in files:
            case = yaml.safe_load(f.read_text())
            for version in SUPPORTED_VERSIONS:
                held = version in case_versions(case)
                try:
                    oc = oracle_case_for(case, version)
                except Unsupported as reason:
                    if held and "invalid" not in case_expect(case, version):
                        print(f"{f.stem} {version}: not checked: {reason}")
                    continue
                names = oc.pop("_claims")
                answer = oracles[version].run_one(oc)
                why = check(case_expect(case, version), answer, names)
                if (
                    held
                    and why
                    and args.fix
                    and (_deterministic(answer) or _same_devices(case, version, answer, names))
                ):
                    new = expect_from_answer(answer, names, case, version)
                    if not _deterministic(answer):
                        new = _in_recorded_order(new, case_expect(case, version))
                    case.setdefault("expectByVersion", {})[version] = new
                    if all(
                        check(case_expect(case, v), a, n) is None
                        for v, (a, n) in _answers(case, oracles).items()
                    ):
                        _write(f, case)
                        print(f"{f.stem} {version}: expectByVersion[{version}] recorded")
                        continue
                    del case["expectByVersion"][version]
                if held and why:
                    bad += 1
                    print(f"{f.stem} {version}: DISAGREES: {why}")
                elif not held and why is None:
                    print(f"{f.stem} {version}: also holds (case is pinned to {case_versions(case)})")
    finally:
        for o in oracles.values():
            o.close()
    print(f"{bad} disagreement(s) in {len(files)} cases", file=sys.stderr)
    return 1 if bad else 0


def _device_tuples(results: list[Obj]) -> list[tuple[Any, ...]]:
    return [(r.get("request"), r.get("driver"), r.get("pool"), r.get("device")) for r in results]


def _same_devices(case: Obj, version: str, answer: Obj, names: list[list[str]]) -> bool:
    """The stable allocator's answer has the recorded devices (in some order): only other fields differ."""
    old = case_expect(case, version).get("allocation")
    if not old:
        return False
    new = expect_from_answer(answer, names, case, version).get("allocation")
    if not new or set(new) != set(old):
        return False
    return all(
        sorted(_device_tuples(new[k]["results"]))
        == sorted(_device_tuples(old[k]["results"] if isinstance(old[k], dict) else old[k]))
        for k in old
    )


def _in_recorded_order(new: Obj, old: Obj) -> Obj:
    """`new`'s allocation with each claim's results in the order `old` recorded them."""
    for key, entry in new["allocation"].items():
        want = old["allocation"][key]
        order = _device_tuples(want["results"] if isinstance(want, dict) else want)
        entry["results"].sort(key=lambda r: order.index(_device_tuples([r])[0]))
    return new


def _deterministic(answer: Obj) -> bool:
    """Whether recording this answer is safe: not upstream's stable allocator (Go map order), unless it
    failed before searching (a validation error or no fit found by exhausting the search)."""
    if picks_deterministically(str(answer.get("version")), str(answer.get("variant"))):
        return True
    failed = next((g for g in answer.get("groups") or [] if g["outcome"] != "allocation"), None)
    return failed is not None and (
        failed["outcome"] == "unschedulable" or "claim limit" in str(failed.get("error", ""))
    )


def _answers(case: Obj, oracles: Mapping[str, Any]) -> dict[str, tuple[Obj, list[list[str]]]]:
    out = {}
    for version in case_versions(case):
        try:
            oc = oracle_case_for(case, version)
        except Unsupported:
            continue
        names = oc.pop("_claims")
        out[version] = (oracles[version].run_one(oc), names)
    return out


def _write(path: Path, case: Obj) -> None:
    """Write the case back with `expectByVersion` right after `expect` (key order kept otherwise)."""
    ordered: Obj = {}
    for k, v in case.items():
        if k == "expectByVersion":
            continue
        ordered[k] = v
        if k == "expect" and case.get("expectByVersion"):
            ordered["expectByVersion"] = case["expectByVersion"]
    path.write_text(yaml.safe_dump(ordered, sort_keys=False, default_flow_style=False, width=120))


if __name__ == "__main__":
    raise SystemExit(main())
