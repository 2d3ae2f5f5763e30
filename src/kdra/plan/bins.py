"""Nodes a plan places units on, existing or added, each asking the scheduler's own checks whether a unit
fits: node fit with the default profile's filter plugins (kdra.scheduler.nodefit) and device allocation with
the structured allocator (kdra.allocator), as cluster-autoscaler asks the scheduler framework about a template
node.

Existing nodes share one allocator index and one in-use state (the claims allocated in the cluster); an added
node uses its type's template index (kdra.plan.nodetypes) with an in-use state of its own. Placing a unit
allocates its claims and records its pods; `undo` takes a placement back exactly (gangs are tried all or
nothing)."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kdra.allocator import AllocatedState, AllocationOutcome, Allocator, AllocatorIndex, FeatureGates
from kdra.allocator._nodes import node_selector_matches
from kdra.allocator.summary import NodeFinding
from kdra.api.types import Obj
from kdra.errors import AllocationError
from kdra.plan.demand import PodDemand, Unit
from kdra.plan.nodetypes import NodeType
from kdra.scheduler.nodefit import NodeFit

if TYPE_CHECKING:
    from kdra.plan.inputs import Inputs


@dataclass
class Placement:
    """A unit on a bin: the allocation each of its claims got (results name the template's pools on added
    nodes: kdra.plan.result renames them)."""

    unit: Unit
    allocations: list[tuple[Obj, Obj]]  # (claim, status.allocation)


@dataclass(eq=False)
class Bin:
    name: str
    node: Obj  # the Node the checks see (an added node: its type's template)
    fit: NodeFit
    state: AllocatedState
    allocator: Allocator
    features: FeatureGates
    type: NodeType | None = None  # None: a node of the cluster
    domain: int | None = None  # added nodes one gang's topology keeps together share a domain id
    placements: list[Placement] = field(default_factory=list)
    full: set[str] = field(default_factory=set)  # unit shapes that did not fit (nothing is freed later)

    @property
    def added(self) -> bool:
        return self.type is not None

    @property
    def labels(self) -> Mapping[str, str]:
        return (self.node.get("metadata") or {}).get("labels") or {}

    def check(self, unit: Unit) -> NodeFinding | list[tuple[Obj, Obj]]:
        """The allocations the unit would get here, or why it does not fit. Changes nothing."""
        # The unit's pods together: each is checked with the ones before it on the node.
        info = self.fit.infos[self.fit_name]
        tried: list[str] = []
        try:
            for pd in unit.pods:
                reasons = self.fit.reasons(pd.info, self.fit_name)
                if reasons:
                    return NodeFinding(self.name, reasons=reasons)
                if pd.info.uid not in info.pods:
                    info.add_pod(pd.info)
                    tried.append(pd.info.uid)
        finally:
            for uid in tried:
                info.remove_pod(uid)
        labels = self.labels
        for c in unit.fixed:
            sel = c["status"]["allocation"].get("nodeSelector")
            if sel and (self.added or not node_selector_matches(sel, self.name, labels)):
                return NodeFinding(
                    self.name, message=f"allocated claim {c['metadata'].get('name')} is not available here"
                )
        if not unit.claims:
            return []
        # Each check is a scheduling cycle of its own (upstream builds an Allocator per pod, in PreFilter):
        # the allocator is shared by the cluster's bins and kept across units, and Kubernetes 1.36's
        # counters per pool name, kept while the state is unchanged, must not pass from a unit that fit
        # nowhere to the next (kdra.allocator.Allocator.new_cycle). Pool names are a node's own in every
        # fleet kdra renders, so a cycle per node is a cycle per unit.
        self.allocator.new_cycle()
        try:
            outcome: AllocationOutcome = self.allocator.allocate(self.node, unit.claims)
        except AllocationError as err:
            return NodeFinding(
                self.name, message=str(err), explanation=getattr(err, "lazy_explanation", None)
            )
        if outcome.allocations is None:
            return NodeFinding(self.name, explanation=outcome.lazy_explanation)
        return list(zip(unit.claims, outcome.allocations, strict=True))

    @property
    def fit_name(self) -> str:
        return str(self.node["metadata"]["name"])

    def place(self, unit: Unit) -> Placement | NodeFinding:
        got = self.check(unit)
        if isinstance(got, NodeFinding):
            self.full.add(unit.shape)
            return got
        for claim, allocation in got:
            self.state.add_claim(_with_allocation(claim, allocation), self.features)
        info = self.fit.infos[self.fit_name]
        for pd in unit.pods:
            info.add_pod(pd.info)
        p = Placement(unit, got)
        self.placements.append(p)
        return p

    def undo(self, p: Placement) -> None:
        self.placements.remove(p)
        for claim, allocation in p.allocations:
            self.state.remove_claim(_with_allocation(claim, allocation), self.features)
        info = self.fit.infos[self.fit_name]
        for pd in p.unit.pods:
            info.remove_pod(pd.info.uid)
        self.full.clear()  # something was freed


def _with_allocation(claim: Obj, allocation: Obj) -> Obj:
    return {**claim, "status": {**(claim.get("status") or {}), "allocation": allocation}}


class Cluster:
    """The nodes of the cluster as bins, over one index and one in-use state."""

    def __init__(
        self,
        nodes: Sequence[Obj],
        classes: Mapping[str, Obj],
        slices: Sequence[Obj],
        claims: Sequence[Obj],
        pods: Sequence[Obj],
        features: FeatureGates,
        taint_rules: Sequence[Obj] = (),
    ) -> None:
        self.features = features
        self.index = AllocatorIndex(dict(classes), list(slices), features, taint_rules=taint_rules)
        self.state = AllocatedState.from_claims(
            [c for c in claims if (c.get("status") or {}).get("allocation")], features
        )
        self.allocator = Allocator.from_index(self.index, self.state)
        self.fit = NodeFit(nodes, pods)
        self.bins = [
            Bin(str(n["metadata"]["name"]), n, self.fit, self.state, self.allocator, features) for n in nodes
        ]

    @classmethod
    def from_inputs(cls, inputs: Inputs, features: FeatureGates) -> Cluster:
        """The cluster a plan starts from: its nodes, devices and the claims and pods already running."""
        return cls(
            inputs.nodes,
            inputs.classes,
            inputs.slices,
            inputs.claims,
            inputs.running,
            features,
            taint_rules=inputs.taint_rules,
        )


def new_bin(t: NodeType, name: str, features: FeatureGates, domain: int | None = None) -> Bin:
    """An added node of type `t`: the template's checks with nothing on it."""
    state = AllocatedState()
    return Bin(
        name,
        t.template,
        NodeFit([t.template]),
        state,
        Allocator.from_index(t.index, state),
        features,
        type=t,
        domain=domain,
    )


def copies(unit: Unit, n: int) -> list[Unit]:
    """n copies of a unit with distinct claim and pod identities (to fill a node with one shape)."""
    out = []
    for i in range(n):
        mapping: dict[int, Obj] = {}
        claims = []
        for c in unit.claims:
            cc = {**c, "metadata": {**c["metadata"], "name": f"{c['metadata']['name']}-copy{i}"}}
            cc["metadata"].pop("uid", None)
            mapping[id(c)] = cc
            claims.append(cc)
        pods = []
        for pd in unit.pods:
            pod = copy.copy(pd.pod)
            pod["metadata"] = {**pd.pod["metadata"], "name": f"{pd.pod['metadata']['name']}-copy{i}"}
            pod["metadata"].pop("uid", None)
            info = copy.copy(pd.info)  # the same requests and constraints under another identity
            info.pod, info.name, info.uid = pod, pod["metadata"]["name"], f"{pd.info.uid}-copy{i}"
            pods.append(PodDemand(pod, info, [mapping.get(id(c), c) for c in pd.claims], pd.shape))
        out.append(Unit(pods, claims, unit.fixed, unit.shape))
    return out
