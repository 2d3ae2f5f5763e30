"""Feature gates and the Kubernetes release they belong to (1.36, 1.37 or 1.38).

A `FeatureGates` carries a Kubernetes minor version and the values of that release's DRA feature gates
(names as in pkg/features/kube_features.go). Everything that behaves differently between releases reads
it from the `FeatureGates` it is given, never from a global: the gates' defaults and locks, API
validation, the CEL environment and the allocator's behaviour (the `v1_37`-style switches below).

The allocator reads the gates through the switches upstream's `structured.Features` struct has
(structured/internal/types.go), mapped the way that release's kube-scheduler maps them
(dynamicresources.AllocatorFeatures): in 1.36 DRAListTypeAttributes reaches only the CEL environment,
in 1.37 and 1.38 also the allocator. `FeatureGates.only([...])` instead sets the allocator's switches directly
(how upstream's allocator test table lists them), locks and dependencies not applied.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from kdra.api.versions import DEFAULT_VERSION, SUPPORTED_VERSIONS, KubernetesVersion, check_version
from kdra.errors import InputError

__all__ = [
    "DEFAULTS",
    "DEFAULT_VERSION",
    "DEPENDENCIES",
    "GATES",
    "SUPPORTED_VERSIONS",
    "FeatureGates",
    "GateSpec",
    "KubernetesVersion",
    "check_version",
    "picks_deterministically",
]


@dataclass(frozen=True, slots=True)
class GateSpec:
    """One gate at one release: default, maturity and whether it is locked to its default."""

    default: bool
    stage: Literal["alpha", "beta", "GA"]
    locked: bool = False


_A_OFF = GateSpec(False, "alpha")
_B_ON = GateSpec(True, "beta")
_B_OFF = GateSpec(False, "beta")
_GA = GateSpec(True, "GA")
_GA_LOCKED = GateSpec(True, "GA", locked=True)

# The DRA gates of each release, and GenericWorkload (the Workload API, which DRAWorkloadResourceClaims needs)
# (k8s.io/kubernetes pkg/features/kube_features.go at the build kdra.api.versions.BUILDS pins: v1.36.3,
# v1.37.2, v1.38.0-beta.0).
GATES: dict[str, dict[str, GateSpec]] = {
    "1.36": {
        "DynamicResourceAllocation": _GA_LOCKED,
        "DRAAdminAccess": _GA_LOCKED,
        "DRAConsumableCapacity": _B_ON,
        "DRADeviceBindingConditions": _B_ON,
        "DRADeviceTaintRules": _B_OFF,  # beta, off: depends on an off-by-default beta API
        "DRADeviceTaints": _B_ON,
        "DRAExtendedResource": _B_ON,
        "DRAListTypeAttributes": _A_OFF,
        "DRANodeAllocatableResources": _A_OFF,
        "DRAPartitionableDevices": _B_ON,
        "DRAPrioritizedList": _GA,
        "DRAResourceClaimDeviceStatus": _B_ON,
        "DRAResourceClaimGranularStatusAuthorization": _B_ON,
        "DRAResourcePoolStatus": _A_OFF,
        "DRASchedulerFilterTimeout": _B_ON,
        "DRAWorkloadResourceClaims": _A_OFF,
        "GenericWorkload": _A_OFF,  # the Workload API; DRAWorkloadResourceClaims needs it
    },
    "1.37": {
        "DynamicResourceAllocation": _GA_LOCKED,
        "DRAAdminAccess": _GA_LOCKED,
        "DRAConsumableCapacity": _B_ON,
        "DRADerivedAttributes": _A_OFF,
        "DRADeviceBindingConditions": _B_ON,
        "DRADeviceCompatibilityGroups": _A_OFF,
        "DRADeviceTaintRules": _GA,
        "DRADeviceTaints": _GA,
        "DRAExtendedResource": _GA_LOCKED,
        "DRAFractionalCapacityRange": _B_ON,
        "DRAListTypeAttributes": _A_OFF,
        "DRANodeAllocatableResources": _A_OFF,
        "DRAOptionalNodeOperations": _A_OFF,
        "DRAPartitionableDevices": _B_ON,
        "DRAPartitionableDevicesType": _A_OFF,
        "DRAPrioritizedList": _GA_LOCKED,
        "DRAResourceClaimDeviceStatus": _GA_LOCKED,
        "DRAResourceClaimGranularStatusAuthorization": _B_ON,
        "DRAResourcePoolStatus": _A_OFF,
        "DRASchedulerFilterTimeout": _B_ON,
        "DRAWorkloadResourceClaims": _B_OFF,
        "GenericWorkload": _B_OFF,
    },
    # 1.38: DynamicResourceAllocation is gone (DRA is no longer gated); DRAPartitionableDevices,
    # DRADeviceBindingConditions GA and locked, DRADeviceTaints/DRADeviceTaintRules locked;
    # DRAConsumableCapacity and DRAFractionalCapacityRange GA, not locked yet. No DRAPreemption and no
    # DRAExtendedResourceCapacity gate in v1.38.0-beta.0.
    "1.38": {
        "DRAAdminAccess": _GA_LOCKED,
        "DRAConsumableCapacity": _GA,
        "DRADerivedAttributes": _A_OFF,
        "DRADeviceBindingConditions": _GA_LOCKED,
        "DRADeviceCompatibilityGroups": _A_OFF,
        "DRADeviceTaintRules": _GA_LOCKED,
        "DRADeviceTaints": _GA_LOCKED,
        "DRAExtendedResource": _GA_LOCKED,
        "DRAFractionalCapacityRange": _GA,
        "DRAListTypeAttributes": _A_OFF,
        "DRANodeAllocatableResources": _A_OFF,
        "DRAOptionalNodeOperations": _A_OFF,
        "DRAPartitionableDevices": _GA_LOCKED,
        "DRAPartitionableDevicesType": _A_OFF,
        "DRAPrioritizedList": _GA_LOCKED,
        "DRAResourceClaimDeviceStatus": _GA_LOCKED,
        "DRAResourceClaimGranularStatusAuthorization": _B_ON,
        "DRAResourcePoolStatus": _A_OFF,
        "DRASchedulerFilterTimeout": _B_ON,
        "DRAWorkloadResourceClaims": _B_OFF,
        "GenericWorkload": _B_OFF,
    },
}

# Gate -> gates it needs (defaultKubernetesFeatureGateDependencies; DynamicResourceAllocation, locked
# on, and other non-DRA gates left out: NodeDeclaredFeatures is on in every release). The components refuse
# a set where a gate is on and a gate it needs is off.
DEPENDENCIES: dict[str, dict[str, tuple[str, ...]]] = {
    "1.36": {
        "DRADeviceBindingConditions": ("DRAResourceClaimDeviceStatus",),
        "DRADeviceTaintRules": ("DRADeviceTaints",),
        "DRAResourceClaimGranularStatusAuthorization": ("DRAResourceClaimDeviceStatus",),
        "DRAWorkloadResourceClaims": ("GenericWorkload",),
    },
    "1.37": {
        "DRADeviceBindingConditions": ("DRAResourceClaimDeviceStatus",),
        "DRADeviceCompatibilityGroups": ("DRAPartitionableDevices",),
        "DRADeviceTaintRules": ("DRADeviceTaints",),
        "DRAFractionalCapacityRange": ("DRAConsumableCapacity",),
        "DRAPartitionableDevicesType": ("DRAPartitionableDevices", "DRAResourcePoolStatus"),
        "DRAResourceClaimGranularStatusAuthorization": ("DRAResourceClaimDeviceStatus",),
        "DRAWorkloadResourceClaims": ("GenericWorkload",),
    },
}
DEPENDENCIES["1.38"] = dict(DEPENDENCIES["1.37"])  # unchanged (defaultKubernetesFeatureGateDependencies)


def picks_deterministically(version: str, variant: str) -> bool:
    """Whether upstream's allocator `variant` of release `version` picks devices deterministically:
    every one but the stable allocator of 1.36 and 1.37, which walks pools in Go map order (1.38's
    sorts pools and slices by name as the others do: structured/internal/stable/pools_stable.go)."""
    return variant != "stable" or version not in ("1.36", "1.37")


DEFAULTS: dict[str, dict[str, bool]] = {v: {n: s.default for n, s in g.items()} for v, g in GATES.items()}
DEFAULTS_1_36 = DEFAULTS["1.36"]
DEFAULTS_1_37 = DEFAULTS["1.37"]


@dataclass(frozen=True)
class FeatureGates:
    """An immutable set of feature-gate values of one Kubernetes release; unknown names are rejected
    so typos are not silent. `FeatureGates()` is the default release (kdra.api.versions) with its
    defaults."""

    gates: Mapping[str, bool] = field(default_factory=dict)
    version: KubernetesVersion = DEFAULT_VERSION
    # False only for `only()`: the gates are the allocator's switches themselves (upstream's test
    # table), not what kube-scheduler would pass on.
    scheduler: bool = True

    def __post_init__(self) -> None:
        version = check_version(self.version)
        defaults = DEFAULTS[version]
        unknown = sorted(set(self.gates) - set(defaults))
        if unknown:
            raise InputError(f"unknown feature gate(s) in Kubernetes {version}: {', '.join(unknown)}")
        merged = dict(defaults)
        merged.update(self.gates)
        object.__setattr__(self, "gates", merged)

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def defaults(cls, version: str = DEFAULT_VERSION) -> FeatureGates:
        return cls({}, check_version(version))

    @classmethod
    def for_version(cls, version: str) -> FeatureGates:
        """The release's defaults, e.g. `FeatureGates.for_version("1.36")`."""
        return cls.defaults(version)

    @classmethod
    def parse(cls, text: str, base: FeatureGates | None = None, version: str | None = None) -> FeatureGates:
        """`--feature-gates` as the release's components read it: `Name=true,Other=false` applied on
        top of `base` (or the version's defaults). Unknown names, bad values, a locked gate set to
        anything but its default and a gate on whose dependency is off are refused with the
        components' wording."""
        ver = check_version(version or (base.version if base is not None else DEFAULT_VERSION))
        specs = GATES[ver]
        values = dict(base.gates) if base is not None and base.version == ver else dict(DEFAULTS[ver])
        errors: list[str] = []
        flag = f"--feature-gates (Kubernetes {ver}): "  # every refusal names the flag and the release
        for raw in text.split(","):
            item = raw.strip()
            if not item:
                continue
            name, sep, value = item.partition("=")
            name = name.strip()
            if not sep:
                raise InputError(f"{flag}invalid feature gate {item!r}: expected Name=true|false")
            if name not in specs:
                known = ", ".join(sorted(specs))
                raise InputError(f"{flag}unrecognized feature gate: {name} (known gates: {known})")
            lowered = value.strip().lower()
            if lowered not in ("true", "false"):
                bad = f"{name}={value.strip()}"
                raise InputError(f"{flag}invalid value of {bad}, err: expected true or false")
            on = lowered == "true"
            spec = specs[name]
            if spec.locked and on != spec.default:
                errors.append(
                    f"cannot set feature gate {name} to {lowered}, feature is locked to "
                    f"{'true' if spec.default else 'false'}"
                )
                continue
            values[name] = on
        if not errors:
            for gate, needs in sorted(DEPENDENCIES[ver].items()):
                if not values.get(gate, False):
                    continue
                off = [n for n in needs if not values.get(n, False)]
                if off:
                    errors.append(
                        f"{gate} is enabled, but depends on features that are disabled: [{' '.join(off)}]"
                    )
        if errors:
            raise InputError(flag + "; ".join(errors))
        return cls(values, ver)

    @classmethod
    def only(cls, enabled: Iterable[str], version: str = DEFAULT_VERSION) -> FeatureGates:
        """Exactly the named gates on and every other gate off, as the allocator's own switches (how
        upstream's allocator test table lists them); locks and dependencies do not apply."""
        ver = check_version(version)
        names = set(enabled)
        unknown = sorted(names - set(DEFAULTS[ver]))
        if unknown:
            raise InputError(f"unknown feature gate(s) in Kubernetes {ver}: {', '.join(unknown)}")
        return cls({name: name in names for name in DEFAULTS[ver]}, ver, scheduler=False)

    def with_gates(self, **changes: bool) -> FeatureGates:
        """A copy with some gates changed (programmatic: no lock or dependency checks)."""
        values = dict(self.gates)
        values.update(changes)
        return FeatureGates(values, self.version, self.scheduler)

    def with_version(self, version: str) -> FeatureGates:
        """The same overrides of the defaults, on another release (gates it does not know dropped)."""
        ver = check_version(version)
        if ver == self.version:
            return self
        base = DEFAULTS[self.version]
        changed = {k: v for k, v in self.gates.items() if base.get(k) != v and k in DEFAULTS[ver]}
        return FeatureGates(changed, ver, self.scheduler)

    def enabled(self, name: str) -> bool:
        return bool(self.gates.get(name, False))

    def overrides(self) -> dict[str, bool]:
        """The gates that differ from the release's defaults (what `--feature-gates` would say)."""
        base = DEFAULTS[self.version]
        return {k: v for k, v in sorted(self.gates.items()) if base.get(k) != v}

    def __str__(self) -> str:
        return ",".join(f"{k}={'true' if v else 'false'}" for k, v in sorted(self.gates.items()))

    def __hash__(self) -> int:
        return hash((self.version, self.scheduler, tuple(sorted(self.gates.items()))))

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, FeatureGates)
            and self.version == other.version
            and self.scheduler == other.scheduler
            and dict(self.gates) == dict(other.gates)
        )

    # -- the allocator's switches (upstream structured.Features) --------------------------------
    @property
    def admin_access(self) -> bool:
        return self.enabled("DRAAdminAccess")

    @property
    def prioritized_list(self) -> bool:
        return self.enabled("DRAPrioritizedList")

    @property
    def partitionable_devices(self) -> bool:
        return self.enabled("DRAPartitionableDevices")

    @property
    def device_taints(self) -> bool:
        return self.enabled("DRADeviceTaints")

    @property
    def device_taint_rules(self) -> bool:
        """Whether kube-scheduler's ResourceSlice tracker applies DeviceTaintRules to slices."""
        return self.enabled("DRADeviceTaintRules")

    @property
    def device_binding_and_status(self) -> bool:
        return self.enabled("DRADeviceBindingConditions") and self.enabled("DRAResourceClaimDeviceStatus")

    @property
    def consumable_capacity(self) -> bool:
        return self.enabled("DRAConsumableCapacity")

    @property
    def list_type_attributes(self) -> bool:
        """The allocator's ListTypeAttributes switch (set semantics in matchAttribute/distinctAttribute).
        kube-scheduler 1.36 does not pass the gate to the allocator (only to CEL); 1.37 does."""
        if self.scheduler and self.version == "1.36":
            return False
        return self.enabled("DRAListTypeAttributes")

    @property
    def fractional_capacity_range(self) -> bool:
        return self.enabled("DRAFractionalCapacityRange")

    @property
    def compatibility_groups(self) -> bool:
        return self.enabled("DRADeviceCompatibilityGroups")

    @property
    def derived_attributes(self) -> bool:
        return self.enabled("DRADerivedAttributes")

    @property
    def optional_node_operations(self) -> bool:
        return self.enabled("DRAOptionalNodeOperations")

    # -- CEL ----------------------------------------------------------------------------------
    @property
    def cel_lazy_attributes(self) -> bool:
        """How CEL sees an attribute value it cannot represent (unknown type, unparsable version): 1.36
        and 1.37 fail every selector on such a device; 1.38 only an expression that reads it ("value is
        invalid or its type is not supported by this version"), and `in` does not see it."""
        return self.version not in ("1.36", "1.37")

    @property
    def cel_container_note(self) -> bool:
        """Whether CEL's "undeclared reference to 'x'" errors end with " (in container '')": cel-go up
        to 0.29 (1.36, 1.37) says so; cel.dev/cel-go 0.33 (1.38) leaves the empty container out."""
        return self.version in ("1.36", "1.37")

    @property
    def cel_list_type_attributes(self) -> bool:
        """Whether CEL gives list-valued attributes to stored selectors (the scheduler's environment).
        1.36 only with DRAListTypeAttributes (else such a device fails every selector with
        "unsupported attribute value"); 1.37's stored-expression environment always declares and
        converts them."""
        return self.version != "1.36" or self.enabled("DRAListTypeAttributes")

    # -- behaviour that changed between releases (what the allocator checks) -------------------
    @property
    def v1_36(self) -> bool:
        """Kubernetes 1.36 allocator behaviour: slices with sharedCounters visible from every node,
        shared counters keyed by pool name alone, distinctAttribute remembering one value per request,
        `All` dropping shareable devices without enough capacity left, the 1.36 claim-limit and CEL
        runtime error texts, binding conditions copied into results by the incubating allocator."""
        return self.version == "1.36"

    @property
    def counter_slices_everywhere(self) -> bool:
        """Slices with sharedCounters are visible from every node, whatever their node selection: 1.36,
        and 1.37's stable allocator (its incubating and experimental ones dropped this; 1.38's stable
        allocator gathers pools as its incubating one does)."""
        return self.version == "1.36" or (self.version == "1.37" and self.variant == "stable")

    @property
    def all_on_bad_pool_fails_node(self) -> bool:
        """An `All` request meeting an incomplete or invalid pool rules out this node only (1.38: the
        error wraps ErrFailedAllocationOnNode); before, it failed the whole scheduling attempt."""
        return self.version not in ("1.36", "1.37")

    @property
    def unsupported_attribute_fails(self) -> bool:
        """A matchAttribute/distinctAttribute constraint meeting a list value (without DRAListTypeAttributes)
        fails the attempt with "unsupported attribute value" (1.38); before, the device did not match."""
        return self.version not in ("1.36", "1.37")

    @property
    def qualified_capacity_names(self) -> bool:
        """Capacity names resolve to fully-qualified ones (`mem` is `<driver>/mem`), a request naming one
        capacity both ways is an error, and a negative request is refused before rounding (1.38)."""
        return self.version not in ("1.36", "1.37")

    @property
    def share_blocks_exclusive(self) -> bool:
        """A device that does not allow multiple allocations but still carries a share (allocated
        before allowMultipleAllocations was switched off) cannot be allocated exclusively (1.38)."""
        return self.version not in ("1.36", "1.37")

    @property
    def semver_constraints(self) -> bool:
        """matchAttribute/distinctAttribute compare versions as semver (build metadata ignored, 1.38);
        before, as strings."""
        return self.version not in ("1.36", "1.37")

    @property
    def stable_distinct_attribute(self) -> bool:
        """Whether the stable allocator knows distinctAttribute (1.38's does; before, "empty constraint")."""
        return self.version not in ("1.36", "1.37")

    @property
    def alpha_variant(self) -> str:
        """The allocator that implements the release's alpha features (optional node operations,
        compatibility groups, derived attributes, list-type attributes): "experimental" until 1.37;
        1.38's incubating allocator is its experimental one (both support every feature)."""
        return "experimental" if self.version in ("1.36", "1.37") else "incubating"

    @property
    def variant(self) -> str:
        """The upstream allocator kube-scheduler picks for these switches (structured.NewAllocator: the
        first of stable, incubating, experimental whose SupportedFeatures hold every enabled one)."""
        if not self.scheduler:
            # Upstream's test table (`only()`) runs the experimental allocator whatever the switches.
            return self.alpha_variant
        alpha = self.list_type_attributes or (
            self.version != "1.36"
            and (self.compatibility_groups or self.derived_attributes or self.optional_node_operations)
        )
        if alpha:
            return self.alpha_variant
        if self.version in ("1.36", "1.37"):
            # Their stable allocator knows neither consumable capacity nor binding conditions (nor, in
            # 1.37, fractional ranges); 1.38's supports every GA and beta feature.
            stable = not (self.consumable_capacity or self.device_binding_and_status)
            if self.version == "1.37":
                stable = stable and not self.fractional_capacity_range
            return "stable" if stable else "incubating"
        return "stable"
