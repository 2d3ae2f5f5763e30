"""Scope 5, differential conformance: every case of the scenario corpus through the real kube-scheduler
(kdra.testing.upstream on the fixture), compared with the verdict the corpus recorded on upstream's
allocator and with `kdra allocate` on the same objects. Part of `make test` (240 cases, about 12 minutes);
KDRA_E2E_CORPUS=0 leaves it out of a quick local run.

Compared: invalid objects (the API server's 422 names the recorded field; kdra exits 2), fit or no fit
(kdra exits 0, or 1/3), and the devices wherever kube-scheduler's choice is deterministic: not with
upstream's "stable" allocator (which the case's gates select when binding conditions and consumable
capacity are off), and not when several nodes fit and kube-scheduler scored another node first."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from kdra.testing.controlplane import ControlPlane
from kdra.testing.corpus import case_expect, case_versions, effective_gates, gate_flag
from kdra.testing.upstream import run_upstream_case

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.environ.get("KDRA_E2E_CORPUS") == "0", reason="KDRA_E2E_CORPUS=0 leaves it out"),
]

CASES_DIR = Path(__file__).parent.parent / "scenarios" / "cases"
CASES = sorted(CASES_DIR.rglob("*.yaml"))


def devices(alloc: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    return [(r["request"], r["driver"], r["pool"], r["device"]) for r in alloc.get("results") or []]


def server_version(control_plane: ControlPlane) -> str:
    """The control plane's Kubernetes minor version ("1.36"), from the API server's /version."""
    info = control_plane.client().request("GET", "/version")
    return f"{info['major']}.{str(info['minor']).rstrip('+')}"


def run_kdra(
    case: dict[str, Any], version: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[int, Any]:
    """`kdra allocate -o json` on the case as that release, in process: (exit code, parsed stdout or None)."""
    from kdra.cli.main import main

    f = tmp_path / "objects.yaml"
    f.write_text(yaml.safe_dump_all(case["objects"], sort_keys=False))
    argv = ["allocate", "-f", str(f), "-o", "json", "--kubernetes-version", version]
    if case.get("node"):
        argv += ["--node", str(case["node"])]
    gates = effective_gates(case, version)  # locked gates left out, as the control plane does
    if gates:
        argv += ["--feature-gates", gate_flag(gates)]
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 2
    out, _ = capsys.readouterr()
    try:
        return code, json.loads(out)
    except ValueError:
        return code, None


def kdra_devices(listing: Any) -> dict[str, list[tuple[str, str, str, str]]]:
    """Allocated claims of kdra's output under the harness's keys (claim name, pod/<pod>/<podClaimName>)."""
    out: dict[str, list[tuple[str, str, str, str]]] = {}
    for claim in (listing or {}).get("items") or []:
        md = claim.get("metadata") or {}
        alloc = (claim.get("status") or {}).get("allocation") or {}
        got = devices(alloc.get("devices") or {})
        pod_claim = (md.get("annotations") or {}).get("resource.kubernetes.io/pod-claim-name")
        owners = [r for r in md.get("ownerReferences") or [] if r.get("kind") == "Pod"]
        if pod_claim and owners:
            out[f"pod/{owners[0].get('name')}/{pod_claim}"] = got
        else:
            out[str(md.get("name"))] = got
    return out


@pytest.mark.parametrize("path", CASES, ids=[str(p.relative_to(CASES_DIR).with_suffix("")) for p in CASES])
def test_corpus_case_on_kube_scheduler(
    control_plane: ControlPlane, path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    case = yaml.safe_load(path.read_text())
    version = server_version(control_plane)
    if version not in case_versions(case):
        pytest.skip(
            f"the case is pinned to Kubernetes {case_versions(case)}, the control plane runs {version}"
        )
    expect = case_expect(case, version)
    result = run_upstream_case(
        control_plane, case["objects"], node=case.get("node"), feature_gates=case.get("featureGates")
    )
    detail = f"{path.name}: {result}"
    code, listing = run_kdra(case, version, tmp_path, capsys)
    kdra_detail = (
        f"{path.name}: kdra allocate exit {code}: {json.dumps(listing)[:3000]}\nkube-scheduler: {result}"
    )

    # 1. kube-scheduler against the verdict the corpus recorded.
    if "invalid" in expect:
        assert result.invalid, detail
        assert any(str(x) in result.invalid for x in expect["invalid"]), detail
        assert code == 2, kdra_detail
        return
    if result.invalid:
        pytest.skip(f"not expressible: the fixture's API server rejects the case's objects: {result.invalid}")
    if result.ignored_gates:
        pytest.skip(f"not expressible: gates locked in 1.36 cannot be turned off: {result.ignored_gates}")
    compare_devices = False
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
        # Several nodes fit: kdra takes the first by name, kube-scheduler the best-scored (ties broken at
        # random); and upstream's "stable" allocator walks slices in informer order. Then only the fit is
        # comparable.
        same_node = bool(case.get("node")) or len(want_nodes) != 1 or result.node in want_nodes
        compare_devices = same_node and result.deterministic
        if compare_devices:
            got = result.devices()
            for claim, alloc in expect["allocation"].items():
                assert got.get(claim.removeprefix("default/")) == devices(alloc), detail
    else:
        assert not result.scheduled, detail

    # 2. The differential: kdra against kube-scheduler on the same objects.
    if result.scheduled:
        assert code == 0, kdra_detail
        if compare_devices:
            mine = kdra_devices(listing)
            for key, theirs in result.devices().items():
                assert mine.get(key) == theirs, (
                    f"claim {key}: kdra {mine.get(key)} != kube-scheduler {theirs}\n{kdra_detail}"
                )
    else:
        assert code in (1, 3), kdra_detail  # 1 unschedulable, 3 an allocation error
