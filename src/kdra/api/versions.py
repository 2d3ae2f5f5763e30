"""The Kubernetes releases kdra can behave like (`--kubernetes-version`), for every layer.

Defined here, at the bottom, because validation (api), drivers and fleets differ per release too;
`kdra.allocator.features.FeatureGates` carries one of these together with the release's gates.
"""

from __future__ import annotations

from typing import Literal

from kdra.errors import InputError

KubernetesVersion = Literal["1.36", "1.37"]
SUPPORTED_VERSIONS: tuple[KubernetesVersion, ...] = ("1.36", "1.37")
DEFAULT_VERSION: KubernetesVersion = "1.37"


def check_version(version: str) -> KubernetesVersion:
    """The version itself, or InputError naming the supported ones."""
    for v in SUPPORTED_VERSIONS:
        if version == v:
            return v
    raise InputError(
        f"unsupported Kubernetes version {version!r} (supported: {', '.join(SUPPORTED_VERSIONS)})"
    )
