"""Well-known names: the DRA drivers kdra models, the DeviceClasses their charts install and the
device-plugin extended resources they replace. One home, so a rename is one edit."""

from __future__ import annotations

from typing import Final

# DRA drivers (ResourceSlice spec.driver; device attributes are qualified by it).
NVIDIA_GPU_DRIVER: Final = "gpu.nvidia.com"  # NVIDIA/k8s-dra-driver-gpu: GPUs and MIG devices
AMD_GPU_DRIVER: Final = "gpu.amd.com"  # ROCm/k8s-gpu-dra-driver
TPU_DRIVER: Final = "tpu.google.com"
INTEL_GPU_DRIVER: Final = "gpu.intel.com"  # intel/intel-resource-drivers-for-kubernetes
HAMI_DRIVER: Final = "hami-core-gpu.project-hami.io"  # Project-HAMi/k8s-dra-driver

# DeviceClasses (the names the drivers' charts install).
NVIDIA_GPU_CLASS: Final = "gpu.nvidia.com"
NVIDIA_MIG_CLASS: Final = "mig.nvidia.com"
AMD_GPU_CLASS: Final = "gpu.amd.com"
TPU_CLASS: Final = "tpu.google.com"

# Device-plugin extended resources.
NVIDIA_GPU_RESOURCE: Final = "nvidia.com/gpu"
AMD_GPU_RESOURCE: Final = "amd.com/gpu"
TPU_RESOURCE: Final = "google.com/tpu"
