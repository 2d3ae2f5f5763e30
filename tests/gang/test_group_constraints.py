"""PodGroup deviceConstraints: matchAttribute / distinctAttribute across the members' claims (rail-aligned
NICs, GPUs in one or in distinct NVLink domains), validated, enforced through the allocator, explained."""

from __future__ import annotations

from typing import Any

import pytest
from builders import node, pod
from helpers import bound, condition, pod_group, scheduler

from kdra.cluster import MemoryStore
from kdra.errors import InputError
from kdra.scheduler.gang import parse_pod_group
from kdra.scheduler.groupconstraints import GroupConstraint, constrain_claim, selector_for

DRIVER = "net.example.com"
PCIE = "resource.kubernetes.io/pcieRoot"
NVL = "kdra.dev/nvlinkDomain"
Obj = dict[str, Any]


def _class(name: str = "nic") -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
    }


def _node_with(store: MemoryStore, name: str, devices: list[Obj]) -> None:
    store.create(node(name, cpu="64", memory="256Gi", labels={"kubernetes.io/hostname": name}))
    store.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{name}-devs"},
            "spec": {
                "driver": DRIVER,
                "nodeName": name,
                "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                "devices": devices,
            },
        }
    )


def _nic(i: int) -> Obj:
    return {"name": f"nic-{i}", "attributes": {PCIE: {"string": f"pci-{i}"}}}


def _template(name: str = "one-nic", count: int = 1) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "nic", "exactly": {"deviceClassName": "nic", "count": count}}]
                }
            }
        },
    }


def _in_use(store: MemoryStore, node_name: str, device: str) -> None:
    store.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": f"used-{node_name}-{device}", "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "nic", "exactly": {"deviceClassName": "nic"}}]}},
            "status": {
                "allocation": {
                    "devices": {
                        "results": [{"request": "nic", "driver": DRIVER, "pool": node_name, "device": device}]
                    }
                }
            },
        }
    )


def _members(store: MemoryStore, group: str, nodes: list[str], tmpl: str = "one-nic") -> None:
    for i, n in enumerate(nodes):
        p = pod(f"{group}-{i}", template_name=tmpl, node_selector={"kubernetes.io/hostname": n})
        p["metadata"]["annotations"] = {"kdra.dev/pod-group": group}
        store.create(p)


def _devices(store: MemoryStore, prefix: str) -> dict[str, list[str]]:
    out = {}
    for c in store.list("ResourceClaim"):
        alloc = (c.get("status") or {}).get("allocation")
        if alloc and c["metadata"]["name"].startswith(prefix):
            out[c["metadata"]["name"].rsplit("-gpu-", 1)[0]] = [
                r["device"] for r in alloc["devices"]["results"]
            ]
    return out


def _rails_world(free_a: list[int], free_b: list[int]) -> MemoryStore:
    """Two nodes with a NIC on each of rails pci-0 and pci-1; NICs not listed as free are in use."""
    s = MemoryStore()
    s.create(_class())
    for n, free in (("a", free_a), ("b", free_b)):
        _node_with(s, n, [_nic(0), _nic(1)])
        for i in (0, 1):
            if i not in free:
                _in_use(s, n, f"nic-{i}")
    s.create(_template())
    return s


RAIL = [{"requests": ["nic"], "matchAttribute": PCIE}]


def test_without_the_constraint_first_fit_puts_members_on_different_rails() -> None:
    s = _rails_world([0, 1], [1])
    sched, _gq = scheduler(s)
    s.create(pod_group("job", 2))
    _members(s, "job", ["a", "b"])
    sched.run(0)
    assert _devices(s, "job") == {"job-0": ["nic-0"], "job-1": ["nic-1"]}


def test_rail_aligned_members_all_get_the_same_pcie_root() -> None:
    s = _rails_world([0, 1], [1])
    sched, _gq = scheduler(s)
    s.create(pod_group("job", 2, deviceConstraints=RAIL))
    _members(s, "job", ["a", "b"])
    sched.run(0)
    assert set(bound(s, "job")) == {"job-0", "job-1"}
    assert _devices(s, "job") == {"job-0": ["nic-1"], "job-1": ["nic-1"]}


def test_no_common_rail_is_explained_with_the_values_tried() -> None:
    s = _rails_world([0], [1])
    sched, _gq = scheduler(s)
    s.create(pod_group("job", 2, deviceConstraints=RAIL))
    _members(s, "job", ["a", "b"])
    sched.run(0)
    assert bound(s, "job") == {}
    msg = condition(s, "job-0")
    assert (
        "PodGroup default/job deviceConstraints[0] "
        "(matchAttribute resource.kubernetes.io/pcieRoot over requests [nic])" in msg
    )
    assert "resource.kubernetes.io/pcieRoot=pci-0: 1 of 2 members fit" in msg
    assert "resource.kubernetes.io/pcieRoot=pci-1: 0 of 2 members fit" in msg  # a has no free rail-1 NIC
    assert sched.dra.state.dedicated == {
        (DRIVER, "a", "nic-1"),
        (DRIVER, "b", "nic-0"),
    }  # only the in-use ones


def test_a_value_fixed_by_a_bound_member_holds_for_the_rest() -> None:
    s = _rails_world([0, 1], [0, 1])
    sched, _gq = scheduler(s)
    s.create(pod_group("job", 1, deviceConstraints=RAIL))
    _members(s, "job", ["a"])
    sched.run(0)
    assert _devices(s, "job") == {"job-0": ["nic-0"]}
    _in_use(s, "b", "nic-0")  # b's rail-0 NIC is taken meanwhile; a new member must still use rail 0
    p = pod("job-1", template_name="one-nic", node_selector={"kubernetes.io/hostname": "b"})
    p["metadata"]["annotations"] = {"kdra.dev/pod-group": "job"}
    s.create(p)
    sched.run(1)
    assert "job-1" not in bound(s, "job")


def _gpu(domain: str) -> Obj:
    return {"name": "gpu-0", "attributes": {NVL: {"string": domain}}}


def test_distinct_nvlink_domains_across_members() -> None:
    s = MemoryStore()
    s.create(_class())
    for n, d in (("n0", "d0"), ("n1", "d0"), ("n2", "d1")):
        _node_with(s, n, [_gpu(d)])
    s.create(_template())
    sched, _gq = scheduler(s)
    s.create(pod_group("spread", 2, deviceConstraints=[{"distinctAttribute": NVL}]))
    for i in range(2):
        p = pod(f"spread-{i}", template_name="one-nic")
        p["metadata"]["annotations"] = {"kdra.dev/pod-group": "spread"}
        s.create(p)
    sched.run(0)
    placed = bound(s, "spread")
    assert len(placed) == 2
    assert {"n2"} <= set(placed.values()) and len(set(placed.values())) == 2


def test_one_nvlink_domain_for_all_members_gpus() -> None:
    s = MemoryStore()
    s.create(_class())
    for n, d in (("n0", "d0"), ("n1", "d1"), ("n2", "d1")):
        _node_with(s, n, [_gpu(d)])
    s.create(_template())
    sched, _gq = scheduler(s)
    s.create(pod_group("same", 2, deviceConstraints=[{"matchAttribute": NVL}]))
    for i in range(2):
        p = pod(f"same-{i}", template_name="one-nic")
        p["metadata"]["annotations"] = {"kdra.dev/pod-group": "same"}
        s.create(p)
    sched.run(0)
    assert sorted(bound(s, "same").values()) == ["n1", "n2"]  # d1 is the only domain with room for two


def test_the_rule_also_binds_a_members_own_devices() -> None:
    c = GroupConstraint(PCIE, distinct=False, requests=("nic",))
    claim = {
        "metadata": {"name": "x"},
        "spec": {
            "devices": {"requests": [{"name": "nic", "exactly": {"deviceClassName": "nic", "count": 2}}]}
        },
    }
    new = constrain_claim(claim, [(c, None, ())])
    assert new["spec"]["devices"]["constraints"] == [{"requests": ["nic"], "matchAttribute": PCIE}]
    assert claim["spec"]["devices"].get("constraints") is None  # the stored claim is not changed
    assert selector_for(c, ("string", 'pci"0'), ()) == (
        '"pcieRoot" in device.attributes["resource.kubernetes.io"] && '
        'device.attributes["resource.kubernetes.io"]["pcieRoot"] == "pci\\"0"'
    )
    d = GroupConstraint("example.com/rail", distinct=True)
    assert selector_for(d, None, [("int", 1), ("int", 2)]) == (
        '"rail" in device.attributes["example.com"] && !(device.attributes["example.com"]["rail"] in [1, 2])'
    )


@pytest.mark.parametrize(
    ("constraints", "message"),
    [
        ("rail", "spec.deviceConstraints: Invalid value: 'rail': must be a list"),
        (
            [{"requests": ["nic"]}],
            'spec.deviceConstraints[0]: Required value: exactly one of "matchAttribute" or '
            '"distinctAttribute" is required',
        ),
        ([{"matchAttribute": PCIE, "distinctAttribute": PCIE}], "exactly one of"),
        (
            [{"matchAttribute": "pcieRoot"}],
            'spec.deviceConstraints[0].matchAttribute: Invalid value: "pcieRoot": '
            "a fully qualified name must be a domain and a name separated by a slash",
        ),
        (
            [{"matchAttribute": PCIE, "requests": ["Nic"]}],
            'spec.deviceConstraints[0].requests[0]: Invalid value: "Nic"',
        ),
        (
            [{"matchAttribute": PCIE, "requests": ["nic", "nic"]}],
            'spec.deviceConstraints[0].requests: Duplicate value: "nic"',
        ),
        ([{"matchAttribute": PCIE, "rail": 1}], 'spec.deviceConstraints[0]: Unsupported value: "rail"'),
    ],
)
def test_bad_device_constraints_name_object_field_and_rule(constraints: Any, message: str) -> None:
    with pytest.raises(InputError) as info:
        parse_pod_group(pod_group("job", 2, deviceConstraints=constraints))
    assert str(info.value).startswith("PodGroup default/job: spec.deviceConstraints")
    assert message in str(info.value)


def test_a_gang_whose_podgroup_is_invalid_says_so() -> None:
    s = _rails_world([0, 1], [0, 1])
    sched, _gq = scheduler(s)
    s.create(pod_group("job", 2, deviceConstraints=[{"matchAttribute": "pcieRoot"}]))
    _members(s, "job", ["a", "b"])
    sched.run(0)
    assert bound(s, "job") == {}
    assert (
        "its group object is invalid: PodGroup default/job: spec.deviceConstraints[0].matchAttribute"
        in condition(s, "job-0")
    )
