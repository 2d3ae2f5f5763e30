"""The workload as a placement policy knows it: the pod shapes seen, as a decaying histogram.

FGD's and kdra's placement policies (kdra.scheduler.gpupolicies) are tuned to nothing: they read what
they need from the workload itself: FGD's typical pods, the memory of each shape, the share sizes kdra's
share plan packs, the CPU the workload asks per GPU, the shapes only a few nodes can host. A replay can
hand them the whole pod list at once (`observe_all`); a live scheduler (and `kdra replay --online`) only
knows the pods it has seen, and tells the model each pod as it arrives (`observe`).

Every observation's weight halves after `half_life` further observations, so the model follows a workload
that changes; `None` keeps every pod at weight 1 (a replay's fixed list). `learn_points` says when a
policy re-derives its plan from the model: at 1, 2, 4, ... pods seen (the first pods change the picture
most), then every half of a half-life. Re-deriving invalidates the scores a scheduler cached, so it is
not done per pod.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kdra.scheduler.gpupolicies import PodRequest

_RESCALE = 1e150  # raw weights grow as 2^(seen / half_life); rescaled before they overflow


class WorkloadModel:
    """Pod shapes seen (PodRequest -> weight), newest weighing most when a half-life is set."""

    def __init__(self, half_life: float | None = None) -> None:
        self.half_life = half_life
        self.seen = 0
        self.version = 0  # bumped per observation
        self._raw: dict[PodRequest, float] = {}
        self._unit = 1.0  # the raw weight of an observation made now
        self._growth = 2.0 ** (1.0 / half_life) if half_life else 1.0

    def set_half_life(self, half_life: float | None) -> None:
        """Change the half-life from now on (the weights so far are kept)."""
        weights = dict(self.items())
        self.half_life = half_life
        self._growth = 2.0 ** (1.0 / half_life) if half_life else 1.0
        self._raw = weights
        self._unit = 1.0

    def observe(self, req: PodRequest, count: int = 1) -> None:
        if self._growth != 1.0:
            self._unit *= self._growth**count
            if self._unit > _RESCALE:
                self._raw = {k: v / self._unit for k, v in self._raw.items() if v / self._unit > 1e-12}
                self._unit = 1.0
        self._raw[req] = self._raw.get(req, 0.0) + self._unit * count
        self.seen += count
        self.version += 1

    def observe_all(self, reqs: Iterable[PodRequest]) -> None:
        for r in reqs:
            self.observe(r)

    def items(self) -> Iterator[tuple[PodRequest, float]]:
        """Each shape seen with its current weight (1 per pod without a half-life)."""
        unit = self._unit
        for k, v in self._raw.items():
            yield k, v / unit

    def total(self) -> float:
        return sum(w for _k, w in self.items())

    def learn_points(self, after: int) -> int:
        """The number of pods seen at which a policy should next re-derive what it reads from the model."""
        if self.half_life is None or after < 1:
            return max(1, 2 * after)
        step = max(1, math.ceil(self.half_life / 2))
        return 2 * after if 2 * after <= step else after + step
