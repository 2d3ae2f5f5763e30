"""The releases kdra follows are pinned in one place (kdra.api.versions.BUILDS), and the Go modules that
build the control plane and the allocator oracle agree with it (hack/pin.py writes them)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from kdra.api.versions import BUILDS, DEFAULT_VERSION, SUPPORTED_VERSIONS, is_final, library_version

ROOT = Path(__file__).resolve().parents[2]


def _pin_module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("kdra_hack_pin", ROOT / "hack" / "pin.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("minor", list(BUILDS))
def test_go_modules_pin_the_build_kdra_follows(minor: str) -> None:
    """hack/k8s/v1.XX/go.mod requires that k8s.io/kubernetes, tests/oracle/v1.XX/go.mod the matching
    k8s.io/dynamic-resource-allocation: moving a pin without `make pin` fails here."""
    assert _pin_module().stale(minor) == []


def test_the_default_is_the_newest_release_pinned_to_a_final_build() -> None:
    """A pre-release (v1.38.0-beta.0) is selectable but never the default: users get a released
    kube-scheduler's answers unless they ask."""
    finals = [v for v in SUPPORTED_VERSIONS if is_final(BUILDS[v])]
    assert finals[-1] == DEFAULT_VERSION
    assert not is_final("v1.38.0-beta.0")
    assert not is_final("v1.38.0-rc.1")
    assert is_final("v1.38.0")


def test_library_version_is_the_staging_version_of_the_build() -> None:
    assert library_version("1.37") == "v0." + BUILDS["1.37"].removeprefix("v1.")
    assert library_version("1.36").startswith("v0.36.")
