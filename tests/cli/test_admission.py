"""What kube-apiserver (and kubectl's decoder) refuses, kdra refuses, in one line naming the object, the field
and the rule; what the API server names or defaults, kdra names and defaults the same way
(kdra.validation.admission, kdra.validation.rules: pkg/apis/core/validation/validation.go,
pkg/apis/resource/v1/defaults.go)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kdra.cli.main import main

DRIVER = "gpu.example.com"


def _objects(
    pod_spec: dict[str, Any] | None = None,
    pod_meta: dict[str, Any] | None = None,
    node_spec: dict[str, Any] | None = None,
    count: object = None,
) -> list[dict[str, Any]]:
    exactly: dict[str, Any] = {"deviceClassName": DRIVER}
    if count is not None:
        exactly["count"] = count
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}],
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
    }
    spec.update(pod_spec or {})
    return [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}},
            "spec": node_spec
            if node_spec is not None
            else {"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]},
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": DRIVER},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "n1-gpu"},
            "spec": {
                "driver": DRIVER,
                "nodeName": "n1",
                "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "gpu-0"}, {"name": "gpu-1"}],
            },
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "one-gpu", "namespace": "default"},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}},
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": pod_meta or {"name": "job", "namespace": "default"},
            "spec": spec,
        },
    ]


def _allocate(
    tmp_path: Path, objs: list[dict[str, Any]], capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[int, str, str]:
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all(objs, sort_keys=False))
    code = main(["allocate", "-f", str(path), *extra])
    out, err = capsys.readouterr()
    return code, out, err


TOLERATE = {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}

# (id, pod spec / node spec changes, the one line expected on stderr)
REFUSED = [
    (
        "toleration-operator-Exist",
        {"tolerations": [dict(TOLERATE, operator="Exist")]},
        None,
        'Pod default/job: spec.tolerations[0].operator: Unsupported value: "Exist": supported values: '
        '"Equal", "Exists"',
    ),
    (
        "toleration-effect-NoSchedul",
        {"tolerations": [dict(TOLERATE, effect="NoSchedul")]},
        None,
        'Pod default/job: spec.tolerations[0].effect: Unsupported value: "NoSchedul": supported values: '
        '"NoSchedule", "PreferNoSchedule", "NoExecute"',
    ),
    (
        "toleration-seconds-without-NoExecute",
        {"tolerations": [dict(TOLERATE, tolerationSeconds=30)]},
        None,
        'Pod default/job: spec.tolerations[0].effect: Invalid value: "NoSchedule": '
        "effect must be 'NoExecute' when `tolerationSeconds` is set",
    ),
    (
        "toleration-empty-key-Equal",
        {"tolerations": [{"operator": "Equal", "value": "gpu"}]},
        None,
        'Pod default/job: spec.tolerations[0].operator: Invalid value: "Equal": operator must be Exists when '
        '`key` is empty, which means "match all values and all keys"',
    ),
    (
        "taint-without-effect",
        {"tolerations": [TOLERATE]},
        {"taints": [{"key": "dedicated", "value": "gpu"}]},
        "Node n1: spec.taints[0].effect: Required value",
    ),
    (
        "node-selector-value",
        {"nodeSelector": {"gpu": "a b"}},
        None,
        'Pod default/job: spec.nodeSelector: Invalid value: "a b": a valid label must be',
    ),
    (
        "affinity-operator",
        {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "zone", "operator": "Equals", "values": ["a"]}]}
                        ]
                    }
                }
            }
        },
        None,
        "Pod default/job: spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."
        'nodeSelectorTerms[0].matchExpressions[0].operator: Invalid value: "Equals": '
        "not a valid selector operator",
    ),
    (
        "fractional-extended-resource",
        {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "500m"}}}]},
        None,
        "Pod default/job: spec.containers[0].resources.limits[nvidia.com/gpu]: "
        'Invalid value: "500m": must be an integer',
    ),
    (
        "request-above-limit",
        {
            "containers": [
                {"name": "c", "image": "x", "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}
            ]
        },
        None,
        'Pod default/job: spec.containers[0].resources.requests: Invalid value: "2": '
        "must be less than or equal to cpu limit of 1",
    ),
    (
        "no-image",
        {"containers": [{"name": "c"}]},
        None,
        "Pod default/job: spec.containers[0].image: Required value",
    ),
]


@pytest.mark.parametrize("pod_spec,node_spec,line", [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_what_the_api_server_refuses_is_refused(
    pod_spec: dict[str, Any],
    node_spec: dict[str, Any] | None,
    line: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = _allocate(tmp_path, _objects(pod_spec, node_spec=node_spec), capsys)
    assert code == 2, err
    assert out == "" and err.startswith("error: " + line), err
    assert len(err.strip().splitlines()) == 1, err


def test_a_valid_toleration_still_tolerates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _allocate(tmp_path, _objects({"tolerations": [TOLERATE]}), capsys, "-o", "name")
    assert code == 0, err
    assert out.startswith("resourceclaim.resource.k8s.io/job-gpu-")


def test_a_pod_with_only_generate_name_is_named_as_the_api_server_would(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its claim was `-gpu-6cn5g` with an empty owner name; the API server names the pod first."""
    objs = _objects({"tolerations": [TOLERATE]}, pod_meta={"generateName": "job-", "namespace": "default"})
    code, out, err = _allocate(tmp_path, objs, capsys, "-o", "json")
    assert code == 0, err
    claim = json.loads(out)["items"][0]
    owner = claim["metadata"]["ownerReferences"][0]["name"]
    assert owner.startswith("job-") and len(owner) == len("job-") + 5
    assert claim["metadata"]["name"].startswith(owner + "-gpu-")
    # the same input names the same way every time (the suffix is derived, not drawn)
    assert _allocate(tmp_path, objs, capsys, "-o", "json")[1] == out


def test_count_zero_is_stored_as_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """SetDefaults_ExactDeviceRequest: an ExactCount request with count 0 gets 1 (was: nothing allocated)."""
    code, out, err = _allocate(tmp_path, _objects({"tolerations": [TOLERATE]}, count=0), capsys, "-o", "json")
    assert code == 0, err
    claim = json.loads(out)["items"][0]
    assert len(claim["status"]["allocation"]["devices"]["results"]) == 1
    assert claim["spec"]["devices"]["requests"][0]["exactly"]["count"] == 1


@pytest.mark.parametrize(
    "text,message",
    [
        (
            '{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1",}}',
            "line 1 column 64: invalid JSON",
        ),
        (
            '{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}, "kind": "Pod"}',
            "duplicate field 'kind'",
        ),
        ('{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}, "x": NaN}', "NaN is not JSON"),
    ],
    ids=["trailing-comma", "duplicate-field", "nan"],
)
def test_a_json_file_is_json(
    text: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """kubectl's decoder (Go's encoding/json) refuses these; Python's json or a YAML fallback took them."""
    path = tmp_path / "in.json"
    path.write_text(text)
    assert main(["allocate", "-f", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: ") and message in err, err


def test_a_generator_model_must_be_a_catalog_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """gpu.model becomes a nodeSelector on kdra.dev/accelerator, which carries the catalog key: `H100` (an
    alias) matched no node, and every pod of the stream pended for ever."""
    gen = {
        "apiVersion": "kdra.dev/v1alpha1",
        "kind": "WorkloadGenerator",
        "metadata": {"name": "g"},
        "spec": {
            "duration": "1d",
            "streams": [
                {
                    "name": "s",
                    "type": "training",
                    "arrivals": {"count": 2},
                    "runTime": {"min": "1h", "max": "2h"},
                    "gpu": {"count": 1, "model": "H100"},
                }
            ],
        },
    }
    path = tmp_path / "gen.yaml"
    path.write_text(yaml.safe_dump(gen))
    assert main(["simulate", "--workload", str(path), "--mode", "dra"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err.startswith(
            "error: WorkloadGenerator g: spec.streams[0].gpu.model: Unsupported value: 'H100': did you mean "
            "'H100-SXM-80GB'?"
        )
        and "L40S" in err
        and len(err.splitlines()) == 1
    )


def test_a_workload_pod_template_is_validated_as_a_pod(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "default"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "d"}},
            "template": {
                "metadata": {"labels": {"app": "d"}},
                "spec": {
                    "containers": [{"name": "c", "image": "x"}],
                    "tolerations": [{"key": "k", "operator": "Exist"}],
                },
            },
        },
    }
    path = tmp_path / "wl.yaml"
    path.write_text(yaml.safe_dump(deployment))
    assert main(["simulate", "--workload", str(path), "--mode", "dra"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: Deployment default/d: spec.template.spec.tolerations[0].operator: "
        'Unsupported value: "Exist": supported values: "Equal", "Exists"'
    )
