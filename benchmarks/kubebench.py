"""What the control-plane benchmarks measure the same way for kube-scheduler and `kdra scheduler`.

- per pod: creation -> bound latency, from the API server's own stamps (metadata.creationTimestamp and the
  PodScheduled=True condition's lastTransitionTime, which the API server sets at pods/binding; both have
  one-second resolution, so each latency is +-1 s and p50/p99 below ~2 s say little);
- per scheduler process: CPU seconds (/proc/PID/stat, user + system) and resident set size, sampled
  every 0.5 s for the peak (/proc/PID/status VmRSS);
- API writes: kube-scheduler's own count (client-go's rest_client_requests_total, every non-GET) and
  kdra's client's (KDRA_STATS at exit), both counted by the client, attempts included;
- the control plane's CPU over each run (API server, etcd, controller manager), to tell a scheduler's limit
  from the control plane's on a 2-core machine;
- the machine's load average, at the start and end of each run (the machine is shared).
"""

from __future__ import annotations

import datetime as dt
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

Obj = dict[str, Any]

_TICK = os.sysconf("SC_CLK_TCK")


def parse_time(s: str) -> float:
    return dt.datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp()


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.1f} {five:.1f} {fifteen:.1f}"


def scheduled_at(pod: Obj) -> float | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "True":
            return parse_time(c["lastTransitionTime"])
    return None


def latencies(pods: list[Obj], since: float = 0.0) -> list[float]:
    """Creation -> bound seconds of every bound pod created at or after `since` (epoch seconds)."""
    out = []
    for p in pods:
        at = scheduled_at(p)
        created = parse_time(p["metadata"]["creationTimestamp"])
        if at is not None and created >= since:
            out.append(at - created)
    return sorted(out)


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    i = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[i]


def cpu_seconds(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime


def rss_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class ProcessMeter:
    """CPU seconds and peak RSS of one process over a stretch of time (`with ProcessMeter(pid) as m`)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.cpu_s = 0.0
        self.peak_rss_mib = 0.0
        self.end_rss_mib = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.5):
            self.peak_rss_mib = max(self.peak_rss_mib, rss_mib(self.pid))

    def __enter__(self) -> ProcessMeter:
        self._cpu0 = cpu_seconds(self.pid)
        self.peak_rss_mib = rss_mib(self.pid)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.cpu_s = cpu_seconds(self.pid) - self._cpu0
        self.end_rss_mib = rss_mib(self.pid)
        self.peak_rss_mib = max(self.peak_rss_mib, self.end_rss_mib)


CONTROL_PLANE = ("kube-apiserver", "etcd", "kube-controller-manager")


def control_plane_cpu(cp: Any) -> dict[str, float]:
    """CPU seconds so far of the control plane's API server, etcd and controller manager."""
    procs = {name: cp.components[name].proc for name in CONTROL_PLANE}
    return {name: cpu_seconds(proc.pid) if proc else 0.0 for name, proc in procs.items()}


def cores(before: dict[str, float], after: dict[str, float], seconds: float) -> str:
    """Cores each component used between two control_plane_cpu() readings, as one line."""
    return ", ".join(f"{name} {(after[name] - before[name]) / max(seconds, 1e-9):.2f}" for name in before)


def client_writes(metrics: dict[str, float]) -> float:
    """Non-GET requests a Go component sent (client-go's rest_client_requests_total)."""
    return sum(
        v
        for k, v in metrics.items()
        if k.startswith("rest_client_requests_total{") and 'method="GET"' not in k
    )


def wait_all_bound(kube: Any, ns: str, timeout: float, poll: float = 2.0) -> list[Obj]:
    """Poll until no pod of `ns` is waiting for a node (or `timeout`); return the namespace's pods. Each poll
    lists only the pending pods (a field selector): a list of every pod every 2 s grows with the burst and
    loads the API server the schedulers share."""
    deadline = time.monotonic() + timeout
    while kube.list("Pod", ns, fieldSelector="spec.nodeName=") and time.monotonic() < deadline:
        time.sleep(poll)
    return list(kube.list("Pod", ns))


def summary(name: str, lat: list[float], cpu_s: float, bound: int, **extra: Any) -> Obj:
    return {
        "scheduler": name,
        "bound": bound,
        "p50_s": percentile(lat, 0.5),
        "p99_s": percentile(lat, 0.99),
        "max_s": lat[-1] if lat else float("nan"),
        "cpu_ms_per_pod": 1000 * cpu_s / max(1, bound),
        **extra,
    }


def namespace(kube: Any, ns: str) -> None:
    """Create `ns` and wait for its default ServiceAccount (pods are refused until it exists)."""
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    deadline = time.monotonic() + 60
    while not kube.try_get("ServiceAccount", "default", ns):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no default ServiceAccount in {ns}")
        time.sleep(0.2)


def free(kube: Any, ns: str, timeout: float = 600) -> None:
    """Force-delete the namespace's pods (no kubelet) and wait until kube-controller-manager released
    their claims."""
    from support.controlplane import force_delete

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda p: force_delete(kube, "Pod", p["metadata"]["name"], ns), kube.list("Pod", ns)))
    deadline = time.monotonic() + timeout
    while any((c.get("status") or {}).get("allocation") for c in kube.list("ResourceClaim", ns)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"claims of {ns} not released")
        time.sleep(2.0)


def create_all(kube: Any, objs: list[Obj], rate: float = 0.0) -> tuple[float, float]:
    """Create the objects in their order by 8 threads; with a rate, the i-th not before i/rate seconds
    after the first, so that every run's burst has the same pace whatever the load (without, creation
    runs as fast as the API server takes it, and so as fast as the scheduler under test lets it).
    Returns the wall times of the first and of the last create."""
    t0, start = time.time(), time.monotonic()

    def create(i: int) -> None:
        if rate > 0:
            time.sleep(max(0.0, start + i / rate - time.monotonic()))
        kube.create(objs[i])

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, range(len(objs))))
    return t0, time.time()
