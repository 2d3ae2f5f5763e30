"""Which pods kdra's capacity measure keeps room for when the fleet's CPU cannot feed every GPU pod.

Where the GPU pods alone ask for more CPU than the fleet's GPU nodes have (their `cpu_pressure` above 1),
some fail whatever the placement, and the GPUs allocated depend on which: cores kept in a gap only a
heavy pod fits admit one pod, the same cores in gaps the light pods fit admit several. Weighing each GPU
pod's room by 1 / its CPU says so; squaring it is measured, not derived (against 1 / CPU and its cube on
drawn CPU-bound variants, docs/replay.md: the unweighted measure lost to FGD there on most draws)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kdra.scheduler.gpupolicies import TypicalPod


def scarce_cpu_typical(typical: Sequence[TypicalPod]) -> list[TypicalPod]:
    """`typical` with each GPU pod's frequency times (m / its CPU)^2, m the frequency-weighted mean of
    1 / CPU over the GPU pods asking for CPU (a pod whose 1 / CPU is m keeps its weight); CPU-only pods
    and pods asking no CPU keep theirs."""
    weighed = [t for t in typical if t.gpu_milli and t.cpu]
    total = sum(t.freq for t in weighed)
    if not total:
        return list(typical)
    mean = sum(t.freq / t.cpu for t in weighed) / total
    return [
        dataclasses.replace(t, freq=t.freq * (1 / (t.cpu * mean)) ** 2) if t.gpu_milli and t.cpu else t
        for t in typical
    ]
