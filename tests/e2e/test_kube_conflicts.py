"""Issue 18, item 4: kdra beside kube-scheduler over the same devices.

Without a partition the two race for the lowest free devices of the same nodes and write some of them
into two claims. kdra must report each such device (a ConflictingAllocation Event on the pods of both
claims, the metric kdra_conflicting_allocations), repair its own side while its pod does not run (the
nodes here have no kubelet, so no pod runs) and leave kube-scheduler's claims alone, so that in the end
the invariant checker finds no device in two claims. With a partition (kdra owns tainted nodes) the two
never meet. The start-up warning says which case a deployment is in.
"""

from __future__ import annotations

import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kdra.kube.client import KubeClient
from kdra.kube.conflicts import QUARANTINE_LABEL, quarantine_rule_name
from kdra.kube.partition import owner_taint
from kdra.observe.exposition import parse_text
from support.controlplane import ControlPlane, free_port
from support.invariants import Violation, audit_events, double_allocations, wait_consistent
from support.wait import wait_for

from .kubeutil import (
    DeviceFleet,
    allocated_devices,
    bound_pods,
    claim_template,
    cleanup_namespace_pods,
    create_pods,
    kdra_scheduler,
    template_pod,
    wait_until,
)

# kdra scheduler under the default scheduler name: one such test at a time (hack/e2e.sh lanes).
pytestmark = [pytest.mark.e2e, pytest.mark.e2e_lane(name="kdra-scheduler")]

PER_SCHEDULER = 24


@pytest.fixture
def fleet(kube: KubeClient) -> Iterator[DeviceFleet]:
    # Kubelet-less nodes: kdra repairs its side of a conflict only while its pod is not running, and KWOK
    # would run it at once.
    f = DeviceFleet(kube, f"cf-{uuid.uuid4().hex[:5]}", nodes=4, devices=32, kubelet=False).create()
    yield f
    f.delete()


def metrics(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {name: value for name, labels, value in parse_text(text) if name.startswith("kdra_conflicting")}


def claim_results(kube: KubeClient, namespace: str) -> list[tuple[str, dict[str, str]]]:
    out = []
    for c in kube.list("ResourceClaim", namespace):
        for r in ((c.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []:
            out.append((c["metadata"]["name"], r))
    return out


def device_story(violations: list[Violation], log: str, audit_log: Path) -> str:
    """For each device held twice: kdra's log lines naming it and, from the audit log, every write to the
    claims holding it and to its quarantine rule, in order (who wrote what when: which side released the
    device, and whether the rule was there before the second claim took it)."""
    out = []
    events = audit_events(audit_log)
    for v in violations:
        if v.rule != "double-allocation":
            continue
        device = v.object.removeprefix("device ")
        driver, rest = device.split("/", 1)
        pool, dev = rest.rsplit("/", 1)
        claims = {c.split("/", 1)[1] for c in v.message.removeprefix("held by ").split(", ")}
        lines = [ln for ln in log.splitlines() if device in ln]
        claims |= {w.split("/", 1)[1].split(" ")[0] for ln in lines for w in ln.split() if "-dev-" in w}
        names = claims | {quarantine_rule_name((driver, pool, dev))}
        out.append(f"--- {device}: kdra's log")
        out += lines
        out.append(f"--- writes to {', '.join(sorted(names))}")
        for e in events:
            ref = e.get("objectRef") or {}
            if ref.get("name") in names:
                sub = f"/{ref['subresource']}" if ref.get("subresource") else ""
                code = (e.get("responseStatus") or {}).get("code")
                who = e.get("userAgent", "").split(" ")[0]
                what = f"{ref.get('resource')}{sub} {ref.get('name')}"
                out.append(f"{e.get('stageTimestamp')} {who} {e.get('verb')} {what} -> {code}")
    return "\n".join(out)


def claim_owners(kube: KubeClient, namespace: str) -> dict[str, str]:
    """claim name -> schedulerName of the pod it was made for."""
    pods = {p["metadata"]["uid"]: p for p in kube.list("Pod", namespace)}
    out = {}
    for c in kube.list("ResourceClaim", namespace):
        owner = next(iter(c["metadata"].get("ownerReferences") or []), {})
        pod = pods.get(owner.get("uid"))
        if pod is not None:
            out[c["metadata"]["name"]] = pod["spec"].get("schedulerName") or "default-scheduler"
    return out


def test_conflicts_beside_kube_scheduler_are_reported_and_kdras_side_repaired(
    control_plane: ControlPlane, kube: KubeClient, namespace: str, fleet: DeviceFleet, tmp_path: Path
) -> None:
    kube.create(claim_template("one", namespace, fleet.device_class))
    port = free_port()
    with kdra_scheduler(
        control_plane, tmp_path / "kdra.log", "--metrics-listen", f"127.0.0.1:{port}"
    ) as proc:
        wait_until(lambda: "serving schedulerName" in proc.log(), 60, "kdra to start")
        assert "warning: no partition with kube-scheduler" in proc.log(), proc.log()
        pods = []
        for i in range(PER_SCHEDULER):  # interleaved, so that both schedulers work at the same time
            pods.append(template_pod(f"k{i:02d}", namespace, "one", scheduler="kdra"))
            pods.append(template_pod(f"d{i:02d}", namespace, "one", scheduler="default-scheduler"))
        create_pods(kube, pods, workers=8)
        try:
            wait_until(lambda: len(bound_pods(kube, namespace)) == 2 * PER_SCHEDULER, 120, "every pod bound")
            violations = wait_consistent(
                kube, namespace, timeout=60, schedulers=("kdra", "default-scheduler")
            )
        except TimeoutError:
            raise AssertionError(proc.log()) from None
        # (the story first: a long message keeps its end)
        assert violations == [], (
            device_story(violations, proc.log(), control_plane.audit_log)
            + "\n"
            + "\n".join(map(str, violations))
        )
        m = metrics(port)
        log = proc.log()
    # The race did happen, and kdra saw every conflict end.
    assert m["kdra_conflicting_allocations_detected_total"] > 0, log
    assert m["kdra_conflicting_allocations_repaired_total"] > 0, log
    assert m["kdra_conflicting_allocations"] == 0, log
    events = [e for e in kube.list("Event", namespace) if e.get("reason") == "ConflictingAllocation"]
    on = {e["involvedObject"]["name"][0] for e in events}
    assert on == {"k", "d"}, events  # on the pods of both sides
    repaired = [e for e in kube.list("Event", namespace) if e.get("reason") == "ConflictRepaired"]
    assert repaired and all(e["involvedObject"]["name"].startswith("k") for e in repaired)
    # kdra never wrote a claim of kube-scheduler's pods.
    owners = claim_owners(kube, namespace)
    theirs = {name for name, sched in owners.items() if sched == "default-scheduler"}
    touched = {
        e["objectRef"].get("name")
        for e in audit_events(control_plane.audit_log)
        if e["userAgent"].startswith("kdra/")
        and e["objectRef"].get("resource") == "resourceclaims"
        and e["objectRef"].get("namespace") == namespace
    }
    assert not touched & theirs, sorted(touched & theirs)
    assert double_allocations(kube.list("ResourceClaim"), kube.list("ResourceSlice")) == []
    # Each device kdra released while kube-scheduler's claim still held it stays quarantined (kube-scheduler
    # would take it for free and hand it out again) as long as that claim holds it.
    rules = kube.list("DeviceTaintRule", labelSelector=f"{QUARANTINE_LABEL}=kdra")
    try:
        assert rules, log
        held = {(r["driver"], r["pool"], r["device"]): c for c, r in claim_results(kube, namespace)}
        for rule in rules:
            sel = rule["spec"]["deviceSelector"]
            assert owners[held[(sel["driver"], sel["pool"], sel["device"])]] == "default-scheduler"
    finally:
        for rule in rules:
            kube.delete("DeviceTaintRule", rule["metadata"]["name"], missing_ok=True)


def test_a_node_partition_keeps_kdra_and_kube_scheduler_apart(
    control_plane: ControlPlane, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:5]
    owned = DeviceFleet(kube, f"own-{tag}", nodes=2, devices=16).create()
    # One driver and one class over both fleets: the partition (node taints), not the class, keeps them apart.
    shared = DeviceFleet(kube, f"shr-{tag}", nodes=2, devices=16, driver=owned.driver).create()
    try:
        for name in owned.node_names:  # kube-scheduler is kept off kdra's nodes by its taint
            kube.patch("Node", name, {"spec": {"taints": [owner_taint("kdra")]}})
        kube.create(claim_template("one", namespace, owned.device_class))
        port = free_port()
        args = ("--owned-nodes", f"kdra.test/fleet={owned.prefix}", "--metrics-listen", f"127.0.0.1:{port}")
        with kdra_scheduler(control_plane, tmp_path / "kdra.log", *args) as proc:
            wait_until(lambda: "serving schedulerName" in proc.log(), 60, "kdra to start")
            assert "warning" not in proc.log(), proc.log()  # the partition holds for what exists
            pods = []
            for i in range(PER_SCHEDULER):
                pods.append(template_pod(f"k{i:02d}", namespace, "one", scheduler="kdra"))
                pods.append(template_pod(f"d{i:02d}", namespace, "one", scheduler="default-scheduler"))
            create_pods(kube, pods, workers=8)
            try:
                wait_until(
                    lambda: len(bound_pods(kube, namespace)) == 2 * PER_SCHEDULER, 120, "every pod bound"
                )
            except TimeoutError:
                raise AssertionError(proc.log()) from None
            violations = wait_consistent(
                kube, namespace, timeout=30, schedulers=("kdra", "default-scheduler")
            )
            assert violations == [], "\n".join(map(str, violations))
            m = metrics(port)
        bound = bound_pods(kube, namespace)
        assert {n for p, n in bound.items() if p.startswith("k")} <= set(owned.node_names)
        assert {n for p, n in bound.items() if p.startswith("d")} <= set(shared.node_names)
        assert m["kdra_conflicting_allocations_detected_total"] == 0
    finally:
        owned.delete()
        shared.delete()


def test_start_up_warns_when_owned_nodes_are_open_to_kube_scheduler(
    control_plane: ControlPlane, kube: KubeClient, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:5]
    owned = DeviceFleet(kube, f"opn-{tag}", nodes=2, devices=2).create()
    try:
        kube.patch("Node", owned.node_names[0], {"spec": {"taints": [owner_taint("kdra")]}})
        args = ("--owned-nodes", f"kdra.test/fleet={owned.prefix}", "--owned-device-classes", "no-such-class")
        with kdra_scheduler(control_plane, tmp_path / "kdra.log", *args) as proc:
            wait_until(lambda: "serving schedulerName" in proc.log(), 60, "kdra to start")
            log = proc.log()
        assert (
            f"kube-scheduler can place pods on 1 of the 2 nodes kdra owns ({owned.node_names[1]})" in log
        ), log
        assert "DeviceClass no-such-class does not exist" in log, log
    finally:
        owned.delete()


def _placed(kube: KubeClient, namespace: str, name: str, fleet: DeviceFleet, node: str, device: str) -> None:
    """A default-scheduler pod bound to `node` (created with spec.nodeName) whose claim holds `device`,
    written as another scheduler would."""
    kube.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": f"{name}-dev", "namespace": namespace},
            "spec": {
                "devices": {"requests": [{"name": "dev", "exactly": {"deviceClassName": fleet.device_class}}]}
            },
        }
    )
    pod = kube.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "nodeName": node,
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {
                        "name": "c",
                        "image": "registry.k8s.io/pause:3.10",
                        "resources": {"claims": [{"name": "dev"}]},
                    }
                ],
                "resourceClaims": [{"name": "dev", "resourceClaimName": f"{name}-dev"}],
            },
        }
    )
    claim = kube.get("ResourceClaim", f"{name}-dev", namespace)
    claim["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "dev", "driver": fleet.driver, "pool": node, "device": device}]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        },
        "reservedFor": [{"resource": "pods", "name": name, "uid": pod["metadata"]["uid"]}],
    }
    kube.update(claim, subresource="status")


def _gone(kube: KubeClient, namespace: str, name: str) -> None:
    """Another scheduler's pod ends: deleted and its claim released."""
    kube.delete("Pod", name, namespace, missing_ok=True)
    kube.delete("ResourceClaim", f"{name}-dev", namespace, missing_ok=True)


def test_a_bound_pod_whose_node_has_no_device_left_is_evicted_and_its_owner_recreates_it(
    control_plane: ControlPlane, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    """kdra's pod (of a Deployment) is bound on n0; another scheduler then writes its own pod's claim with
    the same device and takes n0's other one. kdra deallocates its claim and finds no device left on n0: it
    evicts the pod (a bound pod without devices never starts), its ReplicaSet recreates it, and the new pod
    waits, explained, until n1's devices free up, then binds there. The shared device stays quarantined while
    the other claim holds it and is released when that claim goes."""
    fleet = DeviceFleet(kube, f"ev-{uuid.uuid4().hex[:5]}", nodes=2, devices=2, kubelet=False).create()
    n0, n1 = fleet.node_names
    try:
        kube.create(claim_template("one", namespace, fleet.device_class))
        for i in range(2):  # n1 is full for now
            _placed(kube, namespace, f"blocker{i}", fleet, n1, f"dev-{i}")
        pod_template = template_pod("x", namespace, "one")
        kube.create(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "mine", "namespace": namespace},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"app": "mine"}},
                    "template": {"metadata": {"labels": {"app": "mine"}}, "spec": pod_template["spec"]},
                },
            }
        )
        with kdra_scheduler(control_plane, tmp_path / "kdra.log") as proc:

            def mine() -> dict[str, str]:
                return {p: n for p, n in bound_pods(kube, namespace).items() if p.startswith("mine-")}

            first = wait_for(lambda: mine(), 60, "kdra to bind the Deployment's pod", log=proc.log)
            (victim,) = first
            assert first[victim] == n0
            held = next(
                r
                for k, d, pool, r in allocated_devices(kube, namespace)
                if k.startswith(f"{namespace}/mine-")
            )
            other = "dev-1" if held == "dev-0" else "dev-0"
            _placed(kube, namespace, "filler", fleet, n0, other)
            _placed(kube, namespace, "theirs", fleet, n0, held)
            wait_for(
                lambda: victim not in {p["metadata"]["name"] for p in kube.list("Pod", namespace)},
                60,
                "kdra to evict its pod left without devices",
                log=proc.log,
            )
            said = [
                e["message"] for e in kube.list("Event", namespace) if e["involvedObject"]["name"] == victim
            ]
            assert any("found no free device on" in m and "kdra evicts it" in m for m in said), said
            replacement = wait_for(
                lambda: [
                    p["metadata"]["name"]
                    for p in kube.list("Pod", namespace)
                    if p["metadata"]["name"].startswith("mine-") and p["metadata"]["name"] != victim
                ],
                60,
                "the Deployment's ReplicaSet to recreate the pod",
            )[0]
            wait_for(
                lambda: any(
                    c["type"] == "PodScheduled" and c["status"] == "False"
                    for c in (kube.get("Pod", replacement, namespace).get("status") or {}).get("conditions")
                    or []
                ),
                60,
                "the new pod explained while no device is free",
                log=proc.log,
            )
            _gone(kube, namespace, "blocker0")
            wait_for(lambda: mine() == {replacement: n1}, 60, "the new pod bound on n1", log=proc.log)
            violations = wait_consistent(
                kube, namespace, timeout=30, schedulers=("kdra", "default-scheduler")
            )
            assert violations == [], "\n".join(map(str, violations))
            rules = kube.list("DeviceTaintRule", labelSelector=f"{QUARANTINE_LABEL}=kdra")
            assert [r["spec"]["deviceSelector"] for r in rules] == [
                {"driver": fleet.driver, "pool": n0, "device": held}
            ], rules
            _gone(kube, namespace, "theirs")
            wait_for(
                lambda: not kube.list("DeviceTaintRule", labelSelector=f"{QUARANTINE_LABEL}=kdra"),
                30,
                "the quarantine to end with the other claim",
                log=proc.log,
            )
    finally:
        kube.delete("Deployment", "mine", namespace, missing_ok=True)
        for rule in kube.list("DeviceTaintRule", labelSelector=f"{QUARANTINE_LABEL}=kdra"):
            kube.delete("DeviceTaintRule", rule["metadata"]["name"], missing_ok=True)
        cleanup_namespace_pods(kube, namespace)
        fleet.delete()
