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
from collections.abc import Iterable
from importlib import resources
from pathlib import Path

from kdra.drivers.catalog import lookup
from kdra.drivers.common import binary_quantity
from kdra.errors import InputError
from kdra.fleets.spec import MAX_ACCELERATORS_PER_NODE, MAX_NODES, Accelerator, Fleet, Pool

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


def read_csv(path: str | Path, max_nodes: int = MAX_NODES) -> Fleet:
    """A fleet from any node list in the openb columns (sn, cpu_milli, memory_mib, gpu, model)."""
    p = Path(path)
    try:
        with p.open(newline="") as f:
            reader = csv.DictReader(f)
            rows: list[Row] = []
            for i, r in enumerate(reader, start=2):
                if i - 2 >= max_nodes:
                    raise InputError(f"{p}: more than {max_nodes:,} nodes (--max-nodes N lifts the limit)")
                try:
                    rows.append(
                        (r["sn"], int(r["cpu_milli"]), int(r["memory_mib"]), int(r["gpu"]), r["model"])
                    )
                except (KeyError, TypeError, ValueError) as e:
                    raise InputError(
                        f"{p}: line {i}: expected columns sn,cpu_milli,memory_mib,gpu,model: {e}"
                    ) from None
    except OSError as e:
        raise InputError(f"{p}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise InputError(f"{p}: not UTF-8 text (byte {e.start})") from None
    return fleet_from_rows(rows, name=p.stem, source=str(p), max_nodes=max_nodes)


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
