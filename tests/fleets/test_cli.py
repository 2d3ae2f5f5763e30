from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from kdra.cli.main import main


def test_render_bundled_yaml(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cluster", "render", "-c", "mixed"]) == 0
    out = capsys.readouterr().out
    assert "&id" not in out and "*id" not in out  # shared sub-objects must not become YAML aliases
    docs = list(yaml.safe_load_all(out))
    kinds = {d["kind"] for d in docs}
    assert kinds == {"DeviceClass", "Node", "ResourceSlice"}


def test_render_legacy_no_dra_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cluster", "render", "-c", "mixed", "--legacy", "--no-dra", "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "List" and {i["kind"] for i in doc["items"]} == {"Node"}
    tpu = next(i for i in doc["items"] if i["metadata"]["name"] == "tpu-v6e-0")
    assert tpu["status"]["allocatable"]["google.com/tpu"] == "4"


def test_render_file_and_allocate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fleet = tmp_path / "f.yaml"
    fleet.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kdra.dev/v1alpha1",
                "kind": "Fleet",
                "metadata": {"name": "one"},
                "spec": {
                    "pools": [
                        {
                            "name": "a",
                            "count": 1,
                            "accelerator": {"model": "A100-40GB", "count": 2, "mig": "dynamic"},
                        }
                    ]
                },
            }
        )
    )
    assert main(["cluster", "render", "-c", str(fleet)]) == 0
    rendered = tmp_path / "objs.yaml"
    rendered.write_text(capsys.readouterr().out)
    claim = tmp_path / "claim.yaml"
    claim.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": "c", "namespace": "default"},
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "r",
                                "exactly": {
                                    "deviceClassName": "mig.nvidia.com",
                                    "count": 3,
                                    "selectors": [
                                        {
                                            "cel": {
                                                "expression": "device.attributes['gpu.nvidia.com'].profile"
                                                " == '2g.10gb'"
                                            }
                                        }
                                    ],
                                },
                            }
                        ]
                    }
                },
            }
        )
    )
    assert main(["allocate", "-f", str(rendered), "-f", str(claim), "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    text = json.dumps(out)
    assert text.count("mig-2g10gb-14-") == 3


def test_describe_and_catalog(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cluster", "describe", "-c", "mixed"]) == 0
    out = capsys.readouterr().out
    assert "dynamic MIG" in out and "a100" in out and "total" in out
    assert main(["cluster", "describe", "-c", "alibaba-openb", "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["nodes"] == 1213 and sum(p["accelerators"] for p in doc["pools"]) == 6212
    assert main(["cluster", "catalog"]) == 0
    assert "H100-SXM-80GB" in capsys.readouterr().out
    assert main(["cluster", "fleets"]) == 0
    assert "uniform-500" in capsys.readouterr().out


def test_bad_input_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cluster", "render", "-c", "no-such-fleet"]) == 2
    assert "not a bundled fleet" in capsys.readouterr().err
    # An empty name and a folder name the fleet and the rule (an empty path read the current folder).
    assert main(["cluster", "render", "-c", ""]) == 2
    err = capsys.readouterr().err
    assert err == "error: fleet '': Required value: a bundled fleet name or a fleet file\n"
    assert main(["cluster", "render", "-c", str(tmp_path)]) == 2
    assert f"fleet '{tmp_path}': Is a directory: a fleet is one Fleet" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: kdra.dev/v1alpha1\nkind: Fleet\nmetadata: {name: b}\nspec:\n  pools:\n"
        "  - {name: p, count: 2, accelerator: {model: H100, count: 8, mig: {mode: static, "
        "layout: [7g.80gb, 7g.80gb]}}}\n"
    )
    assert main(["cluster", "describe", "-c", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "pool p (spec.pools[0])" in err and "mig.layout" in err and "Traceback" not in err
