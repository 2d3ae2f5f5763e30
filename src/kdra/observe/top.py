"""`kdra top`: each node's devices with the claim and pod holding them and their share of capacity.

Rows come either from a FleetState (a live cluster, or a file of Kubernetes objects) or from the text the
exporter serves (a saved scrape), so a scrape attached to a ticket can be read the same way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kdra.observe.exposition import parse_text
from kdra.observe.model import FleetState, _result_memory, is_partition

_NUM = re.compile(r"(\d+)")


@dataclass
class Holder:
    claim: str  # namespace/name
    pod: str
    request: str
    share: float  # of the device's capacity


@dataclass
class DeviceRow:
    node: str
    device: str  # driver/pool/device as pool/device when the pool is the node
    product: str
    used: float  # fraction of the device in use
    partition: bool = False
    holders: list[Holder] = field(default_factory=list)


def _natural(s: str) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in _NUM.split(s)]


def _device_name(driver: str, pool: str, device: str, node: str) -> str:
    return device if pool == node else f"{pool}/{device}"


def rows_from_state(state: FleetState) -> list[DeviceRow]:
    with state.lock:
        rows = []
        for dk, rec in state.devices.items():
            holders_map = state.holders.get(dk) or {}
            holders = []
            for ck in sorted(holders_map):
                claim = state.claims.get(ck)
                if claim is None:
                    continue
                for r in claim.results:
                    if r.key != dk or r.admin:
                        continue
                    share = 1.0
                    if rec.shareable and r.share_id and rec.memory:
                        share = min(1.0, _result_memory(r, rec) / rec.memory)
                    holders.append(Holder(f"{ck[0]}/{ck[1]}", ",".join(claim.pods), r.request, share))
            used = state._device_ratio(dk, rec, holders_map)
            rows.append(
                DeviceRow(
                    rec.node,
                    _device_name(dk[0], dk[1], dk[2], rec.node),
                    rec.product,
                    used,
                    is_partition(rec),
                    holders,
                )
            )
    return rows


def rows_from_metrics(text: str) -> list[DeviceRow]:
    devices: dict[tuple[str, str, str], DeviceRow] = {}
    infos: list[dict[str, str]] = []
    shares: dict[tuple[str, ...], float] = {}
    for name, lbls, value in parse_text(text):
        if name == "kdra_device_allocated_ratio":
            key = (lbls.get("driver", ""), lbls.get("pool", ""), lbls.get("device", ""))
            node = lbls.get("node", "")
            devices[key] = DeviceRow(
                node,
                _device_name(*key, node),
                lbls.get("product", ""),
                value,
                lbls.get("partition") == "true",
            )
        elif name == "kdra_claim_device_info":
            infos.append(lbls)
        elif name == "kdra_claim_device_gpu_equivalents" and lbls.get("share_id"):
            shares[
                (
                    lbls.get("dra_claim_namespace", ""),
                    lbls.get("dra_claim_name", ""),
                    lbls.get("dra_driver_name", ""),
                    lbls.get("dra_pool_name", ""),
                    lbls.get("dra_device_name", ""),
                    lbls.get("request", ""),
                    lbls["share_id"],
                )
            ] = value
    for lb in infos:
        if lb.get("admin_access") == "true":
            continue
        key = (lb.get("driver", ""), lb.get("pool", ""), lb.get("device", ""))
        row = devices.get(key)
        if row is None:
            node = lb.get("node", "")
            row = devices[key] = DeviceRow(node, _device_name(*key, node), lb.get("product", ""), 1.0)
        share = 1.0
        if lb.get("share_id"):
            share = shares.get(
                (lb.get("namespace", ""), lb.get("claim", ""), *key, lb.get("request", ""), lb["share_id"]),
                0.0,
            )
        row.holders.append(
            Holder(
                f"{lb.get('namespace', '')}/{lb.get('claim', '')}",
                lb.get("pod", ""),
                lb.get("request", ""),
                share,
            )
        )
    return list(devices.values())


def state_from_objects(objs: Iterable[dict[str, Any]]) -> FleetState:
    state = FleetState()
    order = {"Node": 0, "DeviceClass": 1, "ResourceSlice": 2, "ResourceClaim": 3, "Pod": 4}
    for obj in sorted(objs, key=lambda o: order.get(o.get("kind", ""), 9)):
        kind = obj.get("kind", "")
        if kind in order or kind == "Queue":
            state.apply("ADDED", kind, obj)
    return state


def is_metrics_text(text: str) -> bool:
    head = text.lstrip()[:200]
    return head.startswith(("# HELP", "# TYPE", "kdra_"))


def render_table(rows: list[DeviceRow], *, show_all: bool = False, node: str | None = None) -> Any:
    """A rich renderable: a summary line and one table section per node."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    by_node: dict[str, list[DeviceRow]] = {}
    for r in rows:
        if node is not None and r.node != node:
            continue
        by_node.setdefault(r.node, []).append(r)
    table = Table(box=None, pad_edge=False, header_style="bold")
    for col, kw in (
        ("NODE", {"no_wrap": True}),
        ("DEVICE", {"no_wrap": True}),
        ("PRODUCT", {}),
        ("USED", {"justify": "right"}),
        ("CLAIM", {"no_wrap": True}),
        ("POD", {}),
        ("REQUEST", {}),
        ("SHARE", {"justify": "right"}),
    ):
        table.add_column(col, **kw)
    total = allocated = 0
    nodes = sorted(by_node, key=_natural)
    for n in nodes:
        devs = sorted(by_node[n], key=lambda r: _natural(r.device))
        shown = [r for r in devs if show_all or r.holders or not r.partition]
        total += sum(1 for r in devs if not r.partition or r.holders)
        allocated += sum(1 for r in devs if r.holders)
        for i, r in enumerate(shown):
            used = f"{r.used * 100:.0f}%"
            style = "green" if not r.holders else ("yellow" if r.used < 0.999 else "")
            first_col = n if i == 0 else ""
            if not r.holders:
                table.add_row(first_col, r.device, r.product, Text(used, style=style), "-", "-", "-", "-")
            for j, h in enumerate(r.holders):
                table.add_row(
                    first_col if j == 0 else "",
                    r.device if j == 0 else "",
                    r.product if j == 0 else "",
                    Text(used, style=style) if j == 0 else "",
                    h.claim,
                    h.pod or "-",
                    h.request,
                    f"{h.share * 100:.0f}%",
                )
                first_col = ""
        if shown:
            table.rows[-1].end_section = True
    summary = Text(
        f"{len(nodes)} nodes, {allocated}/{total} devices allocated"
        + ("" if show_all else " (free dynamic partitions hidden; --all shows them)")
    )
    return Group(summary, table)
