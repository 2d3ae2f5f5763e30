"""Write the hand-specified, realistically shaped scenarios (NVIDIA-style GPUs, MIG, pods and templates).

Run from the repository root: `python tests/scenarios/tools/realistic_cases.py`. Writes
tests/scenarios/cases/realistic/<name>.yaml. Every expectation below is written by hand from upstream's
rules (cited per case: KEP sections, upstream allocator tests, kube-scheduler/controller code), never from
kdra's output; the devices, counters and MIG profiles are taken from the illustrative 8x H100 dynamic-MIG
slices in shared/reference/examples (generated in the NVIDIA DRA driver's shape).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[3]
OUT = ROOT / "tests" / "scenarios" / "cases" / "realistic"
DRIVER = "gpu.nvidia.com"
UPSTREAM = (
    "staging/src/k8s.io/dynamic-resource-allocation/structured/internal/allocatortesting/allocator_testing.go"
)

PCIE_ROOTS = [
    "pci0000:15",
    "pci0000:27",
    "pci0000:15",
    "pci0000:27",
    "pci0000:97",
    "pci0000:a8",
    "pci0000:97",
]

CASES: list[dict[str, Any]] = []


def up(test: str) -> str:
    """Cite a subtest of upstream's allocator table."""
    return f"TestAllocator/{test} in {UPSTREAM}"


# ------------------------------------------------------------------------------------------ builders


def node(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta}


def nvidia_classes(config: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The DeviceClasses NVIDIA's DRA driver installs (selectors on driver and device type)."""
    out = []
    for cls, typ in (("gpu.nvidia.com", "gpu"), ("mig.nvidia.com", "mig")):
        spec: dict[str, Any] = {
            "selectors": [
                {
                    "cel": {
                        "expression": f"device.driver == '{DRIVER}' && "
                        f"device.attributes['{DRIVER}'].type == '{typ}'"
                    }
                }
            ]
        }
        if config and cls == "gpu.nvidia.com":
            spec["config"] = config
        out.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": cls},
                "spec": spec,
            }
        )
    return out


def gpu(index: int, *, node_index: int = 1, memory: str = "81152Mi", **extra: Any) -> dict[str, Any]:
    """A full H100 as the NVIDIA DRA driver publishes it (subset of the attributes)."""
    dev: dict[str, Any] = {
        "name": f"gpu-{index}",
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": f"GPU-{node_index:08d}-1111-2222-3333-00444400000{index}"},
            "index": {"int": index},
            "productName": {"string": "NVIDIA H100 80GB HBM3"},
            "architecture": {"string": "Hopper"},
            "cudaComputeCapability": {"version": "9.0.0"},
            "driverVersion": {"version": "580.126.20"},
            "resource.kubernetes.io/pcieRoot": {"string": PCIE_ROOTS[index % len(PCIE_ROOTS)]},
            "resource.kubernetes.io/numaNode": {"int": 0 if index < 4 else 1},
        },
        "capacity": {"memory": {"value": memory}},
    }
    dev.update(extra)
    return dev


def gpu_slice(
    node_name: str,
    devices: list[dict[str, Any]],
    *,
    pool: str | None = None,
    count: int = 1,
    generation: int = 1,
    name: str | None = None,
    **spec_extra: Any,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "driver": DRIVER,
        "pool": {"name": pool or node_name, "generation": generation, "resourceSliceCount": count},
    }
    if (
        "nodeSelector" not in spec_extra
        and "allNodes" not in spec_extra
        and "perDeviceNodeSelection" not in spec_extra
    ):
        spec["nodeName"] = node_name
    spec.update(spec_extra)
    spec["devices"] = devices
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name or f"{node_name}-{DRIVER}"},
        "spec": spec,
    }


def request(
    name: str, cls: str = "gpu.nvidia.com", count: int | None = None, **fields: Any
) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": cls}
    if count is not None:
        exactly["allocationMode"] = "ExactCount"
        exactly["count"] = count
    exactly.update(fields)
    return {"name": name, "exactly": exactly}


def selector(expression: str) -> dict[str, Any]:
    return {"cel": {"expression": expression}}


def profile(name: str) -> dict[str, Any]:
    return selector(f"device.attributes['{DRIVER}'].profile == '{name}'")


def claim(
    name: str, requests: list[dict[str, Any]], ns: str = "default", **devices_extra: Any
) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": requests}
    devices.update(devices_extra)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"devices": devices},
    }


def allocated(
    name: str, results: list[dict[str, Any]], node_name: str | None = "gpu-node-01"
) -> dict[str, Any]:
    """A claim some earlier pod got: its devices (and counters, capacity) are in use."""
    requests = sorted({r["request"].split("/")[0] for r in results})
    obj = claim(name, [request(r) for r in requests])
    allocation: dict[str, Any] = {"devices": {"results": results}}
    if node_name:
        allocation["nodeSelector"] = node_selector_for(node_name)
    obj["status"] = {"allocation": allocation}
    return obj


def template(
    name: str, requests: list[dict[str, Any]], ns: str = "default", **devices_extra: Any
) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": requests}
    devices.update(devices_extra)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"spec": {"devices": devices}},
    }


def pod(name: str, claims: list[tuple[str, str, str]], ns: str = "default") -> dict[str, Any]:
    """claims: (entry name, 'template'|'claim', object name)."""
    entries = []
    for entry, how, obj in claims:
        key = "resourceClaimTemplateName" if how == "template" else "resourceClaimName"
        entries.append({"name": entry, key: obj})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                    "resources": {"claims": [{"name": e} for e, _, _ in claims]},
                }
            ],
            "resourceClaims": entries,
        },
    }


def result(
    req: str, device: str, pool: str = "gpu-node-01", driver: str = DRIVER, **extra: Any
) -> dict[str, Any]:
    out = {"request": req, "driver": driver, "pool": pool, "device": device}
    out.update(extra)
    return out


def node_selector_for(node_name: str) -> dict[str, Any]:
    """What the allocator sets for node-local devices (allocator: matchFields metadata.name In [node])."""
    return {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
        ]
    }


def case(
    name: str,
    description: str,
    cites: list[str],
    objects: list[dict[str, Any]],
    expect: dict[str, Any],
    node_name: str | None = None,
    gates: dict[str, bool] | None = None,
    version: str | None = None,
) -> None:
    out: dict[str, Any] = {"name": name, "description": description, "cites": cites}
    if version:
        out["kubernetesVersion"] = version
    if gates:
        out["featureGates"] = gates
    if node_name:
        out["node"] = node_name
    out["objects"] = copy.deepcopy(objects)
    out["expect"] = expect
    CASES.append(out)


def local(results: list[dict[str, Any]], node_name: str = "gpu-node-01", **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"results": results, "nodeSelector": node_selector_for(node_name)}
    out.update(extra)
    return out


# -------------------------------------------------------------------------------------- MIG (KEP-4815)

_REFERENCE = ROOT.parent / "shared" / "reference" / "examples" / "h100x8-dynamic-mig.yaml"


def mig_pool(node_name: str = "gpu-node-01") -> list[dict[str, Any]]:
    """GPU 0 of the reference H100 node in the 1.35+ split-slice layout: counters slice + devices slice."""
    docs = list(yaml.safe_load_all(_REFERENCE.read_text()))
    counters = copy.deepcopy(docs[0])
    counters["spec"]["sharedCounters"] = counters["spec"]["sharedCounters"][:1]
    devices = copy.deepcopy(docs[1])
    for d in (counters, devices):
        d["spec"]["pool"]["resourceSliceCount"] = 2
        d["spec"]["nodeName"] = node_name
        d["spec"]["pool"]["name"] = node_name
        d["metadata"]["name"] = d["metadata"]["name"].replace("gpu-node-01", node_name)
    return [counters, devices]


def build() -> None:
    classes = nvidia_classes()
    four_gpus = gpu_slice("gpu-node-01", [gpu(i) for i in range(4)])
    kep4381 = "KEP-4381 (dra-structured-parameters) §Design Details: allocator"

    # ---- matchAttribute (PCIe root) -------------------------------------------------------------
    pair = claim(
        "train-pair",
        [request("gpus", count=2)],
        constraints=[{"requests": ["gpus"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}],
    )
    case(
        "match-attribute-two-gpus-same-pcie-root",
        "Two H100s under the same PCIe root: gpu-0 (pci0000:15) then gpu-1 (pci0000:27) violates the "
        "constraint, the search moves on to gpu-2 (pci0000:15).",
        [up("with-constraint"), kep4381 + " (matchAttribute)"],
        [*classes, four_gpus, pair],
        {"allocation": {"train-pair": local([result("gpus", "gpu-0"), result("gpus", "gpu-2")])}},
        node_name="gpu-node-01",
    )
    case(
        "match-attribute-backtracks-past-in-use-gpu",
        "gpu-0 is in use, so the first free GPU is gpu-1 (pci0000:27); its partner is gpu-3.",
        [up("with-constraint-for-request-retry"), kep4381],
        [*classes, four_gpus, allocated("inference-a", [result("gpu", "gpu-0")]), pair],
        {"allocation": {"train-pair": local([result("gpus", "gpu-1"), result("gpus", "gpu-3")])}},
        node_name="gpu-node-01",
    )
    case(
        "match-attribute-no-pair-left-is-unschedulable",
        "gpu-0 and gpu-1 are in use; gpu-2 and gpu-3 sit under different PCIe roots, so no pair fits.",
        [up("with-constraint-not-matching-string-attribute"), kep4381],
        [
            *classes,
            four_gpus,
            allocated("inference-a", [result("gpu", "gpu-0")]),
            allocated("inference-b", [result("gpu", "gpu-1")]),
            pair,
        ],
        {"unschedulable": True},
        node_name="gpu-node-01",
    )

    # ---- in use, count, All, claim limit ---------------------------------------------------------
    case(
        "in-use-gpus-from-allocated-claims-are-skipped",
        "Claims with status.allocation hold gpu-0 and gpu-2; a 2-GPU claim gets gpu-1 and gpu-3.",
        [up("already-allocated-devices"), "KEP-4381 §Scheduler: allocated claims"],
        [
            *classes,
            four_gpus,
            allocated("inference-a", [result("gpu", "gpu-0")]),
            allocated("inference-b", [result("gpu", "gpu-2")]),
            claim("train", [request("gpus", count=2)]),
        ],
        {"allocation": {"train": local([result("gpus", "gpu-1"), result("gpus", "gpu-3")])}},
    )
    case(
        "all-mode-takes-every-matching-gpu",
        "allocationMode All on a node with four free H100s returns all four, in slice order.",
        [up("all-devices-many"), kep4381 + " (AllocationModeAll)"],
        [*classes, four_gpus, claim("whole-node", [request("gpus", allocationMode="All")])],
        {
            "allocation": {
                "whole-node": local([result("gpus", f"gpu-{i}") for i in range(4)]),
            }
        },
        node_name="gpu-node-01",
    )
    case(
        "all-mode-with-one-gpu-in-use-is-unschedulable",
        "allocationMode All needs every matching device; gpu-3 is in use, so the claim does not fit.",
        [up("all-devices-some-allocated")],
        [
            *classes,
            four_gpus,
            allocated("inference-a", [result("gpu", "gpu-3")]),
            claim("whole-node", [request("gpus", allocationMode="All")]),
        ],
        {"unschedulable": True},
        node_name="gpu-node-01",
    )
    case(
        "claim-limit-33-gpus-is-an-error",
        "A claim asking for 33 devices exceeds the per-claim limit of 32 (upstream error, exit 3).",
        [
            up("too-many-devices-single-request"),
            "KEP-4381 §API: AllocationResultsMaxSize",
        ],
        [*classes, four_gpus, claim("huge", [request("gpus", count=33)])],
        {"error": "number of requested devices 33 exceeds the claim limit of 32"},
        node_name="gpu-node-01",
    )

    # ---- class then request selectors, CEL errors ------------------------------------------------
    mixed = gpu_slice(
        "gpu-node-01",
        [
            gpu(0, memory="40Gi"),
            gpu(1),
        ],
    )
    mixed["spec"]["devices"][0]["attributes"]["productName"] = {"string": "NVIDIA A100-SXM4-40GB"}
    mixed["spec"]["devices"][0]["attributes"]["architecture"] = {"string": "Ampere"}
    mixed["spec"]["devices"][0]["attributes"]["cudaComputeCapability"] = {"version": "8.0.0"}
    case(
        "request-selector-on-memory-and-compute-capability",
        "The class keeps both GPUs; the request's selectors (memory >= 64Gi, compute capability > 8.9) keep "
        "only gpu-1 (the 40Gi A100 fails the first selector, so the second is not evaluated for it).",
        [
            up("prioritized-list-subrequests-with-expressions"),
            kep4381 + " (selectors)",
        ],
        [
            *classes,
            mixed,
            claim(
                "hopper-only",
                [
                    request(
                        "gpu",
                        selectors=[
                            selector(f"device.capacity['{DRIVER}'].memory.compareTo(quantity('64Gi')) >= 0"),
                            selector(
                                f"device.attributes['{DRIVER}'].cudaComputeCapability"
                                ".isGreaterThan(semver('8.9.0'))"
                            ),
                        ],
                    )
                ],
            ),
        ],
        {"allocation": {"hopper-only": local([result("gpu", "gpu-1")])}},
        node_name="gpu-node-01",
    )
    nic = {
        "name": "nic-0",
        "attributes": {"type": {"string": "nic"}},
    }
    case(
        "class-selector-guards-request-selector",
        "The class selector runs first and rejects the NIC-like device, so the request selector that reads "
        "productName never sees a device without it (no CEL runtime error).",
        [up("invalid-cel-one-device-class"), "KEP-4381 §DeviceClass selectors"],
        [
            *classes,
            gpu_slice("gpu-node-01", [nic, gpu(0)]),
            claim(
                "h100",
                [
                    request(
                        "gpu",
                        selectors=[
                            selector(f"device.attributes['{DRIVER}'].productName.startsWith('NVIDIA H100')")
                        ],
                    )
                ],
            ),
        ],
        {"allocation": {"h100": local([result("gpu", "gpu-0")])}},
        node_name="gpu-node-01",
    )
    any_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "any-nvidia-device"},
        "spec": {"selectors": [selector(f"device.driver == '{DRIVER}'")]},
    }
    case(
        "cel-runtime-error-missing-attribute-is-an-error",
        "The request selector reads productName, which the first device (not a GPU) lacks: upstream aborts "
        "with a CEL runtime error (exit 3), not 'unschedulable'.",
        [
            up("invalid-cel-one-device"),
            "dra-semantics.md §2 (missing key = runtime error)",
        ],
        [
            any_class,
            gpu_slice("gpu-node-01", [nic, gpu(0)]),
            claim(
                "h100",
                [
                    request(
                        "gpu",
                        "any-nvidia-device",
                        selectors=[
                            selector(f"device.attributes['{DRIVER}'].productName == 'NVIDIA H100 80GB HBM3'")
                        ],
                    )
                ],
            ),
        ],
        {"error": "CEL runtime error: no such key: productName"},
        node_name="gpu-node-01",
    )

    # ---- firstAvailable with MIG fallback ------------------------------------------------------------
    mig = mig_pool()
    case(
        "mig-split-slice-two-3g40gb-in-one-claim",
        "Two 3g.40gb MIG slices of one H100 (split-slice layout: counters in one slice, devices in another): "
        "9-0 uses memory slices 0-3 and 9-4 uses 4-7; together they fit the counters (120 of 132 SMs).",
        [up("partitionable-devices-multiple-devices"), "KEP-4815 §Design Details"],
        [
            *classes,
            *mig,
            claim("two-halves", [request("mig", "mig.nvidia.com", count=2, selectors=[profile("3g.40gb")])]),
        ],
        {
            "allocation": {
                "two-halves": local(
                    [result("mig", "gpu-0-mig-3g40gb-9-0"), result("mig", "gpu-0-mig-3g40gb-9-4")]
                )
            }
        },
        node_name="gpu-node-01",
    )
    case(
        "mig-blocked-by-allocated-full-gpu",
        "The full gpu-0 is allocated and consumes every counter of its counter set, so no MIG device fits.",
        [
            up("partitionable-devices-no-capacity-available"),
            "KEP-4815 §Design Details",
        ],
        [
            *classes,
            *mig,
            allocated("full-gpu", [result("gpu", "gpu-0")]),
            claim("small", [request("mig", "mig.nvidia.com", selectors=[profile("1g.10gb")])]),
        ],
        {"unschedulable": True},
        node_name="gpu-node-01",
    )
    case(
        "mig-1g10gb-next-to-allocated-3g40gb",
        "An allocated 3g.40gb holds memory slices 0-3, so 1g.10gb devices 19-0..19-3 are blocked by counters "
        "and the first that fits is 19-4.",
        [up("partitionable-devices-multiple-counters"), "KEP-4815 §Design Details"],
        [
            *classes,
            *mig,
            allocated("half", [result("mig", "gpu-0-mig-3g40gb-9-0")]),
            claim("small", [request("mig", "mig.nvidia.com", selectors=[profile("1g.10gb")])]),
        ],
        {"allocation": {"small": local([result("mig", "gpu-0-mig-1g10gb-19-4")])}},
        node_name="gpu-node-01",
    )
    case(
        "mig-node-with-partitionable-gate-off-is-unschedulable",
        "With DRAPartitionableDevices off, devices that consume counters cannot be allocated (and the "
        "counter "
        "slice is ignored): every device of a dynamic-MIG GPU does, so even an idle full GPU does not fit.",
        [up("partitionable-devices-disabled-device-consumes-counters"), "KEP-4815 §Feature gate"],
        [*classes, *mig, claim("full", [request("gpu")])],
        {"unschedulable": True},
        node_name="gpu-node-01",
        gates={"DRAPartitionableDevices": False},
    )
    case(
        "first-available-full-gpu-else-mig-3g40gb",
        "firstAvailable [full H100, 3g.40gb]: an allocated 1g.10gb holds memory slice 0, so neither the full "
        "GPU nor 3g.40gb 9-0 fits; the second subrequest gets 9-4 and the result names gpu/mig-3g.",
        [up("partitionable-devices-prioritized-list"), "KEP-4816 §Design Details"],
        [
            *classes,
            *mig,
            allocated("tiny", [result("mig", "gpu-0-mig-1g10gb-19-0")]),
            claim(
                "flexible",
                [
                    {
                        "name": "gpu",
                        "firstAvailable": [
                            {"name": "full", "deviceClassName": "gpu.nvidia.com"},
                            {
                                "name": "mig-3g",
                                "deviceClassName": "mig.nvidia.com",
                                "selectors": [profile("3g.40gb")],
                            },
                        ],
                    }
                ],
            ),
        ],
        {"allocation": {"flexible": local([result("gpu/mig-3g", "gpu-0-mig-3g40gb-9-4")])}},
        node_name="gpu-node-01",
    )
    case(
        "first-available-prefers-full-gpu-when-free",
        "firstAvailable [full H100, 3g.40gb] on an idle GPU: the first subrequest wins.",
        [up("prioritized-list-multi-request"), "KEP-4816 §Design Details"],
        [
            *classes,
            *mig,
            claim(
                "flexible",
                [
                    {
                        "name": "gpu",
                        "firstAvailable": [
                            {"name": "full", "deviceClassName": "gpu.nvidia.com"},
                            {
                                "name": "mig-3g",
                                "deviceClassName": "mig.nvidia.com",
                                "selectors": [profile("3g.40gb")],
                            },
                        ],
                    }
                ],
            ),
        ],
        {"allocation": {"flexible": local([result("gpu/full", "gpu-0")])}},
        node_name="gpu-node-01",
    )

    # ---- consumable capacity (KEP-5075) --------------------------------------------------------------
    def shared_gpu(index: int, policy: dict[str, Any]) -> dict[str, Any]:
        dev = gpu(index, memory="80Gi")
        dev["allowMultipleAllocations"] = True
        dev["capacity"]["memory"]["requestPolicy"] = policy
        return dev

    range_policy = {"default": "10Gi", "validRange": {"min": "10Gi", "step": "10Gi"}}
    case(
        "consumable-capacity-valid-range-rounds-up-to-step",
        "A shared H100 with memory requestPolicy validRange{min 10Gi, step 10Gi}: 15Gi is consumed as 20Gi; "
        "a second claim asking 70Gi no longer fits on gpu-0 (20+70 > 80) and gets a share of gpu-1.",
        [
            up("consumable-capacity-multi-allocatable-device-with-range-policy-step"),
            "KEP-5075 §Design Details: requestPolicy",
        ],
        [
            *classes,
            gpu_slice("gpu-node-01", [shared_gpu(0, range_policy), shared_gpu(1, range_policy)]),
            claim("small-share", [request("gpu", capacity={"requests": {"memory": "15Gi"}})]),
            claim("big-share", [request("gpu", capacity={"requests": {"memory": "70Gi"}})]),
        ],
        {
            "allocation": {
                "small-share": local([result("gpu", "gpu-0", consumedCapacity={"memory": "20Gi"})]),
                "big-share": local([result("gpu", "gpu-1", consumedCapacity={"memory": "70Gi"})]),
            }
        },
        node_name="gpu-node-01",
    )
    values_policy = {"default": "10Gi", "validValues": ["10Gi", "20Gi", "40Gi", "80Gi"]}
    in_use_share = allocated(
        "existing-share",
        [
            result(
                "gpu",
                "gpu-0",
                shareID="6f1c2b9e-3d4a-4f5b-8c7d-1e2f3a4b5c6d",
                consumedCapacity={"memory": "40Gi"},
            )
        ],
    )
    case(
        "consumable-capacity-valid-values-round-up-and-default",
        "validValues [10Gi, 20Gi, 40Gi, 80Gi] with 40Gi already consumed on gpu-0: 25Gi rounds up to "
        "40Gi and "
        "fills gpu-0; a claim without a capacity request consumes the policy default 10Gi, on gpu-1.",
        [
            up("consumable-capacity-multi-allocatable-device-with-valid-values-policy-round-up"),
            up("consumable-capacity-multi-allocatable-device-with-allocated-capacity-use-remaining"),
            "KEP-5075 §Design Details: requestPolicy",
        ],
        [
            *classes,
            gpu_slice("gpu-node-01", [shared_gpu(0, values_policy), shared_gpu(1, values_policy)]),
            in_use_share,
            claim("share-a", [request("gpu", capacity={"requests": {"memory": "25Gi"}})]),
            claim("share-b", [request("gpu")]),
        ],
        {
            "allocation": {
                "share-a": local([result("gpu", "gpu-0", consumedCapacity={"memory": "40Gi"})]),
                "share-b": local([result("gpu", "gpu-1", consumedCapacity={"memory": "10Gi"})]),
            }
        },
        node_name="gpu-node-01",
    )
    case(
        "distinct-attribute-puts-shares-on-different-gpus",
        "Two requests for a 10Gi share each with distinctAttribute gpu.nvidia.com/uuid: without the "
        "constraint "
        "both would share gpu-0; with it the second lands on gpu-1.",
        [
            up("distinct-constraint-two-multi-allocatable-devices-with-distinct-constraint"),
            "KEP-5075 §distinctAttribute",
        ],
        [
            *classes,
            gpu_slice("gpu-node-01", [shared_gpu(0, range_policy), shared_gpu(1, range_policy)]),
            claim(
                "replicas",
                [
                    request("a", capacity={"requests": {"memory": "10Gi"}}),
                    request("b", capacity={"requests": {"memory": "10Gi"}}),
                ],
                constraints=[{"requests": ["a", "b"], "distinctAttribute": f"{DRIVER}/uuid"}],
            ),
        ],
        {
            "allocation": {
                "replicas": local(
                    [
                        result("a", "gpu-0", consumedCapacity={"memory": "10Gi"}),
                        result("b", "gpu-1", consumedCapacity={"memory": "10Gi"}),
                    ]
                )
            }
        },
        node_name="gpu-node-01",
    )

    # ---- taints and tolerations (KEP-5055) ------------------------------------------------------------
    def tainted(index: int, effect: str, value: str = "79") -> dict[str, Any]:
        return gpu(index, taints=[{"key": "nvidia.com/gpu-xid", "value": value, "effect": effect}])

    tol_exists = [{"key": "nvidia.com/gpu-xid", "operator": "Exists", "effect": "NoExecute"}]
    case(
        "taint-noexecute-tolerated-with-exists",
        "gpu-0 carries a NoExecute XID taint; the request tolerates it with operator Exists, so gpu-0 is "
        "allocated and the result carries a copy of the request's tolerations.",
        [up("tainted-two-devices-tolerated"), "KEP-5055 §Design Details"],
        [
            *classes,
            gpu_slice("gpu-node-01", [tainted(0, "NoExecute"), gpu(1)]),
            claim("debug", [request("gpu", tolerations=tol_exists)]),
        ],
        {"allocation": {"debug": local([result("gpu", "gpu-0", tolerations=tol_exists)])}},
        node_name="gpu-node-01",
    )
    case(
        "taint-noschedule-skips-device",
        "gpu-0 carries a NoSchedule taint and the request has no toleration: gpu-1 is allocated.",
        [up("tainted-two-devices"), "KEP-5055 §Design Details"],
        [
            *classes,
            gpu_slice("gpu-node-01", [tainted(0, "NoSchedule"), gpu(1)]),
            claim("train", [request("gpu")]),
        ],
        {"allocation": {"train": local([result("gpu", "gpu-1")])}},
        node_name="gpu-node-01",
    )

    # ---- DeviceTaintRules (KEP-5055): kube-scheduler's slice tracker adds a rule's taint to the devices
    # its selector matches (k8s.io/dynamic-resource-allocation resourceslice/tracker applyPatches).
    def taint_rule(name: str, selector: dict[str, Any], effect: str = "NoSchedule") -> dict[str, Any]:
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceTaintRule",
            "metadata": {"name": name},
            "spec": {
                "deviceSelector": selector,
                "taint": {"key": "example.com/maintenance", "effect": effect},
            },
        }

    rule_gates = {"DRADeviceTaintRules": True}  # GA and on in 1.37; beta, off by default in 1.36
    # 1.36 serves DeviceTaintRule only as v1beta2, its gate off by default: the cases are pinned to 1.37.
    case(
        "taint-rule-skips-the-device-it-selects",
        "A DeviceTaintRule selecting gpu-0 by driver, pool and device adds its NoSchedule taint to gpu-0: a "
        "request without a toleration gets gpu-1.",
        ["resourceslice/tracker/tracker.go applyPatches (k8s.io/dynamic-resource-allocation)", "KEP-5055"],
        [
            *classes,
            gpu_slice("gpu-node-01", [gpu(0), gpu(1)]),
            taint_rule("gpu-0-maintenance", {"driver": DRIVER, "pool": "gpu-node-01", "device": "gpu-0"}),
            claim("train", [request("gpu")]),
        ],
        {"allocation": {"train": local([result("gpu", "gpu-1")])}},
        node_name="gpu-node-01",
        gates=rule_gates,
        version="1.37",
    )
    tol_rule = [{"key": "example.com/maintenance", "operator": "Exists", "effect": "NoExecute"}]
    case(
        "taint-rule-for-a-pool-tolerated",
        "A NoExecute DeviceTaintRule selecting the node's whole pool (no device named) taints both GPUs; "
        "a request tolerating it gets gpu-0, one without a toleration nothing.",
        ["resourceslice/tracker/tracker.go applyPatches (k8s.io/dynamic-resource-allocation)", "KEP-5055"],
        [
            *classes,
            gpu_slice("gpu-node-01", [gpu(0), gpu(1)]),
            taint_rule("drain", {"driver": DRIVER, "pool": "gpu-node-01"}, effect="NoExecute"),
            claim("debug", [request("gpu", tolerations=tol_rule)]),
        ],
        {"allocation": {"debug": local([result("gpu", "gpu-0", tolerations=tol_rule)])}},
        node_name="gpu-node-01",
        gates=rule_gates,
        version="1.37",
    )
    case(
        "taint-rule-blocks-an-untolerating-request",
        "A DeviceTaintRule selecting the node's pool by name alone (no driver, no device) taints every "
        "device of it: a request without a toleration is unschedulable.",
        ["resourceslice/tracker/tracker.go applyPatches (k8s.io/dynamic-resource-allocation)", "KEP-5055"],
        [
            *classes,
            gpu_slice("gpu-node-01", [gpu(0), gpu(1)]),
            # Not an empty selector: it would taint every device of the cluster, and the corpus shares its
            # control plane with the other e2e lanes (tests/e2e/conftest.py); unit tests cover that case.
            taint_rule("the-pool", {"pool": "gpu-node-01"}),
            claim("train", [request("gpu")]),
        ],
        {"unschedulable": True},
        node_name="gpu-node-01",
        gates=rule_gates,
        version="1.37",
    )
    tol_equal_wrong = [
        {"key": "nvidia.com/gpu-xid", "operator": "Equal", "value": "48", "effect": "NoSchedule"}
    ]
    case(
        "taint-toleration-equal-with-other-value-does-not-match",
        "The toleration (Equal, value 48) does not match the taint (value 79), so gpu-0 stays blocked; gpu-1 "
        "is allocated and still records the request's tolerations.",
        [up("tainted-one-device-two-taints"), "KEP-5055 §Design Details"],
        [
            *classes,
            gpu_slice("gpu-node-01", [tainted(0, "NoSchedule"), gpu(1)]),
            claim("train", [request("gpu", tolerations=tol_equal_wrong)]),
        ],
        {"allocation": {"train": local([result("gpu", "gpu-1", tolerations=tol_equal_wrong)])}},
        node_name="gpu-node-01",
    )
    case(
        "taint-effect-none-does-not-block",
        "A taint with effect None is informational: gpu-0 is still allocated.",
        [up("tainted-no-effect"), "KEP-5055 §Design Details (effect None, 1.35)"],
        [
            *classes,
            gpu_slice("gpu-node-01", [tainted(0, "None"), gpu(1)]),
            claim("train", [request("gpu")]),
        ],
        {"allocation": {"train": local([result("gpu", "gpu-0")])}},
        node_name="gpu-node-01",
    )
    case(
        "taint-all-gpus-tainted-is-unschedulable",
        "Both GPUs carry NoExecute taints and nothing tolerates them.",
        [up("tainted-two-devices"), "KEP-5055 §Design Details"],
        [
            *classes,
            gpu_slice("gpu-node-01", [tainted(0, "NoExecute"), tainted(1, "NoSchedule", "48")]),
            claim("train", [request("gpu")]),
        ],
        {"unschedulable": True},
        node_name="gpu-node-01",
    )

    # ---- admin access (KEP-5018) ------------------------------------------------------------------------
    case(
        "admin-access-monitors-gpu-in-use",
        "A monitoring claim with adminAccess (on a cluster its namespace needs the label "
        "resource.kubernetes.io/admin-access) gets gpu-0 although a training claim holds it; admin access "
        "does not count as in use.",
        [up("admin-access-enabled"), "KEP-5018 §Design Details"],
        [
            *classes,
            four_gpus,
            allocated("train", [result("gpu", "gpu-0")]),
            claim("dcgm-probe", [request("gpu", adminAccess=True)], ns="gpu-monitoring"),
        ],
        {"allocation": {"dcgm-probe": local([result("gpu", "gpu-0", adminAccess=True)])}},
        node_name="gpu-node-01",
    )

    # ---- config -------------------------------------------------------------------------------------------
    class_cfg = [
        {
            "opaque": {
                "driver": DRIVER,
                "parameters": {
                    "apiVersion": "resource.nvidia.com/v1beta1",
                    "kind": "GpuConfig",
                    "sharing": {"strategy": "TimeSlicing"},
                },
            }
        }
    ]
    claim_cfg = {
        "requests": ["gpu"],
        "opaque": {
            "driver": DRIVER,
            "parameters": {
                "apiVersion": "resource.nvidia.com/v1beta1",
                "kind": "GpuConfig",
                "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50}},
            },
        },
    }
    case(
        "allocation-config-from-class-then-claim",
        "The class's opaque GpuConfig is copied with source FromClass for the requests that used the class, "
        "then the claim's config with source FromClaim.",
        [
            up("with-class-device-config"),
            up("claim-with-device-config"),
            "KEP-4381 §API: DeviceAllocationConfiguration",
        ],
        [
            *nvidia_classes(class_cfg),
            four_gpus,
            claim("mps-share", [request("gpu")], config=[claim_cfg]),
        ],
        {
            "allocation": {
                "mps-share": local(
                    [result("gpu", "gpu-0")],
                    config=[
                        dict(class_cfg[0], requests=["gpu"], source="FromClass"),
                        dict(claim_cfg, source="FromClaim"),
                    ],
                )
            }
        },
        node_name="gpu-node-01",
    )

    # ---- binding conditions (KEP-5007) ----------------------------------------------------------------
    fabric = gpu(
        0,
        bindsToNode=True,
        bindingConditions=["dra.nvidia.com/fabric-attached"],
        bindingFailureConditions=["dra.nvidia.com/fabric-attach-failed"],
    )
    case(
        "binding-conditions-copied-and-bind-to-node",
        "A fabric-attached GPU published for all nodes with bindsToNode and binding conditions: the result "
        "copies the conditions and the allocation is pinned to the chosen node.",
        [
            up("device-binding-conditions"),
            up("node-restriction"),
            "KEP-5007 §Design Details",
        ],
        [
            node("gpu-node-01"),
            *classes,
            gpu_slice("fabric", [fabric], pool="fabric-pool", allNodes=True, name="fabric-gpu.nvidia.com"),
            claim("attached", [request("gpu")]),
        ],
        {
            "allocation": {
                "attached": local(
                    [
                        result(
                            "gpu",
                            "gpu-0",
                            pool="fabric-pool",
                            bindingConditions=["dra.nvidia.com/fabric-attached"],
                            bindingFailureConditions=["dra.nvidia.com/fabric-attach-failed"],
                        )
                    ]
                )
            }
        },
    )

    # ---- node selection: nodeName, nodeSelector, allNodes, perDeviceNodeSelection ---------------------
    case(
        "multi-node-first-fit-in-name-order-derived-nodes",
        "No Node objects: nodes are derived from the slices' nodeName (gpu-node-01..03, input order "
        "scrambled). gpu-node-01's only GPU is in use, so the first node that fits in name order is "
        "gpu-node-02.",
        ["kube-scheduler Filter over nodes; issue 2 scope 6 (nodes in name order, first fit wins)"],
        [
            *classes,
            gpu_slice("gpu-node-03", [gpu(0, node_index=3)]),
            gpu_slice("gpu-node-01", [gpu(0, node_index=1)]),
            gpu_slice("gpu-node-02", [gpu(0, node_index=2)]),
            allocated("inference-a", [result("gpu", "gpu-0", pool="gpu-node-01")]),
            claim("train", [request("gpu")]),
        ],
        {"allocation": {"train": local([result("gpu", "gpu-0", pool="gpu-node-02")], "gpu-node-02")}},
    )
    case(
        "multi-node-node-objects-sorted-by-name",
        "Node objects given out of order: gpu-node-a is tried before gpu-node-b and fits.",
        ["issue 2 scope 6 (nodes in name order, first fit wins)"],
        [
            node("gpu-node-b"),
            node("gpu-node-a"),
            *classes,
            gpu_slice("gpu-node-b", [gpu(0, node_index=2)]),
            gpu_slice("gpu-node-a", [gpu(0, node_index=1)]),
            claim("train", [request("gpu")]),
        ],
        {"allocation": {"train": local([result("gpu", "gpu-0", pool="gpu-node-a")], "gpu-node-a")}},
    )
    case(
        "multi-node-incomplete-pool-skipped-next-node-fits",
        "gpu-node-01's pool says resourceSliceCount 2 but only one slice is published (incomplete: never "
        "allocated from), so the claim lands on gpu-node-02.",
        [
            up("no-allocation-from-incomplete-pools"),
            kep4381 + " (pool completeness)",
        ],
        [
            *classes,
            gpu_slice("gpu-node-01", [gpu(0)], count=2, name="gpu-node-01-gpu.nvidia.com-0"),
            gpu_slice("gpu-node-02", [gpu(0, node_index=2)]),
            claim("train", [request("gpu")]),
        ],
        {"allocation": {"train": local([result("gpu", "gpu-0", pool="gpu-node-02")], "gpu-node-02")}},
    )
    case(
        "pool-generation-newest-slice-wins",
        "Two slices of pool gpu-node-01: generation 1 lists gpu-0, generation 2 lists gpu-1. Only the newest "
        "generation counts, so gpu-1 is allocated.",
        [up("obsolete-slice"), kep4381 + " (pool generation)"],
        [
            *classes,
            gpu_slice("gpu-node-01", [gpu(0)], generation=1, name="gpu-node-01-gpu.nvidia.com-old"),
            gpu_slice("gpu-node-01", [gpu(1)], generation=2, name="gpu-node-01-gpu.nvidia.com-new"),
            claim("train", [request("gpu")]),
        ],
        {"allocation": {"train": local([result("gpu", "gpu-1")])}},
        node_name="gpu-node-01",
    )
    rack_sel = {
        "nodeSelectorTerms": [
            {
                "matchExpressions": [
                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-b"]}
                ]
            }
        ]
    }
    case(
        "network-attached-gpu-visible-by-node-selector",
        "A network-attached GPU pool is published with a nodeSelector for zone-b. gpu-node-a (zone-a) is "
        "tried "
        "first and sees nothing; gpu-node-b fits and the allocation carries the slice's nodeSelector.",
        [up("network-attached-device"), kep4381 + " (nodeSelector slices)"],
        [
            node("gpu-node-a", {"topology.kubernetes.io/zone": "zone-a"}),
            node("gpu-node-b", {"topology.kubernetes.io/zone": "zone-b"}),
            *classes,
            gpu_slice(
                "zone-b", [gpu(0)], pool="zone-b-composable", nodeSelector=rack_sel, name="zone-b-gpus"
            ),
            claim("remote", [request("gpu")]),
        ],
        {
            "allocation": {
                "remote": {
                    "results": [result("gpu", "gpu-0", pool="zone-b-composable")],
                    "nodeSelector": rack_sel,
                }
            }
        },
    )
    case(
        "all-nodes-slice-allocation-has-no-node-selector",
        "Devices from a slice with allNodes: true are reachable everywhere: the allocation has no "
        "nodeSelector.",
        [up("many-network-attached-devices"), kep4381 + " (allNodes)"],
        [
            node("gpu-node-01"),
            *classes,
            gpu_slice("cluster", [gpu(0)], pool="cluster-pool", allNodes=True, name="cluster-gpus"),
            claim("remote", [request("gpu")]),
        ],
        {
            "allocation": {
                "remote": {"results": [result("gpu", "gpu-0", pool="cluster-pool")], "nodeSelector": None}
            }
        },
    )
    per_dev = [
        dict(gpu(0, node_index=2), nodeName="gpu-node-02"),
        dict(gpu(1, node_index=1), nodeName="gpu-node-01"),
    ]
    case(
        "per-device-node-selection-picks-device-of-node",
        "A multi-host pool with perDeviceNodeSelection: gpu-0 belongs to gpu-node-02, gpu-1 to gpu-node-01. "
        "Nodes (derived from the devices' nodeName) are tried in name order: gpu-node-01 gets gpu-1.",
        [
            up("partitionable-devices-per-device-node-selection-nodename"),
            "KEP-4815 §perDeviceNodeSelection",
        ],
        [
            *classes,
            gpu_slice("rack-1", per_dev, pool="rack-1", perDeviceNodeSelection=True, name="rack-1-gpus"),
            claim("train", [request("gpu")]),
        ],
        {"allocation": {"train": local([result("gpu", "gpu-1", pool="rack-1")], "gpu-node-01")}},
    )

    # ---- pods and templates -----------------------------------------------------------------------------
    one_gpu = template("one-gpu", [request("gpu")])
    rc = "KEP-4381 §kube-controller-manager (resourceclaim controller), pkg/controller/resourceclaim"
    case(
        "pods-with-templates-allocated-in-turn",
        "Two pods, each with a claim from template one-gpu: the controller instantiates a claim per pod; "
        "train-a is placed first and gets gpu-0, train-b sees it in use and gets gpu-1.",
        [rc, "issue 2 scope 6 (each pod's claims in turn)"],
        [
            *classes,
            gpu_slice("gpu-node-01", [gpu(0), gpu(1)]),
            one_gpu,
            pod("train-a", [("gpu", "template", "one-gpu")]),
            pod("train-b", [("gpu", "template", "one-gpu")]),
        ],
        {
            "allocation": {
                "pod/train-a/gpu": local([result("gpu", "gpu-0")]),
                "pod/train-b/gpu": local([result("gpu", "gpu-1")]),
            }
        },
    )
    case(
        "pods-with-templates-second-pod-does-not-fit",
        "One GPU, two pods wanting one each: train-a gets it, train-b is unschedulable (exit 1).",
        [rc, "issue 2 scope 6"],
        [
            *classes,
            gpu_slice("gpu-node-01", [gpu(0)]),
            one_gpu,
            pod("train-a", [("gpu", "template", "one-gpu")]),
            pod("train-b", [("gpu", "template", "one-gpu")]),
        ],
        {"unschedulable": True, "explanationContains": ["default/train-b"]},
    )
    case(
        "pod-claims-allocated-in-pod-order",
        "A pod lists a template claim before a named claim: its claims are allocated in the pod's order, so "
        "the template claim gets gpu-0 and the named claim gpu-1.",
        ["kube-scheduler dynamicresources PreFilter (claims in pod.spec.resourceClaims order)", rc],
        [
            *classes,
            gpu_slice("gpu-node-01", [gpu(0), gpu(1)]),
            one_gpu,
            claim("dataset-cache", [request("gpu")]),
            pod("etl", [("scratch", "template", "one-gpu"), ("cache", "claim", "dataset-cache")]),
        ],
        {
            "allocation": {
                "pod/etl/scratch": local([result("gpu", "gpu-0")]),
                "dataset-cache": local([result("gpu", "gpu-1")]),
            }
        },
    )
    case(
        "shared-claim-allocated-once-pins-second-pod-node",
        "Two pods share claim shared-gpu. The first pod allocates it on gpu-node-01; the second pod also "
        "needs "
        "its own GPU, but may only run where shared-gpu is (its allocation.nodeSelector) and gpu-node-01 has "
        "no GPU left, so it is unschedulable although gpu-node-02 is idle.",
        [
            "kube-scheduler dynamicresources Filter (allocated claims must match the node)",
            "KEP-4381 §Sharing",
        ],
        [
            *classes,
            gpu_slice("gpu-node-01", [gpu(0)]),
            gpu_slice("gpu-node-02", [gpu(0, node_index=2)]),
            one_gpu,
            claim("shared-gpu", [request("gpu")]),
            pod("producer", [("shared", "claim", "shared-gpu")]),
            pod("consumer", [("shared", "claim", "shared-gpu"), ("own", "template", "one-gpu")]),
        ],
        {"unschedulable": True, "explanationContains": ["default/consumer", "shared-gpu"]},
    )
    case(
        "loose-claims-allocated-before-pods",
        "Claims no pod references are allocated first, as one pod's claims would be; then the pods.",
        ["kdra allocate contract (README): loose claims first"],
        [
            *classes,
            gpu_slice("gpu-node-01", [gpu(0), gpu(1)]),
            one_gpu,
            pod("train-a", [("gpu", "template", "one-gpu")]),
            claim("notebook", [request("gpu")]),
        ],
        {
            "allocation": {
                "notebook": local([result("gpu", "gpu-0")]),
                "pod/train-a/gpu": local([result("gpu", "gpu-1")]),
            }
        },
    )

    # ---- invalid input (validation, exit 2) -------------------------------------------------------------
    case(
        "invalid-request-name-not-dns-label",
        "A request named GPU_0 is not a DNS label: validation rejects the claim (exit 2).",
        ["pkg/apis/resource/validation/validation.go validateDeviceRequest (DNS label)"],
        [*classes, four_gpus, claim("bad", [request("GPU_0")])],
        {"invalid": ["ResourceClaim default/bad", "spec.devices.requests[0].name", "GPU_0"]},
    )
    case(
        "invalid-attribute-string-longer-than-64",
        "A string attribute longer than 64 characters is rejected by validation (exit 2).",
        ["pkg/apis/resource/validation/validation.go (DeviceAttributeMaxValueLength)"],
        [
            *classes,
            gpu_slice("gpu-node-01", [dict(gpu(0), attributes={"productName": {"string": "x" * 65}})]),
            claim("ok", [request("gpu")]),
        ],
        {"invalid": ["ResourceSlice gpu-node-01-gpu.nvidia.com", "productName"]},
    )


def main() -> int:
    build()
    OUT.mkdir(parents=True, exist_ok=True)
    for c in CASES:
        (OUT / f"{c['name']}.yaml").write_text(
            yaml.safe_dump(c, sort_keys=False, default_flow_style=False, width=120)
        )
    print(f"wrote {len(CASES)} cases to {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
