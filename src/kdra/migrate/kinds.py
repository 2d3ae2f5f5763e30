"""Where workloads keep their pod specs: one table, kind -> paths, for built-in kinds and the AI CRDs.

A path is dotted keys from the object's root to a pod spec (a mapping with `containers`), with two wildcards:
`*` for every key of a mapping (PyTorchJob's replica types) and `[]` for every item of a sequence (Ray worker
groups, JobSet jobs). The role that names the claim template comes from the wildcards: the key, or the item's
`name` / `groupName`. `kdra migrate --kind KIND[.GROUP]=PATH[,PATH]` adds an entry the same way.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from yaml.nodes import MappingNode, Node, SequenceNode

from kdra.errors import InputError
from kdra.migrate.nodes import Path, get, keys, text_of


@dataclass(frozen=True)
class Shape:
    """Where the containers of a pod spec are and how the pod gets its claims."""

    lists: tuple[tuple[str, ...], ...] = (("initContainers",), ("containers",))
    singles: tuple[str, ...] = ()  # keys holding one container (Argo `container`, KServe `model`)
    single_name: str = ""  # the name a single container gets when it has none
    claims: str = "resourceClaims"  # the pod-spec key that takes pod claims, or "podSpecPatch" (Argo)


POD = Shape()
ARGO = Shape(
    lists=(("initContainers",), ("sidecars",), ("containerSet", "containers")),
    singles=("container", "script"),
    single_name="main",
    claims="podSpecPatch",
)
KSERVE = Shape(
    singles=(
        "model",
        "sklearn",
        "xgboost",
        "tensorflow",
        "pytorch",
        "triton",
        "onnx",
        "huggingface",
        "pmml",
        "lightgbm",
        "paddle",
        "art",
    ),
    single_name="kserve-container",
)


@dataclass(frozen=True)
class Place:
    """One kind of pod spec inside a workload."""

    path: str
    role: str = ""  # a fixed role; "" takes it from the wildcards
    shape: Shape = POD
    consumer: str = ""  # who else reads the GPU limits: "ray" (KubeRay), "trainer" (Kubeflow Trainer)
    refuse: str = ""  # why GPU requests here cannot become claims, and what to do instead
    # The operator that builds the pods from this field (a CRD's own resources, not a pod spec): a request
    # there is refused as that operator's, since no claim can be given in the field.
    owner: str = ""

    def segments(self) -> list[str]:
        return _segments(self.path)


_KUBEFLOW = {
    "PyTorchJob": "pytorchReplicaSpecs",
    "TFJob": "tfReplicaSpecs",
    "MPIJob": "mpiReplicaSpecs",
    "XGBoostJob": "xgbReplicaSpecs",
    "PaddleJob": "paddleReplicaSpecs",
    "JAXJob": "jaxReplicaSpecs",
}


def _ray(base: str) -> tuple[Place, ...]:
    prefix = f"{base}." if base else ""
    return (
        Place(f"{prefix}headGroupSpec.template.spec", role="head", consumer="ray"),
        Place(f"{prefix}workerGroupSpecs[].template.spec", consumer="ray"),
    )


_ARGO_TEMPLATES = (Place("spec.templates[]", shape=ARGO),)
_NO_CLAIMS = "use --mode extended-resource (KEP-5004) so the nvidia.com/gpu-style request keeps working"

KINDS: dict[str, tuple[Place, ...]] = {
    "Pod": (Place("spec"),),
    "PodTemplate": (Place("template.spec"),),
    "ReplicationController": (Place("spec.template.spec"),),
    **{
        f"{k}.apps": (Place("spec.template.spec"),)
        for k in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet")
    },
    # extensions/v1beta1, as old GPU examples still write them (Kubernetes stopped serving it in 1.16): the
    # same pod template; the engine warns that the apiVersion must become apps/v1.
    **{f"{k}.extensions": (Place("spec.template.spec"),) for k in ("Deployment", "DaemonSet", "ReplicaSet")},
    # OpenShift's DeploymentConfig (deprecated in 4.14, still common with OpenShift AI): a core pod template.
    "DeploymentConfig.apps.openshift.io": (Place("spec.template.spec"),),
    "Job.batch": (Place("spec.template.spec"),),
    "CronJob.batch": (Place("spec.jobTemplate.spec.template.spec"),),
    **{f"{k}.kubeflow.org": (Place(f"spec.{field}.*.template.spec"),) for k, field in _KUBEFLOW.items()},
    **{
        f"{k}.trainer.kubeflow.org": (
            Place("spec.template.spec.replicatedJobs[].template.spec.template.spec", consumer="trainer"),
        )
        for k in ("TrainingRuntime", "ClusterTrainingRuntime")
    },
    "TrainJob.trainer.kubeflow.org": (
        Place(
            "spec",
            refuse="a TrainJob cannot attach a ResourceClaim to its nodes (spec.trainer.resourcesPerNode "
            "takes "
            "no claims); give the TrainingRuntime's `node` container the claim (kdra migrate converts "
            "TrainingRuntime and ClusterTrainingRuntime) and drop the GPU from resourcesPerNode, or "
            + _NO_CLAIMS,
        ),
    ),
    # Kubeflow Notebooks: the notebook controller copies spec.template.spec into the StatefulSet it creates.
    "Notebook.kubeflow.org": (Place("spec.template.spec"),),
    "RayCluster.ray.io": _ray("spec"),
    "RayJob.ray.io": (
        *_ray("spec.rayClusterSpec"),
        Place("spec.submitterPodTemplate.spec", role="submitter"),
    ),
    "RayService.ray.io": _ray("spec.rayClusterConfig"),
    "JobSet.jobset.x-k8s.io": (Place("spec.replicatedJobs[].template.spec.template.spec"),),
    "LeaderWorkerSet.leaderworkerset.x-k8s.io": (
        Place("spec.leaderWorkerTemplate.leaderTemplate.spec", role="leader"),
        Place("spec.leaderWorkerTemplate.workerTemplate.spec", role="worker"),
    ),
    # LWS's DisaggregatedSet: a LeaderWorkerSet spec per role (prefill, decode), templates named after it.
    "DisaggregatedSet.disaggregatedset.x-k8s.io": (
        Place("spec.roles[].spec.leaderWorkerTemplate.leaderTemplate.spec"),
        Place("spec.roles[].spec.leaderWorkerTemplate.workerTemplate.spec"),
    ),
    "InferenceService.serving.kserve.io": (
        Place(
            "spec.predictor.workerSpec",
            role="worker",
            shape=KSERVE,
            refuse="KServe multi-node serving (workerSpec) sizes tensor/pipeline parallelism from the "
            "nvidia.com/gpu limits of the head and worker pods; " + _NO_CLAIMS,
        ),
        Place("spec.predictor", role="predictor", shape=KSERVE),
        Place("spec.transformer", role="transformer", shape=KSERVE),
        Place("spec.explainer", role="explainer", shape=KSERVE),
    ),
    # KServe's LLMInferenceService (and the LLMInferenceServiceConfig its baseRefs merge in): native pod specs
    # for the main (decode) workload, its multi-node workers, the prefill workload and the scheduler. The
    # controller takes parallelism from spec.parallelism, not from the GPU limits.
    **{
        f"{k}.serving.kserve.io": (
            Place("spec.template", role="main"),
            Place("spec.worker", role="worker"),
            Place("spec.prefill.template", role="prefill"),
            Place("spec.prefill.worker", role="prefill-worker"),
            Place("spec.router.scheduler.template", role="scheduler"),
        )
        for k in ("LLMInferenceService", "LLMInferenceServiceConfig")
    },
    **{
        f"{k}.serving.kserve.io": (
            Place(
                "spec",
                refuse="a ServingRuntime's pod spec has no resourceClaims (KServe ServingRuntimePodSpec); "
                "move "
                "the GPU request to the InferenceService (spec.predictor.model.resources), which kdra "
                "migrate "
                "converts, or " + _NO_CLAIMS,
            ),
        )
        for k in ("ServingRuntime", "ClusterServingRuntime")
    },
    **{
        f"{k}.argoproj.io": _ARGO_TEMPLATES
        for k in ("Workflow", "WorkflowTemplate", "ClusterWorkflowTemplate")
    },
    "CronWorkflow.argoproj.io": (Place("spec.workflowSpec.templates[]", shape=ARGO),),
    "Job.batch.volcano.sh": (Place("spec.tasks[].template.spec"),),
    # Kueue's Workload (what Kueue admits; one written by hand): a pod template per pod set.
    "Workload.kueue.x-k8s.io": (Place("spec.podSets[].template.spec"),),
    # Seldon Core v1: a v1.PodSpec per componentSpecs item, but the schema of every release up to 1.18.2 (the
    # Helm chart's CRD, k8s.io/api 0.28 types) has no resourceClaims nor containers' resources.claims: the
    # API server prunes them and the pods start without GPUs. 1.19.0-rc.1's schema is the first with them.
    "SeldonDeployment.machinelearning.seldon.io": (
        Place(
            "spec.predictors[].componentSpecs[].spec",
            refuse="Seldon Core's SeldonDeployment schema has no resourceClaims up to 1.18.2 (its CRD prunes "
            "them, and the pods would start without GPUs); with Seldon Core 1.19 or later convert it with "
            "--kind SeldonDeployment.machinelearning.seldon.io=spec.predictors[].componentSpecs[].spec, or "
            + _NO_CLAIMS,
        ),
    ),
    # Grove's PodCliqueSet (what Dynamo v1beta1 renders to): a pod spec per clique, but Grove puts a clique
    # into its multi-node NVLink ComputeDomain (grove.io/mnnvl-group) only when a container requests
    # nvidia.com/gpu (mnnvl.HasGPUInPodSpec counts no claims): a migrated clique would lose that domain.
    "PodCliqueSet.grove.io": (
        Place(
            "spec.template.cliques[].spec.podSpec",
            refuse="Grove enrolls a clique in its multi-node NVLink ComputeDomain (grove.io/mnnvl-group) "
            "only when a container requests nvidia.com/gpu (claims are not counted), so a migrated clique "
            "would run without its NVLink domain; without MNNVL, convert with --kind "
            "PodCliqueSet.grove.io=spec.template.cliques[].spec.podSpec, or " + _NO_CLAIMS,
        ),
    ),
    # RoleBasedGroup (sgl-project/rbg): native pod templates per role, in v1alpha1 (`template`) and v1alpha2
    # (a pattern per role: standalone, leader/worker, custom components), and reusable `roleTemplates`. A
    # role's patches (strategic merge onto a roleTemplate or the leader/worker template) are not pod specs.
    "RoleBasedGroup.workloads.x-k8s.io": (
        Place("spec.roles[].template.spec"),
        Place("spec.roles[].standalonePattern.template.spec"),
        Place("spec.roles[].leaderWorkerPattern.template.spec"),
        Place("spec.roles[].customComponentsPattern.components[].template.spec"),
        Place("spec.roleTemplates[].template.spec"),
        *(
            Place(
                path,
                refuse="RoleBasedGroup merges this patch into a pod template (strategic merge), and kdra "
                "migrate does not rewrite patches: move the GPU request into the template it patches "
                "(spec.roleTemplates[].template or the role's template, which kdra migrate converts), or "
                + _NO_CLAIMS,
            )
            for path in (
                "spec.roles[].templateRef.patch",
                "spec.roles[].templatePatch",
                "spec.roles[].leaderWorkerSet",
                "spec.roles[].standalonePattern.templateRef.patch",
                "spec.roles[].leaderWorkerPattern.templateRef.patch",
                "spec.roles[].leaderWorkerPattern.leaderTemplatePatch",
                "spec.roles[].leaderWorkerPattern.workerTemplatePatch",
            )
        ),
    ),
    # Tekton builds each step's container from its computeResources, and its pod template (a TaskRun's
    # podTemplate, a PipelineRun's taskRunTemplate.podTemplate: tektoncd/pipeline pod.Template) has no
    # resourceClaims, so no claim can reach a step.
    **{
        f"{k}.tekton.dev": (
            Place(
                "spec",
                refuse="Tekton's pod template (podTemplate, taskRunTemplate.podTemplate) takes no "
                "resourceClaims, so a step's pod cannot get a claim; " + _NO_CLAIMS,
            ),
        )
        for k in ("Task", "ClusterTask", "TaskRun", "Pipeline", "PipelineRun")
    },
    # Operators that build the pods from a field of their own: no claim can be given there.
    "NIMService.apps.nvidia.com": (
        Place(
            "spec.resources",
            owner="the NIM operator",
            refuse="give the GPU to the NIMService as a claim in spec.draResources (NIM operator releases "
            "with DRA support: a resourceClaimTemplateName, or a claimSpec with deviceClassName "
            "gpu.nvidia.com) and drop it from spec.resources, which takes no claims; or " + _NO_CLAIMS,
        ),
    ),
    **{
        f"{k}.nvidia.com": (
            Place(
                owned,
                owner="the Dynamo operator",
                refuse="Dynamo's v1alpha1 component resources (its `gpu` count or nvidia.com/gpu) become the "
                "main container's device-plugin request in the operator; write the component as v1beta1, "
                "whose podTemplate is a native pod template that can take the claim (see its refusal for "
                "multi-node components), or " + _NO_CLAIMS,
            ),
            # v1beta1 (the storage version): a native pod template per component, but for multi-node
            # components the operator picks vLLM's mode and sets --data-parallel-size-local from the main
            # container's GPU limit (GPUs per node), which a claim does not show it.
            Place(
                template,
                refuse="the Dynamo operator sizes multi-node components (`multinode`) from the main "
                "container's GPU limit (GPUs per node: vLLM's Ray or data-parallel mode, "
                "--data-parallel-size-local), which a claim does not show it; when no component is "
                f"multi-node, convert with --kind {k}.nvidia.com={template}, or " + _NO_CLAIMS,
            ),
        )
        for k, owned, template in (
            ("DynamoGraphDeployment", "spec.services.*.resources", "spec.components[].podTemplate.spec"),
            ("DynamoComponentDeployment", "spec.resources", "spec.podTemplate.spec"),
        )
    },
    "NodeSet.slinky.slurm.net": (
        Place(
            "spec.slurmd.resources",
            owner="the Slurm operator (Slinky)",
            refuse="spec.slurmd is a container kept outside the pod template (spec.template.spec), which "
            "kdra migrate does not pair; write the claim by hand (a ResourceClaimTemplate, "
            "spec.template.spec.resourceClaims naming it, spec.slurmd.resources.claims naming that entry), "
            "or " + _NO_CLAIMS,
        ),
    ),
    **{
        f"{k}.serving.knative.dev": (
            Place(
                "spec.template.spec",
                refuse="Knative Serving accepts only the pod fields it allow-lists, and resourceClaims is "
                "not "
                "one of them; " + _NO_CLAIMS,
            ),
        )
        for k in ("Service", "Configuration")
    },
}

# Where a kind's accelerator keys cap node capacity instead of requesting devices: no claim can replace them,
# and they are no request left behind either. Left as is, with a warning of what changes for them.
CAPACITY: dict[str, tuple[Place, ...]] = {
    "NodePool.karpenter.sh": (
        Place(
            "spec.limits",
            refuse="Karpenter counts this cap against the nvidia.com/gpu-style capacity its nodes report, "
            "which nodes whose devices a DRA driver publishes (no device plugin) do not report: the cap "
            "stops holding them; bound the node pool by instance types or cpu instead",
        ),
    ),
}

# kind: List items are converted in place; these kinds hold them.
LIST_SUFFIX = "List"


def kind_key(kind: str, api_version: str) -> str:
    group = api_version.split("/", 1)[0] if "/" in api_version else ""
    return f"{kind}.{group}" if group else kind


def places_for(kind: str, api_version: str | None, table: dict[str, tuple[Place, ...]]) -> tuple[Place, ...]:
    """The places of a kind; without apiVersion, the kind's only entry (if the name is unambiguous)."""
    if api_version:
        return table.get(kind_key(kind, api_version), ())
    matches = [places for key, places in table.items() if key.split(".", 1)[0] == kind]
    return matches[0] if len(matches) == 1 else ()


_SEGMENT = re.compile(r"[A-Za-z0-9_-]+(?:\[\])?|\*")


@functools.lru_cache(maxsize=1024)
def _segments(path: str) -> list[str]:
    out: list[str] = []
    for part in path.split("."):
        if not _SEGMENT.fullmatch(part):
            raise InputError(f"pod spec path {path!r}: {part!r} is not a key, `*` or `key[]`")
        if part.endswith("[]"):
            out += [part[:-2], "[]"]
        else:
            out.append(part)
    return out


def parse_kind_option(text: str) -> tuple[str, tuple[Place, ...]]:
    """`--kind KIND[.GROUP]=PATH[,PATH...]` -> table entry."""
    name, sep, paths = text.partition("=")
    if not sep or not name or not paths:
        raise InputError(
            f"--kind {text!r}: expected KIND[.GROUP]=PATH[,PATH...], e.g. "
            "MyJob.example.com=spec.template.spec"
        )
    if not re.fullmatch(r"[A-Z][A-Za-z0-9]*(\.[a-z0-9-]+)*", name):
        raise InputError(
            f"--kind {text!r}: {name!r} is not KIND or KIND.GROUP (e.g. AppWrapper.workload.codeflare.dev)"
        )
    places = tuple(Place(p.strip()) for p in paths.split(",") if p.strip())
    for place in places:
        place.segments()
    return name, places


@dataclass
class Found:
    """A pod spec found in an object."""

    place: Place
    path: Path  # from the object root to the pod spec
    role: str
    node: MappingNode


def pod_specs(obj: Node, places: tuple[Place, ...]) -> Iterator[Found]:
    """Every pod spec of an object, in table order then document order."""
    for place in places:
        for path, roles, node in _walk(_NODES, obj, place.segments(), (), []):
            if isinstance(node, MappingNode):
                role = place.role or "-".join(r for r in roles if r)
                yield Found(place, path, role, node)


@dataclass(frozen=True)
class _Reader:
    """How the walker reads a document: YAML nodes (what kdra migrate rewrites, aliases and merge keys
    followed) or plain data (migrated output as a safe YAML load gives it)."""

    entries: Callable[[Any], Iterable[tuple[str, Any]]]  # a mapping's (key, value)s, read as they are reached
    get: Callable[[Any, str], Any]  # a mapping's value of a key; None for anything else
    items: Callable[[Any], list[Any] | None]  # a sequence's items; None for anything else
    name: Callable[[Any], str]  # an item's name or groupName; "" without


_NODES = _Reader(
    entries=lambda node: ((key, get(node, key)) for key in keys(node)),
    get=get,
    items=lambda node: node.value if isinstance(node, SequenceNode) else None,
    name=lambda item: text_of(get(item, "name")) or text_of(get(item, "groupName")) or "",
)
_PLAIN = _Reader(
    entries=lambda node: ((str(k), v) for k, v in node.items()) if isinstance(node, dict) else (),
    get=lambda node, key: node.get(key) if isinstance(node, dict) else None,
    items=lambda node: node if isinstance(node, list) else None,
    name=lambda item: str(
        (item.get("name") or item.get("groupName") or "") if isinstance(item, dict) else ""
    ),
)


def _walk(
    read: _Reader, node: Any, segments: list[str], path: Path, roles: list[str]
) -> Iterator[tuple[Path, list[str], Any]]:
    """(path, the roles its wildcards name, value) of every place `segments` reach from `node`."""
    if node is None:
        return
    if not segments:
        yield path, roles, node
        return
    head, rest = segments[0], segments[1:]
    if head == "*":
        for key, value in read.entries(node):
            yield from _walk(read, value, rest, (*path, key), [*roles, key.lower()])
    elif head == "[]":
        for index, item in enumerate(read.items(node) or ()):
            yield from _walk(read, item, rest, (*path, index), [*roles, read.name(item) or str(index)])
    else:
        yield from _walk(read, read.get(node, head), rest, (*path, head), roles)


def matches_prefix(place: Place, path: Path) -> bool:
    """Whether `path` lies inside a place (wildcards match any key or index)."""
    segments = place.segments()
    if len(path) < len(segments):
        return False
    for segment, key in zip(segments, path, strict=False):
        if segment == "[]":
            if not isinstance(key, int):
                return False
        elif segment != "*" and segment != key:
            return False
    return True


def plain_pod_specs(
    obj: Any, table: dict[str, tuple[Place, ...]] | None = None, converted_only: bool = True
) -> list[tuple[Path, str, Any]]:
    """(path, role, pod spec) of a workload given as plain data (what a safe YAML load gives), for readers
    of migrated output; places that refuse claims are left out unless `converted_only` is False."""
    if not isinstance(obj, dict):
        return []
    places = places_for(str(obj.get("kind", "")), obj.get("apiVersion"), table or KINDS)
    out: list[tuple[Path, str, Any]] = []
    seen: set[int] = set()
    for place in places:
        if place.refuse and converted_only:
            continue
        for path, roles, spec in _walk(_PLAIN, obj, place.segments(), (), []):
            if isinstance(spec, dict) and id(spec) not in seen:
                seen.add(id(spec))
                out.append((path, place.role or "-".join(r for r in roles if r), spec))
    return out
