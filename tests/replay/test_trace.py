from __future__ import annotations

from pathlib import Path

import pytest

from kdra.errors import InputError
from kdra.replay.trace import claim_for, default_trace_dir, load_trace, pod_objects, read_nodes, read_pods
from kdra.scheduler.gpupolicies import PodRequest

needs_trace = pytest.mark.skipif(default_trace_dir() is None, reason="the shared Alibaba trace is not here")

POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
    "scheduled_time\n"
)


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


@needs_trace
def test_bundled_fleet_matches_the_trace_node_list() -> None:
    trace = load_trace()
    assert len(trace.nodes) == 1213
    assert trace.gpu_capacity_milli == 6212 * 1000
    assert len(trace.pods) == 8152
    assert sum(1 for p in trace.pods if p.request.is_share) == 3078


def test_pods_become_requests_with_times(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        "pods.csv",
        POD_HEADER
        + "a,4000,16384,1,470,,LS,Running,10,20,12\n"
        + "b,8000,0,2,1000,V100M16|V100M32,BE,Failed,5,9,\n"
        + "c,1000,512,0,0,,LS,Pending,1,2,\n",
    )
    a, b, c = read_pods(p)
    assert a.request == PodRequest(4000, 16384, 1, 470)
    assert a.request.is_share and (a.creation, a.deletion, a.scheduled) == (10, 20, 12)
    assert b.request.models == ("V100M16", "V100M32") and b.scheduled is None
    assert c.request.num_gpu == 0


def test_claims_shares_whole_gpus_and_model_selector() -> None:
    share = claim_for("a", PodRequest(4000, 1, 1, 470))
    assert share is not None
    ex = share["spec"]["devices"]["requests"][0]["exactly"]
    assert ex["count"] == 1 and ex["capacity"] == {"requests": {"shares": "470"}}
    whole = claim_for("b", PodRequest(4000, 1, 2, 1000, ("V100M32",)))
    assert whole is not None
    ex = whole["spec"]["devices"]["requests"][0]["exactly"]
    assert ex["count"] == 2 and ex["capacity"] == {"requests": {"shares": "1000"}}
    assert "productName in ['Tesla V100-SXM2-32GB']" in ex["selectors"][0]["cel"]["expression"]
    assert claim_for("c", PodRequest(1000, 1)) is None
    legacy = claim_for("d", PodRequest(4000, 1, 1, 470), shares=False)
    assert legacy is not None and "capacity" not in legacy["spec"]["devices"]["requests"][0]["exactly"]


@needs_trace
def test_pod_objects_are_kubernetes_shaped() -> None:
    trace = load_trace()
    pod, claim = pod_objects(next(p for p in trace.pods if p.request.num_gpu))
    assert pod["kind"] == "Pod" and claim["kind"] == "ResourceClaim"
    assert pod["spec"]["resourceClaims"][0]["resourceClaimName"] == claim["metadata"]["name"]
    assert pod["spec"]["containers"][0]["resources"]["requests"]["cpu"].endswith("m")


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("x,abc,1,0,0,,LS,Running,1,2,1", "line 3: column cpu_milli: 'abc' is not an integer"),
        ("x,1000,1,1,1200,,LS,Running,1,2,1", "line 3: column gpu_milli: 1200 exceeds 1000"),
        ("x,1000,1,2,500,,LS,Running,1,2,1", "line 3: column gpu_milli: 500: a GPU share needs num_gpu 1"),
        ("x,1000,1,1,500,H200,LS,Running,1,2,1", "line 3: column gpu_spec: unknown GPU model 'H200'"),
        ("x,1000,1,0,0,,LS,Running,5,2,1", "line 3: column deletion_time: 2 is before creation_time 5"),
        ("x,1000,-4,0,0,,LS,Running,1,2,1", "line 3: column memory_mib: -4 must be at least 0"),
        ("ok,1000,1,0,0,,LS,Running,1,2,1", "line 3: column name: duplicate pod 'ok'"),
        ("x,1000,1,0,0,,LS,Running,1,2,1,extra", "line 3: 12 fields, the header has 11"),
    ],
)
def test_malformed_pod_rows_name_file_and_line(tmp_path: Path, row: str, message: str) -> None:
    p = write(tmp_path, "pods.csv", POD_HEADER + "ok,1000,1,0,0,,LS,Running,1,2,1\n" + row + "\n")
    with pytest.raises(InputError) as err:
        read_pods(p)
    assert str(p) in str(err.value) and message in str(err.value)


def test_malformed_node_rows(tmp_path: Path) -> None:
    p = write(tmp_path, "nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nn1,96000,393216,8,G2\nn2,1,1,2,Z9\n")
    with pytest.raises(InputError, match=r"nodes.csv: line 3: column model: unknown GPU model 'Z9'"):
        read_nodes(p)
    q = write(tmp_path, "bad.csv", "sn,cpu,memory_mib\nn1,1,1\n")
    with pytest.raises(InputError, match=r"bad.csv: line 1: missing column\(s\) cpu_milli, gpu, model"):
        read_nodes(q)
    with pytest.raises(InputError, match=r"(?i)no such file"):
        read_nodes(tmp_path / "missing.csv")


@pytest.mark.parametrize("name", ["Bad_Name", "n1.", "-n1", "x" * 254])
def test_node_names_that_are_not_kubernetes_names_are_refused(tmp_path: Path, name: str) -> None:
    """Replay renders a Node and ResourceSlices per row: a name Kubernetes would refuse is an error naming
    the file, the line and the rule (it was rendered as is)."""
    text = f"sn,cpu_milli,memory_mib,gpu,model\nn1,96000,393216,8,G2\n{name},1,1,2,G2\n"
    p = write(tmp_path, "nodes.csv", text)
    with pytest.raises(InputError) as err:
        read_nodes(p)
    msg = str(err.value)
    assert msg.startswith(f"{p}: line 3: column sn: node name {name!r}: ") and "\n" not in msg
    assert "RFC 1123 subdomain" in msg or "253" in msg


def test_errors_name_the_files_own_line_after_blank_lines_and_multiline_fields(tmp_path: Path) -> None:
    # csv's DictReader skips blank lines and a quoted field may span lines: a count of records named
    # line 3 for both of these rows (the file's lines 5 and 4).
    p = write(tmp_path, "pods.csv", POD_HEADER + "ok,1000,1,0,0,,LS,Running,1,2,1\n\n\nx,abc,1,0,0,,,,,,\n")
    with pytest.raises(InputError, match=r"pods.csv: line 5: column cpu_milli: 'abc' is not an integer"):
        read_pods(p)
    q = write(tmp_path, "q.csv", POD_HEADER + '"a\nb",1000,1,0,0,,,,,,\nx,1000,1,1,1200,,,,,,\n')
    with pytest.raises(InputError, match=r"q.csv: line 4: column gpu_milli: 1200 exceeds 1000"):
        read_pods(q)


def test_cpu_only_nodes_in_the_node_list_replay(tmp_path: Path) -> None:
    """The openb all-node list has CPU-only nodes (gpu 0, no model): read_nodes keeps them, and the fleet
    built from them refused them ("unknown GPU model code ''"), so no replay of such a list ran."""
    from kdra.replay.engine import run_placement
    from kdra.replay.trace import Trace, TracePod
    from kdra.scheduler.gpupolicies import make_policy

    nodes = read_nodes(
        write(
            tmp_path,
            "nodes.csv",
            "sn,cpu_milli,memory_mib,gpu,model\ng1,32000,65536,2,T4\nc1,64000,65536,0,\n",
        )
    )
    assert nodes[1].gpus == 0 and nodes[1].model == ""
    pods = [
        TracePod("cpu-big", PodRequest(48000, 1024)),
        TracePod("gpu", PodRequest(1000, 1024, 1, 500)),
    ]
    run = run_placement(Trace(nodes, pods), make_policy("fgd"), 1, inflate_ratio=0)
    assert dict(run.nodes) == {"cpu-big": "c1", "gpu": "g1"}
