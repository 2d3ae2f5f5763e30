"""Messages are held in bounded memory (a spool), printed in order, and never on exit 2 (docs/migrate.md)."""

from __future__ import annotations

from pathlib import Path

from kdra.migrate import Options, StreamMigration, migrate_text
from kdra.migrate.documents import split_documents
from kdra.migrate.messages import Messages, Spool

from .conftest import MANIFESTS, run_cli
from .test_cli import FRACTIONAL

AMD = (MANIFESTS / "amd-deployment.yaml").read_text()  # one `note:` line per object (its toleration)


def _stream(count: int) -> str:
    return "".join(f"---\n{AMD.replace('vllm-rocm', f'vllm-rocm-{n}')}" for n in range(count))


def test_spooled_messages_keep_order_and_bounded_memory() -> None:
    spool = Spool(hold=1000)
    messages = Messages(spool)
    lines = [
        f'line {n}: ünïcode\n  hint: a second line, [json] "quotes" {"x" * (n % 300)}' for n in range(5000)
    ]
    most = 0
    for line in lines:
        messages.append(line)
        most = max(most, messages.held)
    assert most <= 1000 + max(len(line) for line in lines)
    assert list(messages) == lines
    assert len(messages) == len(lines) and messages
    assert messages[0] == lines[0] and messages[-1] == lines[-1] and messages[2500] == lines[2500]
    assert messages + ["more"] == [*lines, "more"]  # noqa: RUF005 - the operator is what is tested
    spool.close()


def test_messages_of_a_stream_do_not_grow_in_memory_with_its_objects() -> None:
    """A list would hold every note until the end; the spool holds at most its `hold` characters."""
    hold = 2048
    for count in (30, 300):
        spool = Spool(hold=hold)
        migration = StreamMigration("big.yaml", Options(), set(), spool)
        most = 0

        def write(text: str, migration: StreamMigration = migration) -> None:
            nonlocal most
            report = migration.report
            most = max(most, sum(m.held for m in (report.notes, report.warnings, report.changes)))
            del text

        report = migration.run(split_documents(_stream(count)), write)
        notes = list(report.notes)
        assert len(notes) == count
        if count == 300:
            assert sum(len(note) for note in notes) > 10 * hold  # so a list would hold 10x the bound
        assert most <= 3 * (hold + max(len(line) for line in [*notes, *report.changes]))
        # same lines, same order, as the in-memory report
        assert notes == list(migrate_text(_stream(count), "big.yaml").report.notes)
        spool.close()


def test_spilled_notes_print_in_order_and_not_at_all_on_exit_2(tmp_path: Path) -> None:
    count = 400  # ~90 kB of notes: beyond what one list holds in memory
    good = tmp_path / "good.yaml"
    good.write_text(_stream(count))
    run = run_cli([str(good)])
    assert run.code == 0
    notes = [line for line in run.err.splitlines() if line.startswith("note: ")]
    assert len(notes) == count and sum(map(len, notes)) > 2**16
    assert notes == [f"note: {n}" for n in migrate_text(_stream(count), str(good)).report.notes]
    bad = tmp_path / "zz-bad.yaml"
    bad.write_text(FRACTIONAL)
    run = run_cli([str(good), str(bad)])
    assert run.code == 2
    assert run.out == ""
    assert "note:" not in run.err
    assert run.err.startswith("error: 1 invalid input(s); no file was changed\n")
