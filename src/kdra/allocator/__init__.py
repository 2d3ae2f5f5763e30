"""The structured allocator with the semantics of the kube-scheduler release its `FeatureGates` name
(1.36, 1.37 or 1.38; the latest final release by default), plus explanations of failures.

Public surface (docs/contracts.md, `kdra.allocator`):
- `Allocator(classes, slices, allocated_claims, features)` and `Allocator.allocate(node, claims)`
- `AllocationOutcome` (`.allocations`, `.explanation` computed on first access, `.lazy_explanation`),
  `Explanation` (`.to_dict()`, `str()`), `LazyExplanation`
- `AllocatorIndex` + `AllocatedState` (`add_claim`/`remove_claim`, reference-counted) to reuse the device
  index across nodes and scheduling cycles; `AllocatorIndex.devices_of_class(class, selectors, node=)`
- `deterministic_share_id` (the default shareIDs) and `random_share_id` (kube-scheduler's)
- `FeatureGates` (kdra.api.features: a release's gates, `FeatureGates.parse("A=true,B=false")`)
- `NodeAllocationError` (upstream's ErrFailedAllocationOnNode: unschedulable on this node only)
"""

from kdra.allocator.allocator import (
    ALLOCATION_RESULTS_MAX_SIZE,
    AllocatedState,
    AllocationOutcome,
    Allocator,
    LazyExplanation,
    NodeAllocationError,
    deterministic_share_id,
    random_share_id,
)
from kdra.allocator.explain import Explanation
from kdra.allocator.index import AllocatorIndex, SliceCache
from kdra.api.features import FeatureGates

__all__ = [
    "ALLOCATION_RESULTS_MAX_SIZE",
    "AllocatedState",
    "AllocationOutcome",
    "Allocator",
    "AllocatorIndex",
    "Explanation",
    "FeatureGates",
    "LazyExplanation",
    "NodeAllocationError",
    "SliceCache",
    "deterministic_share_id",
    "random_share_id",
]
