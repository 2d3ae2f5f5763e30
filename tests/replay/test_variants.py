"""Trace variants (kdra.replay.variants): each moves the pod mix the way its name says, deterministically,
keeps every pod placeable on the fleet, and replays through the allocator like the trace itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from kdra.cli.main import main
from kdra.errors import InputError
from kdra.replay import run_placement
from kdra.replay.trace import load_trace
from kdra.replay.variants import (
    FAMILIES,
    GENERATED_RATES,
    VARIANTS,
    describe,
    family_recipe,
    generate,
    make_recipe_variant,
    make_variant,
    parse_variant,
)
from kdra.scheduler.gpupolicies import make_policy


def test_each_variant_moves_its_share_of_the_mix(small_trace_files: tuple[Path, Path]) -> None:
    trace = load_trace(*small_trace_files)
    base = describe(trace)
    mixes = {k: describe(make_variant(trace, k, 3)) for k in VARIANTS}
    assert mixes["fractional"]["share_pods_pct"] > base["share_pods_pct"] + 10
    assert mixes["multi-gpu"]["multi_gpu_pods_pct"] > base["multi_gpu_pods_pct"] + 8
    assert mixes["gpu-model"]["pinned_pods_pct"] > base["pinned_pods_pct"] + 20
    assert mixes["cpu-heavy"]["cpu_cores_per_gpu"] > 1.5 * base["cpu_cores_per_gpu"]
    m = mixes["mixed"]
    assert m["share_pods_pct"] > base["share_pods_pct"] and m["pinned_pods_pct"] > 0
    assert all(x["pods"] == base["pods"] for x in mixes.values())


def test_variants_are_deterministic_and_seeded(small_trace_files: tuple[Path, Path]) -> None:
    trace = load_trace(*small_trace_files)
    a = make_variant(trace, "mixed", 5)
    assert a.pods == make_variant(trace, "mixed", 5).pods
    assert a.pods != make_variant(trace, "mixed", 6).pods
    nodes = trace.nodes
    for p in make_variant(trace, "gpu-model", 1).pods:  # a pinned pod still has a node of its model
        r = p.request
        if r.models:
            assert any(n.model in r.models and n.gpus >= r.num_gpu and n.cpu >= r.cpu for n in nodes), p


def test_a_variant_replays_through_the_allocator(small_trace_files: tuple[Path, Path]) -> None:
    trace = make_variant(load_trace(*small_trace_files), "mixed", 2)
    run = run_placement(trace, make_policy("kdra"), 42)
    assert run.allocator_calls > 0 and 0 <= run.unallocated_at(100) < 30


def test_variant_option_and_errors(
    small_trace_files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    nodes, pods = small_trace_files
    code = main(["replay", "alibaba", "-c", str(nodes), "--pods", str(pods), "--seeds", "42",
                 "--variant", "cpu-heavy:4", "--no-allocator", "-o", "csv"])  # fmt: skip
    assert code == 0 and "kdra" in capsys.readouterr().out
    assert parse_variant("fractional") == ("fractional", 0)
    with pytest.raises(InputError, match="supported values: fractional, multi-gpu"):
        parse_variant("bigger")
    with pytest.raises(InputError, match="the seed after ':' must be an integer"):
        parse_variant("mixed:x")


def test_fine_shares_rarely_repeat_and_generated_recipes_follow_their_seed(
    small_trace_files: tuple[Path, Path],
) -> None:
    trace = load_trace(*small_trace_files)
    sizes = [p.request.gpu_milli for p in make_variant(trace, "fine-shares", 1).pods if p.request.is_share]
    base = [p.request.gpu_milli for p in trace.pods if p.request.is_share]
    assert len(sizes) == len(base) and len(set(sizes)) > 2 * len(set(base))
    assert all(0 < s < 1000 for s in sizes)
    recipe = generate(7)
    assert recipe == generate(7) and recipe != generate(8)
    assert all(
        k in GENERATED_RATES and lo <= r <= hi for k, r in recipe.items() for lo, hi in [GENERATED_RATES[k]]
    )
    assert make_variant(trace, "generated", 7).pods == make_variant(trace, "generated", 7).pods
    # A recipe of one kind rewrites like that kind at the recipe's rate.
    one = next(s for s in range(1, 200) if list(generate(s)) == ["cpu-heavy"])
    assert (
        describe(make_variant(trace, "generated", one))["cpu_cores_per_gpu"]
        > describe(trace)["cpu_cores_per_gpu"]
    )


def test_family_recipes_draw_their_rates_and_rewrite_like_their_kind(
    small_trace_files: tuple[Path, Path],
) -> None:
    trace = load_trace(*small_trace_files)
    for fam in FAMILIES:
        recipes = [family_recipe(fam, s) for s in range(101, 106)]
        assert recipes[0] == family_recipe(fam, 101)
        for r in recipes:
            assert all(lo <= r[k] <= hi for k in r for lo, hi in [GENERATED_RATES[k]])
            assert list(r) == [fam] if fam != "mixtures" else 2 <= len(r) <= 4
        assert len({tuple(r.values()) for r in recipes}) > 1  # the rate is drawn, not fixed
    pinned = family_recipe("gpu-model", 101)
    mix = describe(make_recipe_variant(trace, pinned, "family:gpu-model:101"))
    gpu_pods = 100 * sum(1 for p in trace.pods if p.request.num_gpu) / len(trace.pods)
    assert abs(mix["pinned_pods_pct"] - pinned["gpu-model"] * gpu_pods) < 10  # its rate of the GPU pods
    # The CLI's kinds are recipes too: the same list either way.
    same = make_recipe_variant(trace, {"cpu-heavy": 0.4}, "cpu-heavy:4")
    assert make_variant(trace, "cpu-heavy", 4).pods == same.pods
    with pytest.raises(InputError, match="family: Unsupported value: 'bigger'"):
        family_recipe("bigger", 1)
