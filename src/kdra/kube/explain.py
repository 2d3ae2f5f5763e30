"""`kdra explain POD`: why a pod does or does not fit, on a live cluster: nodes grouped by reason, then
the nearest nodes in full.

Reads the cluster once (DeviceClasses, ResourceSlices, Nodes, Pods, ResourceClaims; the pod and its
templates). Each node is first checked as kube-scheduler's filter plugins would (nodeSelector and node
affinity, taints and tolerations, unschedulable, nodeName, cpu/memory/pods: kdra.scheduler.nodefit, the
scheduler's own plugins); on the nodes that pass, kdra's allocator is asked for the pod's unallocated claims
with every allocated claim counted as in use, and where they do not fit its explanation says which selector,
counter, taint or constraint stopped which device. The verdicts are grouped by reason
(kdra.allocator.summary, as `kdra allocate` and the scheduler's messages do). Read-only; nothing is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kdra.allocator import Allocator, FeatureGates
from kdra.allocator._nodes import node_selector_matches
from kdra.allocator.summary import DEFAULT_NODES, NodeFinding, NodesSummary, bounded, classify
from kdra.api.templates import instantiate_template, is_claim_for_pod
from kdra.cluster.store import NotFoundError
from kdra.errors import AllocationError, InputError
from kdra.kube.client import KubeClient, Obj
from kdra.scheduler.nodefit import NodeFit

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
        if len(fits) < len(self.nodes):
            out.extend("  " + line for line in self.summary.lines(max_nodes))
        return "\n".join(out) + "\n"


def explain_pod(client: KubeClient, name: str, namespace: str, features: FeatureGates) -> PodExplanation:
    try:
        pod = client.get("Pod", name, namespace)
    except NotFoundError:
        raise InputError(f"pod {namespace}/{name} not found") from None
    classes = {c["metadata"]["name"]: c for c in client.list("DeviceClass")}
    slices = client.list("ResourceSlice")
    nodes = sorted(client.list("Node"), key=lambda n: n["metadata"]["name"])
    pods = client.list("Pod")
    bound = (pod.get("spec") or {}).get("nodeName")
    all_claims = client.list("ResourceClaim")
    by_name = {(c["metadata"].get("namespace"), c["metadata"]["name"]): c for c in all_claims}
    statuses = {
        s.get("name"): s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    pending: list[Obj] = []
    fixed: list[Obj] = []
    claim_rows: list[dict[str, str]] = []
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        ename = entry.get("name", "")
        claim: Obj | None = None
        if entry.get("resourceClaimName"):
            claim = by_name.get((namespace, entry["resourceClaimName"]))
            if claim is None:
                claim_rows.append({"entry": ename, "claim": entry["resourceClaimName"], "state": "not found"})
                continue
        elif entry.get("resourceClaimTemplateName"):
            cname = statuses.get(ename)
            claim = by_name.get((namespace, cname)) if cname else None
            if claim is None:
                claim = next(
                    (
                        c
                        for c in all_claims
                        if c["metadata"].get("namespace") == namespace and is_claim_for_pod(c, pod, ename)
                    ),
                    None,
                )
            if claim is None:
                try:
                    template = client.get(
                        "ResourceClaimTemplate", entry["resourceClaimTemplateName"], namespace
                    )
                except NotFoundError:
                    claim_rows.append(
                        {
                            "entry": ename,
                            "claim": entry["resourceClaimTemplateName"],
                            "state": "template not found",
                        }
                    )
                    continue
                claim = instantiate_template(pod, ename, template)
                claim_rows.append(
                    {"entry": ename, "claim": claim["metadata"]["name"], "state": "not created yet"}
                )
                pending.append(claim)
                continue
        else:
            continue
        alloc = (claim.get("status") or {}).get("allocation")
        state = "allocated" if alloc else "pending"
        claim_rows.append({"entry": ename, "claim": claim["metadata"]["name"], "state": state})
        (fixed if alloc else pending).append(claim)
    in_use = [
        c
        for c in all_claims
        if (c.get("status") or {}).get("allocation") and all(c is not p for p in pending)
    ]
    allocator = Allocator(classes, slices, in_use, features)
    fit = NodeFit(nodes, pods)
    verdicts: list[NodeFinding] = []
    for node in nodes:
        nname = node["metadata"]["name"]
        if not bound:
            reasons = fit.reasons(pod, nname)
            if reasons:
                verdicts.append(NodeFinding(nname, reasons=reasons))
                continue
        elif bound != nname:
            verdicts.append(NodeFinding(nname, reasons=(f"pod is bound to node {bound}",)))
            continue
        labels = node["metadata"].get("labels") or {}
        blocked = next(
            (
                c
                for c in fixed
                if (sel := c["status"]["allocation"].get("nodeSelector"))
                and not node_selector_matches(sel, nname, labels)
            ),
            None,
        )
        if blocked is not None:
            verdicts.append(
                NodeFinding(
                    nname, message=f"allocated claim {blocked['metadata']['name']} is not available here"
                )
            )
            continue
        if not pending:
            verdicts.append(NodeFinding(nname, fits=True))
            continue
        try:
            outcome = allocator.allocate(node, pending)
        except AllocationError as e:
            verdicts.append(
                NodeFinding(nname, message=str(e), explanation=getattr(e, "lazy_explanation", None))
            )
            continue
        if outcome.allocations is not None:
            devs = tuple(
                f"{r.get('driver')}/{r.get('pool')}/{r.get('device')}"
                for a in outcome.allocations
                for r in (a.get("devices") or {}).get("results") or []
            )
            verdicts.append(NodeFinding(nname, fits=True, devices=devs))
        else:
            verdicts.append(NodeFinding(nname, explanation=outcome.lazy_explanation))
    cond = next(
        (c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == "PodScheduled"),
        None,
    )
    cond_text = ""
    if cond is not None:
        cond_text = f"{cond.get('status')} {cond.get('reason') or ''}: {cond.get('message') or ''}".strip()
    return PodExplanation(
        f"{namespace}/{name}", (pod.get("spec") or {}).get("nodeName"), cond_text, claim_rows, verdicts
    )


def unschedulable_messages(
    message: str, explanation: Any, nodes: int | None = DEFAULT_NODES
) -> tuple[str, str]:
    """(PodScheduled condition message, FailedScheduling Event message) for a pod that fits nowhere.

    The first line stays kube-scheduler's `0/N nodes are available: ...` (tools parse it); then, when the
    scheduler hands over every node's verdict (kdra.scheduler.nodefit.FitFailure), the nodes grouped by
    reason and the nearest few in full, else the explanation as given. The Event is cut to the API's 1,024
    characters as kube-scheduler's truncateMessage does; the condition to 8 KiB."""
    if explanation is None:
        text = message
    else:
        summary = getattr(explanation, "summary", None)
        body = (
            summary().text(nodes, hint="kdra explain POD details more")
            if callable(summary)
            else str(explanation)
        )
        text = f"{message}\n{body}"
    condition = bounded(text, CONDITION_MESSAGE_LIMIT, "\n... (truncated; kdra explain POD shows every node)")
    return condition, bounded(text, EVENT_MESSAGE_LIMIT)
