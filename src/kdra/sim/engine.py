"""The discrete-event simulation: arrivals, scheduling cycles and completions on a virtual clock.

Nothing sleeps: the clock jumps from one event to the next. At each instant the simulation applies every
event due (workloads arrive, pods finish, Deployments go away), runs the scheduler until its queue has
nothing it can place, and records fleet metrics. Pods that fail wait in the scheduler's queue exactly as in
kube-scheduler (unschedulable until a cluster event, backoff, the 5-minute leftover flush).
"""

from __future__ import annotations

import gc
import heapq
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

from kdra.api.types import Obj
from kdra.cluster.clock import VirtualClock
from kdra.cluster.store import MemoryStore, NotFoundError, WatchEvent, clone
from kdra.deviceplugin.kubelet import DevicePluginKubelet
from kdra.deviceplugin.pods import ProductLabels, to_device_plugin
from kdra.scheduler.cache import is_terminal
from kdra.scheduler.gang import is_scheduling_object
from kdra.scheduler.gangqueues import GangQueues
from kdra.scheduler.podinfo import is_extended_resource, pod_requests
from kdra.scheduler.scheduler import Scheduler, SchedulerConfig
from kdra.sim.accounting import FleetGpus
from kdra.sim.workload import GPU_MEMORY, WORKLOAD_LABEL, Group, Workload, gpu_memory_need

DRA = "dra"
DEVICE_PLUGIN = "device-plugin"
MODES = (DRA, DEVICE_PLUGIN)


@contextmanager
def gc_tuned() -> Iterator[None]:
    """The simulation allocates many long-lived dicts; the default GC thresholds make that quadratic."""
    old = gc.get_threshold()
    gc.set_threshold(200_000, 20, 50)
    try:
        yield
    finally:
        gc.set_threshold(*old)


@dataclass
class PodRecord:
    key: str
    workload: str
    group: str
    arrival: float
    start: float | None = None
    end: float | None = None
    node: str | None = None
    devices: list[str] = field(default_factory=list)
    gpu_equiv: float = 0.0
    gpu_memory: int = 0
    needed_memory: int | None = None
    withdrawn: bool = False
    preempted: bool = False
    # A shared claim's cost this pod took over when the user that carried it stopped while this pod still
    # used the claim: (since, GPU-equivalents, memory). Per-pod figures count it from `since`.
    carried: list[tuple[float, float, int]] = field(default_factory=list)

    def gpu_segments(self, until: float) -> list[tuple[float, float, float]]:
        """(from, to, GPU-equivalents) this pod held, cut at `until`: its own devices from its start, and
        each shared claim's cost it carried from the moment it took it over."""
        if self.start is None:
            return []
        end = min(self.end if self.end is not None else until, until)
        out = [(self.start, end, self.gpu_equiv)] if end > self.start else []
        out.extend((since, end, equiv) for since, equiv, _mem in self.carried if end > since)
        return out

    def gpu_seconds(self, until: float) -> float:
        return sum(v * (b - a) for a, b, v in self.gpu_segments(until))

    @property
    def stranded(self) -> int:
        if self.needed_memory is None:
            return 0
        return max(0, self.gpu_memory - self.needed_memory)


@dataclass
class Sample:
    t: float
    gpu_equiv: float
    gpu_memory: int
    stranded: int
    pending: int
    running: int


@dataclass
class ModeResult:
    mode: str
    total_gpus: int
    total_gpu_memory: int
    end: float
    pods: dict[str, PodRecord]
    samples: list[Sample]
    explanations: dict[str, str]
    cycles: int = 0
    wall_seconds: float = 0.0
    # With a device preference: per placed pod, what decided its devices (kdra.scheduler.devicepref)
    device_choices: dict[str, dict[str, Any]] = field(default_factory=dict)


class Simulation:
    def __init__(
        self,
        fleet_objects: Sequence[Obj],
        workload: Workload,
        mode: str,
        *,
        config: SchedulerConfig | None = None,
        seed: int = 0,
        dra_objects: Sequence[Obj] | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}")
        self.mode = mode
        self.workload = workload
        self.clock = VirtualClock()
        self.store = MemoryStore(clock=self.clock, seed=seed)
        self.gpus = FleetGpus(dra_objects if dra_objects is not None else fleet_objects)
        self.kubelet = DevicePluginKubelet()
        # Device-plugin mode: the requests' model choice, as GFD product labels (kdra.deviceplugin.pods).
        self.products = ProductLabels(dra_objects or fleet_objects) if mode == DEVICE_PLUGIN else None
        self.classes: dict[str, Obj] = {}
        for obj in dra_objects or fleet_objects:
            if obj.get("kind") == "DeviceClass":
                self.classes[obj["metadata"]["name"]] = obj
        order = {"DeviceClass": 0, "Node": 1, "ResourceSlice": 2}
        for obj in sorted(fleet_objects, key=lambda o: order.get(o.get("kind", ""), 3)):
            self.store.create(clone(obj))
            if obj.get("kind") == "Node" and mode == DEVICE_PLUGIN:
                self.kubelet.add_node(obj)
        self.templates: dict[tuple[str, str], Obj] = {}
        self.claims: dict[tuple[str, str], Obj] = {}
        for obj in workload.static:
            key = ((obj["metadata"].get("namespace") or "default"), obj["metadata"]["name"])
            if obj["kind"] == "ResourceClaimTemplate":
                self.templates[key] = obj
            elif obj["kind"] == "ResourceClaim":
                self.claims[key] = obj
            if mode == DRA or obj["kind"] in ("Namespace", "PriorityClass") or is_scheduling_object(obj):
                self.store.create(clone(obj))
        self.gang_queues: GangQueues | None = None
        if any(is_scheduling_object(o) for o in workload.static):
            # gangs, queues and topology run as kdra.scheduler.gangqueues' actions
            self.gang_queues = GangQueues(self.store)
            config = self.gang_queues.config(config)
            self.store.watch(self._on_evicted, kinds=("Pod",))
        self.scheduler = Scheduler(self.store, config, clock=self.clock)
        self.pods: dict[str, PodRecord] = {}
        self.uid_key: dict[str, str] = {}
        self.events: list[tuple[float, int, str, Any]] = []
        self._seq = 0
        self.samples: list[Sample] = []
        self.running: dict[str, PodRecord] = {}
        self.pending: set[str] = set()
        self._run_time: dict[str, float | None] = {}
        self._group_pods: dict[str, list[str]] = {}
        self._equiv = 0.0
        self._charged: dict[str, tuple[float, int, int]] = {}
        self._pod_claims: dict[str, list[str]] = {}
        self._claim_users: dict[str, list[str]] = {}  # claim uid -> its running users, in binding order
        self._claim_cost: dict[str, tuple[float, int, PodRecord]] = {}  # uid -> cost and who carries it
        self._mem = 0
        self._stranded = 0
        for g in workload.groups:
            self._push(g.arrival, "arrive", g)

    def _on_evicted(self, ev: WatchEvent) -> None:
        """A running pod the scheduler evicted (preempt/reclaim): it stops holding GPUs now."""
        if (ev.object.get("status") or {}).get("phase") != "Failed":
            return
        meta = ev.object["metadata"]
        rec = self.running.pop(f"{meta.get('namespace') or 'default'}/{meta['name']}", None)
        if rec is not None:
            rec.end = self.clock.now
            rec.preempted = True
            # As a pod that finished: a shared claim it carried moves to its other users (taking the pod's
            # charge off alone took the claim's cost off the fleet while they still held it).
            self._release(rec)

    def _push(self, t: float, kind: str, data: Any) -> None:
        self._seq += 1
        heapq.heappush(self.events, (t, self._seq, kind, data))

    # -- events ----------------------------------------------------------------------------------

    def _arrive(self, g: Group, now: float) -> None:
        keys = []
        for pod in g.pods:
            if self.mode == DEVICE_PLUGIN:
                pod = to_device_plugin(pod, self.templates, self.claims, self.classes, self.products)
            key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
            rec = PodRecord(
                key,
                (pod["metadata"].get("labels") or {}).get(WORKLOAD_LABEL, g.name),
                g.ref,
                now,
                needed_memory=gpu_memory_need(pod),
            )
            self.pods[key] = rec
            self.pending.add(key)
            self._run_time[key] = g.run_time if g.kind != "Deployment" else None
            created = self.store.create(clone(pod))
            self.uid_key[created["metadata"]["uid"]] = key
            keys.append(key)
        self._group_pods[g.ref] = keys
        if g.kind == "Deployment" and g.run_time is not None:
            self._push(now + g.run_time, "expire", g)

    def _finish(self, key: str, now: float, delete: bool) -> None:
        ns, name = key.split("/", 1)
        pod = self.store.try_get("Pod", name, ns)
        rec = self.pods[key]
        if rec.key in self.running:
            del self.running[rec.key]
            rec.end = now
            self._release(rec)
        elif rec.key in self.pending:
            self.pending.discard(rec.key)
            rec.withdrawn = True
            rec.end = now
        if pod is None:
            return
        if self.mode == DEVICE_PLUGIN:
            self.kubelet.release(pod["metadata"]["uid"])
        if delete:
            self.store.delete("Pod", name, ns)
        elif not is_terminal(pod):
            upd = dict(pod)
            upd["status"] = dict(pod.get("status") or {}, phase="Succeeded")
            upd["metadata"] = dict(pod["metadata"])
            with suppress(NotFoundError):
                self.store.update(upd, subresource="status")

    def _release(self, rec: PodRecord) -> None:
        """Take a finished pod's cost off the fleet totals; a shared claim's cost stays while it has users,
        moving to the next user, who carries it in per-pod figures from now (PodRecord.carried). Until
        then it stayed in the fleet totals but left every pod's, so the headline and per-workload GPU-hours
        missed a shared claim's hours after its first user ended."""
        equiv, mem, stranded = self._charged.pop(rec.key, (0.0, 0, 0))
        self._equiv -= equiv
        self._mem -= mem
        self._stranded -= stranded
        for uid in self._pod_claims.pop(rec.key, []):
            users = self._claim_users.get(uid, [])
            if rec.key in users:
                users.remove(rec.key)
            owner = self._claim_cost.get(uid)
            if not users:
                self._claim_users.pop(uid, None)
                self._claim_cost.pop(uid, None)
                continue
            if owner is not None and owner[2] is rec:
                # The claim's devices are still held by its other users: the next one carries them.
                nxt = self.pods[users[0]]
                nxt.carried.append((self.clock.now, owner[0], owner[1]))
                e, m, st = self._charged.get(nxt.key, (0.0, 0, 0))
                self._charged[nxt.key] = (e + owner[0], m + owner[1], st)
                self._equiv += owner[0]
                self._mem += owner[1]
                self._claim_cost[uid] = (owner[0], owner[1], nxt)

    def _bound(self, key: str, node: str, now: float) -> None:
        rec = self.pods[key]
        rec.start = now
        rec.node = node
        self.pending.discard(key)
        self.running[key] = rec
        ns, name = key.split("/", 1)
        pod = self.store.get("Pod", name, ns)
        if self.mode == DRA:
            self._dra_devices(rec, pod)
        else:
            needs = {k: v for k, v in pod_requests(pod).items() if is_extended_resource(k) and v > 0}
            for res, i in self.kubelet.assign(pod["metadata"]["uid"], node, needs):
                rec.devices.append(f"{res}/{i}")
                cost = self.gpus.legacy_cost(node, res)
                rec.gpu_equiv += cost.gpu_equiv
                rec.gpu_memory += cost.memory
        self._equiv += rec.gpu_equiv
        self._mem += rec.gpu_memory
        self._stranded += rec.stranded
        self._charged[key] = (rec.gpu_equiv, rec.gpu_memory, rec.stranded)
        run = self._run_time.get(key)
        if run is not None:
            self._push(now + run, "finish", key)

    def _dra_devices(self, rec: PodRecord, pod: Obj) -> None:
        """Devices of the pod's claims; a claim shared by several pods costs once, while anyone uses it
        (the pod that brought it into use carries its cost in per-pod figures)."""
        ns = pod["metadata"]["namespace"]
        names = self.scheduler.controller.claim_names(pod) if self.scheduler.controller else []
        for name in names:
            claim = self.store.try_get("ResourceClaim", name, ns)
            if claim is None:
                continue
            uid = claim["metadata"]["uid"]
            alloc = (claim.get("status") or {}).get("allocation") or {}
            results = (alloc.get("devices") or {}).get("results") or []
            rec.devices.extend(f"{r.get('driver')}/{r.get('pool')}/{r.get('device')}" for r in results)
            self._pod_claims.setdefault(rec.key, []).append(uid)
            users = self._claim_users.setdefault(uid, [])
            users.append(rec.key)
            if len(users) > 1:
                continue
            equiv, mem = 0.0, 0
            for r in results:
                cost = self.gpus.dra_result_cost(r)
                equiv += cost.gpu_equiv
                mem += cost.memory
            rec.gpu_equiv += equiv
            rec.gpu_memory += mem
            self._claim_cost[uid] = (equiv, mem, rec)

    # -- the loop --------------------------------------------------------------------------------

    def run(self, progress: Callable[[float, float], None] | None = None) -> ModeResult:
        import time

        wall0 = time.perf_counter()
        horizon = self.workload.horizon
        queue = self.scheduler.queue
        end = 0.0
        with gc_tuned():
            while True:
                candidates = [self.events[0][0]] if self.events else []
                for extra in (queue.next_wakeup(), queue.next_leftover_flush()):
                    if extra is not None and (self.events or horizon is not None):
                        candidates.append(extra)
                if not candidates:
                    break
                now = max(min(candidates), self.clock.now)
                if horizon is not None and now > horizon:
                    break
                self.clock.advance_to(now)
                end = now
                while self.events and self.events[0][0] <= now:
                    _, _, kind, data = heapq.heappop(self.events)
                    if kind == "arrive":
                        self._arrive(data, now)
                    elif kind == "finish":
                        self._finish(data, now, delete=False)
                    elif kind == "expire":
                        for key in self._group_pods.get(data.ref, []):
                            self._finish(key, now, delete=True)
                queue.flush_unschedulable_leftover(now)
                for res in self.scheduler.run(now):
                    if res.node is not None:
                        self._bound(res.pod, res.node, now)
                self._sample(now)
                if progress is not None:
                    progress(now, horizon or 0.0)
        if horizon is not None:
            end = horizon
            self.clock.advance_to(horizon)
            self._sample(horizon)
        explanations = {}
        for key in sorted(self.pending):
            ns, name = key.split("/", 1)
            pod = self.store.try_get("Pod", name, ns)
            cond = next(
                (
                    c
                    for c in ((pod or {}).get("status") or {}).get("conditions") or []
                    if c.get("type") == "PodScheduled"
                ),
                None,
            )
            explanations[key] = (cond or {}).get("message") or "not attempted yet"
        return ModeResult(
            self.mode,
            self.gpus.total_gpus,
            self.gpus.total_gpu_memory,
            end,
            self.pods,
            self.samples,
            explanations,
            self.scheduler.cycles,
            time.perf_counter() - wall0,
            dict(self.scheduler.dra.choices),
        )

    def _sample(self, now: float) -> None:
        s = Sample(
            now, round(self._equiv, 6), self._mem, self._stranded, len(self.pending), len(self.running)
        )
        if self.samples and self.samples[-1].t == now:
            self.samples[-1] = s
        else:
            self.samples.append(s)


def annotations_used() -> Mapping[str, str]:
    from kdra.sim.workload import ARRIVAL_TIME, RUN_TIME

    return {ARRIVAL_TIME: "arrival", RUN_TIME: "run time", GPU_MEMORY: "GPU memory needed"}
