"""The metric families the exporter serves: names, types, help texts, label sets and histogram buckets.

kdra.observe.model renders them; the dashboards (deploy/) and tests check against `metric_families()`.
"""

from __future__ import annotations

# Buckets of kube-scheduler's scheduling_attempt_duration_seconds (exponential from 1 ms) and of its
# pod_scheduling_sli_duration_seconds (exponential from 10 ms, factor 1.5... we extend to a day for
# queued batch jobs).
ATTEMPT_BUCKETS = tuple(0.001 * 2**i for i in range(15))
E2E_BUCKETS = (
    0.01,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    120,
    300,
    600,
    1800,
    3600,
    7200,
    21600,
    86400,
)

CLAIM_DEVICE_LABELS = (
    "claim",
    "namespace",
    "pod",
    "driver",
    "pool",
    "device",
    "request",
    "node",
    "device_class",
    "product",
    "dra_claim_name",
    "dra_claim_namespace",
    "dra_driver_name",
    "dra_pool_name",
    "dra_device_name",
)

# Per allocated device (one claim result): cached per claim.
CLAIM_FAMILIES: tuple[tuple[str, str, str], ...] = (
    (
        "kdra_claim_device_info",
        "gauge",
        "One series per device allocated to a ResourceClaim (value 1), labelled with the claim, its pod(s), "
        "the device and where it is; dra_* labels join with dcgm-exporter's DRA labels.",
    ),
    (
        "kdra_claim_device_gpu_equivalents",
        "gauge",
        "Whole-GPU equivalents of one allocated device: 1 for a GPU, memory fraction for a MIG device or a "
        "share, 0 for non-GPU devices.",
    ),
    (
        "kdra_claim_device_memory_bytes",
        "gauge",
        "Accelerator memory an allocated device holds for its claim (a share's consumed memory).",
    ),
    (
        "kdra_claim_device_consumed_capacity",
        "gauge",
        "Capacity consumed by a share of a device with allowMultipleAllocations (status.allocation "
        "consumedCapacity), in the capacity's base unit (bytes for memory).",
    ),
    (
        "kdra_claim_device_consumes",
        "gauge",
        "Shared counters an allocated partition (e.g. a MIG device) consumes from its counter set "
        "(memory slices, multiprocessors, memory in bytes).",
    ),
)
# Per published device: cached per device.
DEVICE_FAMILIES: tuple[tuple[str, str, str], ...] = (
    (
        "kdra_device_allocations",
        "gauge",
        "Claim results currently placed on a published device (0 free, 1 exclusive, n shares).",
    ),
    (
        "kdra_device_allocated_ratio",
        "gauge",
        "Fraction of a published device in use: 1 when allocated whole, a share's consumed memory over "
        "the device's, 0 when free.",
    ),
)
FLEET_LABELS = ("node", "driver", "pool", "product")
FLEET_FAMILIES: tuple[tuple[str, str, str], ...] = (
    ("kdra_fleet_devices", "gauge", "Devices published in ResourceSlices."),
    ("kdra_fleet_devices_allocated", "gauge", "Published devices allocated to at least one claim."),
    ("kdra_fleet_gpus", "gauge", "Physical GPUs behind the published devices."),
    ("kdra_fleet_gpu_equivalents_allocated", "gauge", "Whole-GPU equivalents allocated to claims."),
    ("kdra_fleet_memory_bytes", "gauge", "Accelerator memory of the physical GPUs/devices published."),
    ("kdra_fleet_memory_allocated_bytes", "gauge", "Accelerator memory allocated to claims."),
    (
        "kdra_fleet_memory_requested_bytes",
        "gauge",
        "Accelerator memory the claims asked for, where they say (annotation, capacity request or "
        "selector lower bound).",
    ),
    (
        "kdra_fleet_stranded_memory_bytes",
        "gauge",
        "Accelerator memory allocated but not requested (allocated minus requested, claims that say what "
        "they need).",
    ),
)


# Per node pool (the node's pool label, POOL_LABELS): how GPU capacity is idle, as placements happen.
POOL_LABELS = (
    "kdra.dev/pool",
    "cloud.google.com/gke-nodepool",
    "eks.amazonaws.com/nodegroup",
    "karpenter.sh/nodepool",
    "kubernetes.azure.com/agentpool",
)
POOL_FAMILIES: tuple[tuple[str, str, str], ...] = (
    ("kdra_pool_gpus", "gauge", "Physical GPUs of the node pool's nodes."),
    (
        "kdra_pool_gpus_idle",
        "gauge",
        "GPU-equivalents of the node pool not allocated to any claim (unallocated GPU capacity).",
    ),
    (
        "kdra_pool_gpus_fragmented",
        "gauge",
        "Idle GPU-equivalents on GPUs that are partly allocated (shares, MIG devices): capacity only a "
        "smaller share than the gap can use; fragmentation as it happens.",
    ),
)

# Every family the exporter serves (histograms by their base name).
OTHER_FAMILIES: tuple[tuple[str, str], ...] = (
    ("kdra_claim_stranded_memory_bytes", "gauge"),
    ("kdra_pending_pods", "gauge"),
    ("kdra_pending_pod_node_reasons", "gauge"),
    ("kdra_pending_claims", "gauge"),
    ("kdra_queue_allocated", "gauge"),
    ("kdra_queue_deserved", "gauge"),
    ("kdra_queue_fair_share", "gauge"),
    ("kdra_queue_limit", "gauge"),
    ("kdra_pod_scheduling_duration_seconds", "histogram"),
    ("kdra_scheduler_attempt_duration_seconds", "histogram"),
    ("kdra_conflicting_allocations", "gauge"),
    ("kdra_conflicting_allocations_detected_total", "counter"),
    ("kdra_conflicting_allocations_repaired_total", "counter"),
    ("kdra_exporter_watch_events_total", "counter"),
    ("kdra_exporter_watch_event_errors_total", "counter"),
)


def metric_families() -> dict[str, str]:
    """name -> type of every metric family the exporter serves."""
    out = {n: t for n, t, _h in (*CLAIM_FAMILIES, *DEVICE_FAMILIES, *FLEET_FAMILIES, *POOL_FAMILIES)}
    out.update(OTHER_FAMILIES)
    return out
