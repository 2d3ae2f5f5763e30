"""The `alibaba-openb` fleet: the 1,213 GPU nodes of the Alibaba GPU trace v2023 (FGD, USENIX ATC '23).

The node list's model codes map to catalog entries. `G2` and `G3` are undisclosed internal codes (upstream
README); kdra gives them documented stand-ins, chosen from the node shapes, not from any disclosure:

* G3 -> A100-40GB: 8 GPUs, 128 vCPU, 768 GiB is exactly Alibaba Cloud's ebmgn7 shape (8 x A100-40GB).
* G2 -> A10: 8 GPUs, 96 vCPU, 384 GiB; Alibaba's large 2022-23 inference fleet was A10-based (gn7i). Guess.

What matters for the trace's scheduling experiments is the GPU count per node (requests are fractions of a
GPU),
which is exact. Every node keeps its trace code in the label `kdra.dev/trace-gpu-model`.

Data terms: research or study use only, attribute Alibaba, cite the FGD paper (shared/traces/.../README.md).
The package ships only the run-length-encoded node shapes (data/alibaba-openb-shapes.csv), not the CSV.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from importlib import resources
from pathlib import Path

from kdra.drivers.catalog import lookup
from kdra.drivers.common import binary_quantity
from kdra.errors import InputError
from kdra.fleets.spec import MAX_ACCELERATORS_PER_NODE, MAX_NODES, Accelerator, Fleet, Pool
from kdra.validation.rules import is_dns1123_subdomain

MODEL_MAP: dict[str, str] = {
    "G2": "A10",  # stand-in (guess), see module docstring
    "G3": "A100-40GB",  # stand-in (node shape matches ebmgn7)
    "T4": "T4",
    "P100": "P100",
    "V100M16": "V100-16GB",
    "V100M32": "V100-32GB",
    "A10": "A10",
    "G1": "A100-80GB",  # not in the node list; stand-in for completeness (guess)
}
TRACE_LABEL = "kdra.dev/trace-gpu-model"

Row = tuple[str, int, int, int, str]  # name, cpu_milli, memory_mib, gpus, model code


def fleet_from_rows(
    rows: Iterable[Row], name: str = "alibaba-openb", source: str = "", max_nodes: int = MAX_NODES
) -> Fleet:
    """One pool per node shape (model, GPUs, CPU, memory), node names as in the trace."""
    pools: dict[tuple[int, int, int, str], Pool] = {}
    names: dict[tuple[int, int, int, str], list[str]] = {}
    for i, (node, cpu_milli, mem_mib, gpus, code) in enumerate(rows):
        if i >= max_nodes:
            raise InputError(
                f"{source or name}: more than {max_nodes:,} nodes (--max-nodes N lifts the limit)"
            )
        if not 0 <= gpus <= MAX_ACCELERATORS_PER_NODE or cpu_milli < 0 or mem_mib < 0:
            raise InputError(
                f"{source or name}: node {node}: gpu {gpus}, cpu_milli {cpu_milli}, memory_mib {mem_mib}: "
                f"must not be negative, and at most {MAX_ACCELERATORS_PER_NODE} GPUs per node"
            )
        if not gpus:
            code = ""  # a CPU-only node (the openb all-node list's CPU nodes): no GPU model
        key = (cpu_milli, mem_mib, gpus, code)
        if key not in pools:
            if gpus and code not in MODEL_MAP:
                raise InputError(
                    f"{source or name}: node {node}: unknown GPU model code {code!r} "
                    f"(known: {', '.join(MODEL_MAP)})"
                )
            cpu = f"{cpu_milli // 1000}" if cpu_milli % 1000 == 0 else f"{cpu_milli}m"
            acc = Accelerator(lookup(MODEL_MAP[code]), gpus) if gpus > 0 else None
            pools[key] = Pool(
                name=f"{code.lower() or 'cpu'}-{gpus}gpu-{cpu_milli // 1000}c-{mem_mib // 1024}g",
                count=0,
                cpu=cpu,
                memory=binary_quantity(mem_mib << 20),
                pods=110,
                labels={TRACE_LABEL: code},
                accelerator=acc,
            )
            names[key] = []
        names[key].append(node)
    for key, pool in pools.items():
        pool.names = tuple(names[key])
        pool.count = len(pool.names)
    return Fleet(
        name=name,
        pools=list(pools.values()),
        source=source,
        description="Alibaba GPU cluster trace v2023 (openb) node list; G2/G3 are stand-ins",
    )


NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")


def csv_int(
    path: str, line: int, row: dict[str, str], col: str, lo: int = 0, optional: bool = False
) -> int | None:
    raw = row.get(col)
    if raw is None:
        if optional:
            return None
        raise InputError(f"{path}: line {line}: column {col!r} is missing")
    raw = raw.strip()
    if raw == "" or raw.lower() == "nan":
        if optional:
            return None
        raise InputError(f"{path}: line {line}: column {col}: empty, expected an integer")
    try:
        v = int(raw)
    except ValueError:
        try:
            f = float(raw)
        except ValueError:
            raise InputError(f"{path}: line {line}: column {col}: {raw!r} is not an integer") from None
        if not f.is_integer():
            raise InputError(f"{path}: line {line}: column {col}: {raw!r} is not an integer") from None
        v = int(f)
    if v < lo:
        raise InputError(f"{path}: line {line}: column {col}: {v} must be at least {lo}")
    return v


def csv_rows(path: Path, required: tuple[str, ...]) -> list[tuple[int, dict[str, str]]]:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as e:
        raise InputError(f"{path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a UTF-8 text file") from None
    # The file's own lines (csv's line_num), not a count of records: DictReader skips blank lines, and a
    # quoted field may span lines, so a record count named the wrong line after either.
    reader = csv.DictReader(io.StringIO(text, newline=""))
    header = reader.fieldnames or []
    missing = [c for c in required if c not in header]
    if missing:
        raise InputError(
            f"{path}: line {reader.reader.line_num or 1}: missing column(s) {', '.join(missing)} "
            f"(expected {','.join(required)})"
        )
    out = []
    for row in reader:
        i = reader.line_num
        if None in row:
            extra = len(row[None])
            raise InputError(f"{path}: line {i}: {len(header) + extra} fields, the header has {len(header)}")
        if all(not (v or "").strip() for v in row.values()):
            continue
        out.append((i, row))
    return out


def read_node_rows(path: str | Path) -> list[tuple[int, Row]]:
    """(line, row) of a node list in the openb columns; a malformed row is an InputError naming the file,
    the line and the column. CPU-only nodes (gpu 0) have model "". Both `kdra replay -c` and the fleets'
    CSV loader (`kdra simulate -c`, which took any row int() took: duplicates reached the store as "nodes
    'n1' already exists", names kept their spaces, an empty file was an empty fleet) read node lists so."""
    p = Path(path)
    out: list[tuple[int, Row]] = []
    seen: set[str] = set()
    for line, row in csv_rows(p, NODE_COLUMNS):
        name = (row.get("sn") or "").strip()
        if not name:
            raise InputError(f"{p}: line {line}: column sn: empty node name")
        # The name becomes a Node's and its ResourceSlices' (replay renders them, simulate creates them):
        # the same rule as a fleet file's node names, said here with the file and line.
        bad = is_dns1123_subdomain(name)
        if bad:
            raise InputError(f"{p}: line {line}: column sn: node name {name!r}: {'; '.join(bad)}")
        if name in seen:
            raise InputError(f"{p}: line {line}: column sn: duplicate node {name!r}")
        seen.add(name)
        cpu = csv_int(str(p), line, row, "cpu_milli", 1)
        mem = csv_int(str(p), line, row, "memory_mib", 0)
        gpus = csv_int(str(p), line, row, "gpu", 0)
        model = (row.get("model") or "").strip()
        if gpus and model not in MODEL_MAP:
            raise InputError(
                f"{p}: line {line}: column model: unknown GPU model {model!r} (known: {', '.join(MODEL_MAP)})"
            )
        assert cpu is not None and mem is not None and gpus is not None
        out.append((line, (name, cpu, mem, gpus, model if gpus else "")))
    if not out:
        raise InputError(f"{p}: no nodes")
    return out


def read_csv(path: str | Path, max_nodes: int = MAX_NODES) -> Fleet:
    """A fleet from any node list in the openb columns (sn, cpu_milli, memory_mib, gpu, model)."""
    p = Path(path)
    rows = read_node_rows(p)
    if len(rows) > max_nodes:
        raise InputError(f"{p}: more than {max_nodes:,} nodes (--max-nodes N lifts the limit)")
    return fleet_from_rows((r for _line, r in rows), name=p.stem, source=str(p), max_nodes=max_nodes)


def bundled() -> Fleet:
    text = resources.files("kdra.fleets").joinpath("data/alibaba-openb-shapes.csv").read_text()
    rows: list[Row] = []
    i = 0
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        n, cpu, mem, gpus, code = line.split(",")
        for _ in range(int(n)):
            rows.append((f"openb-node-{i:04d}", int(cpu), int(mem), int(gpus), code))
            i += 1
    return fleet_from_rows(rows, source="bundled:alibaba-openb")
