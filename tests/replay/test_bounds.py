"""kdra.replay.bounds: the LP bounds on instances whose optimum is known by hand or by brute force."""

from __future__ import annotations

import itertools
import random

import pytest

from kdra.replay.bounds import (
    NodeGroup,
    bin_lp_bound,
    exact_placement,
    l2_bound,
    node_groups,
    placement_bound,
)
from kdra.replay.trace import TraceNode
from kdra.scheduler.gpupolicies import MILLI, PodRequest
from kdra.scheduler.shareplan import first_fit_decreasing


def share(milli: int, cpu: int = 1, mem: int = 1, models: tuple[str, ...] = ()) -> PodRequest:
    return PodRequest(cpu, mem, 1, milli, models)


def whole(gpus: int = 1, cpu: int = 1, mem: int = 1, models: tuple[str, ...] = ()) -> PodRequest:
    return PodRequest(cpu, mem, gpus, MILLI, models)


def test_failing_a_share_for_a_whole_pod_beats_placing_every_share() -> None:
    # 3 GPUs, three 810 shares and one whole-GPU pod: all shares placed leaves 3 x 190 = 570 idle and the
    # whole pod out; two shares and the whole pod leave 2 x 190 = 380 (the optimum, by hand).
    pods = [share(810)] * 3 + [whole()]
    b = placement_bound(pods, [NodeGroup(1, 3)])
    assert b.converged
    assert 3 * MILLI - b.value == pytest.approx(380)
    assert b.detail["lp_whole_milli"] == pytest.approx(1000) and b.detail["lp_share_milli"] == pytest.approx(
        1620
    )
    # The "all arrived" figure (every share placed, L2) says 570: not a lower bound.
    all_placed = l2_bound([810] * 3, MILLI) * MILLI - 3 * 810
    assert all_placed == 570
    assert 3 * MILLI - b.value < all_placed


def test_only_810_shares_and_whole_pods() -> None:
    # 10 GPUs, 8 shares of 810, 4 whole pods: 4 whole + 6 shares = 4,000 + 4,860 = 8,860 placed (each GPU
    # takes one 810 at most; shares beyond 10 - 4 GPUs fail), 1,140 idle.
    pods = [share(810)] * 8 + [whole()] * 4
    b = placement_bound(pods, [NodeGroup(2, 5)])
    assert 10 * MILLI - b.value == pytest.approx(1140)
    # with 3 whole-GPU pods of 2 GPUs on nodes of 1 GPU, none of them can be placed: 10 shares' worth of GPUs
    pods = [share(810)] * 12 + [whole(2)] * 3
    b = placement_bound(pods, [NodeGroup(10, 1)])
    assert b.value == pytest.approx(10 * 810)
    b = placement_bound(pods, [NodeGroup(5, 2)])
    assert b.value == pytest.approx(3 * 2000 + 4 * 810)


def test_cpu_memory_and_models_of_a_group_limit_what_is_placed() -> None:
    # one node, 2 GPUs, 4 cores: two whole pods of 4 cores, only one fits
    assert placement_bound([whole(cpu=4000)] * 2, [NodeGroup(1, 2, cpu=4000)]).value == pytest.approx(1000)
    # of 3 cores: the LP places 4/3 of them (a relaxation: a bound, not a placement)
    assert placement_bound([whole(cpu=3000)] * 2, [NodeGroup(1, 2, cpu=4000)]).value == pytest.approx(
        4000 / 3
    )
    assert placement_bound([whole(cpu=3000)] * 2, [NodeGroup(1, 2)]).value == pytest.approx(2000)
    # memory: 300 + 300 shares share one GPU but the memory holds one of them
    pods = [share(300, mem=1000), share(300, mem=1000)]
    assert placement_bound(pods, [NodeGroup(1, 1, mem=1000)]).value == pytest.approx(300)
    # pod slots
    assert placement_bound([share(100)] * 8, [NodeGroup(1, 1, max_pods=5)]).value == pytest.approx(500)
    # a share for V100M16 only, a fleet of T4 and V100M16 GPUs
    pods = [share(600, models=("V100M16",))] * 3 + [whole(models=("T4",))] * 3
    groups = [NodeGroup(1, 2, model="T4"), NodeGroup(1, 1, model="V100M16")]
    assert placement_bound(pods, groups).value == pytest.approx(2000 + 600)


def brute_force(pods: list[PodRequest], gpus: int) -> int:
    """The most milli-GPU any assignment of the pods (or none) to `gpus` GPUs places (multi-GPU pods
    spread over any GPUs: the GPU-only relaxation's own model)."""
    best = 0
    for assign in itertools.product(range(-1, gpus), repeat=len(pods)):
        free = [MILLI] * gpus
        got = 0
        ok = True
        for p, g in zip(pods, assign, strict=True):
            if g < 0:
                continue
            if p.is_share:
                free[g] -= p.gpu_milli
                got += p.gpu_milli
                if free[g] < 0:
                    ok = False
                    break
            else:
                # a whole pod takes GPU g and the next num_gpu - 1 (any distinct GPUs would do)
                for i in range(p.num_gpu):
                    if g + i >= gpus or free[g + i] != MILLI:
                        ok = False
                        break
                    free[g + i] = 0
                got += p.total_milli
        if ok:
            best = max(best, got)
    return best


@pytest.mark.parametrize("seed", range(12))
def test_placement_bound_is_valid_and_tight_on_small_instances(seed: int) -> None:
    rng = random.Random(seed)
    gpus = rng.randint(1, 3)
    pods = [share(rng.choice([110, 230, 320, 470, 650, 810])) for _ in range(rng.randint(2, 5))]
    pods += [whole(rng.choice([1, 2])) for _ in range(rng.randint(0, 2))]
    opt = brute_force(pods, gpus)
    b = placement_bound(pods, [NodeGroup(1, gpus)])
    assert b.converged
    assert b.value >= opt - 1e-6  # a bound: never below what a placement reaches
    assert b.value <= sum(p.total_milli for p in pods) + 1e-6


def exact_bins(sizes: list[int]) -> int:
    for n in range(1, len(sizes) + 1):
        for assign in itertools.product(range(n), repeat=len(sizes)):
            load = [0] * n
            for s, g in zip(sizes, assign, strict=True):
                load[g] += s
            if max(load) <= MILLI:
                return n
    return 0


def test_bin_lp_bound_by_hand() -> None:
    assert bin_lp_bound([810] * 3).value == 3
    assert bin_lp_bound([300] * 7).value == 3  # 2.33 rounded up
    # 650 and 550 each take one 230 at most: L2 lets the three 230s fill their room (2), the LP does not
    sizes = [650, 550, 230, 230, 230]
    assert l2_bound(sizes, MILLI) == 2
    assert bin_lp_bound(sizes).value == 3 == exact_bins(sizes) == bin_lp_bound(sizes).detail["packing"]
    assert bin_lp_bound([]).value == 0


@pytest.mark.parametrize("seed", range(10))
def test_bin_lp_bound_between_l2_and_the_optimum(seed: int) -> None:
    rng = random.Random(100 + seed)
    sizes = [rng.choice([50, 160, 230, 320, 470, 550, 650, 810]) for _ in range(rng.randint(1, 7))]
    b = bin_lp_bound(sizes)
    assert b.converged
    opt = exact_bins(sizes)
    assert l2_bound(sizes, MILLI) <= b.value <= opt <= len(first_fit_decreasing(sizes, MILLI))
    assert opt <= b.detail["packing"]  # an actual packing: never fewer bins than the optimum


def test_node_groups() -> None:
    nodes = [TraceNode(f"n{i}", 8000, 100, 2, "T4") for i in range(3)] + [TraceNode("c", 4000, 10, 0, "")]
    assert node_groups(nodes) == [NodeGroup(3, 2, 8000, 100, "T4", 110)]
    assert node_groups(nodes, resources=False) == [NodeGroup(1, 6)]


def node(gpus: int, cpu: int = 64000, mem: int = 1 << 20, model: str = "T4", name: str = "n") -> TraceNode:
    return TraceNode(name, cpu, mem, gpus, model)


def test_exact_placement_by_hand() -> None:
    # three 810 shares and a whole pod on one node of 3 GPUs: two shares and the whole pod
    e = exact_placement([node(3)], [share(810)] * 3 + [whole()])
    assert e.optimal and e.placed == pytest.approx(2620)
    # a 2-GPU pod on two nodes of one GPU each: nowhere (the GPU-only relaxation places it)
    nodes = [node(1, name="a"), node(1, name="b")]
    assert exact_placement(nodes, [whole(2)]).placed == pytest.approx(0)
    assert placement_bound([whole(2)], node_groups(nodes, resources=False)).value == pytest.approx(2000)
    # 3-core whole pods on two nodes of 2 GPUs and 4 cores: one per node (the pooled CPU would take 2.67)
    nodes = [node(2, cpu=4000, name="a"), node(2, cpu=4000, name="b")]
    pods = [whole(cpu=3000)] * 3
    assert exact_placement(nodes, pods).placed == pytest.approx(2000)
    assert placement_bound(pods, node_groups(nodes)).value == pytest.approx(8000 / 3)
    # models, and shares that do not fit one GPU together; CPU-only pods allocate nothing
    assert exact_placement([node(1)], [share(500, models=("V100M16",))]).placed == 0
    assert exact_placement([node(1)], [share(600), share(600), PodRequest(1000, 1)]).placed == pytest.approx(
        600
    )
    # a GPU holding a share takes no whole pod
    assert exact_placement([node(2)], [share(100), whole(2)]).placed == pytest.approx(2000)


@pytest.mark.parametrize("seed", range(6))
def test_exact_placement_never_exceeds_the_lp_bound(seed: int) -> None:
    rng = random.Random(200 + seed)
    nodes = [node(rng.choice([1, 2, 4]), cpu=rng.choice([8000, 16000]), name=f"n{i}") for i in range(3)]
    pods = [share(rng.choice([230, 470, 650, 810]), cpu=rng.choice([2000, 6000])) for _ in range(6)]
    pods += [whole(rng.choice([1, 2]), cpu=rng.choice([4000, 8000])) for _ in range(4)]
    e = exact_placement(nodes, pods, time_limit=30)
    assert e.optimal
    assert e.placed <= placement_bound(pods, node_groups(nodes)).value + 1e-6
    assert exact_placement(nodes, pods, upper=e.placed).placed == pytest.approx(e.placed)
