"""Fleet aggregates kept as running sums: per (node, driver, pool, product) group and per node pool, of
what each device and each claim contributes, each contribution removed exactly as it was added, so an event
costs the groups it touches and a scrape renders only the groups that changed. `fleet()` recounts the same
figures from the records, to check the sums against.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kdra.api.gpus import gpu_equivalents
from kdra.observe.exposition import SeriesTable, escape, fmt_value, header
from kdra.observe.families import FLEET_FAMILIES, POOL_FAMILIES
from kdra.observe.records import ClaimKey, ClaimRec, DeviceRec, DevKey, result_memory

if TYPE_CHECKING:
    from kdra.observe.model import FleetState

Group = tuple[str, str, str, str]  # node, driver, pool, product
# what a claim adds to a group: GPU-equivalents, memory, the memory it needs, the memory it strands
Contribution = tuple[Group, float, int, float, float]


class FleetSums:
    """The running sums over a FleetState's records; the state calls in whenever a device, a claim or a
    node's pool changes, under its lock."""

    def __init__(self, state: FleetState) -> None:
        self.state = state  # the records summed: devices, holders, claims (and pods, for a claim's need)
        # Per (node, driver, pool, product): the sums, how many devices and claims contribute, each group's
        # physical GPUs, and the groups to render again.
        self.groups: dict[Group, list[float]] = {}
        self.group_refs: dict[Group, int] = {}
        self.group_phys: dict[Group, dict[str, list[int]]] = {}
        self.dirty_groups: set[Group] = set()
        self.fleet_lines: list[SeriesTable] = [SeriesTable(64, part=2) for _ in FLEET_FAMILIES]
        self.device_contrib: dict[DevKey, tuple[Group, int, str, int]] = {}
        self.claim_contrib: dict[ClaimKey, list[Contribution]] = {}
        self.stranded_lines = SeriesTable(64, part=0)
        # Per node pool: [GPUs, idle, fragmented], from each physical GPU's used fraction, kept as running
        # sums (a GPU's contribution removed exactly as added when its devices change).
        self.node_pool: dict[str, str] = {}
        self.pool_rows: dict[str, list[float]] = {}
        self.phys_used: dict[tuple[str, str], list[float]] = {}  # (node, GPU) -> [devices, used fraction]
        # device -> (its GPU, its use of it, its allocated ratio)
        self.use: dict[DevKey, tuple[tuple[str, str], float, float]] = {}

    def move_node(self, name: str, pool: str) -> None:
        """A node's pool label changed: its GPUs' use leaves the old pool's sums and joins the new one's."""
        if self.node_pool.get(name, "") == pool:
            return
        moved = [dk for dk in sorted(self.state.node_devices.get(name, ())) if dk in self.use]
        ratios = {dk: self.use[dk][2] for dk in moved}
        for dk in moved:  # out of the old pool...
            self.device_use(dk, None, 0.0)
        if pool:
            self.node_pool[name] = pool
        else:
            self.node_pool.pop(name, None)
        for dk in moved:  # ...into the new one
            rec = self.state.devices.get(dk)
            if rec is not None:
                self.device_use(dk, rec, ratios[dk])

    def device_use(self, dk: DevKey, rec: DeviceRec | None, ratio: float) -> None:
        """Move a GPU device's use into its physical GPU's and that GPU's pool's sums."""
        old = self.use.pop(dk, None)
        if old is not None:
            self._phys_add(old[0], -1, -old[1])
        if rec is None or not rec.gpu or not rec.node:
            return
        weight = gpu_equivalents(rec, self.state.node_gpu_memory.get(rec.node, 0))
        key = (rec.node, rec.phys or dk[2])
        use = ratio * weight
        self.use[dk] = (key, use, ratio)
        self._phys_add(key, 1, use)

    def _phys_add(self, key: tuple[str, str], devices: int, use: float) -> None:
        entry = self.phys_used.get(key)
        pool = self.node_pool.get(key[0], "")
        row = self.pool_rows.setdefault(pool, [0.0, 0.0, 0.0])
        if entry is not None:  # take the GPU's old contribution out
            u = min(1.0, max(0.0, entry[1]))
            row[0] -= 1
            row[1] -= 1 - u
            row[2] -= (1 - u) if 1e-9 < u < 1 - 1e-9 else 0.0
        else:
            entry = self.phys_used[key] = [0.0, 0.0]
        entry[0] += devices
        entry[1] += use
        if entry[0] <= 0:
            del self.phys_used[key]
            if row[0] <= 0.5:
                del self.pool_rows[pool]
            return
        u = min(1.0, max(0.0, entry[1]))
        row[0] += 1
        row[1] += 1 - u
        row[2] += (1 - u) if 1e-9 < u < 1 - 1e-9 else 0.0

    def pools(self) -> dict[str, tuple[int, float, float]]:
        """Node pool -> (GPUs, idle GPU-equivalents, fragmented GPU-equivalents)."""
        with self.state.lock:
            rows = sorted(self.pool_rows.items())
            return {p: (round(r[0]), round(r[1], 6), round(r[2], 6)) for p, r in rows}

    def pool_parts(self) -> list[bytes]:
        parts: list[bytes] = []
        for i, (fam, kind, help_text) in enumerate(POOL_FAMILIES):
            parts.append(header(fam, kind, help_text).encode())
            for pool, row in sorted(self.pool_rows.items()):
                parts.append(f'{fam}{{node_pool="{escape(pool)}"}} {fmt_value(round(row[i], 6))}\n'.encode())
        return parts

    def _ref(self, g: Group) -> list[float]:
        row = self.groups.get(g)
        if row is None:
            row = self.groups[g] = [0.0] * len(FLEET_FAMILIES)
            self.group_phys[g] = {}
        self.group_refs[g] = self.group_refs.get(g, 0) + 1
        self.dirty_groups.add(g)
        return row

    def _unref(self, g: Group) -> None:
        self.dirty_groups.add(g)
        n = self.group_refs[g] - 1
        if n:
            self.group_refs[g] = n
        else:  # nothing contributes any more: drop it (and any float residue with it)
            del self.group_refs[g], self.groups[g], self.group_phys[g]

    def device(self, dk: DevKey) -> None:
        old = self.device_contrib.pop(dk, None)
        if old is not None:
            g, alloc, phys, mem = old
            row = self.groups[g]
            row[0] -= 1
            row[1] -= alloc
            if phys:
                entry = self.group_phys[g][phys]
                entry[0] -= 1
                if not entry[0]:
                    del self.group_phys[g][phys]
                    row[2] -= 1
                    row[4] -= entry[1]
            else:
                row[4] -= mem
            self._unref(g)
        rec = self.state.devices.get(dk)
        if rec is None:
            return
        g = (rec.node, dk[0], dk[1], rec.product)
        row = self._ref(g)
        alloc = 1 if dk in self.state.holders else 0
        row[0] += 1
        row[1] += alloc
        mem = 0
        if rec.phys:
            pm = self._phys_memory(rec)
            known = self.group_phys[g].get(rec.phys)
            if known is None:
                self.group_phys[g][rec.phys] = [1, pm]
                row[2] += 1
                row[4] += pm
            else:
                known[0] += 1
                if pm > known[1]:
                    row[4] += pm - known[1]
                    known[1] = pm
        elif not rec.gpu:
            mem = rec.memory
            row[4] += mem
        self.device_contrib[dk] = (g, alloc, rec.phys, mem)

    def _phys_memory(self, rec: DeviceRec) -> int:
        if rec.dtype == "mig" or rec.counters:
            return self.state.node_gpu_memory.get(rec.node) or rec.parent_memory or rec.memory
        return rec.memory

    def claim_shares(self, claim: ClaimRec) -> tuple[list[Contribution], int | None, int]:
        """What a claim adds to each (node, driver, pool, product) group: GPU-equivalents, memory, the
        memory it needs (its devices' memory shared out by size) and the rest, stranded; with the claim's
        need and its devices' memory in all. Admin-access results hold nothing."""
        need = self.state.claim_need(claim)
        items = []
        total = 0
        for r in claim.results:
            if r.admin:
                continue
            rec = self.state.devices.get(r.key)
            m = result_memory(r, rec)
            items.append((r, rec, m))
            total += m
        out: list[Contribution] = []
        for r, rec, m in items:
            g = (self.state.result_node(claim, r), r.driver, r.pool, rec.product if rec is not None else "")
            eq = self.state.result_equiv(r, rec)
            req = strd = 0.0
            if need is not None and total:
                req = need * m / total
                strd = max(0.0, m - req)
            out.append((g, eq, m, req, strd))
        return out, need, total

    def claim(self, ck: ClaimKey) -> None:
        for g, eq, m, req, strd in self.claim_contrib.pop(ck, ()):
            row = self.groups[g]
            row[3] -= eq
            row[5] -= m
            row[6] -= req
            row[7] -= strd
            self._unref(g)
        self.stranded_lines.pop(ck, None)
        claim = self.state.claims.get(ck)
        if claim is None or not claim.results:
            return
        contrib, need, total = self.claim_shares(claim)
        for g, eq, m, req, strd in contrib:
            row = self._ref(g)
            row[3] += eq
            row[5] += m
            row[6] += req
            row[7] += strd
        self.claim_contrib[ck] = contrib
        if need is not None and total > need:
            self.stranded_lines[ck] = (
                f'kdra_claim_stranded_memory_bytes{{namespace="{escape(ck[0])}",claim="{escape(ck[1])}",'
                f'pod="{escape(",".join(claim.pods))}"}} {total - need}\n'
            )

    def _flush_groups(self) -> None:
        for g in self.dirty_groups:
            row = self.groups.get(g)
            if row is None:
                for lines in self.fleet_lines:
                    lines.pop(g, None)
                continue
            lbl = (
                f'{{node="{escape(g[0])}",driver="{escape(g[1])}",pool="{escape(g[2])}",'
                f'product="{escape(g[3])}"}}'
            )
            for i, (fam, _kind, _help) in enumerate(FLEET_FAMILIES):
                self.fleet_lines[i][g] = f"{fam}{lbl} {fmt_value(round(row[i], 6))}\n"
        self.dirty_groups.clear()

    def fleet_groups(self) -> dict[Group, list[float]]:
        """The incrementally kept aggregates (same shape as fleet())."""
        with self.state.lock:
            return {g: [round(v, 6) for v in row] for g, row in self.groups.items()}

    def fleet(self) -> dict[tuple[str, str, str, str], list[float]]:
        """(node, driver, pool, product) -> [devices, allocated, gpus, equiv, memory, alloc mem, requested,
        stranded]."""
        out: dict[tuple[str, str, str, str], list[float]] = {}
        phys: dict[tuple[str, str, str, str], dict[str, int]] = {}
        for dk, dev in self.state.devices.items():
            g = (dev.node, dk[0], dk[1], dev.product)
            row = out.get(g)
            if row is None:
                row = out[g] = [0.0] * 8
                phys[g] = {}
            row[0] += 1
            if dk in self.state.holders:
                row[1] += 1
            if dev.phys:
                mem = (
                    dev.memory
                    if not (dev.dtype == "mig" or dev.counters)
                    else (self.state.node_gpu_memory.get(dev.node) or dev.parent_memory or dev.memory)
                )
                p = phys[g]
                p[dev.phys] = max(p.get(dev.phys, 0), mem)
            elif not dev.gpu:
                row[4] += dev.memory
        for g, p in phys.items():
            out[g][2] = len(p)
            out[g][4] += sum(p.values())
        for claim in self.state.claims.values():
            if not claim.results:
                continue
            for g, eq, m, req, strd in self.claim_shares(claim)[0]:
                row = out.get(g)
                if row is None:
                    row = out[g] = [0.0] * 8
                row[3] += eq
                row[5] += m
                row[6] += req
                row[7] += strd
        return out

    def parts(self) -> list[bytes]:
        """The fleet, node pool and stranded-memory families, for the exposition."""
        self._flush_groups()
        parts: list[bytes] = []
        for i, (fam, kind, help_text) in enumerate(FLEET_FAMILIES):
            parts.append(header(fam, kind, help_text).encode())
            parts.extend(self.fleet_lines[i].blobs())
        parts.extend(self.pool_parts())
        # stranded memory per claim (only claims that strand some), for "who wastes the most" tables
        parts.append(
            header(
                "kdra_claim_stranded_memory_bytes",
                "gauge",
                "Memory a claim's devices hold beyond what the claim (or its pod) says it needs.",
            ).encode()
        )
        parts.extend(self.stranded_lines.blobs())
        return parts
