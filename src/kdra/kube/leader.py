"""Leader election with a coordination.k8s.io/v1 Lease, after client-go's leaderelection package.

A candidate takes the Lease when it does not exist, has no holder, or its holder has not renewed it for
`lease_duration` seconds *as this candidate observed* (the local time since the record last changed,
never the timestamps written by another machine's clock). Every write is conditional on the Lease's
resourceVersion, so of two candidates racing for it exactly one wins. The leader renews every
`retry_period` seconds and counts itself leader only until `renew_deadline` after its last successful
renewal; `renew_deadline < lease_duration` means a leader that cannot renew stops acting before anyone
else may take over, so two replicas never both schedule.
"""

from __future__ import annotations

import datetime as _dt
import logging
import threading
import time

from kdra.cluster.store import AlreadyExistsError, ConflictError, NotFoundError, StoreError
from kdra.kube.client import KubeClient, Obj

log = logging.getLogger("kdra.kube.leader")


def micro_time(t: float | None = None) -> str:
    """metav1.MicroTime's RFC 3339 form."""
    d = _dt.datetime.fromtimestamp(time.time() if t is None else t, _dt.UTC)
    return d.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        client: KubeClient,
        name: str,
        namespace: str,
        identity: str,
        *,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
    ) -> None:
        if not 0 < renew_deadline < lease_duration:
            raise ValueError("leader election: renew deadline must be positive and below the lease duration")
        self.client = client
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self._valid_until = 0.0
        self._observed: tuple[str, str, str] | None = None
        self._observed_at = 0.0
        self._stop = threading.Event()
        self.ever_led = False
        self.transitions = 0
        self._thread: threading.Thread | None = None

    # -- state -----------------------------------------------------------------------------------------
    @property
    def is_leader(self) -> bool:
        return time.monotonic() < self._valid_until

    @property
    def lost(self) -> bool:
        """Led once and no longer does (the caller should stop, as kube-scheduler exits)."""
        return self.ever_led and not self.is_leader

    # -- running ---------------------------------------------------------------------------------------
    def start(self) -> LeaderElector:
        self._thread = threading.Thread(target=self._run, daemon=True, name="kdra-leader-election")
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.try_acquire_or_renew()
            self._stop.wait(self.retry_period)

    def stop(self, release: bool = True) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.retry_period + 5)
        if release and self.is_leader:
            self.release()

    def try_acquire_or_renew(self) -> bool:
        t0 = time.monotonic()
        try:
            ok = self._try(t0)
        except StoreError as e:
            log.info("leader election: %s", e)
            ok = False
        if ok:
            if not self.ever_led:
                log.info(
                    "leader election: %s became leader of %s/%s", self.identity, self.namespace, self.name
                )
            self.ever_led = True
            self._valid_until = t0 + self.renew_deadline
        return ok

    def _spec(self, acquire_time: str, transitions: int) -> Obj:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.lease_duration)),
            "acquireTime": acquire_time,
            "renewTime": micro_time(),
            "leaseTransitions": transitions,
        }

    def _try(self, now: float) -> bool:
        try:
            lease = self.client.get("Lease", self.name, self.namespace)
        except NotFoundError:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(micro_time(), 0),
            }
            try:
                self.client.create(body)
            except AlreadyExistsError:
                return False
            return True
        spec = lease.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        record = (holder, str(spec.get("renewTime") or ""), str(spec.get("leaseDurationSeconds") or ""))
        if record != self._observed:
            self._observed = record
            self._observed_at = now
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        if holder and holder != self.identity and now < self._observed_at + duration:
            return False  # someone else holds a lease that has not expired
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder == self.identity:
            new_spec = self._spec(str(spec.get("acquireTime") or micro_time()), transitions)
        else:
            new_spec = self._spec(micro_time(), transitions + 1)
        lease["spec"] = new_spec
        try:
            self.client.update(lease)
        except ConflictError:
            return False
        if holder != self.identity:
            self.transitions += 1
        return True

    def release(self) -> None:
        """Give the Lease up (client-go's ReleaseOnCancel) so a standby takes over at once."""
        self._valid_until = 0.0
        try:
            lease = self.client.get("Lease", self.name, self.namespace)
            if (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            lease["spec"] = dict(
                lease["spec"], holderIdentity="", leaseDurationSeconds=1, renewTime=micro_time()
            )
            self.client.update(lease)
        except StoreError as e:
            log.info("leader election: release: %s", e)
