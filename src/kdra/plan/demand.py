"""What must be placed: pods with their claims, grouped into units (pods that share an unallocated claim must
share a node) and jobs (a gang's units, placed all or nothing; or one unit).

Claims are resolved as the resourceclaim controller names them: a named ResourceClaim, the claim
pod.status.resourceClaimStatuses records, one the controller already made for the pod, or a new one
instantiated from the template (kdra.api.templates, the controller's own naming). Gangs are read with
kdra.scheduler.gang (every PodGroup shape the scheduler accepts).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kdra.api.templates import instantiate_template, is_claim_for_pod, pod_uid
from kdra.api.types import Obj
from kdra.api.types import namespaced_name as ref
from kdra.errors import InputError
from kdra.scheduler.gang import GangSpec, parse_pod_group, pod_group_ref, pod_queue, workload_gangs
from kdra.scheduler.podinfo import PodInfo


def allocated(claim: Mapping[str, Any]) -> bool:
    return bool((claim.get("status") or {}).get("allocation"))


@dataclass(eq=False)
class PodDemand:
    pod: Obj
    info: PodInfo
    claims: list[Obj]  # every claim the pod uses, in spec order
    shape: str  # what placement depends on, for caches: requests, node constraints, claim specs

    @property
    def key(self) -> str:
        return self.info.key


@dataclass(eq=False)
class Unit:
    """Pods that must land on one node: they share a claim that is not allocated yet."""

    pods: list[PodDemand]
    claims: list[Obj]  # the unallocated claims of all its pods, each once
    fixed: list[Obj]  # claims already allocated (they pin the unit to where their devices are)
    shape: str

    @property
    def keys(self) -> list[str]:
        return [p.key for p in self.pods]


@dataclass(eq=False)
class Job:
    """Placed all or nothing: a gang's units, else one unit."""

    key: str
    units: list[Unit]
    gang: GangSpec | None = None
    queue: str | None = None
    priority: int = 0

    @property
    def pods(self) -> list[PodDemand]:
        return [p for u in self.units for p in u.pods]


@dataclass
class Demand:
    jobs: list[Job] = field(default_factory=list)
    claims: dict[str, Obj] = field(default_factory=dict)  # ns/name -> claim (instantiated ones too)

    @property
    def pods(self) -> list[PodDemand]:
        return [p for j in self.jobs for p in j.pods]


def pod_info(pod: Obj) -> PodInfo:
    """The scheduler's view of the pod, keyed by a uid even when the input has none (NodeInfo counts pods by
    uid)."""
    info = PodInfo(pod)
    info.uid = info.uid or pod_uid(pod)
    return info


def _shape(pod: Mapping[str, Any], claims: Sequence[Mapping[str, Any]]) -> str:
    spec = pod.get("spec") or {}
    keep: dict[str, Any] = {
        k: spec.get(k) for k in ("nodeSelector", "affinity", "tolerations", "overhead") if spec.get(k)
    }
    keep["containers"] = [
        [c.get("resources"), c.get("restartPolicy")] for c in spec.get("containers") or []
    ] + [["init", c.get("resources"), c.get("restartPolicy")] for c in spec.get("initContainers") or []]
    keep["claims"] = [("allocated", ref(c)) if allocated(c) else (c.get("spec") or {}) for c in claims]
    return json.dumps(keep, sort_keys=True, default=str)


class ClaimResolver:
    """A pod's claims, as the resourceclaim controller resolves (or would create) them."""

    def __init__(self, claims: Iterable[Obj], templates: Iterable[Obj]) -> None:
        self.claims = {ref(c): c for c in claims}
        self.names: dict[str, set[str]] = {}  # namespace -> claim names taken
        for r in self.claims:
            ns, _, name = r.partition("/")
            self.names.setdefault(ns, set()).add(name)
        self.templates = {ref(t): t for t in templates}
        self.by_owner: dict[str, list[Obj]] = {}
        for c in self.claims.values():
            for o in (c.get("metadata") or {}).get("ownerReferences") or []:
                if o.get("kind") == "Pod" and o.get("controller"):
                    ns = (c.get("metadata") or {}).get("namespace") or "default"
                    self.by_owner.setdefault(f"{ns}/{o.get('name', '')}", []).append(c)

    def resolve(self, pod: Obj) -> list[Obj]:
        meta = pod.get("metadata") or {}
        ns = meta.get("namespace") or "default"
        statuses = {
            s.get("name"): s.get("resourceClaimName")
            for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
        }
        out: list[Obj] = []
        for i, entry in enumerate((pod.get("spec") or {}).get("resourceClaims") or []):
            where = f"Pod {ref(pod)}: spec.resourceClaims[{i}]"
            claim: Obj | None
            if entry.get("resourceClaimName"):
                claim = self.claims.get(f"{ns}/{entry['resourceClaimName']}")
                if claim is None:
                    raise InputError(
                        f"{where}.resourceClaimName: Not found: {entry['resourceClaimName']!r}: "
                        f"no ResourceClaim {ns}/{entry['resourceClaimName']}"
                    )
            elif entry.get("resourceClaimTemplateName"):
                entry_name = str(entry.get("name", ""))
                claim = (
                    self.claims.get(f"{ns}/{statuses.get(entry_name)}") if statuses.get(entry_name) else None
                )
                if claim is None:
                    claim = next(
                        (c for c in self.by_owner.get(ref(pod), []) if is_claim_for_pod(c, pod, entry_name)),
                        None,
                    )
                if claim is None:
                    tname = entry["resourceClaimTemplateName"]
                    template = self.templates.get(f"{ns}/{tname}")
                    if template is None:
                        raise InputError(
                            f"{where}.resourceClaimTemplateName: Not found: {tname!r}: "
                            f"no ResourceClaimTemplate {ns}/{tname}"
                        )
                    taken = self.names.setdefault(ns, set())
                    claim = instantiate_template(pod, entry_name, template, taken)
                    self.claims[ref(claim)] = claim
                    taken.add(claim["metadata"]["name"])
            else:
                continue
            if all(c is not claim for c in out):
                out.append(claim)
        return out


def gang_specs(objs: Iterable[Mapping[str, Any]]) -> dict[str, GangSpec]:
    """Every gang the objects define, keyed as pod_group_ref keys them."""
    objs = list(objs)
    workloads = {ref(o): dict(o) for o in objs if o.get("kind") == "Workload"}
    out: dict[str, GangSpec] = {}
    for o in objs:
        if o.get("kind") == "PodGroup":
            spec = parse_pod_group(o, workloads)
            out[spec.key] = spec
        elif o.get("kind") == "Workload":
            out.update(workload_gangs(o))
    return out


def _units(pods: Sequence[PodDemand]) -> list[Unit]:
    """Pods joined by the unallocated claims they share (union-find over claim refs), in input order."""
    parent = list(range(len(pods)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[str, int] = {}
    for i, p in enumerate(pods):
        for c in p.claims:
            if allocated(c):
                continue
            r = ref(c)
            if r in owner:
                parent[find(i)] = find(owner[r])
            else:
                owner[r] = i
    groups: dict[int, list[PodDemand]] = {}
    for i, p in enumerate(pods):
        groups.setdefault(find(i), []).append(p)
    units = []
    for members in groups.values():
        claims: list[Obj] = []
        fixed: list[Obj] = []
        for p in members:
            for c in p.claims:
                bucket = fixed if allocated(c) else claims
                if all(x is not c for x in bucket):
                    bucket.append(c)
        shape = members[0].shape if len(members) == 1 else json.dumps([m.shape for m in members])
        units.append(Unit(members, claims, fixed, shape))
    return units


def build_demand(
    pods: Sequence[Obj],
    claims: Iterable[Obj],
    templates: Iterable[Obj],
    gangs: Mapping[str, GangSpec],
) -> Demand:
    """Jobs for `pods` (pending ones): one per gang (its pending members), one per other unit."""
    resolver = ClaimResolver(claims, templates)
    demands = []
    for pod in pods:
        pod_claims = resolver.resolve(pod)
        demands.append(PodDemand(pod, pod_info(pod), pod_claims, _shape(pod, pod_claims)))

    # Units over all the pods at once: a claim shared by a gang member and a pod outside the gang (or by
    # two gangs' members) is allocated once, on one node, so its pods are one unit, and that unit is in the
    # gang's job (gangs joined by a unit are one job, under the first gang's spec).
    def gang_of(d: PodDemand) -> str | None:
        g = pod_group_ref(d.pod)
        return g[1] if g is not None and g[1] in gangs and gangs[g[1]].min_count > 1 else None

    joined: dict[str, str] = {}  # gang -> the gang whose job holds it

    def root(g: str) -> str:
        while joined.get(g, g) != g:
            g = joined[g]
        return g

    units = _units(demands)
    for unit in units:
        keys = [root(g) for d in unit.pods if (g := gang_of(d)) is not None]
        for g in keys:
            joined.setdefault(g, g)
            if root(g) != root(keys[0]):
                joined[root(g)] = root(keys[0])
    by_gang: dict[str, list[Unit]] = {}
    loose: list[Unit] = []
    for unit in units:
        keys = [g for d in unit.pods if (g := gang_of(d)) is not None]
        if keys:
            by_gang.setdefault(root(keys[0]), []).append(unit)
        else:
            loose.append(unit)
    jobs: list[Job] = []
    for key, members in by_gang.items():
        spec = gangs[key]
        first = next(d for u in members for d in u.pods if gang_of(d) is not None)
        jobs.append(
            Job(
                key,
                members,
                gang=spec,
                queue=spec.queue or pod_queue(first.pod),
                priority=spec.priority if spec.priority is not None else first.info.priority,
            )
        )
    for unit in loose:
        first = unit.pods[0]
        jobs.append(Job(first.key, [unit], queue=pod_queue(first.pod), priority=first.info.priority))
    return Demand(jobs, resolver.claims)
