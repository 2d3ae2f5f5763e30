"""Every case of upstream's allocator test table, replayed on the real allocator of each supported
Kubernetes version (v1.36: recorded on v1.36.2; v1.37: recorded on k8s.io/dynamic-resource-allocation
v0.37.2 by tests/oracle/record), must give the same answer in kdra under that version: the same results in
the same order, node selector and config, the same "does not fit", or the same error text. Nothing is
skipped."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest

from kdra.errors import AllocationError

from .conformance import conformance_dir, expected_results, load_case, normalise_results, run_case

EXPECTED_FILES = {"1.36": 218, "1.37": 276, "1.38": 316}
CASES = [(v, p) for v in sorted(EXPECTED_FILES) for p in sorted(conformance_dir(v).glob("*.yaml"))]


_BOTH = re.compile(r'requested both as ("[^"]*") and as ("[^"]*")')


def _either_order(error: str) -> str:
    """1.38's "capacity X requested both as A and as B" names A and B in Go map order (random:
    resolveCapacityRequests ranges over the request map), so either order is upstream's answer."""
    return _BOTH.sub(lambda m: "requested both as " + " and as ".join(sorted(m.groups())), error)


@pytest.mark.parametrize("version", sorted(EXPECTED_FILES))
def test_all_cases_present(version: str) -> None:
    n = len(list(conformance_dir(version).glob("*.yaml")))
    want = EXPECTED_FILES[version]
    assert n == want, f"expected {want} files in {conformance_dir(version)}"


@pytest.mark.parametrize(("version", "path"), CASES, ids=[f"{v}/{p.stem}" for v, p in CASES])
def test_upstream_allocator_case(version: str, path: Path) -> None:
    case = load_case(path)
    expect = case["expect"]
    if "error" in expect:
        with pytest.raises(AllocationError) as info:
            run_case(case, version)
        assert _either_order(str(info.value)) == _either_order(expect["error"])
        return
    outcome = run_case(case, version)
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
