"""`kdra allocate` answers as kube-scheduler would on the same objects: the node its scores put first, every
pod checked (claims or not), extended resources a DeviceClass serves (KEP-5004), and explanations that show
the nodes that came closest. Regression cases from a new user's session on the bundled `mixed` fleet."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kdra.cli.main import main


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from kdra.fleets import load_fleet, render

    path = tmp_path_factory.mktemp("fleet") / "mixed.yaml"
    path.write_text(yaml.safe_dump_all(render(load_fleet("mixed"), dra=True, legacy=False), sort_keys=False))
    return path


def run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, fleet: Path, objects: list[dict[str, Any]], *args: str
) -> tuple[int, Any, str]:
    f = tmp_path / "objects.yaml"
    f.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    code = main(["allocate", "-f", str(fleet), "-f", str(f), "-o", "json", *args])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, json.loads(out) if out.strip() else None, err


def template(name: str, *requests: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"spec": {"devices": {"requests": list(requests)}}},
    }


def pod(
    name: str, claims: tuple[str, ...] = (), limits: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "busybox", "resources": {}}
    if limits:
        container["resources"]["limits"] = limits
    if claims:
        container["resources"]["claims"] = [{"name": c} for c in claims]
    body: dict[str, Any] = {"containers": [container], **spec}
    if claims:
        body["resourceClaims"] = [{"name": c, "resourceClaimTemplateName": c} for c in claims]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": body,
    }


def product(name: str) -> list[dict[str, Any]]:
    return [{"cel": {"expression": f"device.attributes['gpu.nvidia.com'].productName.contains('{name}')"}}]


def devices(listing: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [
        (r["request"], r["pool"], r["device"])
        for c in listing["items"]
        for r in c["status"]["allocation"]["devices"]["results"]
    ]


def test_first_available_takes_the_h100_the_scheduler_scores_first(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, mixed: Path
) -> None:
    """H100, then L4, then a MIG slice: kube-scheduler scores the H100 nodes highest (prioritized-list
    rank, KEP-4816); a MIG slice on `a100-0` (first by name) is what a by-name choice gave."""
    fa = template(
        "gpu",
        {
            "name": "gpu",
            "firstAvailable": [
                {"name": "h100", "deviceClassName": "gpu.nvidia.com", "selectors": product("H100")},
                {"name": "l4", "deviceClassName": "gpu.nvidia.com", "selectors": product("L4")},
                {"name": "mig", "deviceClassName": "mig.nvidia.com"},
            ],
        },
    )
    code, listing, _ = run(capsys, tmp_path, mixed, [fa, pod("serve", ("gpu",))])
    assert code == 0
    ((request, pool, _device),) = devices(listing)
    assert request == "gpu/h100"
    assert pool.startswith("h100-zone-")
    placement = listing["placements"][0]
    assert placement["node"] == pool
    best = placement["scores"][0]
    assert best["node"] == pool
    assert best["plugins"]["DynamicResources"] == 200  # normalised to 100, weight 2
    assert placement["nodesFit"] > 1


def test_equal_scores_go_to_the_first_node_by_name(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, mixed: Path
) -> None:
    plain = template(
        "gpu", {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "selectors": product("H100")}}
    )
    code, listing, _ = run(capsys, tmp_path, mixed, [plain, pod("train", ("gpu",))])
    assert code == 0
    scores = listing["placements"][0]["scores"]
    assert scores[0]["score"] == scores[1]["score"]
    assert listing["placements"][0]["node"] == "h100-zone-a-0" < scores[1]["node"]


def test_a_pod_without_claims_is_checked_for_its_resources(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, mixed: Path
) -> None:
    """`nvidia.com/gpu: 100` is served by DRA on `mixed` (its gpu.nvidia.com class names the extended
    resource): a claim for 100 devices is beyond the claim limit, an allocation error as kube-scheduler's."""
    code, _, err = run(capsys, tmp_path, mixed, [pod("greedy", limits={"nvidia.com/gpu": "100"})])
    assert code == 3
    assert "greedy-extended-resources-" in err
    assert "exceeds the claim limit of 32" in err


def test_a_pod_without_claims_is_checked_against_device_plugin_capacity(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from kdra.fleets import load_fleet, render

    legacy = tmp_path / "legacy.yaml"
    legacy.write_text(
        yaml.safe_dump_all(render(load_fleet("mixed"), dra=False, legacy=True), sort_keys=False)
    )
    code, listing, err = run(capsys, tmp_path, legacy, [pod("greedy", limits={"nvidia.com/gpu": "100"})])
    assert code == 1
    assert "pod default/greedy: fits on no node" in err
    assert "Insufficient nvidia.com/gpu" in err
    assert listing["explanation"]["unschedulable"][0]["pod"] == "default/greedy"
    code, listing, _ = run(capsys, tmp_path, legacy, [pod("small", limits={"nvidia.com/gpu": "2"})])
    assert code == 0
    assert listing["items"] == []
    assert listing["placements"][0]["node"] == "a100-0"  # GPU nodes tie: the first by name


def test_an_impossible_node_selector_is_unschedulable(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, mixed: Path
) -> None:
    code, _, err = run(capsys, tmp_path, mixed, [pod("lost", nodeSelector={"kdra.dev/accelerator": "B200"})])
    assert code == 1
    assert "didn't match Pod's node affinity/selector" in err


def test_a_claim_plus_extended_resources_is_served_as_simulate_serves_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, mixed: Path
) -> None:
    """One H100 by claim plus `nvidia.com/gpu: 2` (KEP-5004 through the gpu.nvidia.com class): three GPUs
    on one node, the extended-resource claim in the output; `kdra simulate` schedules the same pod."""
    objects = [
        template(
            "gpu",
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "selectors": product("H100")}},
        ),
        pod("both", ("gpu",), limits={"nvidia.com/gpu": "2"}),
    ]
    code, listing, _ = run(capsys, tmp_path, mixed, objects)
    assert code == 0
    names = [c["metadata"]["name"] for c in listing["items"]]
    assert any(n.startswith("both-extended-resources-") for n in names)
    got = devices(listing)
    assert len(got) == 3
    assert len({pool for _, pool, _ in got}) == 1
    assert len({d for _, _, d in got}) == 3
    special = next(c for c in listing["items"] if "extended-resources" in c["metadata"]["name"])
    assert special["status"]["reservedFor"][0]["name"] == "both"
    assert special["spec"]["devices"]["requests"][0]["exactly"]["count"] == 2

    from kdra.sim.engine import DRA
    from kdra.sim.runner import simulate
    from kdra.sim.workload import build_workload

    for o in objects:
        o["metadata"]["annotations"] = {"kdra.dev/run-time": "1h"}
    wl = build_workload(objects, name="both", seed=0)
    report = simulate("mixed", wl, modes=(DRA,))
    assert report.modes[DRA].metrics["pods_scheduled"] == 1


def test_extended_resources_of_a_custom_device_class(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, mixed: Path
) -> None:
    """A DeviceClass naming `extendedResourceName` (KEP-5004, GA in 1.37) serves a pod's limit."""
    l4 = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "l4.example.com"},
        "spec": {
            "selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}, *product("L4")],
            "extendedResourceName": "example.com/l4",
        },
    }
    code, listing, _ = run(capsys, tmp_path, mixed, [l4, pod("infer", limits={"example.com/l4": "1"})])
    assert code == 0
    ((request, pool, _),) = devices(listing)
    assert request == "container-0-request-0"
    assert pool.startswith("l4-")


def test_the_nearest_nodes_are_those_that_came_closest(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, mixed: Path
) -> None:
    """A TPU pod missing only a toleration: the TPU nodes are shown, not three A100 nodes without a TPU."""
    tpu = template("tpu", {"name": "tpu", "exactly": {"deviceClassName": "tpu.google.com", "count": 4}})
    code, listing, err = run(capsys, tmp_path, mixed, [tpu, pod("train", ("tpu",))])
    assert code == 1
    nearest = listing["explanation"]["unschedulable"][0]["summary"]["nearest"]
    assert [n.split("-")[0] for n in nearest] == ["tpu", "tpu", "tpu"]
    assert "node tpu-v6e-0: node(s) had untolerated taint {google.com/tpu: present}" in err


def test_a_device_taint_rule_in_the_input_keeps_pods_off_the_devices_it_selects(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, mixed: Path
) -> None:
    """The rule's taint is added to every device of the pool it selects, as kube-scheduler's slice tracker
    adds it (DRADeviceTaintRules, GA in 1.37): the pod goes to the next H100 node; with --kubernetes-version
    1.36 (the gate off by default) the rule is ignored as there."""
    plain = template(
        "gpu", {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "selectors": product("H100")}}
    )
    rule = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "drain-h100-zone-a-0"},
        "spec": {
            "deviceSelector": {"driver": "gpu.nvidia.com", "pool": "h100-zone-a-0"},
            "taint": {"key": "example.com/drain", "effect": "NoSchedule"},
        },
    }
    code, listing, _ = run(capsys, tmp_path, mixed, [plain, rule, pod("train", ("gpu",))])
    assert code == 0
    assert listing["placements"][0]["node"] == "h100-zone-a-1"
    code, listing, _ = run(
        capsys, tmp_path, mixed, [plain, rule, pod("train", ("gpu",))], "--kubernetes-version", "1.36"
    )
    assert code == 0
    assert listing["placements"][0]["node"] == "h100-zone-a-0"


def test_an_invalid_device_taint_rule_is_refused_naming_the_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, mixed: Path
) -> None:
    rule = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "bad"},
        "spec": {
            "deviceSelector": {"pool": "h100-zone-a-0"},
            "taint": {"key": "k", "effect": "PreferNoSchedule"},
        },
    }
    code, _, err = run(capsys, tmp_path, mixed, [rule])
    assert code == 2
    assert 'DeviceTaintRule bad: spec.taint.effect: Unsupported value: "PreferNoSchedule"' in err


def test_a_device_taint_rule_field_typo_is_refused_as_the_api_server_refuses_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, mixed: Path
) -> None:
    """Strict field validation (kubectl's --validate=strict): a misspelt selector would otherwise taint
    every device (the empty selector matches all)."""
    for version in ("v1", "v1beta2"):
        rule = {
            "apiVersion": f"resource.k8s.io/{version}",
            "kind": "DeviceTaintRule",
            "metadata": {"name": "typo"},
            "spec": {"deviceSelector": {"devise": "gpu-0"}, "taint": {"key": "k", "effect": "NoSchedule"}},
        }
        code, _, err = run(capsys, tmp_path, mixed, [rule])
        assert code == 2
        assert 'DeviceTaintRule typo: spec.deviceSelector.devise: unknown field "devise"' in err
