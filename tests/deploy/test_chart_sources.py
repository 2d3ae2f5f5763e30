"""The Helm chart's generated parts agree with their sources (deploy/rbac, deploy/crds), and the
kubelet-like $(VAR) expansion the chart's host-process test relies on. No helm needed (the chart itself is
rendered in tests/e2e/test_helm_chart.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from support.hostpod import container_env, expand

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "kdra"


def test_generated_chart_files_are_current() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "hack" / "helm" / "sync_chart.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr


def test_every_value_is_typed_in_the_schema() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())

    def walk(v: object, s: dict, path: str) -> None:
        if isinstance(v, dict) and s.get("properties") is not None:
            for k, sub in v.items():
                assert k in s["properties"], f"{path}.{k} is not in values.schema.json"
                walk(sub, s["properties"][k], f"{path}.{k}")

    walk(values, schema, "values")


def test_the_chart_offers_every_supported_kubernetes_version() -> None:
    """`scheduler.kubernetesVersion` accepts exactly what `--kubernetes-version` does (a release added to
    kdra.api.versions is selectable in the chart too)."""
    from kdra.api.versions import SUPPORTED_VERSIONS

    schema = json.loads((CHART / "values.schema.json").read_text())
    found = []

    def walk(s: object) -> None:
        if isinstance(s, dict):
            for k, sub in s.items():
                if k == "kubernetesVersion" and isinstance(sub, dict) and "enum" in sub:
                    found.append(sub["enum"])
                walk(sub)

    walk(schema)
    assert found == [["", *SUPPORTED_VERSIONS]]


def test_kubelet_expansion_of_args() -> None:
    env = {"POD_IP": "10.1.2.3", "A": "x"}
    assert expand("--metrics-listen=$(POD_IP):9406", env) == "--metrics-listen=10.1.2.3:9406"
    assert expand("$(MISSING) $$(A) $(A)", env) == "$(MISSING) $(A) x"
    pod = {"spec": {"serviceAccountName": "sa"}}
    c = {
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "GREETING", "value": "hi $(POD_NAME)"},
        ]
    }
    assert container_env(pod, c, pod_name="p-1", namespace="ns") == {"POD_NAME": "p-1", "GREETING": "hi p-1"}


def test_the_charts_scheduler_defaults_are_the_commands() -> None:
    """Installed with Helm's defaults, `kdra scheduler` behaves as when run by hand with its own: the same
    binding workers, resync (none: kube-scheduler's informers never relist on a timer), client rate, scoring
    and placement."""
    from kdra.cli.main import build_parser

    args = build_parser("kube").parse_args(["scheduler"])
    s = yaml.safe_load((CHART / "values.yaml").read_text())["scheduler"]
    chart = {
        "bind_workers": s["bindWorkers"],
        "resync": s["resync"],
        "kube_api_qps": s["kubeAPI"]["qps"],
        "kube_api_burst": s["kubeAPI"]["burst"],
        "scoring": s["scoring"],
        "placement": s["placement"],
    }
    assert chart == {k: getattr(args, k) for k in chart}
    assert args.resync == 0
