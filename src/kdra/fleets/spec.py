"""The Fleet: a cluster description people write by hand (apiVersion kdra.dev/v1alpha1, kind Fleet).

```yaml
apiVersion: kdra.dev/v1alpha1
kind: Fleet
metadata: {name: example}
spec:
  nvidia: {driverVersion: 580.126.20, cudaDriverVersion: 13.0.0}   # optional, driver-wide
  pools:
  - name: h100
    count: 16                       # nodes
    namePattern: "h100-{zone}-{index:02d}"   # {pool} {index} {zone} {fleet}; default "{pool}-{index}"
    cpu: "192"                      # Kubernetes quantities
    memory: 2Ti
    pods: 110
    labels: {team: research}
    topology:                       # topology levels become node labels
      zones: [us-east-1a, us-east-1b]    # nodes split into contiguous, balanced groups
      nodesPerRack: 4               # kdra.dev/rack
      racksPerBlock: 2              # kdra.dev/block
      nvlinkDomainSize: 8           # nodes per multi-node NVLink domain: kdra.dev/nvlink-domain label,
                                    # nvidia.com/gpu.clique label and the kdra.dev/nvlinkDomain device
                                    # attribute
    accelerator:
      model: H100-SXM-80GB          # a catalog key or alias (kdra cluster catalog lists them)
      count: 8                      # per node
      mig: {mode: static, layout: [3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb]}   # none | static | dynamic
      sharing: {mode: consumable-shares, shares: 4}   # or shares: unlimited | memory
      partition: cpx_nps1           # AMD compute/memory partition mode
      topology: 4x4                 # TPU slice topology
      pcie:                         # GPUs' PCIe/NUMA layout (NVIDIA, AMD); default: one root per GPU,
        gpusPerRoot: 2              #   half the GPUs per NUMA node. DGX/HGX-style pairs behind one PCIe
        numaNodes: 2                #   switch share resource.kubernetes.io/pcieRoot; numaNode from numaNodes
        # roots: [[0, 1], [2, 3], [4, 5], [6, 7]]   # or explicit groups of GPU indexes (every GPU once)
        # numa: [[0, 1, 2, 3], [4, 5, 6, 7]]
    taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]      # Node taints
    deviceTaints: [{key: maintenance, effect: NoSchedule}]  # DRA device taints (KEP-5055), max 16
    maxDevicesPerSlice: 128         # cut slices smaller (<= 128; <= 64 with counters or device taints)
    startIndex: 0                   # first {index}
    price: 98.32                    # per node-hour (any currency); kdra plan minimises the sum
    minCount: 0                     # kdra plan: the pool never shrinks below this many nodes
    maxCount: 32                    #   nor grows past this many (a cloud quota, cluster-autoscaler's max)
    names: [a, b]                   # explicit node names instead of namePattern (exactly count of them)
```

MIG layouts: `layout` is one list of profile names for every GPU (or `all-<profile>`, e.g. `all-1g.10gb`,
for the profile's maximum instance count); `layouts` gives one list per GPU (an empty list = MIG off on that
GPU). A layout must fit the GPU like `nvidia-smi mig -cgi` would place it: free memory slices at a valid
placement and the sum of SMs/engines/memory within the GPU's.

Every problem raises kdra.errors.InputError naming the fleet, the pool, the field path and the rule.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from kdra.drivers.catalog import AmdModel, AmdPartitionMode, GpuModel, MigProfile, Model, TpuModel, lookup
from kdra.drivers.nvidia import DEFAULT_CUDA_DRIVER_VERSION, DEFAULT_DRIVER_VERSION, place_mig_layout
from kdra.errors import InputError

API_VERSION = "kdra.dev/v1alpha1"
KIND = "Fleet"

LABEL_ZONE = "topology.kubernetes.io/zone"
LABEL_BLOCK = "kdra.dev/block"
LABEL_RACK = "kdra.dev/rack"
LABEL_NVLINK = "kdra.dev/nvlink-domain"
LABEL_POOL = "kdra.dev/pool"
LABEL_ACCELERATOR = "kdra.dev/accelerator"
LABEL_TPU_SLICE = "kdra.dev/tpu-slice"

# Sane bounds, so a typo (count: 100000000) fails at once instead of rendering for hours: Kubernetes' own
# scalability envelope is 5,000 nodes (large managed clusters reach 15,000); --max-nodes lifts the first.
MAX_NODES = 15_000
MAX_ACCELERATORS_PER_NODE = 128  # the largest accelerator servers have 16; a slice holds 128 devices

_QUANTITY = re.compile(r"^([+-]?[0-9.]+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+)?$")
_MULT = {
    None: Fraction(1),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def _qualified_name_problem(key: str) -> str | None:
    """Kubernetes' IsQualifiedName for label and taint keys: [prefix/]name."""
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return "prefix part must be a lowercase RFC 1123 subdomain"
    if not name or len(name) > 63 or not _QUALIFIED_NAME.match(name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
            "with an alphanumeric character (at most 63 characters)"
        )
    return None


def parse_quantity(value: object) -> Fraction:
    """Exact value of a Kubernetes quantity (kdra.api.quantity is the full implementation; this is enough for
    node sizes). Raises ValueError."""
    if isinstance(value, bool):
        raise ValueError("not a quantity")
    if isinstance(value, int):
        return Fraction(value)
    m = _QUANTITY.match(str(value).strip())
    if not m:
        raise ValueError(f"quantities must match the regular expression '{_QUANTITY.pattern}'")
    num, suffix = m.groups()
    base = Fraction(num)
    if suffix and suffix[0] in "eE":
        return base * Fraction(10) ** int(suffix[1:])
    return base * _MULT[suffix]


@dataclass(frozen=True)
class Taint:
    key: str
    effect: str
    value: str = ""

    def to_dict(self) -> dict[str, str]:
        d = {"key": self.key, "effect": self.effect}
        if self.value:
            d["value"] = self.value
        return d


@dataclass(frozen=True)
class Topology:
    zones: tuple[str, ...] = ()
    nodes_per_rack: int = 0
    racks_per_block: int = 0
    nvlink_domain_size: int = 0


@dataclass(frozen=True)
class Accelerator:
    model: Model
    count: int
    mig: str = "none"  # none | static | dynamic
    mig_layouts: tuple[tuple[tuple[MigProfile, int], ...], ...] = ()  # per GPU: (profile, placement start)
    sharing: str | int | None = None  # None | "unlimited" | "memory" | N
    partition: AmdPartitionMode | None = None
    tpu_topology: str | None = None
    # PCIe and NUMA layout of the node's GPUs: the root (PCIe switch / root complex) index and the NUMA node
    # of each GPU; () = the driver's default (each GPU on its own root, half the GPUs per NUMA node).
    pcie_roots: tuple[int, ...] = ()
    numa_nodes: tuple[int, ...] = ()

    @property
    def vendor(self) -> str:
        return self.model.vendor


@dataclass
class Pool:
    name: str
    count: int
    cpu: str = "64"
    memory: str = "512Gi"
    pods: int = 110
    name_pattern: str = "{pool}-{index}"
    start_index: int = 0
    names: tuple[str, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    topology: Topology = field(default_factory=Topology)
    accelerator: Accelerator | None = None
    taints: tuple[Taint, ...] = ()
    device_taints: tuple[Taint, ...] = ()
    max_devices_per_slice: int = 128
    # What `kdra plan` needs of a node group (ignored by rendering): price per node-hour, and the size
    # bounds cluster-autoscaler's node groups have.
    price: float | None = None
    min_count: int = 0
    max_count: int | None = None

    def node_names(self, fleet: str = "") -> list[str]:
        if self.names:
            return list(self.names)
        zones = zone_assignment(self)
        return [
            self.name_pattern.format(
                pool=self.name, index=self.start_index + i, zone=zones[i] or "", fleet=fleet
            )
            for i in range(self.count)
        ]


@dataclass
class Fleet:
    name: str
    pools: list[Pool]
    driver_version: str = DEFAULT_DRIVER_VERSION
    cuda_driver_version: str = DEFAULT_CUDA_DRIVER_VERSION
    description: str = ""
    source: str = ""

    @property
    def node_count(self) -> int:
        return sum(p.count for p in self.pools)


def zone_assignment(pool: Pool) -> list[str | None]:
    """Zones split the pool's nodes into contiguous groups whose sizes differ by at most one."""
    zones = pool.topology.zones
    if not zones:
        return [None] * pool.count
    return [zones[(i * len(zones)) // pool.count] if pool.count else None for i in range(pool.count)]


# --- parsing
# -------------------------------------------------------------------------------------------------


class _Ctx:
    def __init__(self, fleet: str, pool: str | None = None, index: int | None = None) -> None:
        self.fleet, self.pool, self.index = fleet, pool, index

    def err(self, path: str, msg: str) -> InputError:
        where = f"Fleet {self.fleet}"
        if self.index is not None:
            where += f": pool {self.pool or '?'} (spec.pools[{self.index}])"
        return InputError(f"{where}: {path}: {msg}")


def _check_fields(ctx: _Ctx, path: str, obj: object, allowed: Sequence[str]) -> Mapping[str, Any]:
    if not isinstance(obj, Mapping):
        raise ctx.err(path, f"Invalid value: expected a mapping, got {type(obj).__name__}")
    for k in obj:
        if k not in allowed:
            raise ctx.err(
                f"{path}.{k}" if path else str(k), f"unknown field {k!r} (allowed: {', '.join(allowed)})"
            )
    return obj


def _int(ctx: _Ctx, path: str, v: object, minimum: int = 0) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ctx.err(path, f"Invalid value: {v!r}: must be an integer")
    if v < minimum:
        raise ctx.err(path, f"Invalid value: {v}: must be greater than or equal to {minimum}")
    return v


def _price(ctx: _Ctx, path: str, v: object) -> float:
    """A price per node-hour: a non-negative number, or a decimal string ("98.32")."""
    try:
        price = float(v) if isinstance(v, (int, float, str)) and not isinstance(v, bool) else -1.0
    except ValueError:
        price = -1.0
    if not (price >= 0 and price < float("inf")):
        raise ctx.err(path, f"Invalid value: {v!r}: must be a non-negative number (price per node-hour)")
    return price


def _str(ctx: _Ctx, path: str, v: object) -> str:
    if not isinstance(v, str) or not v:
        raise ctx.err(path, f"Invalid value: {v!r}: must be a non-empty string")
    return v


_VERSION = re.compile(r"^[0-9]+(\.[0-9]+){0,2}$")


def _version(ctx: _Ctx, path: str, v: object) -> str:
    """Driver versions become `version` attributes: numeric major[.minor[.patch]] (published as semver)."""
    s = str(v)
    if not _VERSION.match(s):
        raise ctx.err(path, f"Invalid value: {s!r}: must be a numeric version such as 580.126.20")
    return s


def _quantity(ctx: _Ctx, path: str, v: object) -> str:
    """A Kubernetes quantity, checked with the API's own parser (its wording in the message)."""
    from kdra.api.quantity import parse_quantity_any

    if isinstance(v, bool) or not isinstance(v, (str, int, float)):
        raise ctx.err(path, f"Invalid value: {v!r}: must be a quantity such as 64 or 512Gi")
    try:
        q = parse_quantity_any(v)
    except (ValueError, TypeError) as e:
        raise ctx.err(path, f"Invalid value: {v!r}: {e}") from None
    if q.sign() < 0:
        raise ctx.err(path, f"Invalid value: {v!r}: must be greater than or equal to 0")
    return str(v)


def _labels(ctx: _Ctx, path: str, v: object) -> dict[str, str]:
    if not isinstance(v, Mapping):
        raise ctx.err(path, "Invalid value: expected a mapping of label keys to string values")
    out: dict[str, str] = {}
    for k, val in v.items():
        if not isinstance(k, str) or not k:
            raise ctx.err(path, f"Invalid value: {k!r}: label keys must be non-empty strings")
        problem = _qualified_name_problem(k)
        if problem:
            raise ctx.err(path, f"Invalid value: {k!r}: {problem}")
        sval = str(val) if isinstance(val, (int, float)) and not isinstance(val, bool) else val
        if not isinstance(sval, str) or len(sval) > 63 or not _LABEL_VALUE.match(sval):
            raise ctx.err(
                f"{path}[{k}]",
                f"Invalid value: {val!r}: a valid label value must be 63 characters "
                "or less and consist of alphanumerics, '-', '_' or '.'",
            )
        out[k] = sval
    return out


def _taints(ctx: _Ctx, path: str, v: object, effects: Sequence[str]) -> tuple[Taint, ...]:
    if not isinstance(v, list):
        raise ctx.err(path, "Invalid value: expected a list of taints")
    out = []
    for i, t in enumerate(v):
        p = f"{path}[{i}]"
        t = _check_fields(ctx, p, t, ("key", "value", "effect"))
        effect = t.get("effect")
        if effect not in effects:
            raise ctx.err(
                f"{p}.effect",
                f"Unsupported value: {effect!r}: supported values: " + ", ".join(f'"{e}"' for e in effects),
            )
        key = _str(ctx, f"{p}.key", t.get("key"))
        problem = _qualified_name_problem(key)
        if problem:
            raise ctx.err(f"{p}.key", f"Invalid value: {key!r}: {problem}")
        out.append(Taint(key, str(effect), str(t.get("value", ""))))
    return tuple(out)


def _groups(ctx: _Ctx, path: str, raw: object, count: int) -> tuple[int, ...]:
    """Explicit groups of GPU indexes (each GPU in exactly one) -> the group index of each GPU."""
    if not isinstance(raw, list) or not raw:
        raise ctx.err(path, "Invalid value: expected a list of lists of GPU indexes")
    of: dict[int, int] = {}
    for gi, group in enumerate(raw):
        if not isinstance(group, list) or not group:
            raise ctx.err(f"{path}[{gi}]", "Invalid value: expected a non-empty list of GPU indexes")
        for j, g in enumerate(group):
            if isinstance(g, bool) or not isinstance(g, int) or not 0 <= g < count:
                raise ctx.err(
                    f"{path}[{gi}][{j}]", f"Invalid value: {g!r}: must be a GPU index from 0 to {count - 1}"
                )
            if g in of:
                raise ctx.err(f"{path}[{gi}][{j}]", f"Duplicate value: GPU {g} is already in group {of[g]}")
            of[g] = gi
    missing = [g for g in range(count) if g not in of]
    if missing:
        raise ctx.err(path, f"Invalid value: GPU(s) {missing} in no group: every GPU of the node needs one")
    return tuple(of[g] for g in range(count))


def _even(ctx: _Ctx, path: str, raw: object, count: int, what: str) -> int:
    n = _int(ctx, path, raw, 1)
    if count % n:
        raise ctx.err(path, f"Invalid value: {n}: must divide the node's {count} GPUs ({what})")
    return n


def _pcie(ctx: _Ctx, path: str, v: object, count: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    if v is None:
        return (), ()
    p = _check_fields(ctx, path, v, ("gpusPerRoot", "roots", "numaNodes", "numa"))
    for a, b in (("gpusPerRoot", "roots"), ("numaNodes", "numa")):
        if a in p and b in p:
            raise ctx.err(f"{path}.{b}", f"Forbidden: give {a} or {b}, not both")
    roots: tuple[int, ...] = ()
    if "gpusPerRoot" in p:
        per = _even(ctx, f"{path}.gpusPerRoot", p["gpusPerRoot"], count, "GPUs per PCIe root")
        roots = tuple(g // per for g in range(count))
    elif "roots" in p:
        roots = _groups(ctx, f"{path}.roots", p["roots"], count)
    numa: tuple[int, ...] = ()
    if "numaNodes" in p:
        n = _even(ctx, f"{path}.numaNodes", p["numaNodes"], count, "NUMA nodes")
        numa = tuple(g * n // count for g in range(count))
    elif "numa" in p:
        numa = _groups(ctx, f"{path}.numa", p["numa"], count)
    if roots and not numa:  # half the roots (not the GPUs) on each socket, so a root is on one NUMA node
        n_roots = max(roots) + 1
        numa = tuple(r * 2 // n_roots if n_roots > 1 else 0 for r in roots)
    if roots and numa:
        for g in range(count):
            for h in range(count):
                if roots[g] == roots[h] and numa[g] != numa[h]:
                    raise ctx.err(
                        path, f"Invalid value: GPUs {g} and {h} share a PCIe root but not a NUMA node"
                    )
    return roots, numa


def _accelerator(ctx: _Ctx, path: str, v: object) -> Accelerator:
    a = _check_fields(ctx, path, v, ("model", "count", "mig", "sharing", "partition", "topology", "pcie"))
    name = _str(ctx, f"{path}.model", a.get("model"))
    try:
        model = lookup(name)
    except InputError as e:
        raise ctx.err(f"{path}.model", f"Unsupported value: {e}") from None
    if "count" not in a and not isinstance(model, TpuModel):
        raise ctx.err(f"{path}.count", "Required value")
    count = _int(ctx, f"{path}.count", a.get("count", 0), 1) if "count" in a else 0
    if count > MAX_ACCELERATORS_PER_NODE:
        raise ctx.err(
            f"{path}.count",
            f"Invalid value: {count}: at most {MAX_ACCELERATORS_PER_NODE} accelerators per node",
        )
    if isinstance(model, GpuModel):
        for k in ("partition", "topology"):
            if k in a:
                raise ctx.err(
                    f"{path}.{k}", f"Forbidden: only for {'AMD' if k == 'partition' else 'TPU'} models"
                )
        mig, layouts = _mig(ctx, f"{path}.mig", a.get("mig"), model, count)
        sharing = _sharing(ctx, f"{path}.sharing", a.get("sharing"))
        roots, numa = _pcie(ctx, f"{path}.pcie", a.get("pcie"), count)
        return Accelerator(model, count, mig, layouts, sharing, pcie_roots=roots, numa_nodes=numa)
    for k in ("mig", "sharing"):
        if k in a:
            raise ctx.err(f"{path}.{k}", f"Forbidden: only for NVIDIA models, not {model.key}")
    if isinstance(model, AmdModel):
        if "topology" in a:
            raise ctx.err(f"{path}.topology", "Forbidden: only for TPU models")
        profile = str(a.get("partition", model.partition_modes[0].profile))
        try:
            mode = model.mode(profile)
        except KeyError:
            known = ", ".join(m.profile for m in model.partition_modes)
            raise ctx.err(
                f"{path}.partition", f"Unsupported value: {profile!r}: {model.key} supports {known}"
            ) from None
        raw_pcie = a.get("pcie")
        for k in ("numaNodes", "numa"):
            if isinstance(raw_pcie, Mapping) and k in raw_pcie:
                raise ctx.err(f"{path}.pcie.{k}", "Forbidden: AMD's driver publishes no numaNode attribute")
        roots, _ = _pcie(ctx, f"{path}.pcie", raw_pcie, count)
        return Accelerator(model, count, partition=mode, pcie_roots=roots)
    assert isinstance(model, TpuModel)
    for k in ("partition", "pcie"):
        if k in a:
            raise ctx.err(f"{path}.{k}", f"Forbidden: only for {'AMD' if k == 'partition' else 'GPU'} models")
    topo = str(a.get("topology", ""))
    if not topo:
        raise ctx.err(f"{path}.topology", f"Required value: one of {', '.join(model.topologies)}")
    if topo not in model.topologies:
        raise ctx.err(
            f"{path}.topology",
            f"Unsupported value: {topo!r}: {model.key} slices are " + ", ".join(model.topologies),
        )
    _, per_host = model.hosts_per_slice(topo)
    if count and count != per_host:
        raise ctx.err(
            f"{path}.count",
            f"Invalid value: {count}: a {topo} {model.key} slice has {per_host} chips per host",
        )
    return Accelerator(model, per_host, tpu_topology=topo)


def _mig(ctx: _Ctx, path: str, v: object, model: GpuModel, count: int) -> tuple[str, tuple[Any, ...]]:
    if v is None:
        return "none", ()
    if isinstance(v, str):
        v = {"mode": v}
    m = _check_fields(ctx, path, v, ("mode", "layout", "layouts"))
    mode = m.get("mode", "none")
    if mode not in ("none", "static", "dynamic"):
        raise ctx.err(
            f"{path}.mode", f'Unsupported value: {mode!r}: supported values: "none", "static", "dynamic"'
        )
    if mode != "none" and not model.mig_capable:
        raise ctx.err(f"{path}.mode", f"Invalid value: {mode!r}: {model.key} does not support MIG")
    if mode != "static":
        for k in ("layout", "layouts"):
            if k in m:
                raise ctx.err(f"{path}.{k}", f"Forbidden: only with mode static (mode is {mode})")
        return mode, ()
    if ("layout" in m) == ("layouts" in m):
        raise ctx.err(path, "Required value: exactly one of layout (every GPU) or layouts (one per GPU)")
    if "layout" in m:
        raw = [m["layout"]] * count
        paths = [f"{path}.layout"] * count
    else:
        raw = m["layouts"]
        if not isinstance(raw, list) or len(raw) != count:
            raise ctx.err(f"{path}.layouts", f"Invalid value: need one layout per GPU ({count})")
        paths = [f"{path}.layouts[{i}]" for i in range(count)]
    placed = []
    for lay, p in zip(raw, paths, strict=True):
        placed.append(tuple(_place(ctx, p, lay, model)))
    return "static", tuple(placed)


def _place(ctx: _Ctx, path: str, lay: object, model: GpuModel) -> list[tuple[MigProfile, int]]:
    if isinstance(lay, str) and lay.startswith("all-"):
        try:
            p = model.profile(lay[4:])
        except KeyError:
            raise ctx.err(
                path, f"Unsupported value: {lay!r}: unknown MIG profile {lay[4:]!r} for {model.key}"
            ) from None
        lay = [p.name] * p.max_instances
    if not isinstance(lay, list) or not all(isinstance(x, str) for x in lay):
        raise ctx.err(path, f"Invalid value: {lay!r}: a list of MIG profile names, or 'all-<profile>'")
    try:
        return place_mig_layout(model, lay, "layout")
    except InputError as e:
        raise ctx.err(path, f"Invalid value: {str(e).removeprefix('layout: ')}") from None


def _sharing(ctx: _Ctx, path: str, v: object) -> str | int | None:
    if v is None:
        return None
    s = _check_fields(ctx, path, v, ("mode", "shares"))
    mode = s.get("mode", "consumable-shares")
    if mode == "none":
        return None
    if mode != "consumable-shares":
        raise ctx.err(
            f"{path}.mode", f'Unsupported value: {mode!r}: supported values: "none", "consumable-shares"'
        )
    shares = s.get("shares", "unlimited")
    if shares in ("unlimited", "memory"):
        return str(shares)
    return _int(ctx, f"{path}.shares", shares, 1)


def _topology(ctx: _Ctx, path: str, v: object) -> Topology:
    t = _check_fields(ctx, path, v, ("zones", "nodesPerRack", "racksPerBlock", "nvlinkDomainSize"))
    zones = t.get("zones", [])
    if isinstance(zones, str):
        zones = [zones]
    if not isinstance(zones, list):
        raise ctx.err(f"{path}.zones", "Invalid value: expected a list of zone names")
    for z in zones:
        _labels(ctx, f"{path}.zones", {"zone": z})
    npr = _int(ctx, f"{path}.nodesPerRack", t.get("nodesPerRack", 0), 0)
    rpb = _int(ctx, f"{path}.racksPerBlock", t.get("racksPerBlock", 0), 0)
    if rpb and not npr:
        raise ctx.err(f"{path}.racksPerBlock", "Forbidden: needs nodesPerRack")
    nvl = _int(ctx, f"{path}.nvlinkDomainSize", t.get("nvlinkDomainSize", 0), 0)
    return Topology(tuple(str(z) for z in zones), npr, rpb, nvl)


_POOL_FIELDS = (
    "name",
    "count",
    "namePattern",
    "startIndex",
    "names",
    "cpu",
    "memory",
    "pods",
    "labels",
    "topology",
    "accelerator",
    "taints",
    "deviceTaints",
    "maxDevicesPerSlice",
    "price",
    "minCount",
    "maxCount",
)


def parse_pool(ctx: _Ctx, path: str, raw: object, room: int = MAX_NODES, max_nodes: int = MAX_NODES) -> Pool:
    """One pool; `room` is how many nodes the fleet may still have (of `max_nodes`)."""
    if isinstance(raw, Mapping) and isinstance(raw.get("name"), str):
        ctx.pool = raw["name"]
    p = _check_fields(ctx, path, raw, _POOL_FIELDS)
    name = p.get("name")
    name = _str(ctx, f"{path}.name", name)
    if len(name) > 63 or not _DNS_SUBDOMAIN.match(name) or "." in name:
        raise ctx.err(
            f"{path}.name", f"Invalid value: {name!r}: must be a DNS label (lower case alphanumerics and '-')"
        )
    if "count" not in p:
        raise ctx.err(f"{path}.count", "Required value")
    count = _int(ctx, f"{path}.count", p["count"], 0)
    if count > room:
        raise ctx.err(
            f"{path}.count",
            f"Invalid value: {count}: the fleet would have more than {max_nodes:,} nodes "
            "(--max-nodes N lifts the limit)",
        )
    pool = Pool(name=name, count=count)
    if "cpu" in p:
        pool.cpu = _quantity(ctx, f"{path}.cpu", p["cpu"])
    if "memory" in p:
        pool.memory = _quantity(ctx, f"{path}.memory", p["memory"])
    if "pods" in p:
        pool.pods = _int(ctx, f"{path}.pods", p["pods"], 0)
    if "labels" in p:
        pool.labels = _labels(ctx, f"{path}.labels", p["labels"])
    if "topology" in p:
        pool.topology = _topology(ctx, f"{path}.topology", p["topology"])
    if "taints" in p:
        pool.taints = _taints(ctx, f"{path}.taints", p["taints"], _TAINT_EFFECTS)
    if "deviceTaints" in p:
        pool.device_taints = _taints(
            ctx, f"{path}.deviceTaints", p["deviceTaints"], ("None", "NoSchedule", "NoExecute")
        )
        if len(pool.device_taints) > 16:
            raise ctx.err(
                f"{path}.deviceTaints", "Too many: must have at most 16 items (per-device taint limit)"
            )
    if "accelerator" in p:
        pool.accelerator = _accelerator(ctx, f"{path}.accelerator", p["accelerator"])
    if "maxDevicesPerSlice" in p:
        limit = 64 if pool.device_taints or (pool.accelerator and pool.accelerator.mig == "dynamic") else 128
        pool.max_devices_per_slice = _int(ctx, f"{path}.maxDevicesPerSlice", p["maxDevicesPerSlice"], 1)
        if pool.max_devices_per_slice > limit:
            raise ctx.err(
                f"{path}.maxDevicesPerSlice",
                f"Invalid value: {pool.max_devices_per_slice}: a ResourceSlice "
                f"holds at most {limit} devices"
                + (" when devices have taints or consume counters" if limit == 64 else ""),
            )
    if "price" in p:
        pool.price = _price(ctx, f"{path}.price", p["price"])
    if "minCount" in p:
        pool.min_count = _int(ctx, f"{path}.minCount", p["minCount"], 0)
    if "maxCount" in p:
        pool.max_count = _int(ctx, f"{path}.maxCount", p["maxCount"], pool.min_count)
    if "startIndex" in p:
        pool.start_index = _int(ctx, f"{path}.startIndex", p["startIndex"], 0)
    if "names" in p:
        names = p["names"]
        if not isinstance(names, list) or len(names) != count:
            raise ctx.err(f"{path}.names", f"Invalid value: need exactly count ({count}) node names")
        pool.names = tuple(str(n) for n in names)
    if "namePattern" in p:
        pool.name_pattern = _str(ctx, f"{path}.namePattern", p["namePattern"])
        try:
            fields = {f for _, f, _, _ in string.Formatter().parse(pool.name_pattern) if f is not None}
        except ValueError as e:  # an unbalanced brace
            why = f"Invalid value: {e} (write a literal brace as {{{{ or }}}})"
            raise ctx.err(f"{path}.namePattern", why) from None
        bad = fields - {"pool", "index", "zone", "fleet"}
        if bad:
            raise ctx.err(
                f"{path}.namePattern",
                f"Invalid value: unknown placeholder(s) {sorted(bad)} "
                "(allowed: {pool}, {index}, {zone}, {fleet})",
            )
        if count > 1 and "index" not in fields:
            raise ctx.err(f"{path}.namePattern", "Invalid value: must contain {index} when count > 1")
    acc = pool.accelerator
    if acc and isinstance(acc.model, TpuModel) and acc.tpu_topology:
        hosts, _ = acc.model.hosts_per_slice(acc.tpu_topology)
        if count % hosts:
            raise ctx.err(
                f"{path}.count",
                f"Invalid value: {count}: a {acc.tpu_topology} slice spans {hosts} hosts, "
                "count must be a multiple of it",
            )
    try:
        names = pool.node_names(ctx.fleet)
    except (KeyError, ValueError, IndexError, TypeError) as e:
        raise ctx.err(f"{path}.namePattern", f"Invalid value: {e}") from None
    for n in names[:1] + names[-1:]:
        if len(n) > 253 or not _DNS_SUBDOMAIN.match(n):
            raise ctx.err(f"{path}.namePattern", f"Invalid value: {n!r}: node names must be DNS subdomains")
    return pool


def parse_fleet(doc: object, source: str = "", *, max_nodes: int = MAX_NODES) -> Fleet:
    """A Fleet from its YAML/JSON document (already loaded into Python objects), of at most `max_nodes`
    nodes."""
    ctx = _Ctx(source or "?")
    d = _check_fields(ctx, "", doc, ("apiVersion", "kind", "metadata", "spec"))
    if d.get("apiVersion") != API_VERSION or d.get("kind") != KIND:
        raise ctx.err(
            "apiVersion/kind",
            f"Invalid value: {d.get('apiVersion')!r}/{d.get('kind')!r}: expected {API_VERSION}/{KIND}",
        )
    meta = _check_fields(ctx, "metadata", d.get("metadata", {}), ("name", "annotations", "labels"))
    name = _str(ctx, "metadata.name", meta.get("name", ""))
    ctx.fleet = name
    spec = _check_fields(ctx, "spec", d.get("spec"), ("pools", "nvidia", "description"))
    fleet = Fleet(name=name, pools=[], description=str(spec.get("description", "")), source=source)
    if "nvidia" in spec:
        nv = _check_fields(ctx, "spec.nvidia", spec["nvidia"], ("driverVersion", "cudaDriverVersion"))
        fleet.driver_version = _version(
            ctx, "spec.nvidia.driverVersion", nv.get("driverVersion", fleet.driver_version)
        )
        fleet.cuda_driver_version = _version(
            ctx, "spec.nvidia.cudaDriverVersion", nv.get("cudaDriverVersion", fleet.cuda_driver_version)
        )
    pools = spec.get("pools")
    if not isinstance(pools, list) or not pools:
        raise ctx.err("spec.pools", "Required value: at least one pool")
    seen: dict[str, str] = {}
    for i, raw in enumerate(pools):
        pctx = _Ctx(name, None, i)
        pool = parse_pool(pctx, f"spec.pools[{i}]", raw, max_nodes - fleet.node_count, max_nodes)
        if pool.name in {p.name for p in fleet.pools}:
            raise pctx.err(f"spec.pools[{i}].name", f"Duplicate value: {pool.name!r}")
        for n in pool.node_names(name):
            if n in seen:
                raise pctx.err(
                    f"spec.pools[{i}].namePattern",
                    f"Duplicate value: node name {n!r} is also produced by pool {seen[n]}",
                )
            seen[n] = pool.name
        fleet.pools.append(pool)
    return fleet


# --- writing
# -------------------------------------------------------------------------------------------------


def _groups_of(per_gpu: tuple[int, ...]) -> list[list[int]]:
    groups: dict[int, list[int]] = {}
    for gpu, g in enumerate(per_gpu):
        groups.setdefault(g, []).append(gpu)
    return [groups[g] for g in sorted(groups)]


def accelerator_to_dict(acc: Accelerator) -> dict[str, Any]:
    m = acc.model
    out: dict[str, Any] = {"model": m.key}
    if isinstance(m, TpuModel):
        out["topology"] = acc.tpu_topology
        return out
    out["count"] = acc.count
    if acc.mig == "dynamic":
        out["mig"] = {"mode": "dynamic"}
    elif acc.mig == "static":
        out["mig"] = {"mode": "static", "layouts": [[p.name for p, _ in lay] for lay in acc.mig_layouts]}
    if acc.sharing is not None:
        out["sharing"] = {"mode": "consumable-shares", "shares": acc.sharing}
    if acc.partition is not None:
        out["partition"] = acc.partition.profile
    pcie: dict[str, Any] = {}
    if acc.pcie_roots:
        pcie["roots"] = _groups_of(acc.pcie_roots)
    if acc.numa_nodes and isinstance(m, GpuModel):
        pcie["numa"] = _groups_of(acc.numa_nodes)
    if pcie:
        out["pcie"] = pcie
    return out


def pool_to_dict(pool: Pool) -> dict[str, Any]:
    """The pool as a Fleet document writes it (parse_pool reads it back to an equal Pool)."""
    out: dict[str, Any] = {"name": pool.name, "count": pool.count}
    if pool.names:
        out["names"] = list(pool.names)
    else:
        out["namePattern"] = pool.name_pattern
        if pool.start_index:
            out["startIndex"] = pool.start_index
    out.update({"cpu": pool.cpu, "memory": pool.memory, "pods": pool.pods})
    if pool.labels:
        out["labels"] = dict(pool.labels)
    t = pool.topology
    topo: dict[str, Any] = {}
    if t.zones:
        topo["zones"] = list(t.zones)
    for key, v in (
        ("nodesPerRack", t.nodes_per_rack),
        ("racksPerBlock", t.racks_per_block),
        ("nvlinkDomainSize", t.nvlink_domain_size),
    ):
        if v:
            topo[key] = v
    if topo:
        out["topology"] = topo
    if pool.accelerator is not None:
        out["accelerator"] = accelerator_to_dict(pool.accelerator)
    if pool.taints:
        out["taints"] = [x.to_dict() for x in pool.taints]
    if pool.device_taints:
        out["deviceTaints"] = [x.to_dict() for x in pool.device_taints]
    if pool.max_devices_per_slice != 128:
        out["maxDevicesPerSlice"] = pool.max_devices_per_slice
    if pool.price is not None:
        out["price"] = pool.price
    if pool.min_count:
        out["minCount"] = pool.min_count
    if pool.max_count is not None:
        out["maxCount"] = pool.max_count
    return out


def fleet_to_dict(fleet: Fleet) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if fleet.description:
        spec["description"] = fleet.description
    if (fleet.driver_version, fleet.cuda_driver_version) != (
        DEFAULT_DRIVER_VERSION,
        DEFAULT_CUDA_DRIVER_VERSION,
    ):
        spec["nvidia"] = {
            "driverVersion": fleet.driver_version,
            "cudaDriverVersion": fleet.cuda_driver_version,
        }
    spec["pools"] = [pool_to_dict(p) for p in fleet.pools]
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": fleet.name}, "spec": spec}
