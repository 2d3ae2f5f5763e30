"""The manifest corpus: golden output and messages, idempotence, byte preservation, consistency."""

from __future__ import annotations

import difflib
import importlib
import re
from typing import Any

import pytest
import yaml

from kdra.migrate.documents import split_documents
from kdra.migrate.kinds import CAPACITY, matches_prefix, places_for
from kdra.migrate.nodes import compose
from kdra.migrate.resources import LEGACY_PATTERN, may_escape
from kdra.migrate.scan import requests

from .conftest import (
    MANIFESTS,
    REGEN,
    case_args,
    case_exit,
    cases,
    containers,
    expected,
    objects,
    ok_cases,
    pod_specs,
    run_case,
    run_cli,
)

CASES = cases()
OK = ok_cases()


def test_corpus_covers_the_kinds_people_use() -> None:
    assert len(CASES) >= 30
    kinds = {o.get("kind") for c in CASES for o in _safe_objects(c)}
    for kind in (
        "RayService",
        "RayJob",
        "RayCluster",
        "PyTorchJob",
        "TFJob",
        "MPIJob",
        "ClusterTrainingRuntime",
        "JobSet",
        "LeaderWorkerSet",
        "InferenceService",
        "ServingRuntime",
        "Workflow",
        "Job",
        "Service",
        "TrainJob",
        "AppWrapper",
        "ResourceQuota",
        "Deployment",
        "StatefulSet",
        "CronJob",
        "DaemonSet",
    ):
        assert kind in kinds, kind


def _safe_objects(case: str) -> list[dict[str, Any]]:
    try:
        return objects((MANIFESTS / f"{case}.yaml").read_text())
    except Exception:
        return []


@pytest.mark.parametrize("case", CASES)
def test_golden_output_messages_and_exit_code(case: str) -> None:
    run = run_case(case)
    if REGEN:
        (MANIFESTS / f"{case}.expected.yaml").write_text(run.out)
        (MANIFESTS / f"{case}.stderr").write_text(run.err)
        return
    assert run.code == case_exit(case), run.err
    assert "Traceback" not in run.err
    assert run.out == expected(case)
    assert run.err == (MANIFESTS / f"{case}.stderr").read_text()


@pytest.mark.parametrize("case", [c for c in CASES if case_exit(c) != 0])
def test_a_refused_input_prints_nothing_and_says_where(case: str) -> None:
    run = run_case(case)
    assert run.out == ""
    assert run.err.startswith("error: ")
    assert re.search(rf"{re.escape(case)}\.yaml(:\d+)?: document \d+", run.err)
    assert "hint:" in run.err or "line" in run.err or re.search(r"\.yaml:\d+", run.err)


@pytest.mark.parametrize("case", [c for c in CASES if case_exit(c) != 0 and not c.startswith("bad-")])
def test_check_fails_while_a_request_remains(case: str) -> None:
    run = run_cli([*case_args(case), "--check", str(MANIFESTS / f"{case}.yaml")])
    assert run.code == 1
    assert "cannot convert: " in run.out


@pytest.mark.parametrize("case", [c for c in CASES if c.startswith("bad-")])
def test_bad_input_is_exit_2_with_file_and_line_in_check_too(case: str) -> None:
    run = run_cli(["--check", str(MANIFESTS / f"{case}.yaml")])
    assert run.code == 2
    assert re.search(rf"{case}\.yaml(:\d+|: document \d+ .*\(line \d+\))", run.err), run.err


@pytest.mark.parametrize("case", OK)
def test_second_run_changes_nothing_and_check_passes(case: str) -> None:
    args = [a for a in case_args(case)]
    again = run_cli([*args, "-"], stdin=expected(case))
    assert again.code == 0, again.err
    if "extended-resource" not in args:
        assert again.out == expected(case)
    check = run_cli([*args, "--check", "-"], stdin=expected(case))
    if "extended-resource" not in args:
        assert (check.code, check.out) == (0, "")


@pytest.mark.parametrize("case", OK)
def test_documents_without_accelerator_requests_are_copied_byte_for_byte(case: str) -> None:
    source = (MANIFESTS / f"{case}.yaml").read_text()
    output = expected(case)
    for chunk in split_documents(source):
        if "extended-resource" in case_args(case) or not (
            LEGACY_PATTERN.search(chunk.body) or may_escape(chunk.body)
        ):
            assert chunk.text in output


@pytest.mark.parametrize("case", OK)
def test_every_untouched_line_survives_in_order(case: str) -> None:
    """Lines are only removed where a request, an emptied mapping or a moved selector was; every other input
    line is in the output, byte for byte and in the same order (indentation styles, comments, quoting)."""
    source = (MANIFESTS / f"{case}.yaml").read_text().splitlines(keepends=True)
    output = expected(case).splitlines(keepends=True)
    removable = re.compile(
        r"(nvidia\.com/|amd\.com/|google\.com/tpu|gpu\.intel\.com/|"
        r"^\s*(- )?\"?(limits|requests|resources|nodeSelector|"
        r"affinity|nodeAffinity|requiredDuringSchedulingIgnoredDuringExecution|nodeSelectorTerms|matchExpressions|"
        r"operator|values|key)\"?:|^\s*- (NVIDIA|Tesla)|rayStartParams: \{\}|numProcPerNode|limits: \{|"
        r"gke-accelerator|^\s*[}\]],?\s*$)"
    )
    matcher = difflib.SequenceMatcher(None, source, output, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag in ("delete", "replace"):
            for line in source[i1:i2]:
                extended = any(
                    new.startswith(line.rstrip("\r\n")) for new in output[j1:j2]
                )  # `,` added (JSON)
                assert removable.search(line) or may_escape(line) or extended, f"line lost: {line!r}"


@pytest.mark.parametrize("case", OK)
def test_full_line_comments_survive(case: str) -> None:
    source = (MANIFESTS / f"{case}.yaml").read_text()
    output_lines = set(expected(case).splitlines())
    for line in source.splitlines():
        if line.strip().startswith("#"):
            assert line in output_lines, line


@pytest.mark.parametrize("case", [c for c in OK if "extended-resource" not in case_args(c)])
def test_no_accelerator_request_is_left(case: str) -> None:
    for chunk in split_documents(expected(case)):
        if chunk.body.strip():
            root = compose(chunk.body)
            obj = yaml.safe_load(chunk.body) or {}
            caps = places_for(obj.get("kind") or "", obj.get("apiVersion"), CAPACITY)  # no requests there
            left = [
                r
                for r in requests(root)
                if not any(matches_prefix(c, r.path) for c in caps)
                and "status" not in (r.path[:1] if r.path[:1] != ("items",) else r.path[2:3])  # observed
            ]
            assert left == [], case


@pytest.mark.parametrize("case", OK)
def test_claims_templates_and_classes_are_consistent(case: str) -> None:
    objs = objects(expected(case))
    templates = {o["metadata"]["name"]: o for o in objs if o.get("kind") == "ResourceClaimTemplate"}
    classes = {o["metadata"]["name"] for o in objs if o.get("kind") == "DeviceClass"}
    used: set[str] = set()
    for obj in objs:
        for _, _, spec in pod_specs(obj):
            pod_claims = {c["name"]: c.get("resourceClaimTemplateName") for c in _pod_claims(spec)}
            for container in containers(spec):
                for ref in (container.get("resources") or {}).get("claims") or []:
                    assert ref["name"] in pod_claims
                    template = templates[pod_claims[ref["name"]]]
                    assert template["metadata"].get("namespace") == obj["metadata"].get("namespace")
                    names = [r["name"] for r in template["spec"]["spec"]["devices"]["requests"]]
                    assert ref["request"] in names
                    used.add(ref["request"])
    for template in templates.values():
        for request in template["spec"]["spec"]["devices"]["requests"]:
            for sub in _subrequests(request):
                assert sub["deviceClassName"] in classes
                assert sub["count"] >= 1


def _subrequests(request: dict[str, Any]) -> list[dict[str, Any]]:
    """`exactly`, or every alternative of a firstAvailable request (a whole GPU that may be all of a
    shareable GPU's capacity)."""
    return [request["exactly"]] if "exactly" in request else list(request["firstAvailable"])


def _pod_claims(spec: dict[str, Any]) -> list[dict[str, Any]]:
    import yaml

    if "podSpecPatch" in spec:  # Argo
        return (yaml.safe_load(spec["podSpecPatch"]) or {}).get("resourceClaims") or []
    return spec.get("resourceClaims") or []


def _all_expressions(objs: list[dict[str, Any]]) -> list[str]:
    out = []
    for obj in objs:
        if obj.get("kind") == "DeviceClass":
            out += [s["cel"]["expression"] for s in obj["spec"]["selectors"]]
        if obj.get("kind") == "ResourceClaimTemplate":
            for request in obj["spec"]["spec"]["devices"]["requests"]:
                for sub in _subrequests(request):
                    out += [s["cel"]["expression"] for s in sub.get("selectors") or []]
    return out


@pytest.mark.parametrize("case", OK)
def test_selectors_compile_with_kdra_cel(case: str) -> None:
    cel = importlib.import_module("kdra.cel")
    for expression in _all_expressions(objects(expected(case))):
        cel.compile_selector(expression)


@pytest.mark.parametrize("case", OK)
def test_output_passes_kdra_validation(case: str) -> None:
    validation = importlib.import_module("kdra.validation.rules")
    objs = objects(expected(case))
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{obj['metadata'].get('name', 'w')}-{role or 'pod'}"[:63].strip("-"),
                "namespace": "default",
            },
            "spec": pod_spec,
        }
        for obj in objs
        for _, role, spec in pod_specs(obj)
        if obj.get("kind") != "Pod"
        for pod_spec in [_as_pod_spec(spec)]
        if pod_spec["containers"]  # an Argo steps or dag template runs no pod of its own
    ]
    native = [o for o in objs if o.get("kind") in ("Pod", "ResourceClaimTemplate", "DeviceClass")]
    validation.validate_objects(native + pods)


def _as_pod_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """A workload's pod spec as the Pod its controller creates (Argo and KServe name containers their way)."""
    import yaml

    out = {
        k: v
        for k, v in spec.items()
        if k
        in (
            "initContainers",
            "containers",
            "resourceClaims",
            "nodeSelector",
            "affinity",
            "tolerations",
            "restartPolicy",
            "volumes",
        )
    }
    singles = [
        dict(spec[k], name=spec[k].get("name", "main"))
        for k in ("container", "script", "model")
        if isinstance(spec.get(k), dict)
    ]
    for single in singles:
        single.setdefault("image", "x")
        single.pop("modelFormat", None)
        single.pop("source", None)
    out["containers"] = [*(out.get("containers") or []), *singles, *(spec.get("sidecars") or [])]
    for container in out["containers"]:
        container.setdefault("image", "x")
    if "podSpecPatch" in spec:
        out.update(yaml.safe_load(spec["podSpecPatch"]))
    return out
