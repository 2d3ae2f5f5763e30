"""`kdra migrate` as CI and people use it: --check, --diff, -i, -o, stdin, folders, and clear errors."""

from __future__ import annotations

import importlib
import shutil
from pathlib import Path

import pytest

from .conftest import MANIFESTS, case_args, ok_cases, run_cli

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


@pytest.mark.parametrize("case", ok_cases())
def test_check_passes_on_migrated_output(case: str) -> None:
    run = run_cli([*case_args(case), "--check", str(MANIFESTS / f"{case}.expected.yaml")])
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
    run = run_cli(["-i", "--output-file", str(classes), str(target)])
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
    run = run_cli(["--output-file", str(out), str(VLLM)])
    assert (run.code, run.out) == (0, "")
    assert out.read_text() == VLLM_EXPECTED.read_text()
    assert "deprecated" not in run.err
    assert not [p for p in tmp_path.iterdir() if p.name != out.name]  # written through a temp file, renamed


def test_dash_o_is_only_ever_the_output_format(tmp_path: Path) -> None:
    assert run_cli(["-o", "yaml", str(VLLM)]).out == VLLM_EXPECTED.read_text()
    for other in ("json", "table", "wide", str(tmp_path / "migrated.yaml")):
        bad = run_cli(["-o", other, str(VLLM)])
        assert bad.code == 2 and "invalid choice" in bad.err
        assert not list(tmp_path.iterdir())  # never taken as a file name
    assert run_cli(["-f", str(VLLM)]).out == VLLM_EXPECTED.read_text()  # -f, as kubectl's


def test_no_device_classes_for_a_post_renderer() -> None:
    run = run_cli(["--no-device-classes", "-"], stdin=VLLM.read_text())
    assert run.code == 0
    assert "kind: DeviceClass" not in run.out and "kind: ResourceClaimTemplate" in run.out


def test_kind_option_errors_name_the_rule() -> None:
    for bad in ("AppWrapper", "appwrapper=spec", "AppWrapper=spec..x", "AppWrapper=spec.a b"):
        run = run_cli(["--kind", bad, str(VLLM)])
        assert run.code == 2, bad
        assert "--kind" in run.err or "pod spec path" in run.err, run.err


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


def test_fractional_gpu_names_file_document_object_path_line_and_hint(tmp_path: Path) -> None:
    path = tmp_path / "tiny.yaml"
    path.write_text("# header\n---\n" + FRACTIONAL)
    run = run_cli([str(path)])
    assert run.code == 2
    assert run.out == ""
    assert (
        f"{path}: document 2 (Deployment ml/tiny): "
        'spec.template.spec.containers[1].resources.limits["nvidia.com/gpu"]'
        " (line 18): '0.5' is not a whole number" in run.err
    )
    assert "hint:" in run.err and "MIG" in run.err


def test_requests_different_from_limits() -> None:
    text = FRACTIONAL.replace(
        'nvidia.com/gpu: "0.5"', "nvidia.com/gpu: 2\n          requests:\n            nvidia.com/gpu: 1"
    )
    run = run_cli(["-"], stdin=text)
    assert run.code == 2
    assert 'resources.requests["nvidia.com/gpu"] (line 18): request 1 differs from limit 2' in run.err
    assert "requests == limits" in run.err


def test_request_without_limit_is_refused_as_the_api_server_does() -> None:
    run = run_cli(
        ["-"],
        stdin=FRACTIONAL.replace(
            'limits:\n            nvidia.com/gpu: "0.5"', "requests:\n            nvidia.com/gpu: 1"
        ),
    )
    assert run.code == 2
    assert "requested without a limit" in run.err


def test_memory_percentage_needs_a_reference_size() -> None:
    run = run_cli([str(MANIFESTS / "hami-shares.yaml")])
    assert run.code == 2
    assert "document 2 (Pod notebooks/notebook-alice): spec.containers[0].resources.limits" in run.err
    assert "--gpu-memory" in run.err


def test_hami_shares_cannot_be_extended_resources() -> None:
    run = run_cli(["--mode", "extended-resource", str(MANIFESTS / "hami-shares.yaml")])
    assert run.code == 2
    assert "nvidia.com/gpumem is not a device count" in run.err
    assert "--mode claims" in run.err


def test_time_sliced_gpus_as_extended_resources_name_the_release_that_lacks_kep_6406() -> None:
    """nvidia.com/gpu.shared kept as an extended resource needs DeviceClass.spec.
    extendedResourceCapacityRequests (KEP-6406): no release kdra follows has it (not v1.38.0-beta.0), and
    the object says so."""
    shared = FRACTIONAL.replace(
        'limits:\n            nvidia.com/gpu: "0.5"', "limits:\n            nvidia.com/gpu.shared: 1"
    )
    assert "gpu.shared" in shared
    run = run_cli(["--mode", "extended-resource", "-"], stdin=shared)
    assert run.code == 2
    assert "nvidia.com/gpu.shared is not a device count" in run.err
    assert "extendedResourceCapacityRequests (KEP-6406)" in run.err
    from kdra.api.versions import BUILDS

    assert f"no release kdra follows has it (newest: Kubernetes 1.38, {BUILDS['1.38']})" in run.err


def test_every_error_is_reported_at_once(tmp_path: Path) -> None:
    one, two = tmp_path / "one.yaml", tmp_path / "two.yaml"
    one.write_text(FRACTIONAL)
    two.write_text(FRACTIONAL.replace("tiny", "other"))
    run = run_cli([str(one), str(two)])
    assert "2 invalid input(s); no file was changed" in run.err
    assert "ml/tiny" in run.err and "ml/other" in run.err


CHART_TEMPLATE = (
    "apiVersion: apps/v1\nkind: Deployment\nspec:\n  template:\n    spec:\n      containers:\n"
    "      - name: x\n        resources:\n          limits:\n"
    "            nvidia.com/gpu: {{ .Values.gpu.count }}\n"
    "{{- with .Values.nodeSelector }}\n      nodeSelector:\n"
    "        {{- toYaml . | nindent 8 }}\n{{- end }}\n"
)


def test_chart_template_with_gpu_requests_is_refused_with_the_helm_way(tmp_path: Path) -> None:
    path = tmp_path / "deployment.yaml"
    path.write_text(CHART_TEMPLATE)
    run = run_cli([str(path)])
    assert run.code == 2
    assert f"{path}:10: document 1: a Helm chart template" in run.err
    assert "helm template RELEASE CHART" in run.err and "--post-renderer kdra" in run.err
    assert "ordereddict" not in run.err
    check = run_cli(["--check", str(path)])
    assert check.code == 1 and "cannot convert:" in check.out


def test_a_quoted_template_value_is_refused_too() -> None:
    run = run_cli(["-"], stdin=FRACTIONAL.replace('"0.5"', '"{{ .Values.gpus }}"'))
    assert run.code == 2
    assert "Helm chart template" in run.err


def test_a_chart_directory_says_how_to_render_it_and_which_values_to_change(tmp_path: Path) -> None:
    chart = tmp_path / "llm-stack"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: llm-stack\nversion: 0.1.0\n")
    (chart / "values.yaml").write_text(
        "replicaCount: 1\nengine:\n  resources:\n    limits:\n      nvidia.com/gpu: 2\n      memory: 40Gi\n"
    )
    (chart / "templates" / "deployment.yaml").write_text(CHART_TEMPLATE)
    for argv in ([str(chart)], [str(tmp_path)]):  # the chart itself, or a folder holding it
        run = run_cli(argv)
        assert run.code == 2, run.err
        assert f"{chart}: a Helm chart (Chart.yaml)" in run.err
        assert f"helm template RELEASE {chart}" in run.err
        assert 'llm-stack/values.yaml:5: engine.resources.limits["nvidia.com/gpu"] = 2' in run.err
        assert (
            "llm-stack/templates/deployment.yaml:10: nvidia.com/gpu: {{ .Values.gpu.count }} (reads "
            "values: gpu.count)" in run.err
        )
    assert run_cli(["--check", str(chart)]).code == 1


def test_invalid_yaml_without_gpu_requests_is_still_an_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("kind: ConfigMap\n---\n" + CHART_TEMPLATE.replace("nvidia.com/gpu", "cpu"))
    run = run_cli([str(path)])
    assert run.code == 2
    assert f"{path}:14: document 2: not valid YAML" in run.err
    assert "helm template" in run.err


def test_binary_junk_is_exit_2_with_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "model.yaml"
    path.write_bytes(b"apiVersion: v1\nkind: Pod\n\x89PNG\r\n\x1a\n\x00\x00\xff\xfe")
    run = run_cli([str(path)])
    assert run.code == 2
    assert f"{path}:3: not UTF-8 text (byte 0x89 at offset 25)" in run.err
    nul = tmp_path / "nul.yaml"
    nul.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: \x00}\n")
    run = run_cli([str(nul)])
    assert (
        run.code == 2 and f"{nul}:3: document 1: not valid YAML: character #x0000 is not allowed" in run.err
    )


def test_template_syntax_in_strings_of_rendered_manifests_is_fine() -> None:
    rule = (
        "kind: PrometheusRule\nspec:\n  groups:\n  - rules:\n    - annotations:\n"
        "        summary: 'GPU {{ $labels.gpu }} hot'\n"
    )
    assert run_cli(["-"], stdin=rule).out == rule


def test_tabs_get_a_hint(tmp_path: Path) -> None:
    run = run_cli([str(MANIFESTS / "bad-tabs.yaml")])
    assert run.code == 2
    assert "bad-tabs.yaml:10: document 1: not valid YAML" in run.err
    assert "indented with a tab" in run.err


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
    # Any quantity whose value is whole is a count, as the API server reads it (MilliValue % 1000 == 0).
    for whole, count in (("2.0", 2), ('"2000m"', 2), ('"3e0"', 3)):
        ok = run_cli(["-"], stdin=FRACTIONAL.replace('"0.5"', whole))
        assert ok.code == 0 and f"count: {count}\n" in ok.out, whole
    big = run_cli(["-"], stdin=FRACTIONAL.replace('"0.5"', '"1k"'))  # whole, but beyond one claim's 32
    assert big.code == 2 and "allocates at most 32" in big.err
    for bad in ('"500m"', "-1", "1.5", '"1.5k2"'):
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


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        ("80Gx", "not a Kubernetes quantity"),
        ("", "not a Kubernetes quantity"),
        ("eighty", "not a Kubernetes quantity"),
        ("0", "must be greater than zero"),
        ("-1Gi", "must be greater than zero"),
        ("1e400", "beyond int64 bytes"),
    ],
)
def test_bad_gpu_memory_is_one_line_naming_option_and_rule(
    value: str, rule: str, capsys: pytest.CaptureFixture[str]
) -> None:
    main = importlib.import_module("kdra.cli.main")
    # Also when no input needs it: a typo is refused before any input is read, whatever the input holds.
    for path in (MANIFESTS / "hami-shares.yaml", VLLM):
        assert main.main(["migrate", f"--gpu-memory={value}", str(path)]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        (line,) = captured.err.splitlines()
        assert line.startswith(f"error: --gpu-memory {value!r}: ") and rule in line
        assert "Traceback" not in captured.err


def test_gpu_memory_takes_any_kubernetes_quantity() -> None:
    exact = run_cli(["--gpu-memory=80Gi", str(MANIFESTS / "hami-shares.yaml")])
    assert exact.code == 0
    same = run_cli(["--gpu-memory=81920Mi", str(MANIFESTS / "hami-shares.yaml")])
    assert same.code == 0 and same.out == exact.out
    decimal = run_cli(["--gpu-memory=85.9G", str(MANIFESTS / "hami-shares.yaml")])
    assert decimal.code == 0 and "capacity" in decimal.out


ALIAS_BOMB = """\
apiVersion: v1
kind: Pod
metadata:
  name: bomb
  annotations:
    a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]
    b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
    c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
    d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
    e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
    f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
spec:
  containers:
  - name: c
    image: x
    resources:
      limits:
        nvidia.com/gpu: 1
"""


def test_alias_bomb_is_refused_with_the_object_loaders_bound(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text("kind: ConfigMap\n---\n" + ALIAS_BOMB)
    for argv in ([str(path)], ["--check", str(path)], ["--mode", "extended-resource", str(path)]):
        run = run_cli(argv)
        assert run.code == 2, argv
        assert run.out == ""
        assert f"{path}:3: document 2: not valid YAML: document contains excessive aliasing" in run.err
    recursive = tmp_path / "recursive.yaml"
    recursive.write_text(ALIAS_BOMB.replace('&a ["x", "x"', "&a [*a, *a"))
    run = run_cli([str(recursive)])
    assert run.code == 2 and "found a recursive alias" in run.err


def test_ordinary_anchors_still_migrate() -> None:
    # The same document with two levels of aliases (110 nodes) is far below the bound.
    text = ALIAS_BOMB.replace(ALIAS_BOMB[ALIAS_BOMB.index("    c: &c") : ALIAS_BOMB.index("spec:")], "")
    run = run_cli(["-"], stdin=text)
    assert run.code == 0, run.err
    assert "resourceClaimTemplateName: bomb-gpu" in run.out


def test_requests_through_aliases_and_merge_keys_fail_the_check(tmp_path: Path) -> None:
    # The vendor's name is written once, under a key that is no `limits`; the requests are where it is used.
    anchored = (
        "apiVersion: example.com/v1\nkind: Trainer\nmetadata:\n  name: t\n"
        "x-defaults:\n  gpus: &gpus {nvidia.com/gpu: 2}\n"
        "spec:\n  pods:\n  - resources:\n      limits:\n        <<: *gpus\n        cpu: 1\n"
    )
    aliased = anchored.replace("limits:\n        <<: *gpus\n        cpu: 1\n", "limits: *gpus\n")
    for text in (anchored, aliased):
        path = tmp_path / "trainer.yaml"
        path.write_text(text)
        run = run_cli(["--check", str(path)])
        assert run.code == 1, text
        assert (
            '(Trainer t): spec.pods[0].resources.limits["nvidia.com/gpu"] (line 6): nvidia.com/gpu: 2'
            in run.out
        )
        assert run_cli([str(path)]).code == 2
