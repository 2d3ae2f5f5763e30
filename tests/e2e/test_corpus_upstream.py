"""Every case of the scenario corpus through the real kube-scheduler, compared with the verdict the
corpus recorded on upstream's allocator. Opt-in (KDRA_E2E_CORPUS=1; about 190 cases, several minutes):
it checks the corpus and the harness; the differential suite proper (kdra against kube-scheduler)
builds on it.

Compared: invalid objects (the API server's 422 names the recorded field), fit or no fit, and the
devices wherever kube-scheduler's choice is deterministic (not with upstream's "stable" allocator,
which the case's gates select when binding conditions and consumable capacity are off)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from kdra.testing.controlplane import ControlPlane
from kdra.testing.upstream import run_upstream_case

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.environ.get("KDRA_E2E_CORPUS") != "1", reason="set KDRA_E2E_CORPUS=1 to run"),
]

CASES_DIR = Path(__file__).parent.parent / "scenarios" / "cases"
CASES = sorted(CASES_DIR.rglob("*.yaml"))


def devices(alloc: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    return [(r["request"], r["driver"], r["pool"], r["device"]) for r in alloc.get("results") or []]


@pytest.mark.parametrize("path", CASES, ids=[str(p.relative_to(CASES_DIR).with_suffix("")) for p in CASES])
def test_corpus_case_on_kube_scheduler(control_plane: ControlPlane, path: Path) -> None:
    case = yaml.safe_load(path.read_text())
    expect = case["expect"]
    result = run_upstream_case(
        control_plane, case["objects"], node=case.get("node"), feature_gates=case.get("featureGates")
    )
    detail = f"{path.name}: {result}"
    if "invalid" in expect:
        assert result.invalid, detail
        assert any(str(x) in result.invalid for x in expect["invalid"]), detail
        return
    if result.invalid:
        pytest.skip(f"not expressible: the fixture's API server rejects the case's objects: {result.invalid}")
    if result.ignored_gates:
        pytest.skip(f"not expressible: gates locked in 1.36 cannot be turned off: {result.ignored_gates}")
    if "allocation" in expect:
        assert result.scheduled, detail
        want_nodes = {
            v
            for alloc in expect["allocation"].values()
            for t in (alloc.get("nodeSelector") or {}).get("nodeSelectorTerms") or []
            for f in t.get("matchFields") or []
            if f.get("key") == "metadata.name"
            for v in f.get("values") or []
        }
        if not case.get("node") and len(want_nodes) == 1 and result.node not in want_nodes:
            # Several nodes fit: kdra takes the first by name, kube-scheduler the best-scored (ties broken
            # at random). Only the fit is comparable.
            return
        if result.deterministic:
            got = result.devices()
            for claim, alloc in expect["allocation"].items():
                key = claim.removeprefix("default/")
                assert got.get(key) == devices(alloc), detail
    else:
        assert not result.scheduled, detail
