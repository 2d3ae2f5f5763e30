"""Leader election with a coordination.k8s.io/v1 Lease, after client-go's leaderelection package.

A candidate takes the Lease when it does not exist, has no holder, or its holder has not renewed it for
`lease_duration` seconds *as this candidate observed* (the local time since the record last changed,
never the timestamps written by another machine's clock). Every write is conditional on the Lease's
resourceVersion, so of two candidates racing for it exactly one wins. The leader renews every
`retry_period` seconds and counts itself leader only until `renew_deadline` after its last successful
renewal; `renew_deadline < lease_duration` means a leader that cannot renew stops acting before anyone
else may take over, so two replicas never both schedule.

Fencing: a leader that was paused (SIGSTOP, a frozen cgroup, a VM pause, CPU starvation) wakes up with
threads in the middle of their work, each about to write. Checking leadership at the top of a loop does not
stop them, so `fence(method, path)` is installed as the client's `write_fence`: it runs immediately before
every write is sent (once the connection, the credential and the request's bytes are ready, so no slow step
lies between the check and the send) and refuses it (FencedError) once the deadline has passed on
`lease_clock()`, a clock that keeps counting while the process is stopped or the machine suspended. Only
writes to the elector's own Lease pass (they are conditional on its resourceVersion, so a stale one fails by
itself). What no client can fence: a pause in the few instructions between the check and the send syscall,
and a pause of the whole machine with the request still in its kernel's socket buffer. The first is
reported: `sent(method, path)` runs once the request is handed to the socket and warns when the lease ran
out meanwhile (counted in `raced_writes`; a write conditional on a resourceVersion the new leader changed
is refused by the API server), and the process waits for those reports before it exits (`wait_sent`).
Leadership, once lost, is never regained by this process (as kube-scheduler exits): `on_lost` callbacks
run once, from whichever thread notices first.

Claim mode (`claim=True`, `kdra scheduler` without --leader-elect): the same Lease, taken and renewed the
same way, but only to tell a second process serving the same scheduler name that one already runs, which
kube-scheduler does not detect (two of them bind the same pods twice). A claimant does not stand by: once
it sees another holder renew the Lease (proof that it is alive, on this process's clock only) it records
that holder in `rival`, and a claimant that held the Lease and finds another holder has lost it. Nothing is
fenced and a renewal that fails ends nothing: without --leader-elect an API server outage must not stop
the scheduler, as it does not stop kube-scheduler.
"""

from __future__ import annotations

import datetime as _dt
import logging
import math
import threading
import time
from collections.abc import Callable

from kdra.api.types import Obj
from kdra.cluster.store import AlreadyExistsError, ConflictError, NotFoundError, StoreError
from kdra.kube.client import FencedError, KubeClient
from kdra.kube.resources import resource_path

log = logging.getLogger("kdra.kube.leader")


_CLOCK = getattr(time, "CLOCK_BOOTTIME", None)


def lease_clock() -> float:
    """Seconds for lease deadlines: CLOCK_BOOTTIME where there is one (Linux), which unlike
    CLOCK_MONOTONIC also counts while the machine is suspended; CLOCK_MONOTONIC elsewhere. Both count
    while the process is stopped. Never the wall clock, which may jump."""
    return time.clock_gettime(_CLOCK) if _CLOCK is not None else time.monotonic()


def micro_time(t: float | None = None) -> str:
    """metav1.MicroTime's RFC 3339 form."""
    d = _dt.datetime.fromtimestamp(time.time() if t is None else t, _dt.UTC)
    return d.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# client-go's leaderelection.JitterFactor: a renewal may be retried up to retry_period x 1.2 apart.
JITTER_FACTOR = 1.2


def check_timing(
    lease_duration: float,
    renew_deadline: float,
    retry_period: float,
    names: tuple[str, str, str] = ("lease duration", "renew deadline", "retry period"),
) -> None:
    """client-go's NewLeaderElector rules, raising ValueError naming the setting (`names`: what the caller
    calls them, e.g. its flags): all positive and finite, the renew deadline below the lease duration and
    above retry_period x JITTER_FACTOR. A retry period of 0 made the elector GET and PUT its Lease in a
    busy loop."""
    lease, renew, retry = names
    for name, value in ((lease, lease_duration), (renew, renew_deadline), (retry, retry_period)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name}: Invalid value: {value:g}: must be a positive number of seconds")
    if renew_deadline >= lease_duration:
        raise ValueError(
            f"{renew}: Invalid value: {renew_deadline:g}: must be below {lease} ({lease_duration:g})"
        )
    if renew_deadline <= JITTER_FACTOR * retry_period:
        raise ValueError(
            f"{renew}: Invalid value: {renew_deadline:g}: must be above {retry} x {JITTER_FACTOR:g} "
            f"({JITTER_FACTOR * retry_period:g})"
        )


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
        claim: bool = False,
    ) -> None:
        check_timing(lease_duration, renew_deadline, retry_period)
        self.client = client
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.claim = claim
        self.rival = ""  # another holder seen renewing the Lease (claim mode acts on it)
        self._what = "single-scheduler Lease" if claim else "leader election"
        self._valid_until = 0.0
        self._last_error = ""
        self._problem = ""
        self._observed: tuple[str, str, str] | None = None
        self._observed_at = 0.0
        self._stop = threading.Event()
        self.ever_led = False
        self.transitions = 0
        self._thread: threading.Thread | None = None
        # The elector's own writes: its Lease, and creating it (a POST to the namespace's leases).
        self._lease_paths = {
            ("PUT", resource_path("Lease", namespace, name)),
            ("POST", resource_path("Lease", namespace)),
        }
        self._lost = False
        self._lost_lock = threading.Lock()
        self.on_lost: list[Callable[[], None]] = []  # run once, when leadership ends
        self.fenced_writes = 0  # writes refused because the lease ran out
        self.raced_writes = 0  # writes that passed the fence and were sent after the lease ran out
        self._sending = 0  # writes between the fence and their report
        self._sending_lock = threading.Lock()

    # -- state -----------------------------------------------------------------------------------------
    @property
    def is_leader(self) -> bool:
        if self._lost:
            return False
        if self.claim:
            return self.ever_led  # no deadline: a claim is lost only to another holder
        if lease_clock() < self._valid_until:
            return True
        if self.ever_led:
            self._mark_lost()
        return False

    @property
    def lost(self) -> bool:
        """Led once and no longer does (the caller should stop, as kube-scheduler exits)."""
        return self.ever_led and not self.is_leader

    def _mark_lost(self) -> None:
        with self._lost_lock:
            if self._lost:
                return
            self._lost = True
            self._valid_until = 0.0
        log.warning("%s: %s lost the lease %s/%s", self._what, self.identity, self.namespace, self.name)
        for callback in self.on_lost:
            try:
                callback()
            except Exception as e:  # one failing callback must not keep the others from running
                log.warning("leader election: on_lost callback: %s: %s", type(e).__name__, e)

    # -- fencing ---------------------------------------------------------------------------------------
    def fence(self, method: str, path: str) -> None:
        """The client's write_fence: refuse any write unless this process leads right now (its own Lease
        excepted). Cheap: one clock read."""
        if (method, path) in self._lease_paths:
            return
        if self.is_leader:
            with self._sending_lock:
                self._sending += 1
            return
        self.fenced_writes += 1
        raise FencedError(
            f"{method} {path}: not sent, {self.identity} does not hold the leader lease "
            f"{self.namespace}/{self.name}"
        )

    def sent(self, method: str, path: str) -> None:
        """The client's write_sent, once a write that passed the fence was handed to the socket (or failed
        to be): if the lease ran out meanwhile, the process was paused between the two (a stop, CPU
        starvation) and the write may reach the API server after another replica took over. Nothing can
        call it back: it is reported."""
        if (method, path) in self._lease_paths:
            return
        try:
            if not self.is_leader:
                self.raced_writes += 1
                log.warning(
                    "leader election: %s %s passed the lease check and was sent after the lease ran out "
                    "(the process was paused between the two)",
                    method,
                    path,
                )
        finally:
            with self._sending_lock:
                self._sending -= 1

    def wait_sent(self, timeout: float = 1.0) -> None:
        """Wait (at most `timeout` s) until every write that passed the fence is sent and reported: before
        the process exits, so that no report of a write sent late is lost."""
        end = time.monotonic() + timeout
        while self._sending > 0 and time.monotonic() < end:
            time.sleep(0.001)

    def install_fence(self, client: KubeClient | None = None) -> LeaderElector:
        """Make `client` (default: the elector's) refuse every write while this process does not lead, and
        report one sent after the lease ran out."""
        c = client or self.client
        c.write_fence = self.fence
        c.write_sent = self.sent
        return self

    # -- running ---------------------------------------------------------------------------------------
    def start(self) -> LeaderElector:
        self._thread = threading.Thread(target=self._run, daemon=True, name="kdra-leader-election")
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.lost:  # woken at the deadline without a renewal: on_lost runs now, not after a GET
                return
            self.try_acquire_or_renew()
            if self.lost:
                return  # on_lost ran; this process does not campaign again
            # Wake no later than the deadline, so loss is noticed (and on_lost runs) on time.
            wait = self.retry_period
            if self.is_leader:
                wait = max(0.0, min(wait, self._valid_until - lease_clock()))
            self._stop.wait(wait)

    def stop(self, release: bool = True) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.retry_period + 5)
        if release and self.is_leader:
            self.release()

    @property
    def holder(self) -> str:
        """The Lease's holder as last read ("" before the first read, or when nobody holds it)."""
        return self._observed[0] if self._observed is not None else ""

    @property
    def problem(self) -> str:
        """The last Lease request's error ("" when it succeeded): a claimant that cannot read or write the
        Lease (no RBAC for it, no namespace) cannot tell whether another scheduler runs."""
        return self._problem

    def try_acquire_or_renew(self) -> bool:
        if self._lost:
            return False
        t0 = lease_clock()  # before the requests: the deadline counts from before the renewal was sent
        try:
            ok = self._try()
        except StoreError as e:
            # Said once per problem at warning level: a Lease namespace that does not exist, RBAC that does
            # not allow the Lease, an invalid name kept a standby "waiting for the leader lease" in silence.
            message = f"{self._what}: Lease {self.namespace}/{self.name}: {e}"
            self._problem = str(e)
            if message != self._last_error:
                self._last_error = message
                # A claimant's caller says it once, with what it means (kdra.kube.run).
                log.log(
                    logging.INFO if self.claim else logging.WARNING,
                    "%s (retrying every %g s)",
                    message,
                    self.retry_period,
                )
            else:
                log.info("%s", message)
            ok = False
        else:
            self._last_error = self._problem = ""
        if ok:
            if not self.ever_led:
                log.info("%s: %s holds %s/%s", self._what, self.identity, self.namespace, self.name)
            self.ever_led = True
            with self._lost_lock:
                if not self._lost:
                    self._valid_until = t0 + self.renew_deadline
        return ok and not self._lost

    def _spec(self, acquire_time: str, transitions: int) -> Obj:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.lease_duration)),
            "acquireTime": acquire_time,
            "renewTime": micro_time(),
            "leaseTransitions": transitions,
        }

    def _try(self) -> bool:
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
            if self._observed is not None and holder and holder != self.identity:
                self.rival = holder  # its record changed while this process watched: it is alive
            # Observed when the answer arrived, not when it was asked for (client-go's observedTime): the
            # record may have changed while the GET was under way.
            self._observed = record
            self._observed_at = lease_clock()
        if self.claim and self.ever_led and holder != self.identity:
            # Taken over while this claimant could not renew (or released by someone else): whoever holds
            # the Lease serves the name.
            self.rival = self.rival or holder or "(released by another process)"
            self._mark_lost()
            return False
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        if holder and holder != self.identity and lease_clock() < self._observed_at + duration:
            return False  # someone else holds a lease that has not expired
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder == self.identity:
            new_spec = self._spec(str(spec.get("acquireTime") or micro_time()), transitions)
        else:
            new_spec = self._spec(micro_time(), transitions + 1)
        lease["spec"] = new_spec
        if self._lost:
            return False  # lost while the GET was under way: do not renew a leadership that ended
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
            log.info("%s: release: %s", self._what, e)
