"""`kdra top`: each node's devices with the claim and pod holding them and their share of capacity.

Rows come either from a FleetState (a live cluster, or a file of Kubernetes objects) or from the text the
exporter serves (a saved scrape), so a scrape attached to a ticket can be read the same way. A GPU that is
partitioned (DynamicMIG: the whole GPU and its MIG placements are separate devices drawing on one counter
set) reads as used by its held partitions: their GPU-equivalents (share of the GPU's memory) add up on the
whole-GPU row. Pending pods are listed after the devices with the first line of their PodScheduled message.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kdra.observe.exposition import parse_text
from kdra.observe.model import FleetState
from kdra.observe.records import is_partition, result_memory

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
    driver: str = ""
    pool: str = ""
    via_partitions: int = 0  # held partitions of this (whole) GPU that make up `used`

    @property
    def key(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device.rsplit('/', 1)[-1]}"

    @property
    def in_use(self) -> bool:
        return bool(self.holders) or self.via_partitions > 0


@dataclass
class PendingPod:
    pod: str  # namespace/name
    reason: str  # PodScheduled reason (Unschedulable, SchedulerError), SchedulingGated, NotYetAttempted
    message: str  # first line of the condition message
    count: int = 1  # from a scrape: pods per (namespace, reason), names unknown


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
                        share = min(1.0, result_memory(r, rec) / rec.memory)
                    holders.append(Holder(f"{ck[0]}/{ck[1]}", ",".join(claim.pods), r.request, share))
            used = state.device_ratio(dk, rec, holders_map)
            rows.append(
                DeviceRow(
                    rec.node,
                    _device_name(dk[0], dk[1], dk[2], rec.node),
                    rec.product,
                    used,
                    is_partition(rec),
                    holders,
                    dk[0],
                    dk[1],
                )
            )
        # A partitionable GPU: the whole-GPU device and its partitions share `phys`; the partitions held
        # use the GPU by their GPU-equivalents (their share of its memory).
        held: dict[tuple[str, str, str], list[float]] = {}
        for dk, rec in state.devices.items():
            if rec.phys and is_partition(rec) and state.holders.get(dk):
                held.setdefault((dk[0], dk[1], rec.phys), []).append(_partition_equiv(state, dk, rec))
        for row, (dk, rec) in zip(rows, state.devices.items(), strict=True):
            parts = held.get((dk[0], dk[1], rec.phys)) if rec.phys and not is_partition(rec) else None
            if parts:
                row.via_partitions = len(parts)
                row.used = max(row.used, min(1.0, sum(parts)))
    return rows


def _partition_equiv(state: FleetState, dk: tuple[str, str, str], rec: Any) -> float:
    for ck in state.holders.get(dk) or {}:
        claim = state.claims.get(ck)
        for r in claim.results if claim is not None else ():
            if r.key == dk and not r.admin:
                return state.result_equiv(r, rec)
    return 0.0


def rows_from_metrics(text: str) -> list[DeviceRow]:
    devices: dict[tuple[str, str, str], DeviceRow] = {}
    infos: list[dict[str, str]] = []
    shares: dict[tuple[str, ...], float] = {}
    equivs: dict[tuple[str, str, str], float] = {}
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
                driver=key[0],
                pool=key[1],
            )
        elif name == "kdra_claim_device_info":
            infos.append(lbls)
        elif name == "kdra_claim_device_gpu_equivalents" and lbls.get("admin_access") != "true":
            dkey = (
                lbls.get("dra_driver_name", ""),
                lbls.get("dra_pool_name", ""),
                lbls.get("dra_device_name", ""),
            )
            equivs[dkey] = max(equivs.get(dkey, 0.0), value)
        if name == "kdra_claim_device_gpu_equivalents" and lbls.get("share_id"):
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
            row = devices[key] = DeviceRow(
                node, _device_name(*key, node), lb.get("product", ""), 1.0, driver=key[0], pool=key[1]
            )
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
    # A scrape does not say which GPU a partition belongs to; NVIDIA's partitions are named
    # `<gpu>-mig-<profile>-...` after it, which is what the state's counter sets say too.
    parts: dict[tuple[str, str, str], list[float]] = {}
    for key, row in devices.items():
        if row.partition and row.holders and "-mig-" in key[2]:
            parent = (key[0], key[1], key[2].split("-mig-", 1)[0])
            parts.setdefault(parent, []).append(equivs.get(key, 0.0))
    for parent, equiv in parts.items():
        prow = devices.get(parent)
        if prow is not None and not prow.partition:
            prow.via_partitions = len(equiv)
            prow.used = max(prow.used, min(1.0, sum(equiv)))
    return list(devices.values())


def pending_from_state(state: FleetState, namespace: str | None = None) -> list[PendingPod]:
    with state.lock:
        return [
            PendingPod(f"{ns}/{name}", p.reason, p.message)
            for (ns, name), p in sorted(state.pods.items())
            if p.pending and (namespace is None or ns == namespace)
        ]


def pending_from_metrics(text: str, namespace: str | None = None) -> list[PendingPod]:
    out = []
    for name, lbls, value in parse_text(text):
        if (
            name == "kdra_pending_pods"
            and value
            and (namespace is None or lbls.get("namespace") == namespace)
        ):
            out.append(PendingPod(f"{lbls.get('namespace', '')}/*", lbls.get("reason", ""), "", int(value)))
    return out


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


def render_table(
    rows: list[DeviceRow],
    *,
    show_all: bool = False,
    node: str | None = None,
    pending: list[PendingPod] | None = None,
    wide: bool = False,
    namespace: str | None = None,
) -> Any:
    """A rich renderable: a summary line, one table section per node, then the pending pods. The counts in
    the summary are of the rows shown (free dynamic partitions are hidden unless show_all); `namespace`
    keeps only that namespace's claims as holders."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    by_node: dict[str, list[DeviceRow]] = {}
    for r in rows:
        if node is not None and r.node != node:
            continue
        by_node.setdefault(r.node, []).append(r)
    table = Table(box=None, pad_edge=False, header_style="bold")
    cols: list[tuple[str, dict[str, Any]]] = [
        ("NODE", {"no_wrap": True}),
        ("DEVICE", {"no_wrap": True}),
        ("PRODUCT", {}),
        ("USED", {"justify": "right"}),
        ("CLAIM", {"no_wrap": True}),
        ("POD", {}),
        ("REQUEST", {}),
        ("SHARE", {"justify": "right"}),
    ]
    if wide:
        cols[2:2] = [("DRIVER", {"no_wrap": True}), ("POOL", {"no_wrap": True})]
    for col, kw in cols:
        table.add_column(col, **kw)
    total = in_use = hidden = 0
    nodes = sorted(by_node, key=_natural)
    for n in nodes:
        devs = sorted(by_node[n], key=lambda r: _natural(r.device))
        shown = []
        for r in devs:
            holders = [h for h in r.holders if namespace is None or h.claim.startswith(f"{namespace}/")]
            if show_all or holders or not r.partition:
                shown.append((r, holders))
            else:
                hidden += 1
        total += len(shown)
        in_use += sum(1 for r, holders in shown if holders or r.via_partitions)
        for i, (r, holders) in enumerate(shown):
            used = f"{r.used * 100:.0f}%"
            busy = holders or r.via_partitions
            style = "green" if not busy else ("yellow" if r.used < 0.999 else "")
            first_col = n if i == 0 else ""
            extra = [r.driver, r.pool] if wide else []
            if not holders:
                claim = (
                    f"({r.via_partitions} partition{'s' if r.via_partitions != 1 else ''} held)"
                    if r.via_partitions
                    else "-"
                )
                table.add_row(
                    first_col, r.device, *extra, r.product, Text(used, style=style), claim, "-", "-", "-"
                )
            for j, h in enumerate(holders):
                table.add_row(
                    first_col if j == 0 else "",
                    r.device if j == 0 else "",
                    *(extra if j == 0 else ["", ""] if wide else []),
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
    note = f" ({hidden} free dynamic partitions hidden; --all shows them)" if hidden else ""
    summary = Text(f"{len(nodes)} nodes, {in_use}/{total} devices allocated{note}")
    parts: list[Any] = [summary, table]
    if pending:
        waiting = sum(p.count for p in pending)
        ptable = Table(box=None, pad_edge=False, header_style="bold", title_justify="left")
        ptable.add_column("PENDING POD", no_wrap=True)
        ptable.add_column("REASON", no_wrap=True)
        ptable.add_column("WHY")
        for p in pending:
            ptable.add_row(p.pod if p.count == 1 else f"{p.pod} ({p.count} pods)", p.reason, p.message or "-")
        parts += [Text(""), Text(f"{waiting} pending pod{'s' if waiting != 1 else ''}"), ptable]
    return Group(*parts)


def device_names(rows: list[DeviceRow], node: str | None = None, namespace: str | None = None) -> list[str]:
    """`-o name`: driver/pool/device of every device in use, in the table's order."""
    out = []
    for r in sorted(rows, key=lambda r: (_natural(r.node), _natural(r.device))):
        if node is not None and r.node != node:
            continue
        holders = [h for h in r.holders if namespace is None or h.claim.startswith(f"{namespace}/")]
        if holders or (r.via_partitions and namespace is None):
            out.append(r.key)
    return out
