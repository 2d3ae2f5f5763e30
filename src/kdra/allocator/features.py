"""Feature gates that change allocator behaviour, with Kubernetes 1.36 defaults.

Names are Kubernetes feature-gate names (pkg/features/kube_features.go). The allocator reads them
through the same switches upstream's `structured.Features` struct has (structured/internal/types.go):
AdminAccess, PrioritizedList, PartitionableDevices, DeviceTaints, DeviceBindingAndStatus (needs both
DRADeviceBindingConditions and DRAResourceClaimDeviceStatus), ConsumableCapacity, ListTypeAttributes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kdra.errors import InputError

# Kubernetes 1.36 maturity: GA and beta gates are on by default, alpha gates are off.
# (dra-semantics.md section 0; KEPs 4381, 4816, 5018, 4817, 4815, 5055, 5004, 5075, 5007, 5491, 5517, 5729.)
DEFAULTS_1_36: dict[str, bool] = {
    "DynamicResourceAllocation": True,  # GA, locked
    "DRASchedulerFilterTimeout": True,  # beta
    "DRAPrioritizedList": True,  # GA 1.36
    "DRAAdminAccess": True,  # GA 1.36
    "DRAResourceClaimDeviceStatus": True,  # beta
    "DRAPartitionableDevices": True,  # beta 1.36
    "DRADeviceTaints": True,  # beta 1.36
    "DRADeviceTaintRules": True,  # beta 1.36
    "DRAExtendedResource": True,  # beta 1.36
    "DRAConsumableCapacity": True,  # beta 1.36
    "DRADeviceBindingConditions": True,  # beta 1.36
    "DRAListTypeAttributes": False,  # alpha 1.36
    "DRANodeAllocatableResources": False,  # alpha 1.36
    "DRAWorkloadResourceClaims": False,  # alpha 1.36
}


@dataclass(frozen=True)
class FeatureGates:
    """An immutable set of feature-gate values; unknown names are rejected so typos are not silent."""

    gates: Mapping[str, bool] = field(default_factory=lambda: dict(DEFAULTS_1_36))

    def __post_init__(self) -> None:
        unknown = sorted(set(self.gates) - set(DEFAULTS_1_36))
        if unknown:
            raise InputError(f"unknown feature gate(s): {', '.join(unknown)}")
        merged = dict(DEFAULTS_1_36)
        merged.update(self.gates)
        object.__setattr__(self, "gates", merged)

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def defaults(cls) -> FeatureGates:
        return cls()

    @classmethod
    def parse(cls, text: str, base: FeatureGates | None = None) -> FeatureGates:
        """Parse `--feature-gates` syntax: `Name=true,Other=false` (applied on top of `base`)."""
        values = dict(base.gates) if base is not None else dict(DEFAULTS_1_36)
        for raw in text.split(","):
            item = raw.strip()
            if not item:
                continue
            name, sep, value = item.partition("=")
            name = name.strip()
            if not sep:
                raise InputError(f"invalid feature gate {item!r}: expected Name=true|false")
            if name not in DEFAULTS_1_36:
                raise InputError(
                    f"unrecognized feature gate: {name} (known: {', '.join(sorted(DEFAULTS_1_36))})"
                )
            lowered = value.strip().lower()
            if lowered not in ("true", "false"):
                raise InputError(f"invalid value of {name}={value.strip()}, err: expected true or false")
            values[name] = lowered == "true"
        return cls(values)

    @classmethod
    def only(cls, enabled: Iterable[str]) -> FeatureGates:
        """Exactly the named gates on and every other gate off (how the conformance files list them)."""
        names = set(enabled)
        unknown = sorted(names - set(DEFAULTS_1_36))
        if unknown:
            raise InputError(f"unknown feature gate(s): {', '.join(unknown)}")
        return cls({name: name in names for name in DEFAULTS_1_36})

    def with_gates(self, **changes: bool) -> FeatureGates:
        values = dict(self.gates)
        values.update(changes)
        return FeatureGates(values)

    def enabled(self, name: str) -> bool:
        return bool(self.gates[name])

    def __str__(self) -> str:
        return ",".join(f"{k}={'true' if v else 'false'}" for k, v in sorted(self.gates.items()))

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.gates.items())))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FeatureGates) and dict(self.gates) == dict(other.gates)

    # -- the allocator's switches (upstream structured.Features) --------------------------------
    @property
    def admin_access(self) -> bool:
        return self.gates["DRAAdminAccess"]

    @property
    def prioritized_list(self) -> bool:
        return self.gates["DRAPrioritizedList"]

    @property
    def partitionable_devices(self) -> bool:
        return self.gates["DRAPartitionableDevices"]

    @property
    def device_taints(self) -> bool:
        return self.gates["DRADeviceTaints"]

    @property
    def device_binding_and_status(self) -> bool:
        return self.gates["DRADeviceBindingConditions"] and self.gates["DRAResourceClaimDeviceStatus"]

    @property
    def consumable_capacity(self) -> bool:
        return self.gates["DRAConsumableCapacity"]

    @property
    def list_type_attributes(self) -> bool:
        return self.gates["DRAListTypeAttributes"]
