"""Drive every scenario in tests/scenarios/cases through the real `kdra allocate` entry point.

Each case is one YAML file (format: tests/scenarios/README.md). The objects are written to a file and
`kdra.cli.main.main(["allocate", "-f", FILE, "-o", "json", ...])` runs on them, so the corpus tests the
CLI contract end to end: exit code, stdout (a v1 List of allocated claims, with `explanation` when
something does not fit) and stderr.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from kdra.api.versions import SUPPORTED_VERSIONS
from kdra.cli.main import main
from support.corpus import case_expect, case_versions, effective_gates, gate_flag
from support.differential import RESULT_KEYS

CASES_DIR = Path(__file__).parent / "cases"
CASES = sorted(CASES_DIR.rglob("*.yaml"))
# Every case under every Kubernetes version it holds for (`kubernetesVersion` pins one).
RUNS = [(p, v) for p in CASES for v in case_versions(yaml.safe_load(p.read_text()))]
EXPECT_KINDS = ("allocation", "unschedulable", "error", "invalid")
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def _case_id(path: Path) -> str:
    return str(path.relative_to(CASES_DIR).with_suffix(""))


def load_case(path: Path) -> dict[str, Any]:
    case = yaml.safe_load(path.read_text())
    assert isinstance(case, dict), f"{path}: not a mapping"
    return case


def run_cli(
    case: dict[str, Any], version: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    objects_file = tmp_path / "objects.yaml"
    objects_file.write_text(yaml.safe_dump_all(case["objects"], sort_keys=False))
    argv = ["allocate", "-f", str(objects_file), "-o", "json", "--kubernetes-version", version]
    if case.get("node"):
        argv += ["--node", str(case["node"])]
    # As a cluster of that release runs them: locked and unknown gates left out (support.corpus).
    gates = effective_gates(case, version)
    if gates:
        argv += ["--feature-gates", gate_flag(gates)]
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse usage errors
        code = exc.code if isinstance(exc.code, int) else 2
    out, err = capsys.readouterr()
    return code, out, err


def claim_key(claim: dict[str, Any]) -> list[str]:
    """The keys an expectation may use for a claim: its name, or `pod/<pod>/<podClaimName>` if generated."""
    meta = claim.get("metadata") or {}
    keys = [str(meta.get("name")), f"{meta.get('namespace', 'default')}/{meta.get('name')}"]
    pod_claim = (meta.get("annotations") or {}).get("resource.kubernetes.io/pod-claim-name")
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == "Pod" and pod_claim:
            keys.append(f"pod/{ref.get('name')}/{pod_claim}")
    return keys


def _same_quantity(a: Any, b: Any) -> bool:
    if a == b:
        return True
    try:
        from kdra.api.quantity import Quantity

        return bool(Quantity.parse(a) == Quantity.parse(b))
    except Exception:
        return False


def check_result(where: str, expected: dict[str, Any], actual: dict[str, Any]) -> None:
    for key in RESULT_KEYS:
        exp, act = expected.get(key), actual.get(key)
        if key == "consumedCapacity" and exp is not None and act is not None:
            assert set(exp) == set(act), f"{where}: consumedCapacity names {sorted(act)} != {sorted(exp)}"
            for name in exp:
                assert _same_quantity(exp[name], act[name]), (
                    f"{where}: consumedCapacity[{name}] = {act[name]}, expected {exp[name]}"
                )
            continue
        if key == "adminAccess" and not exp:
            assert not act, f"{where}: adminAccess = {act!r}, expected unset"
            continue
        if not exp and not act:
            continue
        assert act == exp, f"{where}: {key} = {act!r}, expected {exp!r}"
    if expected.get("consumedCapacity") is not None:
        assert UUID.match(str(actual.get("shareID", ""))), f"{where}: shareID missing or not a UUID"


def check_allocation(expect: dict[str, Any], listing: dict[str, Any]) -> None:
    expected: dict[str, Any] = expect["allocation"] or {}
    assert listing.get("kind") == "List", f"stdout is not a List: {listing.get('kind')}"
    assert "explanation" not in listing
    items = listing.get("items") or []
    by_key: dict[str, dict[str, Any]] = {}
    for claim in items:
        assert claim.get("kind") == "ResourceClaim"
        for key in claim_key(claim):
            by_key[key] = claim
    assert len(items) == len(expected), (
        f"allocated {[c['metadata']['name'] for c in items]}, expected {sorted(expected)}"
    )
    for key, want in expected.items():
        assert key in by_key, f"claim {key} not in output (got {sorted(by_key)})"
        allocation = (by_key[key].get("status") or {}).get("allocation") or {}
        want_results = want["results"] if isinstance(want, dict) else want
        results = (allocation.get("devices") or {}).get("results") or []
        got = [(r.get("request"), r.get("driver"), r.get("pool"), r.get("device")) for r in results]
        exp = [(r.get("request"), r.get("driver"), r.get("pool"), r.get("device")) for r in want_results]
        assert got == exp, f"claim {key}: results {got}, expected {exp}"
        for i, (w, r) in enumerate(zip(want_results, results, strict=True)):
            check_result(f"claim {key} result #{i}", w, r)
        if isinstance(want, dict):
            if "nodeSelector" in want:
                assert allocation.get("nodeSelector") == want["nodeSelector"], (
                    f"claim {key}: nodeSelector {allocation.get('nodeSelector')}, "
                    f"expected {want['nodeSelector']}"
                )
            if "config" in want:
                got_config = (allocation.get("devices") or {}).get("config") or []
                assert got_config == (want["config"] or []), f"claim {key}: config {got_config}"


@pytest.mark.parametrize(("path", "version"), RUNS, ids=[f"{_case_id(p)}@{v}" for p, v in RUNS])
def test_scenario(path: Path, version: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = load_case(path)
    expect = case_expect(case, version)
    code, out, err = run_cli(case, version, tmp_path, capsys)
    assert "Traceback" not in err, err
    context = f"exit {code}\n--- stderr:\n{err}\n--- stdout:\n{out[:4000]}"
    if "allocation" in expect:
        assert code == 0, context
        check_allocation(expect, json.loads(out))
    elif expect.get("unschedulable"):
        assert code == 1, context
        listing = json.loads(out)
        assert listing.get("kind") == "List"
        assert listing.get("explanation"), "no structured explanation in -o json output"
        for needle in expect.get("explanationContains") or []:
            assert needle in err, f"explanation lacks {needle!r}\n{context}"
            assert needle in json.dumps(listing["explanation"]), f"structured explanation lacks {needle!r}"
    elif "error" in expect:
        assert code == 3, context
        assert expect["error"] in err, f"stderr lacks {expect['error']!r}\n{context}"
    elif "invalid" in expect:
        assert code == 2, context
        for needle in expect["invalid"]:
            assert needle in err, f"stderr lacks {needle!r}\n{context}"
    else:  # pragma: no cover - test_case_format catches this
        pytest.fail(f"unknown expectation {sorted(expect)}")


@pytest.mark.parametrize("path", CASES, ids=_case_id)
def test_case_format(path: Path) -> None:
    case = load_case(path)
    assert case.get("name") == path.stem, "name must equal the file name"
    assert case.get("description"), "description missing"
    cites = case.get("cites")
    assert cites and all(isinstance(c, str) and c for c in (cites if isinstance(cites, list) else [cites]))
    assert isinstance(case.get("objects"), list) and case["objects"], "objects must be a non-empty list"
    assert case.get("kubernetesVersion") in (None, *SUPPORTED_VERSIONS)
    assert set(case.get("expectByVersion") or {}) <= set(SUPPORTED_VERSIONS)
    for expect in [case.get("expect") or {}, *(case.get("expectByVersion") or {}).values()]:
        kinds = [k for k in EXPECT_KINDS if k in expect and expect[k] is not False]
        assert len(kinds) == 1, f"expect needs exactly one of {EXPECT_KINDS}, has {sorted(expect)}"
        assert set(expect) <= {*EXPECT_KINDS, "explanationContains"}
        if "explanationContains" in expect:
            assert expect.get("unschedulable") is True
    for gate, value in (case.get("featureGates") or {}).items():
        assert isinstance(gate, str) and isinstance(value, bool)


def test_corpus_size_and_readme_index() -> None:
    """At least 80 cases; every case the README's coverage index names exists."""
    assert len(CASES) >= 80
    readme = (Path(__file__).parent / "README.md").read_text()
    names = {p.stem for p in CASES}
    listed = set(re.findall(r"`([a-z0-9][a-z0-9-]+)`", readme)) - {"unschedulable", "invalid", "error"}
    missing = sorted(n for n in listed if n not in names and "-" in n and not n.startswith("kdra"))
    assert not missing, f"README names cases that do not exist: {missing}"
