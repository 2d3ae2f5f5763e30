"""The differential harness (support.upstream) against cases of the scenario corpus whose
expectations were recorded on upstream's allocator: kube-scheduler on the fixture must give the
same verdict, and the same devices where the corpus records them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from support.controlplane import ControlPlane
from support.upstream import run_upstream_case

pytestmark = [pytest.mark.e2e, pytest.mark.e2e_lane(name="kube-scheduler")]

CASES = Path(__file__).parent.parent / "scenarios" / "cases" / "upstream"
# A small, varied sample; the full differential suite (every expressible case, against kdra) builds on it.
SAMPLE = [
    "all-devices-single",
    "all-devices-some-allocated",
    "already-allocated-devices",
    "lexicographical-sorting-pools",
    "check-combinations-with-backtracking",
    "too-many-devices-single-request",
    "no-classes",
    "devices-split-across-different-slices",
]


def load(name: str) -> dict[str, Any]:
    case = yaml.safe_load((CASES / f"{name}.yaml").read_text())
    assert isinstance(case, dict)
    return case


@pytest.mark.parametrize("name", SAMPLE)
def test_kube_scheduler_agrees_with_recorded_allocator(control_plane: ControlPlane, name: str) -> None:
    path = CASES / f"{name}.yaml"
    if not path.exists():
        pytest.skip(f"corpus case {name} not present")
    case = load(name)
    expect = case["expect"]
    result = run_upstream_case(
        control_plane, case["objects"], node=case.get("node"), feature_gates=case.get("featureGates")
    )
    detail = f"{name}: {result}"
    if "allocation" in expect:
        assert result.scheduled, detail
        if not result.deterministic:
            # The case's gates select upstream's "stable" allocator, which walks slices in informer
            # order: kube-scheduler's pick is not deterministic, only the fit is comparable.
            return
        got = result.devices()
        for claim, alloc in expect["allocation"].items():
            want = [(r["request"], r["driver"], r["pool"], r["device"]) for r in alloc.get("results") or []]
            assert got.get(claim) == want, detail
    elif "unschedulable" in expect or "error" in expect:
        assert not result.scheduled, detail
        # Not compared with the recorded error text: kube-scheduler words some failures itself before
        # the allocator runs (a missing class is "device class class-a does not exist", not the
        # allocator's "could not retrieve device class").
        assert result.message, detail
    else:
        pytest.skip(f"{name}: expectation {sorted(expect)} has no kube-scheduler counterpart")


def test_default_gates_pick_devices_deterministically(control_plane: ControlPlane) -> None:
    """With 1.36's default gates kube-scheduler uses the "incubating" allocator, which sorts pools by
    name: the recorded choice (pool-1 and pool-2 of three single-device pools) must come out."""
    case = load("lexicographical-sorting-pools")
    result = run_upstream_case(control_plane, case["objects"], node=case.get("node"), feature_gates={})
    assert result.allocator == "incubating"
    want = [
        (r["request"], r["driver"], r["pool"], r["device"])
        for r in case["expect"]["allocation"]["claim-0"]["results"]
    ]
    assert result.devices()["claim-0"] == want, result
