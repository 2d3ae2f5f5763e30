"""`kdra scheduler` against a real API server: kdra's scheduling cycle over a `KubeStore`.

What changes from the embedded mode, and nothing else:
- the real kube-controller-manager creates claims from templates and releases them, so kdra runs no
  claim controller of its own (`run_controllers=False`);
- binding goes through the pods/binding subresource (a scheduler may not write spec.nodeName), retried
  while the API server is unreachable; the API server sets PodScheduled=True;
- PreBind's claim writes (finalizer, then status.allocation and reservedFor, each conditional on the
  resourceVersion and retried on conflict) turn API errors into an error status, so the pod is
  unreserved and retried after backoff instead of crashing the loop;
- an unschedulable pod gets its PodScheduled=False condition through a strategic-merge patch (no
  conflict with the kubelet-side writers) and a FailedScheduling Event, both carrying kdra's
  explanation, the Event only when the text changed.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import os
import queue
import socket
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kdra.cluster.store import ConflictError, NotFoundError, Obj, StoreError, WatchEvent
from kdra.kube.binder import BindJob
from kdra.kube.client import UnavailableError
from kdra.kube.explain import unschedulable_messages
from kdra.kube.store import KubeStore
from kdra.scheduler.dra import EXTENDED_RESOURCE_CLAIM_ANNOTATION
from kdra.scheduler.framework import SUCCESS, Code, CycleState, Profile, Status, error
from kdra.scheduler.plugins.dynamicresources import STATE_KEY, DynamicResources, reserved_for_pod
from kdra.scheduler.podinfo import PodInfo
from kdra.scheduler.scheduler import AllocateAction, CycleResult, Scheduler, SchedulerConfig

log = logging.getLogger("kdra.kube.scheduler")

MAX_MESSAGE = 8 * 1024  # the PodScheduled message limit (kdra.kube.explain builds the messages)


def now_rfc3339() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def default_identity() -> str:
    return f"{socket.gethostname()}_{os.getpid()}"


def pod_event(
    pod: Mapping[str, Any], reason: str, message: str, etype: str, component: str, instance: str
) -> Obj:
    """A core/v1 Event about a pod, as kube-scheduler records them (FailedScheduling, Scheduled)."""
    meta = pod["metadata"]
    ts = now_rfc3339()
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta.get("namespace", "default")},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": meta["name"],
            "namespace": meta.get("namespace", "default"),
            "uid": meta.get("uid", ""),
            "resourceVersion": meta.get("resourceVersion", ""),
        },
        "reason": reason,
        "message": message,
        "type": etype,
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": instance,
        "firstTimestamp": ts,
        "lastTimestamp": ts,
        "count": 1,
    }


class _BindFailed(Exception):
    pass


class KubeDynamicResources(DynamicResources):
    """DynamicResources whose PreBind, with asynchronous binding, only records what to write (the
    binding cycle writes it, kdra.kube.binder) and otherwise reports API errors as an error status."""

    sched: KubeScheduler | None = None

    def pre_bind(self, state: CycleState, pi: PodInfo, node: str) -> Status:
        sched = self.sched
        allocs = list(state.get("dra_allocations") or [])
        special = any(
            (c["metadata"].get("annotations") or {}).get(EXTENDED_RESOURCE_CLAIM_ANNOTATION) == "true"
            for c, _ in allocs
        )
        if sched is not None and sched.bind_workers and not special:
            pc = state[STATE_KEY]
            reserve = [c for c in pc.allocated if not reserved_for_pod(c, pi.uid)]
            sched._deferred[pi.uid] = (allocs, reserve)
            return SUCCESS
        try:
            return super().pre_bind(state, pi, node)
        except StoreError as e:
            log.warning("prebind %s: %s", pi.key, e)
            return error(f"writing ResourceClaim status: {e}")


class KubeScheduler(Scheduler):
    def __init__(
        self,
        store: KubeStore,
        config: SchedulerConfig | None = None,
        *,
        identity: str | None = None,
        batch: int = 64,
        bind_timeout: float = 60.0,
        bind_workers: int = 16,
    ) -> None:
        self.kstore = store
        # Asynchronous binding (0: bind in the loop): pods whose binding cycle is running, by uid.
        self.bind_workers = bind_workers
        self.inflight: dict[str, BindJob] = {}
        self._deferred: dict[str, tuple[list[Any], list[Any]]] = {}
        self._done: queue.Queue[BindJob] = queue.Queue()
        self._pool = ThreadPoolExecutor(bind_workers, "kdra-bind") if bind_workers else None
        self.max_inflight = 4 * max(1, bind_workers)
        self.bind_failures = 0
        self.identity = identity or default_identity()
        self.bind_timeout = bind_timeout
        self.events_posted = 0
        self._event_text: dict[str, str] = {}
        super().__init__(
            store,
            config,
            actions=[AllocateAction(max_pods=batch)],
            run_controllers=False,
            clock=time.time,
        )

    def default_profile(self) -> Profile:
        prof = super().default_profile()
        plugins = []
        for p in prof.plugins:
            if type(p) is DynamicResources:
                p = KubeDynamicResources(self.store, self.dra)
                p.sched = self
            plugins.append(p)
        prof.plugins = plugins
        return prof

    def _on_pod(self, ev: WatchEvent, now: float) -> None:
        # A pod whose binding cycle runs is not pending again because its status changed meanwhile.
        uid = ev.object["metadata"].get("uid", "")
        if (
            ev.type != "DELETED"
            and uid in self.inflight
            and not (ev.object.get("spec") or {}).get("nodeName")
        ):
            return
        super()._on_pod(ev, now)

    # -- the cycle -------------------------------------------------------------------------------------
    def schedule_one(self, pi: PodInfo, now: float) -> CycleResult:
        try:
            return super().schedule_one(pi, now)
        except (_BindFailed, StoreError) as e:
            # The claims stay allocated and reserved for the pod: its next attempt sees them allocated
            # and lands on the same node (their node selector); if the pod is gone, the controller
            # manager releases them.
            log.warning("scheduling %s: %s", pi.key, e)
            self.cache.forget(pi.uid)
            self.queue.add_unschedulable(pi, now, set())
            return CycleResult(pi.key, None, Status(Code.ERROR, (str(e),)), str(e))

    def _bind(self, pi: PodInfo, node: str, now: float) -> None:
        deferred = self._deferred.pop(pi.uid, None)
        if deferred is not None and self._pool is not None:
            job = BindJob(pi, node, deferred[0], deferred[1], self.bind_timeout)
            job.scheduled_event = pod_event(
                pi.pod,
                "Scheduled",
                f"Successfully assigned {pi.key} to {node}",
                "Normal",
                self.config.scheduler_name,
                self.identity,
            )
            self.inflight[pi.uid] = job
            fut = self._pool.submit(job.run, self.kstore.client)
            done = self._done

            def report(_f: Any, job: BindJob = job) -> None:
                done.put(job)

            fut.add_done_callback(report)
            return
        deadline = time.monotonic() + self.bind_timeout
        delay = 0.2
        while True:
            try:
                self.kstore.bind(pi.namespace, pi.name, pi.uid, node)
                self._event_text.pop(pi.uid, None)
                with contextlib.suppress(StoreError):
                    self.kstore.client.create(
                        pod_event(
                            pi.pod,
                            "Scheduled",
                            f"Successfully assigned {pi.key} to {node}",
                            "Normal",
                            self.config.scheduler_name,
                            self.identity,
                        )
                    )
                return
            except NotFoundError:
                raise _BindFailed(f"pod {pi.key} is gone") from None
            except ConflictError as e:  # already bound, or a pod of the same name with another uid
                raise _BindFailed(f"binding {pi.key}: {e}") from None
            except UnavailableError as e:
                if time.monotonic() > deadline:
                    raise _BindFailed(f"binding {pi.key}: {e}") from None
                time.sleep(delay)
                delay = min(delay * 2, 2.0)

    def _fail(
        self, pi: PodInfo, now: float, st: Status, message: str, plugins: set[str], explanation: Any
    ) -> CycleResult:
        self.queue.add_unschedulable(pi, now, plugins)
        text, event_text = unschedulable_messages(message, explanation)
        reason = "SchedulerError" if st.code == Code.ERROR else "Unschedulable"
        current = self.store.try_get("Pod", pi.name, pi.namespace)
        if current is not None and not (current.get("spec") or {}).get("nodeName"):
            conds = (current.get("status") or {}).get("conditions") or []
            old = next((c for c in conds if c.get("type") == "PodScheduled"), None)
            try:
                if old is None or old.get("message") != text or old.get("reason") != reason:
                    cond = {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": reason,
                        "message": text,
                        "lastTransitionTime": now_rfc3339(),
                    }
                    self.kstore._written(
                        "Pod",
                        self.kstore.client.patch(
                            "Pod",
                            pi.name,
                            {"status": {"conditions": [cond]}},
                            pi.namespace,
                            "status",
                            patch_type="strategic",
                        ),
                    )
                if self._event_text.get(pi.uid) != text:
                    self._post_event(current, "FailedScheduling", event_text)
                    self._event_text[pi.uid] = text
            except StoreError as e:
                log.info("recording why %s is unschedulable: %s", pi.key, e)
        return CycleResult(pi.key, None, st, message, explanation)

    def _post_event(self, pod: dict[str, Any], reason: str, message: str) -> None:
        self.kstore.client.create(
            pod_event(pod, reason, message, "Warning", self.config.scheduler_name, self.identity)
        )
        self.events_posted += 1

    def finish_binds(self, now: float) -> int:
        """Apply what finished binding cycles did (loop thread)."""
        n = 0
        while True:
            try:
                job = self._done.get_nowait()
            except queue.Empty:
                return n
            n += 1
            uid = job.pi.uid
            self.inflight.pop(uid, None)
            for obj in job.written:
                self.kstore._written("ResourceClaim", obj)
            if not job.error:
                self._event_text.pop(uid, None)
                continue
            self.bind_failures += 1
            log.warning("binding cycle of %s: %s", job.pi.key, job.error)
            self.cache.forget(uid)
            written = {o["metadata"].get("uid") for o in job.written}
            for claim, _ in job.allocate:
                cuid = claim["metadata"].get("uid", "")
                if cuid not in written:
                    self.dra.forget_assumed(cuid)
            if job.gone:
                continue
            current = self.store.try_get("Pod", job.pi.name, job.pi.namespace)
            if current is None or (current.get("spec") or {}).get("nodeName"):
                continue
            if current["metadata"].get("uid") != uid or current["metadata"].get("deletionTimestamp"):
                continue
            pi = PodInfo(current)
            self.queue.add(pi, now)
            self.queue.add_unschedulable(self.queue.pods[uid], now, set())  # retry after backoff

    def close(self, wait: bool = True) -> None:
        """Let running binding cycles finish."""
        if self._pool is not None:
            self._pool.shutdown(wait=wait)
            self.finish_binds(time.time())

    # -- the loop --------------------------------------------------------------------------------------
    def next_timeout(self, now: float, ceiling: float = 1.0) -> float:
        """How long the loop may wait for events before scheduling again."""
        if len(self.inflight) >= self.max_inflight:
            return min(ceiling, 0.02)
        if self.queue._active:
            return 0.0
        wake = self.queue.next_wakeup()
        if wake is None:
            return ceiling
        return max(0.0, min(ceiling, wake - now))

    def step(self, wait: float = 1.0) -> list[CycleResult]:
        """Deliver what the watches brought (waiting up to the queue's next wake-up, at most `wait`)
        and run one batch of scheduling cycles."""
        now = time.time()
        self.finish_binds(now)
        self.kstore.process_events(timeout=self.next_timeout(now, wait))
        now = time.time()
        self.finish_binds(now)
        if len(self.inflight) >= self.max_inflight:
            return []
        self.queue.flush_unschedulable_leftover(now)
        return self.run(now)
