"""The rule for where an e2e test that relies on kube-scheduler's feature gates may run (hack/e2e.sh lanes).

The differential corpus and harness (lane kube-scheduler) restart the shared plane's kube-scheduler and
kube-controller-manager with each case's gates (support.upstream.run_upstream_case) and leave the last
case's: most cases turn DRADeviceTaints off, and kube-scheduler then ignores every DeviceTaintRule. A test
that needs those components with the plane's own gates (the `plane_gates` fixture) therefore runs in the
kube-scheduler lane, one after the corpus, or on a plane of its own (`e2e_serial`); in any other lane it
runs while the corpus changes the gates under it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

GATES_FIXTURE = "plane_gates"
GATES_LANE = "kube-scheduler"


@dataclass(frozen=True)
class Placement:
    """Where one collected e2e test runs and which fixtures it uses."""

    nodeid: str
    fixtures: tuple[str, ...]
    lane: str | None  # e2e_lane(name=...), None: the free lane
    serial: bool  # e2e_serial: a plane of its own


def misplaced(tests: Iterable[Placement]) -> list[str]:
    """One line per test that uses the plane's gates outside the lane that changes them."""
    return [
        f"{t.nodeid}: uses {GATES_FIXTURE} (kube-scheduler with the plane's own feature gates) in lane "
        f"{t.lane or 'free'}, where the differential corpus restarts kube-scheduler with other gates "
        f'meanwhile: mark it e2e_lane(name="{GATES_LANE}") or e2e_serial'
        for t in tests
        if GATES_FIXTURE in t.fixtures and not t.serial and t.lane != GATES_LANE
    ]
