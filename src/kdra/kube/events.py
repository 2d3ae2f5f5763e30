"""core/v1 Events as kube-scheduler records them, and the API's timestamp format: one builder for the
scheduler's pod Events, the session's PodGroup/Queue Events and the conflict detector's."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from typing import Any

from kdra.api.types import Obj

MAX_EVENT_MESSAGE = 8192  # what the session cuts a group's or queue's message to (pods' come cut already)


def now_rfc3339() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def object_event(
    obj: Mapping[str, Any],
    reason: str,
    message: str,
    etype: str,
    component: str,
    instance: str,
    *,
    api_version: str | None = None,
    kind: str | None = None,
) -> Obj:
    """A core/v1 Event about `obj` (namespace "default" for cluster-scoped ones, as kubectl shows).
    `api_version`/`kind` for objects read from a list, whose items carry neither."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace") or "default"
    ts = now_rfc3339()
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta.get('name', 'object')}.", "namespace": namespace},
        "involvedObject": {
            "apiVersion": api_version or obj.get("apiVersion", ""),
            "kind": kind or obj.get("kind", ""),
            "name": meta.get("name", ""),
            **({"namespace": meta["namespace"]} if meta.get("namespace") else {}),
            "uid": meta.get("uid", ""),
            "resourceVersion": meta.get("resourceVersion", ""),
        },
        "reason": reason,
        "message": message[:MAX_EVENT_MESSAGE],
        "type": etype,
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": instance,
        "firstTimestamp": ts,
        "lastTimestamp": ts,
        "count": 1,
    }


def pod_event(
    pod: Mapping[str, Any], reason: str, message: str, etype: str, component: str, instance: str
) -> Obj:
    """A core/v1 Event about a pod (FailedScheduling, Scheduled, Preempted, ConflictingAllocation)."""
    return object_event(pod, reason, message, etype, component, instance, api_version="v1", kind="Pod")
