"""The performance gate (benchmarks/compare.py): both sides measured, ratios printed, the worktree gone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMPARE = ROOT / "benchmarks" / "compare.py"


def _compare_worktrees() -> list[str]:
    """The worktrees compare.py makes (kdra-compare-*): others on the machine come and go meanwhile."""
    git = ["git", "-C", str(ROOT), "worktree", "list", "--porcelain"]
    out = subprocess.run(git, capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if line.startswith("worktree ") and "kdra-compare-" in line]


def test_compare_measures_both_sides_and_removes_its_worktree() -> None:
    before = _compare_worktrees()
    proc = subprocess.run(
        [sys.executable, str(COMPARE), "HEAD", "--rounds", "1", "--only", "allocator"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode in (0, 1), proc.stderr  # 1: a drop over 10% (a busy machine can make one)
    rows = [line.split() for line in proc.stdout.splitlines() if line.startswith("allocator")]
    assert [r[1:3] for r in rows] == [["mean", "µs"], ["p99", "µs"]]
    for r in rows:
        base, head, ratio = float(r[3]), float(r[4]), float(r[5])
        assert base > 0 and head > 0 and abs(ratio - base / head) < 0.01
    assert _compare_worktrees() == before


def test_compare_names_a_base_that_is_not_a_commit() -> None:
    proc = subprocess.run(
        [sys.executable, str(COMPARE), "no-such-ref"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert "BASE: 'no-such-ref' is not a commit of this repository" in proc.stderr
    assert "Traceback" not in proc.stderr
