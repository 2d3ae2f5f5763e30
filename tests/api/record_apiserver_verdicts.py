"""Record what a real kube-apiserver 1.36 says about every object of kdra_api_cases.py.

Usage (from the repository root; builds or reuses the control plane with hack/k8s/build.sh):

    .venv/bin/python tests/api/record_apiserver_verdicts.py
    KDRA_K8S_VERSION=1.38 .venv/bin/python tests/api/record_apiserver_verdicts.py --workload

The second records the Workload API cases (workload_cases(): PodGroup-level ResourceClaims) against the
release's kube-apiserver with GenericWorkload and DRAWorkloadResourceClaims on, into
data/workload_verdicts.yaml.

Each object is created with a server-side dry run (nothing is stored). The answers are written to
tests/api/data/apiserver_verdicts.yaml: `accepted: true`, or `errors:` (one `field: message` line per
cause of an Invalid status), or `decodeError:` (the message, when the server failed to decode the
object, which happens for wrong JSON types and unparsable quantities). test_api_recorded_verdicts.py
compares kdra's validation with the file.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))  # the test support, `support`

from kdra_api_cases import STATUS_CLAIM, WORKLOAD_GATES, cases, status_cases, workload_cases  # noqa: E402

from kdra.cluster.store import StoreError  # noqa: E402
from kdra.kube.client import UnavailableError  # noqa: E402
from kdra.kube.resources import resource_path  # noqa: E402
from support.controlplane import ControlPlane, ControlPlaneConfig, ensure_binaries, k8s_release  # noqa: E402

OUT = HERE / "data" / "apiserver_verdicts.yaml"
WORKLOAD_OUT = HERE / "data" / "workload_verdicts.yaml"


def _post(client: Any, obj: dict[str, Any]) -> dict[str, Any]:
    ns = (
        obj["metadata"].get("namespace")
        if obj["kind"] in ("ResourceClaim", "ResourceClaimTemplate", "Pod", "PodGroup", "Workload")
        else None
    )
    path = resource_path(obj["kind"], ns, api_version=obj["apiVersion"])
    for attempt in range(5):
        try:
            client.request("POST", path, obj, params={"dryRun": "All"})
            break
        except UnavailableError as e:  # a dropped connection while the server settles: try again
            if attempt == 2:
                raise
            print(f"retrying {obj['kind']} {obj['metadata']['name']}: {e}", file=sys.stderr)
            time.sleep(2)
    return {"accepted": True}


def verdict(client: Any, obj: dict[str, Any]) -> dict[str, Any]:
    try:
        return _post(client, obj)
    except UnavailableError as e:  # the server dropped the connection every time (a panic in a handler)
        return {"accepted": False, "serverError": str(e)}
    except StoreError as e:
        status = e.status
        causes = (status.get("details") or {}).get("causes") or []
        if status.get("reason") == "Invalid" and causes:
            return {
                "accepted": False,
                "errors": [f"{c.get('field', '')}: {c.get('message', '')}" for c in causes],
            }
        return {"accepted": False, "decodeError": str(status.get("message", ""))}


def status_verdicts(client: Any) -> list[dict[str, Any]]:
    """Status cases: the claim is created for real, then each status is put with a dry run."""
    claim = client.create(STATUS_CLAIM)
    path = resource_path("ResourceClaim", "default", claim["metadata"]["name"], "status")
    out = []
    for cid, status in status_cases():
        body = dict(claim, status=status)
        try:
            client.request("PUT", path, body, params={"dryRun": "All"})
            rec: dict[str, Any] = {"accepted": True}
        except StoreError as e:
            causes = (e.status.get("details") or {}).get("causes") or []
            rec = {
                "accepted": False,
                "errors": [f"{c.get('field', '')}: {c.get('message', '')}" for c in causes],
            }
            if not causes:
                rec = {"accepted": False, "decodeError": str(e.status.get("message", ""))}
        out.append({"id": cid, **rec})
        print(cid, rec.get("accepted"), file=sys.stderr)
    return out


def record_workload() -> None:
    bin_dir = ensure_binaries(sys.stderr)
    version = bin_dir.name
    gates = dict(k8s_release(version).feature_gates)
    gates.update((k, v == "true") for k, v in (g.split("=") for g in WORKLOAD_GATES.split(",")))
    with tempfile.TemporaryDirectory(prefix="kdra-verdicts-") as work:
        cp = ControlPlane(bin_dir, Path(work), ControlPlaneConfig(feature_gates=gates)).start()
        try:
            client = cp.client()
            records = [{"id": cid, **verdict(client, obj)} for cid, obj in workload_cases()]
            arg = cp.config.feature_gates_arg()
        finally:
            cp.stop()
    header = (
        f"# Recorded by tests/api/record_apiserver_verdicts.py --workload against kube-apiserver {version}\n"
        f"# (feature gates: {arg}; server-side dry run). Do not edit by hand.\n"
    )
    WORKLOAD_OUT.write_text(
        header + yaml.safe_dump(records, sort_keys=False, allow_unicode=True, width=1 << 20)
    )
    print(f"wrote {len(records)} verdicts to {WORKLOAD_OUT}")


def main() -> None:
    if "--workload" in sys.argv[1:]:
        record_workload()
        return
    bin_dir = ensure_binaries(sys.stderr)
    version = bin_dir.name
    with tempfile.TemporaryDirectory(prefix="kdra-verdicts-") as work:
        cp = ControlPlane(bin_dir, Path(work)).start()
        try:
            client = cp.client()
            gates = cp.config.feature_gates_arg()
            records = []
            for cid, obj in cases():
                records.append({"id": cid, **verdict(client, obj)})
                print(cid, records[-1].get("accepted"), file=sys.stderr)
            records.extend(status_verdicts(client))
        finally:
            cp.stop()
    OUT.parent.mkdir(exist_ok=True)
    header = (
        f"# Recorded by tests/api/record_apiserver_verdicts.py against kube-apiserver {version}\n"
        f"# (feature gates: {gates}; server-side dry run). Do not edit by hand.\n"
    )
    OUT.write_text(header + yaml.safe_dump(records, sort_keys=False, allow_unicode=True, width=1 << 20))
    print(f"wrote {len(records)} verdicts to {OUT}")


if __name__ == "__main__":
    main()
