"""The reports the exporter computes when it renders, from the records the state keeps: pending pods and
claims by reason, and queues (from an in-process scheduler's report, or read from Queue objects).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kdra.observe.exposition import escape, fmt_value, header
from kdra.observe.records import result_memory

if TYPE_CHECKING:
    from kdra.observe.model import FleetState


def pending_text(state: FleetState) -> str:
    """Pending pods by namespace and reason, the node reasons of their last attempt, and the claims not
    allocated by why: from the counts the state keeps."""
    claims: dict[tuple[str, str], int] = {}
    for ck in state.unallocated:
        users = [state.pods[pk] for pk in state.claim_users.get(ck, ()) if pk in state.pods]
        if not users:
            reason = "NoConsumer"
        elif any(p.pending and p.reason in ("Unschedulable", "SchedulerError") for p in users):
            reason = "PodUnschedulable"
        elif any(p.pending and p.reason == "SchedulingGated" for p in users):
            reason = "PodSchedulingGated"
        else:
            reason = "WaitingForScheduling"
        k = (ck[0], reason)
        claims[k] = claims.get(k, 0) + 1
    parts = [
        header(
            "kdra_pending_pods",
            "gauge",
            "Pods without a node, by namespace and reason (PodScheduled condition reason; "
            "SchedulingGated; NotYetAttempted).",
        )
    ]
    for (ns, reason), n in sorted(state.pending_pod_counts.items()):
        parts.append(f'kdra_pending_pods{{namespace="{escape(ns)}",reason="{escape(reason)}"}} {n}\n')
    parts.append(
        header(
            "kdra_pending_pod_node_reasons",
            "gauge",
            "Pending pods whose last scheduling attempt rejected at least one node for this reason "
            "(the reasons of the scheduler's '0/N nodes are available' message).",
        )
    )
    for reason, n in sorted(state.node_reason_counts.items()):
        parts.append(f'kdra_pending_pod_node_reasons{{reason="{escape(reason)}"}} {n}\n')
    parts.append(
        header(
            "kdra_pending_claims",
            "gauge",
            "ResourceClaims not allocated, by namespace and why (NoConsumer, WaitingForScheduling, "
            "PodUnschedulable, PodSchedulingGated).",
        )
    )
    for (ns, reason), n in sorted(claims.items()):
        parts.append(f'kdra_pending_claims{{namespace="{escape(ns)}",reason="{escape(reason)}"}} {n}\n')
    return "".join(parts)


def queue_text(rows: list[dict[str, Any]]) -> str:
    """Each queue's allocated, deserved, fair share and limit per resource."""
    if not rows:
        return ""
    parts = []
    for fam, key, help_text in (
        ("kdra_queue_allocated", "allocated", "What a queue's running pods hold, per resource."),
        ("kdra_queue_deserved", "quota", "A queue's deserved quota per resource (-1: unlimited)."),
        ("kdra_queue_fair_share", "fairShare", "A queue's fair share per resource (KAI division)."),
        ("kdra_queue_limit", "limit", "A queue's limit per resource."),
    ):
        parts.append(header(fam, "gauge", help_text + " Resource units: devices, bytes, cores."))
        for row in rows:
            for res, v in sorted((row.get(key) or {}).items()):
                val = -1.0 if v == float("inf") else float(v)
                parts.append(
                    f'{fam}{{queue="{escape(row["queue"])}",resource="{escape(res)}"}} {fmt_value(val)}\n'
                )
    return "".join(parts)


def queue_rows_from_objects(state: FleetState) -> list[dict[str, Any]]:
    """Queues read from Queue objects (kube mode, no scheduler in process): deserved and limit from the
    spec, allocated = devices (per DeviceClass) and their memory held by the queue's running pods."""
    from kdra.errors import InputError
    from kdra.scheduler.queuetree import QueueTree, parse_queue  # loaded only where Queues are read

    specs = []
    for name in sorted(state.queues):
        try:
            specs.append(parse_queue(state.queues[name]))
        except InputError:
            continue
    tree = QueueTree(specs)
    allocated: dict[str, dict[str, float]] = {}
    for (ns, _name), pod in state.pods.items():
        if not pod.node or pod.phase in ("Succeeded", "Failed"):
            continue
        leaf = tree.leaf_or_default(pod.queue or None)
        usage: dict[str, float] = {}
        for cname in pod.claims:
            claim = state.claims.get((ns, cname))
            if claim is None:
                continue
            for r in claim.results:
                if r.admin:
                    continue
                cls = claim.classes.get(r.request) or claim.classes.get(r.request.split("/", 1)[0], "")
                k = f"deviceclass/{cls}"
                usage[k] = usage.get(k, 0.0) + 1
                mem = result_memory(r, state.devices.get(r.key))
                if mem:
                    mk = f"memory.deviceclass/{cls}"
                    usage[mk] = usage.get(mk, 0.0) + mem
        for q in tree.ancestors(leaf):
            tgt = allocated.setdefault(q, {})
            for k, v in usage.items():
                tgt[k] = tgt.get(k, 0.0) + v
    rows = []
    for name in sorted(tree.specs):
        spec = tree.specs[name]
        rows.append(
            {
                "queue": name,
                "parent": spec.parent,
                "allocated": dict(sorted(allocated.get(name, {}).items())),
                "fairShare": {},
                "quota": dict(sorted(spec.quota.items())),
                "limit": dict(sorted(spec.limit.items())),
            }
        )
    return rows
