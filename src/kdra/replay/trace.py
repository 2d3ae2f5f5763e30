"""The Alibaba GPU trace v2023 ("openb") as kdra objects: nodes -> Fleet, pods -> Pods + ResourceClaims.

Columns (shared/traces/alibaba-gpu-2023/README.md): nodes `sn,cpu_milli,memory_mib,gpu,model`; pods
`name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,
scheduled_time`. Any lists in the same columns are accepted; a malformed row is an InputError naming the
file, the line and the column.

GPUs are published in consumable-shares mode with 1000 shares per GPU (the trace's milli-GPU), so a
`gpu_milli` < 1000 pod asks for `capacity.requests.shares` of one GPU, and whole-GPU pods ask for all
1000 shares of each of `num_gpu` GPUs. `gpu_spec` (`V100M16|V100M32`) becomes a CEL selector on the
device's productName. Data terms: research or study use only, attribute Alibaba, cite the FGD paper.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from kdra.api.wellknown import NVIDIA_GPU_CLASS, NVIDIA_GPU_DRIVER
from kdra.errors import InputError
from kdra.fleets.openb import MODEL_MAP, TRACE_LABEL, csv_int, csv_rows, fleet_from_rows, read_node_rows
from kdra.fleets.spec import MAX_NODES, Fleet
from kdra.scheduler.gpupolicies import MILLI, PodRequest

GPU_CLASS = NVIDIA_GPU_CLASS
DRIVER = NVIDIA_GPU_DRIVER
SHARES_PER_GPU = MILLI
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
TRACE_DIR_CANDIDATES = (
    Path(__file__).resolve().parents[3] / "shared" / "traces" / "alibaba-gpu-2023",  # <repo>/shared
    Path(__file__).resolve().parents[4] / "shared" / "traces" / "alibaba-gpu-2023",  # next to the repo
    Path("/work/shared/traces/alibaba-gpu-2023"),
)
DEFAULT_NODES = "openb_node_list_gpu_node.csv"
DEFAULT_PODS = "openb_pod_list_default.csv"
BUNDLED_NODES = "bundled:alibaba-openb"  # the nodes_source of the bundled node list


@dataclass(frozen=True, slots=True)
class TraceNode:
    name: str
    cpu: int  # millicores
    mem: int  # MiB
    gpus: int
    model: str  # trace code (G2, T4, V100M16, ...)


@dataclass(frozen=True, slots=True)
class TracePod:
    name: str
    request: PodRequest
    qos: str = ""
    phase: str = ""
    creation: int | None = None
    deletion: int | None = None
    scheduled: int | None = None
    line: int = 0


@dataclass
class Trace:
    nodes: list[TraceNode]
    pods: list[TracePod]
    nodes_source: str = ""
    pods_source: str = ""

    @property
    def gpu_capacity_milli(self) -> int:
        return sum(n.gpus for n in self.nodes) * MILLI

    def fleet(self, shares: int | None = SHARES_PER_GPU) -> Fleet:
        """The fleet of the node list (kdra.fleets.openb), GPUs in consumable-shares mode (`shares`
        per GPU) or, with shares=None, exclusive devices (the device-plugin comparison)."""
        # No node limit here: load_trace applied the user's (--max-nodes); the fleets replay builds itself
        # (the device-plugin comparison's copies of the fleet) may be larger.
        fleet = fleet_from_rows(
            ((n.name, n.cpu, n.mem, n.gpus, n.model) for n in self.nodes),
            source=self.nodes_source,
            max_nodes=len(self.nodes),
        )
        if shares is None:
            return fleet
        pools = []
        for p in fleet.pools:
            acc = p.accelerator
            if acc is not None:
                acc = dataclasses.replace(acc, sharing=shares)
            pools.append(dataclasses.replace(p, accelerator=acc))
        return dataclasses.replace(fleet, pools=pools)


def default_trace_dir() -> Path | None:
    for d in TRACE_DIR_CANDIDATES:
        if (d / DEFAULT_PODS).exists():
            return d
    return None


def read_nodes(path: str | Path) -> list[TraceNode]:
    """The node list of a CSV in the openb columns (kdra.fleets.openb.read_node_rows: a malformed row is an
    error naming the file, the line and the column)."""
    return [TraceNode(*row) for _line, row in read_node_rows(path)]


def read_pods(path: str | Path) -> list[TracePod]:
    p = Path(path)
    pods = []
    seen: set[str] = set()
    for line, row in csv_rows(p, POD_COLUMNS):
        src = str(p)
        name = (row.get("name") or "").strip()
        if not name:
            raise InputError(f"{p}: line {line}: column name: empty pod name")
        if name in seen:
            raise InputError(f"{p}: line {line}: column name: duplicate pod {name!r}")
        seen.add(name)
        cpu = csv_int(src, line, row, "cpu_milli", 0)
        mem = csv_int(src, line, row, "memory_mib", 0)
        num_gpu = csv_int(src, line, row, "num_gpu", 0)
        milli = csv_int(src, line, row, "gpu_milli", 0)
        assert cpu is not None and mem is not None and num_gpu is not None and milli is not None
        if milli > MILLI:
            raise InputError(f"{p}: line {line}: column gpu_milli: {milli} exceeds {MILLI} (one whole GPU)")
        if num_gpu == 0 and milli:
            raise InputError(f"{p}: line {line}: column gpu_milli: {milli} with num_gpu 0")
        if num_gpu > 0 and milli == 0:
            raise InputError(f"{p}: line {line}: column gpu_milli: 0 with num_gpu {num_gpu}")
        if num_gpu > 1 and milli != MILLI:
            raise InputError(
                f"{p}: line {line}: column gpu_milli: {milli}: a GPU share needs num_gpu 1 (got {num_gpu})"
            )
        spec = (row.get("gpu_spec") or "").strip()
        models: tuple[str, ...] = ()
        if spec and spec.lower() != "nan":
            models = tuple(m.strip() for m in spec.split("|") if m.strip())
            unknown = [m for m in models if m not in MODEL_MAP]
            if unknown:
                raise InputError(
                    f"{p}: line {line}: column gpu_spec: unknown GPU model {unknown[0]!r} "
                    f"(known: {', '.join(MODEL_MAP)})"
                )
        creation = csv_int(src, line, row, "creation_time", 0, optional=True)
        deletion = csv_int(src, line, row, "deletion_time", 0, optional=True)
        scheduled = csv_int(src, line, row, "scheduled_time", 0, optional=True)
        if creation is not None and deletion is not None and deletion < creation:
            raise InputError(
                f"{p}: line {line}: column deletion_time: {deletion} is before creation_time {creation}"
            )
        pods.append(
            TracePod(
                name,
                PodRequest(cpu, mem, num_gpu, milli, models),
                (row.get("qos") or "").strip(),
                (row.get("pod_phase") or "").strip(),
                creation,
                deletion,
                scheduled,
                line,
            )
        )
    if not pods:
        raise InputError(f"{p}: no pods")
    return pods


def bundled_nodes() -> list[TraceNode]:
    """The node list of the bundled `alibaba-openb` fleet (kdra.fleets data), names as in the trace."""
    text = resources.files("kdra.fleets").joinpath("data/alibaba-openb-shapes.csv").read_text()
    out = []
    i = 0
    for raw in text.splitlines():
        if not raw.strip() or raw.startswith("#"):
            continue
        n, cpu, mem, gpus, code = raw.split(",")
        for _ in range(int(n)):
            out.append(TraceNode(f"openb-node-{i:04d}", int(cpu), int(mem), int(gpus), code))
            i += 1
    return out


def sample(trace: Trace, nodes: int, seed: int = 0) -> Trace:
    """A seeded sample of the trace at a smaller scale: `nodes` of its nodes drawn at random, and as large a
    share of its pods, drawn at random among those that fit some drawn node. Node and pod names are kept, in
    the trace's order. A small fleet with the trace's mix, for a live cluster (the e2e test of the replay
    through `kdra scheduler`)."""
    if nodes >= len(trace.nodes):
        return trace
    rng = random.Random(f"sample:{seed}")
    picked = set(rng.sample(range(len(trace.nodes)), nodes))
    kept = [n for i, n in enumerate(trace.nodes) if i in picked]

    def fits(r: PodRequest) -> bool:
        return any(
            n.cpu >= r.cpu
            and n.mem >= r.mem
            and n.gpus >= r.num_gpu
            and (not r.models or n.model in r.models)
            for n in kept
        )

    want = round(len(trace.pods) * nodes / len(trace.nodes))
    fitting = [i for i, p in enumerate(trace.pods) if fits(p.request)]
    chosen = set(rng.sample(fitting, min(want, len(fitting))))
    pods = [p for i, p in enumerate(trace.pods) if i in chosen]
    return Trace(kept, pods, f"{trace.nodes_source} ({nodes} sampled, seed {seed})", trace.pods_source)


def load_trace(
    nodes: str | Path | None = None, pods: str | Path | None = None, max_nodes: int = MAX_NODES
) -> Trace:
    """The trace: `nodes`/`pods` CSV paths, defaulting to the bundled node list (the `alibaba-openb`
    fleet) and the shared trace's default pod list; a node list of more than `max_nodes` is refused."""
    if nodes is None:
        node_list = bundled_nodes()
        nodes_source = BUNDLED_NODES
    else:
        node_list = read_nodes(nodes)
        nodes_source = str(nodes)
        if len(node_list) > max_nodes:
            raise InputError(f"{nodes}: more than {max_nodes:,} nodes (--max-nodes N lifts the limit)")
    if pods is None:
        d = default_trace_dir()
        if d is None:
            raise InputError(
                f"the default pod list {DEFAULT_PODS} was not found (looked in "
                f"{', '.join(str(c) for c in TRACE_DIR_CANDIDATES)}); pass --pods CSV"
            )
        pods = d / DEFAULT_PODS
    return Trace(node_list, read_pods(pods), nodes_source, str(pods))


# -- Kubernetes objects --------------------------------------------------------------------------


def product_names(models: tuple[str, ...]) -> list[str]:
    from kdra.drivers.catalog import lookup

    out = []
    for m in models:
        pn = getattr(lookup(MODEL_MAP[m]), "product_name", "")
        if pn and pn not in out:
            out.append(pn)
    return out


def claim_for(
    pod_name: str,
    req: PodRequest,
    namespace: str = "default",
    pinned_uuids: list[str] | None = None,
    shares: bool = True,
    pin_attribute: str = "uuid",
) -> dict[str, Any] | None:
    """The pod's ResourceClaim (None for CPU-only pods). `pinned_uuids` narrows the request to the GPUs
    a placement policy chose (an extra CEL selector on the device uuid); `shares=False` asks for whole
    exclusive GPUs (the device-plugin model: a share is rounded up to a GPU). `pin_attribute` names the
    device attribute the pin compares (`uuid`, or a qualified `resource.kubernetes.io/pciBusID`, which
    repeats across nodes of one shape and so keeps the number of distinct CEL expressions small)."""
    if req.num_gpu == 0:
        return None
    selectors: list[dict[str, Any]] = []
    if req.models:
        names = product_names(req.models)
        lit = ", ".join(f"'{n}'" for n in names)
        selectors.append({"cel": {"expression": f"device.attributes['{DRIVER}'].productName in [{lit}]"}})
    if pinned_uuids:
        lit = ", ".join(f"'{u}'" for u in pinned_uuids)
        domain, _, ident = pin_attribute.rpartition("/")
        selectors.append(
            {"cel": {"expression": f"device.attributes['{domain or DRIVER}'].{ident} in [{lit}]"}}
        )
    exactly: dict[str, Any] = {
        "deviceClassName": GPU_CLASS,
        "allocationMode": "ExactCount",
        "count": req.num_gpu,
    }
    if selectors:
        exactly["selectors"] = selectors
    if shares:
        exactly["capacity"] = {"requests": {"shares": str(req.gpu_milli if req.is_share else SHARES_PER_GPU)}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"{pod_name}-gpu", "namespace": namespace, "uid": f"claim-{pod_name}"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }


def pod_objects(tp: TracePod, namespace: str = "default", shares: bool = True) -> list[dict[str, Any]]:
    """A Pod with CPU and memory requests and, for GPU pods, its ResourceClaim (Kubernetes shape)."""
    req = tp.request
    container: dict[str, Any] = {
        "name": "main",
        "image": "registry.k8s.io/pause:3.10",
        "resources": {"requests": {"cpu": f"{req.cpu}m", "memory": f"{req.mem}Mi"}},
    }
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": tp.name,
            "namespace": namespace,
            "labels": {"kdra.dev/trace": "alibaba-openb"},
            "annotations": {"kdra.dev/trace-qos": tp.qos} if tp.qos else {},
        },
        "spec": {"containers": [container]},
    }
    claim = claim_for(tp.name, req, namespace, shares=shares)
    if claim is None:
        return [pod]
    container["resources"]["claims"] = [{"name": "gpu"}]
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim["metadata"]["name"]}]
    return [pod, claim]


__all__ = [
    "TRACE_LABEL",
    "Trace",
    "TraceNode",
    "TracePod",
    "claim_for",
    "load_trace",
    "pod_objects",
    "read_nodes",
    "read_pods",
]
