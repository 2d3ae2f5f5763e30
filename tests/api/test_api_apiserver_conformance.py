"""kdra's validation against what a real kube-apiserver 1.36.2 said about the objects of upstream's
allocator test table (tests/allocator/conformance/v1.36/*.yaml, `apiServerValidation`).

kdra must accept exactly the files kube-apiserver accepted and, for rejected ones, report the same
error lines in the same order. The recording joined multi-line messages with " | " and collapsed
runs of spaces, so both sides are compared with whitespace normalised. Duplicate object names are a
property of the table (names are reused), not of an object, and are ignored.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from kdra.api.features import FeatureGates
from kdra.api.load import _Loader
from kdra.api.types import name_of
from kdra.validation.rules import validate

_REPO = Path(__file__).resolve().parents[2]
# The 1.36 table with its kube-apiserver v1.36.2 verdicts, kept in the repository.
CONFORMANCE = _REPO / "tests" / "allocator" / "conformance" / "v1.36"
V1_36 = FeatureGates.for_version("1.36")
FILES = sorted(CONFORMANCE.glob("*.yaml"))


def _norm(s: str) -> str:
    return " ".join(s.replace(" | ", " ").split())


def _expected_lines(errors: list[str]) -> list[str]:
    """Split the recorded `Kind name: err; err` lines into one `Kind name: err` per error."""
    out: list[str] = []
    for e in errors:
        if e.startswith("duplicate object name"):
            continue
        m = re.match(r"(\w+) ([^:]+): (.*)", e, re.S)
        assert m, e
        for part in re.split(r"; (?=spec|metadata|status)", m.group(3)):
            out.append(f"{m.group(1)} {m.group(2)}: {part}")
    return out


def _kdra_lines(doc: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    for obj in doc.get("deviceClasses", []) + doc.get("resourceSlices", []) + doc.get("claims", []):
        # The recording ran with every DRA gate on, DRAListTypeAttributes included.
        for err in validate(obj, list_type_attributes=True, features=V1_36):
            lines.append(f"{obj['kind']} {name_of(obj)}: {err}")
    return lines


def test_corpus_present() -> None:
    # Fails rather than skips: without the files every verdict test below would silently vanish.
    assert len(FILES) == 218, f"expected the 218 conformance files in {CONFORMANCE}"


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_apiserver_verdict(path: Path) -> None:
    doc = yaml.load(path.read_text(), Loader=_Loader)
    recorded = doc["apiServerValidation"]
    expected = _expected_lines(recorded.get("errors", []))
    got = _kdra_lines(doc)
    if recorded["accepted"] or not expected:
        assert got == [], f"kube-apiserver accepted {path.name}, kdra said:\n" + "\n".join(got)
        return
    assert got, f"kube-apiserver rejected {path.name}, kdra accepted it"
    got_text = "\n".join(got)
    for line in expected:  # every apiserver field path appears in kdra's messages ...
        field_path = line.split(": ", 2)[1]
        assert field_path in got_text, f"{field_path} missing from:\n{got_text}"
    assert [_norm(x) for x in got] == [_norm(x) for x in expected]  # ... with the exact text, in order
