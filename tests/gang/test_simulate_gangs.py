"""`kdra simulate` with gangs, queues and topology: the bundled example runs and explains its waiting gang."""

from __future__ import annotations

from pathlib import Path

from kdra.sim.runner import simulate

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "queues" / "gang-queues.yaml"


def test_simulate_example_with_gangs_and_queues() -> None:
    report = simulate("mixed", str(EXAMPLE), modes=("dra",))
    res = report.modes["dra"].result
    pretrain = [k for k in res.explanations if k.startswith("ml/pretrain-")]
    assert len(pretrain) == 4  # the rack-bound gang never fits (2 H100 nodes per rack) and times out
    text = res.explanations[pretrain[0]]
    assert "PodGroup ml/pretrain is unschedulable" in text
    assert "no kdra.dev/rack has room for 4 members" in text
    finetune = [r for k, r in res.pods.items() if k.startswith("ml/finetune-")]
    assert all(r.start is not None for r in finetune)  # the preferring gang placed (all or nothing)
    assert len({r.start for r in finetune}) == 1
