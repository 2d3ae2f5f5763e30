"""A plan checked by kdra's scheduler itself: the cluster with the added nodes in an in-memory store, the
running pods where they run, the pending pods created at once, and the scheduling session (gangs, queues,
topology, its own queue order and node scores) run on a virtual clock until nothing changes, exactly as `kdra
simulate` schedules. The pods it leaves pending are what the plan's own placement got and the scheduler's does
not (it may spread pods where the plan packed them); kdra.plan.scaleup plans again for those."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kdra.cluster.clock import VirtualClock
from kdra.cluster.store import MemoryStore, clone
from kdra.plan.demand import Obj, ref
from kdra.plan.inputs import Inputs
from kdra.scheduler.gang import is_scheduling_object
from kdra.scheduler.scheduler import Scheduler, SchedulerConfig
from kdra.scheduler.session import GangQueues

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
    objects: list[Obj]  # the cluster afterwards: nodes, devices, claims, pods as the scheduler left them


def check(
    inputs: Inputs, added: Sequence[Obj], pending: Sequence[Obj], config: SchedulerConfig | None = None
) -> Verdict:
    """Schedule `pending` with kdra's scheduler (`config`: its scoring and gates, as the cluster runs it) on
    the cluster plus `added` (Nodes, ResourceSlices and DeviceClasses)."""
    clock = VirtualClock()
    store = MemoryStore(clock=clock, seed=0)
    classes = {**inputs.classes}
    for o in added:
        if o.get("kind") == "DeviceClass":
            classes.setdefault(o["metadata"]["name"], o)
    static: list[Obj] = [
        *classes.values(),
        *inputs.nodes,
        *inputs.slices,
        *[o for o in added if o.get("kind") != "DeviceClass"],
    ]
    namespaces = {
        (o.get("metadata") or {}).get("namespace") or "default" for o in [*inputs.running, *pending]
    }
    for ns in sorted(namespaces):
        if store.try_get("Namespace", ns) is None:
            store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    for o in sorted(static, key=lambda o: _ORDER.get(o.get("kind", ""), 9)):
        store.create(_new(o, deep=False))
    for o in [*inputs.templates, *inputs.claims, *inputs.scheduling, *inputs.running]:
        store.create(_new(o))
    gq = GangQueues(store) if any(is_scheduling_object(o) for o in inputs.scheduling) else None
    sched = Scheduler(store, gq.config(config) if gq else config, clock=clock)
    for p in pending:
        # Whichever scheduler the pod names (kdra, kube-scheduler), the check asks kdra's.
        q = _new(p)
        q["spec"].pop("schedulerName", None)
        store.create(q)
    queue = sched.queue
    now = 0.0
    while now <= HORIZON:
        queue.flush_unschedulable_leftover(now)
        sched.run(now)
        nxt = [t for t in (queue.next_wakeup(), queue.next_leftover_flush()) if t is not None]
        if not nxt:
            break
        now = max(min(nxt), now + 1e-3)
        clock.advance_to(now)
    out = []
    for p in pending:
        meta = p["metadata"]
        got = store.try_get("Pod", meta["name"], meta.get("namespace") or "default")
        if not ((got or {}).get("spec") or {}).get("nodeName"):
            out.append(ref(p))
    kinds = ("DeviceClass", "Node", "ResourceSlice", "ResourceClaimTemplate", "ResourceClaim", "Pod")
    objects = [clone(o) for k in kinds for o in store.list(k)]
    return Verdict(out, objects + [clone(o) for o in inputs.scheduling] + list(inputs.pdbs))
