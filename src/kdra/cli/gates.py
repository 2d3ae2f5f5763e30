"""`--kubernetes-version` and `--feature-gates`: one helper for every command that allocates or schedules.

The version selects that release's feature-gate defaults, locked gates, validation and allocator
behaviour (kdra.allocator.features); `--feature-gates` then overrides gates as the release's components
accept them (unknown, locked and inconsistent sets are refused with their wording).
"""

from __future__ import annotations

import argparse
from typing import Any

from kdra.allocator.features import DEFAULT_VERSION, SUPPORTED_VERSIONS, FeatureGates


def add_gate_flags(parser: Any, *, feature_gates: bool = True) -> None:
    """Add `--kubernetes-version` (and, unless told not to, `--feature-gates`) to a subcommand."""
    parser.add_argument(
        "--kubernetes-version",
        choices=SUPPORTED_VERSIONS,
        default=DEFAULT_VERSION,
        metavar="VERSION",
        help=f"behave like this Kubernetes release: {', '.join(SUPPORTED_VERSIONS)} "
        f"(default {DEFAULT_VERSION}): its feature-gate defaults, locked gates, API validation and allocator",
    )
    if feature_gates:
        parser.add_argument(
            "--feature-gates",
            default="",
            metavar="Gate=bool,...",
            help="override the release's feature-gate defaults, e.g. DRAListTypeAttributes=true",
        )


def gates_from_args(args: argparse.Namespace) -> FeatureGates:
    """The FeatureGates the flags describe (InputError, exit 2, for what the release refuses)."""
    version = getattr(args, "kubernetes_version", None) or DEFAULT_VERSION
    return FeatureGates.parse(getattr(args, "feature_gates", "") or "", version=version)
