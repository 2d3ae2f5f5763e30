"""Build the bundled `kdra allocate` examples from the illustrative 8x H100 slices in shared/reference.

Run from the repository root: `python examples/allocate/make_examples.py` (needs ../shared). The YAML files it
writes are committed, so using them needs neither this script nor ../shared.

The reference node gives every GPU its own PCIe root; on HGX H100 boards GPUs sit in pairs behind PCIe
switches, so this example gives each pair one pcieRoot value to make a same-PCIe-root constraint meaningful.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT.parent / "shared" / "reference" / "examples"
OUT = Path(__file__).resolve().parent
DRIVER = "gpu.nvidia.com"
PAIR_ROOTS = ["pci0000:15", "pci0000:37", "pci0000:97", "pci0000:b7"]

HEADER = """\
# {title}
#
# Illustrative data: an 8x H100 node as the NVIDIA DRA driver publishes it with dynamic MIG (1.35+ split-slice
# layout: one slice of shared counter sets, one slice of devices per GPU), derived from
# shared/reference/examples by examples/allocate/make_examples.py. Try:
#   kdra allocate -f examples/allocate/{file} -o table
{extra}"""


def classes() -> list[dict[str, Any]]:
    """The DeviceClasses the NVIDIA DRA driver's Helm chart installs."""
    out = []
    for name, typ in (("gpu.nvidia.com", "gpu"), ("mig.nvidia.com", "mig")):
        out.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": name},
                "spec": {
                    "selectors": [
                        {
                            "cel": {
                                "expression": f"device.driver == '{DRIVER}' && "
                                f"device.attributes['{DRIVER}'].type == '{typ}'"
                            }
                        }
                    ]
                },
            }
        )
    return out


def node() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "gpu-node-01",
            "labels": {
                "kubernetes.io/hostname": "gpu-node-01",
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "nvidia.com/gpu.count": "8",
                "topology.kubernetes.io/zone": "zone-a",
            },
        },
    }


def mig_slices() -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all((REFERENCE / "h100x8-dynamic-mig.yaml").read_text()) if d]
    for doc in docs:
        for dev in doc["spec"].get("devices") or []:
            gpu_index = int(dev["name"].split("-")[1])
            dev["attributes"]["resource.kubernetes.io/pcieRoot"] = {"string": PAIR_ROOTS[gpu_index // 2]}
    return docs


def result(request: str, device: str) -> dict[str, Any]:
    return {"request": request, "driver": DRIVER, "pool": "gpu-node-01", "device": device}


def allocated_claim(name: str, ns: str, request: dict[str, Any], device: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"devices": {"requests": [request]}},
        "status": {
            "allocation": {
                "devices": {"results": [result(request["name"], device)]},
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": ["gpu-node-01"]}
                            ]
                        }
                    ]
                },
            }
        },
    }


def mig_request(name: str, profile: str) -> dict[str, Any]:
    return {
        "name": name,
        "exactly": {
            "deviceClassName": "mig.nvidia.com",
            "selectors": [{"cel": {"expression": f"device.attributes['{DRIVER}'].profile == '{profile}'"}}],
        },
    }


def template(name: str, ns: str, devices: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"spec": {"devices": devices}},
    }


def pod(name: str, ns: str, image: str, claims: list[tuple[str, str]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "containers": [
                {"name": "main", "image": image, "resources": {"claims": [{"name": c} for c, _ in claims]}}
            ],
            "resourceClaims": [{"name": c, "resourceClaimTemplateName": t} for c, t in claims],
        },
    }


def main_example() -> list[dict[str, Any]]:
    ml = "ml-team"
    two_gpus = template(
        "two-h100-same-pcie-root",
        ml,
        {
            "requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}],
            "constraints": [{"requests": ["gpus"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}],
        },
    )
    return [
        node(),
        *classes(),
        *mig_slices(),
        # Already running: a notebook on a 1g.10gb slice of GPU 0, an inference server on a 3g.40gb slice of
        # GPU 3, a batch job on the whole of GPU 4.
        allocated_claim("notebook-alice-mig", ml, mig_request("mig", "1g.10gb"), "gpu-0-mig-1g10gb-19-0"),
        allocated_claim("llama-inference-mig", ml, mig_request("mig", "3g.40gb"), "gpu-3-mig-3g40gb-9-0"),
        allocated_claim(
            "batch-embed-gpu", ml, {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}, "gpu-4"
        ),
        two_gpus,
        template("one-mig-3g40gb", ml, {"requests": [mig_request("mig", "3g.40gb")]}),
        template("one-mig-1g10gb", ml, {"requests": [mig_request("mig", "1g.10gb")]}),
        # New pods, placed in this order: the fine-tuning job needs two whole GPUs behind one PCIe switch
        # (pairs 0/1, 2/3 and 4/5 are each broken by a partition or job in use, so it gets 6/7); then a vLLM
        # server on a 3g.40gb slice and a notebook on a 1g.10gb slice, both packed onto GPU 0.
        pod("llm-finetune", ml, "nvcr.io/nvidia/pytorch:25.01-py3", [("gpus", "two-h100-same-pcie-root")]),
        pod("vllm-serve", ml, "vllm/vllm-openai:v0.8.0", [("mig", "one-mig-3g40gb")]),
        pod("jupyter-bob", ml, "jupyter/base-notebook:latest", [("mig", "one-mig-1g10gb")]),
    ]


def unschedulable_example() -> list[dict[str, Any]]:
    ml = "ml-team"
    slices = [d for d in yaml.safe_load_all((REFERENCE / "h100x8-static.yaml").read_text()) if d]
    busy = [
        allocated_claim(
            f"batch-{i}", ml, {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}, f"gpu-{i}"
        )
        for i in (1, 5)
    ]
    want = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "h200-pair", "namespace": ml},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpus",
                        "exactly": {
                            "deviceClassName": "gpu.nvidia.com",
                            "count": 2,
                            "selectors": [
                                {
                                    "cel": {
                                        "expression": f"device.capacity['{DRIVER}'].memory"
                                        ".compareTo(quantity('141Gi')) >= 0"
                                    }
                                }
                            ],
                        },
                    }
                ]
            }
        },
    }
    return [node(), *classes()[:1], *slices, *busy, want]


def write(name: str, title: str, extra: str, objects: list[dict[str, Any]]) -> None:
    text = HEADER.format(title=title, file=name, extra=extra)
    text += yaml.safe_dump_all([copy.deepcopy(o) for o in objects], sort_keys=False, default_flow_style=False)
    (OUT / name).write_text(text)


def main() -> int:
    write(
        "h100-mig-node.yaml",
        "An 8x H100 node with dynamic MIG, three claims in use, three pods to place (README example).",
        "# Expected: exit 0; llm-finetune gets gpu-6 + gpu-7, vllm-serve gpu-0-mig-3g40gb-9-4,\n"
        "# jupyter-bob gpu-0-mig-1g10gb-19-1.\n",
        main_example(),
    )
    write(
        "unschedulable.yaml",
        "A claim that cannot fit: two GPUs with >= 141Gi of memory (H200-class) on an H100 node.",
        "# Expected: exit 1 and an explanation naming the nearest miss (memory 79.65Gi vs. the selector).\n",
        unschedulable_example(),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
