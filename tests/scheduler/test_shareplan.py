"""The share plan (kdra.scheduler.shareplan): which share placements follow the patterns the workload's own
sizes pack into, checked against a brute force over the patterns' parts."""

from __future__ import annotations

import itertools
import random

from kdra.scheduler.shareplan import SharePlan, first_fit_decreasing

MIX = [810] * 20 + [160] * 4 + [470] * 20 + [650] * 10 + [320] * 10


def _naive_first_fit_decreasing(sizes: list[int], capacity: int) -> list[list[int]]:
    bins: list[list[int]] = []
    free: list[int] = []
    for s in sorted(sizes, reverse=True):
        for i, f in enumerate(free):
            if f >= s:
                free[i] = f - s
                bins[i].append(s)
                break
        else:
            bins.append([s])
            free.append(capacity - s)
    return bins


def test_first_fit_decreasing_packs_as_the_textbook_loop_does() -> None:
    rng = random.Random(1)
    for n in (0, 1, 2, 3, 7, 100, 600):
        sizes = [rng.randrange(1, 1001) for _ in range(n)]
        bins = first_fit_decreasing(sizes, 1000)
        assert bins == _naive_first_fit_decreasing(sizes, 1000), n
        assert sorted(s for b in bins for s in b) == sorted(sizes)
        assert all(sum(b) <= 1000 for b in bins)


def test_the_plan_pairs_the_sizes_that_complete_a_gpu() -> None:
    plan = SharePlan(MIX, 1000)
    assert plan.on_plan(810, 160)  # 810 + 160: a 160 fills an 810's gap
    assert plan.on_plan(650, 320) and plan.on_plan(320, 650)
    assert plan.on_plan(470, 470)
    assert not plan.on_plan(470, 320)  # 470 + 320 strands 210: no pattern has it
    assert not plan.on_plan(810, 320)  # does not fit at all
    assert plan.on_plan(0, 810) and plan.on_plan(0, 320)  # common sizes open new GPUs
    assert not SharePlan([*MIX, 230], 1000).on_plan(0, 230)  # a single 230 is not common


def test_sizes_that_never_repeat_leave_nothing_on_plan_for_new_gpus() -> None:
    rng = random.Random(7)
    sizes = rng.sample(range(1, 1000), 400)  # to the milli-GPU, each once
    plan = SharePlan(sizes, 1000)
    assert not plan.common
    assert not any(plan.on_plan(0, s) for s in sizes)


def _brute_on_plan(patterns: set[tuple[int, ...]], used: int, size: int) -> bool:
    for p in patterns:
        items = list(p)
        if size not in items:
            continue
        items.remove(size)
        for r in range(1, len(items) + 1):
            if any(sum(c) == used for c in itertools.combinations(items, r)):
                return True
    return False


def test_on_plan_matches_a_brute_force_over_the_patterns() -> None:
    rng = random.Random(3)
    for trial in range(20):
        kinds = rng.sample(range(10, 1000, 10), rng.randrange(2, 8))
        sizes = [rng.choice(kinds) for _ in range(rng.randrange(10, 120))]
        plan = SharePlan(sizes, 1000)
        patterns = {tuple(b) for b in first_fit_decreasing(sizes, 1000)}
        for used in range(10, 1000, 10):
            for size in kinds:
                assert plan.on_plan(used, size) == _brute_on_plan(patterns, used, size), (trial, used, size)
