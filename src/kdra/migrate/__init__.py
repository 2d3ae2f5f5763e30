"""Conversion of device-plugin manifests (nvidia.com/gpu: N) to DRA ResourceClaims."""
