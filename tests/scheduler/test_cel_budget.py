"""Bounded CEL work (issue 18 item 2): a pod whose selectors are expensive is worked on in budgeted chunks,
behind the pods that wait meanwhile, without losing what it already evaluated; everyone else flows."""

from __future__ import annotations

from builders import DRIVER, device_class, gpu_slice, node, pod, template

from kdra.allocator import index
from kdra.cluster import MemoryStore
from kdra.scheduler.scheduler import Scheduler, SchedulerConfig

N = 60  # N x N nested comprehension: ~0.09 million cost units per device
LIST = f"[{','.join(str(i) for i in range(N))}]"
# It reads each device's uuid, so no two devices share a result: every device is new work.
HOSTILE = f'{LIST}.all(x, {LIST}.all(y, x + y >= 0 && device.attributes["{DRIVER}"].uuid != ""))'
# It reads only the driver: one result serves every device of the driver.
HOSTILE_DRIVER_ONLY = f'{LIST}.all(x, {LIST}.all(y, x + y >= 0 && device.driver == "{DRIVER}"))'


def world(budget: int | None, tag: str = "", expression: str = HOSTILE) -> tuple[MemoryStore, Scheduler]:
    s = MemoryStore()
    for i in range(4):
        s.create(node(f"n{i}"))
        sl = gpu_slice(f"n{i}", count=8)
        for dev in sl["spec"]["devices"]:  # every device different, as real GPUs (uuids) are
            dev["attributes"]["uuid"] = {"string": f"GPU{tag}-n{i}-{dev['name']}"}
        s.create(sl)
    s.create(device_class("gpu"))
    hostile = device_class("hostile")
    hostile["spec"]["selectors"][0]["cel"]["expression"] = expression
    s.create(hostile)
    s.create(template("one", cls="gpu"))
    s.create(template("slow", cls="hostile"))
    config = SchedulerConfig(cel_attempt_budget=budget, cel_run_budget=None, cel_attempt_floor=1)
    return s, Scheduler(s, config)


def test_expensive_pods_go_on_in_chunks_behind_everyone_else() -> None:
    evaluated: list[str] = []
    real = index.compile_selector

    def counting(expr: str, **kw: bool) -> object:
        program = real(expr, **kw)
        if expr == HOSTILE:
            evaluated.append(expr)
        return program

    s, sch = world(budget=300_000)
    for i in range(2):
        s.create(pod(f"slow-{i}", template_name="slow"))
    for i in range(10):
        s.create(pod(f"p{i}", template_name="one"))
    index.compile_selector = counting  # type: ignore[assignment]
    try:
        results = sch.run(0)
    finally:
        index.compile_selector = real
    bound_order = [r.pod.split("/")[1] for r in results if r.node]
    assert sorted(bound_order) == sorted([f"p{i}" for i in range(10)] + ["slow-0", "slow-1"])
    # The ordinary pods came first: the expensive ones were cut short and queued behind them.
    assert set(bound_order[:10]) == {f"p{i}" for i in range(10)}, bound_order
    assert sch.cel_deferrals >= 2
    # Every (device, hostile selector) was evaluated once over all the chunks: nothing was redone.
    assert len(evaluated) == 32
    # While it waited, the pod said why.
    deferred = [r for r in results if r.pod == "default/slow-0" and not r.node]
    assert deferred and "expensive to evaluate" in deferred[0].message


def test_an_expensive_selector_reading_only_the_driver_is_evaluated_once_for_all_devices() -> None:
    """32 devices, each with its own uuid, and a class selector at ~0.09 million units that reads only
    `device.driver`: one evaluation serves them all (kdra.cel.selector_input_key), and the pods it selects
    for bind as they do when every device is evaluated."""
    evaluated: list[str] = []
    real = index.compile_selector

    def counting(expr: str, **kw: bool) -> object:
        if expr == HOSTILE_DRIVER_ONLY:
            evaluated.append(expr)
        return real(expr, **kw)

    index._expensive_results.clear()  # nothing shared from an earlier test
    s, sch = world(budget=300_000, expression=HOSTILE_DRIVER_ONLY)
    for i in range(4):
        s.create(pod(f"slow-{i}", template_name="slow"))
    index.compile_selector = counting  # type: ignore[assignment]
    try:
        results = sch.run(0)
    finally:
        index.compile_selector = real
    assert sorted(r.pod for r in results if r.node) == [f"default/slow-{i}" for i in range(4)]
    assert len(evaluated) == 1
    assert sch.cel_deferrals == 0  # nothing new to evaluate after the first device


def test_without_a_budget_the_outcome_is_the_same() -> None:
    placements = []
    for budget in (None, 300_000):
        s, sch = world(budget)
        for i in range(2):
            s.create(pod(f"slow-{i}", template_name="slow"))
        for i in range(10):
            s.create(pod(f"p{i}", template_name="one"))
        sch.run(0)
        placements.append(
            {p["metadata"]["name"]: p["spec"].get("nodeName") for p in s.list("Pod", "default")}
        )
    assert placements[0] == placements[1]
    assert all(placements[0].values())


def test_a_republished_slice_does_not_pay_for_expensive_results_again() -> None:
    s, sch = world(budget=None)
    s.create(pod("slow-0", template_name="slow"))
    sch.run(0)
    with index.cel_budget(10**12) as budget:  # counts the work of the run below
        assert budget is not None
        sl = s.get("ResourceSlice", f"n0-{DRIVER}")
        sl = {**sl, "metadata": {**sl["metadata"]}, "spec": {**sl["spec"], "pool": {**sl["spec"]["pool"]}}}
        sl["spec"]["pool"]["generation"] = 2
        s.update(sl)
        s.create(pod("slow-1", template_name="slow"))
        sch.run(1)
    # The new slice version's 8 devices are new DeviceEntries, but their content is unchanged.
    assert s.get("Pod", "slow-1", "default")["spec"].get("nodeName")
    assert budget.spent < 8 * 50_000, budget.spent


def test_the_session_puts_expensive_jobs_last_and_ends_a_run_whose_budget_is_spent() -> None:
    """The scheduling session (gangs and queues: what kdra scheduler runs) drains the queue into jobs:
    jobs cut short by their CEL budget go after every other job, a run that spent its CEL budget puts the
    jobs it did not try back (Kubernetes mode, so new pods are taken in), and a cut-short job is no
    reason to reclaim or preempt."""
    from kdra.scheduler.gangqueues import GangQueueOptions, GangQueues

    s, _ = world(budget=None, tag="-session")  # devices no other test evaluated (content memo)
    gq = GangQueues(s, GangQueueOptions())
    config = SchedulerConfig(cel_attempt_budget=300_000, cel_run_budget=400_000, cel_attempt_floor=1)
    sch = Scheduler(s, gq.config(config))
    sch.yield_on_cel_budget = True
    # The expensive pods come first and are being worked on when the ordinary ones arrive; the ordinary
    # pods' names sort after theirs, so only the continuing order puts them first.
    for i in range(2):
        s.create(pod(f"slow-{i}", template_name="slow"))
    bound_in: dict[str, int] = {}  # pod -> its place in the order of bindings
    for run in range(40):
        if run == 1:
            for i in range(10):
                s.create(pod(f"x{i}", template_name="one"))
        for r in sch.run(float(run)):
            if r.node:
                bound_in.setdefault(r.pod.split("/")[1], len(bound_in))
        if len(bound_in) == 12:
            break
    assert len(bound_in) == 12, bound_in
    last_ordinary = max(bound_in[f"x{i}"] for i in range(10))
    assert last_ordinary < min(bound_in["slow-0"], bound_in["slow-1"]), bound_in
    assert sch.cel_deferrals >= 2
    assert not gq.evicted


def test_the_sessions_class_totals_of_an_expensive_class_wait_while_other_pods_are_placed() -> None:
    """The session counts each DeviceClass's devices for the queues' shares (work upstream does not do).
    Once a class's selectors proved expensive, that count goes on only in sessions where no other pod
    waits, so that it never delays them; the expensive pods still bind."""
    from kdra.scheduler.gangqueues import GangQueueOptions, GangQueues

    s, _ = world(budget=None, tag="-totals")  # devices no other test evaluated (content memo)
    gq = GangQueues(s, GangQueueOptions())
    config = SchedulerConfig(cel_attempt_budget=300_000, cel_run_budget=None, cel_attempt_floor=1)
    sch = Scheduler(s, gq.config(config))
    sch.yield_on_cel_budget = True
    evaluated: list[str] = []
    real = index.compile_selector

    def counting(expr: str, **kw: bool) -> object:
        if expr == HOSTILE:
            evaluated.append(expr)
        return real(expr, **kw)

    index.compile_selector = counting  # type: ignore[assignment]
    try:
        for i in range(4):
            s.create(pod(f"a{i}", template_name="one"))
        sch.run(0)  # the first chunk of the count shows the class is expensive
        first = len(evaluated)
        for i in range(4):
            s.create(pod(f"b{i}", template_name="one"))
        sch.run(1)
        assert len(evaluated) == first  # ordinary pods waited: no counting
        assert all(s.get("Pod", f"{p}{i}", "default")["spec"].get("nodeName") for p in "ab" for i in range(4))
        s.create(pod("slow-0", template_name="slow"))
        for t in range(2, 60):
            sch.run(float(t))
            if s.get("Pod", "slow-0", "default")["spec"].get("nodeName"):
                break
    finally:
        index.compile_selector = real
    assert s.get("Pod", "slow-0", "default")["spec"].get("nodeName")
