"""kdra's cost estimate is the API server's: every expression of cost_golden.jsonl (recorded from the real
k8s.io/dynamic-resource-allocation v0.37.2, tests/cel/oracle/gen_cost_golden.py) gets exactly upstream's
worst-case cost, so validation accepts and rejects what kube-apiserver accepts and rejects."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kdra.cel import CEL_SELECTOR_EXPRESSION_MAX_COST, CELCompileError, compile_selector

GOLDEN = [json.loads(line) for line in (Path(__file__).parent / "cost_golden.jsonl").read_text().splitlines()]


def test_golden_is_large_and_reaches_the_limit() -> None:
    assert len(GOLDEN) > 600
    over = [g for g in GOLDEN if g["cost"] > CEL_SELECTOR_EXPRESSION_MAX_COST]
    near = [g for g in GOLDEN if 500_000 < g["cost"] <= CEL_SELECTOR_EXPRESSION_MAX_COST]
    assert over and near


def test_every_recorded_cost_is_upstreams() -> None:
    wrong = []
    compiled = 0
    for g in GOLDEN:
        try:
            p = compile_selector(g["e"], consumable_capacity=g["c"], list_type_attributes=g["l"])
        except CELCompileError:
            continue  # a known compile gap (tests/cel/test_celgo_golden.py tracks those)
        compiled += 1
        if p.max_cost != g["cost"]:
            wrong.append((g["e"][:120], g["l"], g["cost"], p.max_cost))
    assert compiled > 600
    assert not wrong, wrong[:20]


@pytest.mark.parametrize(
    ("size", "accepted"),
    [(300, True), (370, True), (380, False)],
)
def test_nested_comprehension_accepted_up_to_the_api_servers_limit(size: int, accepted: bool) -> None:
    """The shape of issue 18's hostile selector: the API server accepts it up to ~1,000,000 estimated cost."""
    lst = "[" + ",".join(str(i) for i in range(size)) + "]"
    p = compile_selector(f"{lst}.all(x, {lst}.all(y, x + y >= 0))")
    assert (p.max_cost <= CEL_SELECTOR_EXPRESSION_MAX_COST) is accepted, p.max_cost
