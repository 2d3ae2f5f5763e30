"""The upstream-table adapter (tests/scenarios/tools/adapt_upstream.py) regenerates the corpus without
losing what was recorded per Kubernetes version after generation."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import yaml

TOOL = Path(__file__).parent / "tools" / "adapt_upstream.py"


def adapter() -> Any:
    spec = importlib.util.spec_from_file_location("adapt_upstream", TOOL)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_regenerating_keeps_per_version_expectations_the_version_pin_and_its_note() -> None:
    generated = {
        "name": "too-many",
        "description": "Upstream allocator test TestAllocator/too-many, adapted.",
        "cites": ["TestAllocator/too-many"],
        "featureGates": {"DRAPrioritizedList": False},
        "objects": [],
        "expect": {"error": "claim default/claim-0: number of requested devices 33 exceeds the claim limit"},
    }
    on_disk = {
        **generated,
        "description": generated["description"] + " Kubernetes 1.36 only: DRAPrioritizedList is locked on.",
        "kubernetesVersion": "1.36",
        "expectByVersion": {"1.37": {"error": "claim default/claim-0, request req-1: adding 1 devices"}},
    }
    kept = adapter().keep_version_facts(generated, yaml.safe_load(yaml.safe_dump(on_disk)))
    assert kept["expectByVersion"] == on_disk["expectByVersion"]
    assert kept["kubernetesVersion"] == "1.36" and kept["description"] == on_disk["description"]
    # As `python -m support.corpus --record` writes them: the pin after cites, expectByVersion after expect.
    keys = list(kept)
    assert keys.index("kubernetesVersion") == keys.index("cites") + 1
    assert keys.index("expectByVersion") == keys.index("expect") + 1
    assert kept["expect"] == generated["expect"]  # the generated expectation is upstream's, not the file's


def test_a_case_the_upstream_table_changed_takes_the_new_text_and_drops_nothing_else() -> None:
    generated = {"name": "c", "description": "New text.", "cites": [], "objects": [], "expect": {"ok": True}}
    kept = adapter().keep_version_facts(generated, {"description": "Old text.", "expect": {"ok": False}})
    assert kept == generated
