"""`kdra migrate`: device-plugin manifests -> DRA ResourceClaims (see kdra.migrate and docs/migrate.md).

Inputs are read one document at a time and the result is spooled (memory up to a few MiB, then a temporary
file) until every input migrated: nothing is printed or written when any input fails.
"""

from __future__ import annotations

import argparse
import difflib
import io
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from kdra.cli.conventions import add_flag, add_output
from kdra.errors import InputError
from kdra.migrate import (
    CLAIMS,
    MODES,
    Options,
    Report,
    StreamMigration,
    classes_document,
    names_in_use,
    parallel,
)
from kdra.migrate.documents import iter_chunks
from kdra.migrate.helm import chart_message, is_chart
from kdra.migrate.kinds import parse_kind_option
from kdra.migrate.messages import Spool

_SUFFIXES = (".yaml", ".yml")
_SPOOL = 2**20  # characters of output kept in memory before spooling to disk (memory must not follow input)
_BLOCK = 2**20  # characters read at a time


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "migrate",
        help="convert nvidia.com/gpu-style requests to DRA ResourceClaims",
        description="Convert device-plugin requests (nvidia.com/gpu, MIG, time-slicing, HAMi, amd.com/gpu, "
        "google.com/tpu, gpu.intel.com) in workload manifests to DRA ResourceClaimTemplates. Only the "
        "entries that "
        "change are rewritten; every other byte is kept. See docs/migrate.md.",
    )
    parser.add_argument("paths", nargs="*", metavar="PATH", help="files or folders; '-' or nothing = stdin")
    parser.add_argument("--mode", choices=MODES, default=CLAIMS, help="claims (default) or extended-resource")
    parser.add_argument(
        "--check", action="store_true", help="exit 1 and list what would change or cannot be converted"
    )
    parser.add_argument("--diff", action="store_true", help="print a unified diff instead of the result")
    parser.add_argument(
        "-i", "--in-place", action="store_true", help="rewrite the files (DeviceClasses to stdout)"
    )
    add_flag(parser, "--filename", dest="files", help="a file or folder to migrate, as PATH (repeatable)")
    add_output(parser, ("yaml",), help="the only one: the manifests keep their own text")
    parser.add_argument(
        "--output-file", metavar="FILE", help="write the result (with -i: the DeviceClasses) to FILE"
    )
    parser.add_argument(
        "--gpu-memory",
        metavar="QUANTITY",
        help="memory of one GPU (e.g. 80Gi), to turn nvidia.com/gpumem-percentage into a capacity request",
    )
    from kdra.cli.common import add_fleet_arg

    add_fleet_arg(
        parser,
        default=None,
        what="the target fleet, or a `kdra export` file (whole GPUs may then also be shares that take all of "
        "a shareable GPU's capacity)",
    )
    parser.add_argument(
        "--kind",
        action="append",
        default=[],
        metavar="KIND[.GROUP]=PATH[,PATH]",
        help="where a kind keeps its pod specs, e.g. AppWrapper.workload.codeflare.dev="
        "spec.components[].template.spec.template.spec ('*' = every key, '[]' = every item); repeatable",
    )
    parser.add_argument(
        "--no-device-classes",
        action="store_true",
        help="do not print the DeviceClasses the result needs (e.g. as a Helm post-renderer)",
    )
    parser.add_argument(
        "-j",
        "--jobs",
        type=_jobs,
        metavar="N",
        help="worker processes when the inputs hold 1 MiB or more in all (default: the usable CPUs, at most "
        f"{parallel.MAX_JOBS}; 1 = this process only); the result is the same for any N",
    )
    parser.set_defaults(func=run)


def _jobs(text: str) -> int:
    try:
        jobs = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of processes") from None
    if jobs < 1:
        raise argparse.ArgumentTypeError(f"{jobs} processes: at least 1")
    return jobs


# -- inputs --------------------------------------------------------------------------------------------------


@dataclass
class Input:
    name: str
    path: Path | None  # None: stdin, spooled
    spool: IO[str] | None = None

    def size(self) -> int:
        """Characters (stdin) or bytes (a file): what decides whether workers are worth starting."""
        if self.spool is not None:
            self.spool.seek(0, os.SEEK_END)
            return self.spool.tell()
        assert self.path is not None
        try:
            return self.path.stat().st_size
        except OSError:
            return 0  # blocks() reports why it cannot be read

    def blocks(self) -> Iterator[str]:
        """The text in blocks (documents are split from them; a block needs not end at a line end)."""
        if self.spool is not None:
            self.spool.seek(0)
            yield from iter(lambda: self.spool.read(_BLOCK), "")  # type: ignore[union-attr]
            return
        assert self.path is not None
        try:
            with self.path.open(encoding="utf-8", newline="") as stream:
                yield from iter(lambda: stream.read(_BLOCK), "")
        except UnicodeDecodeError:
            raise InputError(_not_text(self.name, self.path.read_bytes())) from None
        except OSError as err:
            raise InputError(f"{self.name}: cannot read: {err.strerror or err}") from err


def _newline(inputs: list[Input]) -> str:
    """CRLF when every input's first line ends with CRLF (Windows editors), so what kdra adds matches."""
    ends = []
    for item in inputs:
        head = next(item.blocks(), "")
        at = head.find("\n")
        if at >= 0:
            ends.append(head[at - 1 : at] == "\r")
    return "\r\n" if ends and all(ends) else "\n"


def _not_text(name: str, data: bytes) -> str:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        byte = f"byte 0x{data[err.start]:02x} at offset {err.start}"
        return f"{name}:{line}: not UTF-8 text ({byte}): kdra migrate reads YAML manifests"
    return f"{name}: not UTF-8 text"  # pragma: no cover


def _stdin() -> Input:
    spool: IO[str] = tempfile.SpooledTemporaryFile(max_size=_SPOOL, mode="w+", encoding="utf-8", newline="")  # noqa: SIM115
    stream = sys.stdin
    if stream is None or stream.closed:
        raise InputError("<stdin>: stdin is closed; give files or folders")
    try:
        buffer = getattr(stream, "buffer", None)
        if buffer is not None:
            data = buffer.read()
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                raise InputError(_not_text("<stdin>", data)) from None
            spool.write(text)
        else:
            shutil.copyfileobj(stream, spool)
    except OSError as err:
        raise InputError(f"<stdin>: cannot read: {err}") from err
    return Input("<stdin>", None, spool)


def _inputs(paths: list[str], charts: list[str]) -> list[Input]:
    """The manifests to migrate. Helm charts and kustomize patches are not manifests: what of them cannot
    be converted goes to `charts` (reported, and --check fails), the patches are left alone."""
    out: list[Input] = []
    patches = _Patches(charts)
    at_terminal = sys.stdin is not None and not sys.stdin.closed and sys.stdin.isatty()
    if not paths and at_terminal:
        raise InputError(
            "no manifests given: kdra migrate FILE|FOLDER ... migrates files, or pipe them in "
            "(helm template RELEASE CHART | kdra migrate -); `-` reads a terminal until Ctrl-D"
        )
    for raw in paths or ["-"]:
        if raw == "-":
            if at_terminal:
                print("kdra migrate: reading manifests from the terminal; Ctrl-D ends them", file=sys.stderr)
            out.append(_stdin())
            continue
        path = Path(raw)
        if is_chart(path):
            charts.append(chart_message(path))
            continue
        if path.is_dir():
            for file in _walk(path, charts):
                if not patches.is_patch(file):
                    out.append(Input(str(file), file))
        elif path.is_file():
            if not patches.is_patch(path):
                out.append(Input(str(path), path))
        else:
            raise InputError(f"{raw}: no such file or folder")
    return out


class _Patches:
    """The kustomizations of the folders inputs come from, each read once: its patch files, and what its
    patches would leave unconverted (kdra.migrate.kustomize)."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        self.files: dict[Path, set[Path]] = {}

    def is_patch(self, file: Path) -> bool:
        folder = file.resolve().parent
        if folder not in self.files:
            from kdra.migrate import kustomize

            found = kustomize.kustomization_of(file.parent)  # named as given, for the messages
            self.files[folder] = kustomize.patch_files(found) if found else set()
            if found is not None:
                self.problems.extend(kustomize.problems(found))
        return file.resolve() in self.files[folder]


def _walk(folder: Path, charts: list[str]) -> Iterator[Path]:
    """Every *.yaml/*.yml below `folder`, sorted, hidden ones skipped; a chart inside is reported whole."""
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.is_dir():
            if is_chart(entry):
                charts.append(chart_message(entry))
            else:
                yield from _walk(entry, charts)
        elif entry.is_file() and entry.suffix in _SUFFIXES:
            yield entry


# -- outputs -------------------------------------------------------------------------------------------------


class Joined:
    """Writes several streams into one, with `---` between them where the next does not start with one."""

    def __init__(self, sink: IO[str], newline: str = "\n") -> None:
        self.sink = sink
        self.last = ""
        self.fresh = True
        self.newline = newline  # the inputs' line ends, for what kdra adds between them

    def next_stream(self) -> None:
        self.fresh = True

    def write(self, text: str) -> None:
        if not text:
            return
        if self.fresh and self.last:
            if not self.last.endswith("\n"):
                self.sink.write(self.newline)
            if not text.startswith("---"):
                self.sink.write("---" + self.newline)
        self.fresh = False
        self.sink.write(text)
        self.last = text


@dataclass
class Result:
    input: Input
    report: Report
    changed: bool
    defined: set[str]
    temp: Path | None = None  # -i: the migrated file, renamed over the original on success
    text: list[str] = field(default_factory=list)  # --diff: the migrated text


def _temp_beside(path: Path) -> tuple[IO[str], Path]:
    target = path.resolve()
    handle, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".kdra-tmp", dir=target.parent)
    return os.fdopen(handle, "w", encoding="utf-8", newline=""), Path(name)


def _replace(temp: Path, path: Path) -> None:
    """Rename the finished temp file over the original (through a symlink: over the file it points to)."""
    target = path.resolve()
    os.chmod(temp, target.stat().st_mode & 0o7777)
    os.replace(temp, target)


def _discard(text: str) -> None:
    del text


def _diffs(results: list[Result]) -> str:
    return "".join(
        _diff(r.input.name, "".join(r.input.blocks()), "".join(r.text)) for r in results if r.changed
    )


def _diff(name: str, original: str, text: str) -> str:
    lines = difflib.unified_diff(
        original.splitlines(keepends=True),
        text.splitlines(keepends=True),
        fromfile=f"a/{name}",
        tofile=f"b/{name}",
    )
    return "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines
    )


# -- the command ---------------------------------------------------------------------------------------------


def _options(args: argparse.Namespace) -> tuple[Options, str | None]:
    if args.in_place and (args.check or args.diff):
        raise InputError("--in-place cannot be combined with --check or --diff")
    output_file = args.output_file
    extra = tuple(parse_kind_option(text) for text in args.kind)
    shareable = _shareable(args.fleet) if getattr(args, "fleet", None) else ()
    return Options(
        mode=args.mode, gpu_memory=args.gpu_memory, extra_kinds=extra, shareable=shareable
    ), output_file


def _shareable(fleet: str) -> tuple[Any, ...]:
    """The DeviceClasses and the ResourceSlices with a device published for sharing, of `--fleet`."""
    from kdra.sim.runner import fleet_objects

    _name, objects, _fleet = fleet_objects(fleet)
    return tuple(
        o
        for o in objects
        if o.get("kind") == "DeviceClass"
        or (
            o.get("kind") == "ResourceSlice"
            and any(
                isinstance(d, dict) and d.get("allowMultipleAllocations")
                for d in (o.get("spec") or {}).get("devices") or []
            )
        )
    )


def run(args: argparse.Namespace) -> int:
    options, output_file = _options(args)
    charts: list[str] = []
    inputs = _inputs([*args.paths, *args.files], charts)
    if args.in_place and any(i.path is None for i in inputs):
        raise InputError("--in-place needs files, not stdin")
    taken: set[str] = set()
    defined: set[str] = set()
    for item in inputs:  # pass 1: names the inputs already use
        templates, classes = names_in_use(item.blocks())
        taken |= templates
        defined |= classes
    spool: IO[str] = tempfile.SpooledTemporaryFile(max_size=_SPOOL, mode="w+", encoding="utf-8", newline="")  # noqa: SIM115
    joined = Joined(spool, _newline(inputs))
    messages = Spool()  # notes, warnings, changes and errors of every input, printed at the end
    jobs = [_Job(item, options, taken, joined, args, messages) for item in inputs]
    results = [job.result for job in jobs]
    try:
        workers = args.jobs or parallel.default_jobs()
        if workers > 1 and sum(i.size() for i in inputs) >= parallel.MIN_INPUT and parallel.can_fork():
            targets = [
                parallel.Target(job.migration, iter_chunks(job.result.input.blocks()), job.begin, job.end)
                for job in jobs
            ]
            parallel.run_inputs(targets, workers)
        else:
            for job in jobs:
                write = job.begin()
                job.migration.run(iter_chunks(job.result.input.blocks()), write)
                job.end()
        return _finish(args, options, results, charts, defined, spool, joined, output_file)
    finally:
        spool.close()
        messages.close()
        for job in jobs:
            job.close()
        for result in results:
            if result.temp is not None and result.temp.exists():
                result.temp.unlink()


class _Job:
    """One input's migration, and where its output goes: opened by `begin` (which returns the writer) when its
    first document is written, closed by `end` after its last."""

    def __init__(
        self,
        item: Input,
        options: Options,
        taken: set[str],
        joined: Joined,
        args: argparse.Namespace,
        messages: Spool,
    ) -> None:
        self.migration = StreamMigration(item.name, options, taken, messages)
        self.result = Result(item, self.migration.report, False, set())
        self.joined = joined
        self.args = args
        self._stream: IO[str] | None = None  # -i: the temp file beside the input

    def begin(self) -> Callable[[str], object]:
        if self.args.diff:
            return self.result.text.append
        if self.args.check:
            return _discard
        if self.args.in_place:
            assert self.result.input.path is not None
            self._stream, self.result.temp = _temp_beside(self.result.input.path)
            return self._stream.write
        self.joined.next_stream()
        return self.joined.write

    def end(self) -> None:
        self.close()
        self.result.changed = self.migration.changed

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None


def _finish(
    args: argparse.Namespace,
    options: Options,
    results: list[Result],
    charts: list[str],
    defined: set[str],
    spool: IO[str],
    joined: Joined,
    output_file: str | None,
) -> int:
    reports = [r.report for r in results]
    for report in reports:
        for warning in report.warnings:
            print(f"warning: {warning}", file=sys.stderr)
    invalid = [e for report in reports for e in report.invalid]
    blocked = [e for report in reports for e in report.blocked] + charts
    if invalid:
        more = f" (and {len(blocked)} request(s) that cannot be migrated)" if blocked else ""
        raise InputError(
            f"{len(invalid)} invalid input(s){more}; no file was changed\n" + "\n".join(invalid + blocked)
        )
    needed: dict[str, Any] = {}
    for report in reports:
        for name, obj in report.classes.items():
            needed.setdefault(name, obj)
    classes = "" if args.no_device_classes else classes_document(needed, defined, args.mode, joined.newline)
    if args.check:
        for report in reports:
            for change in report.changes:
                print(change)
        for entry in blocked:
            print(f"cannot convert: {entry}")
        if classes:
            print("DeviceClasses to add: " + ", ".join(sorted(n for n in needed if n not in defined)))
        if args.diff:
            out = io.StringIO(_diffs(results))
            _emit(output_file, out)
        changed = any(r.changed for r in results) or any(r.changes for r in reports)
        return 1 if changed or blocked or classes else 0
    if blocked:
        raise InputError(
            f"{len(blocked)} request(s) cannot be migrated; no file was changed\n" + "\n".join(blocked)
        )
    for report in reports:
        for note in report.notes:
            print(f"note: {note}", file=sys.stderr)
    if args.diff:
        out = io.StringIO()
        out.write(_diffs(results))
        if classes:
            out.write("--- /dev/null\n+++ b/<DeviceClasses>\n")
            out.write("".join("+" + line for line in classes.splitlines(keepends=True)))
        _emit(output_file, out)
        return 0
    if args.in_place:
        for result in results:
            if result.changed and result.temp is not None and result.input.path is not None:
                _replace(result.temp, result.input.path)
                print(f"migrated {result.input.path}", file=sys.stderr)
        if classes:
            _emit(output_file, io.StringIO(classes))
        return 0
    if classes:
        joined.next_stream()
        joined.write(classes)
    _emit(output_file, spool)
    return 0


def _emit(output_file: str | None, source: IO[str]) -> None:
    source.seek(0)
    if output_file:
        target = Path(output_file)
        try:
            handle, temp = tempfile.mkstemp(
                prefix=f".{target.name}.", suffix=".kdra-tmp", dir=target.parent or "."
            )
        except OSError as err:
            raise InputError(f"{output_file}: cannot write: {err.strerror or err}") from err
        try:
            with os.fdopen(handle, "w", encoding="utf-8", newline="") as stream:
                shutil.copyfileobj(source, stream)
            os.replace(temp, target)
        except OSError as err:
            if os.path.exists(temp):
                os.unlink(temp)
            raise InputError(f"{output_file}: cannot write: {err.strerror or err}") from err
        return
    shutil.copyfileobj(source, sys.stdout)
    sys.stdout.flush()
