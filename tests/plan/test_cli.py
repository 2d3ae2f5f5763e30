"""`kdra plan` on the command line: kubectl-style outputs, exit codes, one-line errors."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
import yaml

from kdra.cli.main import main
from kdra.fleets.spec import parse_fleet

from .helpers import gpus, mig, pod, pod_group, template


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture
def workload(tmp_path: Path) -> Path:
    objs = [template("one", gpus(1)), template("small", mig("10Gi")), pod_group("g", 2)]
    objs += [pod(f"g-{i}", templates=("one",), group="g") for i in range(2)]
    objs += [pod("s", templates=("small",))]
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump_all(objs))
    return path


def test_table_yaml_json_and_fleet_outputs(workload: Path, tmp_path: Path) -> None:
    args = ["plan", "scale-up", "-f", str(workload), "--node-type", "h100-8", "--node-type", "l40s-4"]
    rc, out, err = _run(args)
    assert rc == 0
    assert out.splitlines()[0].split() == ["NODE", "TYPE", "ZONE", "PRICE/H", "PODS"]
    assert "nodes to add" in err and "3 on added nodes" in err
    rc, out, _ = _run([*args, "-o", "json"])
    doc = json.loads(out)
    assert rc == 0 and doc["kind"] == "ScaleUpPlan" and doc["status"]["verifiedByScheduler"]
    assert sum(len(a["pods"]) for a in doc["status"]["add"]) == 3
    rc, out, _ = _run([*args, "-o", "yaml"])
    assert yaml.safe_load(out)["status"]["add"] == doc["status"]["add"]
    rc, out, _ = _run([*args, "-o", "fleet", "--report", str(tmp_path / "r.html")])
    fleet = parse_fleet(yaml.safe_load(out))
    assert sum(p.count for p in fleet.pools) == len(doc["status"]["add"])
    html = (tmp_path / "r.html").read_text()
    assert "<svg" in html and "Nodes to add" in html


def test_unschedulable_pods_exit_1_and_say_why(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump_all([template("many", gpus(64)), pod("huge", templates=("many",))]))
    rc, _, err = _run(["plan", "scale-up", "-f", str(path)])
    assert rc == 1
    assert "unschedulable: pod ml/huge: no node type can run it" in err


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        (["--price", "h100-8"], "--price h100-8: Invalid value: must be POOL=VALUE"),
        (["--price", "h100-8=cheap"], "is not a valid float"),
        (["--max", "nope=3"], "--max nope: Not found: fleet node-types has no pool 'nope'"),
        (["--node-types", "no-such-fleet"], "no such file, and not a bundled fleet"),
        (["typo"], "POD typo: Not found: no pending pod 'typo' in the input"),
        (["s", "other/s"], "POD other/s: Not found"),
    ],
)
def test_bad_flags_are_one_line_errors_exit_2(workload: Path, flag: list[str], message: str) -> None:
    rc, _, err = _run(["plan", "scale-up", "-f", str(workload), *flag])
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_scale_down_table_and_json() -> None:
    rc, out, err = _run(["plan", "scale-down", "-c", "mixed", "-o", "json"])
    doc = json.loads(out)
    assert rc == 0 and doc["kind"] == "ScaleDownPlan"
    assert len(doc["status"]["drain"]) == 36  # nothing runs: every node can go
    rc, out, err = _run(["plan", "scale-down", "-c", "mixed"])
    assert "nodes to drain" in err and out.splitlines()[0].split()[0] == "NODE"
