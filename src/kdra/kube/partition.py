"""A supported partition between kdra and kube-scheduler: who may allocate which devices.

kdra deployed as a secondary scheduler beside kube-scheduler must not share devices with it: neither sees
the other's in-flight allocations, so both can write one GPU into two claims (kdra.kube.conflicts finds
and repairs that after the fact). A partition prevents it. kdra owns

- **nodes** (`--owned-nodes SELECTOR`, a kubectl label selector): kdra places pods only on matching
  nodes (Filter `OwnedNodes`). kube-scheduler is kept off them by the NoSchedule taint
  `kdra.dev/scheduler=<scheduler name>`, which the pods kdra places tolerate without saying so
  (TaintToleration's implied toleration) and which other pods do not (DaemonSets that must run there,
  such as the DRA driver's kubelet plugin, need the toleration);
- **DeviceClasses** (`--owned-device-classes A,B`): kdra allocates only claims whose requests name
  those classes (PreFilter `OwnedDeviceClasses`), and kube-scheduler's pods must not name them.

At start-up `reachable_by_others` compares what kdra may allocate (devices of its classes, on its
nodes) with what kube-scheduler may (devices of the other classes, on nodes without the taint) and
`startup_warnings` says, in one line per finding, where they meet: owned nodes without the taint,
other DeviceClasses selecting kdra's devices, or no partition at all.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kdra.allocator.index import AllocatorIndex, CelBudgetExhausted, DeviceEntry, cel_budget
from kdra.cluster.selectors import LabelSelector, parse_selector
from kdra.errors import InputError
from kdra.scheduler.framework import (
    EV_CLASS_CHANGE,
    EV_NODE_ADD,
    EV_NODE_UPDATE,
    SUCCESS,
    CycleState,
    FilterPlugin,
    Plugin,
    PreFilterPlugin,
    Status,
    unschedulable,
)
from kdra.scheduler.podinfo import NodeInfo, PodInfo

OWNER_TAINT_KEY = "kdra.dev/scheduler"


def owner_taint(scheduler_name: str) -> dict[str, str]:
    return {"key": OWNER_TAINT_KEY, "value": scheduler_name, "effect": "NoSchedule"}


def owner_toleration(scheduler_name: str) -> dict[str, str]:
    """What every pod kdra places tolerates: the taint that reserves nodes for this scheduler."""
    return {"key": OWNER_TAINT_KEY, "operator": "Equal", "value": scheduler_name, "effect": "NoSchedule"}


def has_owner_taint(taints: Iterable[Mapping[str, Any]], scheduler_name: str) -> bool:
    return any(
        t.get("key") == OWNER_TAINT_KEY
        and t.get("value") == scheduler_name
        and t.get("effect") == "NoSchedule"
        for t in taints
    )


@dataclass(frozen=True)
class Partition:
    """What kdra owns; None: not partitioned on that axis."""

    nodes: LabelSelector | None = None
    classes: frozenset[str] | None = None

    @classmethod
    def parse(cls, nodes: str | None, classes: str | None) -> Partition:
        """From --owned-nodes and --owned-device-classes; InputError naming the flag."""
        sel = None
        if nodes is not None:
            if not nodes.strip():
                raise InputError(
                    "--owned-nodes: an empty selector would own every node; omit the flag instead"
                )
            try:
                sel = parse_selector(nodes)
            except InputError as e:
                raise InputError(f"--owned-nodes: {e}") from None
        names = None
        if classes is not None:
            names = frozenset(c.strip() for c in classes.split(",") if c.strip())
            if not names:
                raise InputError("--owned-device-classes: name at least one DeviceClass")
        return cls(sel, names)

    @property
    def empty(self) -> bool:
        return self.nodes is None and self.classes is None

    def plugins(self) -> list[Plugin]:
        out: list[Plugin] = []
        if self.nodes is not None:
            out.append(OwnedNodes(self.nodes))
        if self.classes is not None:
            out.append(OwnedDeviceClasses(self.classes))
        return out


class OwnedNodes(FilterPlugin):
    """Only the nodes --owned-nodes selects."""

    name = "OwnedNodes"
    events = frozenset({EV_NODE_ADD, EV_NODE_UPDATE})
    filter_first = True  # a label match: cheaper than anything after it

    def __init__(self, selector: LabelSelector) -> None:
        self.selector = selector

    def signature(self, state: CycleState, pi: PodInfo) -> Hashable:
        return ""  # the same answer for every pod

    def filter(self, state: CycleState, pi: PodInfo, ni: NodeInfo) -> Status:
        if self.selector.matches(ni.labels):
            return SUCCESS
        return unschedulable("node(s) not owned by this scheduler (--owned-nodes)", resolvable=False)


class OwnedDeviceClasses(PreFilterPlugin):
    """Only claims (and KEP-5004 extended resources) whose every request names a class kdra owns."""

    name = "OwnedDeviceClasses"
    events = frozenset({EV_CLASS_CHANGE})

    def __init__(self, classes: frozenset[str]) -> None:
        self.classes = classes

    def pre_filter(self, state: CycleState, pi: PodInfo) -> Status:
        from kdra.scheduler.plugins.dynamicresources import STATE_KEY

        pc = state.get(STATE_KEY)
        if pc is None:
            return SUCCESS
        for claim in pc.to_allocate:
            for req in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
                subs = [req["exactly"]] if req.get("exactly") else list(req.get("firstAvailable") or [])
                for sub in subs:
                    cls = sub.get("deviceClassName", "")
                    if cls not in self.classes:
                        meta = claim["metadata"]
                        where = f"ResourceClaim {meta.get('namespace')}/{meta.get('name')}"
                        return unschedulable(
                            f"{where}: request {req.get('name')}: device class {cls} is not owned by this "
                            "scheduler (--owned-device-classes)",
                            resolvable=False,
                        )
        for res, cls in sorted(pc.ext.items()):
            if cls not in self.classes:
                return unschedulable(
                    f"extended resource {res}: device class {cls} is not owned by this scheduler "
                    "(--owned-device-classes)",
                    resolvable=False,
                )
        return SUCCESS


# -- start-up check ----------------------------------------------------------------------------------------


# CEL work the start-up check may spend per DeviceClass (as one scheduling attempt): a class whose
# selectors are too expensive to evaluate over every device is left out of the check, not waited for.
STARTUP_CEL_BUDGET = 2_000_000


def _class_devices(index: AllocatorIndex, cls: str, unchecked: set[str]) -> list[DeviceEntry]:
    try:
        with cel_budget(STARTUP_CEL_BUDGET):
            return list(index.devices_of_class(cls))
    except CelBudgetExhausted:
        unchecked.add(cls)
        return []


def reachable_by_others(
    partition: Partition,
    scheduler_name: str,
    index: AllocatorIndex,
    nodes: Iterable[NodeInfo],
    unchecked: set[str] | None = None,
) -> tuple[set[tuple[str, str, str]], set[str], set[str], int]:
    """(devices both kdra and kube-scheduler may allocate, the other DeviceClasses that select them,
    the nodes they are on, how many devices kdra may allocate). kdra: devices of its classes (every class
    without a class partition) on its nodes (every node without a node partition). kube-scheduler:
    devices of the other classes (every class without a class partition) on nodes without kdra's taint;
    network-attached devices (no nodeName) count on both sides. Classes whose selectors cost more than
    STARTUP_CEL_BUDGET to evaluate over the devices are left out and added to `unchecked`."""
    unchecked = set() if unchecked is None else unchecked
    node_list = list(nodes)
    kdra_nodes = {n.name for n in node_list if partition.nodes is None or partition.nodes.matches(n.labels)}
    other_nodes = {n.name for n in node_list if not has_owner_taint(n.taints, scheduler_name)}
    classes = sorted(index.classes)
    mine = [c for c in classes if partition.classes is None or c in partition.classes]
    theirs = [c for c in classes if partition.classes is None or c not in partition.classes]

    def usable(d: DeviceEntry, on: set[str]) -> bool:
        return not d.slice.node_name or d.slice.node_name in on

    kdra_devices = {d.key for c in mine for d in _class_devices(index, c, unchecked) if usable(d, kdra_nodes)}
    both: set[tuple[str, str, str]] = set()
    via: set[str] = set()
    where: set[str] = set()
    for c in theirs:
        for d in _class_devices(index, c, unchecked):
            if d.key in kdra_devices and usable(d, other_nodes):
                both.add(d.key)
                via.add(c)
                if d.slice.node_name:
                    where.add(d.slice.node_name)
    return both, via, where, len(kdra_devices)


def _few(names: Iterable[str], n: int = 5) -> str:
    items = sorted(names)
    more = f" and {len(items) - n} more" if len(items) > n else ""
    return ", ".join(items[:n]) + more


def startup_warnings(
    partition: Partition, scheduler_name: str, index: AllocatorIndex, nodes: Iterable[NodeInfo]
) -> list[str]:
    """One line per way kube-scheduler can reach devices kdra allocates (empty: the partition holds for
    what exists now)."""
    node_list = list(nodes)
    out: list[str] = []
    taint = f"{OWNER_TAINT_KEY}={scheduler_name}:NoSchedule"
    if partition.nodes is not None:
        owned = [n for n in node_list if partition.nodes.matches(n.labels)]
        if not owned:
            out.append(f"--owned-nodes {partition.nodes}: no node matches (yet): kdra can place no pod")
        open_nodes = [n.name for n in owned if not has_owner_taint(n.taints, scheduler_name)]
        if open_nodes:
            out.append(
                f"kube-scheduler can place pods on {len(open_nodes)} of the {len(owned)} nodes kdra owns "
                f"({_few(open_nodes)}): they lack the taint {taint} "
                f"(kubectl taint nodes {open_nodes[0]} {taint})"
            )
    if partition.classes is not None:
        missing = sorted(partition.classes - set(index.classes))
        if missing:
            out.append(f"--owned-device-classes: DeviceClass {_few(missing)} does not exist (yet)")
    unchecked: set[str] = set()
    both, via, where, mine = reachable_by_others(partition, scheduler_name, index, node_list, unchecked)
    if unchecked:
        out.append(
            f"DeviceClass(es) {_few(unchecked)} left out of this check: their selectors are expensive to "
            "evaluate over every device (the scheduler evaluates them in bounded chunks)"
        )
    if both:
        share = f"{len(both)} of the {mine} devices kdra allocates"
        if partition.empty:
            out.append(
                f"no partition with kube-scheduler (--owned-nodes, --owned-device-classes): it can allocate "
                f"{share}; conflicts are reported (kdra_conflicting_allocations) and kdra's side repaired, "
                "not prevented"
            )
        elif partition.classes is not None:
            out.append(
                f"kube-scheduler can allocate {share} through DeviceClass(es) {_few(via)}, which select "
                "devices of kdra's classes"
                + (f" on nodes without the taint {taint} ({_few(where)})" if where else "")
            )
        elif not out:
            out.append(f"kube-scheduler can allocate {share}, on {_few(where)}")
    return out
