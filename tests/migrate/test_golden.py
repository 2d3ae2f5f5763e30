"""The manifest corpus: golden outputs, idempotence, byte preservation, consistency of what is produced."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
import yaml

from kdra.migrate import Options, classes_text, join_outputs, migrate_text
from kdra.migrate.resources import LEGACY_PATTERN, classify
from kdra.migrate.workloads import pod_templates
from kdra.migrate.yamldoc import split_documents

from .conftest import MANIFESTS, case_args, cases, run_cli

CASES = cases()


def _options(case: str) -> Options:
    args = case_args(case)
    mode = "extended-resource" if "--mode" in " ".join(args) and "extended-resource" in args[-1] else "claims"
    memory = next((a.split("=", 1)[1] for a in args if a.startswith("--gpu-memory=")), None)
    return Options(mode=mode, gpu_memory=memory)


def _migrate(case: str, text: str) -> str:
    result = migrate_text(text, f"{case}.yaml", _options(case))
    assert not result.report.errors, result.report.errors
    return join_outputs([result.text, classes_text([result], _options(case).mode)])


def _objects(text: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for doc in yaml.safe_load_all(text):
        if isinstance(doc, dict) and str(doc.get("kind", "")).endswith("List") and "items" in doc:
            out.extend(doc["items"])
        elif isinstance(doc, dict):
            out.append(doc)
    return out


def test_corpus_is_a_dozen_realistic_cases() -> None:
    assert len(CASES) >= 12


@pytest.mark.parametrize("case", CASES)
def test_golden_output(case: str) -> None:
    source = (MANIFESTS / f"{case}.yaml").read_text()
    expected = (MANIFESTS / f"{case}.expected.yaml").read_text()
    assert _migrate(case, source) == expected


@pytest.mark.parametrize("case", CASES)
def test_cli_matches_golden(case: str) -> None:
    run = run_cli([*case_args(case), str(MANIFESTS / f"{case}.yaml")])
    assert run.code == 0, run.err
    assert run.out == (MANIFESTS / f"{case}.expected.yaml").read_text()


@pytest.mark.parametrize("case", CASES)
def test_second_run_changes_nothing(case: str) -> None:
    expected = (MANIFESTS / f"{case}.expected.yaml").read_text()
    result = migrate_text(expected, case, _options(case))
    assert result.text == expected
    assert not result.report.changes
    assert classes_text([result], _options(case).mode) == ""


@pytest.mark.parametrize("case", CASES)
def test_documents_without_device_requests_are_copied_byte_for_byte(case: str) -> None:
    source = (MANIFESTS / f"{case}.yaml").read_text()
    output = (MANIFESTS / f"{case}.expected.yaml").read_text()
    for chunk in split_documents(source):
        if _options(case).mode == "extended-resource" or not LEGACY_PATTERN.search(chunk.body):
            assert chunk.text in output


@pytest.mark.parametrize("case", CASES)
def test_full_line_comments_survive(case: str) -> None:
    source = (MANIFESTS / f"{case}.yaml").read_text()
    output_lines = set((MANIFESTS / f"{case}.expected.yaml").read_text().splitlines())
    for line in source.splitlines():
        if line.strip().startswith("#"):
            assert line in output_lines, line


@pytest.mark.parametrize("case", [c for c in CASES if _options(c).mode == "claims"])
def test_no_convertible_request_is_left(case: str) -> None:
    for obj in _objects((MANIFESTS / f"{case}.expected.yaml").read_text()):
        for tpl in pod_templates(obj):
            spec = tpl.template["spec"]
            for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
                resources = container.get("resources") or {}
                for section in ("limits", "requests"):
                    left = [k for k in resources.get(section) or {} if classify(k)]
                    assert not left, (obj["metadata"]["name"], container["name"], left)


@pytest.mark.parametrize("case", CASES)
def test_claims_templates_and_classes_are_consistent(case: str) -> None:
    objs = _objects((MANIFESTS / f"{case}.expected.yaml").read_text())
    templates = {o["metadata"]["name"]: o for o in objs if o.get("kind") == "ResourceClaimTemplate"}
    classes = {o["metadata"]["name"] for o in objs if o.get("kind") == "DeviceClass"}
    for obj in objs:
        for tpl in pod_templates(obj):
            spec = tpl.template["spec"]
            pod_claims = {
                c["name"]: c.get("resourceClaimTemplateName") for c in spec.get("resourceClaims") or []
            }
            for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
                for ref in (container.get("resources") or {}).get("claims") or []:
                    assert ref["name"] in pod_claims
                    template = templates[pod_claims[ref["name"]]]
                    assert template["metadata"].get("namespace") == obj["metadata"].get("namespace")
                    names = [r["name"] for r in template["spec"]["spec"]["devices"]["requests"]]
                    assert ref["request"] in names
    for template in templates.values():
        for request in template["spec"]["spec"]["devices"]["requests"]:
            assert request["exactly"]["deviceClassName"] in classes
            assert request["exactly"]["count"] >= 1


def _all_expressions(objs: list[dict[str, Any]]) -> list[str]:
    out = []
    for obj in objs:
        if obj.get("kind") == "DeviceClass":
            out += [s["cel"]["expression"] for s in obj["spec"]["selectors"]]
        if obj.get("kind") == "ResourceClaimTemplate":
            for request in obj["spec"]["spec"]["devices"]["requests"]:
                out += [s["cel"]["expression"] for s in request["exactly"].get("selectors") or []]
    return out


@pytest.mark.parametrize("case", CASES)
def test_selectors_compile_with_kdra_cel(case: str) -> None:
    cel = importlib.import_module("kdra.cel")
    compile_selector = cel.compile_selector
    for expression in _all_expressions(_objects((MANIFESTS / f"{case}.expected.yaml").read_text())):
        compile_selector(expression)


@pytest.mark.parametrize("case", CASES)
def test_output_passes_kdra_validation(case: str) -> None:
    validation = importlib.import_module("kdra.api.validation")
    objs = _objects((MANIFESTS / f"{case}.expected.yaml").read_text())
    # Pod templates inside workloads are validated as the Pods they become.
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{obj['metadata']['name']}-{tpl.role or 'pod'}"[:63],
                "namespace": "default",
            },
            "spec": tpl.template["spec"],
        }
        for obj in objs
        for tpl in pod_templates(obj)
        if obj.get("kind") != "Pod"
    ]
    validation.validate_objects(objs + pods)
