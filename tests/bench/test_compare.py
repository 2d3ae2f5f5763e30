"""The performance gate (benchmarks/compare.py): both sides measured, ratios printed, the worktree gone."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMPARE = ROOT / "benchmarks" / "compare.py"


def _worktrees() -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "list"], capture_output=True, text=True, check=True
    ).stdout


def test_compare_measures_both_sides_and_removes_its_worktree() -> None:
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
    tree = re.search(r"\(\w+, in (\S+)\)", proc.stdout)
    assert tree is not None, proc.stdout
    assert tree.group(1) not in _worktrees() and not Path(tree.group(1)).exists()


def test_compare_names_a_base_that_is_not_a_commit() -> None:
    proc = subprocess.run(
        [sys.executable, str(COMPARE), "no-such-ref"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert "BASE: 'no-such-ref' is not a commit of this repository" in proc.stderr
    assert "Traceback" not in proc.stderr
