"""`kdra allocate` through its real entry point: bad input of every kind, and the contract's mechanics.

Every bad-input test asserts the exit code (2 invalid input/usage, 3 allocation error) and that stderr names
the object, the field path and the rule, and never carries a traceback.
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from kdra.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "allocate"

CLASS = """\
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata:
  name: gpu.nvidia.com
spec:
  selectors:
  - cel:
      expression: device.driver == "gpu.nvidia.com"
"""

SLICE = """\
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata:
  name: node-1-gpus
spec:
  driver: gpu.nvidia.com
  nodeName: node-1
  pool: {name: node-1, generation: 1, resourceSliceCount: 1}
  devices:
  - name: gpu-0
    attributes:
      productName: {string: "NVIDIA H100 80GB HBM3"}
      model: {string: "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!"}
    capacity:
      memory: {value: 80Gi}
  - name: gpu-1
    attributes:
      productName: {string: "NVIDIA H100 80GB HBM3"}
    capacity:
      memory: {value: 80Gi}
"""


def claim(name: str = "train", exactly: str = "", extra: str = "", request_name: str = "gpu") -> str:
    text = f"""\
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: {name}
  namespace: default
spec:
  devices:
    requests:
    - name: {request_name}
      exactly:
        deviceClassName: gpu.nvidia.com
"""
    for line in exactly.splitlines():
        text += "        " + line + "\n"
    return text + extra


def selector_claim(expression: str) -> str:
    return claim(exactly=f"selectors:\n- cel:\n    expression: {json.dumps(expression)}")


def docs(*parts: str) -> str:
    return "---\n".join(parts)


def run(
    args: list[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    stdin: str | None = None,
) -> tuple[int, str, str]:
    if stdin is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    try:
        code = main(["allocate", *args])
    except SystemExit as exc:  # argparse usage errors
        code = exc.code if isinstance(exc.code, int) else 2
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "Traceback" not in out
    return code, out, err


def run_text(
    text: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    *extra: str,
    name: str = "input.yaml",
) -> tuple[int, str, str]:
    path = tmp_path / name
    path.write_text(text)
    return run(["-f", str(path), *extra], capsys, monkeypatch)


# --------------------------------------------------------------------------------------- bad input

BAD_INPUT: list[tuple[str, str, list[str], int, list[str]]] = [
    # (id, file content, extra args, exit code, substrings stderr must contain)
    ("malformed-yaml", "apiVersion: v1\nkind: [Node\n", [], 2, ["input.yaml", "line", "invalid YAML"]),
    ("malformed-json", '{"apiVersion": "v1", "kind": "Node",', [], 2, ["input.yaml"]),
    ("top-level-scalar", "just a string\n", [], 2, ["input.yaml", "document 1"]),
    (
        "wrong-type-count",
        docs(CLASS, SLICE, claim(exactly="count: two")),
        [],
        2,
        ["ResourceClaim default/train", "spec.devices.requests[0].exactly.count", "integer"],
    ),
    (
        "wrong-type-devices-not-a-list",
        docs(CLASS, SLICE.split("  devices:")[0] + "  devices: {gpu-0: {}}\n", claim()),
        [],
        2,
        ["ResourceSlice node-1-gpus", "spec.devices", "must be of type array"],
    ),
    (
        "wrong-type-int-attribute",
        docs(
            CLASS,
            SLICE.replace(
                'productName: {string: "NVIDIA H100 80GB HBM3"}\n      model',
                "index: {int: abc}\n      model",
            ),
            claim(),
        ),
        [],
        2,
        ["ResourceSlice node-1-gpus", "spec.devices[0].attributes[index]", "integer"],
    ),
    (
        "too-many-requests",
        docs(
            CLASS,
            SLICE,
            claim().split("    requests:")[0]
            + "    requests:\n"
            + "".join(
                f"    - name: r{i}\n      exactly: {{deviceClassName: gpu.nvidia.com}}\n" for i in range(33)
            ),
        ),
        [],
        2,
        ["ResourceClaim default/train", "spec.devices.requests", "Too many", "32"],
    ),
    (
        "too-many-devices-in-slice",
        docs(
            CLASS,
            SLICE.split("  devices:")[0]
            + "  devices:\n"
            + "".join(f"  - name: gpu-{i}\n" for i in range(129)),
            claim(),
        ),
        [],
        2,
        ["ResourceSlice node-1-gpus", "spec.devices", "Too many", "128"],
    ),
    (
        # kube-apiserver 1.36.3 does not enforce the documented limit of 16 tolerations (recorded in
        # tests/api), so the list-limit case uses selectors (at most 32).
        "too-many-selectors",
        docs(
            CLASS,
            SLICE,
            claim(
                exactly="selectors:\n"
                + "".join(f"- cel: {{expression: 'device.driver != \"x{i}\"'}}\n" for i in range(33))
            ),
        ),
        [],
        2,
        ["ResourceClaim default/train", "selectors", "Too many", "32"],
    ),
    (
        "bad-claim-name",
        docs(CLASS, SLICE, claim(name="Train_Job")),
        [],
        2,
        ["ResourceClaim default/Train_Job", "metadata.name", "RFC 1123"],
    ),
    (
        "bad-request-name",
        docs(CLASS, SLICE, claim(request_name="GPU_0")),
        [],
        2,
        ["ResourceClaim default/train", "spec.devices.requests[0].name", "RFC 1123"],
    ),
    (
        "bad-device-name",
        docs(CLASS, SLICE.replace("name: gpu-0", "name: GPU.0"), claim()),
        [],
        2,
        ["ResourceSlice node-1-gpus", "spec.devices[0].name", "RFC 1123"],
    ),
    (
        "bad-driver-name",
        docs(CLASS, SLICE.replace("driver: gpu.nvidia.com", "driver: GPU_Driver"), claim()),
        [],
        2,
        ["ResourceSlice node-1-gpus", "spec.driver", "GPU_Driver"],
    ),
    (
        "bad-capacity-quantity",
        docs(CLASS, SLICE.replace("value: 80Gi}\n  - name: gpu-1", "value: 80XB}\n  - name: gpu-1"), claim()),
        [],
        2,
        ["ResourceSlice node-1-gpus", "spec.devices[0].capacity[memory].value", "quantities must match"],
    ),
    (
        "bad-capacity-request-quantity",
        docs(CLASS, SLICE, claim(exactly="capacity:\n  requests:\n    memory: 1.5.5Gi")),
        [],
        2,
        ["ResourceClaim default/train", "capacity.requests[memory]", "quantities must match"],
    ),
    (
        "cel-syntax-error",
        docs(CLASS, SLICE, selector_claim("device.driver ==")),
        [],
        2,
        [
            "ResourceClaim default/train",
            "spec.devices.requests[0].exactly.selectors[0].cel.expression",
            "Syntax error",
        ],
    ),
    (
        "cel-undeclared-reference",
        docs(CLASS, SLICE, selector_claim("noSuchVar == 1")),
        [],
        2,
        ["ResourceClaim default/train", "selectors[0].cel.expression", "undeclared reference to 'noSuchVar'"],
    ),
    (
        "cel-not-bool",
        docs(CLASS, SLICE, selector_claim("device.driver")),
        [],
        2,
        ["ResourceClaim default/train", "selectors[0].cel.expression", "must evaluate to bool"],
    ),
    (
        "cel-in-class",
        docs(CLASS.replace('device.driver == "gpu.nvidia.com"', "device.driver =="), SLICE, claim()),
        [],
        2,
        ["DeviceClass gpu.nvidia.com", "spec.selectors[0].cel.expression", "compilation failed"],
    ),
    (
        "cel-runtime-error-missing-key",
        docs(CLASS, SLICE, selector_claim('device.attributes["gpu.nvidia.com"].missing == "x"')),
        [],
        3,
        ["claim default/train", "selector #0", "CEL runtime error", "no such key: missing"],
    ),
    (
        "unknown-kind",
        docs(CLASS, SLICE, claim(), "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\n"),
        [],
        2,
        ["ConfigMap", "kind"],
    ),
    (
        "duplicate-claim",
        docs(CLASS, SLICE, claim(), claim()),
        [],
        2,
        ["ResourceClaim default/train", "Duplicate"],
    ),
    (
        "pod-missing-template",
        docs(
            CLASS,
            SLICE,
            "apiVersion: v1\nkind: Pod\nmetadata: {name: trainer, namespace: default}\nspec:\n"
            "  containers: [{name: main, image: busybox}]\n"
            "  resourceClaims: [{name: gpu, resourceClaimTemplateName: no-such-template}]\n",
        ),
        [],
        2,
        ["Pod default/trainer", "spec.resourceClaims[0].resourceClaimTemplateName", "no-such-template"],
    ),
    (
        "pod-missing-claim",
        docs(
            CLASS,
            SLICE,
            "apiVersion: v1\nkind: Pod\nmetadata: {name: trainer, namespace: default}\nspec:\n"
            "  containers: [{name: main, image: busybox}]\n"
            "  resourceClaims: [{name: gpu, resourceClaimName: no-such-claim}]\n",
        ),
        [],
        2,
        ["Pod default/trainer", "spec.resourceClaims[0].resourceClaimName", "no-such-claim"],
    ),
    (
        "bad-node-name",
        docs("apiVersion: v1\nkind: Node\nmetadata: {name: Node_1}\n", CLASS, SLICE, claim()),
        [],
        2,
        ["Node Node_1", "metadata.name", "RFC 1123"],
    ),
    (
        "bad-device-class-name",
        docs(CLASS.replace("name: gpu.nvidia.com", "name: GPU_Class"), SLICE, claim()),
        [],
        2,
        ["DeviceClass GPU_Class", "metadata.name", "RFC 1123"],
    ),
    (
        "bad-template-request-name",
        docs(
            CLASS,
            SLICE,
            "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\n"
            "metadata: {name: tmpl, namespace: default}\n"
            "spec:\n  spec:\n    devices:\n      requests:\n"
            "      - {name: Bad_Req, exactly: {deviceClassName: gpu.nvidia.com}}\n",
        ),
        [],
        2,
        ["ResourceClaimTemplate default/tmpl", "spec.spec.devices.requests[0].name", "RFC 1123"],
    ),
    (
        "pod-claim-entry-with-both-sources",
        docs(
            CLASS,
            SLICE,
            claim(),
            "apiVersion: v1\nkind: Pod\nmetadata: {name: trainer, namespace: default}\nspec:\n"
            "  containers: [{name: main, image: busybox}]\n"
            "  resourceClaims: [{name: gpu, resourceClaimName: train, resourceClaimTemplateName: tmpl}]\n",
        ),
        [],
        2,
        ["Pod default/trainer", "spec.resourceClaims[0]", "at most one of"],
    ),
    (
        "unknown-feature-gate",
        docs(CLASS, SLICE, claim()),
        ["--feature-gates", "NoSuchGate=true"],
        2,
        ["NoSuchGate"],
    ),
    (
        "bad-feature-gate-value",
        docs(CLASS, SLICE, claim()),
        ["--feature-gates", "DRAAdminAccess=maybe"],
        2,
        ["DRAAdminAccess", "maybe"],
    ),
    (
        "feature-gate-without-value",
        docs(CLASS, SLICE, claim()),
        ["--feature-gates", "DRAAdminAccess"],
        2,
        ["DRAAdminAccess", "Name=true|false"],
    ),
    ("bad-output-format", docs(CLASS, SLICE, claim()), ["-o", "bogus"], 2, ["-o/--output", "bogus"]),
    (
        "node-not-in-input",
        docs("apiVersion: v1\nkind: Node\nmetadata: {name: node-1}\n", CLASS, SLICE, claim()),
        ["--node", "node-9"],
        2,
        ["--node", "node-9", "Not found"],
    ),
]


@pytest.mark.parametrize(
    ("text", "extra", "code", "needles"), [c[1:] for c in BAD_INPUT], ids=[c[0] for c in BAD_INPUT]
)
def test_bad_input(
    text: str,
    extra: list[str],
    code: int,
    needles: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    got, out, err = run_text(text, tmp_path, capsys, monkeypatch, *extra)
    assert got == code, f"exit {got}, expected {code}\n{err}"
    for needle in needles:
        assert needle in err, f"stderr lacks {needle!r}:\n{err}"
    if code in (2, 3):
        assert out == "", "nothing on stdout for invalid input or an allocation error"


def test_non_utf8_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "binary.yaml"
    path.write_bytes(b"\xff\xfe\x00kind: \x80\x81\n")
    code, _, err = run(["-f", str(path)], capsys, monkeypatch)
    assert code == 2
    assert "binary.yaml" in err


def test_missing_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _, err = run(["-f", str(tmp_path / "nope.yaml")], capsys, monkeypatch)
    assert code == 2
    assert "nope.yaml" in err and "no such file" in err


def test_missing_f_is_usage_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _, err = run([], capsys, monkeypatch)
    assert code == 2
    assert "-f FILE" in err and "--kubeconfig" in err and "not both" not in err


def test_f_and_kubeconfig_together_say_not_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "in.yaml"
    path.write_text(docs(CLASS, SLICE))
    code, _, err = run(["-f", str(path), "--kubeconfig", str(tmp_path / "kc")], capsys, monkeypatch)
    assert code == 2
    assert err.strip().count("\n") == 0 and "not both" in err, err


def test_expression_that_would_run_for_ever_fails_fast(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nested comprehensions are rejected by the cost estimate at validation (exit 2), quickly."""
    nested = "[1,2,3,4,5,6,7,8,9,10]"
    expr = (
        f"{nested}.all(a, {nested}.all(b, {nested}.all(c, {nested}.all(d, {nested}.all(e, a+b+c+d+e > 0)))))"
    )
    started = time.monotonic()
    code, _, err = run_text(docs(CLASS, SLICE, selector_claim(expr)), tmp_path, capsys, monkeypatch)
    assert time.monotonic() - started < 10
    assert code in (2, 3)
    assert "ResourceClaim default/train" in err or "claim default/train" in err
    assert "cost" in err


def test_catastrophic_regex_fails_fast(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`(a+)+$` backtracks exponentially in a naive regex engine; kdra must not hang on it."""
    expr = 'device.attributes["gpu.nvidia.com"].model.matches("^(a+)+$")'
    started = time.monotonic()
    code, _, err = run_text(docs(CLASS, SLICE, selector_claim(expr)), tmp_path, capsys, monkeypatch)
    assert time.monotonic() - started < 10
    assert code in (0, 2, 3), err
    if code:
        assert "claim default/train" in err or "ResourceClaim default/train" in err


def test_every_validation_message_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    text = docs(CLASS, SLICE.replace("name: gpu-0", "name: GPU.0"), claim(name="Bad_Name"))
    code, _, err = run_text(text, tmp_path, capsys, monkeypatch)
    assert code == 2
    assert "ResourceSlice node-1-gpus" in err and "ResourceClaim default/Bad_Name" in err


# ------------------------------------------------------------------------------------- the contract


def test_stdin_and_json_output(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = run(["-f", "-", "-o", "json"], capsys, monkeypatch, stdin=docs(CLASS, SLICE, claim()))
    assert code == 0, err
    listing = json.loads(out)
    assert listing["apiVersion"] == "v1" and listing["kind"] == "List"
    [item] = listing["items"]
    assert item["kind"] == "ResourceClaim" and item["metadata"]["name"] == "train"
    assert item["status"]["allocation"]["devices"]["results"] == [
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "node-1", "device": "gpu-0"}
    ]
    assert item["status"]["allocation"]["nodeSelector"] == {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}
        ]
    }
    assert "explanation" not in listing


def test_folder_and_several_files_and_kind_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "cluster"
    (folder / "slices").mkdir(parents=True)
    (folder / "class.yaml").write_text(CLASS)
    (folder / "slices" / "node-1.json").write_text(json.dumps(yaml.safe_load(SLICE)))
    claims = tmp_path / "claims.yaml"
    listing = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [yaml.safe_load(claim("a")), yaml.safe_load(claim("b"))],
    }
    claims.write_text(yaml.safe_dump(listing))
    code, out, err = run(["-f", str(folder), "-f", str(claims), "-o", "json"], capsys, monkeypatch)
    assert code == 0, err
    items = json.loads(out)["items"]
    assert [
        (i["metadata"]["name"], i["status"]["allocation"]["devices"]["results"][0]["device"]) for i in items
    ] == [
        ("a", "gpu-0"),
        ("b", "gpu-1"),
    ]


def test_default_output_is_yaml_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, _ = run_text(docs(CLASS, SLICE, claim()), tmp_path, capsys, monkeypatch)
    assert code == 0
    listing = yaml.safe_load(out)
    assert listing["kind"] == "List" and listing["items"][0]["status"]["allocation"]


def test_table_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, _ = run_text(
        docs(CLASS, SLICE, claim(exactly="count: 2")), tmp_path, capsys, monkeypatch, "-o", "table"
    )
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["CLAIM", "REQUEST", "DRIVER", "POOL", "DEVICE", "NODE"]
    assert [line.split() for line in lines[1:]] == [
        ["train", "gpu", "gpu.nvidia.com", "node-1", "gpu-0", "node-1"],
        ["train", "gpu", "gpu.nvidia.com", "node-1", "gpu-1", "node-1"],
    ]


def test_unschedulable_exit_1_with_structured_explanation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = run_text(
        docs(CLASS, SLICE, claim(exactly="count: 3")), tmp_path, capsys, monkeypatch, "-o", "json"
    )
    assert code == 1
    listing = json.loads(out)
    assert listing["kind"] == "List" and listing["items"] == []
    explanation: dict[str, Any] = listing["explanation"]
    assert explanation["message"]
    [failure] = explanation["unschedulable"]
    assert failure["claims"] == ["default/train"]
    assert failure["nodes"][0]["node"] == "node-1"
    assert "default/train" in err and "node-1" in err


def test_node_flag_limits_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    other = SLICE.replace("node-1", "node-0")
    code, out, err = run_text(docs(CLASS, other, SLICE, claim()), tmp_path, capsys, monkeypatch, "-o", "json")
    assert code == 0, err
    assert json.loads(out)["items"][0]["status"]["allocation"]["devices"]["results"][0]["pool"] == "node-0"
    code, out, err = run_text(
        docs(CLASS, other, SLICE, claim()), tmp_path, capsys, monkeypatch, "-o", "json", "--node", "node-1"
    )
    assert code == 0, err
    assert json.loads(out)["items"][0]["status"]["allocation"]["devices"]["results"][0]["pool"] == "node-1"


def test_help_documents_node_derivation(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, _ = run(["--help"], capsys, monkeypatch)
    assert code == 0
    assert "nodeName" in out and "--feature-gates" in out and "exit codes" in out


def test_output_is_reproducible(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    first = run(["-f", str(EXAMPLES / "h100-mig-node.yaml"), "-o", "json"], capsys, monkeypatch)
    second = run(["-f", str(EXAMPLES / "h100-mig-node.yaml"), "-o", "json"], capsys, monkeypatch)
    assert first == second


# ------------------------------------------------------------------------------- bundled examples


def test_readme_example(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The README example: expectations derived by hand in examples/allocate/make_examples.py."""
    code, out, err = run(["-f", str(EXAMPLES / "h100-mig-node.yaml"), "-o", "json"], capsys, monkeypatch)
    assert code == 0, err
    got = {}
    for item in json.loads(out)["items"]:
        meta = item["metadata"]
        assert meta["ownerReferences"][0]["kind"] == "Pod"
        assert meta["annotations"]["resource.kubernetes.io/pod-claim-name"]
        pod = meta["ownerReferences"][0]["name"]
        assert (
            meta["generateName"] == f"{pod}-{meta['annotations']['resource.kubernetes.io/pod-claim-name']}-"
        )
        assert item["status"]["reservedFor"][0]["name"] == pod
        got[pod] = [r["device"] for r in item["status"]["allocation"]["devices"]["results"]]
    assert got == {
        "llm-finetune": ["gpu-6", "gpu-7"],
        "vllm-serve": ["gpu-0-mig-3g40gb-9-4"],
        "jupyter-bob": ["gpu-0-mig-1g10gb-19-1"],
    }


def test_unschedulable_example(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = run(["-f", str(EXAMPLES / "unschedulable.yaml"), "-o", "json"], capsys, monkeypatch)
    assert code == 1
    assert "ml-team/h200-pair" in err
    assert "141Gi" in err
    assert json.loads(out)["explanation"]["unschedulable"][0]["claims"] == ["ml-team/h200-pair"]


# ------------------------------------------------------------------------------ template naming


def test_template_claim_name_follows_the_controller() -> None:
    from kdra.api.templates import claim_generate_name, generated_name, instantiate_template

    assert claim_generate_name("trainer", "gpu") == "trainer-gpu-"
    pod_name, entry = "p" * 50, "c" * 20
    # resourceclaim controller: both parts cut proportionally to 57 characters, no trailing hyphen.
    base = claim_generate_name(pod_name, entry)
    assert base == "p" * (50 * 57 // 72) + "-" + "c" * (20 * 57 // 72)
    name = generated_name(base, "seed")
    assert len(name) <= 63 and name.startswith(base[:58])
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer", "namespace": "ml", "uid": "u-1"},
    }
    tmpl = {
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t", "namespace": "ml"},
        "spec": {"metadata": {"labels": {"team": "ml"}}, "spec": {"devices": {"requests": []}}},
    }
    one = instantiate_template(pod, "gpu", tmpl)
    assert one == instantiate_template(pod, "gpu", tmpl)
    assert one["metadata"]["namespace"] == "ml"
    assert one["metadata"]["labels"] == {"team": "ml"}
    assert one["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "trainer",
            "uid": "u-1",
            "controller": True,  # only: handleClaim sets no blockOwnerDeletion (kcm 1.36-1.38)
        }
    ]
    assert one["metadata"]["annotations"] == {"resource.kubernetes.io/pod-claim-name": "gpu"}
    taken = {one["metadata"]["name"]}
    assert instantiate_template(pod, "gpu", tmpl, taken)["metadata"]["name"] not in taken


def test_shared_claim_is_allocated_once_and_reserved_for_both_pods(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pods = [
        f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default, uid: {uid}}}\nspec:\n"
        "  containers: [{name: main, image: busybox}]\n"
        "  resourceClaims: [{name: gpu, resourceClaimName: train}]\n"
        for name, uid in (("worker-0", "uid-0"), ("worker-1", "uid-1"))
    ]
    code, out, err = run_text(docs(CLASS, SLICE, claim(), *pods), tmp_path, capsys, monkeypatch, "-o", "json")
    assert code == 0, err
    [item] = json.loads(out)["items"]
    assert [r["device"] for r in item["status"]["allocation"]["devices"]["results"]] == ["gpu-0"]
    assert item["status"]["reservedFor"] == [
        {"resource": "pods", "name": "worker-0", "uid": "uid-0"},
        {"resource": "pods", "name": "worker-1", "uid": "uid-1"},
    ]


def test_device_preference_says_what_decided_the_devices(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = EXAMPLES / "h100-mig-node.yaml"
    code, out, err = run(["-f", str(path), "-o", "json"], capsys, monkeypatch)
    assert code == 0 and "devicePreference" not in json.loads(out)  # off: upstream's output, unchanged
    code, out, err = run(
        ["-f", str(path), "-o", "json", "--device-preference", "fragmentation"], capsys, monkeypatch
    )
    assert code == 0, err
    doc = json.loads(out)
    choices = {c["pod"]: c for c in doc["devicePreference"]["choices"]}
    assert set(choices) == {"ml-team/llm-finetune", "ml-team/vllm-serve", "ml-team/jupyter-bob"}
    vllm = choices["ml-team/vllm-serve"]
    assert vllm["decidedBy"] == "preference"
    assert vllm["chosen"]["devices"] == ["gpu.nvidia.com/gpu-node-01/gpu-3-mig-3g40gb-9-4"]
    assert vllm["firstFit"]["devices"] == ["gpu.nvidia.com/gpu-node-01/gpu-0-mig-3g40gb-9-4"]
    assert vllm["chosen"]["score"] < vllm["firstFit"]["score"]
    assert choices["ml-team/llm-finetune"]["decidedBy"] == "rules"
    code, out, err = run(
        ["-f", str(path), "-o", "table", "--device-preference", "fragmentation"], capsys, monkeypatch
    )
    assert (
        "pod ml-team/vllm-serve on gpu-node-01: devices chosen by the fragmentation preference, not a rule"
        in err
    )
    code, out, err = run(["-f", str(path), "--device-preference", "nope"], capsys, monkeypatch)
    assert code == 2 and "invalid choice: 'nope'" in err


def test_stored_class_is_evaluated_not_revalidated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 18 item 9: a DeviceClass read back from a cluster (it has a resourceVersion) is evaluated as
    kube-scheduler does, in the StoredExpressions environment, not validated again as a new object. The
    same selector written fresh is rejected like the API server rejects it: joining a literal list has an
    unbounded estimated cost, though it is cheap to run."""
    expr = '["gpu", "nvidia", "com"].join(".") == device.driver'
    fresh = CLASS.replace('device.driver == "gpu.nvidia.com"', json.dumps(expr))
    stored = fresh.replace("  name: gpu.nvidia.com\n", '  name: gpu.nvidia.com\n  resourceVersion: "4211"\n')
    code, _, err = run_text(docs(fresh, SLICE, claim()), tmp_path, capsys, monkeypatch)
    assert code == 2, err
    assert "DeviceClass gpu.nvidia.com" in err and "too complex, exceeds cost limit" in err
    code, out, err = run_text(docs(stored, SLICE, claim()), tmp_path, capsys, monkeypatch, "-o", "json")
    assert code == 0, err
    results = json.loads(out)["items"][0]["status"]["allocation"]["devices"]["results"]
    assert [r["device"] for r in results] == ["gpu-0"]


def test_api_servers_cost_limit_is_kdras(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 300 x 300 nested comprehension is accepted by kube-apiserver (estimated 634,211 of 1,000,000), so
    kdra accepts it too; 380 x 380 (1,016,131) is rejected by both."""
    for size, accepted in ((300, True), (380, False)):
        lst = "[" + ",".join(str(i) for i in range(size)) + "]"
        expr = f"{lst}.all(x, {lst}.all(y, x + y >= 0))"
        code, _, err = run_text(docs(CLASS, SLICE, selector_claim(expr)), tmp_path, capsys, monkeypatch)
        if accepted:
            assert code == 0, err
        else:
            assert code == 2 and "too complex, exceeds cost limit" in err, err


# --------------------------------------------------------------------------------------- versions

VERSIONED = """\
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu}
spec:
  selectors: [{cel: {expression: 'device.driver == "gpu.example.com"'}}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: node-1}
spec:
  driver: gpu.example.com
  nodeName: node-1
  pool: {name: node-1, generation: 1, resourceSliceCount: 1}
  devices:
  - {name: gpu-0, attributes: {numa: {int: 0}}}
  - {name: gpu-1, attributes: {numa: {int: 1}}}
  - {name: gpu-2, attributes: {numa: {int: 0}}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: three, namespace: default}
spec:
  devices:
    requests: [{name: r, exactly: {deviceClassName: gpu, count: 3}}]
    constraints: [{distinctAttribute: gpu.example.com/numa}]
"""


def test_kubernetes_version_selects_the_allocator(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # 1.36's distinctAttribute remembers one value per request, so 0, 1, 0 passes; 1.37 compares every
    # device with every other (the default), so three devices with two NUMA values do not fit.
    code, out, _ = run_text(
        VERSIONED, tmp_path, capsys, monkeypatch, "-o", "json", "--kubernetes-version", "1.36"
    )
    assert code == 0
    devices = [r["device"] for r in json.loads(out)["items"][0]["status"]["allocation"]["devices"]["results"]]
    assert devices == ["gpu-0", "gpu-1", "gpu-2"]
    code, _, err = run_text(VERSIONED, tmp_path, capsys, monkeypatch)
    assert code == 1 and "distinctAttribute" in err
    code, _, err = run_text(VERSIONED, tmp_path, capsys, monkeypatch, "--kubernetes-version", "1.35")
    assert code == 2 and "--kubernetes-version" in err


@pytest.mark.parametrize(
    ("version", "gates", "message"),
    [
        (
            "1.37",
            "DRAAdminAccess=false",
            "cannot set feature gate DRAAdminAccess to false, feature is locked to true",
        ),
        ("1.37", "DRAPrioritizedList=false", "cannot set feature gate DRAPrioritizedList to false"),
        ("1.37", "DRAConsumableCapacity=false", "DRAFractionalCapacityRange is enabled, but depends on"),
        ("1.36", "DRADerivedAttributes=true", "unrecognized feature gate: DRADerivedAttributes"),
        (
            "1.37",
            "DRAPartitionableDevices=yes",
            "--feature-gates (Kubernetes 1.37): invalid value of DRAPartitionableDevices=yes, err: expected "
            "true or false",
        ),
    ],
)
def test_feature_gates_are_read_as_the_release_reads_them(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    version: str,
    gates: str,
    message: str,
) -> None:
    code, _, err = run_text(
        VERSIONED, tmp_path, capsys, monkeypatch, "--kubernetes-version", version, "--feature-gates", gates
    )
    assert code == 2
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert len(err.strip().splitlines()) == 1  # one line, no traceback
