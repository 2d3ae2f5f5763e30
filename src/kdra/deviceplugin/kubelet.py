"""The kubelet's device manager under device plugins: each node's extended resources as numbered device IDs,
handed out to a bound pod and given back when it ends (pkg/kubelet/cm/devicemanager, without topology)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kdra.api.quantity import parse_quantity_any
from kdra.api.types import Obj


def _count(raw: Any) -> int:
    try:
        return parse_quantity_any(raw).value()
    except (ValueError, TypeError):
        return 0


class DevicePluginKubelet:
    """Free device IDs per node and extended resource, handed out to pods and given back."""

    def __init__(self) -> None:
        self.free: dict[tuple[str, str], list[int]] = {}
        self.capacity: dict[tuple[str, str], int] = {}
        self.held: dict[str, list[tuple[str, str, int]]] = {}

    def add_node(self, node: Obj) -> None:
        name = node["metadata"]["name"]
        for res, q in ((node.get("status") or {}).get("allocatable") or {}).items():
            if "/" in res and not res.startswith("kubernetes.io"):
                n = _count(q)
                self.capacity[(name, res)] = n
                self.free[(name, res)] = list(range(n))

    def assign(self, pod_uid: str, node: str, needs: Mapping[str, int]) -> list[tuple[str, int]]:
        got = []
        for res, n in sorted(needs.items()):
            free = self.free.get((node, res), [])
            take, free[:] = free[:n], free[n:]
            for i in take:
                self.held.setdefault(pod_uid, []).append((node, res, i))
                got.append((res, i))
        return got

    def release(self, pod_uid: str) -> None:
        for node, res, i in self.held.pop(pod_uid, []):
            free = self.free.setdefault((node, res), [])
            free.append(i)
            free.sort()
