"""Trace replay: the Alibaba GPU trace v2023 (openb) through kdra's scheduling policies and DRA allocator.

    from kdra.replay import load_trace, run_placement
    from kdra.scheduler.gpupolicies import make_policy
    trace = load_trace()                                  # bundled node list + the shared default pod list
    run = run_placement(trace, make_policy("fgd"), seed=42)   # inflate to 130%, shuffle, place
    run.unallocated_at(100)                               # unallocated GPU % at 100% arrived workload

See docs/replay.md.
"""

from kdra.replay.engine import PlacementRun, ReplayCluster, inflate, run_placement
from kdra.replay.trace import (
    Trace,
    TraceNode,
    TracePod,
    claim_for,
    load_trace,
    pod_objects,
    read_nodes,
    read_pods,
)

__all__ = [
    "PlacementRun",
    "ReplayCluster",
    "Trace",
    "TraceNode",
    "TracePod",
    "claim_for",
    "inflate",
    "load_trace",
    "pod_objects",
    "read_nodes",
    "read_pods",
    "run_placement",
]
