"""Entry point of the `kdra` command.

Each subcommand lives in its own module under kdra.cli and exposes `register(subparsers)`, which adds
its parser and sets `func` to a callable taking the parsed namespace and returning the exit code.
Exit codes (DESIGN.md): 0 success, 1 valid but cannot be satisfied, 2 invalid input or usage,
3 an allocation error in upstream's sense.
"""

from __future__ import annotations

import argparse
import importlib
import sys
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
    "exporter",
    "top",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kdra",
        description="Dynamic Resource Allocation for AI accelerator fleets, the Kubernetes way.",
    )
    parser.add_argument("--version", action="version", version=f"kdra {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"kdra.cli.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
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
    return code


if __name__ == "__main__":
    sys.exit(main())
