"""The structured allocator with kube-scheduler 1.36 semantics, plus explanations of failures.

Public surface (docs/contracts.md, `kdra.allocator`):
- `Allocator(classes, slices, allocated_claims, features)` and `Allocator.allocate(node, claims)`
- `AllocationOutcome` (`.allocations`, `.explanation`), `Explanation` (`.to_dict()`, `str()`)
- `AllocatorIndex` + `AllocatedState` to reuse the device index across nodes and scheduling cycles
- `FeatureGates` (Kubernetes 1.36 defaults, `FeatureGates.parse("A=true,B=false")`)
- `NodeAllocationError` (upstream's ErrFailedAllocationOnNode: unschedulable on this node only)
"""

from kdra.allocator.allocator import (
    ALLOCATION_RESULTS_MAX_SIZE,
    AllocatedState,
    AllocationOutcome,
    Allocator,
    NodeAllocationError,
)
from kdra.allocator.explain import Explanation
from kdra.allocator.features import FeatureGates
from kdra.allocator.index import AllocatorIndex, SliceCache

__all__ = [
    "ALLOCATION_RESULTS_MAX_SIZE",
    "AllocatedState",
    "AllocationOutcome",
    "Allocator",
    "AllocatorIndex",
    "Explanation",
    "FeatureGates",
    "NodeAllocationError",
    "SliceCache",
]
