"""Gang-wide device search (kdra.scheduler.gangsearch): when a later gang member fits nowhere, the devices of
earlier members still waiting at Permit are re-assigned. Upstream places members one by one with first fit
and fails these gangs (the `gang_device_search=False` default reproduces it)."""

from __future__ import annotations

from typing import Any

from builders import node, pod
from helpers import bound, condition, pod_group, scheduler

from kdra.cluster import MemoryStore

DRIVER = "dev.example.com"
Obj = dict[str, Any]


def _class(name: str = "dev") -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
    }


def _partitionable_node(store: MemoryStore, name: str, devices: int = 1) -> None:
    """kubernetes#138765's shape: each physical device is published whole and as two halves sharing a
    counter set (DRAPartitionableDevices)."""
    store.create(node(name, cpu="64", memory="256Gi"))
    devs: list[Obj] = []
    sets: list[Obj] = []
    for d in range(devices):
        cs = f"dev-{d}-counters"
        sets.append({"name": cs, "counters": {"units": {"value": "2"}}})
        devs.append(
            {
                "name": f"dev-{d}",
                "attributes": {"size": {"string": "whole"}},
                "consumesCounters": [{"counterSet": cs, "counters": {"units": {"value": "2"}}}],
            }
        )
        for h in range(2):
            devs.append(
                {
                    "name": f"dev-{d}-half-{h}",
                    "attributes": {"size": {"string": "half"}},
                    "consumesCounters": [{"counterSet": cs, "counters": {"units": {"value": "1"}}}],
                }
            )
    pool = {"name": name, "generation": 1, "resourceSliceCount": 2}
    for slice_name, spec in (("counters", {"sharedCounters": sets}), ("devices", {"devices": devs})):
        store.create(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{name}-{slice_name}"},
                "spec": {"driver": DRIVER, "nodeName": name, "pool": dict(pool), **spec},
            }
        )


def _whole_or_half_template(name: str = "whole-or-half") -> Obj:
    def sub(n: str) -> Obj:
        return {
            "name": n,
            "deviceClassName": "dev",
            "selectors": [{"cel": {"expression": f'device.attributes["{DRIVER}"].size == "{n}"'}}],
        }

    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "spec": {
                "devices": {"requests": [{"name": "dev", "firstAvailable": [sub("whole"), sub("half")]}]}
            }
        },
    }


def _gang(store: MemoryStore, group: str, n: int, tmpl: str) -> None:
    store.create(pod_group(group, n))
    for i in range(n):
        p = pod(f"{group}-{i}", template_name=tmpl)
        p["metadata"]["annotations"] = {"kdra.dev/pod-group": group}
        store.create(p)


def _devices(store: MemoryStore) -> dict[str, list[str]]:
    out = {}
    for c in store.list("ResourceClaim"):
        alloc = (c.get("status") or {}).get("allocation")
        if alloc:
            out[c["metadata"]["name"]] = [r["device"] for r in alloc["devices"]["results"]]
    return out


def _world_138765() -> MemoryStore:
    s = MemoryStore()
    s.create(_class())
    _partitionable_node(s, "node-1")
    s.create(_whole_or_half_template())
    return s


def test_kubernetes_138765_upstream_fails_the_gang() -> None:
    s = _world_138765()
    sched, _gq = scheduler(s)
    _gang(s, "pair", 2, "whole-or-half")
    sched.run(0)
    assert bound(s, "pair") == {}
    assert "only 1 of the 2 members" in condition(s, "pair-0")


def test_kubernetes_138765_gang_wide_search_gives_each_member_a_half() -> None:
    s = _world_138765()
    sched, _gq = scheduler(s, gang_device_search=True)
    _gang(s, "pair", 2, "whole-or-half")
    sched.run(0)
    assert set(bound(s, "pair")) == {"pair-0", "pair-1"}
    devices = sorted(d for ds in _devices(s).values() for d in ds)
    assert devices == ["dev-0-half-0", "dev-0-half-1"]
    pg = s.get("PodGroup", "pair", "default")["status"]["conditions"][0]
    assert pg["reason"] == "Scheduled" and "re-assigned 1 member(s)' devices" in pg["message"]
    assert sched.dra.state.dedicated == {
        (DRIVER, "node-1", "dev-0-half-0"),
        (DRIVER, "node-1", "dev-0-half-1"),
    }


def test_four_members_on_two_devices_and_a_gang_that_cannot_fit_is_still_refused() -> None:
    s = MemoryStore()
    s.create(_class())
    _partitionable_node(s, "node-1", devices=2)
    s.create(_whole_or_half_template())
    sched, _gq = scheduler(s, gang_device_search=True)
    _gang(s, "quad", 4, "whole-or-half")  # 2 devices = 4 halves: fits only if every member takes a half
    sched.run(0)
    assert len(bound(s, "quad")) == 4
    assert sorted(d for ds in _devices(s).values() for d in ds) == [
        "dev-0-half-0",
        "dev-0-half-1",
        "dev-1-half-0",
        "dev-1-half-1",
    ]
    _gang(s, "more", 2, "whole-or-half")  # nothing left: refused, nothing reserved, and it says why
    sched.run(1)
    assert bound(s, "more") == {}
    msg = condition(s, "more-0")
    assert "gang-wide device search" not in msg or "found none" in msg
    assert len(sched.dra.state.dedicated) == 4


def _pairs_node(store: MemoryStore, name: str) -> None:
    """Four GPUs, two per PCIe root."""
    store.create(node(name, cpu="64", memory="256Gi"))
    devs = [
        {
            "name": f"gpu-{i}",
            "attributes": {"resource.kubernetes.io/pcieRoot": {"string": f"pci-{i // 2}"}},
        }
        for i in range(4)
    ]
    store.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{name}-gpus"},
            "spec": {
                "driver": DRIVER,
                "nodeName": name,
                "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                "devices": devs,
            },
        }
    )


def _template(name: str, requests: list[Obj], constraints: list[Obj] | None = None) -> Obj:
    devices: Obj = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"spec": {"devices": devices}},
    }


def _pairs_gang(search: bool) -> tuple[dict[str, str], dict[str, list[str]]]:
    """Two single-GPU members that each prefer a PCIe root (firstAvailable: one on that root, else any
    GPU) and a member that needs two GPUs under one PCIe root (matchAttribute), on four GPUs in two pairs."""
    s = MemoryStore()
    s.create(_class())
    _pairs_node(s, "node-1")
    prefer = 'device.attributes["resource.kubernetes.io"].pcieRoot == "{}"'
    for name, root in (("single-a", "pci-0"), ("single-b", "pci-1")):
        preferred = {
            "name": "preferred",
            "deviceClassName": "dev",
            "selectors": [{"cel": {"expression": prefer.format(root)}}],
        }
        s.create(
            _template(
                name,
                [{"name": "g", "firstAvailable": [preferred, {"name": "any", "deviceClassName": "dev"}]}],
            )
        )
    s.create(
        _template(
            "pair",
            [{"name": "g", "exactly": {"deviceClassName": "dev", "count": 2}}],
            [{"matchAttribute": "resource.kubernetes.io/pcieRoot"}],
        )
    )
    sched, _gq = scheduler(s, gang_device_search=search)
    s.create(pod_group("job", 3))
    for name, tmpl in (("job-0", "single-a"), ("job-1", "single-b"), ("job-2", "pair")):
        p = pod(name, template_name=tmpl)
        p["metadata"]["annotations"] = {"kdra.dev/pod-group": "job"}
        s.create(p)
    sched.run(0)
    return bound(s, "job"), _devices(s)


def test_single_members_that_split_both_pairs_are_moved_for_the_pair_member() -> None:
    placed, _ = _pairs_gang(search=False)
    assert placed == {}  # upstream: the singles take gpu-0 and gpu-2, no whole pair is left
    placed, devices = _pairs_gang(search=True)
    assert set(placed) == {"job-0", "job-1", "job-2"}
    by_pod = {k.rsplit("-gpu-", 1)[0]: v for k, v in devices.items()}
    assert by_pod == {"job-0": ["gpu-0"], "job-1": ["gpu-1"], "job-2": ["gpu-2", "gpu-3"]}


def test_scheduling_shard_turns_on_the_search_and_a_device_preference() -> None:
    from kdra.errors import InputError
    from kdra.scheduler.gangqueues import options_from_shard

    shard = {
        "apiVersion": "kdra.dev/v1alpha1",
        "kind": "SchedulingShard",
        "metadata": {"name": "default"},
        "spec": {"gangDeviceSearch": True, "devicePreference": "fragmentation"},
    }
    opts = options_from_shard(shard)
    assert opts.gang_device_search and opts.device_preference == "fragmentation"
    shard["spec"] = {"devicePreference": "closest"}
    try:
        options_from_shard(shard)
    except InputError as exc:
        assert str(exc).startswith(
            "SchedulingShard default: spec.devicePreference: Unsupported value: 'closest'"
        )
    else:
        raise AssertionError("accepted an unknown device preference")
    s = _world_138765()
    s.create({**shard, "spec": {"gangDeviceSearch": True, "devicePreference": "binpack"}})
    sched, gq = scheduler(s)
    assert gq.options.gang_device_search
    assert sched.dra.preference is not None and sched.dra.preference.name == "binpack"
    _gang(s, "pair", 2, "whole-or-half")
    sched.run(0)
    assert set(bound(s, "pair")) == {"pair-0", "pair-1"}


def test_a_shard_device_preference_wins_over_the_flag_and_the_flag_applies_without_one() -> None:
    """`kdra scheduler --device-preference spread` puts it in the SchedulerConfig; a SchedulingShard's
    devicePreference wins (as its other fields win over flags); without a shard the flag applies."""
    from kdra.scheduler.gangqueues import GangQueueOptions, GangQueues
    from kdra.scheduler.scheduler import Scheduler, SchedulerConfig

    flag = SchedulerConfig(device_preference="spread")
    s = _world_138765()
    gq = GangQueues(s, GangQueueOptions())
    assert Scheduler(s, gq.config(flag)).dra.preference.name == "spread"
    s.create(
        {
            "apiVersion": "kdra.dev/v1alpha1",
            "kind": "SchedulingShard",
            "metadata": {"name": "default"},
            "spec": {"devicePreference": "binpack"},
        }
    )
    gq = GangQueues(s, GangQueueOptions())
    assert Scheduler(s, gq.config(flag)).dra.preference.name == "binpack"


def test_a_member_whose_devices_the_search_moved_keeps_no_stale_preference_record() -> None:
    """With a device preference on, the record of what decided pair-0's devices (taken whole at Reserve)
    is dropped when the search gives it a half: no event may claim first fit chose its devices."""
    s = _world_138765()
    sched, _gq = scheduler(s, gang_device_search=True, device_preference="fragmentation")
    _gang(s, "pair", 2, "whole-or-half")
    sched.run(0)
    assert set(bound(s, "pair")) == {"pair-0", "pair-1"}
    assert "default/pair-0" not in sched.dra.choices
    assert sched.dra.choices["default/pair-1"]["chosen"]["devices"][0].endswith("dev-0-half-1")
