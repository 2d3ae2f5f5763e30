"""`kdra allocate`'s run: every pod of a set of objects placed in turn, as kube-scheduler would, offline.

The objects (validated by the caller) are sorted into groups: the claims no pod references (allocated
together, as one pod's claims would be), then each pod with its claims (resourceClaimTemplateName entries
instantiated as the resourceclaim controller does, with a deterministic name suffix). Every pod is placed,
with or without claims: its node-level fit (resources, nodeSelector, affinity, taints) is checked as much
as its devices. Each group goes through the one placement loop (kdra.scheduler.placement: every node
filtered, the fitting ones scored with the scheduler's plugins, ties to the first by name), and what it
got counts for the next group (devices in use, the pod's requests on its node).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kdra.allocator import FeatureGates
from kdra.api.templates import instantiate_template, is_claim_for_pod, pod_uid
from kdra.api.types import Obj
from kdra.api.types import namespaced_name as ref
from kdra.errors import InputError
from kdra.scheduler.placement import Placement, Placer

if TYPE_CHECKING:
    from kdra.scheduler.devicepref import MeasuredPreference


def allocated(claim: Mapping[str, Any]) -> bool:
    return bool((claim.get("status") or {}).get("allocation"))


@dataclass
class PodClaim:
    """One entry of a pod's spec.resourceClaims and the claim it stands for (None: none to be found)."""

    entry: str
    claim: Obj | None
    state: str  # allocated, pending, not created yet, not found, template not found
    field: str = ""  # resourceClaimName or resourceClaimTemplateName
    name: str = ""  # the claim or template the entry names


def pod_claims(
    pod: Mapping[str, Any],
    claims: Mapping[str, Obj],
    template: Callable[[str], Obj | None],
    taken: set[str] | None = None,
) -> list[PodClaim]:
    """The claims of `pod`, in spec order: by resourceClaimName; for a template entry, the claim named in
    pod.status.resourceClaimStatuses, else one the controller created for the pod earlier, else a new one
    from the template (`template("ns/name")`), named clear of `taken` ("ns/name" of every claim, grows)."""
    meta = pod.get("metadata") or {}
    ns = str(meta.get("namespace") or "default")
    statuses = {
        s.get("name"): s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    out: list[PodClaim] = []
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        ename = str(entry.get("name", ""))
        if entry.get("resourceClaimName"):
            name = str(entry["resourceClaimName"])
            claim = claims.get(f"{ns}/{name}")
            state = "not found" if claim is None else ("allocated" if allocated(claim) else "pending")
            out.append(PodClaim(ename, claim, state, "resourceClaimName", name))
            continue
        if not entry.get("resourceClaimTemplateName"):
            continue  # nothing to allocate for this entry (validation reports a malformed one)
        tname = str(entry["resourceClaimTemplateName"])
        status_name = statuses.get(ename)
        claim = claims.get(f"{ns}/{status_name}") if status_name else None
        if claim is None:
            claim = next(
                (
                    c
                    for c in claims.values()
                    if ref(c).startswith(f"{ns}/") and is_claim_for_pod(c, dict(pod), ename)
                ),
                None,
            )
        if claim is not None:
            state = "allocated" if allocated(claim) else "pending"
            out.append(PodClaim(ename, claim, state, "resourceClaimTemplateName", tname))
            continue
        tmpl = template(f"{ns}/{tname}")
        if tmpl is None:
            out.append(PodClaim(ename, None, "template not found", "resourceClaimTemplateName", tname))
            continue
        in_ns = {r.split("/", 1)[1] for r in taken or () if r.split("/", 1)[0] == ns}
        claim = instantiate_template(dict(pod), ename, tmpl, in_ns)
        if taken is not None:
            taken.add(ref(claim))
        out.append(PodClaim(ename, claim, "not created yet", "resourceClaimTemplateName", tname))
    return out


@dataclass
class Group:
    """Claims allocated together: one pod's claims, or the claims no pod references."""

    pod: Obj | None
    claims: list[Obj]  # in pod order, allocated ones included

    @property
    def pending(self) -> list[Obj]:
        return [c for c in self.claims if not allocated(c)]

    @property
    def fixed(self) -> list[Obj]:
        return [c for c in self.claims if allocated(c)]


@dataclass
class Result:
    """What a run allocated (claim, node, pod) in order, and every group's placement."""

    newly: list[tuple[Obj, str, Obj | None]] = field(default_factory=list)
    placements: list[tuple[Group, Placement]] = field(default_factory=list)

    @property
    def failures(self) -> list[tuple[Group, Placement]]:
        return [(g, p) for g, p in self.placements if not p.placed]

    @property
    def choices(self) -> list[dict[str, Any]]:
        """With a device preference: what decided each group's devices."""
        return [
            {
                "pod": ref(g.pod) if g.pod is not None else None,
                "node": p.node,
                "claims": [ref(c) for c in p.claims],
            }
            | p.choice
            for g, p in self.placements
            if p.choice is not None
        ]


def groups(by_kind: Mapping[str, list[Obj]], namespace: str | None = None) -> list[Group]:
    """The claims no pod references (one group, when there are any or there is no pod), then each pod's,
    in input order; `namespace`: only that namespace's pods and loose claims. Claims are the given
    objects (templates' claims are new objects); a missing claim or template is an InputError."""
    claims = {ref(c): c for c in by_kind.get("ResourceClaim", [])}
    templates = {ref(t): t for t in by_kind.get("ResourceClaimTemplate", [])}
    all_pods = by_kind.get("Pod", [])
    pods = [p for p in all_pods if namespace is None or ref(p).split("/", 1)[0] == namespace]
    taken = set(claims)
    referenced: set[str] = set()
    pod_groups = []
    for pod in pods:
        group = Group(pod, [])
        resolved = pod_claims(pod, claims, templates.get, taken)
        for i, pc in enumerate(resolved):
            if pc.claim is None:
                what = "ResourceClaim" if pc.state == "not found" else "ResourceClaimTemplate"
                raise InputError(
                    f"Pod {ref(pod)}: spec.resourceClaims[{i}].{pc.field}: Not found: {pc.name!r}: "
                    f"no {what} {ref(pod).split('/', 1)[0]}/{pc.name} in the input"
                )
            claims.setdefault(ref(pc.claim), pc.claim)
            referenced.add(ref(pc.claim))
            if all(c is not pc.claim for c in group.claims):
                group.claims.append(pc.claim)
        pod_groups.append(group)
    for pod in all_pods:  # claims of pods in other namespaces are not "loose"
        ns = ref(pod).split("/", 1)[0]
        for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
            if entry.get("resourceClaimName"):
                referenced.add(f"{ns}/{entry['resourceClaimName']}")
    loose = [
        c
        for c in by_kind.get("ResourceClaim", [])
        if ref(c) not in referenced
        and not allocated(c)
        and (namespace is None or ref(c).split("/", 1)[0] == namespace)
    ]
    return ([Group(None, loose)] if loose or not pods else []) + pod_groups


def nodes_of(by_kind: Mapping[str, list[Obj]], only: str | None = None) -> list[Obj]:
    """The Node objects; without any, a label-less Node for each node the slices name (or `only`)."""
    nodes = list(by_kind.get("Node", []))
    if nodes:
        return nodes
    names: set[str] = set()
    for s in by_kind.get("ResourceSlice", []):
        spec = s.get("spec") or {}
        if spec.get("nodeName"):
            names.add(str(spec["nodeName"]))
        for dev in spec.get("devices") or []:
            if isinstance(dev, dict) and dev.get("nodeName"):
                names.add(str(dev["nodeName"]))
    if only:
        names = {only}
    return [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": n}} for n in sorted(names)]


def allocate(
    by_kind: Mapping[str, list[Obj]],
    features: FeatureGates,
    *,
    namespace: str | None = None,
    node: str | None = None,
    preference: MeasuredPreference | None = None,
) -> Result:
    """Place every group in turn (see the module docstring). `node`: only that node is tried.

    Raises InputError for a missing claim, template or node, and the AllocationError of a group whose
    placement met one (kube-scheduler's attempt fails; `kdra allocate` exits 3)."""
    work = {k: list(v) for k, v in by_kind.items()}
    work["ResourceClaim"] = [copy.deepcopy(c) for c in by_kind.get("ResourceClaim", [])]
    todo = groups(work, namespace)
    nodes = nodes_of(work, node)
    if node and all(str((n.get("metadata") or {}).get("name")) != node for n in nodes):
        raise InputError(f"--node {node}: Not found: no Node {node!r} in the input")
    if not nodes and any(g.pending for g in todo):
        raise InputError("no nodes: give Node objects, ResourceSlices with spec.nodeName, or --node NAME")
    objects = [
        *nodes,
        *work.get("DeviceClass", []),
        *work.get("ResourceSlice", []),
        *work.get("DeviceTaintRule", []),
        *work["ResourceClaim"],
    ]
    placer = Placer([*objects, *work.get("Pod", [])], features, preference=preference)
    only = [node] if node else None
    result = Result()
    for group in todo:
        if group.pod is None and not group.pending:
            continue
        placement = placer.place(group.pod, group.pending, group.fixed, nodes=only)
        if placement.error is not None:
            raise placement.error
        result.placements.append((group, placement))
        if not placement.placed:
            continue
        assert placement.node is not None
        pending = group.pending
        written = placer.commit(placement)
        for claim, done in zip(pending, written, strict=False):
            claim["status"] = done["status"]
        news = pending + written[len(pending) :]  # the extended-resource claim, as written
        mine = {id(c) for c, _, _ in result.newly}
        result.newly.extend((c, placement.node, group.pod) for c in news)
        if group.pod is not None:
            # PreBind reserves every claim of the pod: claims allocated earlier in this run show it.
            for claim in group.fixed:
                if id(claim) in mine:
                    _reserve(claim, group.pod)
    return result


def _reserve(claim: Obj, pod: Obj) -> None:
    meta = pod.get("metadata") or {}
    entry = {"resource": "pods", "name": str(meta.get("name", "")), "uid": pod_uid(pod)}
    reserved = claim["status"].setdefault("reservedFor", [])
    if all(r.get("uid") != entry["uid"] for r in reserved):
        reserved.append(entry)


__all__ = ["Group", "PodClaim", "Result", "allocate", "groups", "nodes_of", "pod_claims"]
