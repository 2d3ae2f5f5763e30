"""`kdra driver sim --kubeconfig`: a fleet's Nodes and ResourceSlices on a real cluster, as the vendors'
DRA drivers' node plugins (and kubelets) would publish them.

Reconciliation per (driver, pool), like k8s.io/dynamic-resource-allocation/resourceslice's controller:
one pool per node and driver; when a pool's desired slices differ from the published ones (devices,
attributes, counters, ...), all of its slices are written with `pool.generation` one above the highest
published, and slices of the pool that are no longer wanted are deleted. Unchanged pools are not touched.
Slices of this fleet's drivers on nodes that left the fleet (labelled `kdra.dev/fleet`) are deleted.
Nodes are created Ready, without the not-ready taint, with status capacity/allocatable; slices carry an
owner reference to their Node, so deleting a Node garbage-collects its slices.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TextIO

from kdra.api.types import Obj
from kdra.api.versions import DEFAULT_VERSION
from kdra.cluster.store import AlreadyExistsError, ConflictError, NotFoundError
from kdra.kube.client import KubeClient
from kdra.kube.events import now_rfc3339

log = logging.getLogger("kdra.kube.driver")

FLEET_LABEL = "kdra.dev/fleet"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"


@dataclass
class SyncReport:
    nodes_created: int = 0
    nodes_updated: int = 0
    classes_created: int = 0
    slices_created: int = 0
    slices_updated: int = 0
    slices_deleted: int = 0
    pools_changed: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (
            f"nodes: {self.nodes_created} created, {self.nodes_updated} updated; device classes: "
            f"{self.classes_created} created; slices: {self.slices_created} created, {self.slices_updated} "
            f"updated, {self.slices_deleted} deleted ({len(self.pools_changed)} pools changed)"
        )


def _slice_content(s: Obj) -> Any:
    """What makes two publications of a slice the same (everything but the pool generation)."""
    spec = copy.deepcopy(s.get("spec") or {})
    pool = dict(spec.get("pool") or {})
    pool.pop("generation", None)
    spec["pool"] = pool
    return spec


class FleetSync:
    """Publishes one fleet's objects; `sync()` is idempotent and cheap when nothing changed."""

    def __init__(self, client: KubeClient, fleet_name: str, objects: Iterable[Obj]) -> None:
        self.client = client
        self.fleet_name = fleet_name
        self._gens: dict[tuple[str, str], int] = {}  # last generation published per (driver, pool)
        self.set_objects(objects)

    def set_objects(self, objects: Iterable[Obj]) -> None:
        objs = [copy.deepcopy(o) for o in objects]
        self.classes = [o for o in objs if o.get("kind") == "DeviceClass"]
        self.nodes = [o for o in objs if o.get("kind") == "Node"]
        self.slices = [o for o in objs if o.get("kind") == "ResourceSlice"]
        self.drivers = sorted({str(s["spec"]["driver"]) for s in self.slices})

    # -- nodes -----------------------------------------------------------------------------------------
    def _sync_node(self, want: Obj, have: Obj | None, report: SyncReport) -> Obj:
        name = want["metadata"]["name"]
        status = copy.deepcopy(want.get("status") or {})
        ts = now_rfc3339()
        for c in status.get("conditions") or []:
            c.setdefault("lastHeartbeatTime", ts)
            c.setdefault("lastTransitionTime", ts)
        labels = dict(want["metadata"].get("labels") or {})
        labels[FLEET_LABEL] = self.fleet_name
        taints = (want.get("spec") or {}).get("taints") or []
        if have is None:
            body = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": labels},
                "spec": {"taints": taints} if taints else {},
            }
            try:
                have = self.client.create(body)
                report.nodes_created += 1
            except AlreadyExistsError:
                have = self.client.get("Node", name)
        else:
            cur_labels = (have.get("metadata") or {}).get("labels") or {}
            if any(cur_labels.get(k) != v for k, v in labels.items()):
                have = self.client.patch("Node", name, {"metadata": {"labels": labels}})
                report.nodes_updated += 1
        cur = have.get("status") or {}
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True" for c in cur.get("conditions") or []
        )
        if (
            cur.get("capacity") != status.get("capacity")
            or cur.get("allocatable") != status.get("allocatable")
            or not ready
        ):
            have = self.client.patch("Node", name, {"status": status}, subresource="status")
        cur_taints = (have.get("spec") or {}).get("taints") or []
        kept = [t for t in cur_taints if t.get("key") != NOT_READY_TAINT]
        if len(kept) != len(cur_taints):
            have = self.client.patch("Node", name, {"spec": {"taints": kept or None}})
        return have

    # -- the whole fleet -------------------------------------------------------------------------------
    def sync(self) -> SyncReport:
        report = SyncReport()
        client = self.client
        have_classes = {c["metadata"]["name"] for c in client.list("DeviceClass")}
        for dc in self.classes:
            if dc["metadata"]["name"] not in have_classes:
                try:
                    client.create(dc)
                    report.classes_created += 1
                except AlreadyExistsError:
                    pass
        have_nodes = {n["metadata"]["name"]: n for n in client.list("Node")}
        node_uids: dict[str, str] = {}
        for wanted in self.nodes:
            name = wanted["metadata"]["name"]
            node = self._sync_node(wanted, have_nodes.get(name), report)
            node_uids[name] = node["metadata"]["uid"]

        fleet_nodes = set(node_uids)
        published: dict[tuple[str, str], list[Obj]] = {}
        for s in client.list("ResourceSlice"):
            spec = s.get("spec") or {}
            if spec.get("driver") not in self.drivers:
                continue
            mine = (s.get("metadata") or {}).get("labels", {}).get(FLEET_LABEL) == self.fleet_name
            if not mine and spec.get("nodeName") not in fleet_nodes:
                continue
            published.setdefault((spec["driver"], spec["pool"]["name"]), []).append(s)
        desired: dict[tuple[str, str], list[Obj]] = {}
        for s in self.slices:
            spec = s["spec"]
            desired.setdefault((spec["driver"], spec["pool"]["name"]), []).append(s)

        for key in sorted(set(published) | set(desired)):
            want = desired.get(key, [])
            have = {s["metadata"]["name"]: s for s in published.get(key, [])}
            same = len(want) == len(have) and all(
                w["metadata"]["name"] in have
                and _slice_content(w) == _slice_content(have[w["metadata"]["name"]])
                for w in want
            )
            published_gen = max(
                (int(s["spec"]["pool"].get("generation") or 0) for s in have.values()), default=0
            )
            self._gens[key] = max(self._gens.get(key, 0), published_gen)
            if same:
                continue
            report.pools_changed.append(f"{key[0]}/{key[1]}")
            # One above anything published or remembered: a pool whose slices were all deleted comes back
            # with a newer generation, as the resourceslice controller (which remembers it) does.
            gen = 1 + max(
                [int(s["spec"]["pool"].get("generation") or 0) for s in have.values()]
                + [self._gens.get(key, 0)]
            )
            self._gens[key] = gen
            for w in want:
                body = copy.deepcopy(w)
                body["spec"]["pool"]["generation"] = gen
                meta = body["metadata"]
                meta.setdefault("labels", {})[FLEET_LABEL] = self.fleet_name
                node = body["spec"].get("nodeName")
                if node in node_uids:
                    meta["ownerReferences"] = [
                        {
                            "apiVersion": "v1",
                            "kind": "Node",
                            "name": node,
                            "uid": node_uids[node],
                            "controller": True,
                        }
                    ]
                old = have.pop(meta["name"], None)
                if old is None:
                    try:
                        client.create(body)
                        report.slices_created += 1
                        continue
                    except AlreadyExistsError:
                        old = client.get("ResourceSlice", meta["name"])
                meta["resourceVersion"] = old["metadata"]["resourceVersion"]
                try:
                    client.update(body)
                except ConflictError:
                    meta["resourceVersion"] = client.get("ResourceSlice", meta["name"])["metadata"][
                        "resourceVersion"
                    ]
                    client.update(body)
                report.slices_updated += 1
            for name in sorted(have):
                try:
                    client.delete("ResourceSlice", name)
                    report.slices_deleted += 1
                except NotFoundError:
                    pass
        return report


def run_driver_sim(
    client: KubeClient,
    fleet_ref: str,
    *,
    watch: bool = False,
    interval: float = 5.0,
    max_nodes: int | None = None,
    out: TextIO | None = None,
    max_iterations: int | None = None,
    kubernetes_version: str = DEFAULT_VERSION,
) -> SyncReport:
    """Render the fleet, publish it; with `watch`, re-read the fleet file and re-publish every
    `interval` seconds (slices someone deleted or changed are restored)."""
    import os
    import sys

    from kdra.fleets import load_fleet, render

    out = out or sys.stdout

    def load() -> tuple[str, list[Obj]]:
        fleet = load_fleet(fleet_ref) if max_nodes is None else load_fleet(fleet_ref, max_nodes=max_nodes)
        return fleet.name, render(fleet, kubernetes_version=kubernetes_version)

    name, objs = load()
    sync = FleetSync(client, name, objs)
    report = sync.sync()
    print(f"fleet {name}: {report.line()}", file=out, flush=True)
    mtime = os.path.getmtime(fleet_ref) if os.path.exists(fleet_ref) else None
    n = 0
    while watch and (max_iterations is None or n < max_iterations):
        n += 1
        time.sleep(interval)
        try:
            if mtime is not None and os.path.getmtime(fleet_ref) != mtime:
                mtime = os.path.getmtime(fleet_ref)
                name, objs = load()
                sync.fleet_name = name
                sync.set_objects(objs)
            report = sync.sync()
        except Exception as e:  # keep publishing through API-server restarts and bad edits
            log.warning("driver sim: %s", e)
            print(f"fleet {name}: {type(e).__name__}: {e}", file=out, flush=True)
            continue
        if report.pools_changed or report.nodes_created:
            print(f"fleet {name}: {report.line()}", file=out, flush=True)
    return report
