"""`kdra explain POD`: why a pod's ResourceClaims do or do not fit, node by node, on a live cluster.

Reads the cluster once (DeviceClasses, ResourceSlices, Nodes, ResourceClaims; the pod and its
templates) and asks kdra's allocator, on every node, for the pod's unallocated claims with every
allocated claim counted as in use: where they do not fit, the allocator's explanation says which
selector, counter, taint or constraint stopped which device. Read-only; nothing is written.
Only device allocation is explained: node affinity, taints and cpu/memory are kube-scheduler's part.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kdra.allocator import Allocator, FeatureGates
from kdra.allocator._nodes import node_selector_matches
from kdra.api.templates import instantiate_template, is_claim_for_pod
from kdra.cluster.store import NotFoundError
from kdra.errors import AllocationError, InputError
from kdra.kube.client import KubeClient, Obj


@dataclass
class NodeVerdict:
    node: str
    fits: bool
    reason: str = ""
    details: Any = None
    devices: list[str] = field(default_factory=list)


@dataclass
class PodExplanation:
    pod: str
    bound: str | None
    condition: str
    claims: list[dict[str, str]]
    nodes: list[NodeVerdict]

    @property
    def fits(self) -> list[str]:
        return [n.node for n in self.nodes if n.fits]

    def to_dict(self) -> dict[str, Any]:
        return {
            "pod": self.pod,
            "nodeName": self.bound,
            "podScheduled": self.condition,
            "claims": self.claims,
            "fits": self.fits,
            "nodes": [
                {
                    "node": n.node,
                    "fits": n.fits,
                    "reason": n.reason,
                    "devices": n.devices,
                    "details": n.details,
                }
                for n in self.nodes
            ],
        }

    def text(self, max_nodes: int = 10) -> str:
        out = [f"Pod {self.pod}"]
        if self.bound:
            out.append(f"  bound to node {self.bound}")
        if self.condition:
            first = self.condition.splitlines()[0]
            out.append(f"  PodScheduled: {first}")
        out.append("  claims:")
        for c in self.claims:
            out.append(f"    {c['entry']}: {c['claim']} ({c['state']})")
        fits = self.fits
        out.append(f"  device allocation fits on {len(fits)} of {len(self.nodes)} nodes")
        if fits:
            shown = ", ".join(fits[:max_nodes]) + (" ..." if len(fits) > max_nodes else "")
            out.append(f"    {shown}")
        misses = [n for n in self.nodes if not n.fits]
        for n in misses[:max_nodes]:
            for line in (n.reason or f"node {n.node}: cannot allocate all claims").splitlines():
                out.append("  " + line)
        if len(misses) > max_nodes:
            out.append(
                f"  ... and {len(misses) - max_nodes} more nodes where it does not fit (-o json lists all)"
            )
        return "\n".join(out) + "\n"


def explain_pod(client: KubeClient, name: str, namespace: str, features: FeatureGates) -> PodExplanation:
    try:
        pod = client.get("Pod", name, namespace)
    except NotFoundError:
        raise InputError(f"pod {namespace}/{name} not found") from None
    classes = {c["metadata"]["name"]: c for c in client.list("DeviceClass")}
    slices = client.list("ResourceSlice")
    nodes = sorted(client.list("Node"), key=lambda n: n["metadata"]["name"])
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
    verdicts: list[NodeVerdict] = []
    for node in nodes:
        nname = node["metadata"]["name"]
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
                NodeVerdict(
                    nname,
                    False,
                    f"node {nname}: allocated claim {blocked['metadata']['name']} is not available here",
                )
            )
            continue
        if not pending:
            verdicts.append(NodeVerdict(nname, True))
            continue
        try:
            outcome = allocator.allocate(node, pending)
        except AllocationError as e:
            verdicts.append(NodeVerdict(nname, False, f"node {nname}: {e}"))
            continue
        if outcome.allocations is not None:
            devs = [
                f"{r.get('driver')}/{r.get('pool')}/{r.get('device')}"
                for a in outcome.allocations
                for r in (a.get("devices") or {}).get("results") or []
            ]
            verdicts.append(NodeVerdict(nname, True, devices=devs))
        else:
            expl = outcome.explanation
            verdicts.append(
                NodeVerdict(
                    nname,
                    False,
                    str(expl) if expl is not None else f"node {nname}: cannot allocate all claims",
                    expl.to_dict() if expl is not None else None,
                )
            )
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
