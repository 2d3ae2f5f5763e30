"""Issue 18, item 6: PreBind re-checks a claim that changed between the decision and its write.

Another writer ("someone else", as a second scheduler would) allocates the pod's claim with other devices
the moment kdra has written its delete-protection finalizer and before its status write (kdra's client is
held to 2 requests a second to leave the gap). kdra's conditional status write conflicts; after re-reading
the claim it must see the change and give up the attempt instead of writing its own allocation again
(which only the API server's 422 "field is immutable" would stop); the pod's retry then binds where the
other allocation is. Both binding paths: in the loop (--bind-workers 0) and on the workers.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kdra.kube.client import KubeClient
from support.controlplane import ControlPlane
from support.invariants import audit_events, wait_consistent

from .kubeutil import DeviceFleet, bound_pods, claim_template, kdra_scheduler, template_pod, wait_until

# kdra scheduler under the default scheduler name: one such test at a time (hack/e2e.sh lanes).
pytestmark = [pytest.mark.e2e, pytest.mark.e2e_lane(name="kdra-scheduler")]

FINALIZER = "resource.kubernetes.io/delete-protection"


@pytest.fixture
def fleet(kube: KubeClient) -> Iterator[DeviceFleet]:
    f = DeviceFleet(kube, f"pb-{uuid.uuid4().hex[:5]}", nodes=2, devices=4).create()
    yield f
    f.delete()


@pytest.mark.parametrize("bind_workers", ["0", "16"])
def test_prebind_gives_up_on_a_claim_someone_else_allocated_meanwhile(
    control_plane: ControlPlane,
    kube: KubeClient,
    namespace: str,
    fleet: DeviceFleet,
    tmp_path: Path,
    bind_workers: str,
) -> None:
    kube.create(claim_template("one", namespace, fleet.device_class))
    other_node = fleet.node_names[1]
    theirs = {
        "devices": {
            "results": [{"request": "dev", "driver": fleet.driver, "pool": other_node, "device": "dev-3"}]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [other_node]}]}
            ]
        },
    }
    stop = threading.Event()
    meddled: list[str] = []

    def someone_else() -> None:
        _, rv = kube.list_with_version("ResourceClaim", namespace)
        for _etype, claim in kube.watch_stream(
            "ResourceClaim", rv, namespace=namespace, timeout_seconds=60, stop=stop
        ):
            st = claim.get("status") or {}
            if (
                meddled
                or FINALIZER not in (claim["metadata"].get("finalizers") or [])
                or st.get("allocation")
            ):
                continue
            owner = claim["metadata"]["ownerReferences"][0]
            claim["status"] = {
                "allocation": theirs,
                "reservedFor": [{"resource": "pods", "name": owner["name"], "uid": owner["uid"]}],
            }
            kube.update(claim, "status")
            meddled.append(claim["metadata"]["name"])
            return

    watcher = threading.Thread(target=someone_else, daemon=True)
    watcher.start()
    extra = ("--kube-api-qps", "2", "--kube-api-burst", "1", "--bind-workers", bind_workers, "-v")
    with kdra_scheduler(control_plane, tmp_path / "kdra.log", *extra) as proc:
        kube.create(template_pod("p", namespace, "one"))
        try:
            wait_until(lambda: bool(meddled), 60, "the claim to be taken in the gap")
            wait_until(
                lambda: bound_pods(kube, namespace).get("p") == other_node, 60, "p bound where theirs is"
            )
        except TimeoutError:
            raise AssertionError(proc.log()) from None
        finally:
            stop.set()
    (claim_name,) = meddled
    kdra_writes = [
        (e["verb"], (e["objectRef"].get("subresource") or ""), e["responseStatus"]["code"])
        for e in audit_events(control_plane.audit_log)
        if e["userAgent"].startswith("kdra/")
        and e["objectRef"].get("resource") == "resourceclaims"
        and e["objectRef"].get("name") == claim_name
    ]
    # The finalizer, then one status write that conflicted: no write over their allocation, no 422.
    assert kdra_writes == [("update", "", 200), ("update", "status", 409)], kdra_writes
    claim = kube.get("ResourceClaim", claim_name, namespace)
    assert claim["status"]["allocation"]["devices"]["results"][0]["device"] == "dev-3"
    events = [e for e in kube.list("Event", namespace) if e.get("reason") == "FailedScheduling"]
    assert any("allocated meanwhile by someone else" in e.get("message", "") for e in events), events
    assert wait_consistent(kube, namespace, timeout=30) == []
