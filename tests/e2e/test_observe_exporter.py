"""`kdra exporter --kubeconfig` against the real control plane, scraped by a real Prometheus server.

kube-scheduler (1.36.3) allocates claims and binds pods; the exporter (a `kdra exporter` process) follows
the cluster through watches; Prometheus (Debian's package, started here on loopback with a generated config
and a temporary data directory) scrapes it every second. Every assertion goes through Prometheus's HTTP
query API and compares with what the API server says about the claims at that moment, while pods come and
go.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from kdra.cluster.store import NotFoundError
from kdra.kube.client import KubeClient, Obj
from kdra.observe.exposition import parse_text
from support.controlplane import ControlPlane, create_node, force_delete, free_port
from support.wait import WaitTimeout, diagnose, file_tail, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.e2e_lane(name="kube-scheduler")]

DRIVER = "gpu.nvidia.com"
PRODUCT = "NVIDIA H100 80GB HBM3"
GI = 1024**3
T = TypeVar("T")


class Prometheus:
    """One prometheus server on 127.0.0.1 with a generated config; stops exactly the process it started."""

    def __init__(self, work: Path, target: str) -> None:
        self.work = work
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = work / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n"
            f"  - job_name: kdra\n    static_configs:\n      - targets: ['{target}']\n"
        )
        self.log = open(work / "prometheus.log", "wb")  # noqa: SIM115 - closed in stop()
        diagnose("prometheus", file_tail(work / "prometheus.log"))
        self.proc = subprocess.Popen(
            [
                shutil.which("prometheus") or "prometheus",
                f"--config.file={config}",
                f"--storage.tsdb.path={work / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def wait_ready(self, timeout: float = 60) -> None:
        def ready() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: {(self.work / 'prometheus.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                    return r.status == 200
            except OSError:
                return False

        wait_for(ready, timeout, "prometheus to be ready")

    def query(self, promql: str) -> list[dict[str, Any]]:
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.loads(r.read())
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def scalar(self, promql: str) -> float | None:
        res = self.query(promql)
        if not res:
            return None
        assert len(res) == 1, res
        return float(res[0]["value"][1])

    def targets_up(self) -> bool:
        with urllib.request.urlopen(f"{self.url}/api/v1/targets", timeout=10) as r:
            body = json.loads(r.read())
        return any(t.get("health") == "up" for t in body["data"]["activeTargets"])

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


def dashboard_queries() -> list[tuple[str, str]]:
    dash = json.loads((Path(__file__).resolve().parents[2] / "dashboards" / "kdra-grafana.json").read_text())
    subst = {"$__rate_interval": "1m", "$product": ".*", "$node": ".*"}
    out = []
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for var, value in subst.items():
                expr = expr.replace(var, value)
            out.append((panel["title"], expr))
    return out


def eventually(fn: Callable[[], T], check: Callable[[T], bool], timeout: float, what: str) -> T:
    """Poll fn until check(its value) holds; fail with the last value."""
    seen: list[T] = []

    def probe() -> bool:
        seen[:] = [fn()]
        return check(seen[0])

    try:
        wait_for(probe, timeout, what, interval=0.5)
    except WaitTimeout as e:
        pytest.fail(f"{e}\nlast value: {seen[0] if seen else None!r}")
    return seen[0]


@pytest.fixture
def fleet(kube: KubeClient, plane_gates: dict[str, bool]) -> Iterator[dict[str, Any]]:
    """Two Ready nodes with four 80Gi GPUs each in ResourceSlices, and a DeviceClass for them alone: the
    devices are NVIDIA-shaped (driver gpu.nvidia.com), as are the fleets of tests in the other lanes, so the
    class selects this fleet's own attribute, not the driver. Beside them a neighbour's node whose NVIDIA
    device lacks that attribute, as other lanes' devices do: a selector that reads the attribute unguarded
    fails every scheduling attempt there (CEL `no such key`, a Filter error in kube-scheduler).
    kube-scheduler places the tests' pods, with the plane's own gates whatever corpus case ran before."""
    suffix = uuid.uuid4().hex[:6]
    nodes = [f"obs-{suffix}-{i}" for i in range(2)]
    neighbour = f"obs-{suffix}-neighbour"
    cls = f"obs-gpu-{suffix}"
    create_node(kube, neighbour)
    kube.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{neighbour}-gpus"},
            "spec": {
                "driver": DRIVER,
                "nodeName": neighbour,
                "pool": {"name": neighbour, "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {
                        "name": "gpu-0",
                        "attributes": {"type": {"string": "gpu"}, "productName": {"string": PRODUCT}},
                        "capacity": {"memory": {"value": "80Gi"}},
                    }
                ],
            },
        }
    )
    for n in nodes:
        create_node(kube, n, labels={"kdra.test/e2e": "true", "nvidia.com/gpu.memory": "81920"})
        kube.create(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{n}-gpus"},
                "spec": {
                    "driver": DRIVER,
                    "nodeName": n,
                    "pool": {"name": n, "generation": 1, "resourceSliceCount": 1},
                    "devices": [
                        {
                            "name": f"gpu-{i}",
                            "attributes": {
                                "type": {"string": "gpu"},
                                "productName": {"string": PRODUCT},
                                "uuid": {"string": f"GPU-{n}-{i}"},
                                "fleet": {"string": suffix},
                            },
                            "capacity": {"memory": {"value": "80Gi"}},
                        }
                        for i in range(4)
                    ],
                },
            }
        )
    attrs = f'device.attributes["{DRIVER}"]'
    own = f'"fleet" in {attrs} && {attrs}.fleet == "{suffix}"'
    kube.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": cls},
            "spec": {"selectors": [{"cel": {"expression": own}}]},
        }
    )
    yield {"nodes": nodes, "class": cls, "pools": "|".join(nodes)}
    for n in [*nodes, neighbour]:
        kube.delete("ResourceSlice", f"{n}-gpus", missing_ok=True)
        kube.delete("Node", n, missing_ok=True)
    kube.delete("DeviceClass", cls, missing_ok=True)


@pytest.fixture
def exporter(control_plane: ControlPlane, tmp_path: Path) -> Iterator[str]:
    """A `kdra exporter --kubeconfig` process on a free loopback port; stopped (exactly it) afterwards."""
    port = free_port()
    log = open(tmp_path / "exporter.log", "wb")  # noqa: SIM115 - closed below
    diagnose("kdra exporter", file_tail(tmp_path / "exporter.log"))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kdra.cli.main",
            "exporter",
            "--kubeconfig",
            str(control_plane.kubeconfig),
            "--listen",
            f"127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )

    def healthy() -> bool:
        if proc.poll() is not None:
            raise RuntimeError((tmp_path / "exporter.log").read_text())
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    try:
        wait_for(healthy, 60, "the exporter to list the cluster")
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture
def prometheus(exporter: str, tmp_path: Path) -> Iterator[Prometheus]:
    if shutil.which("prometheus") is None:
        pytest.skip("prometheus is not installed (make e2e installs Debian's prometheus package)")
    work = tmp_path / "prometheus"
    work.mkdir()
    prom = Prometheus(work, exporter)
    try:
        prom.wait_ready()
        wait_for(prom.targets_up, 30, "prometheus to scrape the exporter")
        yield prom
    finally:
        prom.stop()


def claim(name: str, ns: str, cls: str, count: int, annotations: dict[str, str] | None = None) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": ns, "annotations": annotations or {}},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {"deviceClassName": cls, "allocationMode": "ExactCount", "count": count},
                    }
                ]
            }
        },
    }


def pod(name: str, ns: str, claim_name: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim_name}],
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"claims": [{"name": "gpu"}]},
                }
            ],
        },
    }


def cluster_devices(kube: KubeClient, ns: str) -> set[tuple[str, ...]]:
    """(claim, pod, driver, pool, device, request) of every allocated device in ns, per the API server."""
    out: set[tuple[str, ...]] = set()
    for c in kube.list("ResourceClaim", ns):
        st = c.get("status") or {}
        pods = ",".join(sorted(r["name"] for r in st.get("reservedFor") or [] if r.get("resource") == "pods"))
        for r in ((st.get("allocation") or {}).get("devices") or {}).get("results") or []:
            out.add((c["metadata"]["name"], pods, r["driver"], r["pool"], r["device"], r["request"]))
    return out


def prom_devices(prom: Prometheus, ns: str) -> set[tuple[str, ...]]:
    out: set[tuple[str, ...]] = set()
    for s in prom.query(f'kdra_claim_device_info{{namespace="{ns}"}}'):
        m = s["metric"]
        assert m["node"] == m["pool"] and m["product"] == PRODUCT, m
        assert (m["dra_claim_name"], m["dra_pool_name"], m["dra_device_name"]) == (
            m["claim"],
            m["pool"],
            m["device"],
        )
        out.add((m["claim"], m["pod"], m["driver"], m["pool"], m["device"], m["request"]))
    return out


def agree(kube: KubeClient, prom: Prometheus, ns: str) -> tuple[set[tuple[str, ...]], set[tuple[str, ...]]]:
    return cluster_devices(kube, ns), prom_devices(prom, ns)


def bound(kube: KubeClient, ns: str, name: str) -> bool:
    try:
        return bool(kube.get("Pod", name, ns)["spec"].get("nodeName"))
    except NotFoundError:
        return False


def test_prometheus_sees_who_holds_which_device_while_pods_come_and_go(
    kube: KubeClient,
    namespace: str,
    fleet: dict[str, Any],
    prometheus: Prometheus,
    control_plane: ControlPlane,
) -> None:
    ns, cls, pools = namespace, fleet["class"], fleet["pools"]
    kube.create(claim("train", ns, cls, 2))
    kube.create(claim("infer", ns, cls, 1, {"kdra.dev/gpu-memory": "60Gi"}))
    kube.create(claim("huge", ns, cls, 8))  # 8 GPUs exist, but at most 4 on one node
    for name, c in (("trainer", "train"), ("server", "infer"), ("greedy", "huge")):
        kube.create(pod(name, ns, c))
    wait_for(lambda: bound(kube, ns, "trainer") and bound(kube, ns, "server"), 60, "pods to be bound")

    # 1. every allocated device of the cluster, with its claim and pod, and nothing else
    cluster, seen = eventually(
        lambda: agree(kube, prometheus, ns),
        lambda v: v[0] == v[1] and len(v[0]) == 3 and all(d[1] for d in v[0]),
        60,
        "Prometheus's kdra_claim_device_info to match the cluster's claims",
    )
    assert {(d[0], d[1]) for d in seen} == {("train", "trainer"), ("infer", "server")}

    # 2. aggregates over our two nodes
    def fleet_sum(metric: str) -> float | None:
        return prometheus.scalar(f'sum({metric}{{pool=~"{pools}"}})')

    assert eventually(lambda: fleet_sum("kdra_fleet_devices_allocated"), lambda v: v == 3, 30, "3 allocated")
    assert fleet_sum("kdra_fleet_devices") == 8
    assert fleet_sum("kdra_fleet_gpus") == 8
    assert fleet_sum("kdra_fleet_gpu_equivalents_allocated") == 3
    assert fleet_sum("kdra_fleet_memory_allocated_bytes") == 3 * 80 * GI
    # infer says it needs 60Gi of its 80Gi GPU: 20Gi stranded; train says nothing, so counts nothing
    assert fleet_sum("kdra_fleet_stranded_memory_bytes") == 20 * GI
    assert prometheus.scalar(f'kdra_claim_stranded_memory_bytes{{namespace="{ns}"}}') == 20 * GI
    per_node = prometheus.query(f'sum by (node) (kdra_device_allocations{{pool=~"{pools}"}})')
    assert sorted(float(s["value"][1]) for s in per_node) in ([0.0, 3.0], [1.0, 2.0])

    # 3. why the greedy pod waits
    assert (
        eventually(
            lambda: prometheus.scalar(f'kdra_pending_pods{{namespace="{ns}",reason="Unschedulable"}}'),
            lambda v: v == 1,
            60,
            "the greedy pod to be pending as Unschedulable",
        )
        == 1
    )
    assert prometheus.scalar(f'kdra_pending_claims{{namespace="{ns}",reason="PodUnschedulable"}}') == 1
    reasons = prometheus.query('kdra_pending_pod_node_reasons{reason=~".*cannot allocate all claims.*"}')
    assert reasons and float(reasons[0]["value"][1]) >= 1
    assert (prometheus.scalar("kdra_pod_scheduling_duration_seconds_count") or 0) >= 2

    # the dashboard's queries all evaluate; those on what this cluster has (no queues, no kdra scheduler,
    # no dcgm-exporter here; rates need history) return data
    for title, expr in dashboard_queries():
        res = prometheus.query(expr)
        if not any(
            k in expr
            for k in ("kdra_queue_", "kdra_scheduler_attempt", "DCGM_", "stranded_memory_bytes)", "rate(")
        ):
            assert res, (title, expr)

    # 4. pods come and go: the trainer goes, a new pod takes a new claim; Prometheus follows the cluster
    force_delete(kube, "Pod", "trainer", ns)
    kube.create(claim("eval", ns, cls, 1))
    kube.create(pod("evaluator", ns, "eval"))
    wait_for(lambda: bound(kube, ns, "evaluator"), 60, "pod evaluator to be bound")
    cluster, seen = eventually(
        lambda: agree(kube, prometheus, ns),
        lambda v: (
            v[0] == v[1]
            and any(d[0] == "eval" and d[1] == "evaluator" for d in v[1])
            and not any(d[1] == "trainer" for d in v[1])
        ),
        60,
        "Prometheus to drop the trainer and show the evaluator",
    )
    allocated = len(cluster)
    assert eventually(
        lambda: fleet_sum("kdra_fleet_devices_allocated"), lambda v: v == allocated, 30, "allocated count"
    )

    # 5. a claim deleted with its pod disappears
    force_delete(kube, "Pod", "server", ns)
    kube.delete("ResourceClaim", "infer", ns, missing_ok=True)
    eventually(
        lambda: agree(kube, prometheus, ns),
        lambda v: v[0] == v[1] and not any(d[0] == "infer" for d in v[1]),
        60,
        "Prometheus to drop the infer claim",
    )
    eventually(lambda: fleet_sum("kdra_fleet_stranded_memory_bytes"), lambda v: v == 0, 30, "no stranding")
    control_plane.check_alive()


def test_kdra_top_shows_the_claims_of_a_live_cluster(
    kube: KubeClient, namespace: str, fleet: dict[str, Any], control_plane: ControlPlane
) -> None:
    ns, cls = namespace, fleet["class"]
    kube.create(claim("pair", ns, cls, 2))
    kube.create(pod("worker", ns, "pair"))
    wait_for(lambda: bound(kube, ns, "worker"), 60, "pod worker to be bound")
    wait_for(lambda: cluster_devices(kube, ns), 30, "claim pair to be allocated")
    node = kube.get("Pod", "worker", ns)["spec"]["nodeName"]
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "kdra.cli.main",
            "top",
            "--kubeconfig",
            str(control_plane.kubeconfig),
            "--node",
            node,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert f"{ns}/pair" in out.stdout and "worker" in out.stdout, out.stdout
    assert out.stdout.count(f"{ns}/pair") == 2  # its two devices
    assert "1 nodes, 2/4 devices allocated" in out.stdout, out.stdout
    # --watch (piped: one table per refresh) follows the cluster: a second pod shows up without a restart
    watch = subprocess.Popen(
        [
            *(sys.executable, "-m", "kdra.cli.main", "top", "--kubeconfig", str(control_plane.kubeconfig)),
            *("--node", node, "--watch", "--interval", "0.5"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    lines: list[str] = []
    stdout = watch.stdout
    assert stdout is not None
    threading.Thread(target=lambda: lines.extend(iter(stdout.readline, "")), daemon=True).start()
    try:
        wait_for(lambda: any("nodes, " in ln for ln in lines), 60, "kdra top --watch to draw a first table")
        kube.create(claim("solo", ns, cls, 1))
        solo = pod("soloist", ns, "solo")
        solo["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}  # the node top is looking at
        kube.create(solo)
        wait_for(lambda: any(d[0] == "solo" for d in cluster_devices(kube, ns)), 60, "claim solo allocated")
        wait_for(lambda: any(f"{ns}/solo" in ln for ln in lines), 30, "kdra top --watch to show claim solo")
    finally:
        watch.terminate()
        watch.wait(timeout=15)
    shown = "".join(lines)
    first = shown.split("nodes, ")[1]
    assert f"{ns}/pair" in first and f"{ns}/solo" not in first, shown

    # one exposition, printed after the initial list
    once = subprocess.run(
        [
            sys.executable,
            "-m",
            "kdra.cli.main",
            "exporter",
            "--kubeconfig",
            str(control_plane.kubeconfig),
            "--once",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert once.returncode == 0, once.stderr
    pods = {
        lb["pod"]
        for n, lb, _v in parse_text(once.stdout)
        if n == "kdra_claim_device_info" and lb["namespace"] == ns
    }
    assert pods == {"worker", "soloist"}
