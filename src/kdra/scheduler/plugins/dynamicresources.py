"""DynamicResources (pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go, 1.35/1.36).

PreEnqueue: every claim the pod references exists (template claims: named in pod.status.resourceClaimStatuses)
and is not being deleted. PreFilter: collects claims; allocated claims contribute their nodeSelector or are
"in use" when reservedFor is full; unallocated claims need existing classes. KEP-5004: extended resources
backed by a DeviceClass become a special claim on nodes without device-plugin capacity for them
(requests `container-<i>-request-<j>`). Filter: cheap free-device bound per class, then the allocator.
Score: prioritized-list scoring (8 - chosen subrequest index). Reserve: in-flight allocations. PreBind:
finalizer, status.allocation and reservedFor written to the store; special claim created.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kdra.allocator.allocator import claim_ref
from kdra.api import workloadapi
from kdra.api.pods import MAX_RESERVED_FOR, entry_claim_name, reserved_for
from kdra.api.types import Obj
from kdra.cluster.store import Store, clone
from kdra.scheduler.cache import SchedulerCache, claim_key
from kdra.scheduler.dra import (
    DELETE_PROTECTION_FINALIZER,
    EXTENDED_RESOURCE_CLAIM_ANNOTATION,
    ClaimChangedError,
    ClaimDemand,
    DraState,
    claim_spec_key,
    claim_status_for_pod,
)
from kdra.scheduler.framework import (
    EV_CLAIM_CHANGE,
    EV_CLASS_CHANGE,
    EV_NODE_ADD,
    EV_NODE_UPDATE,
    EV_POD_DELETE,
    EV_SLICE_CHANGE,
    SUCCESS,
    ClusterEvent,
    CycleState,
    FilterPlugin,
    PreBindPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    ReservePlugin,
    ScorePlugin,
    Status,
    error,
    unschedulable,
)
from kdra.scheduler.plugins.basic import default_normalize
from kdra.scheduler.plugins.dra_hints import DraHints
from kdra.scheduler.podinfo import NodeInfo, PodInfo, container_extended_requests
from kdra.scheduler.scoring import prioritized_list_score

if TYPE_CHECKING:
    from kdra.scheduler.session import Session

STATE_KEY = "DynamicResources"


class _AlreadyWritten(Exception):
    """A re-read claim already carries what PreBind was about to write."""


class _PodClaims:
    """What PreFilter found for one pod."""

    __slots__ = (
        "allocated",
        "bind_to",
        "demand",
        "ext",
        "node_selectors",
        "pending",
        "signature",
        "special_spec",
        "to_allocate",
    )

    def __init__(self) -> None:
        self.allocated: list[Obj] = []  # allocated claims, in pod order
        self.to_allocate: list[Obj] = []  # unallocated claims, in pod order
        # claims a member of the pod's gang is allocating (in flight): (claim, that allocation)
        self.pending: list[tuple[Obj, Obj]] = []
        # claim uid -> whom it is reserved for: the pod, or its PodGroup (KEP-5729, workloadapi.bind_to)
        self.bind_to: dict[str, dict[str, str]] = {}
        self.node_selectors: list[Mapping[str, Any]] = []
        self.ext: dict[str, str] = {}  # extended resource -> DeviceClass serving it
        self.special_spec: dict[frozenset[str], Obj] = {}  # by the resources DRA serves on a node
        self.demand = ClaimDemand()
        self.signature: Hashable = None


def claim_ref_for(state: CycleState, pi: PodInfo, claim: Mapping[str, Any]) -> dict[str, str]:
    """Whom PreBind reserves `claim` for: the pod, or its PodGroup for a PodGroup-level claim."""
    pc: _PodClaims | None = state.get(STATE_KEY)
    ref = pc.bind_to.get(claim["metadata"].get("uid", "")) if pc is not None else None
    return ref if ref is not None else workloadapi.pod_ref(pi.pod)


class DynamicResources(
    PreEnqueuePlugin, PreFilterPlugin, FilterPlugin, ScorePlugin, ReservePlugin, PreBindPlugin
):
    name = "DynamicResources"
    events = frozenset(
        {EV_NODE_ADD, EV_NODE_UPDATE, EV_CLAIM_CHANGE, EV_SLICE_CHANGE, EV_CLASS_CHANGE, EV_POD_DELETE}
    )
    weight = 2  # KEP-4816 suggests 2 for prioritized-list scoring
    exact_hints = True  # kdra.scheduler.plugins.dra_hints

    def __init__(self, store: Store, dra: DraState) -> None:
        self.store = store
        self.dra = dra
        # (pod signature, node idx) -> (node generation, cache epoch, allocations Filter found): only the
        # latest answer per node is kept, so the table is bounded by signatures x nodes, not by how often
        # nodes changed (every allocation on a node changes its generation).
        self._results: dict[tuple[Hashable, int], tuple[int, int, Hashable, Any]] = {}
        # Optional (pod, claim) -> (the claim to allocate, what that depends on): a pod group's
        # cross-claim constraints narrow a member's requests (kdra.scheduler.groupconstraints).
        self.claim_rewriter: Any = None
        # pod uid -> its gang (the session's): members may share a claim one of them is allocating
        self.gang_of: Callable[[str], str | None] | None = None
        self._hints: DraHints | None = None
        # KEP-5729: claims of a scheduling.k8s.io PodGroup are shared by its members, reserved for it
        self.group_claims = workloadapi.claims_enabled(dra.features)

    def bind_cache(self, cache: SchedulerCache) -> None:
        super().bind_cache(cache)
        self._hints = DraHints(cache, self.dra.features)

    def queueing_hint(self, event: ClusterEvent, pi: PodInfo) -> bool:
        """See kdra.scheduler.plugins.dra_hints."""
        return self._hints.may_help(event, pi) if self._hints is not None else True

    # -- PreEnqueue ------------------------------------------------------------------------------

    def pre_enqueue(self, pi: PodInfo) -> Status:
        claims = self.dra.cache.claims
        for entry in pi.claim_refs:
            name, from_template = entry_claim_name(pi.pod, entry)
            if name is None:
                if from_template and "resourceClaimStatuses" in (pi.pod.get("status") or {}):
                    continue  # resourceClaimName nil: no claim needed for this entry
                return unschedulable(f'waiting for resource claim "{entry.get("name")}" to be created')
            claim = claims.get(claim_key(pi.namespace, name))
            if claim is None:
                return unschedulable(f'resourceclaim "{name}" not found')
            if claim["metadata"].get("deletionTimestamp"):
                return unschedulable(f'resourceclaim "{name}" is being deleted')
        return SUCCESS

    # -- PreFilter -------------------------------------------------------------------------------

    def pre_filter(self, state: CycleState, pi: PodInfo) -> Status:
        self.dra.new_cycle()
        pc = _PodClaims()
        state[STATE_KEY] = pc
        cache = self.dra.cache
        sig: list[Any] = []
        group: Obj | None = None
        if self.group_claims and pi.claim_refs:
            group_name = workloadapi.pod_group_name(pi.pod)
            if group_name is not None:
                # getPodGroupSnapshot: the claims' consumers are known only with the pod's PodGroup
                group = cache.pod_groups.get(claim_key(pi.namespace, group_name))
                if group is None:
                    return unschedulable(f'podgroup.scheduling.k8s.io "{group_name}" not found')
        for entry in pi.claim_refs:
            name, from_template = entry_claim_name(pi.pod, entry)
            if name is None:
                if from_template and "resourceClaimStatuses" in (pi.pod.get("status") or {}):
                    continue
                return unschedulable(f'waiting for resource claim "{entry.get("name")}" to be created')
            claim = cache.claims.get(claim_key(pi.namespace, name))
            if claim is None:
                return unschedulable(f'resourceclaim "{name}" not found')
            if from_template:
                problem = workloadapi.claim_owner_error(pi.pod, claim, self.group_claims)
                if problem is not None:
                    return unschedulable(problem, resolvable=False)
            uid = claim["metadata"].get("uid", "")
            pc.bind_to[uid] = workloadapi.bind_to(pi.pod, group, entry)
            alloc = (claim.get("status") or {}).get("allocation")
            if alloc:
                if (
                    not workloadapi.is_reserved_for_pod(pi.pod, claim, self.group_claims)
                    and len(reserved_for(claim)) >= MAX_RESERVED_FOR
                ):
                    return unschedulable(
                        f'resourceclaim in use: "{name}" is reserved for {MAX_RESERVED_FOR} consumers'
                    )
                pc.allocated.append(claim)
                if alloc.get("nodeSelector"):
                    pc.node_selectors.append(alloc["nodeSelector"])
                sig.append(("A", _json(alloc.get("nodeSelector"))))
            elif uid in self.dra.assumed:
                # In flight: a member of the pod's gang reserved it in this placement (upstream: the
                # same PodGroup scheduling cycle) and the pod takes the same allocation; anyone else waits.
                if not self._same_gang(pi.uid, self.dra.assumed_by.get(uid)):
                    return unschedulable(
                        f"resource claim {pi.namespace}/{name} is in the process of being allocated"
                    )
                pending = (self.dra.assumed[uid].get("status") or {}).get("allocation") or {}
                pc.pending.append((claim, pending))
                if pending.get("nodeSelector"):
                    pc.node_selectors.append(pending["nodeSelector"])
                sig.append(("A", _json(pending.get("nodeSelector"))))
            else:
                st = self._check_classes(claim)
                if not st.ok:
                    return st
                key: Hashable = self._spec_key(claim)
                if self.claim_rewriter is not None:
                    claim, extra = self.claim_rewriter(pi, claim)
                    if extra is not None:
                        key = (key, extra)
                pc.to_allocate.append(claim)
                pc.demand.add_claim(claim)
                sig.append(("U", key))
        if pi.ext_requests:
            ext_classes = self.dra.extended_resource_classes()
            for res in pi.ext_requests:
                cls = ext_classes.get(res)
                if cls is not None:
                    pc.ext[res] = cls
            # the claim made for them asks for as many devices as the pod requests: the counts belong in it
            counts = tuple(sorted((r, pi.ext_requests[r]) for r in pc.ext))
            sig.append(("X", tuple(sorted(pc.ext.items())), counts))
        pc.signature = tuple(sig)
        return SUCCESS

    def _same_gang(self, uid: str, holder: str | None) -> bool:
        if holder is None or self.gang_of is None:
            return False
        gang = self.gang_of(uid)
        return gang is not None and gang == self.gang_of(holder)

    def _spec_key(self, claim: Obj) -> str:
        # A claim's spec is immutable: one key per claim uid (dropped with the claim, DraState.on_claim).
        uid = claim["metadata"].get("uid", "")
        if not uid:
            return claim_spec_key(claim)
        key = self.dra.spec_keys.get(uid)
        if key is None:
            key = self.dra.spec_keys[uid] = claim_spec_key(claim)
        return key

    def _check_classes(self, claim: Obj) -> Status:
        classes = self.dra.cache.classes
        for req in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
            subs = [req["exactly"]] if req.get("exactly") else list(req.get("firstAvailable") or [])
            for sub in subs:
                cls = sub.get("deviceClassName", "")
                if cls not in classes:
                    return unschedulable(
                        f"request {req.get('name')}: device class {cls} does not exist", resolvable=False
                    )
        return SUCCESS

    def special_claim(self, pi: PodInfo, pc: _PodClaims, ni: NodeInfo) -> Obj | None:
        """KEP-5004: the claim for extended resources this node has no device-plugin capacity for."""
        if not pc.ext:
            return None
        served = frozenset(r for r in pc.ext if r not in ni.allocatable)
        if not served:
            return None
        spec = pc.special_spec.get(served)
        if spec is None:
            spec = pc.special_spec[served] = extended_resource_claim(pi, pc.ext, served)
        return spec

    # -- Filter ----------------------------------------------------------------------------------

    def signature(self, state: CycleState, pi: PodInfo) -> Hashable:
        pc: _PodClaims | None = state.get(STATE_KEY)
        return pc.signature if pc is not None else None

    def own_names(self, state: CycleState, pi: PodInfo) -> Sequence[str]:
        """The claims the allocator's texts name (klog.KObj), in signature order; the extended-resource
        claim has no name yet, so it reads `namespace/`."""
        pc: _PodClaims | None = state.get(STATE_KEY)
        if pc is None:
            return ()
        names = [claim_ref(c) for c in pc.to_allocate]
        if pc.ext:
            names.append(f"{pi.namespace}/")
        return names

    def filter(self, state: CycleState, pi: PodInfo, ni: NodeInfo) -> Status:
        return self._filter(state, pi, ni, reuse=True)

    def _filter(self, state: CycleState, pi: PodInfo, ni: NodeInfo, *, reuse: bool) -> Status:
        """Filter; `reuse`: claims of this signature that fit the node in its current state, whatever
        device order found them, fit without a new search (which devices is decided again at Reserve)."""
        pc: _PodClaims = state[STATE_KEY]
        if pc.node_selectors:
            from kdra.allocator._nodes import node_selector_matches

            for sel in pc.node_selectors:
                if not node_selector_matches(sel, ni.name, ni.labels):
                    return unschedulable("resourceclaim not available on the node", resolvable=False)
        claims = list(pc.to_allocate)
        special = self.special_claim(pi, pc, ni)
        if special is not None:
            claims.append(special)
        if not claims:
            return SUCCESS
        if reuse and self._remembered(pc, ni, any_order=True) is not None:
            return SUCCESS
        demand = pc.demand
        if special is not None:
            demand = ClaimDemand(dict(pc.demand.exact), list(pc.demand.alternatives))
            demand.add_claim(special)
        fit = self.dra.fit(ni.node, claims, demand)
        if fit.allocations is None:
            if fit.error:
                return error(fit.reason)
            # The explanation is computed only if the pod's final message prints it.
            return unschedulable(fit.reason, explanation=None if fit.node_error else fit.explanation)
        self._remember(pc, ni, fit.allocations)
        return SUCCESS

    def drop_caches(self) -> None:
        self._results.clear()

    def open_session(self, ssn: Session) -> None:
        # A PodGroup's device constraints rewrite its members' claims (kdra.scheduler.groupconstraints).
        self.claim_rewriter = ssn.claim_rewriter
        self.gang_of = ssn.gang_of

    def _remember(self, pc: _PodClaims, ni: NodeInfo, allocations: Any) -> None:
        if len(self._results) > 100_000:  # many pod shapes on many nodes: start afresh
            self._results.clear()
        self._results[(pc.signature, ni.idx)] = (
            ni.generation,
            self.dra.cache.epoch,
            self._preference_token(),
            allocations,
        )

    def _remembered(self, pc: _PodClaims, ni: NodeInfo, *, any_order: bool = False) -> Any:
        got = self._results.get((pc.signature, ni.idx))
        if got is None or got[0] != ni.generation or got[1] != self.dra.cache.epoch:
            return None
        if not any_order and got[2] != self._preference_token():
            return None
        return got[3]

    def _preference_token(self) -> Hashable:
        """A device preference whose order depends on more than the node's state (the pod, a placement
        policy's state) names that by a `token()`: devices found under another token are searched again."""
        token = getattr(self.dra.preference, "token", None)
        return token() if token is not None else None

    def allocations_for(self, state: CycleState, pi: PodInfo, ni: NodeInfo) -> list[Obj] | None:
        pc: _PodClaims = state[STATE_KEY]
        got = self._remembered(pc, ni)
        if got is None:
            st = self._filter(state, pi, ni, reuse=False)
            if not st.ok:
                return None
            got = self._remembered(pc, ni)
        return list(got) if got is not None else []

    # -- Score (prioritized list) ----------------------------------------------------------------

    def active(self, state: CycleState, pi: PodInfo) -> bool:
        pc: _PodClaims | None = state.get(STATE_KEY)
        return bool(pc and pc.demand.alternatives)

    def score(self, state: CycleState, pi: PodInfo, ni: NodeInfo) -> int:
        if not self.dra.features.prioritized_list:
            return 0
        pc: _PodClaims = state[STATE_KEY]
        allocations = self.allocations_for(state, pi, ni) or []
        return prioritized_list_score([*pc.allocated, *pc.to_allocate], allocations)

    def needs_normalize(self, state: CycleState, pi: PodInfo) -> bool:
        return True

    def normalize(self, state: CycleState, pi: PodInfo, scores: dict[int, int]) -> None:
        default_normalize(scores, reverse=False)

    # -- Reserve / Unreserve ---------------------------------------------------------------------

    def reserve(self, state: CycleState, pi: PodInfo, node: str) -> Status:
        pc: _PodClaims = state[STATE_KEY]
        ni = self.dra.cache.node_by_name[node]
        special = self.special_claim(pi, pc, ni)
        claims = list(pc.to_allocate) + ([special] if special is not None else [])
        # A gang member's in-flight claim this pod shares: PreBind writes it if the member has not yet.
        state["dra_pending"] = list(pc.pending)
        if not claims:
            state["dra_allocations"] = []
            return SUCCESS
        allocs = self.allocations_for(state, pi, ni)
        if allocs is None or len(allocs) != len(claims):
            return unschedulable("cannot allocate all claims")
        state["dra_allocations"] = list(zip(claims, allocs, strict=True))
        if self.dra.preference is not None:  # before assuming: against first fit under the same state
            self.dra.record_choice(pi.key, ni.node, claims, allocs)
        for claim, alloc in state["dra_allocations"]:
            self.dra.assume(claim, alloc, pi.uid)
        return SUCCESS

    def unreserve(self, state: CycleState, pi: PodInfo, node: str) -> None:
        for claim, _ in state.get("dra_allocations") or []:
            self.dra.forget_assumed(claim["metadata"].get("uid", ""))

    # -- PreBind ---------------------------------------------------------------------------------

    def pre_bind(self, state: CycleState, pi: PodInfo, node: str) -> Status:
        own = workloadapi.pod_ref(pi.pod)
        try:
            for claim, alloc in [*(state.get("dra_allocations") or []), *(state.get("dra_pending") or [])]:
                meta = claim["metadata"]
                if meta.get("annotations", {}).get(EXTENDED_RESOURCE_CLAIM_ANNOTATION) == "true" and meta.get(
                    "uid", ""
                ).startswith("special-"):
                    self._create_special(pi, claim, alloc, own)
                    continue
                self._write_claim(claim, claim_ref_for(state, pi, claim), alloc, allocate=True)
            for claim in self.to_reserve(state, pi):
                self._write_claim(
                    claim,
                    claim_ref_for(state, pi, claim),
                    (claim.get("status") or {}).get("allocation") or {},
                    allocate=False,
                )
        except ClaimChangedError as exc:
            return error(str(exc))
        return SUCCESS

    def to_reserve(self, state: CycleState, pi: PodInfo) -> list[Obj]:
        """Allocated claims PreBind still has to reserve for the pod (or for its PodGroup)."""
        pc: _PodClaims = state[STATE_KEY]
        return [c for c in pc.allocated if not workloadapi.is_reserved_for_pod(pi.pod, c, self.group_claims)]

    def _write_claim(self, claim: Obj, ref: dict[str, str], alloc: Obj, *, allocate: bool) -> None:
        """PreBind's writes for one claim: the delete-protection finalizer (when allocating), then status;
        each conditional, and after a conflict decided again on the re-read claim (claim_status_for_pod):
        what is already there is not written twice, and someone else's change stops the pod."""
        store = self.store
        meta = claim["metadata"]
        name, ns = meta["name"], meta.get("namespace", "default")
        current = store.get("ResourceClaim", name, ns)
        if claim_status_for_pod(current, ref, alloc, allocate=allocate) is None:
            return
        if allocate and DELETE_PROTECTION_FINALIZER not in (current["metadata"].get("finalizers") or []):

            def add_finalizer(c: Obj) -> None:
                claim_status_for_pod(c, ref, alloc, allocate=True)  # never on a claim someone else took
                fins = c["metadata"].setdefault("finalizers", [])
                if DELETE_PROTECTION_FINALIZER not in fins:
                    fins.append(DELETE_PROTECTION_FINALIZER)

            store.update_with_retry("ResourceClaim", name, ns, add_finalizer)

        def set_status(c: Obj) -> None:
            new = claim_status_for_pod(c, ref, alloc, allocate=allocate)
            if new is None:
                raise _AlreadyWritten
            c["status"] = clone(new)

        with contextlib.suppress(_AlreadyWritten):
            store.update_with_retry("ResourceClaim", name, ns, set_status, subresource="status")

    def _create_special(self, pi: PodInfo, claim: Obj, alloc: Obj, ref: dict[str, str]) -> None:
        new = clone(claim)
        new["metadata"].pop("uid", None)
        new["metadata"]["finalizers"] = [DELETE_PROTECTION_FINALIZER]
        created = self.store.create(new)
        self.dra.forget_assumed(claim["metadata"]["uid"])
        upd = clone(created)
        upd["status"] = {"allocation": clone(alloc), "reservedFor": [dict(ref)]}
        created = self.store.update(upd, subresource="status")
        mappings = [
            {"containerName": c["name"], "resourceName": res, "requestName": f"container-{i}-request-{j}"}
            for i, c in enumerate(
                ((pi.pod.get("spec") or {}).get("initContainers") or [])
                + ((pi.pod.get("spec") or {}).get("containers") or [])
            )
            for j, res in enumerate(
                sorted(r for r in ((c.get("resources") or {}).get("limits") or {}) if r in pi.ext_requests)
            )
            if any(r["name"] == f"container-{i}-request-{j}" for r in claim["spec"]["devices"]["requests"])
        ]

        def patch(p: Obj) -> None:
            p.setdefault("status", {})["extendedResourceClaimStatus"] = {
                "resourceClaimName": created["metadata"]["name"],
                "requestMappings": mappings,
            }

        self.store.update_with_retry("Pod", pi.name, pi.namespace, patch, subresource="status")


def extended_resource_claim(pi: PodInfo, classes: Mapping[str, str], served: frozenset[str]) -> Obj:
    """KEP-5004: the claim DynamicResources makes for a pod's extended resources that DRA serves on a node
    (`served`, each through the DeviceClass `classes` names): one request `container-<i>-request-<j>` per
    container and resource, owned by the pod."""
    requests = []
    for i, _cname, ext in container_extended_requests(pi.pod):
        for j, res in enumerate(sorted(ext)):
            if res in served:
                requests.append(
                    {
                        "name": f"container-{i}-request-{j}",
                        "exactly": {
                            "deviceClassName": classes[res],
                            "allocationMode": "ExactCount",
                            "count": ext[res],
                        },
                    }
                )
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "generateName": f"{pi.name}-extended-resources-",
            "namespace": pi.namespace,
            "uid": f"special-{pi.uid}",
            "annotations": {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": pi.name,
                    "uid": pi.uid,
                    "controller": True,
                }
            ],
        },
        "spec": {"devices": {"requests": requests}},
    }


def _json(x: Any) -> str:
    import json

    return json.dumps(x, sort_keys=True)
