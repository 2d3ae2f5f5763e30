"""Helpers for the `kdra migrate` tests: the manifest corpus and a CLI runner needing no other subcommand.

Each case in manifests/ is `<case>.yaml` (the input) with golden files: `<case>.expected.yaml` (stdout),
`<case>.stderr` (warnings, notes or errors), optional `<case>.args` (extra arguments) and `<case>.exit` (the
exit code when not 0). `KDRA_REGEN_GOLDEN=1 pytest tests/migrate/test_golden.py` rewrites the golden files
from the current behaviour; review the diff before committing it.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from kdra.cli import migrate as migrate_cli
from kdra.errors import KdraError
from kdra.migrate.kinds import plain_pod_specs

MANIFESTS = Path(__file__).parent / "manifests"
REGEN = os.environ.get("KDRA_REGEN_GOLDEN") == "1"


def cases() -> list[str]:
    return sorted(
        p.name[: -len(".yaml")] for p in MANIFESTS.glob("*.yaml") if not p.name.endswith(".expected.yaml")
    )


def case_args(case: str) -> list[str]:
    args_file = MANIFESTS / f"{case}.args"
    return args_file.read_text().split() if args_file.exists() else []


def case_exit(case: str) -> int:
    exit_file = MANIFESTS / f"{case}.exit"
    return int(exit_file.read_text()) if exit_file.exists() else 0


def ok_cases() -> list[str]:
    return [c for c in cases() if case_exit(c) == 0]


def expected(case: str) -> str:
    return (MANIFESTS / f"{case}.expected.yaml").read_text()


@dataclass
class Run:
    code: int
    out: str
    err: str


def run_cli(argv: list[str], stdin: str = "", cwd: Path | None = None) -> Run:
    """Run `kdra migrate ARGV` in-process the way kdra.cli.main does (KdraError -> exit code), from `cwd`."""
    parser = argparse.ArgumentParser(prog="kdra")
    migrate_cli.register(parser.add_subparsers(dest="command"))
    out, err = io.StringIO(), io.StringIO()
    old = sys.stdin, sys.stdout, sys.stderr
    sys.stdin, sys.stdout, sys.stderr = io.StringIO(stdin), out, err
    before = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        try:
            args = parser.parse_args(["migrate", *argv])
            code = args.func(args)
        except KdraError as error:
            print(f"error: {error}", file=sys.stderr)
            code = error.exit_code
        except SystemExit as exit:  # a usage error, as argparse reports it
            code = exit.code if isinstance(exit.code, int) else 2
    finally:
        sys.stdin, sys.stdout, sys.stderr = old
        os.chdir(before)
    return Run(code, out.getvalue(), err.getvalue())


def run_case(case: str) -> Run:
    """The CLI on a case, run from the manifests folder so messages name the file as the goldens do."""
    cwd = os.getcwd()
    os.chdir(MANIFESTS)
    try:
        return run_cli([*case_args(case), f"{case}.yaml"])
    finally:
        os.chdir(cwd)


def objects(text: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for doc in yaml.safe_load_all(text):
        if isinstance(doc, dict) and str(doc.get("kind", "")).endswith("List") and "items" in doc:
            out.extend(doc["items"])
        elif isinstance(doc, dict):
            out.append(doc)
    return out


def pod_specs(obj: dict[str, Any]) -> list[tuple[tuple[Any, ...], str, dict[str, Any]]]:
    return plain_pod_specs(obj)


def containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Every container of a pod spec, whatever the workload calls them (Argo, KServe included)."""
    out = [
        *(spec.get("initContainers") or []),
        *(spec.get("containers") or []),
        *(spec.get("sidecars") or []),
    ]
    out += (spec.get("containerSet") or {}).get("containers") or []
    for key in ("container", "script", "model"):
        if isinstance(spec.get(key), dict):
            out.append(spec[key])
    return out


@pytest.fixture
def cli() -> Callable[..., Run]:
    return run_cli
