"""Scope 5, differential conformance: every case of the scenario corpus through the real kube-scheduler
(support.upstream on the fixture), compared with the verdict the corpus recorded on upstream's
allocator and with `kdra allocate` on the same objects. Part of `make test` (240 cases, about 12 minutes);
KDRA_E2E_CORPUS=0 leaves it out of a quick local run.

Compared: invalid objects (the API server's 422 names the recorded field; kdra exits 2), fit or no fit
(kdra exits 0, or 1/3), and the devices wherever kube-scheduler's choice is deterministic: not with
upstream's "stable" allocator (which the case's gates select when binding conditions and consumable
capacity are off), and not when several nodes fit and kube-scheduler scored another node first."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.controlplane import ControlPlane
from support.corpus import case_expect, case_versions, effective_gates, gate_flag
from support.upstream import UpstreamResult, run_upstream_case

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.e2e_lane(name="kube-scheduler"),
    pytest.mark.skipif(os.environ.get("KDRA_E2E_CORPUS") == "0", reason="KDRA_E2E_CORPUS=0 leaves it out"),
]

CASES_DIR = Path(__file__).parent.parent / "scenarios" / "cases"


def _gates_then_name(path: Path) -> tuple[str, str]:
    # Cases with the same feature gates run one after another: kube-scheduler restarts only when the
    # gates change (10 times instead of 42 in name order).
    gates = (yaml.safe_load(path.read_text()) or {}).get("featureGates") or {}
    return (json.dumps(gates, sort_keys=True), str(path))


CASES = sorted(CASES_DIR.rglob("*.yaml"), key=_gates_then_name)


def devices(alloc: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    return [(r["request"], r["driver"], r["pool"], r["device"]) for r in alloc.get("results") or []]


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


def kube_scheduler_disagrees(case: dict[str, Any], expect: dict[str, Any], result: UpstreamResult) -> str:
    """Why kube-scheduler's verdict is not the expected one ('' when it is). Devices are compared only
    where kube-scheduler's choice is deterministic (see the module doc)."""
    if "invalid" in expect:
        if not result.invalid or not any(str(x) in result.invalid for x in expect["invalid"]):
            return "expected the API server to reject the case"
        return ""
    if result.invalid or result.ignored_gates:
        return ""  # not expressible: skipped by the caller
    if "allocation" not in expect:
        return "expected no fit" if result.scheduled else ""
    if not result.scheduled:
        return "expected a fit"
    if compare_devices(case, expect, result):
        got = result.devices()
        for claim, alloc in expect["allocation"].items():
            if got.get(claim.removeprefix("default/")) != devices(alloc):
                return f"claim {claim}: expected {devices(alloc)}"
    return ""


def compare_devices(case: dict[str, Any], expect: dict[str, Any], result: UpstreamResult) -> bool:
    want_nodes = {
        v
        for alloc in (expect.get("allocation") or {}).values()
        for t in (alloc.get("nodeSelector") or {}).get("nodeSelectorTerms") or []
        for f in t.get("matchFields") or []
        if f.get("key") == "metadata.name"
        for v in f.get("values") or []
    }
    # Several nodes fit: both take the best-scored, but kube-scheduler breaks ties at random (kdra by
    # name); and upstream's "stable" allocator walks slices in informer order. Then only the fit is
    # comparable.
    same_node = bool(case.get("node")) or len(want_nodes) != 1 or result.node in want_nodes
    return same_node and result.deterministic


@pytest.mark.parametrize("path", CASES, ids=[str(p.relative_to(CASES_DIR).with_suffix("")) for p in CASES])
def test_corpus_case_on_kube_scheduler(
    control_plane: ControlPlane, path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    case = yaml.safe_load(path.read_text())
    case_id = str(path.relative_to(CASES_DIR).with_suffix(""))
    minor = control_plane.release.minor
    if minor not in case_versions(case):
        pytest.skip(f"the case is pinned to Kubernetes {case_versions(case)}, the control plane runs {minor}")
    expect = case_expect(case, minor)  # the release's own verdict where it changed (expectByVersion)

    def run(**timing: float) -> UpstreamResult:
        return run_upstream_case(
            control_plane,
            case["objects"],
            node=case.get("node"),
            feature_gates=case.get("featureGates"),
            **timing,
        )

    # A quick run first (informer lag on a quiet machine is milliseconds); only a verdict that disagrees
    # is taken again with the harness's full waits, so a slow informer cannot fail a case.
    t0 = time.monotonic()
    result = run(sync_delay=0.25, settle=1.0)
    problem = kube_scheduler_disagrees(case, expect, result)
    retried = bool(problem)
    if problem:
        result = run()
        problem = kube_scheduler_disagrees(case, expect, result)
    stats = os.environ.get("KDRA_E2E_CORPUS_STATS")  # a file to append per-case timings to
    if stats:
        with open(stats, "a") as f:
            f.write(
                json.dumps({"case": case_id, "retried": retried, "seconds": time.monotonic() - t0}) + "\n"
            )
    detail = f"{path.name} on {control_plane.version}: {result}"
    assert not problem, f"{problem}\n{detail}"

    # 1. kube-scheduler against the verdict (recorded, or the release's own where it changed).
    if result.invalid and "invalid" not in expect:
        pytest.skip(f"not expressible: the fixture's API server rejects the case's objects: {result.invalid}")
    if result.ignored_gates and "invalid" not in expect:
        pytest.skip(f"not expressible: gates locked in {minor} cannot be turned off: {result.ignored_gates}")

    # 2. The differential: kdra, told the release, against kube-scheduler on the same objects.
    code, listing = run_kdra(case, minor, tmp_path, capsys)
    kdra_detail = (
        f"{path.name}: kdra allocate exit {code}: {json.dumps(listing)[:3000]}\nkube-scheduler: {result}"
    )
    if "invalid" in expect:
        assert code == 2, kdra_detail
    elif result.scheduled:
        assert code == 0, kdra_detail
        if compare_devices(case, expect, result):
            mine = kdra_devices(listing)
            for key, theirs in result.devices().items():
                assert mine.get(key) == theirs, (
                    f"claim {key}: kdra {mine.get(key)} != kube-scheduler {theirs}\n{kdra_detail}"
                )
    else:
        assert code in (1, 3), kdra_detail  # 1 unschedulable, 3 an allocation error
