"""Device-plugin resource names, the DRA DeviceClasses that replace them, and node labels naming GPU products.

Facts (shared/reference/peers.md §2): NVIDIA's driver `gpu.nvidia.com` ships DeviceClasses `gpu.nvidia.com`
(type 'gpu', `extendedResourceName: nvidia.com/gpu`) and `mig.nvidia.com` (type 'mig', attribute `profile`
like `1g.10gb`); AMD's `gpu.amd.com` and Google's `tpu.google.com` select on the driver only; HAMi's DRA
driver `hami-core-gpu.project-hami.io` (type 'hami-gpu') publishes consumable capacities `memory` and `cores`
(0-100).
The device plugin advertises MIG profile `1g.10gb+me` as `nvidia.com/mig-1g.10gb.me` ('+' is not allowed in
resource names).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

NVIDIA_DRIVER = "gpu.nvidia.com"
HAMI_DRIVER = "hami-core-gpu.project-hami.io"
AMD_DRIVER = "gpu.amd.com"
TPU_DRIVER = "tpu.google.com"

GPU_CLASS = "gpu.nvidia.com"
MIG_CLASS = "mig.nvidia.com"
HAMI_CLASS = "hami-core-gpu.project-hami.io"
AMD_CLASS = "gpu.amd.com"
TPU_CLASS = "tpu.google.com"

NVIDIA_GPU = "nvidia.com/gpu"
AMD_GPU = "amd.com/gpu"
GOOGLE_TPU = "google.com/tpu"
HAMI_MEMORY = "nvidia.com/gpumem"
HAMI_MEMORY_PERCENT = "nvidia.com/gpumem-percentage"
HAMI_CORES = "nvidia.com/gpucores"

_MIG = re.compile(r"^nvidia\.com/mig-(\d+g\.\d+gb)((?:[.+][a-z]+)*)$")

# Known device-plugin names kdra deliberately leaves alone (see the package docstring).
UNCONVERTED: dict[str, str] = {
    "nvidia.com/gpu.shared": "time-slicing replicas have no DRA equivalent in a claim; configure sharing in "
    "the driver's opaque GpuConfig instead",
    "nvidia.com/priority": "HAMi task priority is not a device request",
}

# Any name that looks like a device-plugin accelerator request, for files that cannot be parsed.
LEGACY_PATTERN = re.compile(r"(nvidia\.com/(gpu|mig-|gpumem|gpucores)|amd\.com/gpu|google\.com/tpu)")


@dataclass(frozen=True)
class Legacy:
    """What a device-plugin resource name stands for."""

    kind: str  # "gpu" | "mig" | "amd" | "tpu" | "hami-memory" | "hami-memory-percent" | "hami-cores"
    profile: str = ""  # MIG profile as the DRA driver spells it (attribute `profile`)


def classify(name: str) -> Legacy | None:
    if name == NVIDIA_GPU:
        return Legacy("gpu")
    if name == AMD_GPU:
        return Legacy("amd")
    if name == GOOGLE_TPU:
        return Legacy("tpu")
    if name == HAMI_MEMORY:
        return Legacy("hami-memory")
    if name == HAMI_MEMORY_PERCENT:
        return Legacy("hami-memory-percent")
    if name == HAMI_CORES:
        return Legacy("hami-cores")
    match = _MIG.match(name)
    if match:
        suffix = match.group(2).replace(".", "+")
        return Legacy("mig", match.group(1) + suffix)
    return None


_WHOLE = re.compile(r"^\+?([0-9]+)(?:\.0*)?$")


def whole_number(value: Any) -> int | None:
    """The value as a non-negative integer (`2`, `"2"`, `2.0`: Kubernetes reads each as the quantity 2), or
    None when it is not a whole number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float):
        return int(value) if value.is_integer() and value >= 0 else None
    match = _WHOLE.match(value.strip()) if isinstance(value, str) else None
    return int(match.group(1)) if match else None


# Node labels that name a GPU product, and how to say the same on the device.
GFD_PRODUCT = "nvidia.com/gpu.product"  # GPU Feature Discovery: NVML name with spaces as '-'
GFD_FAMILY = "nvidia.com/gpu.family"  # GPU Feature Discovery: architecture, lower case ('hopper')
GKE_ACCELERATOR = "cloud.google.com/gke-accelerator"

# GKE accelerator label values -> NVML product names (GKE machine families; SXM parts unless noted).
GKE_PRODUCTS: dict[str, tuple[str, ...]] = {
    "nvidia-tesla-t4": ("Tesla T4",),
    "nvidia-tesla-v100": ("Tesla V100-SXM2-16GB",),
    "nvidia-tesla-p100": ("Tesla P100-PCIE-16GB",),
    "nvidia-tesla-p4": ("Tesla P4",),
    "nvidia-l4": ("NVIDIA L4",),
    "nvidia-tesla-a100": ("NVIDIA A100-SXM4-40GB",),
    "nvidia-a100-80gb": ("NVIDIA A100-SXM4-80GB",),
    "nvidia-h100-80gb": ("NVIDIA H100 80GB HBM3",),
    "nvidia-h100-mega-80gb": ("NVIDIA H100 80GB HBM3",),
    "nvidia-h200-141gb": ("NVIDIA H200",),
    "nvidia-b200": ("NVIDIA B200",),
}

PRODUCT_LABELS = (GFD_PRODUCT, GFD_FAMILY, GKE_ACCELERATOR)


def cel_string(value: str) -> str:
    """A CEL string literal."""
    escaped = value.replace("\\", "\\\\").replace("'", "\\'")
    return f"'{escaped}'"


def _gfd_product(value: str) -> str:
    """GFD appends `-SHARED` (renamed time-slicing) and `-MIG-<profile>` (single strategy); the device's
    productName has neither."""
    value = re.sub(r"-SHARED$", "", value)
    return re.sub(r"-MIG-\d+g\.\d+gb.*$", "", value)


def product_expression(domain: str, label: str, operator: str, values: list[str]) -> str | None:
    """CEL over the device's attributes equivalent to a node label requirement, or None when there is none.

    GFD's product label is the NVML name with runs of spaces joined by '-' (`NVIDIA-H100-80GB-HBM3`), which
    cannot be inverted (`NVIDIA A100-SXM4-80GB` has a real '-'), so the expression rewrites the attribute.
    """
    attrs = f"device.attributes[{cel_string(domain)}]"
    if label == GFD_PRODUCT:
        subject = f"{attrs}.productName.replace(' ', '-')"
        names = sorted({_gfd_product(v) for v in values})
    elif label == GFD_FAMILY:
        subject = f"{attrs}.architecture.lowerAscii()"
        names = sorted({v.lower() for v in values})
    elif label == GKE_ACCELERATOR:
        subject = f"{attrs}.productName"
        products: set[str] = set()
        for value in values:
            known = GKE_PRODUCTS.get(value)
            if known is None:
                return None
            products.update(known)
        names = sorted(products)
    else:
        return None
    if not names:
        return None
    if len(names) == 1:
        expr = f"{subject} == {cel_string(names[0])}"
        return expr if operator == "In" else f"{subject} != {cel_string(names[0])}"
    expr = f"{subject} in [{', '.join(cel_string(n) for n in names)}]"
    return expr if operator == "In" else f"!({expr})"


def device_class(name: str, expression: str, extended_resource: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": expression}}]}
    if extended_resource:
        spec["extendedResourceName"] = extended_resource
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": spec,
    }


def _typed(driver: str, device_type: str) -> str:
    return f"device.driver == {cel_string(driver)} && device.attributes[{cel_string(driver)}].type == " + (
        cel_string(device_type)
    )


CLAIM_CLASSES: dict[str, dict[str, Any]] = {
    GPU_CLASS: device_class(GPU_CLASS, _typed(NVIDIA_DRIVER, "gpu")),
    MIG_CLASS: device_class(MIG_CLASS, _typed(NVIDIA_DRIVER, "mig")),
    HAMI_CLASS: device_class(HAMI_CLASS, _typed(HAMI_DRIVER, "hami-gpu")),
    AMD_CLASS: device_class(AMD_CLASS, f"device.driver == {cel_string(AMD_DRIVER)}"),
    TPU_CLASS: device_class(TPU_CLASS, f"device.driver == {cel_string(TPU_DRIVER)}"),
}

# Which attribute domain a class's devices carry productName/architecture in.
CLASS_DOMAIN: dict[str, str] = {GPU_CLASS: NVIDIA_DRIVER, MIG_CLASS: NVIDIA_DRIVER, HAMI_CLASS: HAMI_DRIVER}


def mig_selector(profile: str) -> str:
    return f"device.attributes[{cel_string(NVIDIA_DRIVER)}].profile == {cel_string(profile)}"


def extended_resource_class(resource: str, legacy: Legacy) -> dict[str, Any] | None:
    """KEP-5004 DeviceClass serving `resource` through DRA; None when the request is not a device count."""
    if legacy.kind == "gpu":
        return device_class(GPU_CLASS, _typed(NVIDIA_DRIVER, "gpu"), resource)
    if legacy.kind == "amd":
        return device_class(AMD_CLASS, f"device.driver == {cel_string(AMD_DRIVER)}", resource)
    if legacy.kind == "tpu":
        return device_class(TPU_CLASS, f"device.driver == {cel_string(TPU_DRIVER)}", resource)
    if legacy.kind == "mig":
        name = "mig-" + legacy.profile.replace("+", "-") + ".nvidia.com"
        return device_class(
            name, _typed(NVIDIA_DRIVER, "mig") + " && " + mig_selector(legacy.profile), resource
        )
    return None
