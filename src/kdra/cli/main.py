"""Entry point of the `kdra` command.

Each subcommand lives in its own module under kdra.cli and exposes `register(subparsers)`, which adds
its parser and sets `func` to a callable taking the parsed namespace and returning the exit code.
Exit codes (DESIGN.md): 0 success, 1 valid but cannot be satisfied, 2 invalid input or usage,
3 an allocation error in upstream's sense, 4 an internal error (a bug in kdra: one line, and the traceback
only with KDRA_DEBUG=1).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
from collections.abc import Sequence

from kdra import __version__
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

INTERNAL_ERROR = 4


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
    for name in COMMANDS if only is None else (only,):
        importlib.import_module(f"kdra.cli.{name}").register(subparsers)
    if only is None:
        version = subparsers.add_parser("version", help="print kdra's version")
        version.set_defaults(func=lambda args: print(f"kdra {__version__}") or 0)
    _add_version(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(COMMAND_MODULES.get(argv[0]) if argv else None)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        build_parser().print_help(sys.stderr)
        return 2
    try:
        code: int = args.func(args)
    except KdraError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130
    except MemoryError:
        print("error: out of memory (is the input far larger than intended?)", file=sys.stderr)
        return INTERNAL_ERROR
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
