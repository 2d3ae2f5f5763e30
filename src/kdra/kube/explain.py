"""`kdra explain POD`: why a pod does or does not fit, on a live cluster: nodes grouped by reason, then
the nearest nodes in full.

Reads the cluster once (DeviceClasses, ResourceSlices, Nodes, Pods, ResourceClaims; the pod and its
templates) and runs the one offline placement loop on it (kdra.scheduler.placement, as `kdra allocate`
does): every node filtered with the scheduler's own plugins (nodeSelector and node affinity, taints and
tolerations, unschedulable, nodeName, resources, then the pod's unallocated claims with every allocated claim
counted as in use; where they do not fit, the allocator's explanation says which selector, counter, taint or
constraint stopped which device), and the nodes that fit scored as the scheduler scores them. The verdicts are
grouped by reason and the nearest nodes are those that came closest (kdra.allocator.summary, as `kdra
allocate` and the scheduler's messages do). Read-only; nothing is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kdra.allocator import FeatureGates
from kdra.allocator.summary import DEFAULT_NODES, NodeFinding, NodesSummary, bounded, classify
from kdra.api.types import Obj
from kdra.api.types import namespaced_name as ref
from kdra.cluster.store import NotFoundError
from kdra.errors import InputError
from kdra.kube.client import KubeClient
from kdra.kube.export import device_taint_rules
from kdra.scheduler.offline import allocated, pod_claims
from kdra.scheduler.placement import NodeScore, Placer

# The API server's limit on an Event's message (core/v1 validation NoteLengthLimit), which kube-scheduler
# cuts FailedScheduling messages to; the PodScheduled condition has no such rule, kdra keeps it readable.
EVENT_MESSAGE_LIMIT = 1024
CONDITION_MESSAGE_LIMIT = 8 * 1024


@dataclass
class PodExplanation:
    pod: str
    bound: str | None
    condition: str
    claims: list[dict[str, str]]
    nodes: list[NodeFinding]
    # The nodes that fit, scored as the scheduler scores them, best first (kdra.scheduler.placement).
    scores: list[NodeScore] = field(default_factory=list)

    @property
    def best(self) -> str | None:
        """The node kube-scheduler's scores put first (ties to the first by name)."""
        return self.scores[0].node if self.scores else None

    @property
    def fits(self) -> list[str]:
        return [n.node for n in self.nodes if n.fits]

    @property
    def summary(self) -> NodesSummary:
        return NodesSummary(self.nodes)

    def to_dict(self, max_nodes: int | None = DEFAULT_NODES) -> dict[str, Any]:
        summary = self.summary
        detailed = {f.node for f in summary.nearest(max_nodes)}
        return {
            "pod": self.pod,
            "nodeName": self.bound,
            "podScheduled": self.condition,
            "claims": self.claims,
            "fits": self.fits,
            "node": self.best,
            "scores": [sc.to_dict() for sc in self.scores[: max_nodes if max_nodes is not None else None]],
            "summary": summary.to_dict(max_nodes),
            "nodes": [
                {
                    "node": n.node,
                    "fits": n.fits,
                    "reason": "" if n.fits else classify(n)[0],
                    "devices": list(n.devices),
                    "details": (
                        (ex.to_dict() if (ex := n.explained()) is not None else n.text())
                        if n.node in detailed
                        else None
                    ),
                }
                for n in self.nodes
            ],
        }

    def text(self, max_nodes: int | None = DEFAULT_NODES) -> str:
        out = [f"Pod {self.pod}"]
        if self.bound:
            out.append(f"  bound to node {self.bound}")
        if self.condition:
            first = self.condition.splitlines()[0]
            out.append(f"  PodScheduled: {first}")
        out.append("  claims:")
        for c in self.claims:
            out.append(f"    {c['entry']}: {c['claim']} ({c['state']})")
        if not self.claims:
            out.append("    (none)")
        fits = self.fits
        out.append(f"  fits on {len(fits)} of {len(self.nodes)} nodes")
        if fits:
            shown = ", ".join(fits[:10]) + (" ..." if len(fits) > 10 else "")
            out.append(f"    {shown}")
            top = self.scores[0]
            out.append(f"  scheduler's choice: {top.node} (score {top.total}; ties go to the first by name)")
        if len(fits) < len(self.nodes):
            out.extend("  " + line for line in self.summary.lines(max_nodes))
        return "\n".join(out) + "\n"


def explain_pod(client: KubeClient, name: str, namespace: str, features: FeatureGates) -> PodExplanation:
    try:
        pod = client.get("Pod", name, namespace)
    except NotFoundError:
        raise InputError(f"pod {namespace}/{name} not found") from None
    all_claims = client.list("ResourceClaim")
    by_ref = {ref(c): c for c in all_claims}

    def template(key: str) -> Obj | None:
        ns, tname = key.split("/", 1)
        try:
            return client.get("ResourceClaimTemplate", tname, ns)
        except NotFoundError:
            return None

    resolved = pod_claims(pod, by_ref, template, set(by_ref))
    claim_rows = [
        {"entry": pc.entry, "claim": pc.claim["metadata"]["name"] if pc.claim else pc.name, "state": pc.state}
        for pc in resolved
    ]
    pending = [pc.claim for pc in resolved if pc.claim is not None and not allocated(pc.claim)]
    fixed = [pc.claim for pc in resolved if pc.claim is not None and allocated(pc.claim)]
    uid = pod["metadata"].get("uid")
    others = [p for p in client.list("Pod") if p["metadata"].get("uid") != uid or not uid]
    placer = Placer(
        [
            *client.list("Node"),
            *client.list("DeviceClass"),
            *client.list("ResourceSlice"),
            *device_taint_rules(client),
            *all_claims,
            *others,
        ],
        features,
    )
    placement = placer.place(pod, pending, fixed)
    cond = next(
        (c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == "PodScheduled"),
        None,
    )
    cond_text = ""
    if cond is not None:
        cond_text = f"{cond.get('status')} {cond.get('reason') or ''}: {cond.get('message') or ''}".strip()
    return PodExplanation(
        f"{namespace}/{name}",
        (pod.get("spec") or {}).get("nodeName"),
        cond_text,
        claim_rows,
        placement.findings,
        placement.scores,
    )


def unschedulable_messages(
    message: str, explanation: object, nodes: int | None = DEFAULT_NODES
) -> tuple[str, str]:
    """(PodScheduled condition message, FailedScheduling Event message) for a pod that fits nowhere.

    The first line stays kube-scheduler's `0/N nodes are available: ...` (tools parse it); then, when the
    scheduler hands over every node's verdict (kdra.scheduler.nodefit.FitFailure), the nodes grouped by
    reason and the nearest few in full, else the explanation as given. The Event is cut to the API's 1,024
    characters as kube-scheduler's truncateMessage does; the condition to 8 KiB."""
    if explanation is None:
        text = message
    else:
        render = getattr(explanation, "text", None)
        body = render(nodes, "kdra explain POD details more") if callable(render) else str(explanation)
        text = f"{message}\n{body}"
    condition = bounded(text, CONDITION_MESSAGE_LIMIT, "\n... (truncated; kdra explain POD shows every node)")
    return condition, bounded(text, EVENT_MESSAGE_LIMIT)
