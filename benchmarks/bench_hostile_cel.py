"""One user's expensive CEL against everyone else's pods (issue 18 item 2), on a real control plane.

N nodes x D devices (every device distinct: a uuid attribute, as real GPUs have), an ordinary DeviceClass
and a hostile one over the same driver whose selector is a 300 x 300 nested comprehension over the device
(the API server accepts it: estimated 814,211 of 1,000,000 cost units; kdra spends ~60-90 ms per device on
it). Two runs, each with a fresh `kdra scheduler`: P ordinary pods alone, then H pods using the hostile class
created first and the same P ordinary pods behind them. The clock runs from the first ordinary create to the
last ordinary pod bound (polled every 0.2 s). Prints both times, their ratio (target < 1.5), the CPU time
each kdra used from its start until the last ordinary pod bound and to the end of its run (less sensitive to
the machine's load), how many pods were pending without a PodScheduled condition at the end (the issue saw
157 sit unexplained), when the hostile pods bound, and the invariant checker's verdict.

Usage: python benchmarks/bench_hostile_cel.py [--nodes 100] [--devices 8] [--pods 150] [--hostile 4]
       [--cel-attempt-budget N] [--reads-uuid] [--quick]   (--quick: 20 nodes x 5 devices, 40 pods, 2 hostile)
       --reads-uuid: the hostile selector also reads each device's uuid, so that no two devices can share
       a result (kdra evaluates a selector once per distinct value of what it reads).
       --cel-attempt-budget 0 runs kdra without a budget (what the issue measured).
Takes a few minutes at full size on 2 cores; the machine is shared, so say the load with the figures.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))  # the test support, `support`
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from kubeutil import KdraProcess, claim_template, create_pods, template_pod  # noqa: E402

from kdra.kube.client import KubeClient  # noqa: E402
from support.controlplane import (  # noqa: E402
    ControlPlane,
    create_node,
    ensure_default_service_account,
    running_control_plane,
)
from support.invariants import wait_consistent  # noqa: E402

LIST = "[" + ",".join(str(i) for i in range(300)) + "]"


def make_fleet(kube: KubeClient, prefix: str, nodes: int, devices: int, reads_uuid: bool) -> tuple[str, str]:
    driver = f"{prefix}.kdra.test"
    ordinary, hostile = f"{prefix}-gpu", f"{prefix}-hostile"
    slow = f'{LIST}.all(x, {LIST}.all(y, x + y >= 0 && device.driver == "{driver}"))'
    if reads_uuid:  # every device's result its own (none shared); once, to stay within the cost limit
        slow += f' && device.attributes["{driver}"].uuid != ""'
    for cls, expr in (
        (ordinary, f'device.driver == "{driver}"'),
        (hostile, slow),
    ):
        kube.create(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": cls},
                "spec": {"selectors": [{"cel": {"expression": expr}}]},
            }
        )
    for i in range(nodes):
        n = f"{prefix}-n{i:03d}"
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
                        {"name": f"gpu-{d}", "attributes": {"uuid": {"string": f"GPU-{n}-{d}"}}}
                        for d in range(devices)
                    ],
                },
            }
        )
    return ordinary, hostile


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) the process has used so far: less sensitive to a shared machine's load
    than the wall clock."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_once(
    cp: ControlPlane,
    kube: KubeClient,
    work: Path,
    name: str,
    classes: tuple[str, str],
    args: argparse.Namespace,
) -> dict[str, object]:
    ns = f"hc-{name}-{uuid.uuid4().hex[:4]}"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    ensure_default_service_account(kube, ns)
    kube.create(claim_template("one", ns, classes[0]))
    kube.create(claim_template("slow", ns, classes[1]))
    hostile = args.hostile if name == "hostile" else 0
    proc = KdraProcess(
        cp,
        [
            *("scheduler", "--kube-api-qps", "500", "--kube-api-burst", "1000"),
            *("--cel-attempt-budget", str(args.cel_attempt_budget)),
        ],
        work / f"kdra-{name}.log",
    )
    try:
        time.sleep(2.0)  # let it list and start watching
        create_pods(kube, [template_pod(f"slow-{i}", ns, "slow") for i in range(hostile)])
        if hostile:
            time.sleep(1.0)  # the hostile pods are first in line
        ordinary = [template_pod(f"p{i:03d}", ns, "one") for i in range(args.pods)]
        t0 = time.monotonic()
        create_pods(kube, ordinary)
        created = time.monotonic() - t0
        done_at: float | None = None
        cpu_at_done = 0.0
        hostile_done_at: float | None = None
        deadline = t0 + args.timeout
        while time.monotonic() < deadline:
            pods = kube.list("Pod", ns)
            bound = {p["metadata"]["name"] for p in pods if (p.get("spec") or {}).get("nodeName")}
            now = time.monotonic() - t0
            ordinary_bound = sum(1 for p in ordinary if p["metadata"]["name"] in bound)
            if done_at is None and ordinary_bound == args.pods:
                done_at = now
                cpu_at_done = cpu_seconds(proc.pid)
            if hostile_done_at is None and all(f"slow-{i}" in bound for i in range(hostile)):
                hostile_done_at = now
            if done_at is not None and hostile_done_at is not None:
                break
            time.sleep(0.2)
        unexplained = [
            p["metadata"]["name"]
            for p in kube.list("Pod", ns)
            if not (p.get("spec") or {}).get("nodeName")
            and not any(c["type"] == "PodScheduled" for c in (p.get("status") or {}).get("conditions") or [])
        ]
        violations = wait_consistent(kube, ns, timeout=30)
        cpu = cpu_seconds(proc.pid)
    finally:
        log = proc.log()
        proc.stop()
    if done_at is None:
        print(log, file=sys.stderr)
    return {
        "name": name,
        "seconds": done_at,
        "create_seconds": created,
        "hostile_seconds": hostile_done_at if hostile else None,
        "unexplained_now": unexplained,
        "violations": [str(v) for v in violations],
        "cpu": cpu,
        "cpu_at_done": cpu_at_done,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--pods", type=int, default=150)
    ap.add_argument("--hostile", type=int, default=4)
    ap.add_argument("--cel-attempt-budget", type=int, default=2_000_000)
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument(
        "--reads-uuid",
        action="store_true",
        help="the hostile selector reads each device's uuid, so no device shares another's result",
    )
    args = ap.parse_args()
    if args.quick:
        args.nodes, args.devices, args.pods, args.hostile = 20, 5, 40, 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.nodes * args.devices < 2 * args.pods + args.hostile:
        ap.error("the fleet must hold both runs' pods: nodes x devices >= 2 x pods + hostile")
    with (
        tempfile.TemporaryDirectory(prefix="kdra-bench-cel-") as work,
        running_control_plane(Path(work), log=sys.stderr) as cp,
    ):
        kube = cp.client()
        classes = make_fleet(kube, "hcb", args.nodes, args.devices, args.reads_uuid)
        print(
            f"fleet: {args.nodes} nodes x {args.devices} devices; {args.pods} ordinary pods; {args.hostile} "
            "pods with a 300 x 300 nested-comprehension selector; "
            f"kdra --cel-attempt-budget {args.cel_attempt_budget}",
            flush=True,
        )
        results = [run_once(cp, kube, Path(work), name, classes, args) for name in ("alone", "hostile")]
    for r in results:
        hs = r["hostile_seconds"]
        print(
            f"{r['name']}: {args.pods} ordinary pods bound in {r['seconds']}s "
            f"(creation {r['create_seconds']:.1f}s)"
            + (f"; hostile pods bound after {hs:.1f}s" if isinstance(hs, float) else "")
            + f"; kdra CPU {r['cpu']:.1f}s ({r['cpu_at_done']:.1f}s when the ordinary pods were bound)"
            + f"; pending without a condition at the end: {len(r['unexplained_now'])}"  # type: ignore[arg-type]
            + f"; invariant violations: {len(r['violations'])}",  # type: ignore[arg-type]
            flush=True,
        )
    alone, hostile = (r["seconds"] for r in results)
    ok = isinstance(alone, float) and isinstance(hostile, float)
    if ok:
        assert isinstance(alone, float) and isinstance(hostile, float)
        ratio = hostile / alone if alone else float("inf")
        print(f"ordinary pods with the hostile objects / alone = {ratio:.2f} (target < 1.5)")
    return 0 if ok and not any(r["violations"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
