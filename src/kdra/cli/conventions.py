"""kdra's command-line conventions, kubectl's, as one table: every command adds its shared flags through
`add_flag` and `add_output`, and tests/cli/test_conventions.py checks every parser of the tree against it.

A flag spelled here means one thing in every command that has it: the same short form (or none), the same
long name, repeatable wherever it is repeatable (`-f a.yaml -f b.yaml` keeps both, as kubectl's). A command
whose `-o` offers a table also offers `wide` (more columns or rows) and `name` (one `kind/name` per line).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Final


@dataclass(frozen=True)
class Flag:
    long: str
    short: str | None
    meaning: str
    repeatable: bool = False  # append: every occurrence is kept, as kubectl's -f and --feature-gates
    metavar: str | None = None  # what the value is, the same everywhere (None: a switch, or free)
    count: bool = False  # a switch that counts (-v, -vv)


FLAGS: Final[dict[str, Flag]] = {
    f.long: f
    for f in (
        Flag(
            "--filename",
            "-f",
            "Kubernetes objects to read: a file, a folder (read recursively) or - for stdin",
            repeatable=True,
            metavar="FILE",
        ),
        Flag(
            "--fleet", "-c", "a fleet: a Fleet file, a node-list CSV or a bundled fleet name", metavar="FLEET"
        ),
        Flag(
            "--workload",
            None,
            "a workload: a bundled name, or a file or folder of objects",
            metavar="WORKLOAD",
        ),
        Flag("--watch", "-w", "keep watching and refresh until interrupted"),
        Flag("--output", "-o", "the output format", metavar="FORMAT"),
        Flag("--namespace", "-n", "only objects of this namespace", metavar="NAMESPACE"),
        Flag("--all-namespaces", "-A", "objects of every namespace"),
        Flag("--verbose", "-v", "more detail (repeat for more: -vv)", count=True),
        Flag("--nodes", None, "detail this many nodes when explaining what does not fit", metavar="N"),
        Flag("--jobs", "-j", "worker processes", metavar="N"),
        Flag("--in-place", "-i", "rewrite the input files"),
        Flag(
            "--kubeconfig",
            None,
            "the kubeconfig file (as kubectl: else $KUBECONFIG, in-cluster, ~/.kube/config)",
            metavar="FILE",
        ),
        Flag("--context", None, "the kubeconfig context (default: current-context)", metavar="CONTEXT"),
        Flag("--feature-gates", None, "feature gates", repeatable=True, metavar="Gate=bool,..."),
        Flag("--kubernetes-version", None, "behave like this Kubernetes release", metavar="VERSION"),
        Flag("--policy", None, "a placement policy to compare", repeatable=True, metavar="NAME"),
        Flag("--placement", None, "how the scheduler places pods among the nodes that fit them"),
        Flag("--online", None, "placement policies learn the workload from the pods as they arrive"),
        Flag("--kind", None, "where a custom kind keeps its pod templates", repeatable=True),
        Flag("--seeds", None, "seeds to run", repeatable=True),
        Flag("--output-file", None, "write the result to this file instead of stdout", metavar="FILE"),
        Flag("--report", None, "also write a self-contained HTML report to this file", metavar="FILE"),
        Flag(
            "--validate",
            None,
            "unknown fields: strict (default), warn or ignore",
            metavar="strict|warn|ignore",
        ),
        Flag("--version", None, "print kdra's version"),
    )
}
SHORT: Final[dict[str, Flag]] = {f.short: f for f in FLAGS.values() if f.short}

# The formats every table offers besides its own (kubectl get's): wide and name.
TABLE_FORMATS: Final = ("table", "wide", "name")

# Exit codes (README, "Conventions every command follows"); main() maps kdra's errors onto them.
EXIT_OK: Final = 0
EXIT_UNSATISFIED: Final = 1  # valid, but does not fit, or could not be carried out (server, I/O)
EXIT_INVALID: Final = 2
EXIT_ALLOCATION: Final = 3
EXIT_BUG: Final = 4
EXIT_CODES: Final[dict[int, str]] = {
    EXIT_OK: "success",
    EXIT_UNSATISFIED: "valid but does not fit, or cannot be carried out: an API server that cannot be "
    "reached or refuses the credentials or the permission (401, 403), output that cannot be written (the "
    "message says which)",
    EXIT_INVALID: "invalid input or usage",
    EXIT_ALLOCATION: "an allocation error in upstream's sense",
    EXIT_BUG: "an internal error (a bug: one line; KDRA_DEBUG=1 prints the traceback)",
}


def add_flag(p: argparse.ArgumentParser | Any, long: str, **kw: Any) -> argparse.Action:
    """Add a flag of the table with its spelling (short form, repeatability); `kw` as add_argument's."""
    flag = FLAGS[long]
    names = [flag.short, long] if flag.short else [long]
    if flag.metavar is not None and "choices" not in kw:
        kw.setdefault("metavar", flag.metavar)
    if flag.count:
        kw.setdefault("action", "count")
        kw.setdefault("default", 0)
    if flag.repeatable:
        kw.setdefault("action", "append")
        if kw.get("action") == "append":
            kw.setdefault("default", [])
    action: argparse.Action = p.add_argument(*names, **kw)
    return action


def add_output(
    p: argparse.ArgumentParser, formats: tuple[str, ...], *, default: str | None = None, help: str = ""
) -> argparse.Action:
    """-o/--output: `formats`, and wide and name wherever there is a table."""
    choices = list(formats)
    if "table" in choices:
        choices += [f for f in TABLE_FORMATS if f not in choices]
    text = "output format: " + "|".join(choices)
    return add_flag(
        p,
        "--output",
        choices=choices,
        default=default if default is not None else choices[0],
        metavar="FORMAT",
        help=text + (f" ({help})" if help else f" (default {default or choices[0]})"),
    )


def problems(parser: argparse.ArgumentParser, path: str = "kdra") -> list[str]:
    """Where the parser tree strays from the table: one line per flag, naming the command."""
    out: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out.extend(problems(sub, f"{path} {name}"))
            continue
        strings = action.option_strings
        if not strings or "--help" in strings:
            continue
        longs = [s for s in strings if s.startswith("--")]
        shorts = [s for s in strings if not s.startswith("--")]
        known = [FLAGS[s] for s in longs if s in FLAGS]
        for s in shorts:
            flag = SHORT.get(s)
            if flag is None:
                out.append(f"{path}: {s} is not a short form of the conventions table")
            elif flag.long not in longs:
                out.append(f"{path}: {s} means {flag.long} everywhere, here {'/'.join(longs)}")
        for flag in known:
            if flag.short and flag.short not in shorts:
                out.append(f"{path}: {flag.long} goes with {flag.short}")
            repeated = isinstance(action, argparse._AppendAction | argparse._ExtendAction)
            if flag.repeatable and not repeated:
                out.append(f"{path}: {flag.long} is repeatable everywhere (-f a -f b keeps both)")
            if flag.metavar is not None and action.choices is None and action.metavar != flag.metavar:
                out.append(f"{path}: {flag.long} takes {flag.metavar} everywhere, here {action.metavar}")
            if flag.count and not isinstance(action, argparse._CountAction):
                out.append(f"{path}: {flag.long} counts everywhere (-v, -vv)")
            if flag.long == "--output" and action.choices is not None:
                choices = list(action.choices)
                if "table" in choices and not set(TABLE_FORMATS) <= set(choices):
                    out.append(f"{path}: -o offers a table but not {'/'.join(TABLE_FORMATS)}")
    return out


__all__ = [
    "EXIT_CODES",
    "FLAGS",
    "SHORT",
    "TABLE_FORMATS",
    "Flag",
    "add_flag",
    "add_output",
    "problems",
]
