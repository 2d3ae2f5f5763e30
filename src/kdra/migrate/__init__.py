"""Conversion of device-plugin manifests (`nvidia.com/gpu: N`) to DRA (resource.k8s.io/v1) ResourceClaims.

`kdra migrate` edits the original text of each document that requests accelerators and copies every other
byte (documents.py splits the stream, nodes.py gives libyaml's node positions, edits.py changes only the
entries that change). Where pod specs live is one table (kinds.py: built-in workloads, Kubeflow, Ray, JobSet,
LeaderWorkerSet, KServe, Argo, Volcano; `--kind` adds more). convert.py turns one pod spec's requests into a
ResourceClaimTemplate with the device plugin's semantics (one request per container, init containers
sharing as Kubernetes' effective request counts them, product selectors as CEL, time-slicing as consumable
shares, MIG's single strategy as MIG devices); consumers.py keeps what KubeRay, Kubeflow Trainer and
ResourceQuota derived from the removed requests; scan.py finds every accelerator request left anywhere, so
`--check` cannot pass while one remains. docs/migrate.md is the user's view.
"""

from __future__ import annotations

from kdra.migrate.engine import (
    FileResult,
    StreamMigration,
    classes_document,
    classes_text,
    join_outputs,
    migrate_text,
    names_in_use,
)
from kdra.migrate.report import CLAIMS, EXTENDED_RESOURCE, MODES, Options, Report

__all__ = [
    "CLAIMS",
    "EXTENDED_RESOURCE",
    "MODES",
    "FileResult",
    "Options",
    "Report",
    "StreamMigration",
    "classes_document",
    "classes_text",
    "join_outputs",
    "migrate_text",
    "names_in_use",
]
