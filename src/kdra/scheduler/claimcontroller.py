"""The resourceclaim controller of kube-controller-manager (pkg/controller/resourceclaim/controller.go),
plus the garbage collection of the claims it owns.

- A pod referencing a ResourceClaimTemplate gets a claim created for it exactly as upstream does it
  (kdra.api.templates.instantiate_template: generateName `<pod>-<podClaimName>-` truncated to 57
  characters, the pod as controlling owner, annotation resource.kubernetes.io/pod-claim-name), and
  `pod.status.resourceClaimStatuses` records the name (entries sorted by name, as upstream writes them).
- With DRAWorkloadResourceClaims (KEP-5729), a scheduling.k8s.io PodGroup's template claims are made the
  same way for the PodGroup (`<podgroup>-<claim>-`, the PodGroup as controlling owner, recorded in
  `podGroup.status.resourceClaimStatuses`: syncPodGroup/handlePodGroupClaim), and a member's entry that
  matches one of the group's claims records the group's claim instead of getting one of its own (it waits
  until the group's claim exists). With GenericWorkload, a pod of a PodGroup that does not exist yet
  waits for it (getPodGroup).
- When a pod is done (Succeeded/Failed) or deleted, it is removed from the reservedFor of its claims; a claim
  nobody reserves any more is deallocated and loses the delete-protection finalizer; claims owned by the
  pod (template and KEP-5004 claims) are deleted. A PodGroup's claims stay reserved for it while it exists,
  whatever its pods do; when it is deleted it leaves their reservedFor (deallocated when nobody is left)
  and the claims it owns are deleted.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from kdra.api import workloadapi as wa
from kdra.api.features import FeatureGates
from kdra.api.pods import pod_claim_names, reserved_for
from kdra.api.templates import POD_CLAIM_NAME_ANNOTATION, instantiate_template
from kdra.api.types import Obj
from kdra.cluster.store import NotFoundError, Store, WatchEvent, clone
from kdra.scheduler.cache import is_terminal
from kdra.scheduler.dra import DELETE_PROTECTION_FINALIZER


class ResourceClaimController:
    def __init__(self, store: Store, features: FeatureGates | None = None) -> None:
        self.store = store
        self.created = 0
        self.deleted = 0
        self.workload_api = features is not None and features.enabled("GenericWorkload")
        self.group_claims = wa.claims_enabled(features)
        # The ownerReference of a PodGroup's claim names the release's preferred version (schedulingapi
        # SchemeGroupVersion), whichever version the PodGroup was written in.
        version = features.version if features is not None else None
        self.group_api_version = f"{wa.GROUP}/{wa.SERVED_VERSIONS[version or '1.38'][0]}"
        # template or PodGroup -> the pods and PodGroups ("PodGroup:ns/name" or "ns/name") waiting for it
        self.waiting_for_template: dict[tuple[str, str], set[str]] = {}
        self.waiting_for_group: dict[tuple[str, str], set[str]] = {}
        kinds = ("Pod", "ResourceClaimTemplate") + (("PodGroup",) if self.workload_api else ())
        store.watch(self._on_event, kinds=kinds)
        if self.group_claims:
            for pg in store.list("PodGroup"):
                if wa.is_workload_api(pg):
                    self.sync_pod_group(pg)

    def _on_event(self, ev: WatchEvent) -> None:
        if ev.kind == "ResourceClaimTemplate":
            if ev.type == "ADDED":
                meta = ev.object["metadata"]
                for key in sorted(self.waiting_for_template.pop((meta["namespace"], meta["name"]), set())):
                    self._retry(key)
            return
        if ev.kind == "PodGroup":
            self._on_pod_group(ev)
            return
        pod = ev.object
        if ev.type == "DELETED" or is_terminal(pod):
            self.release_pod(pod)
        elif pod["metadata"].get("deletionTimestamp"):
            return
        else:
            self.sync_pod(pod)

    def _retry(self, key: str) -> None:
        kind, _, ref = key.rpartition(":")
        ns, name = ref.split("/", 1)
        obj = self.store.try_get(kind or "Pod", name, ns)
        if obj is None:
            return
        if kind == "PodGroup":
            self.sync_pod_group(obj)
        else:
            self.sync_pod(obj)

    def _on_pod_group(self, ev: WatchEvent) -> None:
        pg = ev.object
        if not wa.is_workload_api(pg):
            return
        meta = pg["metadata"]
        ns, name = meta.get("namespace") or "default", meta["name"]
        if ev.type == "DELETED":
            self.release_pod_group(pg)
            return
        if meta.get("deletionTimestamp"):
            return
        if self.group_claims:
            pg = self.sync_pod_group(pg)
        for key in sorted(self.waiting_for_group.pop((ns, name), set())):
            self._retry(key)

    # -- creation --------------------------------------------------------------------------------

    def sync_pod(self, pod: Obj) -> None:
        entries = (pod.get("spec") or {}).get("resourceClaims") or []
        if not entries:
            return
        meta = pod["metadata"]
        ns = meta.get("namespace") or "default"
        group: Obj | None = None
        group_name = wa.pod_group_name(pod) if self.workload_api else None
        if group_name is not None:
            group = self.store.try_get("PodGroup", group_name, ns)
            if group is None or not wa.is_workload_api(group):
                # getPodGroup: the pod's claims wait until its PodGroup exists.
                self.waiting_for_group.setdefault((ns, group_name), set()).add(f"{ns}/{meta['name']}")
                return
        recorded = {
            s.get("name"): s.get("resourceClaimName")
            for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
        }
        new: dict[str, str] = {}
        for entry in entries:
            tmpl_name = entry.get("resourceClaimTemplateName")
            if not tmpl_name or entry.get("name") in recorded:  # made, or known not to be needed
                continue
            group_claim = wa.matching_group_claim(pod, group if self.group_claims else None, entry)
            if group_claim is not None:
                assert group is not None
                name = wa.group_claim_name(group, group_claim)
                if name is None:  # the group's claim is not made yet: wait for the PodGroup's update
                    self.waiting_for_group.setdefault((ns, group_name or ""), set()).add(
                        f"{ns}/{meta['name']}"
                    )
                else:
                    new[entry["name"]] = name
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
            new[entry["name"]] = created["metadata"]["name"]
        if new:
            merged = {n: c for n, c in recorded.items() if c} | new  # syncPod's merge: sorted by name
            written = [{"name": n, "resourceClaimName": merged[n]} for n in sorted(merged)]

            def set_statuses(p: Obj) -> None:
                p.setdefault("status", {})["resourceClaimStatuses"] = written

            with contextlib.suppress(NotFoundError):
                self.store.update_with_retry("Pod", meta["name"], ns, set_statuses, subresource="status")

    def sync_pod_group(self, pg: Obj) -> Obj:
        """handlePodGroupClaim for each of the group's template claims: made once (or found again: owned
        by the PodGroup, annotated with the claim's name), recorded in the group's status."""
        meta = pg["metadata"]
        ns = meta.get("namespace") or "default"
        new: dict[str, str] = {}
        for entry in wa.pod_group_claims(pg):
            tmpl_name = entry.get("resourceClaimTemplateName")
            if not tmpl_name:
                continue
            name = wa.group_claim_name(pg, entry)
            if name is not None:
                current = self.store.try_get("ResourceClaim", name, ns)
                if current is not None and wa.is_for_pod_group(pg, current):
                    continue
            claim = self._group_claim(pg, str(entry.get("name")))
            if claim is None:
                template = self.store.try_get("ResourceClaimTemplate", tmpl_name, ns)
                if template is None:
                    self.waiting_for_template.setdefault((ns, tmpl_name), set()).add(
                        f"PodGroup:{ns}/{meta['name']}"
                    )
                    continue
                claim = self.store.create(
                    instantiate_template(
                        pg,
                        str(entry.get("name")),
                        template,
                        taken_names=_Taken(self.store, ns),
                        owner_api_version=self.group_api_version,
                    )
                )
                self.created += 1
            new[str(entry.get("name"))] = claim["metadata"]["name"]
        if not new:
            return pg

        def set_statuses(g: Obj) -> None:
            st = g.setdefault("status", {})
            kept = [s for s in st.get("resourceClaimStatuses") or [] if s.get("name") not in new]
            st["resourceClaimStatuses"] = kept + [{"name": n, "resourceClaimName": c} for n, c in new.items()]

        try:
            return self.store.update_with_retry(
                "PodGroup", meta["name"], ns, set_statuses, subresource="status"
            )
        except NotFoundError:
            return pg

    def _group_claim(self, pg: Obj, claim_name: str) -> Obj | None:
        """findPodGroupResourceClaim: a claim made earlier for this group's claim (controller owner and
        annotation), e.g. when the status write was lost."""
        ns = pg["metadata"].get("namespace") or "default"
        for c in self.store.list("ResourceClaim", ns):
            if (c["metadata"].get("annotations") or {}).get(POD_CLAIM_NAME_ANNOTATION) == claim_name and (
                wa.is_for_pod_group(pg, c)
            ):
                return c
        return None

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
            claim = _drop_reservation(self.store, claim, str(uid))
            if claim["metadata"].get("deletionTimestamp") and not claim["metadata"].get("finalizers"):
                continue  # that update finished a pending deletion
            self._collect(claim, "Pod", str(uid))

    def release_pod_group(self, pg: Obj) -> None:
        """A deleted PodGroup leaves the reservedFor of its claims (syncClaim) and the claims it owns are
        garbage-collected."""
        meta = pg["metadata"]
        ns = meta.get("namespace") or "default"
        uid = str(meta.get("uid", ""))
        for claim in self.store.list("ResourceClaim", ns):
            held = any(r.get("uid") == uid for r in reserved_for(claim))
            owned = wa.is_for_pod_group(pg, claim)
            if not held and not owned:
                continue
            claim = _drop_reservation(self.store, claim, uid)
            if not (claim["metadata"].get("deletionTimestamp") and not claim["metadata"].get("finalizers")):
                self._collect(claim, "PodGroup", uid)

    def _collect(self, claim: Obj, kind: str, uid: str) -> None:
        """The garbage collector: a claim whose controller `kind`/`uid` is gone is deleted."""
        owned = any(
            r.get("kind") == kind and r.get("uid") == uid and r.get("controller")
            for r in claim["metadata"].get("ownerReferences") or []
        )
        if owned and not claim["metadata"].get("deletionTimestamp"):
            try:
                self.store.delete(
                    "ResourceClaim", claim["metadata"]["name"], claim["metadata"].get("namespace", "")
                )
                self.deleted += 1
            except NotFoundError:
                pass


def _drop_reservation(store: Store, claim: Obj, uid: str) -> Obj:
    """Take `uid` out of a claim's reservedFor; nobody left: deallocated, the delete-protection finalizer
    dropped (syncClaim)."""
    rf = reserved_for(claim)
    if any(r.get("uid") == uid for r in rf):
        upd = clone(claim)
        upd["status"]["reservedFor"] = [r for r in rf if r.get("uid") != uid]
        if not upd["status"]["reservedFor"]:
            del upd["status"]["reservedFor"]
            upd["status"].pop("allocation", None)  # deallocate: nobody uses it any more
        claim = store.update(upd, subresource="status")
    if not (claim.get("status") or {}).get("allocation") and DELETE_PROTECTION_FINALIZER in (
        claim["metadata"].get("finalizers") or []
    ):
        upd = clone(claim)
        upd["metadata"]["finalizers"] = [
            f for f in upd["metadata"]["finalizers"] if f != DELETE_PROTECTION_FINALIZER
        ]
        claim = store.update(upd)
    return claim


class _Taken:
    """Container view of claim names in a namespace (for instantiate_template's collision check)."""

    def __init__(self, store: Store, ns: str) -> None:
        self.store = store
        self.ns = ns

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.store.try_get("ResourceClaim", name, self.ns) is not None
