"""SchedulerConfig.device_preference: the scheduler's allocator orders devices by the policy, the pod's
claims get a valid allocation, and what decided the devices is recorded; off, nothing changes."""

from __future__ import annotations

from pathlib import Path

from builders import node, pod, template

from kdra.api.load import load_paths
from kdra.cluster import MemoryStore
from kdra.scheduler.scheduler import Scheduler, SchedulerConfig

ROOT = Path(__file__).resolve().parents[2]


def _store() -> MemoryStore:
    s = MemoryStore()
    objs = load_paths([str(ROOT / "examples" / "allocate" / "h100-mig-node.yaml")])
    for o in objs:
        if o["kind"] in ("DeviceClass", "ResourceSlice"):
            s.create(o)
    s.create(node("gpu-node-01", cpu="200", memory="1Ti"))
    profile = "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"
    s.create(template("one-g", cls="mig.nvidia.com", selector=profile))
    return s


def _devices(s: MemoryStore) -> list[str]:
    return [
        r["device"]
        for c in s.list("ResourceClaim")
        for r in (c.get("status") or {}).get("allocation", {}).get("devices", {}).get("results", [])
    ]


def test_without_a_preference_the_scheduler_takes_first_fit() -> None:
    s = _store()
    sched = Scheduler(s)
    s.create(pod("nb", template_name="one-g"))
    assert all(r.node for r in sched.run(0))
    assert _devices(s) == ["gpu-0-mig-1g10gb-19-0"]
    assert sched.dra.choices == {}


def test_fragmentation_preference_in_the_scheduler_and_its_record() -> None:
    s = _store()
    sched = Scheduler(s, SchedulerConfig(device_preference="fragmentation"))
    s.create(pod("nb", template_name="one-g"))
    results = sched.run(0)
    assert [r.node for r in results] == ["gpu-node-01"]
    assert _devices(s) == ["gpu-0-mig-1g10gb-19-6"]  # memory slice 6: 4g.40gb (slices 0-3) still fits
    choice = sched.dra.choices["default/nb"]
    assert choice["policy"] == "fragmentation"
    assert choice["decidedBy"] == "preference"
    assert choice["firstFit"]["devices"] == ["gpu.nvidia.com/gpu-node-01/gpu-0-mig-1g10gb-19-0"]
