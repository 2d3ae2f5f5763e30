from __future__ import annotations

import itertools
import json
from collections.abc import Hashable
from pathlib import Path

import pytest

from kdra.api.quantity import parse_quantity_any
from kdra.cli.main import main
from kdra.replay.deviceplugin import compare
from kdra.replay.engine import ReplayCluster, inflate, run_placement
from kdra.replay.experiment import run_experiment
from kdra.replay.timed import run_timed
from kdra.replay.trace import default_trace_dir, load_trace
from kdra.scheduler.gpupolicies import make_policy

needs_trace = pytest.mark.skipif(default_trace_dir() is None, reason="the shared Alibaba trace is not here")


@needs_trace
def test_inflation_is_deterministic_and_reaches_the_target() -> None:
    trace = load_trace()
    cap = trace.gpu_capacity_milli
    a = inflate(trace.pods, cap, 1.3, 42)
    b = inflate(trace.pods, cap, 1.3, 42)
    c = inflate(trace.pods, cap, 1.3, 43)
    assert [p.name for p in a] == [p.name for p in b]
    assert [p.name for p in a] != [p.name for p in c]
    total = sum(p.request.total_milli for p in a)
    assert 1.3 * cap - 8000 <= total <= 1.3 * cap
    assert len(a) > len(trace.pods) and a[-1].name.endswith(f"-tuned-{len(a) - len(trace.pods) - 1}")
    # The original list comes first, shuffled; sampled copies are appended (the simulator's order).
    assert sorted(p.name for p in a[: len(trace.pods)]) == sorted(p.name for p in trace.pods)
    down = inflate(trace.pods, cap, 0.5, 42)
    assert sum(p.request.total_milli for p in down) <= 0.5 * cap


def test_every_gpu_pod_is_allocated_by_the_dra_allocator(small_trace_files: tuple[Path, Path]) -> None:
    trace = load_trace(*small_trace_files)
    cluster = ReplayCluster(trace.nodes)
    run = run_placement(trace, make_policy("fgd"), 42, cluster=cluster)
    gpu_pods = [(req, b) for req, b in cluster.placed if req.num_gpu]
    assert run.allocator_calls == len(gpu_pods) > 0
    for req, b in gpu_pods:
        assert len(b.results) == req.num_gpu
        for r in b.results:
            assert parse_quantity_any(r["consumedCapacity"]["shares"]).value() == req.gpu_milli
            assert r["pool"] == cluster.views[b.node].name
    # What the allocator recorded as consumed equals what the placement view says is used.
    used = {(r["pool"], r["device"]): 0 for _, b in gpu_pods for r in b.results}
    for req, b in gpu_pods:
        for r in b.results:
            used[(r["pool"], r["device"])] += req.gpu_milli
    for (pool, dev), milli in used.items():
        consumed = cluster.state.consumed[("gpu.nvidia.com", pool, dev)]["shares"]
        assert consumed == milli * 10**9  # nanos


def test_reduced_replay_orders_fgd_before_random(small_trace_files: tuple[Path, Path]) -> None:
    trace = load_trace(*small_trace_files)
    exp = run_experiment(trace, ["fgd", "random", "kdra"], [42, 43, 44], processes=1, use_allocator=False)
    fgd, rnd = exp.policies["fgd"].mean, exp.policies["random"].mean
    assert fgd < rnd
    curve = exp.policies["fgd"].mean_curve()
    assert curve[0] == (0, 0.0) and curve[-1][0] == 130
    assert all(b[1] >= a[1] for a, b in itertools.pairwise(curve))


def test_time_replay_and_legacy_comparison(small_trace_files: tuple[Path, Path]) -> None:
    trace = load_trace(*small_trace_files)
    tr = run_timed(trace, make_policy("kdra"))
    d = tr.to_dict()
    assert d["scheduled"] + d["neverScheduled"] <= d["pods"]
    assert d["scheduled"] > 0.8 * d["pods"]
    assert tr.utilization and all(0 <= u <= 100 for _, u in tr.utilization)
    figs = compare(trace, "best-fit", 42)
    loaded = run_timed(trace, make_policy("best-fit"), compress=200).to_dict()
    assert loaded["compress"] == 200 and loaded["peakGpuAllocationPct"] > d["peakGpuAllocationPct"]
    dra, dp = figs["dra-shares"], figs["device-plugin"]
    assert dp.stranded_gib > 0 and dra.stranded_gib == 0
    assert dra.gpus_needed < dp.gpus_needed
    assert dra.placed >= dp.placed


def test_cli_json_shape(small_trace_files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    nodes, pods = small_trace_files
    code = main(
        [
            "replay",
            "alibaba",
            "-c",
            str(nodes),
            "--pods",
            str(pods),
            "--policy",
            "fgd",
            "random",
            "--seeds",
            "42-43",
            "-o",
            "json",
            "-j",
            "1",
        ]
    )
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc["policies"]) == {"fgd", "random"}
    fgd = doc["policies"]["fgd"]
    assert set(fgd["per_seed"]) == {"42", "43"}
    assert fgd["unallocated_gpu_pct_at_100"] == pytest.approx(sum(fgd["per_seed"].values()) / 2, abs=1e-3)
    assert fgd["published"] is None  # a tenth of the trace: not the experiment the published figure is of
    assert fgd["curve"][0] == [0, 0.0] and len(fgd["curve"]) == 131


def test_cli_table_csv_report_and_errors(
    small_trace_files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes, pods = small_trace_files
    report = tmp_path / "out" / "replay.html"
    args = ["replay", "alibaba", "-c", str(nodes), "--pods", str(pods), "--seeds", "42", "-j", "1"]
    assert main([*args, "--report", str(report), "--time-replay", "--legacy"]) == 0
    out = capsys.readouterr().out
    assert "kdra" in out and "published" in out
    assert "Time replay" in out and "Device-plugin integer GPUs vs DRA shares" in out
    html = report.read_text()
    assert "<svg" in html and "arrived workload" in html and "GPU allocation over time" in html
    assert main([*args, "-o", "csv", "--policy", "best-fit", "--ties", "random"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("policy,seed,unallocated_gpu_pct_at_100") and lines[1].startswith(
        "best-fit,42,"
    )
    assert main([*args, "--policy", "nope"]) == 2
    assert "--policy: Unsupported value: 'nope'" in capsys.readouterr().err
    assert main([*args[:-4], "--seeds", "9-3"]) == 2
    assert main(["replay", "alibaba", "--pods", str(tmp_path / "missing.csv")]) == 2


def test_the_allocator_takes_the_gpus_the_policy_ranks_first(small_trace_files: tuple[Path, Path]) -> None:
    """Replay's GPU inside the node is the allocator's choice, ordered by Policy.device_keys: a share the
    policy sends to the last GPU lands there (upstream's first fit would take GPU 0)."""
    from kdra.scheduler.gpupolicies import PodRequest, Policy

    trace = load_trace(*small_trace_files)
    cluster = ReplayCluster(trace.nodes)
    idx = next(i for i, v in enumerate(cluster.views) if len(v.gpu_free) >= 2)
    last = len(cluster.views[idx].gpu_free) - 1
    req = PodRequest(cpu=1000, mem=1024, num_gpu=1, gpu_milli=250)
    b = cluster.bind(idx, "p-last", req, (last,), Policy())
    assert [cluster.device_index[(r["pool"], r["device"])] for r in b.results] == [last]
    b0 = cluster.bind(idx, "p-first", req, (0,), Policy())
    assert [cluster.device_index[(r["pool"], r["device"])] for r in b0.results] == [0]


@pytest.mark.parametrize("shares", [True, False])
def test_unbind_undoes_bind_through_the_allocated_state_and_bumps_its_version(
    small_trace_files: tuple[Path, Path], shares: bool
) -> None:
    """unbind goes through AllocatedState.remove_result, the state's one way to release a result: the
    reference counts go with the devices (nothing left behind for a later bind) and `version` moves, which
    a long-lived Allocator needs to see (editing the sets directly did neither)."""
    from kdra.scheduler.gpupolicies import PodRequest, Policy

    trace = load_trace(*small_trace_files)
    cluster = ReplayCluster(trace.nodes, shares=shares)
    idx = next(i for i, v in enumerate(cluster.views) if len(v.gpu_free) >= 2)
    req = PodRequest(cpu=1000, mem=1024, num_gpu=1, gpu_milli=250 if shares else 1000)
    whole = PodRequest(cpu=1000, mem=1024, num_gpu=2, gpu_milli=1000)
    if shares:
        bs = [(req, cluster.bind(idx, name, req, (0,), Policy())) for name in ("p-a", "p-b")]
    else:
        bs = [(whole, cluster.bind(idx, "p-w", whole, (0, 1), Policy()))]
    st = cluster.state
    assert st.dedicated or st.shared
    for r, b in reversed(bs):
        before = st.version
        cluster.unbind(r, b)
        assert st.version > before
    assert (st.dedicated, st.shared, st.consumed) == (set(), set(), {})
    assert (st._dedicated_refs, st._share_refs, st._consumed_refs) == ({}, {}, {})
    assert cluster.views[idx].gpu_free == [1000] * len(cluster.views[idx].gpu_free)


def test_an_epoch_change_rescoring_only_its_scope_places_as_a_full_rescore(
    small_trace_files: tuple[Path, Path],
) -> None:
    """kdra's rare-host protection moves only the rare hosts' scores (Policy.epoch_scope): re-scoring just
    those nodes when it changes gives the same placements as re-scoring every node."""
    from kdra.replay.variants import make_variant
    from kdra.scheduler.gpupolicies import KdraPolicy

    class Everywhere(KdraPolicy):
        def epoch_scope(self, since: Hashable) -> frozenset[int] | None:
            return None

    trace = make_variant(load_trace(*small_trace_files), "gpu-model", 1)
    scoped = KdraPolicy()
    runs = [run_placement(trace, p, 42, use_allocator=False) for p in (scoped, Everywhere())]
    assert scoped.rare and scoped.epoch_scope(scoped.epoch())  # the variant has rare shapes to protect
    assert runs[0].allocated == runs[1].allocated and runs[0].placed == runs[1].placed


def test_online_runs_beside_offline_and_learns_only_the_pods_that_arrived(
    small_trace_files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """--online: each policy also runs learning the workload from the pods as they arrive (a row beside its
    offline one); the online policy has seen exactly the arrived pods, never the list."""
    from kdra.scheduler.gpupolicies import KdraPolicy

    trace = load_trace(*small_trace_files)
    online = KdraPolicy()
    run = run_placement(trace, online, 42, use_allocator=False, online=True)
    assert online.model.seen == run.pods > len(trace.pods)  # the inflated arrivals, one by one
    offline = KdraPolicy()
    run_placement(trace, offline, 42, use_allocator=False)
    assert offline.model.seen == len(trace.pods)  # the list, handed over once
    nodes, pods = small_trace_files
    code = main(["replay", "alibaba", "-c", str(nodes), "--pods", str(pods), "--seeds", "42", "--policy",
                 "kdra", "--online", "--no-allocator", "-o", "json"])  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and sorted(doc["policies"]) == ["kdra", "kdra-online"]


def test_a_replay_stopped_at_100_percent_gives_the_same_figure(small_trace_files: tuple[Path, Path]) -> None:
    """The benchmarks stop at 100% arrived: the pods after it cannot change the figure at 100%."""
    trace = load_trace(*small_trace_files)
    full = run_placement(trace, make_policy("kdra"), 43, use_allocator=False)
    short = run_placement(trace, make_policy("kdra"), 43, use_allocator=False, stop_at=100)
    assert short.pods < full.pods
    assert short.unallocated_at(100) == full.unallocated_at(100)
    assert short.nodes == full.nodes[: short.pods]
