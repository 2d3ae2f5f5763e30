"""Random DRA worlds for the differential test against the real allocator (support.oracle).

`random_world(seed)` builds one small cluster from a seed: several drivers and pools, pools split over
slices (with right and wrong resourceSliceCounts and generations), node-local, nodeSelector, allNodes
and perDeviceNodeSelection slices, partitionable devices with shared counters (sometimes invalid),
devices that allow multiple allocations with consumable capacity and request policies, taints, binding
conditions, claims with ExactCount, All and firstAvailable requests, selectors that fail at runtime for
some devices, matchAttribute/distinctAttribute constraints, admin access, config, devices already in
use, and several groups of claims (one per pod) that compete for the devices. The objects are what a
user writes (API defaults such as `count: 1` or a toleration's `operator: Equal` often left out), and
API-valid for both supported Kubernetes versions (tests check that with kdra's validation).

The same seed always gives the same world; worlds are kept small so an exhaustive search stays cheap,
with a few larger "search" worlds where a naive backtracking search explodes.
"""

from __future__ import annotations

import copy
import random
import uuid
from dataclasses import dataclass, field
from typing import Any

from kdra.api.features import DEFAULTS, DEPENDENCIES, GATES, SUPPORTED_VERSIONS
from kdra.api.types import Obj

DRIVERS = ("gpu.example.com", "nic.example.com", "dra.example.com")
STD = "resource.kubernetes.io"
NAMESPACE = "default"
ZONES = ("a", "b")


@dataclass
class World:
    """One random cluster and the claims to allocate, group by group (a group is one pod's claims)."""

    seed: int
    nodes: list[Obj]
    classes: list[Obj]
    slices: list[Obj]
    allocated: list[Obj]  # claims with status.allocation: their devices are in use
    groups: list[list[Obj]]
    gate_overrides: dict[str, bool] = field(default_factory=dict)  # over each version's defaults
    kind: str = "random"

    def gates(self, version: str) -> dict[str, bool]:
        """Every gate of `version` with this world's overrides applied (those the version knows)."""
        values = dict(DEFAULTS[version])
        values.update({k: v for k, v in self.gate_overrides.items() if k in values})
        return values

    def objects(self) -> list[Obj]:
        """Everything as one object list (claims of later groups are referenced by Pods)."""
        objs: list[Obj] = [*self.nodes, *self.classes, *self.slices, *self.allocated]
        for claims in self.groups:
            objs.extend(claims)
        return objs

    def copy(self) -> World:
        return copy.deepcopy(self)


class _Gen:
    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.r = random.Random(seed)
        self.uid = 0

    # -- helpers ---------------------------------------------------------------------------------
    def chance(self, p: float) -> bool:
        return self.r.random() < p

    def pick(self, items: Any) -> Any:
        return self.r.choice(list(items))

    def next_uid(self, prefix: str) -> str:
        self.uid += 1
        return str(uuid.UUID(int=(self.seed * 1_000_003 + self.uid) % (1 << 122) | (4 << 76) | (2 << 62)))

    # -- gates -----------------------------------------------------------------------------------
    def gate_overrides(self) -> dict[str, bool]:
        """Mostly the defaults; sometimes a few allocator gates flipped (a set both versions accept)."""
        if not self.chance(0.25):
            return {}
        flippable = [
            "DRAConsumableCapacity",
            "DRAPartitionableDevices",
            "DRADeviceTaints",
            "DRADeviceBindingConditions",
            "DRAListTypeAttributes",
        ]
        out: dict[str, bool] = {}
        for name in self.r.sample(flippable, self.r.randint(1, 2)):
            out[name] = not DEFAULTS["1.37"][name]
        # Keep the set acceptable in every version: switch off what depends on a gate turned off.
        for version in SUPPORTED_VERSIONS:
            for gate, needs in DEPENDENCIES[version].items():
                if gate not in GATES[version] or gate in ("DRAWorkloadResourceClaims",):
                    continue
                values = {**DEFAULTS[version], **{k: v for k, v in out.items() if k in DEFAULTS[version]}}
                if values.get(gate) and any(not values.get(n, False) for n in needs):
                    out[gate] = False
        return out


def random_world(seed: int) -> World:
    """A random world; deterministic in `seed`. About one in twenty is a `search` world (see
    `search_world`)."""
    g = _Gen(seed)
    if g.chance(0.05):
        return search_world(seed)
    gates = g.gate_overrides()
    on = {**DEFAULTS["1.37"], **gates}
    consumable = on["DRAConsumableCapacity"]
    partitionable = on["DRAPartitionableDevices"]
    lists = on["DRAListTypeAttributes"]
    binding = on["DRADeviceBindingConditions"]
    search = False

    n_nodes = g.pick((1, 1, 2, 2, 3))
    nodes: list[Obj] = []
    for i in range(n_nodes):
        labels = {"zone": ZONES[i % 2] if g.chance(0.8) else g.pick(ZONES)}
        if g.chance(0.3):
            labels["rack"] = f"r{g.r.randint(0, 1)}"
        nodes.append(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"node-{i}", "labels": labels}}
        )
    node_names = [n["metadata"]["name"] for n in nodes]
    # Sometimes a node no slice targets by name.
    node_names_for_slices = (node_names[:-1] or node_names) if g.chance(0.1) else node_names

    drivers = list(DRIVERS[: g.pick((1, 2, 2, 3))])
    slices: list[Obj] = []
    all_devices: list[tuple[str, str, Obj, bool]] = []  # (driver, pool, device, shareable)
    pool_names = ["pool-a", "pool-b", "shared"]
    for driver in drivers:
        n_pools = g.pick((1, 1, 2, 2, 3))
        for p in range(n_pools):
            # Pools named alike across drivers exercise per-driver pool identity.
            pool_name = pool_names[p] if g.chance(0.7) else f"{driver.split('.')[0]}-{p}"
            layout = g.pick(("local", "local", "local", "network", "all", "perdevice"))
            if layout == "local":
                for node in node_names_for_slices:
                    _pool(
                        g,
                        slices,
                        all_devices,
                        driver,
                        f"{pool_name}-{node}" if g.chance(0.6) else pool_name,
                        {"nodeName": node},
                        node_names,
                        consumable,
                        partitionable,
                        lists,
                        binding,
                        search,
                    )
                    if g.chance(0.5):
                        break
            elif layout == "network":
                zone = g.pick(ZONES)
                sel = {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": [zone]}]}
                    ]
                }
                _pool(
                    g,
                    slices,
                    all_devices,
                    driver,
                    pool_name,
                    {"nodeSelector": sel},
                    node_names,
                    consumable,
                    partitionable,
                    lists,
                    binding,
                    search,
                )
            elif layout == "all":
                _pool(
                    g,
                    slices,
                    all_devices,
                    driver,
                    pool_name,
                    {"allNodes": True},
                    node_names,
                    consumable,
                    partitionable,
                    lists,
                    binding,
                    search,
                )
            elif partitionable:
                _pool(
                    g,
                    slices,
                    all_devices,
                    driver,
                    pool_name,
                    {"perDeviceNodeSelection": True},
                    node_names,
                    consumable,
                    partitionable,
                    lists,
                    binding,
                    search,
                )
            else:
                _pool(
                    g,
                    slices,
                    all_devices,
                    driver,
                    pool_name,
                    {"nodeName": g.pick(node_names)},
                    node_names,
                    consumable,
                    partitionable,
                    lists,
                    binding,
                    search,
                )
    _dedupe_slice_names(slices)

    classes = _classes(g, drivers, consumable)
    allocated = _allocated(g, all_devices, consumable)
    groups: list[list[Obj]] = []
    n_groups = g.pick((1, 1, 2, 2, 3)) if not search else 1
    claim_no = 0
    for gi in range(n_groups):
        claims = []
        for _ in range(g.pick((1, 1, 1, 2)) if gi else g.pick((1, 1, 2))):
            claims.append(_claim(g, f"claim-{claim_no}", classes, drivers, consumable, lists, search))
            claim_no += 1
        groups.append(claims)
    return World(
        seed, nodes, classes, slices, allocated, groups, gates, kind="search" if search else "random"
    )


def search_world(seed: int) -> World:
    """A world where a plain depth-first search explodes but an answer often exists: one node, devices
    whose PCIe roots form groups that are each a little too small for a claim whose requests must all
    share a root (matchAttribute), the group that is big enough last in search order, some devices in
    use, sometimes a distinctAttribute and a second claim. Upstream tries every combination inside each
    too-small group before moving on (kubernetes#131730 is the simplest case)."""
    g = _Gen(seed * 7919 + 1)
    driver = DRIVERS[0]
    n_requests = g.pick((2, 3, 3, 4))
    counts = [g.pick((1, 2, 2, 3)) for _ in range(n_requests)]
    need = sum(counts)
    n_roots = g.pick((2, 3, 4))
    sizes = [need - g.pick((1, 1, 2)) + g.pick((0, 0, 1)) for _ in range(n_roots - 1)]
    sizes.append(need + g.pick((0, 0, 1, 2)))  # the last group may be just big enough
    if g.chance(0.3):
        g.r.shuffle(sizes)
    roots: list[str] = []
    for i, size in enumerate(sizes):
        roots.extend([f"pci{i}"] * max(size, 1))
    # Interleave a little so groups are not contiguous in slice order.
    for i in range(len(roots) - 1):
        if g.chance(0.25):
            roots[i], roots[i + 1] = roots[i + 1], roots[i]
    devices: list[Obj] = []
    for i, root in enumerate(roots):
        attrs: Obj = {f"{STD}/pcieRoot": {"string": root}, "dra.example.com/numa": {"int": i % 2}}
        attrs["model"] = {"string": "a" if g.chance(0.85) else "b"}
        devices.append({"name": f"dev-{i:02d}", "attributes": attrs})
    per = g.pick((6, 8, 10))
    slices: list[Obj] = []
    chunks = [devices[i : i + per] for i in range(0, len(devices), per)]
    for si, chunk in enumerate(chunks):
        slices.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"gpu-node-0-{si}"},
                "spec": {
                    "driver": driver,
                    "nodeName": "node-0",
                    "pool": {"name": "node-0", "generation": 1, "resourceSliceCount": len(chunks)},
                    "devices": chunk,
                },
            }
        )
    classes = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "gpu"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
        }
    ]
    allocated: list[Obj] = []
    for i, dev in enumerate(devices):
        if g.chance(0.08):
            allocated.append(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaim",
                    "metadata": {"name": f"in-use-{i}", "namespace": NAMESPACE, "uid": g.next_uid("used")},
                    "spec": {
                        "devices": {"requests": [{"name": "req", "exactly": {"deviceClassName": "gpu"}}]}
                    },
                    "status": {
                        "allocation": {
                            "devices": {
                                "results": [
                                    {
                                        "request": "req",
                                        "driver": driver,
                                        "pool": "node-0",
                                        "device": dev["name"],
                                    }
                                ]
                            }
                        }
                    },
                }
            )
    requests: list[Obj] = []
    for ri, count in enumerate(counts):
        req: Obj = {"deviceClassName": "gpu", "count": count}
        if g.chance(0.2):
            req["selectors"] = [{"cel": {"expression": f'device.attributes["{driver}"].model == "a"'}}]
        requests.append({"name": f"req-{ri}", "exactly": req})
    constraints: list[Obj] = [{"matchAttribute": f"{STD}/pcieRoot"}]
    if g.chance(0.3):
        singles = [r["name"] for r, c in zip(requests, counts, strict=True) if c == 1]
        if len(singles) >= 2:
            constraints.append({"distinctAttribute": "dra.example.com/numa", "requests": singles[:2]})
    claims = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "claim-0", "namespace": NAMESPACE, "uid": g.next_uid("claim")},
            "spec": {"devices": {"requests": requests, "constraints": constraints}},
        }
    ]
    if g.chance(0.3):
        claims.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": "claim-1", "namespace": NAMESPACE, "uid": g.next_uid("claim")},
                "spec": {
                    "devices": {
                        "requests": [
                            {"name": "req-0", "exactly": {"deviceClassName": "gpu", "count": g.pick((1, 2))}}
                        ],
                        "constraints": [{"matchAttribute": f"{STD}/pcieRoot"}],
                    }
                },
            }
        )
    nodes = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-0", "labels": {"zone": "a"}}}]
    return World(seed, nodes, classes, slices, allocated, [claims], {}, kind="search")


# ---------------------------------------------------------------------------------------------------
# slices and devices
# ---------------------------------------------------------------------------------------------------


def _attributes(g: _Gen, driver: str, lists: bool) -> Obj:
    attrs: Obj = {}
    if g.chance(0.85):
        attrs["model"] = {"string": g.pick(("a", "a", "b"))}
    if g.chance(0.7):
        attrs[f"{STD}/pcieRoot"] = {"string": g.pick(("pci0", "pci0", "pci1"))}
    if g.chance(0.6):
        attrs["dra.example.com/numa"] = {"int": g.r.randint(0, 1)}
    if g.chance(0.3):
        attrs["fast"] = {"bool": g.chance(0.5)}
    if g.chance(0.2):
        attrs["driverVersion"] = {"version": g.pick(("1.0.0", "1.2.0"))}
    if lists and g.chance(0.3):
        attrs["links"] = {"strings": g.r.sample(["l0", "l1", "l2"], g.r.randint(1, 2))}
    return attrs


def _capacity(g: _Gen, shareable: bool) -> Obj:
    cap: Obj = {}
    if g.chance(0.8 if shareable else 0.5):
        mem: Obj = {"value": g.pick(("8Gi", "16Gi", "16Gi", "40Gi"))}
        if shareable and g.chance(0.6):
            kind = g.pick(("range", "range", "values", "default"))
            if kind == "range":
                rng: Obj = {"min": g.pick(("1Gi", "2Gi"))}
                step = 0
                if g.chance(0.5):
                    step = g.pick((1, 2))
                    rng["step"] = f"{step}Gi"
                if g.chance(0.3):
                    rng["max"] = f"{int(rng['min'][0]) + 2 * step if step else 8}Gi"
                mem["requestPolicy"] = {"default": rng["min"], "validRange": rng}
            elif kind == "values":
                mem["requestPolicy"] = {"default": "2Gi", "validValues": ["2Gi", "4Gi", "8Gi"]}
            else:
                mem["requestPolicy"] = {"default": "4Gi"}
        cap["mem"] = mem
    if g.chance(0.3):
        cores: Obj = {"value": str(g.pick((4, 8, 16)))}
        if shareable and g.chance(0.5):
            # Fractional steps: 1.36 rounds in whole units, 1.37 (DRAFractionalCapacityRange) in milli-units.
            cores["requestPolicy"] = {
                "default": "500m",
                "validRange": {"min": "500m", "step": g.pick(("250m", "500m"))},
            }
        cap["cores"] = cores
    if shareable and g.chance(0.3):
        # A decimal step: 1.36 reports the rounded amount as BinarySI, 1.37 in the step's format.
        cap["bw"] = {
            "value": "10G",
            "requestPolicy": {"default": "500M", "validRange": {"min": "500M", "step": "500M"}},
        }
    return cap


def _device(
    g: _Gen,
    name: str,
    driver: str,
    consumable: bool,
    lists: bool,
    binding: bool,
    counter_sets: list[Obj] | None,
) -> tuple[Obj, bool]:
    dev: Obj = {"name": name}
    attrs = _attributes(g, driver, lists)
    if attrs:
        dev["attributes"] = attrs
    shareable = consumable and g.chance(0.2)
    cap = _capacity(g, shareable)
    if cap:
        dev["capacity"] = cap
    if shareable:
        dev["allowMultipleAllocations"] = True
    if counter_sets and g.chance(0.8):
        cs = g.pick(counter_sets)
        names = list(cs["counters"])
        chosen = g.r.sample(names, g.r.randint(1, len(names)))
        consumes = {
            n: {"value": g.pick(("1", "2")) if n == "slots" else g.pick(("10Gi", "20Gi"))} for n in chosen
        }
        set_name = cs["name"] if g.chance(0.95) else "no-such-set"
        dev["consumesCounters"] = [{"counterSet": set_name, "counters": consumes}]
    if g.chance(0.12):
        taint: Obj = {"key": g.pick(("k", "maint")), "effect": g.pick(("NoSchedule", "NoExecute", "None"))}
        if g.chance(0.7):
            taint["value"] = g.pick(("v", "w"))
        dev["taints"] = [taint]
    if binding and g.chance(0.08):
        dev["bindingConditions"] = ["ready"]
        dev["bindingFailureConditions"] = ["failed"]
        if g.chance(0.5):
            dev["bindsToNode"] = True
    return dev, shareable


def _pool(
    g: _Gen,
    slices: list[Obj],
    all_devices: list[tuple[str, str, Obj, bool]],
    driver: str,
    pool: str,
    selection: Obj,
    node_names: list[str],
    consumable: bool,
    partitionable: bool,
    lists: bool,
    binding: bool,
    search: bool,
) -> None:
    """One pool: a few device slices (and maybe a counter slice), with a count and generations that are
    mostly right."""
    if any(s["spec"]["driver"] == driver and s["spec"]["pool"]["name"] == pool for s in slices):
        return  # keep pools distinct (a repeated name would merge two random pools)
    generation = g.r.randint(0, 2)
    n_slices = g.pick((1, 1, 1, 2, 2, 3))
    counter_sets: list[Obj] | None = None
    pool_slices: list[Obj] = []
    if partitionable and g.chance(0.3):
        counter_sets = [
            {
                "name": f"cs-{i}",
                "counters": {
                    "mem": {"value": g.pick(("40Gi", "60Gi"))},
                    "slots": {"value": g.pick(("2", "4"))},
                },
            }
            for i in range(g.pick((1, 1, 2)))
        ]
        sel = dict(selection)
        if "perDeviceNodeSelection" in sel:
            sel = {"allNodes": True} if g.chance(0.5) else {"nodeName": g.pick(node_names)}
        elif g.chance(0.15):
            sel = {"nodeName": g.pick(node_names)}  # counters published for another node's selection
        spec: Obj = {
            "driver": driver,
            "pool": {"name": pool, "generation": generation},
            **sel,
            "sharedCounters": counter_sets,
        }
        pool_slices.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{pool}-counters"},
                "spec": spec,
            }
        )
    dev_no = 0
    earlier: list[str] = []  # device names of the pool's previous slices
    per_slice = (4, 6) if search else (1, 4)
    for si in range(n_slices):
        devices: list[Obj] = []
        for _ in range(g.r.randint(*per_slice)):
            name = f"dev-{dev_no}"
            dev_no += 1
            unused = [n for n in earlier if all(d["name"] != n for d in devices)]
            if g.chance(0.03) and unused:
                name = g.pick(unused)  # a device name another slice of the pool has: the pool is invalid
            dev, shareable = _device(g, name, driver, consumable, lists, binding, counter_sets)
            if "perDeviceNodeSelection" in selection:
                choice = g.pick(("node", "node", "all", "selector"))
                if choice == "node":
                    dev["nodeName"] = g.pick(node_names)
                elif choice == "all":
                    dev["allNodes"] = True
                else:
                    dev["nodeSelector"] = {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "zone", "operator": "In", "values": [g.pick(ZONES)]}
                                ]
                            }
                        ]
                    }
            devices.append(dev)
            all_devices.append((driver, pool, dev, shareable))
        earlier.extend(d["name"] for d in devices)
        spec = {
            "driver": driver,
            "pool": {"name": pool, "generation": generation},
            **selection,
            "devices": devices,
        }
        pool_slices.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{pool}-{si}"},
                "spec": spec,
            }
        )
    count = len(pool_slices)
    if g.chance(0.08):
        count += 1  # a slice not published yet: incomplete
    for s in pool_slices:
        s["spec"]["pool"]["resourceSliceCount"] = count
    if g.chance(0.06) and len(pool_slices) > 1:
        pool_slices[-1]["spec"]["pool"]["generation"] = generation + 1  # mid-update: older ones are obsolete
        pool_slices[-1]["spec"]["pool"]["resourceSliceCount"] = 1 if g.chance(0.5) else count
    if g.chance(0.05) and len(pool_slices) > 1 and generation > 0:
        pool_slices[0]["spec"]["pool"]["generation"] = generation - 1  # a stale slice left behind
    slices.extend(pool_slices)


def _dedupe_slice_names(slices: list[Obj]) -> None:
    seen: dict[str, int] = {}
    for s in slices:
        base = f"{s['spec']['driver'].split('.')[0]}-{s['metadata']['name']}"
        n = seen.get(base, 0)
        seen[base] = n + 1
        s["metadata"]["name"] = base if n == 0 else f"{base}-{n}"


# ---------------------------------------------------------------------------------------------------
# classes and claims
# ---------------------------------------------------------------------------------------------------


def _selector(g: _Gen, driver: str, consumable: bool) -> str:
    options = [
        f'device.attributes["{driver}"].model == "a"',  # no such key on devices without a model
        f'has(device.attributes["{driver}"].model) && device.attributes["{driver}"].model == "a"',
        f'device.attributes["{STD}"].pcieRoot == "pci0"',
        'device.attributes["dra.example.com"].numa == 1',
        f'!has(device.attributes["{driver}"].fast) || device.attributes["{driver}"].fast',
        f'has(device.capacity["{driver}"].mem) && '
        f'device.capacity["{driver}"].mem.compareTo(quantity("16Gi")) >= 0',
        f'device.attributes["{driver}"].driverVersion.isGreaterThan(semver("1.1.0"))',
    ]
    if consumable:
        options.append("!device.allowMultipleAllocations")
    return str(g.pick(options))


def _classes(g: _Gen, drivers: list[str], consumable: bool) -> list[Obj]:
    classes: list[Obj] = []
    for i, driver in enumerate(drivers):
        for j in range(g.pick((1, 1, 2))):
            sels: list[Obj] = [{"cel": {"expression": f'device.driver == "{driver}"'}}]
            if j or g.chance(0.25):
                sels.append({"cel": {"expression": _selector(g, driver, consumable)}})
            spec: Obj = {"selectors": sels}
            if g.chance(0.15):
                spec["config"] = [{"opaque": {"driver": driver, "parameters": {"class": f"c{i}{j}"}}}]
            classes.append(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "DeviceClass",
                    "metadata": {"name": f"class-{i}-{j}"},
                    "spec": spec,
                }
            )
    if g.chance(0.1):  # a class without selectors: every device of every driver
        classes.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": "class-any"},
                "spec": {},
            }
        )
    return classes


def _class_driver(cls: Obj, drivers: list[str]) -> str:
    name = cls["metadata"]["name"]
    if name == "class-any":
        return drivers[0]
    return drivers[int(name.split("-")[1])]


def _tolerations(g: _Gen) -> list[Obj]:
    t: Obj = {"key": g.pick(("k", "maint"))}
    if g.chance(0.5):
        t["operator"] = "Exists"
    else:
        t["value"] = g.pick(("v", "w"))
        if g.chance(0.3):
            t["operator"] = "Equal"
    if g.chance(0.3):
        t["effect"] = g.pick(("NoSchedule", "NoExecute"))
    return [t]


def _exact(g: _Gen, classes: list[Obj], drivers: list[str], consumable: bool, search: bool) -> Obj:
    cls = g.pick(classes)
    driver = _class_driver(cls, drivers)
    req: Obj = {"deviceClassName": cls["metadata"]["name"]}
    if g.chance(0.1):
        req["allocationMode"] = "All"
    else:
        if search:
            req["count"] = g.r.randint(3, 6)
        elif g.chance(0.5):
            req["count"] = g.pick((1, 1, 2, 2, 3))
        if g.chance(0.1):
            req["allocationMode"] = "ExactCount"
        if g.chance(0.01):
            req["count"] = g.pick((20, 33))  # the claim limit
    if g.chance(0.25):
        req["selectors"] = [{"cel": {"expression": _selector(g, driver, consumable)}}]
    if g.chance(0.15):
        req["tolerations"] = _tolerations(g)
    if consumable and g.chance(0.15):
        reqs: Obj = {"mem": g.pick(("1Gi", "3Gi", "4Gi", "8Gi", "20Gi"))}
        if g.chance(0.3):
            reqs = {g.pick(("cores", "bw")): g.pick(("750m", "1", "1200M", "2G"))}
        req["capacity"] = {"requests": reqs}
    if g.chance(0.05):
        req["adminAccess"] = True
    return req


def _claim(
    g: _Gen, name: str, classes: list[Obj], drivers: list[str], consumable: bool, lists: bool, search: bool
) -> Obj:
    requests: list[Obj] = []
    n_requests = g.pick((1, 1, 2, 2, 3)) if not search else g.pick((2, 3))
    for ri in range(n_requests):
        rname = f"req-{ri}"
        if not search and g.chance(0.2):
            subs = []
            for si in range(g.pick((2, 2, 3))):
                sub = _exact(g, classes, drivers, consumable, False)
                sub.pop("adminAccess", None)
                subs.append({"name": f"sub-{si}", **sub})
            requests.append({"name": rname, "firstAvailable": subs})
        else:
            requests.append({"name": rname, "exactly": _exact(g, classes, drivers, consumable, search)})
    devices: Obj = {"requests": requests}
    constraints: list[Obj] = []
    if g.chance(0.3 if not search else 0.8):
        attr = g.pick((f"{STD}/pcieRoot", "dra.example.com/numa", f"{drivers[0]}/model"))
        if lists and g.chance(0.3):
            attr = f"{drivers[0]}/links"
        c: Obj = {("matchAttribute" if g.chance(0.6) else "distinctAttribute"): attr}
        if n_requests > 1 and g.chance(0.5):
            names = [r["name"] for r in requests]
            chosen = g.r.sample(names, g.r.randint(1, len(names)))
            for r in requests:
                if r["name"] in chosen and "firstAvailable" in r and g.chance(0.5):
                    chosen[chosen.index(r["name"])] = f"{r['name']}/{r['firstAvailable'][0]['name']}"
            c["requests"] = chosen
        constraints.append(c)
    if constraints:
        devices["constraints"] = constraints
    if g.chance(0.1):
        cfg: Obj = {"opaque": {"driver": drivers[0], "parameters": {"claim": name}}}
        if g.chance(0.5):
            cfg["requests"] = [requests[0]["name"]]
        devices["config"] = [cfg]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": g.next_uid("claim")},
        "spec": {"devices": devices},
    }


def _allocated(g: _Gen, devices: list[tuple[str, str, Obj, bool]], consumable: bool) -> list[Obj]:
    """Claims already allocated: some devices dedicated, some shared with consumed capacity, an admin."""
    claims: list[Obj] = []
    if not devices or not g.chance(0.5):
        return claims
    for i, (driver, pool, dev, shareable) in enumerate(
        g.r.sample(devices, min(len(devices), g.r.randint(1, 3)))
    ):
        result: Obj = {"request": "req", "driver": driver, "pool": pool, "device": dev["name"]}
        if shareable and consumable:
            result["shareID"] = g.next_uid("share")
            mem = (dev.get("capacity") or {}).get("mem")
            if mem is not None and g.chance(0.8):
                result["consumedCapacity"] = {"mem": g.pick(("2Gi", "4Gi", "8Gi"))}
        elif g.chance(0.1):
            result["adminAccess"] = True
        claims.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": f"in-use-{i}", "namespace": NAMESPACE, "uid": g.next_uid("used")},
                "spec": {
                    "devices": {"requests": [{"name": "req", "exactly": {"deviceClassName": "in-use"}}]}
                },
                "status": {"allocation": {"devices": {"results": [result]}}},
            }
        )
    return claims
