"""`kdra migrate` as CI and people use it: --check, --diff, -i, -o, stdin, folders, and clear errors."""

from __future__ import annotations

import importlib
import shutil
from pathlib import Path

import pytest

from .conftest import MANIFESTS, cases, run_cli

VLLM = MANIFESTS / "vllm-deployment.yaml"
VLLM_EXPECTED = MANIFESTS / "vllm-deployment.expected.yaml"

FRACTIONAL = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: tiny
  namespace: ml
spec:
  template:
    spec:
      containers:
      - name: app
        image: x
      - name: model
        image: y
        resources:
          limits:
            nvidia.com/gpu: "0.5"
"""


def _copy(tmp_path: Path, *names: str) -> list[Path]:
    out = []
    for name in names:
        target = tmp_path / name
        shutil.copy(MANIFESTS / name, target)
        out.append(target)
    return out


def test_check_exits_1_and_lists_each_change() -> None:
    run = run_cli(["--check", str(VLLM)])
    assert run.code == 1
    assert "document 2 (Deployment inference/vllm-llama70b)" in run.out
    assert "nvidia.com/gpu: 4 -> request vllm (gpu.nvidia.com, count 4)" in run.out
    assert "node selection on nvidia.com/gpu.product -> CEL selectors in vllm-llama70b-gpu" in run.out
    assert "DeviceClasses to add: gpu.nvidia.com" in run.out


@pytest.mark.parametrize("case", cases())
def test_check_passes_on_migrated_output(case: str) -> None:
    args = (MANIFESTS / f"{case}.args").read_text().split() if (MANIFESTS / f"{case}.args").exists() else []
    run = run_cli([*args, "--check", str(MANIFESTS / f"{case}.expected.yaml")])
    assert run.code == 0, run.out
    assert run.out == ""


def test_check_passes_on_already_migrated_input() -> None:
    run = run_cli(["--check", str(MANIFESTS / "already-migrated.yaml")])
    assert (run.code, run.out) == (0, "")


def test_check_in_extended_resource_mode_wants_the_classes() -> None:
    run = run_cli(["--mode", "extended-resource", "--check", str(MANIFESTS / "extended-resource.yaml")])
    assert run.code == 1
    assert "gpu.nvidia.com" in run.out and "mig-2g.20gb.nvidia.com" in run.out


def test_diff_is_a_unified_diff_of_the_file_and_the_new_classes() -> None:
    run = run_cli(["--diff", str(VLLM)])
    assert run.code == 0
    assert run.out.startswith(f"--- a/{VLLM}\n+++ b/{VLLM}\n@@ ")
    assert "-        nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3\n" in run.out
    assert "-            nvidia.com/gpu: 4\n" in run.out
    assert "+kind: ResourceClaimTemplate\n" in run.out
    assert "+++ b/<DeviceClasses>\n" in run.out
    assert "+kind: DeviceClass\n" in run.out


def test_diff_is_empty_when_nothing_to_do() -> None:
    run = run_cli(["--diff", str(MANIFESTS / "already-migrated.yaml")])
    assert (run.code, run.out) == (0, "")


def test_check_and_diff_together() -> None:
    run = run_cli(["--check", "--diff", str(VLLM)])
    assert run.code == 1
    assert "--- a/" in run.out and "request vllm" in run.out


def test_in_place_rewrites_files_and_prints_the_classes(tmp_path: Path) -> None:
    (target,) = _copy(tmp_path, "vllm-deployment.yaml")
    target.chmod(0o640)
    run = run_cli(["-i", str(target)])
    assert run.code == 0, run.err
    expected = VLLM_EXPECTED.read_text()
    body, classes = expected.split("---\n# ------", 1)
    assert target.read_text() == body
    assert run.out == "---\n# ------" + classes
    assert (target.stat().st_mode & 0o777) == 0o640
    assert not [p for p in tmp_path.iterdir() if p.name != target.name]  # no temp file left behind
    again = run_cli(["-i", str(target)])
    assert (again.code, again.out) == (0, "")
    assert target.read_text() == body


def test_in_place_classes_to_output_file(tmp_path: Path) -> None:
    (target,) = _copy(tmp_path, "cronjob-mig.yaml")
    classes = tmp_path / "classes.out"
    run = run_cli(["-i", "-o", str(classes), str(target)])
    assert run.code == 0
    assert run.out == ""
    assert "name: mig.nvidia.com" in classes.read_text()


def test_in_place_writes_nothing_when_any_file_fails(tmp_path: Path) -> None:
    (good,) = _copy(tmp_path, "vllm-deployment.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text(FRACTIONAL)
    run = run_cli(["-i", str(good), str(bad)])
    assert run.code == 2
    assert good.read_text() == VLLM.read_text()
    assert bad.read_text() == FRACTIONAL
    assert "no file was changed" in run.err


def test_in_place_refuses_stdin_and_check() -> None:
    assert run_cli(["-i", "-"], stdin=FRACTIONAL).code == 2
    assert "--in-place cannot be combined" in run_cli(["-i", "--check", str(VLLM)]).err


def test_stdin_is_the_default_input() -> None:
    source = VLLM.read_text()
    assert run_cli([], stdin=source).out == VLLM_EXPECTED.read_text()
    assert run_cli(["-"], stdin=source).out == VLLM_EXPECTED.read_text()


def test_output_file(tmp_path: Path) -> None:
    out = tmp_path / "migrated.yaml"
    run = run_cli(["-o", str(out), str(VLLM)])
    assert (run.code, run.out) == (0, "")
    assert out.read_text() == VLLM_EXPECTED.read_text()


def test_folder_input_concatenates_files_and_emits_classes_once(tmp_path: Path) -> None:
    _copy(tmp_path, "vllm-deployment.yaml", "jobset.yaml", "cronjob-mig.yaml")
    (tmp_path / "notes.txt").write_text("nvidia.com/gpu: 1\n")
    run = run_cli([str(tmp_path)])
    assert run.code == 0, run.err
    assert run.out.count("kind: DeviceClass") == 2  # gpu.nvidia.com and mig.nvidia.com
    assert run.out.count("name: gpu.nvidia.com\n") == 1
    assert run.out.index("nightly-eval") < run.out.index("pretrain-7b") < run.out.index("vllm-llama70b")
    again = run_cli(["--check", "-"], stdin=run.out)
    assert (again.code, again.out) == (0, "")


def test_main_wires_the_subcommand() -> None:
    main = importlib.import_module("kdra.cli.main")
    assert "migrate" in main.COMMANDS


# -- errors ------------------------------------------------------------------------------------------------


def test_fractional_gpu_names_file_document_object_container_field_and_hint(tmp_path: Path) -> None:
    path = tmp_path / "tiny.yaml"
    path.write_text("# header\n---\n" + FRACTIONAL)
    run = run_cli([str(path)])
    assert run.code == 2
    assert run.out == ""
    assert f"{path}: document 2 (Deployment ml/tiny): container 'model': " in run.err
    assert 'spec.template.spec.containers[1].resources.limits["nvidia.com/gpu"]' in run.err
    assert "'0.5' is not a whole number" in run.err
    assert "hint:" in run.err and "MIG" in run.err


def test_requests_different_from_limits() -> None:
    text = FRACTIONAL.replace(
        'nvidia.com/gpu: "0.5"', "nvidia.com/gpu: 2\n          requests:\n            nvidia.com/gpu: 1"
    )
    run = run_cli(["-"], stdin=text)
    assert run.code == 2
    assert 'resources.requests["nvidia.com/gpu"]: request 1 differs from limit 2' in run.err
    assert "requests == limits" in run.err


def test_memory_percentage_needs_a_reference_size() -> None:
    run = run_cli([str(MANIFESTS / "hami-shares.yaml")])
    assert run.code == 2
    assert "document 2 (Pod notebooks/notebook-alice): container 'jupyter'" in run.err
    assert "--gpu-memory" in run.err


def test_hami_shares_cannot_be_extended_resources() -> None:
    run = run_cli(["--mode", "extended-resource", str(MANIFESTS / "hami-shares.yaml")])
    assert run.code == 2
    assert "nvidia.com/gpumem is not a device count" in run.err
    assert "--mode claims" in run.err


def test_every_error_is_reported_at_once(tmp_path: Path) -> None:
    one, two = tmp_path / "one.yaml", tmp_path / "two.yaml"
    one.write_text(FRACTIONAL)
    two.write_text(FRACTIONAL.replace("tiny", "other"))
    run = run_cli([str(one), str(two)])
    assert "2 request(s) cannot be migrated" in run.err
    assert "ml/tiny" in run.err and "ml/other" in run.err


def test_chart_template_with_gpu_requests_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "deployment.yaml"
    path.write_text(
        "apiVersion: apps/v1\nkind: Deployment\nspec:\n  template:\n    spec:\n      containers:\n"
        "      - name: x\n        resources:\n          limits:\n"
        "            nvidia.com/gpu: {{ .Values.gpu.count }}\n"
        "{{- with .Values.nodeSelector }}\n      nodeSelector:\n"
        "        {{- toYaml . | nindent 8 }}\n{{- end }}\n"
    )
    run = run_cli([str(path)])
    assert run.code == 2
    assert "not valid YAML" in run.err and "helm template" in run.err


def test_unparsable_document_without_device_requests_passes_through() -> None:
    text = "a: {{ .Values.x }}\n---\nkind: ConfigMap\n"
    run = run_cli(["-"], stdin=text)
    assert (run.code, run.out) == (0, text)


def test_missing_file() -> None:
    run = run_cli(["/nonexistent/x.yaml"])
    assert run.code == 2 and "no such file" in run.err


def test_in_place_through_a_symlink_keeps_the_link(tmp_path: Path) -> None:
    (target,) = _copy(tmp_path, "tpu-job.yaml")
    link = tmp_path / "link.yaml"
    link.symlink_to(target.name)
    assert run_cli(["-i", str(link)]).code == 0
    assert link.is_symlink()
    assert "claims:" in target.read_text()


def test_whole_counts_written_as_decimals_convert_and_others_do_not() -> None:
    ok = run_cli(["-"], stdin=FRACTIONAL.replace('"0.5"', "2.0"))
    assert ok.code == 0 and "count: 2" in ok.out
    for bad in ('"500m"', "-1", '"1k"', "1.5"):
        run = run_cli(["-"], stdin=FRACTIONAL.replace('"0.5"', bad))
        assert run.code == 2, bad
        assert "is not a whole number" in run.err


def test_main_runs_migrate_with_exit_codes() -> None:
    main = importlib.import_module("kdra.cli.main")
    assert main.main(["migrate", "--check", str(VLLM)]) == 1
    assert main.main(["migrate", "--check", str(VLLM_EXPECTED)]) == 0
    with pytest.raises(SystemExit) as exit_info:  # argparse usage errors exit 2
        main.main(["migrate", "--mode", "nonsense", str(VLLM)])
    assert exit_info.value.code == 2
    assert main.main(["migrate", "/nonexistent.yaml"]) == 2
