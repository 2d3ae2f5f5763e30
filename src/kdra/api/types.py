"""TypedDicts for resource.k8s.io/v1 and the DRA parts of core/v1.

Objects stay the plain dicts the API server serves (contracts.md): these types only tell mypy and
readers which camelCase keys exist, so nothing is converted on load and unknown fields survive a
round trip. Field names follow k8s.io/api/resource/v1/types.go (v1.36), including the alpha
list-typed attributes of DRAListTypeAttributes (`bools`, `ints`, `strings`, `versions`).
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

API_VERSION = "resource.k8s.io/v1"
CORE_API_VERSION = "v1"

# An object as the API server serves it (any kind): a JSON-shaped dict. The TypedDicts below name the keys
# of the kinds kdra reads; code that handles objects of any kind takes and returns `Obj`.
Obj = dict[str, Any]

# -- metadata ---------------------------------------------------------------------------------------


class OwnerReference(TypedDict, total=False):
    apiVersion: str
    kind: str
    name: str
    uid: str
    controller: bool
    blockOwnerDeletion: bool


class ObjectMeta(TypedDict, total=False):
    name: str
    generateName: str
    namespace: str
    uid: str
    resourceVersion: str
    generation: int
    creationTimestamp: str
    deletionTimestamp: str
    labels: dict[str, str]
    annotations: dict[str, str]
    ownerReferences: list[OwnerReference]
    finalizers: list[str]


# -- core/v1 node selectors (used by slices and allocation results) -------------------------------


class NodeSelectorRequirement(TypedDict, total=False):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: list[str]


class NodeSelectorTerm(TypedDict, total=False):
    matchExpressions: list[NodeSelectorRequirement]
    matchFields: list[NodeSelectorRequirement]


class NodeSelector(TypedDict, total=False):
    nodeSelectorTerms: list[NodeSelectorTerm]


# -- shared device pieces ---------------------------------------------------------------------------


class CELDeviceSelector(TypedDict, total=False):
    expression: str


class DeviceSelector(TypedDict, total=False):
    cel: CELDeviceSelector


class OpaqueDeviceConfiguration(TypedDict, total=False):
    driver: str
    parameters: dict[str, Any]


class DeviceConfiguration(TypedDict, total=False):
    opaque: OpaqueDeviceConfiguration


class DeviceTaint(TypedDict, total=False):
    key: str
    value: str
    effect: Literal["None", "NoSchedule", "NoExecute"]
    timeAdded: str


class DeviceToleration(TypedDict, total=False):
    key: str
    operator: Literal["Equal", "Exists"]
    value: str
    effect: Literal["None", "NoSchedule", "NoExecute"]
    tolerationSeconds: int


# -- DeviceClass ------------------------------------------------------------------------------------


class DeviceClassConfiguration(TypedDict, total=False):
    opaque: OpaqueDeviceConfiguration


class DeviceClassSpec(TypedDict, total=False):
    selectors: list[DeviceSelector]
    config: list[DeviceClassConfiguration]
    extendedResourceName: str


class DeviceClass(TypedDict, total=False):
    apiVersion: str
    kind: Literal["DeviceClass"]
    metadata: ObjectMeta
    spec: DeviceClassSpec


# -- ResourceSlice ----------------------------------------------------------------------------------


class ResourcePool(TypedDict, total=False):
    name: str
    generation: int
    resourceSliceCount: int


# Exactly one field is set. The list forms are alpha (DRAListTypeAttributes, KEP-5491). Functional
# syntax because the keys shadow builtins.
DeviceAttribute = TypedDict(  # noqa: UP013
    "DeviceAttribute",
    {
        "int": int,
        "bool": bool,
        "string": str,
        "version": str,
        "ints": list[int],
        "bools": list[bool],
        "strings": list[str],
        "versions": list[str],
    },
    total=False,
)


class CapacityRequestPolicyRange(TypedDict, total=False):
    min: str
    max: str
    step: str


class CapacityRequestPolicy(TypedDict, total=False):
    default: str
    validValues: list[str]
    validRange: CapacityRequestPolicyRange


class DeviceCapacity(TypedDict, total=False):
    value: str
    requestPolicy: CapacityRequestPolicy


class Counter(TypedDict, total=False):
    value: str


class CounterSet(TypedDict, total=False):
    name: str
    counters: dict[str, Counter]


class DeviceCounterConsumption(TypedDict, total=False):
    counterSet: str
    counters: dict[str, Counter]


class Device(TypedDict, total=False):
    name: str
    attributes: dict[str, DeviceAttribute]
    capacity: dict[str, DeviceCapacity]
    consumesCounters: list[DeviceCounterConsumption]
    nodeName: str
    nodeSelector: NodeSelector
    allNodes: bool
    taints: list[DeviceTaint]
    bindsToNode: bool
    bindingConditions: list[str]
    bindingFailureConditions: list[str]
    allowMultipleAllocations: bool


class ResourceSliceSpec(TypedDict, total=False):
    driver: str
    pool: ResourcePool
    nodeName: str
    nodeSelector: NodeSelector
    allNodes: bool
    perDeviceNodeSelection: bool
    devices: list[Device]
    sharedCounters: list[CounterSet]


class ResourceSlice(TypedDict, total=False):
    apiVersion: str
    kind: Literal["ResourceSlice"]
    metadata: ObjectMeta
    spec: ResourceSliceSpec


# -- ResourceClaim ----------------------------------------------------------------------------------


class CapacityRequirements(TypedDict, total=False):
    requests: dict[str, str]


class ExactDeviceRequest(TypedDict, total=False):
    deviceClassName: str
    selectors: list[DeviceSelector]
    allocationMode: Literal["ExactCount", "All"]
    count: int
    adminAccess: bool
    tolerations: list[DeviceToleration]
    capacity: CapacityRequirements


class DeviceSubRequest(TypedDict, total=False):
    name: str
    deviceClassName: str
    selectors: list[DeviceSelector]
    allocationMode: Literal["ExactCount", "All"]
    count: int
    tolerations: list[DeviceToleration]
    capacity: CapacityRequirements


class DeviceRequest(TypedDict, total=False):
    name: str
    exactly: ExactDeviceRequest
    firstAvailable: list[DeviceSubRequest]


class DeviceConstraint(TypedDict, total=False):
    requests: list[str]
    matchAttribute: str
    distinctAttribute: str


class DeviceClaimConfiguration(TypedDict, total=False):
    requests: list[str]
    opaque: OpaqueDeviceConfiguration


class DeviceClaim(TypedDict, total=False):
    requests: list[DeviceRequest]
    constraints: list[DeviceConstraint]
    config: list[DeviceClaimConfiguration]


class ResourceClaimSpec(TypedDict, total=False):
    devices: DeviceClaim


class DeviceRequestAllocationResult(TypedDict, total=False):
    request: str
    driver: str
    pool: str
    device: str
    adminAccess: bool
    tolerations: list[DeviceToleration]
    bindingConditions: list[str]
    bindingFailureConditions: list[str]
    shareID: str
    consumedCapacity: dict[str, str]


class DeviceAllocationConfiguration(TypedDict, total=False):
    source: Literal["FromClass", "FromClaim"]
    requests: list[str]
    opaque: OpaqueDeviceConfiguration


class DeviceAllocationResult(TypedDict, total=False):
    results: list[DeviceRequestAllocationResult]
    config: list[DeviceAllocationConfiguration]


class AllocationResult(TypedDict, total=False):
    devices: DeviceAllocationResult
    nodeSelector: NodeSelector
    allocationTimestamp: str


class ResourceClaimConsumerReference(TypedDict, total=False):
    apiGroup: str
    resource: str
    name: str
    uid: str


class NetworkDeviceData(TypedDict, total=False):
    interfaceName: str
    ips: list[str]
    hardwareAddress: str


class AllocatedDeviceStatus(TypedDict, total=False):
    driver: str
    pool: str
    device: str
    shareID: str
    conditions: list[dict[str, Any]]
    data: dict[str, Any]
    networkData: NetworkDeviceData


class ResourceClaimStatus(TypedDict, total=False):
    allocation: AllocationResult
    reservedFor: list[ResourceClaimConsumerReference]
    devices: list[AllocatedDeviceStatus]


class ResourceClaim(TypedDict, total=False):
    apiVersion: str
    kind: Literal["ResourceClaim"]
    metadata: ObjectMeta
    spec: ResourceClaimSpec
    status: ResourceClaimStatus


class ResourceClaimTemplateSpec(TypedDict, total=False):
    metadata: ObjectMeta
    spec: ResourceClaimSpec


class ResourceClaimTemplate(TypedDict, total=False):
    apiVersion: str
    kind: Literal["ResourceClaimTemplate"]
    metadata: ObjectMeta
    spec: ResourceClaimTemplateSpec


# -- core/v1: the parts DRA uses --------------------------------------------------------------------


class NodeSpec(TypedDict, total=False):
    unschedulable: bool
    taints: list[dict[str, Any]]


class NodeStatus(TypedDict, total=False):
    capacity: dict[str, str]
    allocatable: dict[str, str]


class Node(TypedDict, total=False):
    apiVersion: str
    kind: Literal["Node"]
    metadata: ObjectMeta
    spec: NodeSpec
    status: NodeStatus


class PodResourceClaim(TypedDict, total=False):
    """Exactly one of resourceClaimName / resourceClaimTemplateName."""

    name: str
    resourceClaimName: str
    resourceClaimTemplateName: str


class ResourceClaimRef(TypedDict, total=False):
    """containers[].resources.claims[]: a pod claim name and optionally one request in it."""

    name: str
    request: str


class ResourceRequirements(TypedDict, total=False):
    limits: dict[str, str]
    requests: dict[str, str]
    claims: list[ResourceClaimRef]


class Container(TypedDict, total=False):
    name: str
    image: str
    resources: ResourceRequirements


class PodSpec(TypedDict, total=False):
    nodeName: str
    nodeSelector: dict[str, str]
    schedulerName: str
    priority: int
    priorityClassName: str
    containers: list[Container]
    initContainers: list[Container]
    resourceClaims: list[PodResourceClaim]
    resources: ResourceRequirements


class PodResourceClaimStatus(TypedDict, total=False):
    name: str
    resourceClaimName: str


class ContainerExtendedResourceRequest(TypedDict, total=False):
    containerName: str
    resourceName: str
    requestName: str


class PodExtendedResourceClaimStatus(TypedDict, total=False):
    resourceClaimName: str
    requestMappings: list[ContainerExtendedResourceRequest]


class PodStatus(TypedDict, total=False):
    phase: str
    resourceClaimStatuses: list[PodResourceClaimStatus]
    extendedResourceClaimStatus: PodExtendedResourceClaimStatus


class Pod(TypedDict, total=False):
    apiVersion: str
    kind: Literal["Pod"]
    metadata: ObjectMeta
    spec: PodSpec
    status: PodStatus


# -- accessors --------------------------------------------------------------------------------------
# Inputs may be any JSON shape (validation reports the problems); these never raise.

CLUSTER_SCOPED_KINDS = frozenset({"DeviceClass", "ResourceSlice", "Node", "DeviceTaintRule", "Namespace"})


def _meta(obj: object) -> dict[str, Any]:
    if isinstance(obj, dict):
        meta = obj.get("metadata")
        if isinstance(meta, dict):
            return meta
    return {}


def kind_of(obj: object) -> str:
    """The object's `kind`, or "" when it has none (or it is not a string)."""
    if isinstance(obj, dict):
        kind = obj.get("kind")
        if isinstance(kind, str):
            return kind
    return ""


def name_of(obj: object) -> str:
    """metadata.name, or "" when absent."""
    name = _meta(obj).get("name")
    return name if isinstance(name, str) else ""


def namespace_of(obj: object, default: str = "default") -> str:
    """metadata.namespace; namespaced kinds without one live in `default` (as kubectl would put them),
    cluster-scoped kinds give ""."""
    if kind_of(obj) in CLUSTER_SCOPED_KINDS:
        return ""
    ns = _meta(obj).get("namespace")
    return ns if isinstance(ns, str) and ns else default


def uid_of(obj: object) -> str:
    """metadata.uid, or ""."""
    uid = _meta(obj).get("uid")
    return uid if isinstance(uid, str) else ""


def labels_of(obj: object) -> dict[str, str]:
    """metadata.labels, or {} when absent or malformed."""
    labels = _meta(obj).get("labels")
    return labels if isinstance(labels, dict) else {}


def namespaced_name(obj: object) -> str:
    """ "namespace/name", the namespace `default` when unset: how kdra keys pods, claims and templates."""
    meta = _meta(obj)
    return f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"


def object_ref(obj: object) -> str:
    """ "Kind ns/name" for namespaced objects, "Kind name" for cluster-scoped ones: how messages
    name an object."""
    kind = kind_of(obj) or "<unknown kind>"
    name = name_of(obj) or "<unnamed>"
    ns = namespace_of(obj)
    return f"{kind} {ns}/{name}" if ns else f"{kind} {name}"


def clone(obj: Any) -> Any:
    """Deep copy of a JSON-shaped tree; several times faster than copy.deepcopy for objects."""
    if isinstance(obj, dict):
        return {k: clone(v) if isinstance(v, (dict, list)) else v for k, v in obj.items()}
    if isinstance(obj, list):
        return [clone(v) if isinstance(v, (dict, list)) else v for v in obj]
    return obj


__all__ = [
    "API_VERSION",
    "CLUSTER_SCOPED_KINDS",
    "CORE_API_VERSION",
    "AllocationResult",
    "Device",
    "DeviceAttribute",
    "DeviceCapacity",
    "DeviceClaim",
    "DeviceClass",
    "DeviceRequest",
    "DeviceTaint",
    "DeviceToleration",
    "Node",
    "Obj",
    "Pod",
    "ResourceClaim",
    "ResourceClaimTemplate",
    "ResourceSlice",
    "clone",
    "kind_of",
    "labels_of",
    "name_of",
    "namespace_of",
    "namespaced_name",
    "object_ref",
    "uid_of",
]
