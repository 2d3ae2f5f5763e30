"""The file `kdra export` writes, read back offline: its cluster (`kdra simulate -c FILE`, `kdra plan`) and
its workload replayed (`kdra simulate --workload FILE`)."""

from __future__ import annotations

from kdra.api.types import Obj

CLUSTER_KINDS = ("DeviceClass", "Node", "ResourceSlice")


def is_export(objs: list[Obj]) -> bool:
    """True for a file of cluster objects (what `kdra export` writes) rather than a Fleet or a workload."""
    kinds = {o.get("kind") for o in objs if isinstance(o, dict)}
    return bool(kinds & set(CLUSTER_KINDS)) and "Fleet" not in kinds


def load_exported_cluster(path: str) -> tuple[str, list[Obj]] | None:
    """(name, DeviceClasses + Nodes + ResourceSlices) when `path` is an export file; None otherwise (a
    bundled fleet name, a Fleet file, a CSV)."""
    import os

    if not os.path.isfile(path) or not path.endswith((".yaml", ".yml", ".json")):
        return None
    from kdra.api.load import load_paths

    objs = load_paths([path])
    if not is_export(objs):
        return None
    out: list[Obj] = []
    for o in objs:
        if o.get("kind") == "Node":
            node = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {k: v for k, v in o["metadata"].items() if k in ("name", "labels")},
                "spec": {k: v for k, v in (o.get("spec") or {}).items() if k in ("taints", "unschedulable")},
                "status": {
                    k: v
                    for k, v in (o.get("status") or {}).items()
                    if k in ("capacity", "allocatable", "conditions")
                },
            }
            out.append(node)
        elif o.get("kind") in ("DeviceClass", "ResourceSlice"):
            meta = {k: v for k, v in o["metadata"].items() if k in ("name", "labels", "annotations")}
            out.append(dict(o, metadata=meta))
    name = os.path.splitext(os.path.basename(path))[0]
    return name, out


def replayable_workload(objs: list[Obj]) -> list[Obj]:
    """An export's workload as pods to replay: cluster objects dropped; pods without nodeName and status
    (they arrive pending); claims generated for pods dropped (the simulation's controller makes them
    again from the templates); other claims without status (they are allocated anew)."""
    if not is_export(objs):
        return objs
    out: list[Obj] = []
    for o in objs:
        kind = o.get("kind")
        meta = o.get("metadata") or {}
        keep_meta = {k: v for k, v in meta.items() if k in ("name", "namespace", "labels", "annotations")}
        if kind == "Namespace":
            out.append({"apiVersion": "v1", "kind": "Namespace", "metadata": keep_meta})
        elif kind == "ResourceClaimTemplate":
            out.append(dict(o, metadata=keep_meta))
        elif kind == "ResourceClaim":
            if any(r.get("kind") == "Pod" and r.get("controller") for r in meta.get("ownerReferences") or []):
                continue
            out.append({k: v for k, v in o.items() if k != "status"} | {"metadata": keep_meta})
        elif kind == "Pod":
            spec = {k: v for k, v in (o.get("spec") or {}).items() if k != "nodeName"}
            out.append({"apiVersion": "v1", "kind": "Pod", "metadata": keep_meta, "spec": spec})
    return out
