"""The resourceclaim controller of kube-controller-manager (pkg/controller/resourceclaim/controller.go),
plus the garbage collection of the claims it owns.

- A pod referencing a ResourceClaimTemplate gets a claim created for it exactly as upstream does it
  (kdra.api.templates.instantiate_template: generateName `<pod>-<podClaimName>-` truncated to 57
  characters, the pod as controlling owner, annotation resource.kubernetes.io/pod-claim-name), and
  `pod.status.resourceClaimStatuses` records the name.
- When a pod is done (Succeeded/Failed) or deleted, it is removed from the reservedFor of its claims; a claim
  nobody reserves any more is deallocated and loses the delete-protection finalizer; claims owned by the
  pod (template and KEP-5004 claims) are deleted.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from kdra.api.pods import pod_claim_names, reserved_for
from kdra.api.templates import instantiate_template
from kdra.api.types import Obj
from kdra.cluster.store import NotFoundError, Store, WatchEvent, clone
from kdra.scheduler.cache import is_terminal
from kdra.scheduler.dra import DELETE_PROTECTION_FINALIZER


class ResourceClaimController:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.created = 0
        self.deleted = 0
        self.waiting_for_template: dict[tuple[str, str], set[str]] = {}  # template -> pod keys
        store.watch(self._on_event, kinds=("Pod", "ResourceClaimTemplate"))

    def _on_event(self, ev: WatchEvent) -> None:
        if ev.kind == "ResourceClaimTemplate":
            if ev.type == "ADDED":
                meta = ev.object["metadata"]
                for pod_key in sorted(
                    self.waiting_for_template.pop((meta["namespace"], meta["name"]), set())
                ):
                    ns, name = pod_key.split("/", 1)
                    pod = self.store.try_get("Pod", name, ns)
                    if pod is not None:
                        self.sync_pod(pod)
            return
        pod = ev.object
        if ev.type == "DELETED" or is_terminal(pod):
            self.release_pod(pod)
        elif pod["metadata"].get("deletionTimestamp"):
            return
        else:
            self.sync_pod(pod)

    # -- creation --------------------------------------------------------------------------------

    def sync_pod(self, pod: Obj) -> None:
        entries = (pod.get("spec") or {}).get("resourceClaims") or []
        if not entries:
            return
        meta = pod["metadata"]
        ns = meta.get("namespace") or "default"
        statuses = {s.get("name"): s for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
        new_statuses = []
        changed = False
        for entry in entries:
            tmpl_name = entry.get("resourceClaimTemplateName")
            if not tmpl_name:
                continue
            st = statuses.get(entry.get("name"))
            if st is not None:
                new_statuses.append(st)
                continue
            template = self.store.try_get("ResourceClaimTemplate", tmpl_name, ns)
            if template is None:
                self.waiting_for_template.setdefault((ns, tmpl_name), set()).add(f"{ns}/{meta['name']}")
                continue
            claim = instantiate_template(pod, entry["name"], template, taken_names=_Taken(self.store, ns))
            existing = self.store.try_get("ResourceClaim", claim["metadata"]["name"], ns)
            if existing is None:
                created = self.store.create(claim)
                self.created += 1
            else:
                created = existing  # reuse the orphan we created earlier (same deterministic name)
            new_statuses.append({"name": entry["name"], "resourceClaimName": created["metadata"]["name"]})
            changed = True
        if changed:

            def set_statuses(p: Obj) -> None:
                p.setdefault("status", {})["resourceClaimStatuses"] = new_statuses

            with contextlib.suppress(NotFoundError):
                self.store.update_with_retry("Pod", meta["name"], ns, set_statuses, subresource="status")

    # -- release ---------------------------------------------------------------------------------

    def claim_names(self, pod: Mapping[str, Any]) -> list[str]:
        return pod_claim_names(pod)

    def release_pod(self, pod: Obj) -> None:
        meta = pod["metadata"]
        ns = meta.get("namespace") or "default"
        uid = meta.get("uid")
        for name in self.claim_names(pod):
            claim = self.store.try_get("ResourceClaim", name, ns)
            if claim is None:
                continue
            rf = reserved_for(claim)
            if any(r.get("uid") == uid for r in rf):
                upd = clone(claim)
                upd["status"]["reservedFor"] = [r for r in rf if r.get("uid") != uid]
                if not upd["status"]["reservedFor"]:
                    del upd["status"]["reservedFor"]
                    upd["status"].pop("allocation", None)  # deallocate: nobody uses it any more
                claim = self.store.update(upd, subresource="status")
            if not (claim.get("status") or {}).get("allocation") and DELETE_PROTECTION_FINALIZER in (
                claim["metadata"].get("finalizers") or []
            ):
                upd = clone(claim)
                upd["metadata"]["finalizers"] = [
                    f for f in upd["metadata"]["finalizers"] if f != DELETE_PROTECTION_FINALIZER
                ]
                claim = self.store.update(upd)
                if claim["metadata"].get("deletionTimestamp") and not claim["metadata"].get("finalizers"):
                    continue  # that update finished a pending deletion
            owned = any(
                r.get("kind") == "Pod" and r.get("uid") == uid and r.get("controller")
                for r in claim["metadata"].get("ownerReferences") or []
            )
            if owned and not claim["metadata"].get("deletionTimestamp"):
                try:
                    self.store.delete("ResourceClaim", name, ns)
                    self.deleted += 1
                except NotFoundError:
                    pass


class _Taken:
    """Container view of claim names in a namespace (for instantiate_template's collision check)."""

    def __init__(self, store: Store, ns: str) -> None:
        self.store = store
        self.ns = ns

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.store.try_get("ResourceClaim", name, self.ns) is not None
