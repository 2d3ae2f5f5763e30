"""The Kubernetes releases kdra can behave like (`--kubernetes-version`), for every layer.

Defined here, at the bottom, because validation (api), drivers and fleets differ per release too;
`kdra.api.features.FeatureGates` carries one of these together with the release's gates.

`BUILDS` is the one place that pins which upstream build each release is: hack/pin.py writes the Go
modules of the control plane (hack/k8s/v1.XX) and of the allocator oracle (tests/oracle/v1.XX) from it,
and tests/test_pins.py checks they agree. The default is the newest release pinned to a final build (a
pre-release such as v1.38.0-beta.0 is selectable, never the default).
"""

from __future__ import annotations

from typing import Literal

from kdra.errors import InputError

KubernetesVersion = Literal["1.36", "1.37", "1.38"]

# Release -> the k8s.io/kubernetes build kdra follows (its staging modules, k8s.io/dynamic-resource-allocation
# among them, are the matching v0.x). To move a pin: change it here, then `make pin` (hack/pin.py).
BUILDS: dict[KubernetesVersion, str] = {
    "1.36": "v1.36.3",
    "1.37": "v1.37.2",
    "1.38": "v1.38.0-beta.0",
}
SUPPORTED_VERSIONS: tuple[KubernetesVersion, ...] = tuple(BUILDS)


def is_final(build: str) -> bool:
    """Whether a build is a release (v1.38.0), not a pre-release (v1.38.0-beta.0, -rc.1)."""
    return "-" not in build


def library_version(version: str) -> str:
    """The staging modules' version of a release's build: v1.38.0-beta.0 -> v0.38.0-beta.0."""
    return "v0." + BUILDS[check_version(version)].removeprefix("v1.")


DEFAULT_VERSION: KubernetesVersion = [v for v in SUPPORTED_VERSIONS if is_final(BUILDS[v])][-1]


def check_version(version: str) -> KubernetesVersion:
    """The version itself, or InputError naming the supported ones."""
    for v in SUPPORTED_VERSIONS:
        if version == v:
            return v
    raise InputError(
        f"unsupported Kubernetes version {version!r} (supported: {', '.join(SUPPORTED_VERSIONS)})"
    )
