"""DeviceTaintRules in the scheduler: created, changed or deleted at runtime, a rule changes which devices
the allocator may take at once (kube-scheduler's slice tracker reports it as updates of the slices whose
devices it taints, which wake the pods waiting for them)."""

from __future__ import annotations

from typing import Any

from builders import DRIVER, device_class, gpu_slice, node, pod, template

from kdra.cluster import MemoryStore
from kdra.scheduler.scheduler import Scheduler


def rule(name: str, device: str, effect: str = "NoSchedule") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": {
            "deviceSelector": {"driver": DRIVER, "pool": "n1", "device": device},
            "taint": {"key": "example.com/broken", "effect": effect},
        },
    }


def node_of(s: MemoryStore, name: str) -> str | None:
    return (s.get("Pod", name, "default").get("spec") or {}).get("nodeName")


def world() -> tuple[MemoryStore, Scheduler]:
    s = MemoryStore()
    s.create(node("n1"))
    s.create(gpu_slice("n1", count=2))
    s.create(device_class("gpu"))
    s.create(template("one", count=1, cls="gpu"))
    return s, Scheduler(s)


def claim_device(s: MemoryStore, pod_name: str) -> str:
    pod_obj = s.get("Pod", pod_name, "default")
    name = pod_obj["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    c = s.get("ResourceClaim", name, "default")
    return str(c["status"]["allocation"]["devices"]["results"][0]["device"])


def test_a_rule_keeps_pods_off_its_device_and_its_deletion_frees_it_for_a_waiting_pod() -> None:
    s, sch = world()
    s.create(rule("gpu-0-out", "gpu-0"))
    s.create(pod("a", template_name="one"))
    s.create(pod("b", template_name="one"))
    sch.run(0)
    assert claim_device(s, "a") == "gpu-1"
    assert node_of(s, "b") is None  # gpu-0 is tainted, gpu-1 taken
    s.delete("DeviceTaintRule", "gpu-0-out")
    sch.run(20)
    assert node_of(s, "b") == "n1" and claim_device(s, "b") == "gpu-0"


def test_a_rule_created_at_runtime_applies_to_the_next_pod_and_a_toleration_lets_it_through() -> None:
    s, sch = world()
    s.create(pod("a", template_name="one"))
    sch.run(0)
    assert claim_device(s, "a") == "gpu-0"
    s.create(rule("gpu-1-out", "gpu-1", effect="NoExecute"))
    s.create(pod("b", template_name="one"))
    sch.run(1)
    assert node_of(s, "b") is None
    tolerant = template("tolerant", count=1, cls="gpu")
    tolerant["spec"]["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = [
        {"key": "example.com/broken", "operator": "Exists"}
    ]
    s.create(tolerant)
    s.create(pod("c", template_name="tolerant"))
    sch.run(2)
    assert node_of(s, "c") == "n1" and claim_device(s, "c") == "gpu-1"
