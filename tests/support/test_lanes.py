"""support.lanes: a test that needs kube-scheduler with the plane's own feature gates runs where the
differential corpus cannot change them under it (checked when tests/e2e is collected)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.lanes import GATES_FIXTURE, Placement, misplaced

TESTS = Path(__file__).parents[1]


def test_the_plane_gates_are_used_only_in_the_corpus_lane_or_on_a_plane_of_ones_own() -> None:
    uses = ("control_plane", GATES_FIXTURE)
    ok = [
        Placement("a.py::beside_the_corpus", uses, "kube-scheduler", False),
        Placement("b.py::own_plane", uses, None, True),
        Placement("c.py::own_plane_in_a_lane", uses, "kdra-scheduler", True),
        Placement("d.py::no_gates_needed", ("control_plane",), "kdra-scheduler", False),
    ]
    assert misplaced(ok) == []
    # The DeviceTaintRule test's old place: kdra-scheduler lane, while the corpus turned DRADeviceTaints off.
    wrong = [
        Placement("e.py::kdra_lane", uses, "kdra-scheduler", False),
        Placement("f.py::free", uses, None, False),
    ]
    problems = misplaced(ok + wrong)
    assert [p.split(":")[0] for p in problems] == ["e.py", "f.py"]
    assert "lane kdra-scheduler" in problems[0] and 'e2e_lane(name="kube-scheduler")' in problems[0]
    assert "lane free" in problems[1]


def test_collecting_a_misplaced_e2e_test_is_a_usage_error(tmp_path: Path) -> None:
    """The e2e conftest applies the rule: a plane_gates test in another lane stops the run at collection,
    before any control plane starts."""
    e2e = tmp_path / "e2e"
    e2e.mkdir()
    (e2e / "__init__.py").write_text("")
    (e2e / "conftest.py").write_text((TESTS / "e2e" / "conftest.py").read_text())
    (e2e / "test_misplaced.py").write_text(
        "import pytest\n"
        'pytestmark = [pytest.mark.e2e, pytest.mark.e2e_lane(name="kdra-scheduler")]\n'
        '@pytest.mark.usefixtures("plane_gates")\n'
        "def test_needs_kube_schedulers_gates() -> None:\n"
        "    pass\n"
    )
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", str(e2e)],
        cwd=TESTS.parent,
        env={**os.environ, "PYTHONPATH": str(TESTS)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 4, out  # pytest's usage error
    assert "test_misplaced.py::test_needs_kube_schedulers_gates: uses plane_gates" in out, out
