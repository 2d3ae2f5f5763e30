"""`kdra allocate` accepts every ResourceClaimTemplate the corpus migrates to, on `cluster render -c mixed`.

One pod per migrated pod spec, with the pod spec's claims and containers' claim references (node selection,
which mixed's nodes label their own way, is left out: the question is whether the claims can be allocated).
Each case gets its own namespace, so all pods go through one `kdra allocate` run. Templates asking for
hardware mixed does not have are allocated on the corpus fleet (tests/migrate/fleet.yaml) instead, each with
the reason.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kdra.cli import main as cli_main

from .conftest import case_args, containers, expected, objects, ok_cases, pod_specs

FLEET = Path(__file__).parent / "fleet.yaml"

# (case, role) -> why mixed cannot hold it; these are allocated on the corpus fleet instead.
ELSEWHERE = {
    ("raycluster", "a100"): "A100-80GB: mixed's A100s are 40GB",
    ("cronjob-mig", ""): "MIG 1g.10gb+me: not in mixed's static H100 layout",
    ("tpu-job", ""): "8 TPU chips on one node: mixed's v6e nodes have 4",
}
# Cases no bundled fleet can run, and why.
NOWHERE = {"hami-shares": "no fleet publishes HAMi's hami-core-gpu.project-hami.io devices"}


def _claims_mode(case: str) -> bool:
    return "extended-resource" not in case_args(case) and case not in NOWHERE


def _podspec_claims(spec: dict[str, Any]) -> list[dict[str, Any]]:
    if "podSpecPatch" in spec:
        return (yaml.safe_load(spec["podSpecPatch"]) or {}).get("resourceClaims") or []
    return spec.get("resourceClaims") or []


def _pods(case: str, namespace: str) -> tuple[list[dict[str, Any]], list[tuple[str, dict[str, Any]]]]:
    """(templates, [(role, pod)]) of a case, moved into `namespace`."""
    objs = objects(expected(case))
    templates = []
    for obj in objs:
        if obj.get("kind") == "ResourceClaimTemplate":
            template = copy.deepcopy(obj)
            template["metadata"]["namespace"] = namespace
            templates.append(template)
    pods = []
    for number, obj in enumerate(objs):
        for index, (_, role, spec) in enumerate(pod_specs(obj)):
            claims = _podspec_claims(spec)
            if not claims:
                continue
            pod_containers = [
                {
                    "name": c.get("name", "main"),
                    "image": "x",
                    "resources": {"claims": c["resources"]["claims"]},
                }
                for c in containers(spec)
                if (c.get("resources") or {}).get("claims")
            ]
            # the object's number too: two objects of a kind in one case have the same roles
            name = f"{obj['kind'].lower()}-{number}-{index}-{role or 'pod'}"[:63].strip("-")
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace, "uid": f"{namespace}-{name}"},
                "spec": {"containers": pod_containers, "resourceClaims": claims},
            }
            # The migrated tolerations go along: `kdra allocate` honours node taints as kube-scheduler does,
            # and the ExtendedResourceToleration ones migrate writes let TPU pods onto mixed's tainted TPU
            # nodes. Node selectors stay behind: cloud labels (zones, node pools) mixed does not have.
            if spec.get("tolerations"):
                pod["spec"]["tolerations"] = spec["tolerations"]
            pods.append((role, pod))
    return templates, pods


def _allocate(fleet_file: Path, objs: list[dict[str, Any]], tmp_path: Path) -> tuple[int, str, str]:
    inputs = tmp_path / "objects.yaml"
    inputs.write_text(yaml.safe_dump_all(objs))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main.main(["allocate", "-f", str(fleet_file), "-f", str(inputs), "-o", "json"])
    return code, out.getvalue(), err.getvalue()


def _render(argv: list[str], target: Path) -> Path:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli_main.main(["cluster", "render", *argv]) == 0
    target.write_text(out.getvalue())
    return target


@pytest.fixture(scope="module")
def fleets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("fleets")
    return {
        "mixed": _render(["-c", "mixed"], folder / "mixed.yaml"),
        "corpus": _render(["-c", str(FLEET)], folder / "corpus.yaml"),
    }


BATCH = 6  # cases per `kdra allocate` run: each run starts from an empty mixed fleet


def test_every_migrated_claim_allocates_on_mixed_or_where_the_hardware_is(
    fleets: dict[str, Path], tmp_path: Path
) -> None:
    cases = [c for c in ok_cases() if _claims_mode(c)]
    batches: list[dict[str, list[dict[str, Any]]]] = []
    wanted: list[dict[str, set[str]]] = []
    for number, case in enumerate(cases):
        if number % BATCH == 0:
            batches.append({"mixed": [], "corpus": []})
            wanted.append({"mixed": set(), "corpus": set()})
        namespace = f"case-{number}"
        templates, pods = _pods(case, namespace)
        for fleet in batches[-1]:
            batches[-1][fleet] += templates
        for role, pod in pods:
            fleet = "corpus" if (case, role) in ELSEWHERE else "mixed"
            batches[-1][fleet].append(pod)
            wanted[-1][fleet].add(f"{namespace}/{pod['metadata']['name']}")
    assert sum(len(w["mixed"]) for w in wanted) >= 30
    for batch, names in zip(batches, wanted, strict=True):
        for fleet, objs in batch.items():
            if not names[fleet]:
                continue
            code, out, err = _allocate(fleets[fleet], objs, tmp_path)
            assert code == 0, f"{fleet}: {err}"
            claims = json.loads(out)["items"]
            reserved = {
                f"{c['metadata']['namespace']}/{r['name']}"
                for c in claims
                for r in c["status"]["reservedFor"]
            }
            assert names[fleet] <= reserved, sorted(names[fleet] - reserved)


def test_elsewhere_is_really_missing_from_mixed(fleets: dict[str, Path], tmp_path: Path) -> None:
    """The exceptions stay honest: each of them does not fit on mixed."""
    for number, (case, role) in enumerate(sorted(ELSEWHERE)):
        templates, pods = _pods(case, f"elsewhere-{number}")
        pod = next(p for r, p in pods if r == role)
        code, _, err = _allocate(fleets["mixed"], [*templates, pod], tmp_path)
        assert code == 1, (case, role, ELSEWHERE[(case, role)])
        assert "cannot allocate" in err
