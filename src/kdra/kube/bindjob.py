"""The binding cycle off the scheduling loop (kube-scheduler's asynchronous binding goroutine).

After Reserve the scheduler has decided: the devices are assumed in use and the pod assumed on its node.
What is left is API round trips (the claims' delete-protection finalizer, their status.allocation and
reservedFor, then pods/binding), which `BindJob.run` does as a coroutine on the binder's event loop
with the client alone (no store, no cache; KubeClient.arequest), so the loop can schedule the next pods
meanwhile and many binding cycles wait on the API server at once without a thread each. The Scheduled
Event is not part of it: the binder posts it afterwards, off the critical path (kdra.kube.binder). The
loop applies the outcome: the written claims go into the cache; a failure un-assumes the claims that were
not written and the pod, and the pod is tried again.

A gang binds as one `GroupBindJob`, in two phases, because the API has no transactions: first every
member's claims are written (allocation and reservedFor: from then on the devices are held in the API for
the gang), then every member is bound. A failure in the first phase rolls back what it wrote (the claims
are unreserved and deallocated again), so no member runs and nothing is held. A failure in the second
phase leaves the unbound members' claims allocated and reserved for them: their retry lands on the same
nodes and completes the gang; a member that is gone cannot, and the scheduling session evicts the gang
whole once it has run below its minimum for the stale-gang grace period (kdra.scheduler.actions.stale).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from kdra.api.pods import pod_claim_names, reserved_for
from kdra.api.types import Obj
from kdra.cluster.store import ConflictError, NotFoundError, Store, StoreError, copy_for_update
from kdra.kube.client import KubeClient, UnavailableError
from kdra.scheduler.dra import DELETE_PROTECTION_FINALIZER, claim_status_for_pod
from kdra.scheduler.podinfo import PodInfo


def drop_stray_finalizers(store: Store, scheduler_name: str) -> list[str]:
    """A binding cycle writes a claim's delete-protection finalizer first, then its status.allocation
    (two requests: the API has no transactions). A kdra killed between the two leaves a claim that holds
    the finalizer but is neither allocated nor reserved; no rollback ran, the pod's next binding cycle may
    never come (it stays pending, other pods took the room while kdra was down) and kube-controller-manager
    drops the finalizer only once the claim is deleted. At start-up, before any binding cycle of this
    process (so none of its own is half-way), the finalizer is taken off such claims of the unbound pods
    this scheduler serves, as a rollback would have (not of claims another scheduler's pod also uses).
    Returns "namespace/name" of the claims repaired."""
    out = []
    pods = store.list("Pod")
    # A claim another scheduler's pod also uses may be half-way through that scheduler's own two writes.
    theirs = {
        ((p["metadata"].get("namespace") or "default"), name)
        for p in pods
        if (p.get("spec") or {}).get("schedulerName", "default-scheduler") != scheduler_name
        for name in pod_claim_names(p)
    }
    for pod in pods:
        spec = pod.get("spec") or {}
        if spec.get("schedulerName", "default-scheduler") != scheduler_name or spec.get("nodeName"):
            continue
        ns = pod["metadata"].get("namespace") or "default"
        for name in pod_claim_names(pod):
            if (ns, name) in theirs:
                continue
            claim = store.try_get("ResourceClaim", name, ns)
            if claim is None or not _stray(claim):
                continue

            def drop(c: Obj) -> None:
                if _stray(c):
                    c["metadata"]["finalizers"] = [
                        f for f in c["metadata"]["finalizers"] if f != DELETE_PROTECTION_FINALIZER
                    ]

            try:
                store.update_with_retry("ResourceClaim", name, ns, drop)
            except NotFoundError:
                continue
            out.append(f"{ns}/{name}")
    return out


def _stray(claim: Obj) -> bool:
    return (
        DELETE_PROTECTION_FINALIZER in (claim["metadata"].get("finalizers") or [])
        and not (claim.get("status") or {}).get("allocation")
        and not reserved_for(claim)
    )


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
    scheduled_event: Obj | None = None  # posted by the binder once bound (kube-scheduler's "Scheduled")
    allocated_uids: set[str] = field(default_factory=set)  # claims this job allocated (not only reserved)
    finalized: list[Obj] = field(default_factory=list)  # claims it put the delete-protection finalizer on
    rolled_back: bool = False
    # claim uid -> whom it is reserved for when not the pod: its PodGroup (PodGroup-level claims, KEP-5729)
    refs: dict[str, dict[str, str]] = field(default_factory=dict)

    async def run(self, client: KubeClient) -> BindJob:
        if await self.write_claims(client):
            await self.bind_pod(client)
        return self

    @property
    def ref(self) -> dict[str, str]:
        return {"resource": "pods", "name": self.pi.name, "uid": self.pi.uid}

    def ref_of(self, claim: Obj) -> dict[str, str]:
        return self.refs.get(claim["metadata"].get("uid", ""), self.ref)

    async def _guard(self, step: Any) -> bool:
        try:
            await step()
        except NotFoundError as e:
            self.error, self.gone = str(e), True
        except StoreError as e:
            self.error = str(e)
        except Exception as e:  # a worker must always report back
            self.error = f"{type(e).__name__}: {e}"
        return not self.error

    async def write_claims(self, client: KubeClient) -> bool:
        """Phase one: the claims' finalizer, allocation and reservedFor. False (and `error`) on failure."""

        async def step() -> None:
            for claim, alloc in self.allocate:
                self.allocated_uids.add(claim["metadata"].get("uid", ""))
                self.written.append(await self._allocate(client, claim, alloc, self.ref_of(claim)))
            for claim in self.reserve:
                self.written.append(await self._reserve(client, claim, self.ref_of(claim)))

        return await self._guard(step)

    async def bind_pod(self, client: KubeClient) -> bool:
        """Phase two: pods/binding."""
        return await self._guard(lambda: self._bind(client))

    async def rollback(self, client: KubeClient) -> None:
        """Undo phase one: take the pod out of the claims it reserved, deallocate those it allocated and
        nobody else reserves, and drop their delete-protection finalizer. `written` then holds the claims
        as left (for the cache). Best effort: a claim that cannot be rolled back stays reserved for a pod
        that is pending again, and the session releases it when the gang still cannot be placed."""
        out = []
        written = {c["metadata"].get("uid") for c in self.written}
        half = [c for c in self.finalized if c["metadata"].get("uid") not in written]  # finalizer, no status
        for claim in [*self.written, *half]:
            meta = claim["metadata"]
            mine = meta.get("uid", "") in self.allocated_uids
            uid = self.ref_of(claim)["uid"]

            async def status(cur: Obj, mine: bool = mine, uid: str = uid) -> Obj | None:
                st = dict(cur.get("status") or {})
                rf = [r for r in st.get("reservedFor") or [] if r.get("uid") != uid]
                if len(rf) == len(st.get("reservedFor") or []):
                    return None
                upd = copy_for_update(cur)
                st["reservedFor"] = rf
                if not rf:
                    st.pop("reservedFor")
                    if mine:
                        st.pop("allocation", None)
                upd["status"] = st
                return await client.aupdate(
                    dict(upd, kind="ResourceClaim", apiVersion="resource.k8s.io/v1"), "status"
                )

            async def finalizer(cur: Obj) -> Obj | None:
                fins = cur["metadata"].get("finalizers") or []
                if (cur.get("status") or {}).get("allocation") or DELETE_PROTECTION_FINALIZER not in fins:
                    return None
                upd = copy_for_update(cur)
                upd["metadata"]["finalizers"] = [f for f in fins if f != DELETE_PROTECTION_FINALIZER]
                return await client.aupdate(dict(upd, kind="ResourceClaim", apiVersion="resource.k8s.io/v1"))

            try:
                cur = await self._retry(client, claim, status)
                out.append(await self._retry(client, cur, finalizer))
            except StoreError:
                out.append(claim)
        self.written = out
        self.rolled_back = True

    @staticmethod
    async def _retry(client: KubeClient, claim: Obj, write: Any) -> Obj:
        """write(current) -> new object, or None when nothing needs writing. A conflict re-reads the claim
        and decides again; so does a write whose outcome is unknown (503/504, a broken connection): it
        may have committed, and the re-read tells (every write here is conditional on the
        resourceVersion, so repeating one that did commit only conflicts)."""
        cur = claim
        unknown = 0
        for attempt in range(8):
            try:
                out = await write(cur)
                return cur if out is None else out
            except ConflictError:
                if attempt == 7:
                    raise
            except UnavailableError:
                unknown += 1
                if unknown > 3 or attempt == 7:
                    raise
                await asyncio.sleep(0.2 * 2**unknown)
            meta = claim["metadata"]
            cur = await client.aget("ResourceClaim", meta["name"], meta.get("namespace"))
        raise AssertionError("unreachable")

    async def _allocate(self, client: KubeClient, claim: Obj, alloc: Obj, ref: dict[str, str]) -> Obj:
        return await self._write_claim(client, claim, alloc, ref, allocate=True)

    async def _reserve(self, client: KubeClient, claim: Obj, ref: dict[str, str]) -> Obj:
        alloc = (claim.get("status") or {}).get("allocation") or {}
        return await self._write_claim(client, claim, alloc, ref, allocate=False)

    async def _write_claim(
        self, client: KubeClient, claim: Obj, alloc: Obj, ref: dict[str, str], *, allocate: bool
    ) -> Obj:
        """The finalizer (when allocating), then status; after every (re-)read the claim is checked
        (claim_status_for_pod), as the loop's PreBind does: ours already is left alone, someone else's
        change fails the binding cycle (ClaimChangedError) and the pod is retried."""

        async def finalizer(cur: Obj) -> Obj | None:
            if claim_status_for_pod(cur, ref, alloc, allocate=allocate) is None:
                return None
            if not allocate or DELETE_PROTECTION_FINALIZER in (cur["metadata"].get("finalizers") or []):
                return None
            upd = copy_for_update(cur)
            upd["metadata"].setdefault("finalizers", []).append(DELETE_PROTECTION_FINALIZER)
            return await client.aupdate(dict(upd, kind="ResourceClaim", apiVersion="resource.k8s.io/v1"))

        cur = await self._retry(client, claim, finalizer)
        self.finalized.append(cur)  # rolled back too if the status write below fails

        async def status(cur: Obj) -> Obj | None:
            new_st = claim_status_for_pod(cur, ref, alloc, allocate=allocate)
            if new_st is None:
                return None
            upd = copy_for_update(cur)
            upd["status"] = new_st
            return await client.aupdate(
                dict(upd, kind="ResourceClaim", apiVersion="resource.k8s.io/v1"), "status"
            )

        return await self._retry(client, cur, status)

    async def _bind(self, client: KubeClient) -> None:
        deadline = time.monotonic() + self.bind_timeout
        delay = 0.2
        while True:
            try:
                await client.abind(self.pi.namespace, self.pi.name, self.pi.uid, self.node)
                return
            except ConflictError as e:  # already bound, or another pod of that name
                self.error, self.gone = f"binding {self.pi.key}: {e}", True
                return
            except UnavailableError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)


@dataclass
class GroupBindJob:
    """The binding cycles of a gang's members, in two phases (see the module docstring). The members'
    writes of each phase run side by side (a gang of 16 would otherwise pay 48 round trips in a row);
    the phases themselves stay in order."""

    jobs: list[BindJob]
    error: str = ""  # phase one failed: nothing is bound, what was written is rolled back

    async def _each(self, step: Any) -> list[Any]:
        return list(await asyncio.gather(*(step(job) for job in self.jobs)))

    async def run(self, client: KubeClient) -> GroupBindJob:
        try:
            written = await self._each(lambda job: job.write_claims(client))
            failed = next((job for job, ok in zip(self.jobs, written, strict=True) if not ok), None)
            if failed is not None:
                self.error = f"member {failed.pi.key}: {failed.error}"
                await self._each(lambda job: job.rollback(client))
                for job in self.jobs:
                    if not job.error:
                        job.error = f"gang binding rolled back: {self.error}"
                return self
            await self._each(lambda job: job.bind_pod(client))
        except Exception as e:  # a worker must always report back
            self.error = f"{type(e).__name__}: {e}"
            for job in self.jobs:
                job.error = job.error or self.error
        return self
