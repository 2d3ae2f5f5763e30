"""Helpers for the `kdra migrate` tests: the manifest corpus and a CLI runner needing no other subcommand."""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from kdra.cli import migrate as migrate_cli
from kdra.errors import KdraError

MANIFESTS = Path(__file__).parent / "manifests"


def cases() -> list[str]:
    """Every `<case>.yaml` with a `<case>.expected.yaml` golden output."""
    return sorted(p.name[: -len(".expected.yaml")] for p in MANIFESTS.glob("*.expected.yaml"))


def case_args(case: str) -> list[str]:
    args_file = MANIFESTS / f"{case}.args"
    return args_file.read_text().split() if args_file.exists() else []


@dataclass
class Run:
    code: int
    out: str
    err: str


def run_cli(argv: list[str], stdin: str = "") -> Run:
    """Run `kdra migrate ARGV` in-process the way kdra.cli.main does (KdraError -> exit code)."""
    parser = argparse.ArgumentParser(prog="kdra")
    migrate_cli.register(parser.add_subparsers(dest="command"))
    out, err = io.StringIO(), io.StringIO()
    old = sys.stdin, sys.stdout, sys.stderr
    sys.stdin, sys.stdout, sys.stderr = io.StringIO(stdin), out, err
    try:
        args = parser.parse_args(["migrate", *argv])
        try:
            code = args.func(args)
        except KdraError as error:
            print(f"error: {error}", file=sys.stderr)
            code = error.exit_code
    finally:
        sys.stdin, sys.stdout, sys.stderr = old
    return Run(code, out.getvalue(), err.getvalue())


@pytest.fixture
def cli() -> Callable[..., Run]:
    return run_cli
