"""Every case of upstream's allocator test table, replayed on the real v1.36.2 allocator, must give
the same answer in kdra: the same results in the same order, node selector and config, the same
"does not fit", or the same error text. Nothing is skipped."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from kdra.errors import AllocationError

from .conformance import conformance_dir, expected_results, load_case, normalise_results, run_case

CASES = sorted(conformance_dir().glob("*.yaml"))


def test_all_cases_present() -> None:
    assert len(CASES) == 218, f"expected 218 conformance files in {conformance_dir()}, found {len(CASES)}"


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_upstream_allocator_case(path: Path) -> None:
    case = load_case(path)
    expect = case["expect"]
    if "error" in expect:
        with pytest.raises(AllocationError) as info:
            run_case(case)
        assert str(info.value) == expect["error"]
        return
    outcome = run_case(case)
    if expect.get("unschedulable"):
        assert outcome.allocations is None, normalise_results(outcome.allocations, case["claims"])
        assert outcome.explanation is not None
        assert str(outcome.explanation).startswith(f"node {case['node']}: cannot allocate all claims")
        json.dumps(outcome.explanation.to_dict())
        return
    assert outcome.allocations is not None, str(outcome.explanation)
    got = normalise_results(outcome.allocations, case.get("claims") or [])
    assert got == expected_results(expect["allocation"])
    # Shares of devices that allow multiple allocations carry a fresh UUID (README: shareID left out).
    for alloc in outcome.allocations:
        for r in alloc["devices"]["results"]:
            if "consumedCapacity" in r:
                assert uuid.UUID(r["shareID"]).version == 4
