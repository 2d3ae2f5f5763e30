"""A whole GPU stays a whole GPU, and `kdra simulate` compares equal work: regression cases from a new user's
session. `nvidia.com/gpu: 1` migrated onto a fleet whose L4s are published with consumable shares must not
become a zero-memory share (4 replicas on one L4); a stream of whole-L4 requests must run under DRA on
`mixed` as under device plugins; device-plugin mode keeps the claims' model choice (GFD product labels);
the headline is over the pods both models placed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kdra.cli.main import main

L4_FLEET = """\
apiVersion: kdra.dev/v1alpha1
kind: Fleet
metadata: {name: l4-shares}
spec:
  pools:
  - name: l4
    count: 2
    namePattern: "l4-{index}"
    cpu: "48"
    memory: 192Gi
    accelerator:
      model: L4
      count: 2
      sharing: {mode: consumable-shares, shares: SHARES}
"""

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: infer, namespace: default}
spec:
  replicas: 4
  selector: {matchLabels: {app: infer}}
  template:
    metadata: {labels: {app: infer}}
    spec:
      NODE_SELECTOR
      containers:
      - name: server
        image: vllm/vllm-openai
        resources:
          limits:
            nvidia.com/gpu: 1
"""


def _replicas(migrated: str) -> list[dict[str, Any]]:
    """The migrated template and four pods of the Deployment, as its ReplicaSet creates them."""
    docs = [d for d in yaml.safe_load_all(migrated) if d]
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    templates = [d for d in docs if d["kind"] == "ResourceClaimTemplate"]
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"infer-{i}", "namespace": "default"},
            "spec": deployment["spec"]["template"]["spec"],
        }
        for i in range(deployment["spec"]["replicas"])
    ]
    return templates + pods


def _migrate_and_allocate(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, shares: str, node_selector: str, *migrate_args: str
) -> tuple[int, Any]:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(L4_FLEET.replace("SHARES", shares))
    capsys.readouterr()
    assert main(["cluster", "render", "-c", str(fleet)]) == 0
    rendered = tmp_path / "rendered.yaml"
    rendered.write_text(capsys.readouterr()[0])
    deployment = tmp_path / "deployment.yaml"
    deployment.write_text(DEPLOYMENT.replace("NODE_SELECTOR", node_selector))
    args = [a.replace("FLEET", str(fleet)) for a in migrate_args]
    assert main(["migrate", *args, str(deployment)]) == 0
    migrated, _ = capsys.readouterr()
    pods = tmp_path / "pods.yaml"
    pods.write_text(yaml.safe_dump_all(_replicas(migrated), sort_keys=False))
    code = main(["allocate", "-f", str(rendered), "-f", str(pods), "-o", "json"])
    out, _err = capsys.readouterr()
    return code, json.loads(out)


def _results(listing: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for c in listing["items"] for r in c["status"]["allocation"]["devices"]["results"]]


@pytest.mark.parametrize("shares", ["unlimited", "4"])
def test_four_migrated_replicas_get_four_different_l4s(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, shares: str
) -> None:
    """`-c FLEET` tells migrate the L4s' shape: each replica takes all of one L4's memory (and shares)."""
    code, listing = _migrate_and_allocate(capsys, tmp_path, shares, "", "-c", "FLEET")
    assert code == 0
    results = _results(listing)
    assert len(results) == 4
    assert len({(r["pool"], r["device"]) for r in results}) == 4
    for r in results:
        assert r["request"] == "server/full-share-1"
        assert r["consumedCapacity"]["memory"] == "23034Mi"
        if shares != "unlimited":
            assert r["consumedCapacity"]["shares"] == shares


def test_a_product_choice_is_enough_to_take_whole_shareable_gpus(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """GFD's product label names the model: its full capacity comes from the catalog, no -c needed."""
    code, listing = _migrate_and_allocate(
        capsys, tmp_path, "unlimited", "nodeSelector: {nvidia.com/gpu.product: NVIDIA-L4}"
    )
    assert code == 0
    assert len({(r["pool"], r["device"]) for r in _results(listing)}) == 4


def test_without_knowing_the_gpus_a_whole_gpu_is_never_a_share(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """No fleet, no product: only GPUs published for one allocation qualify, so on a shares-only fleet
    the replicas wait (exit 1) instead of four landing on one L4 with no memory."""
    code, listing = _migrate_and_allocate(capsys, tmp_path, "unlimited", "")
    assert code == 1
    assert listing["items"] == []
    reasons = listing["explanation"]["unschedulable"][0]["summary"]["reasons"]
    assert "allowMultipleAllocations" in reasons[0]["reason"]


def _simulate(capsys: pytest.CaptureFixture[str], workload: Path) -> dict[str, Any]:
    assert main(["simulate", "--workload", str(workload), "-o", "json"]) == 0
    return json.loads(capsys.readouterr()[0])


def test_a_stream_of_whole_l4s_runs_under_dra_on_mixed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """mixed's L4s exist only as shares: whole-L4 requests take all of one L4's memory (8/8, not 0/8), and
    the headline claims no savings from pods one side did not run."""
    workload = tmp_path / "l4.yaml"
    workload.write_text(
        "apiVersion: kdra.dev/v1alpha1\nkind: WorkloadGenerator\nmetadata: {name: l4-stream}\n"
        "spec:\n  duration: 1d\n  streams:\n"
        "  - {name: l4, type: job, arrivals: {count: 8}, runTime: {min: 2h, max: 4h}, cpu: '4', memory: 16Gi,"
        " gpu: {count: 1, model: L4}}\n"
    )
    doc = _simulate(capsys, workload)
    for mode in ("dra", "device-plugin"):
        assert doc["modes"][mode]["metrics"]["pods_scheduled"] == 8
        assert {p["node"].split("-")[0] for p in doc["modes"][mode]["placements"]} == {"l4"}
    h = doc["headline"]
    assert h["pods_compared"] == 8
    assert h["pods_not_placed_dra"] == h["pods_not_placed_device_plugin"] == 0
    assert h["gpus_saved_at_peak"] == 0.0  # the same whole GPUs on both sides


def test_device_plugin_mode_keeps_the_claims_product_choice(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Claims that select an L4 run on L4 nodes with device plugins too (GFD's product label as a required
    node affinity, what users write today), not on whatever node has a free nvidia.com/gpu."""
    l4 = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA L4'"
    request = {
        "name": "gpu",
        "exactly": {"deviceClassName": "gpu.nvidia.com", "selectors": [{"cel": {"expression": l4}}]},
    }
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "l4", "namespace": "default"},
            "spec": {"spec": {"devices": {"requests": [request]}}},
        }
    ]
    for i in range(6):
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"l4-{i}",
                    "namespace": "default",
                    "annotations": {"kdra.dev/run-time": "2h"},
                },
                "spec": {
                    "containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}],
                    "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "l4"}],
                },
            }
        )
    workload = tmp_path / "pods.yaml"
    workload.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    doc = _simulate(capsys, workload)
    nodes = {p["node"] for p in doc["modes"]["device-plugin"]["placements"]}
    assert len(nodes) > 1 and all(n.startswith("l4-") for n in nodes)
    assert doc["modes"]["device-plugin"]["metrics"]["stranded_gpu_memory_bytes_peak"] == 0
