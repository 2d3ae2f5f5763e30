"""Entry point of the `kdra` command.

Each subcommand lives in its own module under kdra.cli and exposes `register(subparsers)`, which adds
its parser and sets `func` to a callable taking the parsed namespace and returning the exit code.
Exit codes are kdra.cli.conventions.EXIT_CODES: 0 success, 1 valid but cannot be satisfied or carried out
(an unreachable API server, output that cannot be written), 2 invalid input or usage, 3 an allocation error
in upstream's sense, 4 an internal error (a bug in kdra: one line, and the traceback only with KDRA_DEBUG=1).
A reader that stops reading (`kdra ... | head`) ends the command quietly with 0.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any

from kdra import __version__
from kdra.cli.conventions import EXIT_BUG, EXIT_OK, EXIT_UNSATISFIED, add_output
from kdra.errors import KdraError

# Subcommand modules, in the order `kdra --help` lists them.
COMMANDS: tuple[str, ...] = (
    "allocate",
    "migrate",
    "cluster",
    "driver",
    "simulate",
    "kube",
    "replay",
    "plan",
    "exporter",
    "top",
    "completion",
)

# The module that registers each subcommand: `kdra CMD ...` imports only that module (every other one
# costs start-up time, ~0.3 s CPU in all). tests/cli/test_main.py checks it against what the modules register.
COMMAND_MODULES: dict[str, str] = {
    "allocate": "allocate",
    "migrate": "migrate",
    "cluster": "cluster",
    "driver": "driver",
    "simulate": "simulate",
    "scheduler": "kube",
    "explain": "kube",
    "export": "kube",
    "replay": "replay",
    "plan": "plan",
    "exporter": "exporter",
    "top": "top",
    "completion": "completion",
}

INTERNAL_ERROR = EXIT_BUG


def _add_version(parser: argparse.ArgumentParser) -> None:
    """`--version` on every (sub)command, so `kdra allocate --version` answers too."""
    if not any("--version" in a.option_strings for a in parser._actions):
        parser.add_argument("--version", action="version", version=f"kdra {__version__}")
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _add_version(sub)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command tree, or with `only` (a module of COMMANDS) just that module's subcommands."""
    parser = argparse.ArgumentParser(
        prog="kdra",
        description="Dynamic Resource Allocation for AI accelerator fleets, the Kubernetes way.",
    )
    parser.add_argument("--version", action="version", version=f"kdra {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS if only is None else tuple(m for m in (only,) if m in COMMANDS):
        importlib.import_module(f"kdra.cli.{name}").register(subparsers)
    if only is None or only == "version":
        version = subparsers.add_parser("version", help="print kdra's version")
        add_output(version, ("text", "json", "yaml"))
        version.set_defaults(func=_version)
    _add_version(parser)
    return parser


def _version(args: argparse.Namespace) -> int:
    """`kdra version [-o json|yaml]`, shaped as kubectl version's clientVersion."""
    import platform

    if args.output == "text":
        print(f"kdra {__version__}")
        return EXIT_OK
    doc = {"clientVersion": {"gitVersion": __version__, "platform": f"{sys.platform}/{platform.machine()}"}}
    if args.output == "json":
        import json

        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        import yaml

        sys.stdout.write(yaml.safe_dump(doc, sort_keys=False))
    return EXIT_OK


class _ClosedStdout:
    """sys.stdout when file descriptor 1 was closed (`kdra ... >&-`): writing is an I/O error, never a
    silent success."""

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "standard output is closed")

    def flush(self) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        if name == "buffer":
            return self
        raise AttributeError(name)


def _quiet_stdout() -> None:
    """After the reader of stdout went away: point fd 1 at /dev/null so the flush at exit cannot fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = argv[0] if argv else None
    parser = build_parser(COMMAND_MODULES.get(command or "", command if command == "version" else None))
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        build_parser().print_help(sys.stderr)
        return 2
    if sys.stdout is None:
        sys.stdout = _ClosedStdout()
    try:
        code: int = args.func(args)
        sys.stdout.flush()  # a full disk shows here, not in the interpreter's flush at exit
    except KdraError as err:
        print(f"error: {err}", file=sys.stderr)
        if err.hint:
            print(f"  hint: {err.hint}", file=sys.stderr)
        return err.exit_code
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_OK
    except KeyboardInterrupt:
        return 130
    except MemoryError:
        print("error: out of memory (is the input far larger than intended?)", file=sys.stderr)
        return INTERNAL_ERROR
    except OSError as err:  # writing the output failed (disk full, stdout closed): the system, not kdra
        where = f": {err.filename}" if err.filename else ""
        print(f"error: I/O error: {err.strerror or err}{where}", file=sys.stderr)
        return EXIT_UNSATISFIED
    except Exception as err:  # a bug: say so in one line, never exit 3 (that is for allocation errors)
        if os.environ.get("KDRA_DEBUG"):
            traceback.print_exc()
        print(
            f"error: internal error: {type(err).__name__}: {err} (a bug in kdra, please report it; "
            "KDRA_DEBUG=1 prints the traceback)",
            file=sys.stderr,
        )
        return INTERNAL_ERROR
    return code


if __name__ == "__main__":
    sys.exit(main())
