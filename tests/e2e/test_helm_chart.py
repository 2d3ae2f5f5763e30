"""The Helm chart (deploy/helm/kdra) with a real helm (hack/helm/build.sh) and the real control plane:
`helm lint`, `helm template` with default and non-default values, the chart's RBAC agreeing with
deploy/rbac, the rendered manifests server-side applied, and then the scheduler's and the exporter's pod
specs run as host processes with the in-cluster layout the chart implies (service-account token, CA and
namespace files, KUBERNETES_SERVICE_HOST/PORT, downward-API env). That run is also the least-privilege
check: every API request kdra made (its request log, -vv) must be granted by the chart's roles, and every
verb the roles grant must have been used or be listed below with the code path that needs it; and the
service-account token must appear in none of the output."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kdra.cli.main import build_parser
from kdra.cluster.store import StoreError
from kdra.kube.client import KubeClient
from kdra.kube.resources import RESOURCES, request_info
from support.controlplane import ControlPlane, free_port
from support.helm import chart_dir, ensure_helm, helm, render
from support.hostpod import host_process, write_service_account
from support.wait import diagnose, file_tail

from .kubeutil import DeviceFleet, bound_pods, claim_template, create_pods, template_pod, wait_until

# It runs `kdra scheduler` and `kdra exporter` pods as host processes: beside the other kdra schedulers'
# tests, not beside them (make e2e's lanes).
pytestmark = [pytest.mark.e2e, pytest.mark.e2e_lane(name="kdra-scheduler")]

ROOT = Path(__file__).resolve().parents[2]
KDRA = [sys.executable, "-m", "kdra.cli.main"]  # stands for the image's ENTRYPOINT ["kdra"]

# Granted by deploy/rbac but not exercised by this test's scenario, each with the code path needing it.
RARE: dict[tuple[str, str, str], str] = {
    ("get", "pods", ""): "KubeStore.refresh re-reads a pod after a 409",
    ("update", "pods", "status"): "DynamicResources.PreBind writes extendedResourceClaimStatus (KEP-5004)",
    ("get", "resourceclaims", ""): "KubeStore.refresh re-reads a claim after a 409",
    ("create", "resourceclaims", ""): "extended-resource claims (KEP-5004), as kube-scheduler creates them",
    ("update", "resourceclaims", "binding"): "authorization only: 1.36 checks it on status.allocation writes",
    ("create", "pods", "eviction"): "the session evicts victims of preemption and reclaim, and stale gangs",
    ("delete", "pods", ""): "eviction's fallback where the Eviction API is not allowed (as kube-scheduler)",
    ("patch", "podgroups", "status"): "the session writes PodGroup status (kdra, upstream, KAI, Volcano)",
    ("patch", "queues", "status"): "the session writes kdra Queue status",
    ("create", "devicetaintrules", ""): "kdra.kube.conflicts quarantines a device released from a conflict",
    ("delete", "devicetaintrules", ""): "kdra.kube.conflicts ends a quarantine once no claim holds it",
}


@pytest.fixture(scope="session")
def helm_bin(request: pytest.FixtureRequest) -> Path:
    capman = request.config.pluginmanager.getplugin("capturemanager")
    if capman is not None:
        with capman.global_and_fixture_disabled():
            return ensure_helm(sys.stderr)
    return ensure_helm(sys.stderr)


def by_kind(objs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objs}


def deploy_rbac_rules(scheduler_name: str) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for path in sorted((ROOT / "deploy" / "rbac").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] in ("ClusterRole", "Role"):
                rules = yaml.safe_load(
                    yaml.safe_dump(doc["rules"]).replace("- kdra\n", f"- {scheduler_name}\n")
                )
                out[doc["metadata"]["name"]] = rules
    return out


def grants(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    """(verb, resource, subresource) the rules grant (resourceNames ignored: a name-limited rule counts)."""
    out = set()
    for r in rules:
        for res in r["resources"]:
            resource, _, sub = res.partition("/")
            for verb in r["verbs"]:
                out.add((verb, resource, sub))
    return out


def test_chart_lints_and_renders_defaults_and_options(helm_bin: Path) -> None:
    lint = helm(helm_bin, "lint", "--strict", str(chart_dir()))
    assert "1 chart(s) linted, 0 chart(s) failed" in lint.stdout
    assert subprocess.run([sys.executable, str(ROOT / "hack/helm/sync_chart.py"), "--check"]).returncode == 0

    objs = by_kind(render(helm_bin, "kdra", "kdra-system", include_crds=True))
    dep = objs[("Deployment", "kdra-scheduler")]
    pod = dep["spec"]["template"]["spec"]
    c = pod["containers"][0]
    default_args = c["args"]
    assert "--placement=upstream" in default_args and "--device-preference" not in " ".join(default_args)
    assert dep["spec"]["replicas"] == 2
    assert "--leader-elect" in c["args"] and "--metrics-listen=$(POD_IP):9406" in c["args"]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert pod["securityContext"]["runAsNonRoot"] is True and c["resources"]["requests"]["cpu"]
    assert objs[("PodDisruptionBudget", "kdra-scheduler")]["spec"]["minAvailable"] == 1
    assert {k for k, _ in objs} == {
        "CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
        "RoleBinding", "Deployment", "PodDisruptionBudget",
    }  # fmt: skip
    assert len([k for k in objs if k[0] == "CustomResourceDefinition"]) == len(
        list((ROOT / "deploy/crds").glob("*.yaml"))
    )
    # RBAC: the same rules as deploy/rbac (one source, generated by hack/helm/sync_chart.py)
    source = deploy_rbac_rules("kdra")
    for (kind, _name), o in objs.items():
        if kind in ("ClusterRole", "Role"):
            origin = o["metadata"]["annotations"]["kdra.dev/rules-from"].split()[-1]
            assert o["rules"] == source[origin], origin

    options = {
        "scheduler.replicas": 1,
        "scheduler.name": "gpu-batch",
        "scheduler.leaderElection.enabled": False,
        "scheduler.verbosity": 2,
        "scheduler.extraArgs": ["--cel-attempt-budget=4000000"],
        "scheduler.kubernetesVersion": "1.36",
        "scheduler.partition.ownedNodes": "pool=kdra",
        "scheduler.partition.ownedDeviceClasses": ["gpu.nvidia.com", "mig.nvidia.com"],
        "scheduler.placement": "fragmentation",
        "scheduler.devicePreference": "topology",
        "scheduler.gangs.timeout": 300,
        "scheduler.gangs.deviceSearch": True,
        "scheduler.preemption.reclaim": False,
        "scheduler.filterErrors": "skip-node",
        "image.digest": "sha256:" + "a" * 64,
        "exporter.enabled": True,
        "exporter.serviceMonitor.enabled": True,
        "driverSim.enabled": True,
        "driverSim.fleetSpec": "apiVersion: kdra.dev/v1alpha1\nkind: Fleet\n",
    }
    objs = by_kind(render(helm_bin, "demo", "ml", options))
    c = objs[("Deployment", "demo-kdra-scheduler")]["spec"]["template"]["spec"]["containers"][0]
    assert c["image"] == "kdra@sha256:" + "a" * 64
    assert (
        "--scheduler-name=gpu-batch" in c["args"] and "-vv" in c["args"] and "--leader-elect" not in c["args"]
    )
    assert c["args"][-1] == "--cel-attempt-budget=4000000"
    for flag in (
        "--kubernetes-version=1.36", "--owned-nodes=pool=kdra",
        "--owned-device-classes=gpu.nvidia.com,mig.nvidia.com", "--placement=fragmentation",
        "--device-preference=topology", "--gang-timeout=300", "--gang-device-search", "--no-reclaim",
        "--filter-errors=skip-node",
    ):  # fmt: skip
        assert flag in c["args"], flag
    assert "--no-preempt" not in c["args"]
    # every flag the chart renders, defaults or not, is one `kdra scheduler` accepts with that value
    parser = build_parser()
    parsed = [
        parser.parse_args([a.replace("$(POD_NAME)", "p").replace("$(POD_IP)", "10.0.0.1") for a in args])
        for args in (c["args"], default_args)
    ]
    assert parsed[0].device_preference == "topology" and parsed[1].device_preference is None
    assert ("PodDisruptionBudget", "demo-kdra-scheduler") not in objs
    # Without leader election the scheduler still claims its name's Lease (a second one exits): the Role
    # stays, and an old and a new pod never run at once.
    assert ("Role", "demo-kdra-scheduler-leader-election") in objs
    assert "--leader-elect-resource-name=gpu-batch" in c["args"]
    assert objs[("Deployment", "demo-kdra-scheduler")]["spec"]["strategy"] == {"type": "Recreate"}
    assert "strategy" not in dep["spec"]
    assert objs[("Service", "demo-kdra-exporter")]["spec"]["ports"][0]["port"] == 9405
    assert objs[("ServiceMonitor", "demo-kdra-exporter")]["spec"]["endpoints"][0]["port"] == "metrics"
    assert objs[("ClusterRole", "demo-kdra-exporter")]["rules"] == source["kdra-reader"]
    assert objs[("ClusterRole", "demo-kdra-driver-sim")]["rules"] == source["kdra-driver-sim"]
    sim = objs[("Deployment", "demo-kdra-driver-sim")]["spec"]["template"]["spec"]["containers"][0]
    assert sim["args"][:4] == ["driver", "sim", "-c", "/etc/kdra/fleet.yaml"]
    assert "kind: Fleet" in objs[("ConfigMap", "demo-kdra-fleet")]["data"]["fleet.yaml"]
    # values.schema.json refuses what kdra would refuse at start-up, naming the value
    bad = helm(helm_bin, "template", "x", str(chart_dir()), "--set", "scheduler.scoring=Spread", check=False)
    assert bad.returncode != 0 and "/scheduler/scoring" in bad.stderr
    bad = helm(helm_bin, "template", "x", str(chart_dir()), "--set", "scheduler.replica=3", check=False)
    assert bad.returncode != 0 and "'replica' not allowed" in bad.stderr
    for value, says in (
        # two replicas without leader election: the second would exit (the first holds the Lease)
        (
            "scheduler.replicas=2,scheduler.leaderElection.enabled=false",
            "at '/scheduler/leaderElection/enabled': value must be true",
        ),
        ("scheduler.resources.requests.cpu=lots", "at '/scheduler/resources/requests/cpu': 'lots'"),
        ("exporter.resources.limits.memory=1GB", "at '/exporter/resources/limits/memory': '1GB'"),
        ("scheduler.leaderElection.leaseDuration=abc", "at '/scheduler/leaderElection/leaseDuration'"),
        ("scheduler.metrics.port=70000", "at '/scheduler/metrics/port'"),
        ("image.pullPolicy=Sometimes", "at '/image/pullPolicy'"),
        # across values, which a schema cannot compare: the template refuses them (client-go's rules)
        (
            "scheduler.leaderElection.renewDeadline=15",
            "scheduler.leaderElection.renewDeadline: Invalid value: 15: must be below "
            "scheduler.leaderElection.leaseDuration (15)",
        ),
        (
            "scheduler.leaderElection.retryPeriod=9",
            "scheduler.leaderElection.renewDeadline: Invalid value: 10: must be above "
            "scheduler.leaderElection.retryPeriod x 1.2 (10.8)",
        ),
    ):
        bad = helm(helm_bin, "template", "x", str(chart_dir()), "--set", value, check=False)
        assert bad.returncode != 0 and says in bad.stderr, (value, bad.stderr)
    fine = {"scheduler.resources.requests.cpu": 1.5, "scheduler.resources.limits.memory": "2Gi"}
    assert render(helm_bin, "x", "ns", fine)


class HostPod:
    """A container of a rendered Deployment run on this host with the in-cluster layout."""

    def __init__(
        self, cp: ControlPlane, deployment: dict[str, Any], container: str, token: str, workdir: Path
    ) -> None:
        assert cp.certs is not None
        ns = deployment["metadata"]["namespace"]
        sa = write_service_account(workdir / "serviceaccount", token, cp.certs.ca_cert, ns)
        self.name = f"{deployment['metadata']['name']}-{uuid.uuid4().hex[:5]}"
        argv, env = host_process(
            deployment["spec"]["template"],
            container,
            entrypoint=KDRA,
            server_host="127.0.0.1",
            server_port=cp.apiserver_port,
            sa_dir=sa,
            pod_name=self.name,
            namespace=ns,
        )
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        assert not any(k == "KUBECONFIG" for k in env)  # in-cluster config only
        self.log_path = workdir / f"{container}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        diagnose(f"{container} container", file_tail(self.log_path))
        self.proc = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=3) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


REQUEST = re.compile(r"kdra\.kube\.requests DEBUG (GET|POST|PUT|PATCH|DELETE) (\S+) (\d{3})")


def requests_made(output: str) -> set[tuple[str, str, str]]:
    """(verb, resource, subresource) of every request in a -vv log (kdra.kube.requests)."""
    out = set()
    for method, url, _code in REQUEST.findall(output):
        path, _, query = url.partition("?")
        params = dict(p.split("=", 1) for p in query.split("&") if "=" in p)
        verb, _group, resource, sub = request_info(method, path, params)
        if not resource or resource.startswith("/"):
            continue  # discovery (/apis, /apis/GROUP/VERSION): granted to everyone by system:discovery
        out.add((verb, resource, sub))
    return out


@pytest.fixture
def installed(
    control_plane: ControlPlane, kube: KubeClient, helm_bin: Path, namespace: str
) -> Iterator[tuple[str, dict[tuple[str, str], dict[str, Any]]]]:
    release = f"kdra-e2e-{uuid.uuid4().hex[:5]}"
    values = {
        "scheduler.name": release,  # its own schedulerName and Lease: nothing else in the session uses them
        "scheduler.verbosity": 2,  # the request log the least-privilege check reads
        "scheduler.metrics.port": free_port(),
        "exporter.enabled": True,
        "exporter.port": free_port(),
    }
    objs = render(helm_bin, release, namespace, values, include_crds=True)
    served = [o for o in objs if o["kind"] in RESOURCES]
    assert {o["kind"] for o in objs} - {o["kind"] for o in served} == set()
    for o in sorted(served, key=lambda o: o["kind"] != "CustomResourceDefinition"):
        kube.apply(o, "helm-e2e")  # server-side apply, as `kubectl apply --server-side` / helm 4 would
    try:
        yield release, by_kind(objs)
    finally:
        for o in reversed(served):
            if o["kind"] != "CustomResourceDefinition" and o["metadata"].get("namespace") is None:
                with contextlib.suppress(StoreError):
                    kube.delete(o["kind"], o["metadata"]["name"], missing_ok=True)


def test_chart_installs_and_its_pods_run_with_in_cluster_config(
    control_plane: ControlPlane,
    kube: KubeClient,
    namespace: str,
    installed: tuple[str, dict[tuple[str, str], dict[str, Any]]],
    tmp_path: Path,
) -> None:
    release, objs = installed
    dep = kube.get("Deployment", f"{release}-scheduler", namespace)
    assert dep["spec"]["replicas"] == 2  # applied and defaulted by the API server
    assert kube.get("PodDisruptionBudget", f"{release}-scheduler", namespace)["spec"]["minAvailable"] == 1
    fleet = DeviceFleet(kube, f"hc-{uuid.uuid4().hex[:5]}", nodes=2, devices=1).create()
    procs: list[HostPod] = []
    try:
        token = kube.service_account_token(namespace, f"{release}-scheduler")
        sched = HostPod(
            control_plane, objs[("Deployment", f"{release}-scheduler")], "scheduler", token, tmp_path / "s"
        )
        procs.append(sched)
        port = int(next(p for p in sched_ports(objs, release)))
        base = f"http://127.0.0.1:{port}"
        try:
            # A standby is Ready too; a new leader is not until its initial lists are done: wait for both.
            wait_until(
                lambda: ": leading" in sched.output() and http_get(base + "/readyz")[0] == 200,
                60,
                "the scheduler to lead and be ready",
            )
        except TimeoutError:
            raise AssertionError(sched.output()) from None
        assert http_get(base + "/healthz") == (200, "ok\n")
        assert "[+]informer-sync ok" in http_get(base + "/readyz?verbose")[1]
        kube.create(claim_template("one", namespace, fleet.device_class))
        # Three pods, two devices: two bind, one gets the Unschedulable condition and an Event.
        create_pods(kube, [template_pod(f"p{i}", namespace, "one", scheduler=release) for i in range(3)])
        try:
            wait_until(
                # (kube-scheduler binds the chart's own Deployment pods in this namespace: not counted)
                lambda: len(set(bound_pods(kube, namespace)) & {"p0", "p1", "p2"}) == 2,
                60,
                "2 pods bound by the chart's scheduler",
            )
            wait_until(
                lambda: any(e.get("reason") == "FailedScheduling" for e in kube.list("Event", namespace)),
                60,
                "the FailedScheduling event",
            )
        except TimeoutError:
            raise AssertionError(sched.output()) from None
        lease = kube.get("Lease", release, namespace)
        assert lease["spec"]["holderIdentity"] == sched.name  # --identity=$(POD_NAME), expanded
        assert "kdra_scheduler_attempt_duration_seconds" in http_get(base + "/metrics")[1]

        etoken = kube.service_account_token(namespace, f"{release}-exporter")
        exp = HostPod(
            control_plane, objs[("Deployment", f"{release}-exporter")], "exporter", etoken, tmp_path / "e"
        )
        procs.append(exp)
        eport = objs[("Deployment", f"{release}-exporter")]["spec"]["template"]["spec"]["containers"][0][
            "ports"
        ][0]
        ebase = f"http://127.0.0.1:{eport['containerPort']}"
        try:
            wait_until(lambda: http_get(ebase + "/readyz")[0] == 200, 60, "the exporter's /readyz")
        except TimeoutError:
            raise AssertionError(exp.output()) from None
        assert "kdra_device_allocations{" in http_get(ebase + "/metrics")[1]
    finally:
        for p in procs:
            p.stop()
        fleet.delete()
    out = sched.output()
    assert "forbidden" not in out.lower(), out[-3000:]
    assert token not in out and etoken not in exp.output()  # no secret in any log line
    # Least privilege: what kdra asked for is granted, and what is granted was asked for (or is RARE).
    granted = grants(objs[("ClusterRole", f"{release}-scheduler")]["rules"]) | grants(
        objs[("Role", f"{release}-scheduler-leader-election")]["rules"]
    )
    used = requests_made(out)
    assert {("watch", "pods", ""), ("create", "pods", "binding"), ("patch", "pods", "status")} <= used
    assert used - granted == set()
    assert granted - used - set(RARE) == set(), (
        "granted but never used: remove from deploy/rbac or explain in RARE"
    )
    assert set(RARE) <= granted


def sched_ports(objs: dict[tuple[str, str], dict[str, Any]], release: str) -> list[int]:
    c = objs[("Deployment", f"{release}-scheduler")]["spec"]["template"]["spec"]["containers"][0]
    return [p["containerPort"] for p in c["ports"]]


def test_exporter_says_what_is_forbidden(
    control_plane: ControlPlane, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    """deploy/rbac/reader.yaml without watch: the exporter logs the 403 (verb and resource) and /readyz says
    it; without list on claims, `kdra exporter --once` stops at once naming the verb instead of waiting."""
    from support.controlplane import write_kubeconfig

    name = f"no-watch-{uuid.uuid4().hex[:5]}"
    reader = next(d for d in yaml.safe_load_all((ROOT / "deploy/rbac/reader.yaml").read_text()) if d)
    for r in reader["rules"]:
        r["verbs"] = [v for v in r["verbs"] if v != "watch"]
    role = dict(reader, metadata={"name": name})
    kube.create(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}}
    )
    kube.create(role)
    kube.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        }
    )
    assert control_plane.certs is not None
    token = kube.service_account_token(namespace, name)
    kc = tmp_path / "kc"
    write_kubeconfig(kc, control_plane.server, control_plane.certs.ca_cert, token)
    port = free_port()
    log = tmp_path / "exporter.log"
    diagnose("kdra exporter", file_tail(log))
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [*KDRA, "exporter", "--kubeconfig", str(kc), "--listen", f"127.0.0.1:{port}"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(
            lambda: "cannot watch resource" in http_get(f"http://127.0.0.1:{port}/readyz?verbose")[1],
            30,
            "readyz",
        )
        assert http_get(f"http://127.0.0.1:{port}/readyz")[0] == 503
        wait_until(lambda: "cannot watch resource" in log.read_text(), 10, "the 403 in the log")
        # no list on claims either: --once fails fast with the API server's words
        role["rules"] = [
            dict(r, resources=[x for x in r["resources"] if x != "resourceclaims"]) for r in role["rules"]
        ]
        kube.update(dict(role, metadata=kube.get("ClusterRole", name)["metadata"]))
        t0 = time.monotonic()
        once = subprocess.run(
            [*KDRA, "exporter", "--kubeconfig", str(kc), "--once"], capture_output=True, text=True, timeout=90
        )
        assert once.returncode == 1, once.stderr
        assert time.monotonic() - t0 < 30  # not the 120 s list timeout
        assert 'cannot list resource "resourceclaims" in API group "resource.k8s.io"' in once.stderr, (
            once.stderr
        )
        assert token not in once.stderr + once.stdout + log.read_text()
    finally:
        proc.terminate()
        proc.wait(15)
        kube.delete("ClusterRoleBinding", name, missing_ok=True)
        kube.delete("ClusterRole", name, missing_ok=True)
