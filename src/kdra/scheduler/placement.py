"""One pod (or a group of claims) across every node, as kube-scheduler's scheduling cycle decides it, for
the offline tools: `kdra allocate`, `kdra explain` and the differential test against upstream's allocator.

The plugins are the scheduler's own (`default_plugins`: NodeUnschedulable, NodeName, TaintToleration,
NodeAffinity, NodeResourcesFit, DynamicResources) over a SchedulerCache of an in-memory store that holds the
objects, and the node-level part of DynamicResources runs through the same DraState (`DraState.fit`,
`extended_resource_claim` for extended resources a DeviceClass serves, KEP-5004). A cycle:

1. Filter on every node, in name order: the node-level plugins (every one of them is asked, so that an
   explanation can say how close a node came), the nodeSelector of the pod's allocated claims, then the
   devices for the claims still to allocate;
2. Score the nodes that fit with the profile's Score plugins, NormalizeScore, weights (kdra.scheduler.scoring:
   the scheduler's arithmetic): NodeAffinity and TaintToleration preferences, NodeResourcesFit, and
   DynamicResources' prioritized-list rank (KEP-4816);
3. the highest total wins; between equal totals the first node by name (kube-scheduler picks one of them
   at random, kdra's scheduler the first it learned of).

An allocation error on any node (not a verdict on the node, such as a CEL runtime error) ends the attempt,
as kube-scheduler's findNodesThatPassFilters does: `Placement.error`. Nodes that declare no resources
(no status.allocatable or capacity: a hand-written file, or nodes made up from slices) are not checked by
NodeResourcesFit. `Placer.commit` records a placement (the claims' allocations, the pod on its node) so
that the next pod sees it, as the scheduler's assume does.
"""

from __future__ import annotations

import copy
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kdra.allocator import FeatureGates
from kdra.allocator._nodes import node_selector_matches
from kdra.allocator.allocator import claim_ref
from kdra.allocator.summary import NodeFinding
from kdra.api.templates import generated_name, pod_uid
from kdra.api.types import Obj, namespaced_name
from kdra.cluster.store import MemoryStore
from kdra.errors import AllocationError
from kdra.scheduler.cache import SchedulerCache
from kdra.scheduler.dra import (
    EXTENDED_RESOURCE_CLAIM_ANNOTATION,
    ClaimDemand,
    DeviceFit,
    DraState,
    claim_spec_key,
)
from kdra.scheduler.framework import CycleState, FilterPlugin, ScorePlugin
from kdra.scheduler.nodefit import node_checks, node_declares_resources
from kdra.scheduler.owntext import OwnNames, personal
from kdra.scheduler.plugins.dynamicresources import DynamicResources, extended_resource_claim
from kdra.scheduler.podinfo import NodeInfo, PodInfo, container_extended_requests
from kdra.scheduler.scoring import add_weighted, best_node, prioritized_list_score

if TYPE_CHECKING:
    from kdra.scheduler.devicepref import MeasuredPreference

KINDS = ("Node", "DeviceClass", "ResourceSlice", "DeviceTaintRule", "ResourceClaim", "Pod")


@dataclass
class NodeScore:
    """A feasible node's score: the total and each Score plugin's part (normalised, times its weight)."""

    node: str
    total: int
    plugins: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "score": self.total, "plugins": dict(self.plugins)}


@dataclass
class Placement:
    """Where a pod (or a group of claims without a pod) goes, and what every node said."""

    pod: Obj | None
    claims: list[Obj]  # the claims to allocate, in pod order
    findings: list[NodeFinding]  # every node tried, in name order
    scores: list[NodeScore] = field(default_factory=list)  # the nodes that fit, best first
    node: str | None = None
    allocations: list[Obj] = field(default_factory=list)  # one per claim, on `node`
    # KEP-5004: the claim for the pod's extended resources DRA serves on `node`, with its allocation.
    extended_claim: Obj | None = None
    error: AllocationError | None = None  # an allocation error on some node: the attempt fails
    error_node: str = ""
    choice: dict[str, Any] | None = None  # with a device preference: what decided the devices
    gave_up: list[str] = field(default_factory=list)  # nodes whose search ran out of budget

    @property
    def placed(self) -> bool:
        return self.node is not None


class Placer:
    """Places pods one after the other on a fixed set of objects (Nodes, Pods, DeviceClasses,
    ResourceSlices, DeviceTaintRules, ResourceClaims; claims with status.allocation are in use, bound
    pods on their nodes)."""

    def __init__(
        self,
        objects: Iterable[Mapping[str, Any]],
        features: FeatureGates | None = None,
        *,
        preference: MeasuredPreference | None = None,
    ) -> None:
        from kdra.scheduler.scheduler import SchedulerConfig, default_plugins

        self.features = features or FeatureGates()
        self.store = MemoryStore()
        for obj in objects:
            if obj.get("kind") in KINDS:
                self.store.create(_stored(obj))
        self.cache = SchedulerCache(self.store)
        self.dra = DraState(self.cache, self.features, preference=preference)
        plugins = default_plugins(self.store, self.dra, SchedulerConfig(features=self.features))
        for p in plugins:
            p.bind_cache(self.cache)
        self.dynamic = next(p for p in plugins if isinstance(p, DynamicResources))
        self.filters = sorted(
            (p for p in plugins if isinstance(p, FilterPlugin) and p is not self.dynamic),
            key=lambda p: not p.filter_first,
        )
        self.scorers = [
            p for p in plugins if isinstance(p, ScorePlugin) and p.weight and p is not self.dynamic
        ]
        self.sized = {ni.name for ni in self.cache.nodes if node_declares_resources(ni.node)}
        # Per pod signature, per node: the last verdict and the node's (generation, cache epoch) then.
        self._memo: dict[Hashable, dict[str, Any]] = {}
        self._taken: set[tuple[str, str]] = {
            (c["metadata"].get("namespace", "default"), c["metadata"]["name"])
            for c in self.store.list("ResourceClaim")
        }

    @property
    def node_names(self) -> list[str]:
        return sorted(ni.name for ni in self.cache.nodes)

    # -- one pod -----------------------------------------------------------------------------------

    def place(
        self,
        pod: Mapping[str, Any] | None,
        claims: Sequence[Obj],
        allocated: Sequence[Obj] = (),
        *,
        nodes: Iterable[str] | None = None,
    ) -> Placement:
        """Filter `pod` (None: a group of claims on their own) with its `claims` to allocate and its
        `allocated` claims on `nodes` (default: every node), score those that fit, and pick one."""
        pi = PodInfo(_with_uid(pod) if pod is not None else {"metadata": {"name": ""}})
        claims = list(claims)
        self.dra.new_cycle()  # one scheduling cycle: upstream's Allocator lives this long
        out = Placement(dict(pod) if pod is not None else None, claims, [])
        state = CycleState()
        demand = ClaimDemand()
        for c in claims:
            demand.add_claim(c)
        served = self._extended(pi)
        by_name = self.cache.node_by_name
        names = sorted(by_name) if nodes is None else sorted(n for n in nodes if n in by_name)
        memo = self._memo_for(self._signature(state, pi, claims, allocated, served))
        fits: dict[str, DeviceFit] = {}
        for name in names:
            ni = by_name[name]
            stamp = (ni.generation, self.cache.epoch)
            hit = memo.get(name) if memo is not None else None
            if hit is not None and hit[0] == stamp and not (hit[2] is not None and hit[2].error):
                finding, fit = hit[1], hit[2]
                if fit is not None and fit.allocations is None:
                    # The same verdict, explained with these claims (what the allocator saw, from now)
                    # and in their names (kdra.scheduler.owntext).
                    todo, _need, _special = self._todo(pi, ni, claims, demand, served)
                    message = personal(OwnNames(hit[3]).neutral(finding.message), _refs(todo))
                    finding = NodeFinding(name, message=message, explanation=self.dra.explain(ni.node, todo))
            else:
                finding, fit = self._verdict(state, pi, ni, claims, demand, allocated, served)
                if memo is not None:
                    owner = _refs(self._todo(pi, ni, claims, demand, served)[0]) if finding.message else ()
                    memo[name] = (stamp, finding, fit, owner)
            out.findings.append(finding)
            if fit is None:
                continue
            if fit.allocations is not None:
                fits[name] = fit
                continue
            if fit.gave_up:
                out.gave_up.append(name)
            if fit.error and out.error is None:
                out.error, out.error_node = fit.exception, name
        if out.error is not None or not fits:
            return out
        out.scores = self._score(state, pi, [*allocated, *claims], demand, fits)
        out.node = out.scores[0].node
        # The verdict may be another pod's with the same signature: these claims get their own devices
        # (the same ones, the state being the same) and shares, and the pod its own extended claim.
        ni = by_name[out.node]
        todo, need, special = self._todo(pi, ni, claims, demand, served)
        fit = self.dra.fit(ni.node, todo, need) if todo else DeviceFit([])
        allocations = fit.allocations if fit.allocations is not None else fits[out.node].allocations or []
        out.allocations = allocations[: len(claims)]
        if special is not None:
            special = copy.deepcopy(special)
            special["status"] = {"allocation": allocations[len(claims)]}
            out.extended_claim = special
        if self.dra.preference is not None and claims:
            node = by_name[out.node].node
            out.choice = self.dra.record_choice(pi.key, node, claims, out.allocations)
        return out

    def _verdict(
        self,
        state: CycleState,
        pi: PodInfo,
        ni: NodeInfo,
        claims: list[Obj],
        demand: ClaimDemand,
        allocated: Sequence[Obj],
        served: Mapping[str, str],
    ) -> tuple[NodeFinding, DeviceFit | None]:
        """One node's Filter: its finding, and the devices' answer (None when ruled out before them)."""
        name = ni.name
        reasons, checks = node_checks(self.filters, state, pi, ni, sized=ni.name in self.sized)
        if reasons:
            return NodeFinding(name, reasons=reasons, checks=checks, device_gap=self._gap(ni, demand)), None
        for c in allocated:
            sel = c["status"]["allocation"].get("nodeSelector")
            if sel and not node_selector_matches(sel, name, ni.labels):
                where = "status.allocation.nodeSelector"
                return NodeFinding(
                    name,
                    message=f"allocated claim {namespaced_name(c)} is not available on this node ({where})",
                ), None
        todo, need, _special = self._todo(pi, ni, claims, demand, served)
        fit = self.dra.fit(ni.node, todo, need) if todo else DeviceFit([])
        if fit.allocations is None:
            return _finding(name, fit), fit
        return NodeFinding(name, fits=True, devices=_devices(fit.allocations)), fit

    def _todo(
        self, pi: PodInfo, ni: NodeInfo, claims: list[Obj], demand: ClaimDemand, served: Mapping[str, str]
    ) -> tuple[list[Obj], ClaimDemand, Obj | None]:
        """The claims to allocate on this node: the pod's, plus the KEP-5004 claim for the extended
        resources the node has no device-plugin capacity for."""
        ext = frozenset(r for r in served if r not in ni.allocatable)
        if not ext:
            return claims, demand, None
        special = self._extended_claim(pi, served, ext)
        need = ClaimDemand(dict(demand.exact), list(demand.alternatives), demand.may_raise)
        need.add_claim(special)
        return [*claims, special], need, special

    def _signature(
        self,
        state: CycleState,
        pi: PodInfo,
        claims: Sequence[Obj],
        allocated: Sequence[Obj],
        served: Mapping[str, str],
    ) -> Hashable:
        """What a node's verdict depends on besides the node (the filter plugins' own signatures, the
        claims' specs, the allocated claims' node selectors, the extended resources DRA serves): pods
        with equal signatures get equal verdicts on a node that did not change. None: not cached."""
        parts: list[Hashable] = []
        for p in self.filters:
            sig = p.signature(state, pi)
            if sig is None:
                return None
            parts.append(sig)
        parts.append(tuple(claim_spec_key(c) for c in claims))
        parts.append(
            tuple(
                (namespaced_name(c), claim_spec_key({"spec": c["status"]["allocation"]})) for c in allocated
            )
        )
        if served:
            parts.append((tuple(sorted(served.items())), repr(container_extended_requests(pi.pod))))
        return tuple(parts)

    def _memo_for(self, signature: Hashable) -> dict[str, Any] | None:
        if signature is None:
            return None
        if len(self._memo) > 256:
            self._memo.clear()
        return self._memo.setdefault(signature, {})

    def _extended(self, pi: PodInfo) -> dict[str, str]:
        """The pod's extended resources a DeviceClass serves (KEP-5004), with that class."""
        if not pi.ext_requests:
            return {}
        classes = self.dra.extended_resource_classes()
        return {r: classes[r] for r in pi.ext_requests if r in classes}

    def _extended_claim(self, pi: PodInfo, classes: Mapping[str, str], served: frozenset[str]) -> Obj:
        """The KEP-5004 claim, named as the API server will name it (a stable suffix here), so that what
        is said about it names it."""
        claim = extended_resource_claim(pi, classes, served)
        meta = claim["metadata"]
        taken = {n for ns, n in self._taken if ns == pi.namespace}
        meta["name"] = generated_name(meta["generateName"], f"{pi.uid}/extended-resources", taken)
        return claim

    def _gap(self, ni: NodeInfo, demand: ClaimDemand) -> Any:
        """(no device of a requested class on the node, devices short): the free-device bound, as if the
        node had passed the node-level checks. Computed only when nodes are ranked for an explanation."""

        def gap() -> tuple[bool, int]:
            dra, name = self.dra, ni.name
            classless, short = False, 0

            def lack(cls: str, sels: tuple[str, ...], n: int) -> tuple[bool, int]:
                if not n or dra.has_shared_devices(cls):
                    return False, 0
                none = not dra.index.devices_of_class(cls, node=name)
                return none, max(0, n - dra.free_devices(name, cls, sels))

            for (cls, sels), n in demand.exact.items():
                none, miss = lack(cls, sels, n)
                classless, short = classless or none, short + miss
            for alts in demand.alternatives:
                best = min(lack(cls, sels, n) for (cls, sels), n in alts)
                classless, short = classless or best[0], short + best[1]
            return classless, short

        return gap

    def _score(
        self,
        state: CycleState,
        pi: PodInfo,
        claims: list[Obj],
        demand: ClaimDemand,
        fits: Mapping[str, DeviceFit],
    ) -> list[NodeScore]:
        names = sorted(fits)
        totals = dict.fromkeys(names, 0)
        parts: dict[str, dict[str, int]] = {n: {} for n in names}
        by_name = self.cache.node_by_name
        for p in self.scorers:
            if not p.active(state, pi):
                continue  # scores every node alike (the scheduler skips it too)
            raw = {n: p.score(state, pi, by_name[n]) for n in names}
            for n, v in add_weighted(totals, p, state, pi, raw).items():
                parts[n][p.name] = v
        if demand.alternatives and self.features.prioritized_list:
            raw = {n: prioritized_list_score(claims, fits[n].allocations or []) for n in names}
            for n, v in add_weighted(totals, self.dynamic, state, pi, raw).items():
                parts[n][self.dynamic.name] = v
        first = best_node(totals, names)
        ranked = sorted(names, key=lambda n: (n != first, -totals[n], n))
        return [NodeScore(n, totals[n], parts[n]) for n in ranked]

    # -- after a placement ---------------------------------------------------------------------------

    def commit(self, placement: Placement) -> list[Obj]:
        """Record `placement` as the scheduler's Reserve and PreBind would (the claims allocated and
        reserved for the pod, the pod on its node), so that later placements see it. Returns the claims as
        written (the extended-resource claim last, named as the API server would name it)."""
        if placement.node is None:
            return []
        pod = _with_uid(placement.pod) if placement.pod is not None else None
        ref = None
        if pod is not None:
            ref = {"resource": "pods", "name": str(pod["metadata"].get("name", "")), "uid": pod_uid(pod)}
        written = [
            self._write(claim, allocation, ref)
            for claim, allocation in zip(placement.claims, placement.allocations, strict=True)
        ]
        if placement.extended_claim is not None:
            special = copy.deepcopy(placement.extended_claim)
            special["metadata"].pop("generateName", None)
            special["metadata"].pop("uid", None)
            written.append(self._write(special, special["status"]["allocation"], ref))
        if pod is not None:
            meta = pod["metadata"]
            stored = self.store.try_get("Pod", str(meta.get("name", "")), str(meta.get("namespace") or ""))
            if stored is not None:
                bound = copy.deepcopy(stored)
                bound.setdefault("spec", {})["nodeName"] = placement.node
                self.store.update(bound)
            else:
                self.cache.assume(PodInfo(pod), placement.node)
        return written

    def _write(self, claim: Obj, allocation: Obj, ref: dict[str, str] | None) -> Obj:
        done = copy.deepcopy(claim)
        status = done.setdefault("status", {})
        status["allocation"] = copy.deepcopy(allocation)
        if ref is not None:
            reserved = status.setdefault("reservedFor", [])
            if all(r.get("uid") != ref["uid"] for r in reserved):
                reserved.append(dict(ref))
        meta = done.get("metadata") or {}
        key = (meta.get("namespace") or "default", meta.get("name", ""))
        stored = self.store.try_get("ResourceClaim", key[1], key[0])
        if stored is None:
            self.store.create(_stored(done))
            self._taken.add(key)
        else:
            new = copy.deepcopy(stored)
            new["status"] = copy.deepcopy(status)
            self.store.update(new, subresource="status")
        return done


def _refs(claims: Sequence[Obj]) -> list[str]:
    """The claims as the allocator's texts name them."""
    return [claim_ref(c) for c in claims]


def _with_uid(pod: Mapping[str, Any]) -> Obj:
    """The pod with a uid (a stable one for pods from files, which have none)."""
    if (pod.get("metadata") or {}).get("uid"):
        return dict(pod)
    out = dict(pod)
    out["metadata"] = dict(pod.get("metadata") or {}, uid=pod_uid(dict(pod)))
    return out


def _stored(obj: Mapping[str, Any]) -> Obj:
    """What the in-memory store keeps for `obj` (it sets resourceVersion itself; pods get their stable uid):
    a new top level and metadata, the rest shared, since neither the store nor the placement changes an
    object in place (a write replaces it)."""
    new = _with_uid(obj) if obj.get("kind") == "Pod" else dict(obj)
    meta = dict(new.get("metadata") or {})
    meta.pop("resourceVersion", None)
    meta.pop("deletionTimestamp", None)
    new["metadata"] = meta
    return new


def _finding(node: str, fit: DeviceFit) -> NodeFinding:
    if fit.exception is not None:  # an allocation error on this node, with what the allocator saw
        return NodeFinding(node, message=fit.reason, explanation=fit.explanation)
    return NodeFinding(node, explanation=fit.explanation)


def _devices(allocations: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    return tuple(
        f"{r.get('driver')}/{r.get('pool')}/{r.get('device')}"
        for a in allocations
        for r in (a.get("devices") or {}).get("results") or []
    )


__all__ = ["EXTENDED_RESOURCE_CLAIM_ANNOTATION", "NodeScore", "Placement", "Placer"]
