"""Gangs: which pods must be placed together, read from the PodGroup shapes users already write.

Accepted shapes (a pod names its group; the group gives the minimum count, queue and topology):

- kdra PodGroup (kdra.dev/v1alpha1): `spec.minMember` (or `minCount`); pods name it with the annotation or
  label `kdra.dev/pod-group`;
- KAI PodGroup (scheduling.run.ai/v2alpha2): `spec.minMember`; annotation/label `pod-group-name`;
- Volcano PodGroup (scheduling.volcano.sh/v1beta1): `spec.minMember`; annotation
  `scheduling.k8s.io/group-name`;
- scheduler-plugins PodGroup (scheduling.x-k8s.io/v1alpha1): `spec.minMember`; label
  `scheduling.x-k8s.io/pod-group`;
- upstream PodGroup (scheduling.k8s.io, KEP-4671/KEP-5832): `spec.schedulingPolicy.gang.minCount`, or the
  Workload podGroupTemplate it names (v1alpha2, 1.36: `spec.podGroupTemplateRef.workload{workloadName,
  podGroupTemplateName}`; v1beta1, 1.37: `spec.workloadRef{workloadName, templateName}`);
  `spec.schedulingConstraints.topology[0].key` is a required topology level; pods set
  `spec.schedulingGroup.podGroupName`;
- upstream Workload, 1.35 shape: `spec.podGroups[].policy.gang.minCount`; pods set
  `spec.workloadRef{name, podGroup, podGroupReplicaKey}` (one gang per replica key).

kdra extensions on any of them (spec fields, or `kdra.dev/...` annotations on the group): `queue`,
`priority`, `preemptibility` (`preemptible` | `non-preemptible`), `topologyConstraint{requiredTopologyLevel,
preferredTopologyLevel}` (KAI's field; Volcano's `networkTopology{mode: hard|soft, highestTierName}` maps to
required|preferred), `scheduleTimeout` (a duration: after it the gang is marked unschedulable and no longer
tried; scheduler-plugins' `scheduleTimeoutSeconds` is read too), `deviceConstraints` (matchAttribute /
distinctAttribute across the members' claims: kdra.scheduler.groupconstraints).

A pod that names a group which does not exist (yet) waits, as upstream's GangScheduling PreEnqueue does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kdra.api.durations import parse_duration
from kdra.api.types import Obj
from kdra.cluster.store import Store, WatchEvent
from kdra.errors import InputError
from kdra.scheduler.groupconstraints import GroupConstraint, parse_device_constraints

KDRA_API = "kdra.dev/v1alpha1"
KAI_PODGROUP_API = "scheduling.run.ai/v2alpha2"
VOLCANO_API = "scheduling.volcano.sh/v1beta1"
PLUGINS_API = "scheduling.x-k8s.io/v1alpha1"
UPSTREAM_GROUP = "scheduling.k8s.io"

POD_GROUP_REFS = (
    "kdra.dev/pod-group",
    "pod-group-name",  # KAI
    "scheduling.k8s.io/group-name",  # Volcano
    "scheduling.x-k8s.io/pod-group",  # scheduler-plugins coscheduling
)
QUEUE_REFS = ("kdra.dev/queue", "kai.scheduler/queue", "runai/queue", "scheduling.volcano.sh/queue-name")
DEFAULT_QUEUE = "default"
PREEMPTIBLE = "preemptible"
NON_PREEMPTIBLE = "non-preemptible"
SCHEDULING_KINDS = frozenset({"PodGroup", "Workload", "Queue", "Topology", "SchedulingShard"})


def is_scheduling_object(obj: Mapping[str, Any]) -> bool:
    """A gang/queue/topology object kdra's scheduler reads (any of the accepted apiVersions)."""
    return obj.get("kind") in SCHEDULING_KINDS


@dataclass(frozen=True)
class TopologyConstraint:
    required: str | None = None  # a node label key (or a Topology level name resolved later)
    preferred: str | None = None

    def __bool__(self) -> bool:
        return bool(self.required or self.preferred)


@dataclass
class GangSpec:
    """One gang: `min_count` members must fit at once."""

    key: str  # "<namespace>/<name>" (upstream Workload groups: "<ns>/<workload>/<group>[/<replica>]")
    source: str  # the object it came from, for explanations
    min_count: int
    queue: str | None = None
    priority: int | None = None
    preemptible: bool | None = None
    topology: TopologyConstraint = field(default_factory=TopologyConstraint)
    timeout: float | None = None
    obj: Obj | None = None  # the stored object, when there is one (its status is written)
    device_constraints: tuple[GroupConstraint, ...] = ()  # across the members' claims


def _ann(obj: Mapping[str, Any], key: str) -> Any:
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(key)


def _nonneg_int(v: Any, where: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise InputError(f"{where}: Invalid value: {v!r}: must be a non-negative integer")
    return v


def _topology(spec: Mapping[str, Any], obj: Mapping[str, Any], where: str) -> TopologyConstraint:
    tc = spec.get("topologyConstraint") or {}
    if not isinstance(tc, Mapping):
        raise InputError(f"{where}.topologyConstraint: Invalid value: {tc!r}: must be of type object")
    req = tc.get("requiredTopologyLevel") or _ann(obj, "kai.scheduler/topology-required-placement")
    pref = tc.get("preferredTopologyLevel") or _ann(obj, "kai.scheduler/topology-preferred-placement")
    nt = spec.get("networkTopology") or {}
    if not isinstance(nt, Mapping):
        raise InputError(f"{where}.networkTopology: Invalid value: {nt!r}: must be of type object")
    tier = nt.get("highestTierName")
    if tier:
        if nt.get("mode", "hard") == "hard":
            req = req or tier
        else:
            pref = pref or tier
    req = req or _ann(obj, "kdra.dev/topology-required-level")
    pref = pref or _ann(obj, "kdra.dev/topology-preferred-level")
    return TopologyConstraint(req or None, pref or None)


def _common(spec: Mapping[str, Any], obj: Mapping[str, Any], where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    queue = spec.get("queue") or _ann(obj, "kdra.dev/queue") or _labels(obj).get("kai.scheduler/queue")
    out["queue"] = str(queue) if queue else None
    prio = spec.get("priority", _ann(obj, "kdra.dev/priority"))
    if prio is not None:
        try:
            out["priority"] = int(prio)
        except (TypeError, ValueError):
            raise InputError(f"{where}.priority: Invalid value: {prio!r}: must be an integer") from None
    pre = spec.get("preemptibility") or _ann(obj, "kai.scheduler/preemptibility")
    if pre is not None:
        if pre not in (PREEMPTIBLE, NON_PREEMPTIBLE):
            raise InputError(
                f"{where}.preemptibility: Unsupported value: {pre!r}: "
                f'supported values: "{PREEMPTIBLE}", "{NON_PREEMPTIBLE}"'
            )
        out["preemptible"] = pre == PREEMPTIBLE
    out["topology"] = _topology(spec, obj, where)
    timeout = spec.get("scheduleTimeout", _ann(obj, "kdra.dev/schedule-timeout"))
    if timeout is None and spec.get("scheduleTimeoutSeconds") is not None:
        timeout = spec["scheduleTimeoutSeconds"]
    if timeout is not None:
        out["timeout"] = parse_duration(timeout, f"{where}.scheduleTimeout")
    out["device_constraints"] = parse_device_constraints(spec.get("deviceConstraints"), where)
    return out


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _api_group(obj: Mapping[str, Any]) -> str:
    return str(obj.get("apiVersion") or "").split("/", 1)[0]


def parse_pod_group(obj: Mapping[str, Any], workloads: Mapping[str, Obj] | None = None) -> GangSpec:
    """A PodGroup (any accepted shape) as a GangSpec; InputError naming object and field on bad input."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace") or "default"
    name = meta.get("name", "")
    where = f"PodGroup {ns}/{name}: spec"
    spec = obj.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise InputError(f"{where}: Invalid value: must be an object")
    template: Mapping[str, Any] = {}
    if _api_group(obj) == UPSTREAM_GROUP:
        gang = (spec.get("schedulingPolicy") or {}).get("gang")
        # v1alpha2 (1.36) names its template podGroupTemplateRef.workload, v1beta1 (1.37) workloadRef.
        ref = (spec.get("podGroupTemplateRef") or {}).get("workload") or spec.get("workloadRef") or {}
        if ref:
            wl = (workloads or {}).get(f"{ns}/{ref.get('workloadName', '')}")
            tname = ref.get("podGroupTemplateName") or ref.get("templateName")
            for t in ((wl or {}).get("spec") or {}).get("podGroupTemplates") or []:
                if t.get("name") == tname:
                    template = t
                    if gang is None:
                        gang = (t.get("schedulingPolicy") or {}).get("gang")
        min_count = _nonneg_int((gang or {}).get("minCount", 1), f"{where}.schedulingPolicy.gang.minCount")
        if gang is None:
            min_count = 1  # basic policy: no gang
    else:
        raw = spec.get("minMember", spec.get("minCount", 1))
        min_count = _nonneg_int(raw, f"{where}.minMember")
    common = _common(spec, obj, where)
    if _api_group(obj) == UPSTREAM_GROUP and not common["topology"]:
        topo = (spec.get("schedulingConstraints") or template.get("schedulingConstraints") or {}).get(
            "topology"
        )
        if topo:
            key = (topo[0] or {}).get("key") if isinstance(topo[0], Mapping) else None
            if not key:
                raise InputError(f"{where}.schedulingConstraints.topology[0].key: Required value")
            common["topology"] = TopologyConstraint(str(key), None)
    if common.get("priority") is None and isinstance(template.get("priority"), int):
        common["priority"] = template["priority"]
    return GangSpec(f"{ns}/{name}", f"PodGroup {ns}/{name}", min_count, obj=dict(obj), **common)


def workload_gangs(obj: Mapping[str, Any]) -> dict[str, GangSpec]:
    """The 1.35 Workload shape: `spec.podGroups[]{name, policy.gang.minCount}` -> gangs keyed ns/wl/group."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace") or "default"
    name = meta.get("name", "")
    spec = obj.get("spec") or {}
    out = {}
    for i, g in enumerate(spec.get("podGroups") or []):
        where = f"Workload {ns}/{name}: spec.podGroups[{i}]"
        gang = (g.get("policy") or {}).get("gang")
        n = _nonneg_int((gang or {}).get("minCount", 1), f"{where}.policy.gang.minCount") if gang else 1
        key = f"{ns}/{name}/{g.get('name', '')}"
        out[key] = GangSpec(
            key, f"Workload {ns}/{name} podGroup {g.get('name')}", n, **_common(spec, obj, where)
        )
    return out


def group_condition_type(obj: Mapping[str, Any]) -> str:
    """The condition a scheduler sets on a PodGroup: upstream v1beta1 (1.37) renamed PodGroupScheduled to
    PodGroupInitiallyScheduled (True once, never reverted); every other shape keeps PodGroupScheduled."""
    api = str(obj.get("apiVersion") or "")
    if api.split("/", 1)[0] == UPSTREAM_GROUP and not api.endswith(("/v1alpha1", "/v1alpha2")):
        return "PodGroupInitiallyScheduled"
    return "PodGroupScheduled"


def is_upstream(obj: Mapping[str, Any]) -> bool:
    return _api_group(obj) == UPSTREAM_GROUP


def pod_group_ref(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """(kind, gang key) a pod belongs to: ("PodGroup", ns/name) or ("Workload", ns/wl/group[/replica])."""
    meta = pod.get("metadata") or {}
    ns = meta.get("namespace") or "default"
    spec = pod.get("spec") or {}
    sg = (spec.get("schedulingGroup") or {}).get("podGroupName")
    if sg:
        return ("PodGroup", f"{ns}/{sg}")
    wr = spec.get("workloadRef") or {}
    if wr.get("name"):
        key = f"{ns}/{wr['name']}/{wr.get('podGroup', '')}"
        if wr.get("podGroupReplicaKey"):
            key += f"/{wr['podGroupReplicaKey']}"
        return ("Workload", key)
    ann = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    for k in POD_GROUP_REFS:
        v = ann.get(k) or labels.get(k)
        if v:
            return ("PodGroup", f"{ns}/{v}")
    return None


def pod_queue(pod: Mapping[str, Any]) -> str | None:
    meta = pod.get("metadata") or {}
    for src in (meta.get("labels") or {}, meta.get("annotations") or {}):
        for k in QUEUE_REFS:
            if src.get(k):
                return str(src[k])
    return None


class GangRegistry:
    """Gang objects and gang membership, kept current from store events."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.groups: dict[str, GangSpec] = {}  # PodGroup key -> spec
        self.workloads: dict[str, Obj] = {}  # ns/name -> Workload object
        self.workload_groups: dict[str, GangSpec] = {}
        self.members: dict[str, set[str]] = {}  # gang key -> uids of live member pods
        self.bound: dict[str, set[str]] = {}  # gang key -> uids of bound live members
        self.pod_gang: dict[str, str] = {}  # pod uid -> gang key
        self.succeeded: dict[str, set[str]] = {}  # gang key -> uids of members that ran to completion
        self.errors: dict[str, str] = {}  # gang key -> why its object is invalid
        self.invalid: dict[str, Obj] = {}  # gang key -> the invalid object (its status says why)
        store.watch(self._on_event, kinds=("PodGroup", "Workload", "Pod"))
        for kind in ("Workload", "PodGroup", "Pod"):
            for obj in store.list(kind):
                self._on_event(WatchEvent("ADDED", kind, obj, None))

    def _on_event(self, ev: WatchEvent) -> None:
        obj = ev.object
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"
        if ev.kind == "Workload":
            if ev.type == "DELETED":
                self.workloads.pop(key, None)
                for k in [k for k in self.workload_groups if k.startswith(key + "/")]:
                    del self.workload_groups[k]
            else:
                self.workloads[key] = obj
                try:
                    self.workload_groups.update(workload_gangs(obj))
                except InputError as exc:
                    self.errors[key] = str(exc)
            self._reparse_upstream()
        elif ev.kind == "PodGroup":
            if ev.type == "DELETED":
                self.groups.pop(key, None)
                self.errors.pop(key, None)
                self.invalid.pop(key, None)
                self.succeeded.pop(key, None)
                return
            try:
                self.groups[key] = parse_pod_group(obj, self.workloads)
                self.errors.pop(key, None)
                self.invalid.pop(key, None)
            except InputError as exc:
                self.groups.pop(key, None)
                self.errors[key] = str(exc)
                self.invalid[key] = obj
        else:
            self._on_pod(ev)

    def _reparse_upstream(self) -> None:
        for key, g in list(self.groups.items()):
            if g.obj is not None and _api_group(g.obj) == UPSTREAM_GROUP:
                try:
                    self.groups[key] = parse_pod_group(g.obj, self.workloads)
                except InputError as exc:
                    self.errors[key] = str(exc)

    def _on_pod(self, ev: WatchEvent) -> None:
        pod = ev.object
        uid = pod["metadata"].get("uid", "")
        phase = (pod.get("status") or {}).get("phase")
        # A member being deleted (evicted, or torn down with its gang) no longer counts towards the gang.
        if (
            ev.type == "DELETED"
            or phase in ("Succeeded", "Failed")
            or pod["metadata"].get("deletionTimestamp")
        ):
            gk = self.pod_gang.pop(uid, None)
            if gk is not None:
                self.members.get(gk, set()).discard(uid)
                self.bound.get(gk, set()).discard(uid)
                if phase == "Succeeded":
                    self.succeeded.setdefault(gk, set()).add(uid)
            return
        ref = pod_group_ref(pod)
        if ref is None:
            return
        gk = ref[1]
        self.pod_gang[uid] = gk
        self.members.setdefault(gk, set()).add(uid)
        if (pod.get("spec") or {}).get("nodeName"):
            self.bound.setdefault(gk, set()).add(uid)

    def gang_of(self, uid: str) -> str | None:
        return self.pod_gang.get(uid)

    def spec(self, gang_key: str) -> GangSpec | None:
        return self.groups.get(gang_key) or self.workload_groups.get(gang_key) or self._replica_spec(gang_key)

    def _replica_spec(self, gang_key: str) -> GangSpec | None:
        parts = gang_key.split("/")
        if len(parts) == 4:  # ns/workload/group/replica: the group's policy, one gang per replica
            base = self.workload_groups.get("/".join(parts[:3]))
            if base is not None:
                return GangSpec(
                    gang_key,
                    f"{base.source} replica {parts[3]}",
                    base.min_count,
                    base.queue,
                    base.priority,
                    base.preemptible,
                    base.topology,
                    base.timeout,
                    device_constraints=base.device_constraints,
                )
        return None
