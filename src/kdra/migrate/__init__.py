"""Conversion of device-plugin manifests (`nvidia.com/gpu: N`) to DRA (resource.k8s.io/v1) ResourceClaims.

`kdra migrate` rewrites, one workload at a time, the accelerator requests of pod templates (Pod, Deployment,
StatefulSet, DaemonSet, ReplicaSet, ReplicationController, Job, CronJob, PodTemplate, Kubeflow
*Job replica specs, Ray head/worker groups, JobSet replicated jobs, LeaderWorkerSet leader/worker templates):

- `nvidia.com/gpu`, `nvidia.com/mig-<profile>`, `amd.com/gpu`, `google.com/tpu`, and HAMi's
  `nvidia.com/gpumem`, `nvidia.com/gpumem-percentage` (with `--gpu-memory`), `nvidia.com/gpucores` become one
  ResourceClaimTemplate per pod template (`<workload>[-<role>]-gpu`, `-tpu` when only TPUs) with one request
  per container (so containers get distinct devices, as under the device plugin), `spec.resourceClaims` and
  `containers[].resources.claims`. MIG profiles become CEL selectors on `mig.nvidia.com`'s `profile`
  attribute; HAMi shares become `capacity.requests` (`memory`, `cores`) on `hami-core-gpu.project-hami.io`.
- GPU product node selectors / required node affinity (`nvidia.com/gpu.product`, `nvidia.com/gpu.family`,
  `cloud.google.com/gke-accelerator`) become CEL selectors on `productName` / `architecture`.
- The DeviceClasses the result needs are emitted once, at the end. `--mode extended-resource` (KEP-5004)
  leaves manifests alone and emits DeviceClasses with `extendedResourceName` instead.

Deliberately not converted (each is either not expressible in a claim or would change behaviour silently):

- Fractional or non-integer counts (`nvidia.com/gpu: 0.5`), requests that differ from limits: errors, since
  the device plugin would have rejected or mis-served them too; the error names the field and gives a hint.
- `nvidia.com/gpu.shared` (time-slicing replicas) and HAMi's `nvidia.com/priority`: left as is with a
  warning; sharing is configured in the driver's opaque config, not in a claim.
- MIG "single" strategy (`nvidia.com/gpu` that is really a MIG slice on that node): the node decides, the
  manifest cannot tell, so `nvidia.com/gpu` always becomes a full GPU.
- Preferred node affinity on product labels (claims have no soft selectors), required affinity whose terms
  differ in their product requirements (ORed terms cannot be split), `DoesNotExist`, unknown GKE accelerator
  values, and TPU topology labels (`cloud.google.com/gke-tpu-*`: a node-pool property, kept as node
  selectors).
- Tolerations for GPU taints, `runtimeClassName`, environment (NVIDIA_VISIBLE_DEVICES), Ray's
  `rayStartParams.num-gpus`: kept; they still apply to nodes and processes under DRA.
- Helm chart templates and values files: only rendered manifests are migrated (templates are not YAML).
- Init containers: a regular init container reuses an app container's request when it asks for the same
  devices (it runs before them, as under the device plugin, where it could reuse their GPUs); otherwise it
  gets its own request, so such a pod can need more devices than under the device plugin.
"""

from __future__ import annotations

from kdra.migrate.convert import CLAIMS, EXTENDED_RESOURCE, MODES, Options
from kdra.migrate.engine import FileResult, classes_text, join_outputs, migrate_text

__all__ = [
    "CLAIMS",
    "EXTENDED_RESOURCE",
    "MODES",
    "FileResult",
    "Options",
    "classes_text",
    "join_outputs",
    "migrate_text",
]
