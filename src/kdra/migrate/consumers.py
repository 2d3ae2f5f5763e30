"""Those who read GPU counts from the device-plugin requests a claim replaces, and what keeps them right.

- KubeRay sets Ray's `num-gpus` (and `{"TPU": N}` in `resources`) from the Ray container's limits
  (ray-operator common/pod.go, addWellKnownAcceleratorResources: the first limit, in name order, whose name
  ends in `gpu` or is a MIG profile; google.com/tpu -> TPU). Without the limit Ray schedules no GPU tasks on
  the node and the autoscaler sees GPU-less groups: the count moves into `rayStartParams` (or the group's
  `resources`) unless set there already.
- Kubeflow Trainer turns `numProcPerNode: auto` (torch) into the CPU count when the `node` container has no
  GPU limit, and an MPI `numProcPerNode` of 1 into the GPU count (runtime.GetNumGPUPerNode): the count is
  pinned in the runtime's mlPolicy.
- ResourceQuota counts `requests.nvidia.com/gpu`; claims are counted as `<class>.deviceclass.resource.k8s.io/
  devices`, so the key moves to the class the requests now use.
- LimitRange: LimitRanger gives every container of the namespace without the resource its `default` /
  `defaultRequest`, and rejects one below `min`, the migrated containers included (they no longer name it):
  those keys would hand them a device-plugin GPU besides their claim, or refuse them; `max` only bounds what
  is asked, so it stays.
- Kueue's ClusterQueue counts the resources it covers from the pods' requests: a covered nvidia.com/gpu stops
  counting migrated workloads (they ask through claims), so say so.
"""

from __future__ import annotations

import json

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from kdra.migrate import resources as res
from kdra.migrate.context import DocContext
from kdra.migrate.convert import Container
from kdra.migrate.kinds import Found
from kdra.migrate.nodes import get, get_path, lookup, own_entries, scalar, text_of
from kdra.migrate.report import Where

_RAY_ACCELERATORS = {"google.com/tpu": "TPU", "aws.amazon.com/neuroncore": "neuron_cores"}


def kuberay(ctx: DocContext, where: Where, obj: Node, found: Found, containers: list[Container]) -> None:
    """Keep Ray's GPU/TPU counts for the group whose pod spec was converted."""
    group = get_path(obj, *found.path[:-2])  # .../<group>.template.spec
    entries = get(found.node, "containers")
    first = entries.value[0] if isinstance(entries, SequenceNode) and entries.value else None
    ray = next((c for c in containers if c.node is first), None)
    if not isinstance(group, MappingNode) or ray is None:
        return
    limits = {k: v for k, v in ray.values.items() if v > 0}
    gpu_key = next((k for k in sorted(limits) if res.kuberay_gpu_key(k)), None)
    tpu = limits.get(res.GOOGLE_TPU)
    role = found.role or "group"
    group_resources = get(group, "resources")
    if isinstance(group_resources, MappingNode):  # KubeRay's group-level Resources field takes precedence
        names = [str(k.value).lower() for _, k, _ in own_entries(group_resources)]
        if gpu_key and not any(n.endswith("gpu") for n in names):
            ctx.editor.add(group_resources, "GPU", str(limits[gpu_key]))
            ctx.note(
                where,
                f"{role}: resources.GPU={limits[gpu_key]} added (KubeRay set Ray's GPUs from the {gpu_key} "
                "limit)",
            )
        if tpu and "tpu" not in names:
            ctx.editor.add(group_resources, "TPU", str(tpu))
            ctx.note(
                where,
                f"{role}: resources.TPU={tpu} added (KubeRay set Ray's TPUs from the google.com/tpu limit)",
            )
        return
    params_key, params, _ = lookup(group, "rayStartParams")
    additions: dict[str, str] = {}
    if gpu_key and get(params, "num-gpus") is None:
        additions["num-gpus"] = str(limits[gpu_key])
    resources_node = get(params, "resources")
    if tpu:
        current = _ray_resources(text_of(resources_node)) if resources_node is not None else {}
        if current is None:
            ctx.report.warnings.append(
                f"{where.describe()}: {role}: rayStartParams.resources is not JSON, so KubeRay ignored it "
                "and "
                "added no TPU; left as is"
            )
        elif not any(name in current for name in _RAY_ACCELERATORS.values()):
            current["TPU"] = tpu
            text = "'" + json.dumps(current, separators=(",", ":")) + "'"
            if resources_node is not None:
                assert isinstance(resources_node, ScalarNode)
                ctx.editor.replace(resources_node, resources_node.start_mark.index, text)
            else:
                additions["resources"] = text
    if not additions:
        return
    if isinstance(params, MappingNode):
        for key, value in additions.items():
            ctx.editor.add(params, key, value)
    elif params_key is not None and params is not None:
        ctx.editor.replace(params, params_key.end_mark.index, additions)
    else:
        ctx.editor.add(group, "rayStartParams", additions)
    said = ", ".join(f"{k}={v}" for k, v in additions.items())
    source = gpu_key if "num-gpus" in additions else res.GOOGLE_TPU
    ctx.note(where, f"{role}: rayStartParams {said} added (KubeRay set it from the {source} limit)")


def _ray_resources(text: str | None) -> dict[str, float] | None:
    if text is None:
        return {}
    try:
        data = json.loads(text.strip("'\"` "))
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def trainer(ctx: DocContext, where: Where, obj: Node, found: Found, containers: list[Container]) -> None:
    """Pin numProcPerNode where Kubeflow Trainer derived it from the `node` container's GPU limit."""
    job = get_path(obj, *found.path[:-4])  # spec.template.spec.replicatedJobs[i]
    if text_of(get(job, "name")) != "node":
        return
    jobs = get_path(obj, *found.path[:-5])
    if isinstance(jobs, SequenceNode):
        # replicatedJobs is keyed by name: a second `node` is invalid (JobSet refuses it), and which one
        # Kubeflow Trainer reads numProcPerNode from is undefined
        first = next(i for i, j in enumerate(jobs.value) if text_of(get(j, "name")) == "node")
        if jobs.value[first] is not job:
            name = get(job, "name")
            line = name.start_mark.line if name is not None else None
            ctx.invalid(
                f"{where.at((*found.path[:-4], 'name'), line)}: Duplicate value: 'node' "
                f"(also replicatedJobs[{first}]; replicatedJobs names must be unique)"
            )
            return
    node = next((c for c in containers if c.name == "node"), None)
    if node is None:
        return
    gpus = next((v for k, v in node.values.items() if "gpu" in k.lower() and v > 0), 0)
    if not gpus:
        return
    policy = get_path(obj, "spec", "mlPolicy")
    for framework, default in (("torch", "auto"), ("mpi", 1)):
        key_node, section, _ = lookup(policy, framework)
        if key_node is None:
            continue
        current_node = get(section, "numProcPerNode")
        current = scalar(current_node) if current_node is not None else default
        if framework == "torch" and current != "auto":
            continue
        if framework == "mpi" and (current != 1 or gpus <= 1):
            continue
        if isinstance(current_node, ScalarNode):
            ctx.editor.replace_text(current_node, str(gpus))
        elif isinstance(section, MappingNode):
            ctx.editor.add(section, "numProcPerNode", gpus)
        elif section is not None:
            ctx.editor.replace(section, key_node.end_mark.index, {"numProcPerNode": gpus})
        ctx.note(
            where,
            f"mlPolicy.{framework}.numProcPerNode={gpus} (was {current}; Kubeflow Trainer set it from the "
            "node "
            "container's GPU limit)",
        )


def quota(ctx: DocContext, where: Where, obj: Node) -> None:
    """ResourceQuota: `requests.<device-plugin resource>` -> `<class>.deviceclass.resource.k8s.io/devices`."""
    hard = get_path(obj, "spec", "hard")
    if not isinstance(hard, MappingNode):
        return
    present = {str(k.value) for _, k, _ in own_entries(hard)}
    for _, key, value in own_entries(hard):
        name = str(key.value)
        match = res.QUOTA_PREFIX.match(name)
        if not match or not res.is_vendor_resource(match.group(2)):
            continue
        ctx.consume(key)
        resource = match.group(2)
        device_class = res.quota_class(resource)
        path = ("spec", "hard", name)
        if device_class is None:
            ctx.blocked(
                f"{where.at(path, key.start_mark.line)}: no DRA quota counts what {resource} counted",
                "DRA quota counts devices per DeviceClass (<class>.deviceclass.resource.k8s.io/devices); a "
                "MIG "
                "profile or a share needs a DeviceClass of its own to be counted apart",
            )
            continue
        new_key = device_class + res.DEVICE_QUOTA_SUFFIX
        ctx.editor.delete(hard, name)
        if new_key not in present:
            ctx.editor.add(hard, new_key, scalar(value) if isinstance(value, ScalarNode) else text_of(value))
            present.add(new_key)
        ctx.report.changes.append(f"{where.describe()}: spec.hard: {name} -> {new_key}")
        ctx.note(where, f"quota {name} -> {new_key} (quota counts claimed devices per DeviceClass)")


_LIMIT_RANGE_ADDS = ("default", "defaultRequest", "min")


def limit_range(ctx: DocContext, where: Where, obj: Node) -> None:
    """LimitRange: a device-plugin resource in `default`, `defaultRequest` or `min` cannot stay (LimitRanger
    would add it to, or require it of, every migrated container); in `max` or `maxLimitRequestRatio` it only
    bounds requests that migrated pods no longer make."""
    items = get_path(obj, "spec", "limits")
    if not isinstance(items, SequenceNode):
        return
    for index, item in enumerate(items.value):
        if not isinstance(item, MappingNode):
            continue
        for _, field_key, table in own_entries(item):
            field = str(field_key.value)
            if not isinstance(table, MappingNode):
                continue
            for _, key, value in own_entries(table):
                name = str(key.value)
                if not res.is_vendor_resource(name) or id(key) in ctx.consumed:
                    continue  # not a device-plugin resource, or an aliased item already reported
                ctx.consume(key)
                path = ("spec", "limits", index, field, name)
                if field in _LIMIT_RANGE_ADDS:
                    ctx.blocked(
                        f"{where.at(path, key.start_mark.line)}: {name}: {text_of(value)} in a LimitRange's "
                        f"{field} would reach every migrated container of the namespace",
                        "LimitRanger gives each container that does not name the resource its default (and "
                        "refuses one below min): the migrated containers would ask the device plugin for a "
                        "GPU besides their claim, or be refused; DRA has no per-container default (a claim "
                        "is asked for explicitly), so remove the key",
                    )
                else:
                    ctx.report.warnings.append(
                        f"{where.at(path, key.start_mark.line)}: {name}: {text_of(value)} left as is: it "
                        "bounds device-plugin requests only, which migrated pods no longer make; DRA claims "
                        "are not bounded by a LimitRange"
                    )


def kueue_queue(ctx: DocContext, where: Where, obj: Node) -> None:
    """Kueue ClusterQueue covering a device-plugin resource: its quota stops counting migrated workloads."""
    groups = get_path(obj, "spec", "resourceGroups")
    if not isinstance(groups, SequenceNode):
        return
    covered: list[str] = []
    for group in groups.value:
        names = get(group, "coveredResources") if isinstance(group, MappingNode) else None
        if isinstance(names, SequenceNode):
            covered += [str(n.value) for n in names.value if isinstance(n, ScalarNode)]
    vendor = [name for name in covered if res.is_vendor_resource(name)]
    if vendor:
        ctx.report.warnings.append(
            f"{where.describe()}: quota on {', '.join(vendor)} left as is: Kueue counts it from the pods' "
            "requests, and migrated workloads ask through ResourceClaims instead, which Kueue counts only "
            "under a resource name its Configuration maps their DeviceClass to (DRA support, alpha); cover "
            "that name, or the quota stops holding them"
        )


_VOLCANO_QUEUE_FIELDS = (("spec", "capability"), ("spec", "deserved"), ("spec", "guarantee", "resource"))


def volcano_queue(ctx: DocContext, where: Where, obj: Node) -> None:
    """Volcano Queue capping a device-plugin resource (capability, deserved, guarantee): its share stops
    counting migrated pods, which ask through claims instead."""
    found: list[str] = []
    for path in _VOLCANO_QUEUE_FIELDS:
        table = get_path(obj, *path)
        if isinstance(table, MappingNode):
            names = [str(k.value) for _, k, _ in own_entries(table) if res.is_vendor_resource(str(k.value))]
            found += [f"{'.'.join(path[1:])}[{name}]" for name in names]
    if found:
        ctx.report.warnings.append(
            f"{where.describe()}: queue share on {', '.join(found)} left as is: Volcano counts it from the "
            "pods' requests, and migrated pods ask through ResourceClaims instead, so the share stops "
            "holding them; bound the queue by cpu or memory, or keep those workloads on the device plugin"
        )


def min_resources(ctx: DocContext, where: Where, obj: Node) -> None:
    """A gang's `spec.minResources` (Volcano Job and PodGroup, scheduler-plugins' PodGroup) naming a
    device-plugin resource: the gang is admitted only when the cluster has that much of it idle, which nodes
    whose devices a DRA driver publishes never report, so the migrated gang would wait forever."""
    table = get_path(obj, "spec", "minResources")
    if not isinstance(table, MappingNode):
        return
    for _, key, value in own_entries(table):
        name = str(key.value)
        if not res.is_vendor_resource(name):
            continue
        ctx.consume(key)
        ctx.blocked(
            f"{where.at(('spec', 'minResources', name), key.start_mark.line)}: {name}: {text_of(value)} in "
            "minResources: the gang is admitted only when the cluster's idle "
            f"{name} covers it (Volcano's enqueue, coscheduling's PreFilter), and nodes whose devices a DRA "
            "driver publishes report none, so the migrated gang would stay pending",
            "remove the key (the pods' claims hold their devices; minMember or minAvailable still gates the "
            "gang), or use --mode extended-resource (KEP-5004)",
        )
