"""Queueing hints: a parked pod is retried only on an event that may help it, never misses one that does,
and the placements come out exactly as when every event retries every parked pod."""

from __future__ import annotations

import copy

from builders import claim, device_class, gpu_slice, node, pod, template

from kdra.cluster import MemoryStore
from kdra.scheduler.framework import SUCCESS, Code, CycleState, PermitPlugin, Status
from kdra.scheduler.podinfo import PodInfo
from kdra.scheduler.scheduler import Scheduler, SchedulerConfig
from kdra.scheduler.scheduling_queue import MAX_IN_UNSCHEDULABLE
from kdra.sim.generator import expand_generator
from kdra.sim.report import placements
from kdra.sim.runner import simulate
from kdra.sim.workload import build_workload


def parked(sch: Scheduler) -> set[str]:
    return {pi.name for pi, _ in sch.queue.unschedulable.values()}


def bound(store: MemoryStore, name: str) -> str | None:
    node_name: str | None = (store.get("Pod", name, "default").get("spec") or {}).get("nodeName")
    return node_name


def gpu_world(gpus: int = 2) -> tuple[MemoryStore, Scheduler]:
    s = MemoryStore()
    s.create(node("n1"))
    s.create(gpu_slice("n1", count=gpus))
    s.create(device_class("gpu"))
    s.create(template("one", count=1, cls="gpu"))
    return s, Scheduler(s)


def test_a_pod_for_a_missing_class_ignores_unrelated_churn_and_wakes_for_its_devices() -> None:
    s, sch = gpu_world()
    s.create(template("tpu", count=1, cls="tpu"))
    s.create(pod("wants-tpu", template_name="tpu"))
    s.create(pod("a", template_name="one"))
    s.create(pod("b", template_name="one"))
    sch.run(0)
    assert parked(sch) == {"wants-tpu"}
    cycles = sch.cycles
    # GPU pods come and go: their claims are released and deallocated, none of it selects a TPU.
    for t, name in enumerate(("a", "b"), start=1):
        s.delete("Pod", name, "default")
        s.create(pod(f"{name}2", template_name="one"))
        sch.run(float(t * 20))
    assert sch.cycles == cycles + 2  # the two new GPU pods, no retry of wants-tpu
    assert sch.queue.hint_skipped > 0
    # Also not its class being created without devices for it...
    s.create(
        {**device_class("tpu"), "spec": {"selectors": [{"cel": {"expression": 'device.driver == "tpu.x"'}}]}}
    )
    sch.run(100)
    assert parked(sch) == {"wants-tpu"}
    # ...but a slice with TPUs wakes it, and it binds.
    tpus = gpu_slice("n1", count=1)
    tpus["metadata"]["name"] = "n1-tpus"
    tpus["spec"].update(driver="tpu.x", pool={"name": "n1-tpus", "generation": 1, "resourceSliceCount": 1})
    s.create(tpus)
    sch.run(200)
    assert bound(s, "wants-tpu") == "n1"


def test_a_pod_waiting_for_a_gpu_wakes_when_one_is_freed() -> None:
    s, sch = gpu_world(gpus=1)
    s.create(pod("first", template_name="one"))
    sch.run(0)
    s.create(pod("second", template_name="one"))
    sch.run(1)
    assert parked(sch) == {"second"}
    s.delete("Pod", "first", "default")  # the claim controller releases and deletes its claim
    sch.run(20)
    assert bound(s, "second") == "n1"


def test_node_updates_wake_only_pods_the_changed_fields_may_help() -> None:
    s = MemoryStore()
    taint = {"key": "maintenance", "value": "yes", "effect": "NoSchedule"}
    s.create(node("n1", labels={"zone": "a"}, taints=[taint]))
    sch = Scheduler(s)
    s.create(pod("p", cpu="1"))
    sch.run(0)
    assert parked(sch) == {"p"}
    cycles = sch.cycles
    n = copy.deepcopy(s.get("Node", "n1"))
    n["status"]["conditions"] = [{"type": "Ready", "status": "True", "lastHeartbeatTime": "now"}]
    s.update(n)  # a heartbeat: taints unchanged
    n = copy.deepcopy(s.get("Node", "n1"))
    n["metadata"]["labels"]["zone"] = "b"
    s.update(n)  # a label change: TaintToleration does not read labels
    sch.run(30)
    assert sch.cycles == cycles
    n = copy.deepcopy(s.get("Node", "n1"))
    n["spec"]["taints"] = []
    s.update(n)
    sch.run(60)
    assert bound(s, "p") == "n1"


def test_pods_only_exact_hints_rejected_skip_the_five_minute_retry_others_keep_it() -> None:
    s, sch = gpu_world(gpus=1)
    s.create(template("tpu", count=1, cls="tpu"))
    s.create(pod("wants-tpu", template_name="tpu"))
    sch.run(0)
    cycles = sch.cycles
    sch.queue.flush_unschedulable_leftover(MAX_IN_UNSCHEDULABLE + 1)
    sch.run(MAX_IN_UNSCHEDULABLE + 20)
    assert sch.cycles == cycles  # DynamicResources' hints are exact: nothing to retry for
    assert sch.queue.next_leftover_flush() is None
    # The upstream behaviour: every parked pod is retried after 5 minutes.
    s2, plain = gpu_world(gpus=1)
    plain.queue.use_hints = plain.queue.trust_exact_hints = False
    s2.create(template("tpu", count=1, cls="tpu"))
    s2.create(pod("wants-tpu", template_name="tpu"))
    plain.run(0)
    assert plain.queue.next_leftover_flush() == MAX_IN_UNSCHEDULABLE
    plain.queue.flush_unschedulable_leftover(MAX_IN_UNSCHEDULABLE + 1)
    before = plain.cycles
    plain.run(MAX_IN_UNSCHEDULABLE + 20)
    assert plain.cycles == before + 1


class HoldFirst(PermitPlugin):
    """Holds the pod named 'held' at Permit, so its reservation is in flight."""

    name = "HoldFirst"

    def permit(self, state: CycleState, pi: PodInfo, node: str) -> Status:
        return Status(Code.WAIT, ("held",)) if pi.name == "held" else SUCCESS


def test_a_reservation_given_back_without_an_api_event_wakes_the_pods_behind_it() -> None:
    s = MemoryStore()
    s.create(node("n1", cpu="2"))
    s.create(gpu_slice("n1", count=1))
    s.create(device_class("gpu"))
    s.create(claim("c1"))
    s.create(claim("c2"))
    sch = Scheduler(s, SchedulerConfig(extra_plugins=[HoldFirst()]))
    s.create(pod("held", cpu="2", claim_name="c1"))
    sch.run(0)
    assert "held" in {w.pi.name for w in sch.waiting.values()}
    s.create(pod("behind", cpu="2", claim_name="c2"))
    sch.run(1)
    assert parked(sch) == {"behind"}  # no CPU and no GPU left: both are in flight for 'held'
    uid = next(iter(sch.waiting))
    sch.reject_waiting(uid, 2, Status(Code.UNSCHEDULABLE, ("gang timed out",), "HoldFirst"), "rejected")
    assert "behind" not in parked(sch)
    sch.run(20)
    assert bound(s, "behind") == "n1"


NEVER_FITS = {
    "apiVersion": "kdra.dev/v1alpha1",
    "kind": "WorkloadGenerator",
    "metadata": {"name": "hints"},
    "spec": {
        "duration": "3d",
        "namespace": "ml",
        "streams": [
            {
                "name": "nb",
                "type": "notebook",
                "arrivals": {"every": "30m"},
                "runTime": {"min": "1h", "max": "9h"},
                "gpu": {"memory": "9Gi"},
            },
            {
                "name": "train",
                "type": "job",
                "arrivals": {"every": "6h"},
                "parallelism": 4,
                "runTime": "10h",
                "gpu": {"count": 8, "model": "H100-SXM-80GB"},
            },
            {
                "name": "svc",
                "type": "inference",
                "arrivals": {"count": 3},
                "replicas": 4,
                "runTime": "2d",
                "gpu": {"memory": "40Gi"},
            },
        ],
    },
}


def test_hints_change_no_placement_only_the_number_of_retries() -> None:
    """The same month of arrivals and departures (GPUs contended, 8-GPU jobs waiting for whole nodes),
    with and without hints: identical placements and start times, far fewer scheduling cycles."""
    wl = build_workload(expand_generator(NEVER_FITS).objects, name="hints")
    with_hints = simulate("mixed", wl, modes=["dra"], seed=5)
    without = simulate("mixed", wl, modes=["dra"], seed=5, config=SchedulerConfig(queueing_hints=False))
    a, b = placements(with_hints.modes["dra"]), placements(without.modes["dra"])
    assert a == b
    delayed = [p for p in a if p["start_seconds"] > p["arrival_seconds"]]
    assert delayed, "the workload must make pods wait for freed GPUs, or this test proves nothing"
    ma, mb = with_hints.modes["dra"].metrics, without.modes["dra"].metrics
    assert ma["scheduling_cycles"] < mb["scheduling_cycles"], (
        ma["scheduling_cycles"],
        mb["scheduling_cycles"],
    )
