"""One user's expensive CEL must not stall everyone (issue 18 item 2), on the real control plane: a
DeviceClass whose selector is a 300 x 300 nested comprehension over the device (the API server accepts it:
estimated 814,211 of 1,000,000) and pods that use it, then ordinary pods. `kdra scheduler` spends a bounded
amount of CEL work per attempt on the expensive pods, puts them back behind the others with a condition
saying why, and goes on where it stopped (so does the scheduling session's count of each class's devices):
the ordinary pods bind meanwhile, every pod is explained while it waits, the expensive pods bind in the end,
and the cluster is consistent."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kdra.kube.client import KubeClient
from support.controlplane import ControlPlane, create_node
from support.invariants import wait_consistent

from .kubeutil import bound_pods, claim_template, create_pods, kdra_scheduler, template_pod, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.e2e_lane(name="kdra-scheduler")]

NODES, DEVICES, SELECTORS = 12, 4, 4
LIST = "[" + ",".join(str(i) for i in range(300)) + "]"


@pytest.fixture
def gpus(kube: KubeClient) -> Iterator[tuple[str, str, str]]:
    """Nodes with DEVICES devices each (every one distinct, as real GPUs are), an ordinary class and an
    expensive one over the same driver."""
    prefix = f"hc-{uuid.uuid4().hex[:5]}"
    driver = f"{prefix}.kdra.test"
    ordinary, expensive = f"{prefix}-gpu", f"{prefix}-expensive"
    nodes = [f"{prefix}-n{i}" for i in range(NODES)]
    # SELECTORS such comprehensions (each within the API server's per-expression limit): several budgets'
    # worth of work per device, so the expensive pods cannot be done before the ordinary ones even on a
    # fast, quiet machine. Each reads the device's uuid, so no device shares another's results.
    hostile = [
        f'{LIST}.all(x, {LIST}.all(y, x + y >= -{k} && device.driver == "{driver}"))'
        f' && device.attributes["{driver}"].uuid != ""'
        for k in range(SELECTORS)
    ]
    for cls, exprs in ((ordinary, [f'device.driver == "{driver}"']), (expensive, hostile)):
        kube.create(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": cls},
                "spec": {"selectors": [{"cel": {"expression": e}} for e in exprs]},
            }
        )
    for n in nodes:
        create_node(kube, n)
        kube.create(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{n}-gpus"},
                "spec": {
                    "driver": driver,
                    "nodeName": n,
                    "pool": {"name": n, "generation": 1, "resourceSliceCount": 1},
                    "devices": [
                        {"name": f"gpu-{i}", "attributes": {"uuid": {"string": f"GPU-{n}-{i}"}}}
                        for i in range(DEVICES)
                    ],
                },
            }
        )
    yield driver, ordinary, expensive
    for n in nodes:
        kube.delete("ResourceSlice", f"{n}-gpus", missing_ok=True)
        kube.delete("Node", n, missing_ok=True)
    for cls in (ordinary, expensive):
        kube.delete("DeviceClass", cls, missing_ok=True)


def test_ordinary_pods_flow_while_expensive_selectors_are_worked_on(
    control_plane: ControlPlane,
    kube: KubeClient,
    namespace: str,
    gpus: tuple[str, str, str],
    tmp_path: Path,
) -> None:
    _, ordinary, expensive = gpus
    kube.create(claim_template("one", namespace, ordinary))
    kube.create(claim_template("slow", namespace, expensive))
    slow = [template_pod(f"slow-{i}", namespace, "slow") for i in range(2)]
    fast = [template_pod(f"p{i:02d}", namespace, "one") for i in range(16)]
    explained: set[str] = set()
    other_reasons: dict[str, str] = {}

    def progress() -> dict[str, str]:
        pods = kube.list("Pod", namespace)
        for p in pods:
            for c in (p.get("status") or {}).get("conditions") or []:
                if c.get("type") != "PodScheduled" or c.get("status") != "False":
                    continue
                if "expensive to evaluate" in (c.get("message") or ""):
                    explained.add(p["metadata"]["name"])
                else:
                    other_reasons[p["metadata"]["name"]] = c.get("message") or ""
        return bound_pods(kube, namespace)

    with kdra_scheduler(control_plane, tmp_path / "kdra.log") as proc:
        create_pods(kube, slow)
        # the ordinary pods arrive while the expensive ones, first in line, are being tried
        slow_names = {p["metadata"]["name"] for p in slow}
        wait_until(lambda: (explained | set(progress())) & slow_names, 60, "an expensive pod tried")
        create_pods(kube, fast)
        try:
            wait_until(
                lambda: {p["metadata"]["name"] for p in fast} <= set(progress()), 120, "ordinary pods bound"
            )
            ordinary_done = set(progress())
            wait_until(lambda: len(progress()) == len(slow) + len(fast), 240, "every pod bound")
        except TimeoutError:
            raise AssertionError(proc.log()) from None
        assert proc.running(), proc.log()
        violations = wait_consistent(kube, namespace, timeout=30)
    # The ordinary pods did not wait for the expensive ones; an expensive pod that waited said why (the
    # session's cluster totals may have evaluated its class's selectors already, in bounded chunks too,
    # so that it fit at its first attempt).
    assert not explained & {p["metadata"]["name"] for p in fast}, explained
    assert not other_reasons, other_reasons
    assert {"slow-0", "slow-1"} - ordinary_done, "the expensive pods were done before the ordinary ones"
    assert not violations, violations
