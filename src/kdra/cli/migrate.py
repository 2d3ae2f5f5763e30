"""`kdra migrate`: device-plugin manifests -> DRA ResourceClaims (see kdra.migrate for what converts)."""

from __future__ import annotations

import argparse
import difflib
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, TextIO

from kdra.errors import InputError
from kdra.migrate import CLAIMS, MODES, FileResult, Options, classes_text, join_outputs, migrate_text

_SUFFIXES = (".yaml", ".yml")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "migrate",
        help="convert nvidia.com/gpu-style requests to DRA ResourceClaims",
        description="Convert device-plugin requests (nvidia.com/gpu, MIG, HAMi, amd.com/gpu, google.com/tpu) "
        "in workload manifests to DRA ResourceClaimTemplates. Documents that need no change are copied "
        "byte for byte.",
    )
    parser.add_argument("paths", nargs="*", metavar="PATH", help="files or folders; '-' or nothing = stdin")
    parser.add_argument("--mode", choices=MODES, default=CLAIMS, help="claims (default) or extended-resource")
    parser.add_argument("--check", action="store_true", help="exit 1 and list what would change")
    parser.add_argument("--diff", action="store_true", help="print a unified diff instead of the result")
    parser.add_argument(
        "-i", "--in-place", action="store_true", help="rewrite the files (DeviceClasses to stdout)"
    )
    parser.add_argument(
        "-o", "--output", metavar="FILE", help="write the result (with -i: the DeviceClasses) here"
    )
    parser.add_argument(
        "--gpu-memory",
        metavar="QUANTITY",
        help="memory of one GPU (e.g. 80Gi), to turn nvidia.com/gpumem-percentage into a capacity request",
    )
    parser.set_defaults(func=run)


def _inputs(paths: list[str]) -> list[tuple[str, str, Path | None]]:
    """(name, text, path) for every input; stdin has no path."""
    out: list[tuple[str, str, Path | None]] = []
    for raw in paths or ["-"]:
        if raw == "-":
            out.append(("<stdin>", sys.stdin.read(), None))
            continue
        path = Path(raw)
        if path.is_dir():
            files = sorted(
                p
                for p in path.rglob("*")
                if p.is_file() and p.suffix in _SUFFIXES and not any(part.startswith(".") for part in p.parts)
            )
        elif path.is_file():
            files = [path]
        else:
            raise InputError(f"{raw}: no such file or folder")
        for file in files:
            try:
                out.append((str(file), file.read_text(encoding="utf-8"), file))
            except (OSError, UnicodeDecodeError) as err:
                raise InputError(f"{file}: cannot read: {err}") from err
    return out


def _write_atomic(path: Path, text: str) -> None:
    """Temp file in the same folder, then rename: readers see the old file or the new one, never half."""
    path = path.resolve()  # through a symlink, rewrite the file it points to and keep the link
    mode = path.stat().st_mode & 0o7777
    handle, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".kdra-tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise


def _diff(result: FileResult) -> str:
    name = result.source
    lines = difflib.unified_diff(
        result.original.splitlines(keepends=True),
        result.text.splitlines(keepends=True),
        fromfile=f"a/{name}",
        tofile=f"b/{name}",
    )
    return "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines
    )


def run(args: argparse.Namespace) -> int:
    if args.in_place and (args.check or args.diff):
        raise InputError("--in-place cannot be combined with --check or --diff")
    inputs = _inputs(args.paths)
    if args.in_place and any(path is None for _, _, path in inputs):
        raise InputError("--in-place needs files, not stdin")
    options = Options(mode=args.mode, gpu_memory=args.gpu_memory)
    results = [migrate_text(text, name, options) for name, text, _ in inputs]
    for result in results:
        for warning in result.report.warnings:
            print(f"warning: {warning}", file=sys.stderr)
    errors = [error for result in results for error in result.report.errors]
    if errors:
        raise InputError(
            f"{len(errors)} request(s) cannot be migrated; no file was changed\n" + "\n".join(errors)
        )
    classes = classes_text(results, args.mode)

    if args.check:
        changed = [r for r in results if r.changed]
        for result in changed:
            for change in result.report.changes:
                print(change)
        if classes:
            print("DeviceClasses to add: " + ", ".join(sorted(_class_names(results))))
        if args.diff:
            _emit(args.output, "".join(_diff(r) for r in changed))
        return 1 if changed or classes else 0

    if args.diff:
        text = "".join(_diff(r) for r in results if r.changed)
        if classes:
            text += "--- /dev/null\n+++ b/<DeviceClasses>\n" + "".join(
                "+" + line for line in classes.splitlines(keepends=True)
            )
        _emit(args.output, text)
        return 0

    if args.in_place:
        for (_, _, path), result in zip(inputs, results, strict=True):
            if result.changed and path is not None:
                _write_atomic(path, result.text)
                print(f"migrated {path}", file=sys.stderr)
        if classes:
            _emit(args.output, classes)
        return 0

    _emit(args.output, join_outputs([r.text for r in results] + [classes]))
    return 0


def _class_names(results: list[FileResult]) -> set[str]:
    defined = set().union(*(r.defined_classes for r in results)) if results else set()
    return {name for r in results for name in r.report.classes if name not in defined}


def _emit(output: str | None, text: str) -> None:
    if output:
        try:
            Path(output).write_text(text, encoding="utf-8")
        except OSError as err:
            raise InputError(f"{output}: cannot write: {err}") from err
        return
    stream: TextIO = sys.stdout
    stream.write(text)
    stream.flush()
