"""With a device preference on, the allocator checks validity, not identity: every allocation still
satisfies every rule (the independent model of test_allocation_properties), and claims fit exactly when
upstream's first fit finds them a place (the search stays exhaustive; only its order changes)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings

from kdra.allocator import Allocator, FeatureGates
from kdra.errors import AllocationError
from kdra.scheduler.devicepref import DEVICE_PREFERENCES, make_device_preference

from .test_allocation_properties import (
    NODE,
    SETTINGS,
    World,
    brute_force_fits,
    check_allocation,
    exclusive_worlds,
    shared_worlds,
)

PCIE = "resource.kubernetes.io/pcieRoot"
NUMA = "resource.kubernetes.io/numaNode"
PREF_SETTINGS = settings(SETTINGS, max_examples=120)  # x 4 policies


def _with_locality(slices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Standard locality attributes (pairs of devices per PCIe root within their NUMA node), so the
    policies' group logic is exercised; no selector or constraint reads them."""
    for s in slices:
        for i, d in enumerate(s["spec"].get("devices") or []):
            numa = d["attributes"]["numa"]["int"]
            d["attributes"][PCIE] = {"string": f"pci{numa}-{i // 2}"}
            d["attributes"][NUMA] = {"int": numa}
    return slices


def _allocate(world: World, policy: str | None) -> tuple[str, list[dict[str, Any]] | None]:
    classes, slices, allocated, claims = world.objects()
    prefer = make_device_preference(policy) if policy else None
    alloc = Allocator(classes, _with_locality(slices), allocated, FeatureGates(), prefer=prefer)
    try:
        outcome = alloc.allocate(NODE, claims)
    except AllocationError as err:
        return f"error: {err}", None
    return ("fit" if outcome.allocations is not None else "no fit"), outcome.allocations


@pytest.mark.parametrize("worlds", [exclusive_worlds, shared_worlds], ids=["exclusive", "shares"])
@pytest.mark.parametrize("policy", DEVICE_PREFERENCES)
def test_preferred_allocations_are_valid_and_fit_as_upstream(policy: str, worlds: Any) -> None:
    @PREF_SETTINGS
    @given(worlds())
    def check(world: World) -> None:
        verdict, allocations = _allocate(world, policy)
        upstream, _ = _allocate(world, None)
        assert verdict == upstream
        if allocations is not None:
            check_allocation(world, allocations)

    check()


@pytest.mark.parametrize("policy", DEVICE_PREFERENCES)
def test_preferred_search_is_complete(policy: str) -> None:
    @PREF_SETTINGS
    @given(exclusive_worlds())
    def check(world: World) -> None:
        for c in world.claims:
            c.distinct_model = False
            if any(r.count == 0 for r in c.requests):
                c.match_numa = False
        verdict, _ = _allocate(world, policy)
        assert (verdict == "fit") == brute_force_fits(world)

    check()
