"""The binding cycle off the scheduling loop (kube-scheduler's asynchronous binding goroutine).

After Reserve the scheduler has decided: the devices are assumed in use and the pod assumed on its node.
What is left is API round trips (the claims' delete-protection finalizer, their status.allocation and
reservedFor, then pods/binding), which `BindJob.run` does on a worker thread with the client alone (no
store, no cache), so the loop can schedule the next pods meanwhile. The loop applies the outcome: the
written claims go into the cache; a failure un-assumes the claims that were not written and the pod,
and the pod is tried again.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

from kdra.cluster.store import ConflictError, NotFoundError, Obj, StoreError, copy_for_update
from kdra.kube.client import KubeClient, UnavailableError
from kdra.scheduler.dra import DELETE_PROTECTION_FINALIZER, claim_status_for_pod
from kdra.scheduler.podinfo import PodInfo


@dataclass
class BindJob:
    pi: PodInfo
    node: str
    allocate: list[tuple[Obj, Obj]]  # (claim as cached at Reserve, its allocation)
    reserve: list[Obj]  # allocated claims the pod must be added to (reservedFor)
    bind_timeout: float = 60.0
    written: list[Obj] = field(default_factory=list)
    error: str = ""
    gone: bool = False  # the pod no longer exists or is bound elsewhere: do not retry it
    scheduled_event: Obj | None = None  # posted after binding (kube-scheduler's "Scheduled" Event)

    def run(self, client: KubeClient) -> BindJob:
        ref = {"resource": "pods", "name": self.pi.name, "uid": self.pi.uid}
        try:
            for claim, alloc in self.allocate:
                self.written.append(self._allocate(client, claim, alloc, ref))
            for claim in self.reserve:
                self.written.append(self._reserve(client, claim, ref))
            self._bind(client)
            if self.scheduled_event is not None and not self.error:
                with contextlib.suppress(StoreError):  # an Event is best effort
                    client.create(self.scheduled_event)
        except NotFoundError as e:
            self.error, self.gone = str(e), True
        except StoreError as e:
            self.error = str(e)
        except Exception as e:  # a worker must always report back
            self.error = f"{type(e).__name__}: {e}"
        return self

    @staticmethod
    def _retry(client: KubeClient, claim: Obj, write: Any) -> Obj:
        """write(current) -> new object, or None when nothing needs writing. A conflict re-reads the claim
        and decides again; so does a write whose outcome is unknown (503/504, a broken connection): it
        may have committed, and the re-read tells (every write here is conditional on the
        resourceVersion, so repeating one that did commit only conflicts)."""
        cur = claim
        unknown = 0
        for attempt in range(8):
            try:
                out = write(cur)
                return cur if out is None else out
            except ConflictError:
                if attempt == 7:
                    raise
            except UnavailableError:
                unknown += 1
                if unknown > 3 or attempt == 7:
                    raise
                time.sleep(0.2 * 2**unknown)
            meta = claim["metadata"]
            cur = client.get("ResourceClaim", meta["name"], meta.get("namespace"))
        raise AssertionError("unreachable")

    def _allocate(self, client: KubeClient, claim: Obj, alloc: Obj, ref: dict[str, str]) -> Obj:
        return self._write_claim(client, claim, alloc, ref, allocate=True)

    def _reserve(self, client: KubeClient, claim: Obj, ref: dict[str, str]) -> Obj:
        alloc = (claim.get("status") or {}).get("allocation") or {}
        return self._write_claim(client, claim, alloc, ref, allocate=False)

    def _write_claim(
        self, client: KubeClient, claim: Obj, alloc: Obj, ref: dict[str, str], *, allocate: bool
    ) -> Obj:
        """The finalizer (when allocating), then status; after every (re-)read the claim is checked
        (claim_status_for_pod), as the loop's PreBind does: ours already is left alone, someone else's
        change fails the binding cycle (ClaimChangedError) and the pod is retried."""

        def finalizer(cur: Obj) -> Obj | None:
            if claim_status_for_pod(cur, ref, alloc, allocate=allocate) is None:
                return None
            if not allocate or DELETE_PROTECTION_FINALIZER in (cur["metadata"].get("finalizers") or []):
                return None
            upd = copy_for_update(cur)
            upd["metadata"].setdefault("finalizers", []).append(DELETE_PROTECTION_FINALIZER)
            return client.update(dict(upd, kind="ResourceClaim", apiVersion="resource.k8s.io/v1"))

        cur = self._retry(client, claim, finalizer)

        def status(cur: Obj) -> Obj | None:
            new_st = claim_status_for_pod(cur, ref, alloc, allocate=allocate)
            if new_st is None:
                return None
            upd = copy_for_update(cur)
            upd["status"] = new_st
            return client.update(dict(upd, kind="ResourceClaim", apiVersion="resource.k8s.io/v1"), "status")

        return self._retry(client, cur, status)

    def _bind(self, client: KubeClient) -> None:
        deadline = time.monotonic() + self.bind_timeout
        delay = 0.2
        while True:
            try:
                client.bind(self.pi.namespace, self.pi.name, self.pi.uid, self.node)
                return
            except ConflictError as e:  # already bound, or another pod of that name
                self.error, self.gone = f"binding {self.pi.key}: {e}", True
                return
            except UnavailableError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
