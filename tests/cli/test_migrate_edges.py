"""kdra migrate at its edges: Argo's own template tags, kustomize overlays, JSON files, CRLF line ends and a
terminal with nothing piped in."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml

from kdra.cli.main import main

ARGO = """\
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata: {generateName: train-}
spec:
  entrypoint: main
  arguments:
    parameters: [{name: epochs, value: "3"}]
  templates:
  - name: main
    inputs:
      parameters: [{name: epochs}]
    container:
      image: trainer:1
      args: ["--epochs", "{{inputs.parameters.epochs}}", "--run", "{{workflow.parameters.epochs}}",
             "{{=asInt(inputs.parameters.epochs) * 2}}"]
      resources:
        limits: {nvidia.com/gpu: 1}
"""

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: train}
spec:
  selector: {matchLabels: {app: train}}
  template:
    metadata: {labels: {app: train}}
    spec:
      containers:
      - name: main
        image: trainer:1
        resources:
          limits: {nvidia.com/gpu: 1}
"""


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["migrate", *argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def test_argo_template_tags_are_not_helm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "wf.yaml"
    path.write_text(ARGO)
    code, out, err = _run([str(path), "--no-device-classes"], capsys)
    assert code == 0, err
    docs = list(yaml.safe_load_all(out))
    container = docs[0]["spec"]["templates"][0]["container"]
    assert container["args"][1] == "{{inputs.parameters.epochs}}"  # kept as Argo reads it
    assert container["resources"] == {"claims": [{"name": "gpu", "request": "main"}]}
    assert docs[1]["kind"] == "ResourceClaimTemplate"


def test_a_helm_template_is_still_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "deploy.yaml"
    path.write_text(DEPLOYMENT.replace("nvidia.com/gpu: 1", "nvidia.com/gpu: {{ .Values.gpus }}"))
    code, _, err = _run([str(path)], capsys)
    assert code == 2 and "a Helm chart template" in err


@pytest.fixture
def overlay(tmp_path: Path) -> Path:
    base = tmp_path / "base"
    base.mkdir()
    (base / "deploy.yaml").write_text(
        DEPLOYMENT.replace("        resources:\n          limits: {nvidia.com/gpu: 1}\n", "")
    )
    (base / "kustomization.yaml").write_text("resources: [deploy.yaml]\n")
    over = tmp_path / "overlay"
    over.mkdir()
    (over / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\n"
        "kind: Kustomization\n"
        "resources: [../base]\n"
        "patches:\n"
        "- path: gpu-patch.yaml\n"
        "- path: json-patch.yaml\n"
        "  target: {kind: Deployment, name: train}\n"
        "- target: {kind: Deployment, name: train}\n"
        "  patch: |-\n"
        "    - op: add\n"
        "      path: /spec/template/spec/containers/0/resources/limits/nvidia.com~1gpu\n"
        "      value: 2\n"
    )
    (over / "gpu-patch.yaml").write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: train}\nspec:\n  template:\n    spec:\n"
        "      containers:\n      - name: main\n        resources:\n          limits: {nvidia.com/gpu: 2}\n"
    )
    (over / "json-patch.yaml").write_text(
        "- op: replace\n"
        "  path: /spec/template/spec/containers/0/resources/limits/nvidia.com~1gpu\n"
        "  value: 4\n"
    )
    return over


def test_kustomize_patches_do_not_pass_check(overlay: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A JSON 6902 patch names the resource as nvidia.com~1gpu: nothing looked like a request, and --check
    passed."""
    code, out, _ = _run(["--check", str(overlay)], capsys)
    assert code == 1
    lines = [line for line in out.splitlines() if line.startswith("cannot convert: ")]
    assert sorted(line.split(":")[1].rsplit("/", 1)[-1] for line in lines) == [
        "gpu-patch.yaml",
        "json-patch.yaml",
        "kustomization.yaml",
    ]
    assert f"kustomize build {overlay} | kdra migrate -" in out


def test_a_strategic_merge_patch_gets_no_claim_template(
    overlay: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = (overlay / "gpu-patch.yaml").read_text()
    code, _, err = _run(["-i", str(overlay)], capsys)
    assert code == 2 and "a kustomize patch" in err
    assert (overlay / "gpu-patch.yaml").read_text() == before  # no ResourceClaimTemplate appended


def test_in_place_on_json_leaves_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "deploy.json"
    path.write_text(json.dumps(yaml.safe_load(DEPLOYMENT), indent=2) + "\n")
    code, _, err = _run(["-i", "--no-device-classes", str(path)], capsys)
    assert code == 0, err
    doc = json.loads(path.read_text())
    assert doc["kind"] == "List" and [i["kind"] for i in doc["items"]] == [
        "Deployment",
        "ResourceClaimTemplate",
    ]
    claims = doc["items"][0]["spec"]["template"]["spec"]["containers"][0]["resources"]["claims"]
    assert claims == [{"name": "gpu", "request": "main"}]


def test_crlf_in_crlf_out(tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    path = tmp_path / "deploy.yaml"
    path.write_bytes(DEPLOYMENT.replace("\n", "\r\n").encode())
    assert main(["migrate", str(path)]) == 0  # with the DeviceClasses the workload needs
    out = capsysbinary.readouterr().out
    assert out.count(b"\n") == out.count(b"\r\n") > 20
    assert b"kind: DeviceClass\r\n" in out


@pytest.mark.parametrize("flow", [False, True])
def test_byte_order_mark_is_kept_and_edits_land_in_place(
    flow: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A BOM (Windows editors) was parsed as a column of the first line: edits landed one column off and the
    result did not parse ("internal error"). It is kept, and the rest migrates as without it."""
    text = (
        DEPLOYMENT
        if not flow
        else "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n"
        "  - {name: c, image: x, resources: {limits: {nvidia.com/gpu: 1}}}\n"
    )
    plain, marked = tmp_path / "plain.yaml", tmp_path / "marked.yaml"
    plain.write_text(text, encoding="utf-8")
    marked.write_text("\ufeff" + text, encoding="utf-8")
    code, expected, err = _run(["--no-device-classes", str(plain)], capsys)
    assert code == 0, err
    code, _, err = _run(["-i", "--no-device-classes", str(marked)], capsys)
    assert code == 0 and "internal error" not in err, err
    assert marked.read_text(encoding="utf-8") == "\ufeff" + expected


def test_duplicate_node_replicated_job_is_invalid_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two replicatedJobs named `node` both pinned numProcPerNode: overlapping edits, 'internal error'."""
    job = (
        "  - name: node\n    template:\n      spec:\n        template:\n"
        "          spec:\n            containers:\n"
        "            - {name: node, image: x, resources: {limits: {nvidia.com/gpu: GPUS}}}\n"
    )
    text = (
        "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: ClusterTrainingRuntime\nmetadata: {name: rt}\n"
        "spec:\n  mlPolicy: {numNodes: 1, torch: {numProcPerNode: auto}}\n  template:\n    spec:\n"
        "      replicatedJobs:\n"
        + "".join(
            ("    " + line if line else line)
            for line in (job.replace("GPUS", "8") + job.replace("GPUS", "4")).splitlines(True)
        )
    )
    path = tmp_path / "rt.yaml"
    path.write_text(text)
    code, _, err = _run(["-i", str(path)], capsys)
    assert code == 2 and "internal error" not in err, err
    assert "spec.template.spec.replicatedJobs[1].name" in err and "Duplicate value: 'node'" in err, err
    assert path.read_text() == text


def test_no_arguments_at_a_terminal_says_what_it_expects(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stdin", Terminal(""))
    code, _, err = _run([], capsys)
    assert code == 2
    assert err.startswith("error: no manifests given: kdra migrate FILE|FOLDER") and "Ctrl-D" in err
