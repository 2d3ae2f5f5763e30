"""Small slices of the Alibaba openb trace for fast replay tests (the full runs are benchmarks)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from kdra.replay.trace import bundled_nodes, default_trace_dir

NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"
POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
    "scheduled_time\n"
)


@pytest.fixture(scope="session")
def small_trace_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Every 10th node of the bundled fleet and every 10th pod of the default pod list."""
    d = tmp_path_factory.mktemp("openb-small")
    nodes = d / "nodes.csv"
    with nodes.open("w") as f:
        f.write(NODE_HEADER)
        for n in bundled_nodes()[::10]:
            f.write(f"{n.name},{n.cpu},{n.mem},{n.gpus},{n.model}\n")
    src = default_trace_dir()
    if src is None:
        pytest.skip("the shared Alibaba trace is not available")
    pods = d / "pods.csv"
    with (src / "openb_pod_list_default.csv").open() as fin, pods.open("w", newline="") as fout:
        rows = list(csv.reader(fin))
        w = csv.writer(fout)
        w.writerow(rows[0])
        for r in rows[1::10]:
            w.writerow(r)
    return nodes, pods
