"""Each policy's scoring on hand-built nodes (the simulator's plugins, pkg/simulator/plugin)."""

from __future__ import annotations

import random

from kdra.scheduler.fragmentation import unusable
from kdra.scheduler.gpupolicies import (
    BestFitPolicy,
    CapacityFragMeasure,
    ClusteringPolicy,
    DotProductPolicy,
    FGDPolicy,
    FragMeasure,
    GpuNodeView,
    KdraPolicy,
    PackingPolicy,
    PodRequest,
    TypicalPod,
    best_fit_gpus,
    cpu_pressure,
    make_policy,
    typical_pods,
)
from kdra.scheduler.scarcecpu import scarce_cpu_typical


def node(name: str, gpus: list[int], cpu: int = 96_000, mem: int = 393_216, model: str = "G2") -> GpuNodeView:
    return GpuNodeView(name, model, 96_000, 393_216, cpu, mem, list(gpus))


SHARE = PodRequest(4000, 8192, 1, 500)
WHOLE = PodRequest(8000, 8192, 1, 1000)
TYPICAL = [TypicalPod(4000, 500, 1, (), 0.5), TypicalPod(8000, 1000, 1, (), 0.5)]


def test_typical_pods_cover_95_percent_and_renormalise() -> None:
    pods = [SHARE] * 60 + [WHOLE] * 36 + [PodRequest(1000, 1)] * 4
    typ = typical_pods(pods)
    assert [(t.gpu_milli, round(t.freq, 3)) for t in typ] == [(500, 0.625), (1000, 0.375)]


def test_frag_measure_counts_gpus_too_small_or_unusable() -> None:
    fm = FragMeasure(TYPICAL)
    # GPUs 300 and 1000 free: the 300 one is too small for both typical pods, the 1000 one fits both.
    assert fm.of("G2", 96_000, 0, [300, 1000]) == 300
    # Without CPU for the typical pods, all idle GPU capacity is fragment.
    assert fm.of("G2", 1_000, 0, [300, 1000]) == 1300
    # A 600 GPU is a fragment only for the whole-GPU typical pod (half of the pods).
    assert fm.of("G2", 96_000, 0, [600]) == 300


def test_fgd_prefers_the_node_that_leaves_fewer_fragments() -> None:
    fgd = FGDPolicy(TYPICAL)
    a = node("a", [500, 1000])  # the share fills the 500 GPU exactly: no fragment left
    b = node("b", [1000, 1000])  # the share splits a whole GPU: a 500 fragment for whole-GPU pods
    sa, ga = fgd.score(a, SHARE)
    sb, _gb = fgd.score(b, SHARE)
    assert sa > sb and ga == (0,)
    # Inside a node FGD picks the GPU minimising fragmentation, not the first or the best-fitting one.
    c = node("c", [1000, 700, 500])
    _, gc = fgd.score(c, SHARE)
    assert gc == (2,)


def test_fgd_score_is_the_truncated_sigmoid_of_the_gradient() -> None:
    fgd = FGDPolicy(TYPICAL)
    s, _ = fgd.score(node("n", [1000]), WHOLE)
    assert s == 50.0  # the whole GPU leaves frag unchanged: sigmoid(0) = 0.5


def test_best_fit_prefers_least_leftover() -> None:
    bf = BestFitPolicy()
    full = node("full", [1000] * 8)
    used = node("used", [0] * 6 + [1000, 1000], cpu=20_000)
    assert bf.score(used, WHOLE)[0] > bf.score(full, WHOLE)[0]
    assert best_fit_gpus(node("x", [900, 600, 700]), SHARE) == (1,)


def test_dot_product_prefers_complementary_nodes() -> None:
    dp = DotProductPolicy()
    gpu_rich = node("g", [1000] * 8, cpu=10_000)
    cpu_rich = node("c", [1000], cpu=96_000)
    cpu_pod = PodRequest(32_000, 1024)
    assert dp.score(gpu_rich, cpu_pod)[0] > dp.score(cpu_rich, cpu_pod)[0]


def test_packing_tiers() -> None:
    pk = PackingPolicy()
    shared = node("s", [600, 1000])
    used = node("u", [0, 1000])
    free = node("f", [1000, 1000])
    s_shared, s_used, s_free = (pk.score(v, SHARE)[0] for v in (shared, used, free))
    assert s_shared > s_used > s_free
    assert pk.score(free, PodRequest(1000, 1))[0] == 0  # CPU-only pods: no preference


def test_clustering_groups_pods_of_one_shape() -> None:
    cl = ClusteringPolicy()
    same = node("same", [500, 1000])
    same.affinity = {"share": 1}
    other = node("other", [0, 1000])
    other.affinity = {"1-gpu": 1}
    idle = node("idle", [1000, 1000])
    scores = [cl.score(v, SHARE)[0] for v in (same, idle, other)]
    assert scores[0] > scores[1] > scores[2]


def test_kdra_counts_cpu_as_capacity() -> None:
    k = KdraPolicy()
    k.prepare([WHOLE] * 10)
    # 3 idle GPUs but CPU for one typical pod: kdra's measure sees two stranded GPUs, FGD's sees none.
    v = node("v", [1000, 1000, 1000], cpu=9_000)
    assert k.measure.node(v) == 2000
    assert FGDPolicy(typical_pods([WHOLE] * 10)).measure.node(v) == 0


def test_kdra_leaves_cpu_pods_to_the_measure_and_the_node_order() -> None:
    """No rule of its own for CPU-only pods: sending them to the nodes with the fewest idle GPUs starved
    those nodes' last GPUs where CPU binds (docs/replay.md, the drawn `cpu-heavy` variants)."""
    k = KdraPolicy()
    k.prepare([WHOLE] * 10 + [PodRequest(2000, 1)] * 2)
    busy = node("busy", [0, 0], cpu=40_000)
    idle = node("idle", [1000, 1000], cpu=40_000)
    cpu_pod = PodRequest(2000, 1024)
    assert k.score(busy, cpu_pod)[0] == k.score(idle, cpu_pod)[0]


def test_make_policy_names_and_aliases() -> None:
    for name in ("random", "dot-product", "best-fit", "packing", "clustering", "fgd", "kdra"):
        assert make_policy(name).name == name
    assert make_policy("BestFit").name == "best-fit"


def _g3(name: str) -> GpuNodeView:
    return GpuNodeView(name, "G3", 128_000, 786_432, 128_000, 786_432, [1000] * 8)


def test_kdra_protect_rare_keeps_the_last_host_of_a_rare_shape() -> None:
    giant = PodRequest(120_000, 700_000, 8, 1000)
    small = PodRequest(4000, 8192, 1, 1000)
    k = KdraPolicy(protect_rare=True)
    k.prepare([small] * 50 + [giant])
    big = _g3("g3")
    others = [node(f"n{i}", [1000] * 8) for i in range(40)]
    k.prepare_fleet([big, *others])
    assert k.rare == [giant]
    assert k.epoch()[1]  # one idle host left: protected
    assert k.score(big, small)[0] < k.score(others[0], small)[0]
    assert KdraPolicy(protect_rare=False).epoch()[1] == ()
    assert KdraPolicy().protect_rare  # the default (docs/replay.md: variants)


def test_kdra_keeps_as_many_rare_hosts_as_the_workload_will_ask_for() -> None:
    """Two idle hosts of a giant shape, and giants are a fifth of the workload's GPU demand: both hosts are
    protected (keeping only the last one let a small pod break one, and a giant then had no node)."""
    giant = PodRequest(120_000, 700_000, 8, 1000)
    small = PodRequest(4000, 8192, 1, 1000)
    others = [node(f"n{i}", [1000] * 8) for i in range(40)]
    k = KdraPolicy()
    k.prepare([small] * 64 + [giant] * 2)  # giants: 16 of the 80 GPUs asked for
    big = [_g3("g3-a"), _g3("g3-b")]
    k.prepare_fleet([*big, *others])
    assert k.epoch()[1]  # 2 idle hosts, ~8 giants expected before the fleet fills
    assert k.score(big[0], small)[0] < k.score(others[0], small)[0]
    assert k.score(big[0], giant)[0] > 0  # the giant itself may take it
    # Giants negligible in the workload: only the last idle host is kept.
    rare_once = KdraPolicy()
    rare_once.prepare([small] * 10_000 + [giant])
    rare_once.prepare_fleet([*big, *others])
    assert not rare_once.epoch()[1]
    big[1].cpu_free = 0  # one host left (a caller editing a view bumps its version)
    big[1].version += 1
    assert rare_once.epoch()[1]


def test_kdra_follows_fgd_and_breaks_its_ties_by_capacity_where_cpu_does_not_bind() -> None:
    """FGD's integer score decides; among the nodes it scores alike, the capacity-aware measure does.
    Where CPU binds (a CPU-heavy workload), the capacity measure is the score."""
    whole = PodRequest(8000, 8192, 1, 1000)
    quad = PodRequest(32_000, 32_768, 4, 1000)
    work = [whole] * 6 + [quad] * 4
    fleet = [node(f"n{i}", [1000] * 8) for i in range(4)]
    k = KdraPolicy()
    k.prepare(work)
    k.prepare_fleet(fleet)
    assert not k.cpu_bound  # 88 cores asked per 22 GPUs, 96 cores per 8 GPUs offered
    fgd = FGDPolicy()
    fgd.prepare(work)
    # FGD alike (50 each), the capacity measure prefers `five` (its 44 cores feed more of its GPUs).
    five = node("five", [1000] * 5, cpu=44_000)
    eight = node("eight", [1000] * 8, cpu=72_000)
    assert fgd.score(five, whole)[0] == fgd.score(eight, whole)[0]
    assert k.score(five, whole)[0] > k.score(eight, whole)[0]
    # FGD prefers `roomy`; the capacity measure alone prefers `starved`: kdra follows FGD...
    roomy = node("roomy", [1000] * 4, cpu=88_000)
    starved = node("starved", [1000] * 6, cpu=12_000)
    assert fgd.score(roomy, whole)[0] > fgd.score(starved, whole)[0]
    assert k.score(roomy, whole)[0] > k.score(starved, whole)[0]
    # ...unless CPU binds: four times the CPU per GPU asked.
    heavy = [PodRequest(32_000, 8192, 1, 1000)] * 6 + [PodRequest(128_000, 32_768, 4, 1000)] * 4
    kh = KdraPolicy()
    kh.prepare(heavy)
    kh.prepare_fleet(fleet)
    assert kh.cpu_bound
    assert cpu_pressure(heavy, fleet) > 1 > cpu_pressure(work, fleet)


def test_scarce_cpu_weights_each_gpu_pod_by_the_inverse_square_of_its_cpu() -> None:
    light, heavy, cpu_only = (
        TypicalPod(8000, 1000, 1, (), 0.4),
        TypicalPod(32_000, 1000, 1, (), 0.4),
        TypicalPod(4000, 0, 0, (), 0.2),
    )
    out = scarce_cpu_typical([light, heavy, cpu_only])
    assert out[0].freq / out[1].freq == 16  # a quarter of the CPU: 4^2 times the weight
    assert out[2] == cpu_only  # a CPU-only pod brings no GPU whatever the CPU it gets
    # m = 1 / 12,800 cores: light times (12,800 / 8,000)^2 = 1.6^2, heavy times 0.4^2.
    assert [round(t.freq, 4) for t in out[:2]] == [round(0.4 * 1.6**2, 4), round(0.4 * 0.4**2, 4)]


def test_kdra_keeps_room_for_the_light_pods_only_where_the_gpu_pods_alone_exceed_the_fleets_cpu() -> None:
    """Where the GPU pods alone ask for more CPU than the fleet has, some fail whatever the placement;
    idle GPUs only the CPU-heavy pods could use (the room the light ones fit is gone) count less as
    fragment than GPUs the light pods lose. Below that pressure the measure is left as it is."""
    fleet = [node(f"n{i}", [1000] * 8) for i in range(4)]
    light, heavy = PodRequest(8000, 8192, 1, 1000), PodRequest(32_000, 8192, 1, 1000)
    scarce = KdraPolicy()
    scarce.prepare([light] * 10 + [heavy] * 10)  # 20 cores per GPU asked, 12 offered
    scarce.prepare_fleet(fleet)
    assert scarce.gpu_cpu_pressure > 1
    plain = CapacityFragMeasure(typical_pods([light] * 10 + [heavy] * 10), scarce.measure.mems)
    # 2 idle GPUs, 16 free cores: both usable by light pods, neither by heavy ones.
    two_light = ("G2", 16_000, 393_216, [1000, 1000])
    assert scarce.measure.of(*two_light) < plain.of(*two_light)
    # 2 idle GPUs, 4 free cores: lost to every pod, light or heavy, weighted or not.
    assert scarce.measure.of("G2", 4000, 393_216, [1000, 1000]) == 2000 * sum(
        t.freq for t in scarce.measure.typical
    )
    measure = scarce.measure
    scarce.prepare_fleet(fleet)  # reading the fleet again neither weighs twice nor drops the memo
    assert scarce.measure is measure
    assert scarce.measure.typical == scarce_cpu_typical(typical_pods([light] * 10 + [heavy] * 10))
    # A fleet with 32 cores per GPU feeds every GPU pod: the weighting goes.
    scarce.prepare_fleet(
        [GpuNodeView(f"big{i}", "G2", 256_000, 393_216, 256_000, 393_216, [1000] * 8) for i in range(4)]
    )
    assert scarce.gpu_cpu_pressure < 1
    assert scarce.measure.typical == typical_pods([light] * 10 + [heavy] * 10)
    fed = KdraPolicy()
    fed.prepare([PodRequest(8000, 8192, 1, 1000)] * 20)  # 8 cores per GPU asked, 12 offered
    fed.prepare_fleet(fleet)
    assert fed.gpu_cpu_pressure < 1
    assert fed.measure.typical == typical_pods([PodRequest(8000, 8192, 1, 1000)] * 20)


def test_kdra_places_shares_the_way_the_workload_packs() -> None:
    """A 250 share beside a 600 strands 150 that no share of this workload fills (its shares pack as
    600 + 400 and 4 x 250): kdra opens a new GPU for it, where FGD (keeping whole GPUs for the whole-GPU
    pods) and best fit fill the gap, as kdra does without its plan; a 400 still goes beside the 600."""
    s600, s400, s250 = (PodRequest(4000, 8192, 1, m) for m in (600, 400, 250))
    work = [s600] * 20 + [s400] * 20 + [s250] * 20 + [WHOLE] * 20
    k = KdraPolicy()
    k.prepare(work)
    no_plan = KdraPolicy()
    no_plan.OFF_PLAN = 0
    no_plan.prepare(work)
    fgd = FGDPolicy()
    fgd.prepare(work)
    v = node("v", [400, 1000, 1000, 1000])  # GPU 0 holds a 600
    assert k.score(v, s250)[1] == (1,)
    assert no_plan.score(v, s250)[1] == fgd.score(v, s250)[1] == best_fit_gpus(v, s250) == (0,)
    assert k.score(v, s400)[1] == (0,)
    # The allocator's device preference ranks the GPUs the same way.
    keys = k.device_keys(v, s250, (1,))
    assert min(range(4), key=keys.__getitem__) == 1


def test_the_measures_bisection_equals_their_definition_on_random_nodes() -> None:
    """FGD's measure: per typical pod, the idle capacity of the GPUs it cannot use; kdra's capacity measure:
    all idle capacity but the largest GPUs as many of its copies as the free CPU and memory hold can use.
    Computed by bisection over the sorted GPUs; here against the definitions, GPU by GPU."""
    rng = random.Random(5)
    typical = [
        TypicalPod(
            rng.choice((0, 2000, 8000, 30000)),
            rng.choice((0, 100, 250, 500, 999, 1000)),
            rng.choice((1, 1, 2, 4)),
            rng.choice(((), ("G2",), ("T4",))),
            rng.random(),
            rng.choice((0, 16384)),
        )
        for _ in range(40)
    ]
    typical = [t for t in typical if t.gpu_milli or t.num_gpu == 1]
    mems = {(t.cpu, t.gpu_milli, t.num_gpu): t.mem for t in typical}
    fgd, cap = FragMeasure(typical, use_memory=True), CapacityFragMeasure(typical, mems)
    for _ in range(300):
        gpus = tuple(
            sorted(rng.choice((0, 0, 50, 250, 500, 750, 1000, 1000)) for _ in range(rng.choice((1, 4, 8))))
        )
        model, cpu, mem = rng.choice(("G2", "T4")), rng.randrange(0, 64_000), rng.randrange(0, 200_000)
        total = sum(gpus)
        want_fgd = want_cap = sum(t.freq for t in typical if not t.gpu_milli) * total if total else 0.0
        for t in (t for t in typical if t.gpu_milli and total):
            pinned_out = bool(t.models) and model not in t.models
            if pinned_out or t.cpu > cpu or t.mem > mem:
                want_fgd += t.freq * total
            else:
                want_fgd += t.freq * unusable(gpus, [f >= t.gpu_milli for f in gpus], t.num_gpu)
            fit = sorted((f for f in gpus if f >= t.gpu_milli), reverse=True)
            n = len(fit) // t.num_gpu
            n = min(n, cpu // t.cpu) if t.cpu else n
            per_pod = mems[(t.cpu, t.gpu_milli, t.num_gpu)]  # the capacity measure's memory per shape
            n = min(n, mem // per_pod) if per_pod else n
            want_cap += t.freq * (total if pinned_out else total - sum(fit[: n * t.num_gpu]))
        assert fgd.compute(model, cpu, mem, gpus) == want_fgd
        assert cap.compute(model, cpu, mem, gpus) == want_cap
