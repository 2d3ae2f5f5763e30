"""Which kind lives at which API path: kind -> (group/version, plural, namespaced), per served version.

The kinds kdra reads or writes (`RESOURCES`), the same kinds in other API groups (`GROUP_RESOURCES`: an
object's apiVersion, or the version the API server serves, picks the group and version), the REST path of
a kind, an object or a subresource (`resource_path`, `object_path`), and the reverse: what a request path
names, as the API server's RequestInfo and RBAC see it (`request_info`). Discovering the served version is
the client's (`KubeClient.served_version`); this module only maps.
"""

from __future__ import annotations

import urllib.parse

from kdra.api.types import Obj
from kdra.errors import InputError

# kind -> (group/version, plural, namespaced). The DRA kinds, what a scheduler and a driver touch, what
# deploy/ installs (RBAC, CRDs, the Helm chart's workloads) and kdra's own scheduling CRDs (deploy/crds).
RESOURCES: dict[str, tuple[str, str, bool]] = {
    "Namespace": ("v1", "namespaces", False),
    "Node": ("v1", "nodes", False),
    "Pod": ("v1", "pods", True),
    "Event": ("v1", "events", True),
    "ServiceAccount": ("v1", "serviceaccounts", True),
    "Service": ("v1", "services", True),
    "ConfigMap": ("v1", "configmaps", True),
    "Secret": ("v1", "secrets", True),
    "Deployment": ("apps/v1", "deployments", True),
    "PodDisruptionBudget": ("policy/v1", "poddisruptionbudgets", True),
    "DeviceClass": ("resource.k8s.io/v1", "deviceclasses", False),
    "ResourceSlice": ("resource.k8s.io/v1", "resourceslices", False),
    "ResourceClaim": ("resource.k8s.io/v1", "resourceclaims", True),
    "ResourceClaimTemplate": ("resource.k8s.io/v1", "resourceclaimtemplates", True),
    "DeviceTaintRule": ("resource.k8s.io/v1beta2", "devicetaintrules", False),
    "Lease": ("coordination.k8s.io/v1", "leases", True),
    "PriorityClass": ("scheduling.k8s.io/v1", "priorityclasses", False),
    "ClusterRole": ("rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "Role": ("rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("rbac.authorization.k8s.io/v1", "rolebindings", True),
    "CustomResourceDefinition": ("apiextensions.k8s.io/v1", "customresourcedefinitions", False),
    "PodGroup": ("kdra.dev/v1alpha1", "podgroups", True),
    "Queue": ("kdra.dev/v1alpha1", "queues", False),
    "Topology": ("kdra.dev/v1alpha1", "topologies", False),
    "SchedulingShard": ("kdra.dev/v1alpha1", "schedulingshards", False),
    "Job": ("batch/v1", "jobs", True),
    # scheduling.k8s.io's Workload API: v1alpha2 in 1.36, v1beta1 in 1.37 (GenericWorkload); the version the
    # API server serves is discovered (served_version) and passed as api_version.
    "Workload": ("scheduling.k8s.io/v1beta1", "workloads", True),
}

# The same kinds in other API groups: (group, kind) -> (the usual version, plural, namespaced). Paths for an
# object of one of these groups follow its apiVersion; informers discover the served version.
GROUP_RESOURCES: dict[tuple[str, str], tuple[str, str, bool]] = {
    ("scheduling.k8s.io", "PodGroup"): ("v1beta1", "podgroups", True),
    ("scheduling.k8s.io", "Workload"): ("v1beta1", "workloads", True),
    ("scheduling.run.ai", "PodGroup"): ("v2alpha2", "podgroups", True),  # KAI
    ("scheduling.run.ai", "Queue"): ("v2", "queues", False),
    ("kai.scheduler", "Topology"): ("v1alpha1", "topologies", False),
    ("kai.scheduler", "SchedulingShard"): ("v1", "schedulingshards", False),
    ("scheduling.volcano.sh", "PodGroup"): ("v1beta1", "podgroups", True),
    ("scheduling.volcano.sh", "Queue"): ("v1beta1", "queues", False),
    ("scheduling.x-k8s.io", "PodGroup"): ("v1alpha1", "podgroups", True),  # scheduler-plugins
}


def resource_path(
    kind: str,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
    api_version: str | None = None,
) -> str:
    """The REST path of a kind's collection, or of one object (`name`) and its `subresource`."""
    gv, plural, namespaced = resource_info(kind, api_version)
    base = "/api/v1" if gv == "v1" else f"/apis/{gv}"
    if namespaced and namespace:
        base += f"/namespaces/{urllib.parse.quote(namespace, safe='')}"
    path = f"{base}/{plural}"
    if name is not None:
        path += f"/{urllib.parse.quote(name, safe='')}"
        if subresource:
            path += f"/{subresource}"
    return path


def resource_info(kind: str, api_version: str | None = None) -> tuple[str, str, bool]:
    """(group/version, plural, namespaced) of `kind`, in `api_version`'s group and version when given."""
    if api_version and "/" in api_version:
        group = api_version.split("/", 1)[0]
        alt = GROUP_RESOURCES.get((group, kind))
        if alt is not None:
            return api_version, alt[1], alt[2]
    try:
        gv, plural, namespaced = RESOURCES[kind]
    except KeyError:
        raise InputError(f"kind {kind!r} is not one kdra reads or writes") from None
    if api_version and api_version.split("/")[0] == gv.split("/")[0] and "/" in api_version:
        gv = api_version
    return gv, plural, namespaced


def is_namespaced(kind: str) -> bool:
    return RESOURCES[kind][2] if kind in RESOURCES else True


def object_path(obj: Obj, subresource: str | None = None) -> str:
    """The path of `obj` itself (or of its subresource), from its kind, namespace, name and apiVersion."""
    md = obj["metadata"]
    ns = md.get("namespace") if is_namespaced(obj["kind"]) else None
    return resource_path(obj["kind"], ns, md["name"], subresource, obj.get("apiVersion"))


def request_info(method: str, path: str, params: dict[str, str] | None = None) -> tuple[str, str, str, str]:
    """(verb, API group, resource, subresource) of a request, as the API server's RequestInfo and RBAC see
    it: GET is get, list or watch; POST create; PUT update; PATCH patch; DELETE delete or
    deletecollection. Non-resource paths (/readyz) give ("get", "", path, "")."""
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 2:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, rest = parts[1], parts[3:]
    else:
        return (method.lower(), "", path, "")
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) != 2:
        rest = rest[2:]  # namespaces/NS/resource...; "namespaces/NAME" alone is the Namespace itself
    resource = rest[0] if rest else ""
    named = len(rest) >= 2
    sub = rest[2] if len(rest) >= 3 else ""
    q = params or {}
    verb = {
        "GET": "get" if named else ("watch" if q.get("watch") in ("1", "true") else "list"),
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if named else "deletecollection",
    }.get(method, method.lower())
    return verb, group, resource, sub
