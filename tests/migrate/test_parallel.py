"""`kdra migrate -j N`: worker processes give byte for byte what one process gives (docs/migrate.md)."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kdra.cli.main import main
from kdra.migrate import Options, StreamMigration, names_in_use, parallel
from kdra.migrate.documents import Chunk, iter_chunks

from .conftest import MANIFESTS, case_args, ok_cases, run_cli
from .test_cli import FRACTIONAL


def _corpus(times: int) -> str:
    """The converting corpus `times` over, names unchanged: every new template name repeats, so documents
    in different workers' batches want the same names (the serial run numbers them -2, -3, ...)."""
    texts = [(MANIFESTS / f"{case}.yaml").read_text() for case in ok_cases() if not case_args(case)]
    return "".join(("" if text.startswith("---") else "---\n") + text for _ in range(times) for text in texts)


def _migrate(text: str, jobs: int) -> tuple[str, dict[str, list[str]], bool]:
    templates, _ = names_in_use([text])
    migration = StreamMigration("s.yaml", Options(), templates)
    pieces: list[str] = []
    if jobs == 1:
        report = migration.run(iter_chunks([text]), pieces.append)
    else:
        target = parallel.Target(migration, iter_chunks([text]), lambda: pieces.append, lambda: None)
        parallel.run_inputs([target], jobs)
        report = migration.report
    lists = {
        name: list(getattr(report, name)) for name in ("changes", "notes", "warnings", "invalid", "blocked")
    }
    lists["classes"] = sorted(report.classes)
    lists["taken"] = sorted(migration.taken.names)
    return "".join(pieces), lists, migration.changed


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel, "BATCH", 3000)  # many batches, a few documents each
    monkeypatch.setattr(parallel, "WINDOW", 8000)  # merging while documents are still read and sent
    monkeypatch.setattr(parallel, "MAX_HELD", 40)  # and while files are still opened (the folder tests)
    monkeypatch.setattr(parallel, "MIN_INPUT", 0)


@pytest.mark.usefixtures("small_batches")
@pytest.mark.parametrize("routing", ["by name", "round robin"])
def test_workers_give_the_serial_result_where_names_repeat(
    routing: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """By name, a workload's copies meet on one worker; round robin, they meet on different ones, whose
    choices the parent finds taken and migrates again (the path a name shared by two workloads takes)."""
    if routing == "round robin":
        turn = itertools.count()
        monkeypatch.setattr(parallel, "_worker_for", lambda body, jobs: next(turn) % jobs)
    text = _corpus(3)
    serial = _migrate(text, 1)
    assert serial[0].count("-gpu-3\n") >= 5  # the third copy's templates are numbered
    assert _migrate(text, 2) == serial
    assert _migrate(text, 3) == serial


@pytest.mark.usefixtures("small_batches")
@pytest.mark.parametrize(
    ("failure", "message"),
    [
        (lambda: 1 / 0, "a worker process failed; nothing was written:\nTraceback"),
        (lambda: os._exit(3), "exited with 3; nothing was written"),
    ],
)
def test_a_failing_worker_stops_the_run_with_a_clear_error(
    failure: Callable[[], object], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug or a killed worker (out of memory) ends the run with exit 1 and nothing written; it never
    hangs. Workers are forked, so they inherit the patched method."""
    document = StreamMigration.document

    def failing(self: StreamMigration, chunk: Chunk) -> str:
        if chunk.number == 7:
            failure()
        return document(self, chunk)

    monkeypatch.setattr(StreamMigration, "document", failing)
    stream = tmp_path / "stream.yaml"
    stream.write_text(_corpus(1))
    run = run_cli(["-j", "2", "-i", str(stream)])
    assert run.code == 1
    assert message in run.err
    assert run.out == ""
    assert stream.read_text() == _corpus(1)
    assert list(tmp_path.iterdir()) == [stream]  # the in-place temp file is gone too


@pytest.mark.usefixtures("small_batches")
def test_workers_report_invalid_and_blocked_documents_in_stream_order() -> None:
    bad = "---\nkind: Pod\nmetadata: {name: x\n"  # not valid YAML
    text = _corpus(1) + bad + "---\n" + FRACTIONAL + _corpus(1) + bad
    serial = _migrate(text, 1)
    assert len(serial[1]["invalid"]) == 3  # the two bad documents and the fractional GPU
    assert _migrate(text, 2) == serial


@pytest.mark.usefixtures("small_batches")
@pytest.mark.parametrize("extra", [[], ["--check"], ["--diff"], ["--mode", "extended-resource"]])
def test_cli_output_messages_and_exit_code_do_not_depend_on_jobs(tmp_path: Path, extra: list[str]) -> None:
    stream = tmp_path / "stream.yaml"
    stream.write_text(_corpus(2))
    one = run_cli(["-j", "1", *extra, str(stream)])
    assert one.code in (0, 1, 2) and (one.out or one.err)
    assert run_cli(["-j", "2", *extra, str(stream)]) == one


@pytest.mark.usefixtures("small_batches")
def test_the_parent_holds_a_bounded_window_of_documents_not_the_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Memory follows the largest document: the parent merges while it still reads, holding at most WINDOW
    characters per worker (plus the document just read) and MAX_HELD entries, whatever the input's size."""
    most = {"characters": 0, "entries": 0}
    merge_first = parallel._Stream._merge_first

    def watched(self: parallel._Stream) -> None:
        most["characters"] = max(most["characters"], self.in_flight)
        most["entries"] = max(most["entries"], len(self.order))
        merge_first(self)

    monkeypatch.setattr(parallel._Stream, "_merge_first", watched)
    text = _corpus(3)
    assert len(text) > 5 * parallel.WINDOW * 2
    assert _migrate(text, 2)[0] == _migrate(text, 1)[0]
    largest = max(len(chunk.body) for chunk in iter_chunks([text]))
    assert 0 < most["characters"] <= parallel.WINDOW * 2 + largest
    root = _folder(tmp_path / "repo")
    most["entries"] = 0
    assert run_cli(["-j", "2", "--check", "."], cwd=root).code == 1
    assert 0 < most["entries"] <= parallel.MAX_HELD + 1


def _folder(root: Path) -> Path:
    """A repository-like folder: every converting case as its own file, twice (a dev and a prod copy, so
    template names repeat across files), and a file that cannot be migrated when `bad`."""
    for case in ok_cases():
        if case_args(case):
            continue
        for env in ("dev", "prod"):
            target = root / env / f"{case}.yaml"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text((MANIFESTS / f"{case}.yaml").read_text())
    return root


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.usefixtures("small_batches")
@pytest.mark.parametrize("extra", [[], ["--check"], ["--diff"], ["-i"]])
def test_a_folder_of_files_migrates_with_workers_as_with_one_process(
    tmp_path: Path, extra: list[str]
) -> None:
    """Workers take documents of several files at once (many small files: a GitOps repository); each file's
    output, messages and exit code stay as one process gives them, -i rewrites the same files the same way."""
    one_root, many_root = _folder(tmp_path / "one"), _folder(tmp_path / "many")
    one = run_cli(["-j", "1", *extra, "."], cwd=one_root)
    many = run_cli(["-j", "2", *extra, "."], cwd=many_root)
    assert one.code in (0, 1) and (one.out or one.err)
    assert many == one
    assert _tree(many_root) == _tree(one_root)
    if extra == ["-i"]:
        assert _tree(one_root) != _tree(_folder(tmp_path / "fresh"))  # the files were rewritten


@pytest.mark.usefixtures("small_batches")
def test_a_folder_with_one_bad_file_changes_no_file_with_workers(tmp_path: Path) -> None:
    root = _folder(tmp_path / "repo")
    (root / "prod" / "zz-bad.yaml").write_text(FRACTIONAL)
    before = _tree(root)
    one = run_cli(["-j", "1", "-i", "."], cwd=root)
    many = run_cli(["-j", "2", "-i", "."], cwd=root)
    assert one.code == 2 and "is not a whole number" in one.err
    assert many == one
    assert _tree(root) == before  # no file changed, no temp file left


def test_jobs_must_be_a_positive_number(capsys: pytest.CaptureFixture[str]) -> None:
    for value, rule in (("0", "0 processes: at least 1"), ("two", "'two' is not a number of processes")):
        with pytest.raises(SystemExit) as exit_info:
            main(["migrate", "-j", value, "x.yaml"])
        assert exit_info.value.code == 2
        assert f"argument -j/--jobs: {rule}" in capsys.readouterr().err


@pytest.mark.usefixtures("small_batches")
def test_stdin_migrates_with_workers_as_a_file_does(tmp_path: Path) -> None:
    text = _corpus(2)
    stream = tmp_path / "stream.yaml"
    stream.write_text(text)
    one = run_cli(["-j", "1", "-"], stdin=text)
    assert one.code == 0 and one.out
    assert run_cli(["-j", "2", "-"], stdin=text) == one
    assert run_cli(["-j", "2", str(stream)]).out == one.out


def test_inputs_under_a_mebibyte_never_start_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Starting workers costs more than a small input takes (a Helm post-renderer's typical input)."""

    def no_workers(*args: object) -> None:
        raise AssertionError("workers started for a small input")

    monkeypatch.setattr(parallel, "run_inputs", no_workers)
    stream = tmp_path / "stream.yaml"
    stream.write_text(_corpus(1))
    assert stream.stat().st_size < parallel.MIN_INPUT
    assert run_cli(["-j", "4", str(stream)]).code == 0


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] not in "ZX"
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads /proc (Linux)")
def test_workers_exit_when_their_parent_is_killed(tmp_path: Path) -> None:
    """`kill -9` of kdra (a CI job cancelled, the OOM killer) must not leave workers waiting forever."""
    stream = tmp_path / "stream.yaml"
    stream.write_text(_corpus(1) * (2 * parallel.MIN_INPUT // len(_corpus(1)) + 1))
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from kdra.cli.main import main; sys.exit(main(sys.argv[1:]))",
            "migrate",
            "-j",
            "2",
            str(stream),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while len(_children(parent.pid)) < 2 and parent.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    workers = _children(parent.pid)
    assert len(workers) == 2, "the workers did not start"
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(w) for w in workers)
