"""Feature gates per Kubernetes release: defaults, locks, dependencies, --feature-gates parsing, and the
allocator variant kube-scheduler would pick."""

from __future__ import annotations

import pytest

from kdra.allocator import FeatureGates
from kdra.api.features import DEFAULT_VERSION, GATES, picks_deterministically
from kdra.errors import InputError


def test_default_is_1_37_and_for_version_selects_the_release() -> None:
    assert DEFAULT_VERSION == "1.37"
    assert FeatureGates().version == "1.37"
    assert FeatureGates.for_version("1.36").version == "1.36"
    with pytest.raises(
        InputError, match=r"unsupported Kubernetes version '1.35' \(supported: 1.36, 1.37, 1.38\)"
    ):
        FeatureGates.for_version("1.35")


@pytest.mark.parametrize("version", ["1.36", "1.37"])
def test_ga_and_beta_on_alpha_off(version: str) -> None:
    g = FeatureGates.for_version(version)
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
    assert g.variant == "incubating"


def test_release_differences_in_defaults() -> None:
    v136, v137 = FeatureGates.for_version("1.36"), FeatureGates.for_version("1.37")
    # DRADeviceTaintRules: beta and off in 1.36, GA and on in 1.37; DRAFractionalCapacityRange is new.
    assert not v136.enabled("DRADeviceTaintRules") and v137.enabled("DRADeviceTaintRules")
    assert "DRAFractionalCapacityRange" not in GATES["1.36"] and v137.fractional_capacity_range
    for alpha in ("DRADeviceCompatibilityGroups", "DRADerivedAttributes", "DRAOptionalNodeOperations"):
        assert not v137.enabled(alpha)
    with pytest.raises(InputError, match="unrecognized feature gate: DRADerivedAttributes"):
        FeatureGates.parse("DRADerivedAttributes=true", version="1.36")


def test_parse_overrides_defaults_of_the_release() -> None:
    g = FeatureGates.parse("DRAConsumableCapacity=false, DRAListTypeAttributes=true", version="1.36")
    assert g.version == "1.36"
    assert not g.consumable_capacity and g.enabled("DRAListTypeAttributes") and g.prioritized_list
    # kube-scheduler 1.36 passes DRAListTypeAttributes only to CEL, 1.37 also to the allocator.
    assert not g.list_type_attributes and g.cel_list_type_attributes
    g37 = FeatureGates.parse("DRAListTypeAttributes=true")
    assert g37.list_type_attributes and g37.variant == "experimental"


@pytest.mark.parametrize(
    ("version", "text", "message"),
    [
        (
            "1.36",
            "DRAAdminAccess=false",
            "cannot set feature gate DRAAdminAccess to false, feature is locked to true",
        ),
        (
            "1.37",
            "DRAPrioritizedList=false",
            "cannot set feature gate DRAPrioritizedList to false, feature is locked",
        ),
        (
            "1.37",
            "DRAResourceClaimDeviceStatus=false",
            "DRAResourceClaimDeviceStatus to false, feature is locked",
        ),
        (
            "1.36",
            "DRAResourceClaimDeviceStatus=false",
            "DRADeviceBindingConditions is enabled, but depends on features that are disabled: "
            "[DRAResourceClaimDeviceStatus]",
        ),
        (
            "1.37",
            "DRAConsumableCapacity=false",
            "DRAFractionalCapacityRange is enabled, but depends on features that are disabled: "
            "[DRAConsumableCapacity]",
        ),
        (
            "1.37",
            "DRADeviceTaints=false",
            "DRADeviceTaintRules is enabled, but depends on features that are disabled: [DRADeviceTaints]",
        ),
        # 1.38 (pkg/features/kube_features.go at v1.38.0-beta.0): GA gates locked, DRA itself ungated.
        ("1.38", "DRADeviceTaints=false", "DRADeviceTaints to false, feature is locked to true"),
        ("1.38", "DRAPartitionableDevices=false", "DRAPartitionableDevices to false, feature is locked"),
        (
            "1.38",
            "DRADeviceBindingConditions=false",
            "DRADeviceBindingConditions to false, feature is locked",
        ),
        ("1.38", "DynamicResourceAllocation=true", "unrecognized feature gate: DynamicResourceAllocation"),
        ("1.38", "DRAPreemption=true", "unrecognized feature gate: DRAPreemption"),
        (
            "1.38",
            "DRAConsumableCapacity=false",
            "DRAFractionalCapacityRange is enabled, but depends on features that are disabled: "
            "[DRAConsumableCapacity]",
        ),
    ],
)
def test_parse_refuses_locked_gates_and_missing_dependencies_like_the_components(
    version: str, text: str, message: str
) -> None:
    with pytest.raises(InputError) as info:
        FeatureGates.parse(text, version=version)
    assert message in str(info.value)


def test_parse_accepts_a_consistent_set() -> None:
    g = FeatureGates.parse("DRAConsumableCapacity=false,DRAFractionalCapacityRange=false")
    assert not g.consumable_capacity and not g.fractional_capacity_range
    g = FeatureGates.parse("DRADeviceTaints=false,DRADeviceTaintRules=false", version="1.37")
    assert not g.device_taints
    assert FeatureGates.parse("DRADeviceTaints=false", version="1.36").version == "1.36"


def test_binding_conditions_need_device_status_too() -> None:
    g = FeatureGates.for_version("1.36").with_gates(DRAResourceClaimDeviceStatus=False)
    assert not g.device_binding_and_status


@pytest.mark.parametrize("text", ["NoSuchGate=true", "DRAAdminAccess=yes", "DRAAdminAccess", "=true"])
def test_parse_rejects_unknown_names_and_bad_values(text: str) -> None:
    with pytest.raises(InputError):
        FeatureGates.parse(text)


def test_only_sets_the_allocator_switches_directly() -> None:
    g = FeatureGates.only(["DRAPrioritizedList"], "1.36")
    assert g.prioritized_list and not g.admin_access and not g.consumable_capacity
    # The table runs the experimental allocator whatever the switches (1.38's: the incubating code).
    assert g.variant == "experimental"
    assert FeatureGates.only([], "1.38").variant == "incubating"
    # The table's DRAListTypeAttributes is the allocator's switch even in 1.36.
    assert FeatureGates.only(["DRAListTypeAttributes"], "1.36").list_type_attributes


def test_variant_follows_kube_scheduler() -> None:
    base = FeatureGates.for_version("1.37")
    assert base.variant == "incubating"
    off = base.with_gates(
        DRAConsumableCapacity=False, DRAFractionalCapacityRange=False, DRADeviceBindingConditions=False
    )
    assert off.variant == "stable"
    assert base.with_gates(DRADeviceCompatibilityGroups=True).variant == "experimental"


def test_variant_follows_kube_scheduler_1_38() -> None:
    """1.38's stable allocator supports every GA and beta feature and its incubating one every alpha
    feature (structured/internal/{stable,incubating}: SupportedFeatures), so the experimental one is
    never picked; the stable one sorts pools like the others (pools_stable.go)."""
    base = FeatureGates.for_version("1.38")
    assert base.variant == "stable" and base.consumable_capacity and base.fractional_capacity_range
    assert base.with_gates(DRAListTypeAttributes=True).variant == "incubating"
    assert base.with_gates(DRADeviceCompatibilityGroups=True).variant == "incubating"
    assert not base.counter_slices_everywhere and base.stable_distinct_attribute
    assert base.all_on_bad_pool_fails_node and not FeatureGates.for_version("1.37").all_on_bad_pool_fails_node
    assert picks_deterministically("1.38", "stable") and not picks_deterministically("1.37", "stable")


def test_consumable_capacity_can_still_be_switched_off_in_1_38() -> None:
    g = FeatureGates.parse("DRAConsumableCapacity=false,DRAFractionalCapacityRange=false", version="1.38")
    assert not g.consumable_capacity and g.variant == "stable"


def test_with_version_keeps_overrides() -> None:
    g = FeatureGates.parse("DRAPartitionableDevices=false", version="1.36").with_version("1.37")
    assert g.version == "1.37" and not g.partitionable_devices and g.fractional_capacity_range
    assert g.overrides() == {"DRAPartitionableDevices": False}
