"""Every command follows the one conventions table (kdra.cli.conventions, kubectl's): a flag means one thing
everywhere, repeatable flags keep every occurrence, a table offers -o wide and -o name, and the exit codes
are the documented ones, also when the output cannot be written or its reader goes away."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kdra.cli.conventions import EXIT_CODES, FLAGS, SHORT, TABLE_FORMATS, problems
from kdra.cli.main import build_parser, main

ROOT = Path(__file__).resolve().parents[2]


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    out = []
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if path:
        out.append((path, parser))
    for action in subs:
        for name, sub in action.choices.items():
            out.extend(_commands(sub, (*path, name)))
    return out


COMMANDS = _commands(build_parser())


@pytest.mark.parametrize("path,parser", COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_every_command_follows_the_conventions_table(
    path: tuple[str, ...], parser: argparse.ArgumentParser
) -> None:
    own = argparse.ArgumentParser()
    own._actions = [a for a in parser._actions if not isinstance(a, argparse._SubParsersAction)]
    assert problems(own, "kdra " + " ".join(path)) == []
    for action in own._actions:
        for s in action.option_strings:
            if len(s) == 2 and s not in ("-h",):
                # a short flag is always the table's, with the table's long name beside it
                assert s in SHORT and SHORT[s].long in action.option_strings, (path, s)
        if "--output" in action.option_strings and action.choices and "table" in action.choices:
            assert set(TABLE_FORMATS) <= set(action.choices), path


def test_the_table_has_one_meaning_per_short_flag() -> None:
    shorts = [f.short for f in FLAGS.values() if f.short]
    assert len(shorts) == len(set(shorts))
    assert FLAGS["--filename"].short == "-f" and FLAGS["--watch"].short == "-w"  # kubectl's
    assert FLAGS["--fleet"].short == "-c" and FLAGS["--workload"].short is None


def test_the_tree_follows_the_table_as_a_whole() -> None:
    assert problems(build_parser()) == []


def test_the_documented_exit_codes_are_the_table_s() -> None:
    readme = (ROOT / "README.md").read_text()
    for code in EXIT_CODES:
        assert f"{code} " in readme
    assert "1 valid but does not fit, or cannot be carried out" in " ".join(readme.split())


def test_bundled_names_in_help_are_the_packages() -> None:
    from kdra.cli.common import BUNDLED_FLEETS, bundled_workloads
    from kdra.fleets import bundled_names
    from kdra.sim.runner import bundled_workloads as sim_workloads

    assert list(BUNDLED_FLEETS) == bundled_names()
    assert bundled_workloads() == sim_workloads()
    assert "mixed-day" in bundled_workloads()


# Commands with a table: -o wide and -o name work on each (fast inputs only).
TABLES = [
    ["cluster", "describe", "-c", "mixed"],
    ["cluster", "catalog"],
    ["cluster", "attributes", "-c", "mixed"],
    ["simulate", "--workload", "mixed-day", "--mode", "dra"],
    ["allocate", "-f", str(ROOT / "examples" / "allocate" / "h100-mig-node.yaml")],
    ["top", "-f", str(ROOT / "examples" / "allocate" / "h100-mig-node.yaml")],
]


@pytest.mark.parametrize("argv", TABLES, ids=[" ".join(a[:2]) for a in TABLES])
def test_tables_offer_wide_and_name(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    outputs = {}
    for fmt in ("table", "wide", "name"):
        assert main([*argv, "-o", fmt]) == 0, fmt
        outputs[fmt] = capsys.readouterr().out
    names = outputs["name"].splitlines()
    assert names and all("/" in n and " " not in n for n in names), outputs["name"][:300]
    widest = max(len(line) for line in outputs["wide"].splitlines())
    assert widest >= max(len(line) for line in outputs["table"].splitlines())
    assert outputs["wide"] != outputs["table"] or argv[0] == "top"


def test_version_speaks_json_and_yaml(capsys: pytest.CaptureFixture[str]) -> None:
    from kdra import __version__

    assert main(["version", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["clientVersion"]["gitVersion"] == __version__
    assert main(["version"]) == 0 and capsys.readouterr().out == f"kdra {__version__}\n"


def test_repeated_filename_keeps_every_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`kdra top -f a -f b`: both files, as kubectl's -f."""
    import yaml

    objs = list(yaml.safe_load_all((ROOT / "examples" / "allocate" / "h100-mig-node.yaml").read_text()))
    nodes = [o for o in objs if o["kind"] == "Node"]
    rest = [o for o in objs if o["kind"] != "Node"]
    (tmp_path / "a.yaml").write_text(yaml.safe_dump_all(nodes))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump_all(rest))
    assert main(["top", "-f", str(tmp_path / "a.yaml"), "-f", str(tmp_path / "b.yaml"), "-o", "name"]) == 0
    both = capsys.readouterr().out
    assert main(["top", "-f", str(ROOT / "examples" / "allocate" / "h100-mig-node.yaml"), "-o", "name"]) == 0
    assert both == capsys.readouterr().out and both


def test_nodes_and_verbose_together_are_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["allocate", "-f", "x.yaml", "--nodes", "3", "-v"])
    assert exc.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def test_a_full_disk_is_an_io_error_not_a_bug() -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "kdra.cli.main", "cluster", "render", "-c", "mixed"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 1, proc.stderr
    assert "I/O error: No space left on device" in proc.stderr and "bug" not in proc.stderr


def test_a_closed_stdout_is_an_io_error() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "kdra.cli.main", "version"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
        preexec_fn=lambda: os.close(1),
    )
    assert proc.returncode == 1 and "standard output is closed" in proc.stderr


@pytest.mark.parametrize(
    "argv",
    [["simulate", "--workload", "mixed-day", "--mode", "dra"], ["cluster", "render", "-c", "alibaba-openb"]],
    ids=["simulate", "render"],
)
def test_a_reader_that_stops_ends_the_command_quietly(argv: list[str]) -> None:
    """`kdra simulate | head -1`: exit 0, nothing on stderr (rich's console used to exit 1)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "kdra.cli.main", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert "Traceback" not in err and "error" not in err
