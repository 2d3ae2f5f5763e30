"""The scheduler's view of the cluster, kept current from store watch events (kube-scheduler's cache +
informers). Plugins read it; the scheduler assumes pods into it at Reserve, before the store confirms.

Every node has a `generation`; each change is also appended to a change log so that per-signature filter
caches can re-evaluate exactly the nodes that changed. `epoch` changes when something that may affect
every node changed (slices, classes, network-attached devices): caches then start over.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kdra.api.types import Obj
from kdra.api.workloadapi import is_workload_api
from kdra.cluster.store import Store, WatchEvent
from kdra.scheduler.podinfo import NodeInfo, PodInfo

TERMINAL_PHASES = ("Succeeded", "Failed")


def is_terminal(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in TERMINAL_PHASES


def claim_key(namespace: str, name: str) -> tuple[str, str]:
    return (namespace or "default", name)


class SchedulerCache:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.nodes: list[NodeInfo] = []
        self.node_by_name: dict[str, NodeInfo] = {}
        self.assigned: dict[str, str] = {}  # pod uid -> node name (bound or assumed)
        self.claims: dict[tuple[str, str], Obj] = {}
        self.templates: dict[tuple[str, str], Obj] = {}
        self.classes: dict[str, Obj] = {}
        self.slices: dict[str, Obj] = {}
        # DeviceTaintRules: their taints are added to the slices' devices (kdra.allocator.taintrules).
        self.taint_rules: dict[str, Obj] = {}
        # scheduling.k8s.io PodGroups (their PodGroup-level claims: kdra.api.workloadapi), by (ns, name)
        self.pod_groups: dict[tuple[str, str], Obj] = {}
        self.changes: list[int] = []  # node idx per change, for incremental caches
        self.change_base = 0  # global sequence number of changes[0]
        self.epoch = 0
        self.node_updates = 0  # Node objects changed (labels, taints, allocatable)
        self.listeners: list[Callable[[str, WatchEvent], None]] = []
        # kube-scheduler's nominator: this scheduler's pending pods by the node their
        # status.nominatedNodeName names (a preemption's, or where an autoscaler expects them).
        self.nominated: dict[str, dict[str, PodInfo]] = {}
        self._nominated_at: dict[str, str] = {}  # pod uid -> node name
        # DRA bookkeeping is attached by the DynamicResources plugin (kdra.scheduler.dra.DraState).
        self.dra: Any = None
        store.watch(
            self._on_event,
            kinds=(
                "Node",
                "Pod",
                "ResourceClaim",
                "ResourceClaimTemplate",
                "DeviceClass",
                "ResourceSlice",
                "DeviceTaintRule",
                "PodGroup",
            ),
        )
        for kind in (
            "DeviceClass",
            "ResourceSlice",
            "DeviceTaintRule",
            "Node",
            "ResourceClaimTemplate",
            "ResourceClaim",
            "PodGroup",
            "Pod",
        ):
            for obj in store.list(kind):
                self._on_event(WatchEvent("ADDED", kind, obj, None))

    # -- change tracking -------------------------------------------------------------------------

    @property
    def change_seq(self) -> int:
        return self.change_base + len(self.changes)

    def touch(self, ni: NodeInfo) -> None:
        ni.generation += 1
        self.changes.append(ni.idx)
        if len(self.changes) > 4 * max(1024, len(self.nodes)):
            drop = len(self.changes) // 2
            del self.changes[:drop]
            self.change_base += drop

    def changed_since(self, seq: int) -> set[int] | None:
        """Node indexes changed since change sequence `seq`; None when the log no longer reaches back."""
        if seq < self.change_base:
            return None
        return set(self.changes[seq - self.change_base :])

    def bump_epoch(self) -> None:
        self.epoch += 1

    # -- events ----------------------------------------------------------------------------------

    def _on_event(self, ev: WatchEvent) -> None:
        handler = getattr(self, "_on_" + ev.kind)
        handler(ev)
        for listener in self.listeners:
            listener(ev.kind, ev)

    def _on_Node(self, ev: WatchEvent) -> None:
        name = ev.object["metadata"]["name"]
        self.node_updates += 1
        ni = self.node_by_name.get(name)
        if ev.type == "DELETED":
            if ni is not None:
                ni.unschedulable = True
                ni.allocatable = {}
                self.touch(ni)
            return
        if ni is None:
            ni = NodeInfo(ev.object, len(self.nodes))
            self.nodes.append(ni)
            self.node_by_name[name] = ni
            self.bump_epoch()
        else:
            ni.set_node(ev.object)
            self.touch(ni)

    def _on_Pod(self, ev: WatchEvent) -> None:
        pod = ev.object
        uid = pod["metadata"].get("uid", "")
        node = (pod.get("spec") or {}).get("nodeName")
        if ev.type == "DELETED" or is_terminal(pod):
            self.forget(uid)
            return
        if node and self.assigned.get(uid) != node:
            self.assume(PodInfo(pod), node)

    def _on_ResourceClaim(self, ev: WatchEvent) -> None:
        meta = ev.object["metadata"]
        key = claim_key(meta.get("namespace", ""), meta["name"])
        if ev.type == "DELETED":
            self.claims.pop(key, None)
        else:
            self.claims[key] = ev.object
        if self.dra is not None:
            self.dra.on_claim(ev)

    def _on_ResourceClaimTemplate(self, ev: WatchEvent) -> None:
        meta = ev.object["metadata"]
        key = claim_key(meta.get("namespace", ""), meta["name"])
        if ev.type == "DELETED":
            self.templates.pop(key, None)
        else:
            self.templates[key] = ev.object

    def _on_PodGroup(self, ev: WatchEvent) -> None:
        if not is_workload_api(ev.object):
            return  # kdra's, KAI's, Volcano's PodGroups have no group-level claims
        meta = ev.object["metadata"]
        key = claim_key(meta.get("namespace", ""), meta["name"])
        if ev.type == "DELETED":
            self.pod_groups.pop(key, None)
        else:
            self.pod_groups[key] = ev.object

    def _on_DeviceClass(self, ev: WatchEvent) -> None:
        name = ev.object["metadata"]["name"]
        if ev.type == "DELETED":
            self.classes.pop(name, None)
        else:
            self.classes[name] = ev.object
        self.bump_epoch()
        if self.dra is not None:
            self.dra.invalidate()

    def _on_ResourceSlice(self, ev: WatchEvent) -> None:
        name = ev.object["metadata"]["name"]
        if ev.type == "DELETED":
            self.slices.pop(name, None)
        else:
            self.slices[name] = ev.object
        self.bump_epoch()
        if self.dra is not None:
            self.dra.invalidate()

    def _on_DeviceTaintRule(self, ev: WatchEvent) -> None:
        name = ev.object["metadata"]["name"]
        if ev.type == "DELETED":
            self.taint_rules.pop(name, None)
        else:
            self.taint_rules[name] = ev.object
        self.bump_epoch()
        if self.dra is not None:
            self.dra.invalidate()

    # -- nominations -----------------------------------------------------------------------------

    def nominate(self, pi: PodInfo, node: str) -> None:
        """`pi` waits for `node`. The nodes it leaves and joins are touched, so that answers cached for them
        are evaluated again."""
        if self._nominated_at.get(pi.uid) != node:
            self.unnominate(pi.uid)
            self._nominated_at[pi.uid] = node
            self._touch_named(node)
        self.nominated.setdefault(node, {})[pi.uid] = pi

    def unnominate(self, uid: str) -> None:
        """`uid` waits for no node (nothing happens when it did not)."""
        node = self._nominated_at.pop(uid, None)
        if node is None:
            return
        pods = self.nominated[node]
        del pods[uid]
        if not pods:
            del self.nominated[node]
        self._touch_named(node)

    def nominated_against(self, pi: PodInfo, ni: NodeInfo) -> list[PodInfo]:
        """The pods nominated to `ni` that Filter counts against `pi` (kube-scheduler's addGENominatedPods):
        of no lower priority, not `pi` itself, not yet assumed anywhere."""
        pods = self.nominated.get(ni.name)
        if not pods:
            return []
        assigned = self.assigned
        prio = pi.priority
        return [p for uid, p in pods.items() if uid != pi.uid and uid not in assigned and p.priority >= prio]

    def _touch_named(self, node: str) -> None:
        ni = self.node_by_name.get(node)
        if ni is not None:
            self.touch(ni)

    # -- assume / forget -------------------------------------------------------------------------

    def assume(self, pi: PodInfo, node: str) -> None:
        ni = self.node_by_name.get(node)
        if ni is None:
            return
        old = self.assigned.get(pi.uid)
        if old == node:
            return
        if old is not None:
            self.forget(pi.uid)
        self.assigned[pi.uid] = node
        ni.add_pod(pi)
        self.touch(ni)

    def forget(self, uid: str) -> None:
        node = self.assigned.pop(uid, None)
        if node is None:
            return
        ni = self.node_by_name.get(node)
        if ni is not None and ni.remove_pod(uid) is not None:
            self.touch(ni)
