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

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kdra.api import wellknown as wk
from kdra.api.quantity import parse_quantity_any

NVIDIA_DRIVER = wk.NVIDIA_GPU_DRIVER
HAMI_DRIVER = wk.HAMI_DRIVER
AMD_DRIVER = wk.AMD_GPU_DRIVER
TPU_DRIVER = wk.TPU_DRIVER
INTEL_DRIVER = wk.INTEL_GPU_DRIVER

GPU_CLASS = wk.NVIDIA_GPU_CLASS
MIG_CLASS = wk.NVIDIA_MIG_CLASS
HAMI_CLASS = "hami-core-gpu.project-hami.io"
AMD_CLASS = wk.AMD_GPU_CLASS
TPU_CLASS = wk.TPU_CLASS
INTEL_CLASS = "gpu.intel.com"

NVIDIA_GPU = wk.NVIDIA_GPU_RESOURCE
NVIDIA_SHARED = "nvidia.com/gpu.shared"
AMD_GPU = wk.AMD_GPU_RESOURCE
GOOGLE_TPU = "google.com/tpu"
HAMI_MEMORY = "nvidia.com/gpumem"
HAMI_MEMORY_PERCENT = "nvidia.com/gpumem-percentage"
HAMI_CORES = "nvidia.com/gpucores"
INTEL_GPUS = ("gpu.intel.com/i915", "gpu.intel.com/xe")

_MIG = re.compile(r"^nvidia\.com/mig-(\d+g\.\d+gb)((?:[.+][a-z]+)*)$")

# Device-plugin names kdra knows and refuses to convert, with why and what to do instead.
REFUSED: dict[str, str] = {
    "nvidia.com/priority": "HAMi's task priority has no equivalent in a ResourceClaim; remove it, or keep "
    "HAMi's "
    "device plugin for this workload",
    "gpu.intel.com/millicores": "Intel's GPU shares (millicores) have no consumable capacity in Intel's DRA "
    "driver; request a whole gpu.intel.com/i915 or keep the device plugin",
    "gpu.intel.com/memory.max": "Intel's GPU memory shares have no consumable capacity in Intel's DRA "
    "driver; "
    "request a whole gpu.intel.com/i915 or keep the device plugin",
    "gpu.intel.com/tiles": "Intel's GPU tiles are not published as DRA devices; request whole GPUs",
}

# A MIG compute instance smaller than its GPU instance (`1c.3g.40gb`: 1 of the 3 compute slices of a 3g.40gb
# GPU instance), as the device plugin's mixed strategy names go-nvlib's profile string. NVIDIA's DRA driver
# publishes only MIG devices whose compute instance spans the GPU instance (nvlib.go getGpuInfo skips every
# profile with C != G), so no DRA device is such a slice, and no claim can ask for one.
_MIG_COMPUTE_INSTANCE = re.compile(r"^nvidia\.com/mig-(\d+)c\.(\d+)g\.(\d+gb)((?:[.+][a-z]+)*)$")


def refusal(name: str) -> tuple[str, str] | None:
    """(what, hint) for a device-plugin name kdra knows and refuses to convert to a claim; None for any other
    name."""
    if name in REFUSED:
        return f"{name} cannot be migrated", REFUSED[name]
    return compute_instance_refusal(name)


def compute_instance_refusal(name: str) -> tuple[str, str] | None:
    """(what, hint) for a MIG compute-instance profile (no DRA device in either mode); None otherwise."""
    match = _MIG_COMPUTE_INSTANCE.match(name)
    if match is None:
        return None
    cis, gis, memory, suffix = match.groups()
    instance = f"{gis}g.{memory}{suffix.replace('+', '.')}"
    return (
        f"{name} is a MIG compute instance ({cis} of the {gis} compute slices of a {gis}g.{memory} GPU "
        "instance), and NVIDIA's DRA driver publishes only MIG devices whose compute instance spans the "
        "whole GPU instance: no claim can ask for it",
        f"request the whole GPU instance (nvidia.com/mig-{instance}, which kdra migrate converts; it has "
        f"{gis} compute slices, not {cis}), or keep the device plugin for this workload",
    )


# Any accelerator request kdra must account for: a key under `limits`/`requests` (or a quota key) that
# names one of these vendors.
VENDOR_RESOURCE = re.compile(r"^(?:nvidia\.com/.+|amd\.com/.+|gpu\.intel\.com/.+|google\.com/tpu)$")
QUOTA_PREFIX = re.compile(r"^(requests|limits)\.(.+)$")

# Cheap text test for documents that may contain any of it (skip parsing ConfigMaps and CRDs).
LEGACY_PATTERN = re.compile(r"nvidia\.com/|amd\.com/|google\.com/tpu|gpu\.intel\.com/")


# Accelerators whose device plugins kdra has no DRA conversion for (no DRA driver kdra knows publishes them):
# AWS Neuron, Intel Gaudi (Habana), Huawei Ascend, Cambricon MLU, Hygon DCU, MetaX, Iluvatar, Moore Threads,
# Volcano's vGPU, Qualcomm Cloud AI, Xilinx FPGAs. Their requests stay as they are, with a warning naming
# them: the workload keeps needing that device plugin, so a migration must not pass them in silence.
_OTHER_WORDS = (
    "aws.amazon.com/neuron",
    "habana.ai/",
    "huawei.com/Ascend",
    "cambricon.com/",
    "hygon.com/",
    "metax-tech.com/",
    "iluvatar.ai/",
    "mthreads.com/",
    "volcano.sh/vgpu",
    "qualcomm.com/qaic",
    "xilinx.com/",
)
OTHER_ACCELERATOR = re.compile("|".join(re.escape(word) for word in _OTHER_WORDS))


# NVIDIA's network operator publishes NICs under nvidia.com/ with names the cluster chooses: the host-device
# plugin's nvidia.com/hostdev, RDMA shared devices, SR-IOV pools (nvidia.com/mlnx_sriov_rdma ...). A training
# Job asks for them beside its GPUs; they are no GPU, and the operator's plugins keep serving them, so they
# are left as they are with a warning, like the accelerators above. Any other unknown nvidia.com/ name stays
# refused: it may be a GPU renamed by the device plugin's sharing config.
_NVIDIA_NIC_WORDS = ("hostdev", "rdma", "sriov", "mlnx", "nic", "roce", "infiniband")


def is_nvidia_nic(name: str) -> bool:
    if not name.startswith("nvidia.com/"):
        return False
    rest = name[len("nvidia.com/") :].lower()
    return "gpu" not in rest and any(word in rest for word in _NVIDIA_NIC_WORDS)


def is_other_accelerator(name: str) -> bool:
    return "/" in name and (OTHER_ACCELERATOR.match(name) is not None or is_nvidia_nic(name))


def mentions_other_accelerator(text: str, marks: list[int]) -> bool:
    """Whether `text` may name one of OTHER_ACCELERATOR (substring tests: half the time of the regex) or an
    NVIDIA NIC, read at `marks` (vendor_mentions' offsets: no second search of the text)."""
    if any(word in text for word in _OTHER_WORDS):
        return True
    for at in marks:
        end = at
        while end < len(text) and (text[end].isalnum() or text[end] in "._-/"):
            end += 1
        if is_nvidia_nic(text[at:end]):
            return True
    return False


def vendor_mentions(text: str) -> list[int]:
    """Offsets where a vendor's resource names start (`nvidia.com/`, `amd.com/`, `gpu.intel.com/`,
    `google.com/tpu`): a substring search for `.com/`, far cheaper than a regex alternation over the text."""
    out: list[int] = []
    at = text.find(".com/")
    while at >= 0:
        if text.startswith("nvidia", at - 6):
            out.append(at - 6)
        elif text.startswith("amd", at - 3):
            out.append(at - 3)
        elif text.startswith("gpu.intel", at - 9):
            out.append(at - 9)
        elif text.startswith("google", at - 6) and text.startswith("tpu", at + 5):
            out.append(at - 6)
        at = text.find(".com/", at + 5)
    return out


# An escape in a double-quoted YAML or JSON string that can spell a character of a vendor's prefix (a-z, `.`,
# `/`), or a line folded with `\` inside such a prefix (`nvidia\` at a line's end; a shell continuation has a
# space before it): `"nvidia.com\/gpu"` (JSON writers that escape the slash), `"nvidia\u002ecom/gpu"`. The
# parsed key names the vendor while the text does not, so vendor_mentions misses it.
_NAME_ESCAPE = re.compile(r"\\(?:/|(?:x|u00|U000000)(?:2[eEfF]|[67][0-9a-fA-F]))|[a-z.]\\\r?\n")


def may_escape(text: str) -> bool:
    """Whether a vendor's name may be spelled with escapes in `text`, out of vendor_mentions' sight (then the
    document's nodes are walked instead). Cheap: most documents have no backslash at all."""
    return "\\" in text and _NAME_ESCAPE.search(text) is not None


@dataclass(frozen=True)
class Legacy:
    """What a device-plugin resource name stands for."""

    # gpu | shared | mig | amd | tpu | intel | hami-memory | hami-memory-percent | hami-cores
    kind: str
    profile: str = ""  # MIG profile as the DRA driver spells it (attribute `profile`)


def classify(name: str) -> Legacy | None:
    if name == NVIDIA_GPU:
        return Legacy("gpu")
    if name == NVIDIA_SHARED:
        return Legacy("shared")
    if name == AMD_GPU:
        return Legacy("amd")
    if name == GOOGLE_TPU:
        return Legacy("tpu")
    if name in INTEL_GPUS:
        return Legacy("intel")
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


def is_vendor_resource(name: str) -> bool:
    return "/" in name and bool(VENDOR_RESOURCE.match(name)) and not is_nvidia_nic(name)


INT64_MAX = 2**63 - 1


def whole_number(value: Any) -> int | None:
    """The value as a non-negative integer, read as the API server reads a quantity (`2`, `"2"`, `2.0`,
    `2000m`, `1k`, `1G`: Kubernetes accepts any quantity whose value is whole for an extended resource), or
    None when it is no quantity or not a whole number."""
    try:
        quantity = parse_quantity_any(value)
    except (TypeError, ValueError):
        return None
    if quantity.sign() < 0 or quantity.nanos % 1_000_000_000:
        return None
    return quantity.value()


def kuberay_gpu_key(name: str) -> bool:
    """KubeRay's utils.IsGPUResourceKey: the resource names whose limit becomes Ray's num-gpus."""
    return name.endswith("gpu") or bool(re.fullmatch(r"nvidia\.com/mig-\d+g\.\d+gb", name))


def quota_class(name: str) -> str | None:
    """The DeviceClass whose `<class>.deviceclass.resource.k8s.io/devices` quota counts what `name`
    counted."""
    legacy = classify(name)
    if legacy is None:
        return None
    return {"gpu": GPU_CLASS, "amd": AMD_CLASS, "tpu": TPU_CLASS, "intel": INTEL_CLASS}.get(legacy.kind)


DEVICE_QUOTA_SUFFIX = ".deviceclass.resource.k8s.io/devices"


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


_GFD_SHARED = re.compile(r"-SHARED$")
_GFD_MIG = re.compile(r"-MIG-(\d+g\.\d+gb)(.*)$")


def _gfd_product(value: str) -> str:
    """GFD appends `-SHARED` (time-slicing with renamed resources) and `-MIG-<profile>` (MIG single strategy);
    the device's productName has neither."""
    return _GFD_MIG.sub("", _GFD_SHARED.sub("", value))


def gfd_shared(value: str) -> bool:
    """A GFD product label of a time-sliced (or MPS-shared) GPU: `Tesla-T4-SHARED`."""
    return bool(_GFD_SHARED.search(value))


def gfd_mig_profile(value: str) -> str | None:
    """The MIG profile of a GFD product label under the MIG single strategy (`...-MIG-1g.10gb` -> `1g.10gb`),
    where every nvidia.com/gpu of the node is such a slice."""
    match = _GFD_MIG.search(_GFD_SHARED.sub("", value))
    if not match:
        return None
    return match.group(1) + match.group(2).replace(".", "+").replace("-", "+")


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
    INTEL_CLASS: device_class(INTEL_CLASS, f"device.driver == {cel_string(INTEL_DRIVER)}"),
}

# A time-sliced GPU becomes a share of a device the driver publishes for multiple allocations.
SHARED_SELECTOR = "device.allowMultipleAllocations"

# Which attribute domain a class's devices carry productName/architecture in.
CLASS_DOMAIN: dict[str, str] = {GPU_CLASS: NVIDIA_DRIVER, MIG_CLASS: NVIDIA_DRIVER, HAMI_CLASS: HAMI_DRIVER}


def mig_selector(profile: str) -> str:
    return f"device.attributes[{cel_string(NVIDIA_DRIVER)}].profile == {cel_string(profile)}"


# KEP-6406's gate: DeviceClass.spec.extendedResourceCapacityRequests serves an extended resource as a
# capacity share of a device (nvidia.com/gpu.shared: 1 as shares: 1), with no pod change.
CAPACITY_REQUESTS_GATE = "DRAExtendedResourceCapacity"


def capacity_requests_release_note() -> str:
    """Which release kdra follows could serve a time-sliced GPU as an extended resource: KEP-6406's
    DeviceClass.spec.extendedResourceCapacityRequests, where a release's gates have it."""
    from kdra.api.features import GATES
    from kdra.api.versions import BUILDS

    having = [v for v, gates in GATES.items() if CAPACITY_REQUESTS_GATE in gates]
    if having:
        return f"Kubernetes {', '.join(having)} can, with {CAPACITY_REQUESTS_GATE} (KEP-6406)"
    newest = list(BUILDS)[-1]
    return (
        "a DeviceClass's extendedResourceCapacityRequests (KEP-6406) would serve it as capacity shares, but "
        f"no release kdra follows has it (newest: Kubernetes {newest}, {BUILDS[newest]})"
    )


def extended_resource_class(resource: str, legacy: Legacy) -> dict[str, Any] | None:
    """KEP-5004 DeviceClass serving `resource` through DRA; None when the request is not a device count."""
    if legacy.kind == "gpu":
        return device_class(GPU_CLASS, _typed(NVIDIA_DRIVER, "gpu"), resource)
    if legacy.kind == "amd":
        return device_class(AMD_CLASS, f"device.driver == {cel_string(AMD_DRIVER)}", resource)
    if legacy.kind == "tpu":
        return device_class(TPU_CLASS, f"device.driver == {cel_string(TPU_DRIVER)}", resource)
    if legacy.kind == "intel":
        return device_class(INTEL_CLASS, f"device.driver == {cel_string(INTEL_DRIVER)}", resource)
    if legacy.kind == "mig":
        name = "mig-" + legacy.profile.replace("+", "-") + ".nvidia.com"
        return device_class(
            name, _typed(NVIDIA_DRIVER, "mig") + " && " + mig_selector(legacy.profile), resource
        )
    return None


def catalog_shapes(requirements: Iterable[tuple[str, str, Sequence[str]]]) -> list[Any]:
    """See `_catalog_shapes` (memoised: a stream repeats the same few requirements)."""
    key = tuple((label, op, tuple(values)) for label, op, values in requirements)
    return list(_catalog_shapes(key))


@functools.lru_cache(maxsize=256)
def _catalog_shapes(requirements: tuple[tuple[str, str, tuple[str, ...]], ...]) -> tuple[Any, ...]:
    """The whole-GPU shapes (kdra.api.whole) of the NVIDIA models in kdra's catalog that node-label
    requirements on GPU models pick (GFD product or family, GKE accelerator; `In` only, every requirement
    must hold), as NVIDIA's driver publishes them for sharing: all of their memory. None without any."""
    from kdra.api.quantity import Quantity
    from kdra.api.whole import memory_shape
    from kdra.drivers.catalog import GpuModel, all_models

    models = [m for m in all_models() if isinstance(m, GpuModel)]
    picked = None
    for label, op, values in requirements:
        if op != "In":
            return ()
        if label == GFD_PRODUCT:
            names = {_gfd_product(v) for v in values}
            chosen = {m.key for m in models if m.product_name.replace(" ", "-") in names}
        elif label == GFD_FAMILY:
            families = {v.lower() for v in values}
            chosen = {m.key for m in models if m.architecture.lower() in families}
        elif label == GKE_ACCELERATOR:
            products = {p for v in values for p in GKE_PRODUCTS.get(v, ())}
            chosen = {m.key for m in models if m.product_name in products}
        else:
            continue
        picked = chosen if picked is None else picked & chosen
    if not picked:
        return ()
    memories = sorted({m.memory_mib for m in models if m.key in picked})
    return tuple(memory_shape(NVIDIA_DRIVER, Quantity.parse(f"{mib}Mi")) for mib in memories)
