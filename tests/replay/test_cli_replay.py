"""`kdra replay alibaba` outputs on a user's own node and pod lists, and flag values (h35)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kdra.cli.main import main
from kdra.errors import InputError

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn1,32000,65536,2,T4\nn2,64000,131072,8,G2\n"
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1000,1024,1,500\nb,2000,1024,1,1000\nc,1000,100,0,0\n"


@pytest.fixture
def lists(tmp_path: Path) -> list[str]:
    (tmp_path / "n.csv").write_text(NODES)
    (tmp_path / "p.csv").write_text(PODS)
    return ["replay", "alibaba", "-c", str(tmp_path / "n.csv"), "--pods", str(tmp_path / "p.csv")]


def test_published_figures_are_not_set_beside_a_users_own_pod_list(lists, capsys) -> None:  # type: ignore[no-untyped-def]
    """The published FGD figures are of the bundled fleet and default pod list at 130%: beside a user's own
    list the table printed FGD's 4.77 and a `gap` to it, as if the two were comparable."""
    assert main([*lists, "--policy", "fgd", "--seeds", "1", "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["policies"]["fgd"]["published"] is None
    assert main([*lists, "--policy", "fgd", "--seeds", "1"]) == 0
    out = capsys.readouterr().out
    assert "4.77" not in out and "published figures not shown" in out


def test_the_reference_experiment_is_the_bundled_fleet_default_list_at_130() -> None:
    from kdra.replay.experiment import is_reference
    from kdra.replay.trace import BUNDLED_NODES, Trace

    default = Trace([], [], BUNDLED_NODES, "/x/traces/openb_pod_list_default.csv")
    assert is_reference(default, 1.3)
    assert not is_reference(default, 1.0)
    assert not is_reference(Trace([], [], BUNDLED_NODES, default.pods_source + " (fractional:1)"), 1.3)
    assert not is_reference(Trace([], [], "nodes.csv", default.pods_source), 1.3)


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_time_compress_nan_and_inf_are_refused(lists, capsys, value: str) -> None:  # type: ignore[no-untyped-def]
    # They were taken: every pod's start became nan (or inf) and the table said 0 scheduled.
    assert main([*lists, "--seeds", "1", "--time-replay", "--time-compress", value]) == 2
    assert "--time-compress: Invalid value" in capsys.readouterr().err


def test_time_replay_says_how_many_pods_had_no_times(lists, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main([*lists, "--seeds", "1", "--time-replay"]) == 0
    assert "3 of 3 pods left out of the time replay" in capsys.readouterr().out


def test_far_apart_seeds_title_and_a_huge_seed_range(lists, capsys) -> None:  # type: ignore[no-untyped-def]
    from kdra.cli.replay import parse_seeds

    # The title built list(range(first, last + 1)) to see whether the seeds were consecutive: an internal
    # error (OverflowError) here, 100 million entries for --seeds 1,100000000.
    assert main([*lists, "--seeds", "1,99999999999999999999"]) == 0
    assert "seeds 1,99999999999999999999" in capsys.readouterr().out
    with pytest.raises(InputError, match="20,000 seeds, at most 10,000"):
        parse_seeds("1-20000")
    assert parse_seeds("42-51") == list(range(42, 52))


def test_a_fleet_without_gpus_is_an_input_error(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "n.csv").write_text("sn,cpu_milli,memory_mib,gpu,model\nc1,64000,65536,0,\n")
    (tmp_path / "p.csv").write_text(PODS)
    args = [
        "replay",
        "alibaba",
        "-c",
        str(tmp_path / "n.csv"),
        "--pods",
        str(tmp_path / "p.csv"),
        "--seeds",
        "1",
    ]
    assert main(args) == 2  # was an internal error (ZeroDivisionError)
    assert "no node has a GPU" in capsys.readouterr().err


def test_inflating_a_pod_list_without_gpu_pods_ends() -> None:
    """Sampling pods that ask for no GPU never takes the request to 130% of capacity: it looped forever."""
    import signal

    from kdra.replay.engine import inflate
    from kdra.replay.trace import TracePod
    from kdra.scheduler.gpupolicies import PodRequest

    def stuck(*_: object) -> None:
        raise TimeoutError("inflate did not end")

    old = signal.signal(signal.SIGALRM, stuck)
    signal.alarm(5)
    try:
        out = inflate([TracePod("a", PodRequest(1000, 1)), TracePod("b", PodRequest(2000, 1))], 8000, 1.3, 1)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert sorted(p.name for p in out) == ["a", "b"]


def test_gpus_needed_to_host_all_counts_every_pod_or_says_which_fit_nowhere() -> None:
    """30 whole-GPU pods on a fleet of 10 GPUs: hosting them all needs 30 GPUs, but only the fleet doubled
    (20 GPUs) was tried and "GPUs needed to host all" said 20. A pod pinned to a model the fleet lacks fits
    no node however large the fleet: it is counted apart."""
    from kdra.replay.deviceplugin import compare
    from kdra.replay.trace import Trace, TraceNode, TracePod
    from kdra.scheduler.gpupolicies import PodRequest

    nodes = [TraceNode("n1", 32000, 65536, 2, "T4"), TraceNode("n2", 64000, 131072, 8, "G2")]
    pods = [TracePod(f"p{i}", PodRequest(1000, 1024, 1, 1000)) for i in range(30)]
    pods.append(TracePod("pinned", PodRequest(1000, 1024, 1, 1000, ("V100M32",))))
    figs = compare(Trace(nodes, pods), "fgd", 1, use_allocator=False)
    for f in figs.values():
        assert (f.gpus_needed, f.unhostable) == (30, 1)


def test_a_list_that_asks_for_part_of_the_fleet_says_so(lists, capsys) -> None:  # type: ignore[no-untyped-def]
    """Not inflated, the list asks for 1.5 of 10 GPUs: 85% "unallocated" is capacity nobody asked for, and
    nothing in the output said so (it read as a policy wasting 85% of the fleet)."""
    assert main([*lists, "--seeds", "1", "--inflate", "0", "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    kdra = doc["policies"]["kdra"]
    assert kdra["arrived_gpu_pct_at_100"] == {"1": 15.0}
    assert kdra["unallocated_gpu_pct_at_100"] == pytest.approx(85.0)
    assert main([*lists, "--seeds", "1", "--inflate", "0"]) == 0
    assert "reaches only 15.0% of capacity" in capsys.readouterr().out


def test_max_nodes_bounds_a_users_node_list_and_not_replays_own_copies(lists, capsys) -> None:  # type: ignore[no-untyped-def]
    """The node-list limit said "--max-nodes N lifts the limit", a flag `kdra replay` did not have; and it
    was checked where fleets are built, so the device-plugin comparison's copies of a fleet (up to 64 of
    it) hit it too. It is the user's node list that is bounded, and --max-nodes lifts it."""
    assert main([*lists, "--max-nodes", "1", "--seeds", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("n.csv: more than 1 nodes (--max-nodes N lifts the limit)"), err
    assert main([*lists, "--max-nodes", "2", "--seeds", "1"]) == 0
    capsys.readouterr()

    from kdra.fleets.spec import MAX_NODES
    from kdra.replay.trace import Trace, TraceNode

    copies = Trace([TraceNode(f"n{i}", 32000, 65536, 2, "T4") for i in range(MAX_NODES + 1)], [])
    assert copies.fleet().node_count == MAX_NODES + 1


def test_a_replay_worker_dies_on_sigterm_although_the_parent_only_flags_it(lists) -> None:  # type: ignore[no-untyped-def]
    """The pool ends its workers with SIGTERM where they did not take its end-of-work sentinel (its terminate
    drains the task queue, a race). A process whose SIGTERM handler only sets a flag (kdra scheduler's, which
    an in-process run left set in a test process) forked workers that inherited it, ignored the SIGTERM, and
    the run hung in the pool's join for ever after every cell was answered (a unit-suite hang on CI)."""
    import multiprocessing
    import signal
    import time

    from kdra.replay.experiment import _init_worker
    from kdra.replay.trace import load_trace

    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()

    def work(trace: object) -> None:
        _init_worker(trace)  # type: ignore[arg-type]
        ready.set()
        time.sleep(60)

    trace = load_trace(lists[3], lists[5])
    old = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        worker = ctx.Process(target=work, args=(trace,), daemon=True)
        worker.start()
    finally:
        signal.signal(signal.SIGTERM, old)
    assert ready.wait(60)
    worker.terminate()
    worker.join(20)
    assert worker.exitcode == -signal.SIGTERM
