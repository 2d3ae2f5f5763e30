"""A plan checked by kdra's scheduler itself: the cluster with the added nodes in an in-memory store, the
running pods where they run, the pending pods created at once, and the scheduling session (gangs, queues,
topology, its own queue order and node scores) run on a virtual clock until nothing changes, exactly as `kdra
simulate` schedules. Pods may carry the node the plan expects them on (status.nominatedNodeName, as an
autoscaler writes it under KEP-5278): the scheduler's Filter on that node decides, as kube-scheduler's
evaluateNominatedNode does, and a pod that does not pass there is placed by the full search. The pods it
leaves pending are what the plan's placement got and the scheduler's does not; kdra.plan.scaleup plans again
for those."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kdra.api.types import Obj
from kdra.cluster.clock import VirtualClock
from kdra.cluster.store import MemoryStore, clone
from kdra.plan.demand import ref
from kdra.plan.inputs import Inputs
from kdra.scheduler.gang import is_scheduling_object
from kdra.scheduler.gangqueues import GangQueues
from kdra.scheduler.scheduler import Scheduler, SchedulerConfig

# Virtual seconds the check may run: kube-scheduler's backoff (1-10 s) and the 5-minute flush of pods parked
# as unschedulable are well inside it.
HORIZON = 900.0

_ORDER = {"Namespace": 0, "PriorityClass": 0, "DeviceClass": 1, "Node": 2, "ResourceSlice": 3}


def _new(obj: Obj, deep: bool = True) -> Obj:
    """A copy to create: objects read from a store (a live cluster, an earlier check) carry a
    resourceVersion, which a create refuses. Nodes, slices and classes, which scheduling only reads, share
    their contents with the input (`deep=False`); pods and claims, which it writes, are cloned."""
    out = clone(obj) if deep else {**obj, "metadata": dict(obj.get("metadata") or {})}
    out["metadata"].pop("resourceVersion", None)
    return out


@dataclass
class Verdict:
    unbound: list[str]  # pods of `pending` (namespace/name) the scheduler left unbound
    objects: list[Obj]  # the cluster afterwards, as the scheduler left it (read only: the store's own)


class Check:
    """The cluster and the pending pods in a store with kdra's scheduler; `add` brings nodes and runs the
    scheduler until nothing changes. Several `add`s are nodes arriving one round after another: what the
    scheduler bound stays bound."""

    def __init__(
        self,
        inputs: Inputs,
        pending: Sequence[Obj],
        config: SchedulerConfig | None = None,
        nominated: Mapping[str, str] | None = None,
    ) -> None:
        """`nominated`: pod (namespace/name) -> the node it is expected on, written to the pod's
        status.nominatedNodeName as an autoscaler writes where it expects a pod to land (KEP-5278): the
        scheduler tries that node first and takes it when it passes Filter, else searches every node."""
        self.inputs, self.pending = inputs, list(pending)
        self.clock = VirtualClock()
        self.store = store = MemoryStore(clock=self.clock, seed=0)
        namespaces = {
            (o.get("metadata") or {}).get("namespace") or "default" for o in [*inputs.running, *pending]
        }
        for ns in sorted(namespaces):
            store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        static = [*inputs.classes.values(), *inputs.nodes, *inputs.slices, *inputs.taint_rules]
        for o in sorted(static, key=lambda o: _ORDER.get(o.get("kind", ""), 9)):
            store.create(_new(o, deep=False))
        for o in [*inputs.templates, *inputs.claims, *inputs.scheduling, *inputs.running]:
            store.create(_new(o))
        gq = GangQueues(store) if any(is_scheduling_object(o) for o in inputs.scheduling) else None
        self.scheduler = Scheduler(store, gq.config(config) if gq else config, clock=self.clock)
        for p in pending:
            # Whichever scheduler the pod names (kdra, kube-scheduler), the check asks kdra's.
            q = _new(p)
            q["spec"].pop("schedulerName", None)
            node = (nominated or {}).get(ref(p))
            if node and not (q.get("status") or {}).get("nominatedNodeName"):
                q["status"] = {**(q.get("status") or {}), "nominatedNodeName": node}
            store.create(q)

    def add(self, objs: Sequence[Obj]) -> Verdict:
        """Create `objs` (Nodes, ResourceSlices, DeviceClasses not there yet) and schedule until quiet."""
        for o in sorted(objs, key=lambda o: _ORDER.get(o.get("kind", ""), 9)):
            if o.get("kind") == "DeviceClass" and self.store.try_get("DeviceClass", o["metadata"]["name"]):
                continue
            self.store.create(_new(o, deep=False))
        queue = self.scheduler.queue
        start = now = self.clock.now
        while now <= start + HORIZON:
            queue.flush_unschedulable_leftover(now)
            self.scheduler.run(now)
            nxt = [t for t in (queue.next_wakeup(), queue.next_leftover_flush()) if t is not None]
            if not nxt:
                break
            now = max(min(nxt), now + 1e-3)
            self.clock.advance_to(now)
        out = []
        for p in self.pending:
            meta = p["metadata"]
            got = self.store.try_get("Pod", meta["name"], meta.get("namespace") or "default")
            if not ((got or {}).get("spec") or {}).get("nodeName"):
                out.append(ref(p))
        # The store's own objects: it replaces an object on every write and never edits one in place, so
        # these stay as they are now while later rounds schedule on.
        kinds = (
            "DeviceClass",
            "Node",
            "ResourceSlice",
            "DeviceTaintRule",
            "ResourceClaimTemplate",
            "ResourceClaim",
            "Pod",
        )
        objects = [o for k in kinds for o in self.store.list(k)]
        return Verdict(out, objects + list(self.inputs.scheduling) + list(self.inputs.pdbs))


def check(
    inputs: Inputs,
    added: Sequence[Obj],
    pending: Sequence[Obj],
    config: SchedulerConfig | None = None,
    nominated: Mapping[str, str] | None = None,
) -> Verdict:
    """Schedule `pending` with kdra's scheduler (`config`: its scoring and gates, as the cluster runs it) on
    the cluster plus `added` (Nodes, ResourceSlices and DeviceClasses); `nominated` as for Check."""
    return Check(inputs, pending, config, nominated).add(added)
