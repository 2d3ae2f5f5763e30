"""The workload model placement policies learn from (kdra.scheduler.workload): a decaying histogram of the
pod shapes seen, and when a policy re-reads it."""

from __future__ import annotations

import pytest

from kdra.scheduler.gpupolicies import KdraPolicy, PodRequest
from kdra.scheduler.workload import WorkloadModel

SHARE = PodRequest(4000, 8192, 1, 500)
WHOLE = PodRequest(8000, 16384, 1, 1000)


def test_without_a_half_life_every_pod_weighs_one() -> None:
    m = WorkloadModel()
    m.observe_all([SHARE, SHARE, WHOLE])
    assert dict(m.items()) == {SHARE: 2.0, WHOLE: 1.0} and m.seen == 3


def test_a_pod_weighs_half_after_a_half_life_of_later_pods() -> None:
    m = WorkloadModel(half_life=10)
    m.observe(SHARE)
    for _ in range(10):
        m.observe(WHOLE)
    w = dict(m.items())
    assert w[SHARE] == pytest.approx(0.5)
    assert w[WHOLE] == pytest.approx(sum(0.5 ** (k / 10) for k in range(10)))
    # Changing the half-life keeps what was learned; rescaling keeps weights through huge runs.
    m.set_half_life(1)
    assert dict(m.items())[SHARE] == pytest.approx(0.5)
    for _ in range(2000):
        m.observe(WHOLE)
    assert dict(m.items()).get(SHARE, 0.0) < 1e-12 and dict(m.items())[WHOLE] == pytest.approx(2.0)


def test_the_model_is_re_read_at_doublings_then_every_half_half_life() -> None:
    m = WorkloadModel(half_life=100)
    points = [1]
    while points[-1] < 400:
        points.append(m.learn_points(points[-1]))
    assert points[:9] == [1, 2, 4, 8, 16, 32, 82, 132, 182]
    assert WorkloadModel().learn_points(512) == 1024  # a fixed list: doublings only


def test_an_online_policy_learns_the_pods_it_is_told() -> None:
    k = KdraPolicy()
    for _ in range(3):
        k.learn(SHARE)
    k.learn(WHOLE)
    assert k.model.seen == 4 and k.learned == 4  # re-read at 1, 2 and 4 pods
    assert {t.gpu_milli for t in k.measure.typical} == {500, 1000}
    assert k.plan.on_plan(500, 500) and k.plan.on_plan(0, 500)  # 2 x 500 pack a GPU; seen more than once
