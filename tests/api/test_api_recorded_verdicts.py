"""kdra's validation against what a real kube-apiserver 1.36.3 said about every object of
kdra_api_cases.py (recorded by record_apiserver_verdicts.py into data/apiserver_verdicts.yaml).

Accepted objects must be accepted; rejected ones must give the same error lines in the same order
(whitespace normalised). Where the API server failed earlier (decoding wrong JSON types or bad
quantities, or a dropped connection), kdra must still reject the object, with a field error instead.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from kdra_api_cases import STATUS_CLAIM, WORKLOAD_GATES, cases, status_cases, workload_cases

from kdra.api.features import FeatureGates
from kdra.validation.rules import validate

V1_36 = FeatureGates.for_version("1.36")  # the release the verdicts were recorded on

RECORDED = Path(__file__).resolve().parent / "data" / "apiserver_verdicts.yaml"
VERDICTS: dict[str, dict[str, Any]] = {r["id"]: r for r in yaml.safe_load(RECORDED.read_text())}
CASES = cases()

# Differences that belong to another layer, with the reason; the object must still be rejected on
# the same field.
KNOWN = {
    "class-cel-empty": "kdra.cel puts the empty-input syntax error at 1:1 with a snippet; cel-go says 1:0",
    "class-selector-cel-missing-expression": "same as class-cel-empty (a missing expression is empty)",
}


def _norm(s: str) -> str:
    return " ".join(s.split())


def test_every_case_recorded() -> None:
    assert [cid for cid, _ in CASES if cid not in VERDICTS] == []


@pytest.mark.parametrize(("cid", "obj"), CASES, ids=[cid for cid, _ in CASES])
def test_same_verdict_as_kube_apiserver(cid: str, obj: dict[str, Any]) -> None:
    recorded = VERDICTS[cid]
    # The recording ran in the `default` namespace, which has no admin-access label.
    labels: dict[str, Any] | None = {} if obj["kind"] in ("ResourceClaim", "ResourceClaimTemplate") else None
    got = [str(e) for e in validate(obj, namespace_labels=labels, features=V1_36)]
    if recorded["accepted"]:
        assert got == [], f"kube-apiserver accepted {cid}"
        return
    assert got, f"kube-apiserver rejected {cid} ({recorded}), kdra accepted it"
    if "errors" not in recorded:
        return  # decoding failed upstream; kdra gives field errors instead
    expected = recorded["errors"]
    if cid in KNOWN:
        assert [g.split(": ", 1)[0] for g in got] == [e.split(": ", 1)[0] for e in expected], KNOWN[cid]
        return
    # Sorted: for map entries (labels, attributes) Go's error order is random; list order is pinned by
    # test_api_apiserver_conformance.py.
    assert sorted(_norm(g) for g in got) == sorted(_norm(e) for e in expected)


STATUS_CASES = status_cases()


@pytest.mark.parametrize(("cid", "status"), STATUS_CASES, ids=[cid for cid, _ in STATUS_CASES])
def test_same_status_verdict_as_kube_apiserver(cid: str, status: dict[str, Any]) -> None:
    """status.allocation / reservedFor / devices, as the status subresource validates them."""
    recorded = VERDICTS[cid]
    obj = copy.deepcopy(STATUS_CLAIM)
    obj["status"] = status
    got = [str(e) for e in validate(obj, features=V1_36)]
    if recorded["accepted"]:
        assert got == []
        return
    assert sorted(_norm(g) for g in got) == sorted(_norm(e) for e in recorded["errors"])


WORKLOAD_RECORDED = Path(__file__).resolve().parent / "data" / "workload_verdicts.yaml"
WORKLOAD_VERDICTS: dict[str, dict[str, Any]] = {
    r["id"]: r for r in yaml.safe_load(WORKLOAD_RECORDED.read_text())
}
WORKLOAD_CASES = workload_cases()
V1_38_WORKLOAD = FeatureGates.parse(WORKLOAD_GATES, version="1.38")  # as recorded


def test_every_workload_case_recorded() -> None:
    assert [cid for cid, _ in WORKLOAD_CASES if cid not in WORKLOAD_VERDICTS] == []


@pytest.mark.parametrize(("cid", "obj"), WORKLOAD_CASES, ids=[cid for cid, _ in WORKLOAD_CASES])
def test_same_workload_verdict_as_kube_apiserver_1_38(cid: str, obj: dict[str, Any]) -> None:
    """PodGroup-level ResourceClaims (KEP-5729) as kube-apiserver v1.38.0-beta.0 validates them: the same
    lines in the same order (declarative validation: duplicates first, then item by item)."""
    recorded = WORKLOAD_VERDICTS[cid]
    got = [_norm(str(e)) for e in validate(obj, features=V1_38_WORKLOAD)]
    assert got == [_norm(e) for e in recorded.get("errors") or []]
