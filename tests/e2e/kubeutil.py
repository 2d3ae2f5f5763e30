"""Helpers for the Kubernetes-mode tests of kdra's own commands (test_kube_*.py): a device fleet made of
plain ResourceSlices, template-claim pods, and `kdra scheduler` processes started and stopped by pid."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from kdra.cluster.store import StoreError
from kdra.kube.client import KubeClient, Obj
from support.controlplane import ControlPlane, create_node, force_delete
from support.wait import diagnose, wait_for

PAUSE_IMAGE = "registry.k8s.io/pause:3.10"


@dataclass
class DeviceFleet:
    """`nodes` Nodes with `devices` devices each of `driver`, one slice per node, and a DeviceClass. The
    driver defaults to one named after the prefix, so that tests running side by side (make e2e's lanes)
    never select each other's devices."""

    kube: KubeClient
    prefix: str
    nodes: int
    devices: int
    driver: str = ""
    node_names: list[str] = field(default_factory=list)
    kubelet: bool = True  # KWOK runs the pods bound to these nodes (False: nothing does)

    def __post_init__(self) -> None:
        self.driver = self.driver or f"{self.prefix}.kdra.test"

    @property
    def device_class(self) -> str:
        return f"{self.prefix}-class"

    def create(self, workers: int = 8) -> DeviceFleet:
        self.kube.create(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": self.device_class},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{self.driver}"'}}]},
            }
        )
        self.node_names = [f"{self.prefix}-n{i:03d}" for i in range(self.nodes)]

        def one(name: str) -> None:
            create_node(self.kube, name, labels={"kdra.test/fleet": self.prefix}, kubelet=self.kubelet)
            self.kube.create(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceSlice",
                    "metadata": {"name": f"{name}-{self.driver}"},
                    "spec": {
                        "driver": self.driver,
                        "nodeName": name,
                        "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                        "devices": [{"name": f"dev-{i}"} for i in range(self.devices)],
                    },
                }
            )

        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(one, self.node_names))
        return self

    def delete(self, workers: int = 1) -> None:
        def one(name: str) -> None:
            self.kube.delete("ResourceSlice", f"{name}-{self.driver}", missing_ok=True)
            self.kube.delete("Node", name, missing_ok=True)

        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(one, self.node_names))
        self.kube.delete("DeviceClass", self.device_class, missing_ok=True)


def claim_template(name: str, namespace: str, device_class: str, count: int = 1) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "dev", "exactly": {"deviceClassName": device_class, "count": count}}
                    ]
                }
            }
        },
    }


def template_pod(name: str, namespace: str, template: str, scheduler: str = "kdra") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "kdra-e2e"}},
        "spec": {
            "schedulerName": scheduler,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "c",
                    "image": PAUSE_IMAGE,
                    "resources": {"claims": [{"name": "dev"}]},
                }
            ],
            "resourceClaims": [{"name": "dev", "resourceClaimTemplateName": template}],
        },
    }


def create_pods(kube: KubeClient, pods: Iterable[Obj], workers: int = 8) -> None:
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(kube.create, pods))


def bound_pods(kube: KubeClient, namespace: str) -> dict[str, str]:
    return {
        p["metadata"]["name"]: p["spec"]["nodeName"]
        for p in kube.list("Pod", namespace)
        if (p.get("spec") or {}).get("nodeName")
    }


def allocated_devices(kube: KubeClient, namespace: str | None = None) -> list[tuple[str, str, str, str]]:
    """(claim ns/name, driver, pool, device) for every allocated device result."""
    out = []
    for c in kube.list("ResourceClaim", namespace):
        alloc = (c.get("status") or {}).get("allocation") or {}
        for r in (alloc.get("devices") or {}).get("results") or []:
            key = f"{c['metadata']['namespace']}/{c['metadata']['name']}"
            out.append((key, r["driver"], r["pool"], r["device"]))
    return out


def wait_until(fn: Callable[[], object], timeout: float, what: str, interval: float = 0.5) -> None:
    wait_for(fn, timeout, what, interval)


class KdraProcess:
    """A `kdra` subcommand in its own process group; stopped (or killed) by its own pid only."""

    def __init__(self, cp: ControlPlane, args: list[str], log: Path) -> None:
        if args[0] == "scheduler" and "--leader-elect" not in args and "--identity" not in args:
            # Without --leader-elect a scheduler claims its name's Lease and a second one exits. One
            # identity per test process, as the chart's --identity=$(POD_NAME) stays across a container's
            # restarts: a kdra restarted after a SIGKILL takes its own Lease back at once.
            args = [*args, "--identity", f"e2e-{os.getpid()}"]
        self.log_path = log
        self._log = open(log, "ab")  # noqa: SIM115 - closed in stop()
        diagnose(f"kdra {args[0]} ({log.name})", self.log)  # every timed-out wait prints its tail
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kdra.cli.main", *args, "--kubeconfig", str(cp.kubeconfig)],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def running(self) -> bool:
        return self.proc.poll() is None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def freeze(self) -> None:
        """SIGSTOP the whole process (every thread at once), as a VM pause or a frozen cgroup does."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL: no lease release, no clean-up (a crash)."""
        if self.running():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 15.0) -> None:
        if self.running():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
                os.killpg(self.proc.pid, signal.SIGCONT)  # a frozen process only gets SIGTERM once thawed
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()


@contextlib.contextmanager
def kdra_scheduler(cp: ControlPlane, log: Path, *extra: str) -> Iterator[KdraProcess]:
    proc = KdraProcess(cp, ["scheduler", "--kube-api-qps", "500", "--kube-api-burst", "1000", *extra], log)
    try:
        yield proc
    finally:
        proc.stop()


def cleanup_namespace_pods(kube: KubeClient, namespace: str) -> None:
    for pod in kube.list("Pod", namespace):
        force_delete(kube, "Pod", pod["metadata"]["name"], namespace)


def restart_apiserver(cp: ControlPlane, down: float = 2.0, timeout: float = 90.0) -> None:
    """Stop kube-apiserver (SIGTERM to its own process group), leave it down for `down` seconds and start
    it again with the same flags and port; wait for /readyz. Uses the fixture's Component objects only."""
    comp = cp.components["kube-apiserver"]
    comp.stop()
    time.sleep(down)
    comp.start()
    client = cp.client()
    deadline = time.monotonic() + timeout
    while True:
        cp.check_alive()
        with contextlib.suppress(StoreError, OSError):
            if client.request("GET", "/readyz", timeout=5) == "ok":
                return
        if time.monotonic() > deadline:
            raise TimeoutError(f"kube-apiserver not ready {timeout:.0f}s after a restart\n{comp.log_tail()}")
        time.sleep(0.2)
