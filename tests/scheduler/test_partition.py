"""kdra.kube.partition on the in-memory store: the nodes and DeviceClasses kdra owns, the taint that keeps
other schedulers off kdra's nodes, and the start-up warnings about what kube-scheduler can still reach."""

from __future__ import annotations

import pytest
from builders import DRIVER, claim, device_class, gpu_slice, node, pod, template

from kdra.cluster import MemoryStore
from kdra.errors import InputError
from kdra.kube.partition import Partition, owner_taint, owner_toleration, startup_warnings
from kdra.scheduler.plugins.basic import TaintToleration
from kdra.scheduler.scheduler import Scheduler, SchedulerConfig


def cluster(partition: Partition, *, taint_owned: bool = True) -> tuple[MemoryStore, Scheduler]:
    s = MemoryStore()
    s.create(device_class("gpu"))
    s.create(device_class("other"))  # selects the same devices (the same driver)
    for name, pool in (("a1", "kdra"), ("a2", "kdra"), ("b1", "shared")):
        taints = [owner_taint("default-scheduler")] if taint_owned and pool == "kdra" else None
        s.create(node(name, labels={"pool": pool}, taints=taints))
        s.create(gpu_slice(name, 2))
    s.create(template("one"))
    sch = Scheduler(s, SchedulerConfig(extra_plugins=partition.plugins()))
    for p in sch.profile.plugins:
        if isinstance(p, TaintToleration):
            p.implied = (owner_toleration("default-scheduler"),)
    return s, sch


def test_owned_nodes_only_and_their_taint_is_tolerated() -> None:
    s, sch = cluster(Partition.parse("pool=kdra", None))
    for i in range(5):
        s.create(pod(f"p{i}", template_name="one"))
    got = {r.pod: r.node for r in sch.run(0)}
    assert sorted(n for n in got.values() if n) == ["a1", "a1", "a2", "a2"]  # 4 devices on owned nodes
    cond = next(
        c for c in s.get("Pod", "p4", "default")["status"]["conditions"] if c["type"] == "PodScheduled"
    )
    assert "1 node(s) not owned by this scheduler (--owned-nodes)" in cond["message"]


def test_without_the_implied_toleration_the_owner_taint_keeps_pods_off() -> None:
    s, sch = cluster(Partition())
    for p in sch.profile.plugins:
        if isinstance(p, TaintToleration):
            p.implied = ()  # another scheduler's view of kdra's nodes
    for i in range(3):
        s.create(pod(f"p{i}", template_name="one"))
    got = {r.pod: r.node for r in sch.run(0)}
    assert sorted(n for n in got.values() if n) == ["b1", "b1"]


def test_owned_device_classes_only() -> None:
    s, sch = cluster(Partition.parse(None, "gpu"))
    s.create(template("theirs", cls="other"))
    s.create(pod("mine", template_name="one"))
    s.create(pod("not-mine", template_name="theirs"))
    got = {r.pod: r for r in sch.run(0)}
    assert got["default/mine"].node is not None
    assert got["default/not-mine"].node is None
    assert (
        "device class other is not owned by this scheduler (--owned-device-classes)"
        in got["default/not-mine"].message
    )


def test_partition_flags_are_checked() -> None:
    with pytest.raises(InputError, match="--owned-nodes"):
        Partition.parse("pool in (a", None)
    with pytest.raises(InputError, match="--owned-nodes: an empty selector"):
        Partition.parse("  ", None)
    with pytest.raises(InputError, match="--owned-device-classes: name at least one"):
        Partition.parse(None, " , ")
    assert Partition.parse(None, None).empty


def test_start_up_warnings_say_where_kube_scheduler_reaches_kdras_devices() -> None:
    def warnings(partition: Partition, *, taint_owned: bool = True) -> list[str]:
        _s, sch = cluster(partition, taint_owned=taint_owned)
        return startup_warnings(partition, "default-scheduler", sch.dra.index, sch.cache.nodes)

    (none,) = warnings(Partition(), taint_owned=False)
    assert none.startswith("no partition with kube-scheduler") and "6 of the 6 devices" in none
    assert warnings(Partition.parse("pool=kdra", None)) == []  # tainted: kube-scheduler cannot get there
    (open_nodes,) = warnings(Partition.parse("pool=kdra", None), taint_owned=False)
    assert "kube-scheduler can place pods on 2 of the 2 nodes kdra owns (a1, a2)" in open_nodes
    assert "kubectl taint nodes a1 kdra.dev/scheduler=default-scheduler:NoSchedule" in open_nodes
    (overlap,) = warnings(Partition.parse(None, "gpu"))
    assert "2 of the 6 devices kdra allocates through DeviceClass(es) other" in overlap  # b1's
    missing = warnings(Partition.parse(None, "gpu,gone"))
    assert "--owned-device-classes: DeviceClass gone does not exist (yet)" in missing


def test_start_up_check_leaves_out_a_class_too_expensive_to_evaluate() -> None:
    """A DeviceClass whose selector is a 300 x 300 comprehension is not evaluated over every device at
    start-up (that would stall the scheduler for seconds per device set): the check says it left it out.
    The selector reads each device's index, so only devices with the same index share a result."""
    from kdra.kube import partition as part

    s, sch = cluster(Partition(), taint_owned=False)
    hostile = device_class("hostile")
    items = "[" + ",".join(str(i) for i in range(300)) + "]"
    hostile["spec"]["selectors"][0]["cel"]["expression"] = (
        f'{items}.all(x, {items}.all(y, x + y >= 0)) && device.attributes["{DRIVER}"].index >= 0'
    )
    s.create(hostile)
    sch.run(0)  # takes the class in
    budget = part.STARTUP_CEL_BUDGET
    part.STARTUP_CEL_BUDGET = 1_000_000  # below one evaluation of the comprehension (~0.9M units)
    try:
        out = startup_warnings(Partition(), "default-scheduler", sch.dra.index, sch.cache.nodes)
    finally:
        part.STARTUP_CEL_BUDGET = budget
    assert any("DeviceClass(es) hostile left out of this check" in w for w in out), out
    assert any("6 of the 6 devices" in w for w in out), out  # the other classes still checked


def test_claims_already_allocated_elsewhere_are_not_checked_for_ownership() -> None:
    s, sch = cluster(Partition.parse(None, "gpu"))
    s.create(claim("shared", cls="other"))
    s.create(pod("a", claim_name="shared"))
    got = {r.pod: r for r in sch.run(0)}
    assert got["default/a"].node is None  # kdra does not allocate a claim of a class it does not own
