"""`kdra CMD` builds only CMD's parser (start-up time), and answers exactly as the whole tree would."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import subprocess
import sys

import pytest

from kdra.cli.main import COMMAND_MODULES, COMMANDS, build_parser, main


def _registered(module: str) -> list[str]:
    parser = argparse.ArgumentParser()
    subparsers = parser.add_subparsers()
    importlib.import_module(f"kdra.cli.{module}").register(subparsers)
    return list(subparsers.choices)


def test_every_subcommand_is_mapped_to_the_module_registering_it() -> None:
    mapped = {module: sorted(c for c, m in COMMAND_MODULES.items() if m == module) for module in COMMANDS}
    assert mapped == {module: sorted(_registered(module)) for module in COMMANDS}


def _help(parser: argparse.ArgumentParser, argv: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        parser.parse_args(argv)
    return out.getvalue()


@pytest.mark.parametrize("command", sorted(COMMAND_MODULES))
def test_a_lazily_built_parser_answers_as_the_whole_tree(command: str) -> None:
    lazy = build_parser(COMMAND_MODULES[command])
    assert _help(lazy, [command, "--help"]) == _help(build_parser(), [command, "--help"])


def test_only_the_command_s_module_is_imported() -> None:
    code = (
        "import sys; from kdra.cli.main import main\n"
        "try: main(['migrate', '--help'])\n"
        "except SystemExit: pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('kdra.cli.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = out.strip().splitlines()[-1]
    assert "kdra.cli.migrate" in loaded
    for other in ("kdra.cli.kube", "kdra.cli.simulate", "kdra.cli.replay", "kdra.cli.exporter"):
        assert other not in loaded


def test_no_command_prints_the_whole_tree(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    err = capsys.readouterr().err
    assert all(command in err for command in COMMAND_MODULES)


def test_the_cli_offers_exactly_the_scheduler_s_device_preferences() -> None:
    from kdra.cli.common import DEVICE_PREFERENCES as offered
    from kdra.scheduler.devicepref import DEVICE_PREFERENCES

    assert offered == DEVICE_PREFERENCES
