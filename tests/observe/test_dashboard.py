"""dashboards/kdra-grafana.json is built on metrics the exporter serves, in valid PromQL."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kdra.observe.families import metric_families

DASHBOARD = Path(__file__).resolve().parents[2] / "dashboards" / "kdra-grafana.json"
VARIABLES = {"$__rate_interval": "5m", "$product": ".*", "$node": ".*"}


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL with Grafana variables substituted) of every panel target."""
    dash = json.loads(DASHBOARD.read_text())
    out = []
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for var, value in VARIABLES.items():
                expr = expr.replace(var, value)
            out.append((panel["title"], expr))
    return out


def _series_names(expr: str) -> set[str]:
    names = set(re.findall(r"\b((?:kdra|DCGM)_[A-Za-z0-9_]+)", expr))
    return {re.sub(r"_(bucket|sum|count)$", "", n) if n.startswith("kdra_") else n for n in names}


def test_dashboard_uses_only_served_metrics() -> None:
    served = metric_families()
    queries = dashboard_queries()
    assert len(queries) >= 20
    used = set()
    for title, expr in queries:
        for name in _series_names(expr):
            if name.startswith("DCGM_"):
                continue
            assert name in served, (title, name)
            used.add(name)
    # the views: allocation over time, stranded memory, queue shares, pending reasons, node map
    for must in (
        "kdra_fleet_gpu_equivalents_allocated",
        "kdra_fleet_stranded_memory_bytes",
        "kdra_queue_fair_share",
        "kdra_pending_pod_node_reasons",
        "kdra_device_allocated_ratio",
        "kdra_claim_device_info",
    ):
        assert must in used


def test_panels_have_unique_ids_and_datasource_variable() -> None:
    dash: dict[str, Any] = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    assert dash["templating"]["list"][0]["type"] == "datasource"
    for p in dash["panels"]:
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${datasource}"


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian's prometheus package) missing")
def test_dashboard_queries_are_valid_promql(tmp_path: Path) -> None:
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"kdra:dashboard_{i}", "expr": q}
                    for i, (_t, q) in enumerate(dashboard_queries())
                ],
            }
        ]
    }
    path = tmp_path / "rules.json"  # JSON is YAML
    path.write_text(json.dumps(rules))
    out = subprocess.run(
        ["promtool", "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr
