"""Fleet -> Kubernetes objects: Nodes, ResourceSlices (as each vendor's driver publishes them), DeviceClasses.

Rendering is streaming and template-based: `iter_render` yields one node's objects at a time, and nodes of the
same pool share everything that does not vary between them (capacity maps, counter sets, attribute values) by
reference. The objects are plain JSON-compatible dicts; treat them as read-only and deep-copy before mutating.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from dataclasses import dataclass

from kdra.api.types import Obj
from kdra.api.versions import DEFAULT_VERSION
from kdra.deviceplugin.advertise import extended_resources
from kdra.drivers import amd, nvidia, tpu
from kdra.drivers.catalog import AmdModel, GpuModel, TpuModel
from kdra.drivers.common import PoolLayout, PoolPublisher, check_device, make_slices, string_attr
from kdra.fleets.spec import (
    LABEL_ACCELERATOR,
    LABEL_BLOCK,
    LABEL_NVLINK,
    LABEL_POOL,
    LABEL_RACK,
    LABEL_TPU_SLICE,
    LABEL_ZONE,
    Fleet,
    Pool,
    zone_assignment,
)


@dataclass(frozen=True)
class RenderOptions:
    dra: bool = True  # ResourceSlices + DeviceClasses
    legacy: bool = False  # extended resources in Node status (device-plugin view)
    nodes: bool = True
    kubernetes_version: str = DEFAULT_VERSION  # what the drivers of that release publish


def legacy_resources(pool: Pool) -> dict[str, int]:
    """The extended resources a device plugin would advertise on each node of the pool."""
    acc = pool.accelerator
    if acc is None:
        return {}
    return extended_resources(
        acc.model,
        acc.count,
        mig=acc.mig,
        mig_layouts=acc.mig_layouts,
        sharing=acc.sharing,
        partition=acc.partition,
    )


def legacy_allocatable(fleet: Fleet) -> dict[str, dict[str, int]]:
    """Node name -> extended resources of the device-plugin view of the fleet."""
    out: dict[str, dict[str, int]] = {}
    for pool in fleet.pools:
        res = legacy_resources(pool)
        for name in pool.node_names(fleet.name):
            out[name] = dict(res)
    return out


def node_topology(pool: Pool) -> list[dict[str, str]]:
    """Each node's topology labels (zone > block > rack, NVLink domain), numbered within the zone."""
    zones = zone_assignment(pool)
    t = pool.topology
    out: list[dict[str, str]] = []
    local: dict[str | None, int] = {}
    for i in range(pool.count):
        z = zones[i]
        li = local.get(z, 0)
        local[z] = li + 1
        prefix = f"{z}-{pool.name}" if z else pool.name
        labels: dict[str, str] = {}
        if z:
            labels[LABEL_ZONE] = z
        if t.nodes_per_rack:
            rack = li // t.nodes_per_rack
            labels[LABEL_RACK] = f"{prefix}-rack{rack}"
            if t.racks_per_block:
                labels[LABEL_BLOCK] = f"{prefix}-block{rack // t.racks_per_block}"
        if t.nvlink_domain_size:
            labels[LABEL_NVLINK] = f"{prefix}-nvl{li // t.nvlink_domain_size}"
        out.append(labels)
    return out


def _gfd_labels(pool: Pool) -> dict[str, str]:
    """Labels NVIDIA GPU feature discovery / GKE / AMD's labeller put on accelerator nodes (for
    nodeSelectors)."""
    acc = pool.accelerator
    if acc is None:
        return {}
    m = acc.model
    labels = {LABEL_ACCELERATOR: m.key}
    if isinstance(m, GpuModel):
        labels.update(
            {
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": m.product_name.replace(" ", "-"),
                "nvidia.com/gpu.count": str(acc.count),
                "nvidia.com/gpu.memory": str(m.memory_mib),
                "nvidia.com/mig.strategy": "mixed" if acc.mig == "static" else "none",
            }
        )
    elif isinstance(m, AmdModel):
        labels.update(
            {"amd.com/gpu.product-name": m.product_name.replace(" ", "_"), "amd.com/gpu.family": m.family}
        )
    elif isinstance(m, TpuModel):
        labels.update(
            {
                "cloud.google.com/gke-tpu-accelerator": m.accelerator,
                "cloud.google.com/gke-tpu-topology": acc.tpu_topology or "",
                "cloud.google.com/gke-accelerator-count": str(acc.count),
            }
        )
    return labels


class PoolRenderer:
    """Renders the nodes of one pool; built once per pool, so per-node work is only what differs."""

    def __init__(self, fleet: Fleet, pool: Pool, options: RenderOptions, nv: nvidia.NvidiaRenderer) -> None:
        self.fleet, self.pool, self.options, self.nv = fleet, pool, options, nv
        self.names = pool.node_names(fleet.name)
        self.topology = node_topology(pool)
        self.base_labels = {
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            LABEL_POOL: pool.name,
            **_gfd_labels(pool),
            **pool.labels,
        }
        res = {"cpu": pool.cpu, "memory": pool.memory, "pods": str(pool.pods)}
        if options.legacy:
            res.update({k: str(v) for k, v in legacy_resources(pool).items()})
        self.resources = res
        self.taints = [t.to_dict() for t in pool.taints]
        self.device_taints = [t.to_dict() for t in pool.device_taints]
        self._checked = False

    def node(self, i: int) -> Obj:
        name = self.names[i]
        labels = {**self.base_labels, **self.topology[i], "kubernetes.io/hostname": name}
        acc = self.pool.accelerator
        if acc and LABEL_NVLINK in labels and isinstance(acc.model, GpuModel):
            labels["nvidia.com/gpu.clique"] = f"{self.fleet.name}.{labels[LABEL_NVLINK]}"
        if acc and isinstance(acc.model, TpuModel) and acc.tpu_topology:
            hosts, _ = acc.model.hosts_per_slice(acc.tpu_topology)
            labels[LABEL_TPU_SLICE] = f"{self.pool.name}-s{i // hosts}"
        node: Obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
        if self.taints:
            node["spec"] = {"taints": [dict(t) for t in self.taints]}
        node["status"] = {
            "capacity": dict(self.resources),
            "allocatable": dict(self.resources),
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        }
        return node

    def layout(self, i: int) -> PoolLayout | None:
        acc = self.pool.accelerator
        if acc is None:
            return None
        name = self.names[i]
        m = acc.model
        if isinstance(m, GpuModel):
            extra: Obj = {}
            nvl = self.topology[i].get(LABEL_NVLINK)
            if nvl:
                extra[nvidia.NVLINK_DOMAIN_ATTRIBUTE] = string_attr(nvl)
            gpus = [
                nvidia.simulated_gpu(
                    m,
                    name,
                    g,
                    acc.count,
                    # static: an empty layout means MIG off on that GPU (published whole, like legacy)
                    mig_enabled=acc.mig == "dynamic" or (acc.mig == "static" and bool(acc.mig_layouts[g])),
                    mig_layout=acc.mig_layouts[g] if acc.mig == "static" else (),
                    pcie_roots=acc.pcie_roots,
                    numa_nodes=acc.numa_nodes,
                )
                for g in range(acc.count)
            ]
            layout = self.nv.layout(name, gpus, extra)
        elif isinstance(m, AmdModel):
            assert acc.partition is not None
            agpus = [
                amd.simulated_amd_gpu(m, acc.partition, name, g, acc.count, acc.pcie_roots)
                for g in range(acc.count)
            ]
            layout = amd.AmdRenderer().layout(name, agpus)
        else:
            layout = tpu.TpuRenderer().layout(name, m, acc.count, acc.tpu_topology)
        layout.max_devices_per_slice = self.pool.max_devices_per_slice
        if self.device_taints:
            for g in layout.groups:
                g.devices = [{**d, "taints": self.device_taints} for d in g.devices]
        return layout

    def slices(self, i: int) -> list[Obj]:
        layout = self.layout(i)
        if layout is None:
            return []
        if not self._checked:  # identical nodes: checking the first one checks them all
            where = f"Fleet {self.fleet.name}: pool {self.pool.name}"
            for g in layout.groups:
                for d in g.devices:
                    check_device(d, where)
            self._checked = True
        return make_slices(layout)


def device_classes(fleet: Fleet) -> list[Obj]:
    """The DeviceClasses each vendor's Helm chart installs, for the vendors present in the fleet."""
    vendors = {p.accelerator.vendor for p in fleet.pools if p.accelerator}
    out: list[Obj] = []
    if "nvidia" in vendors:
        out += nvidia.device_classes()
    if "amd" in vendors:
        out += amd.device_classes()
    if "google" in vendors:
        out += tpu.device_classes()
    return out


def pool_renderers(fleet: Fleet, options: RenderOptions = RenderOptions()) -> list[PoolRenderer]:
    renderers: dict[tuple[bool, str | int | None], nvidia.NvidiaRenderer] = {}
    out = []
    for pool in fleet.pools:
        acc = pool.accelerator
        key = (bool(acc and acc.mig == "dynamic"), acc.sharing if acc else None)
        nv = renderers.get(key)
        if nv is None:
            nv = renderers[key] = nvidia.NvidiaRenderer(
                nvidia.NvidiaConfig(
                    fleet.driver_version,
                    fleet.cuda_driver_version,
                    key[0],
                    key[1],
                    kubernetes_version=options.kubernetes_version,
                )
            )
        out.append(PoolRenderer(fleet, pool, options, nv))
    return out


def iter_render(
    fleet: Fleet,
    *,
    dra: bool = True,
    legacy: bool = False,
    nodes: bool = True,
    kubernetes_version: str = DEFAULT_VERSION,
) -> Iterator[Obj]:
    """DeviceClasses, then per node its Node and its ResourceSlices, one node at a time, as the drivers
    of that Kubernetes release publish them."""
    options = RenderOptions(dra=dra, legacy=legacy, nodes=nodes, kubernetes_version=kubernetes_version)
    if dra:
        yield from device_classes(fleet)
    for pr in pool_renderers(fleet, options):
        for i in range(pr.pool.count):
            if nodes:
                yield pr.node(i)
            if dra:
                yield from pr.slices(i)


def render(
    fleet: Fleet,
    *,
    dra: bool = True,
    legacy: bool = False,
    nodes: bool = True,
    kubernetes_version: str = DEFAULT_VERSION,
) -> list[Obj]:
    """Every object of the fleet as a list (see iter_render for the streaming form).

    The cyclic garbage collector is paused while the list is built: a million freshly allocated, acyclic
    dicts would otherwise trigger repeated full collections that scan everything built so far (3x slower)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return list(
            iter_render(fleet, dra=dra, legacy=legacy, nodes=nodes, kubernetes_version=kubernetes_version)
        )
    finally:
        if enabled:
            gc.enable()


class FleetPublisher:
    """The drivers of a whole fleet over time: republishing after a change (a MIG reconfiguration, a pool
    switched to DynamicMIG, GPUs removed) bumps `pool.generation` of exactly the pools whose devices
    changed, as the kubelet plugins do, and names the slices that no longer exist.

    `publish(fleet)` returns (slices to create or update, names of slices to delete). Unchanged pools are not
    returned. Cost: a content hash per pool, so use it for reconfiguration events, not per scheduling cycle.
    """

    def __init__(self) -> None:
        self._pub = PoolPublisher()
        self._names: dict[tuple[str, str], list[str]] = {}

    def generation(self, driver: str, pool: str) -> int:
        return self._pub.generation(driver, pool)

    def publish(self, fleet: Fleet) -> tuple[list[Obj], list[str]]:
        changed: list[Obj] = []
        deleted: list[str] = []
        seen: set[tuple[str, str]] = set()
        for pr in pool_renderers(fleet):
            for i in range(pr.pool.count):
                layout = pr.layout(i)
                if layout is None:
                    continue
                key = (layout.driver, layout.node)
                seen.add(key)
                before = self._pub.generation(*key)
                slices = self._pub.publish(layout)
                if self._pub.generation(*key) == before:
                    continue
                names = [s["metadata"]["name"] for s in slices]
                deleted.extend(n for n in self._names.get(key, ()) if n not in names)
                self._names[key] = names
                changed.extend(slices)
        for key in sorted(set(self._names) - seen):
            deleted.extend(self._names.pop(key))
        return changed, sorted(deleted)
