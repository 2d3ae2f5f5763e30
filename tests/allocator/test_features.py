"""Feature gates: Kubernetes 1.36 defaults and --feature-gates parsing."""

from __future__ import annotations

import pytest

from kdra.allocator import FeatureGates
from kdra.errors import InputError


def test_1_36_defaults_ga_and_beta_on_alpha_off() -> None:
    g = FeatureGates()
    for name in (
        "DRAPrioritizedList",
        "DRAAdminAccess",
        "DRAPartitionableDevices",
        "DRADeviceTaints",
        "DRAConsumableCapacity",
        "DRADeviceBindingConditions",
        "DRAResourceClaimDeviceStatus",
        "DRAExtendedResource",
    ):
        assert g.enabled(name), name
    assert not g.enabled("DRAListTypeAttributes")
    assert g.device_binding_and_status and g.consumable_capacity and not g.list_type_attributes


def test_parse_overrides_defaults() -> None:
    g = FeatureGates.parse("DRAConsumableCapacity=false, DRAListTypeAttributes=true")
    assert not g.consumable_capacity
    assert g.list_type_attributes
    assert g.prioritized_list


def test_binding_conditions_need_device_status_too() -> None:
    assert not FeatureGates.parse("DRAResourceClaimDeviceStatus=false").device_binding_and_status


@pytest.mark.parametrize("text", ["NoSuchGate=true", "DRAAdminAccess=yes", "DRAAdminAccess", "=true"])
def test_parse_rejects_unknown_names_and_bad_values(text: str) -> None:
    with pytest.raises(InputError):
        FeatureGates.parse(text)


def test_only_turns_everything_else_off() -> None:
    g = FeatureGates.only(["DRAPrioritizedList"])
    assert g.prioritized_list and not g.admin_access and not g.consumable_capacity
    assert FeatureGates.parse(str(g)) == g
