"""The exporter beside a running simulation: its figures agree with the simulation's own accounting at every
instant, and the incrementally maintained state renders exactly what a fresh list would."""

from __future__ import annotations

from typing import Any

import pytest

from kdra.fleets import load_fleet, render
from kdra.observe.exposition import parse_text
from kdra.observe.model import FleetState
from kdra.observe.sources import attach_scheduler, attach_store
from kdra.observe.top import render_table, rows_from_metrics, rows_from_state
from kdra.sim.engine import DRA, Simulation
from kdra.sim.runner import load_workload

VOLATILE = ("kdra_exporter_", "kdra_pod_scheduling_duration", "kdra_scheduler_attempt")


def _stable(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if not ln.startswith(VOLATILE) and not ln.startswith("#")]


@pytest.fixture(scope="module")
def run() -> dict[str, Any]:
    objects = render(load_fleet("mixed"), dra=True, legacy=False)
    sim = Simulation(objects, load_workload("mixed-day", 0), DRA, seed=0, dra_objects=objects)
    state = FleetState()
    attach_store(state, sim.store)
    attach_scheduler(state, sim.scheduler)
    checks: list[tuple[float, float, float, float, float]] = []
    snapshots: list[tuple[str, str]] = []

    def progress(now: float, horizon: float) -> None:
        fleet = state.sums.fleet()
        equiv = sum(row[3] for row in fleet.values())
        stranded = sum(row[7] for row in fleet.values())
        checks.append((now, equiv, sim._equiv, stranded, sim._stranded))
        incremental = state.sums.fleet_groups()
        assert set(incremental) == set(fleet), now
        for g, row in fleet.items():
            assert incremental[g] == pytest.approx(row, abs=1e-3), (now, g)
        if len(checks) % 2 == 1:
            fresh = FleetState()
            attach_store(fresh, sim.store)
            snapshots.append((state.render().decode(), fresh.render().decode()))

    sim.run(progress)
    return {"sim": sim, "state": state, "checks": checks, "snapshots": snapshots}


def test_gpu_equivalents_and_stranded_memory_match_the_simulation(run: dict[str, Any]) -> None:
    checks = run["checks"]
    assert len(checks) >= 8
    assert max(c[2] for c in checks) > 10  # the fleet was busy at some point
    for now, equiv, sim_equiv, stranded, sim_stranded in checks:
        assert equiv == pytest.approx(sim_equiv, abs=1e-6), now
        assert stranded == pytest.approx(sim_stranded, rel=1e-9, abs=1), now


def test_incremental_state_renders_what_a_fresh_list_renders(run: dict[str, Any]) -> None:
    assert len(run["snapshots"]) >= 2
    for incremental, fresh in run["snapshots"]:
        assert sorted(_stable(incremental)) == sorted(_stable(fresh))


def test_scheduler_attempts_are_timed(run: dict[str, Any]) -> None:
    state: FleetState = run["state"]
    assert state.attempts.count(("scheduled",)) >= len([p for p in run["sim"].pods.values() if p.start])
    assert state.e2e.count() > 0


def test_top_reads_the_same_rows_from_the_state_and_from_a_scrape(run: dict[str, Any]) -> None:
    from rich.console import Console

    sim = run["sim"]
    state = FleetState()
    attach_store(state, sim.store)
    a = sorted(
        (r.node, r.device, r.product, round(r.used, 6), [(h.claim, h.pod, h.request) for h in r.holders])
        for r in rows_from_state(state)
    )
    b = sorted(
        (r.node, r.device, r.product, round(r.used, 6), [(h.claim, h.pod, h.request) for h in r.holders])
        for r in rows_from_metrics(state.render().decode())
    )
    assert a == b
    console = Console(width=200, record=True)
    console.print(render_table(rows_from_state(state)))
    text = console.export_text()
    assert "NODE" in text and "h100-zone-a-0" in text


def test_metric_names_follow_conventions(run: dict[str, Any]) -> None:
    names = {n for n, _lb, _v in parse_text(run["state"].render().decode())}
    for n in names:
        assert n.startswith("kdra_")
        if n.endswith("_total"):
            assert n.startswith("kdra_exporter_watch_events")
