"""Every `kdra` command the README and docs/ show, as printed: each flag it uses exists on that command, and a
command shown with its output (a console block, `$ kdra ...` then what it prints) prints that output, so the
docs cannot drift from the CLI again. A shown output may elide lines with a line `...`.

Commands are read from code blocks (console, sh, plain) and from inline code; synopses (`[-o yaml|json]`) are
checked for their flags too. Only console examples with output are run (a second each): keep them small
(a month of simulation belongs in `make run`, not in a shown example).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from kdra.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted(
    [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "src" / "kdra").glob("*/README.md")]
)
_FENCE = re.compile(r"^```(\w*)\s*$")
_INLINE = re.compile(r"`(kdra [^`]+)`")
_SHELL_STOP = {"|", ">", ">>", "<", "2>", "2>&1", "&&", "||", ";", "#", "&"}


@dataclass(frozen=True)
class Shown:
    doc: str  # file:line
    command: str
    output: tuple[str, ...] | None  # None: no output shown


def _shown(path: Path) -> list[Shown]:
    out: list[Shown] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    name = path.relative_to(ROOT)
    fence: str | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        m = _FENCE.match(line.strip())
        if m:
            fence = None if fence is not None else m.group(1)
            i += 1
            continue
        if fence is None:
            out += [Shown(f"{name}:{i + 1}", c, None) for c in _INLINE.findall(line.replace("\\|", "|"))]
            i += 1
            continue
        text = line.strip()
        if fence == "console" and text.startswith("$ "):
            command = text[2:]
            j = i + 1
            output: list[str] = []
            while (
                j < len(lines)
                and not lines[j].strip().startswith("$ ")
                and not _FENCE.match(lines[j].strip())
            ):
                output.append(lines[j].rstrip())
                j += 1
            if command.startswith("kdra "):
                out.append(Shown(f"{name}:{i + 1}", command, tuple(output) if output else None))
            i = j
            continue
        if "kdra " in text and fence in ("", "sh", "console", "bash", "text"):
            at = text.find("kdra ")
            if at == 0 or text[at - 2 : at] in ("| ", "$ "):
                out.append(Shown(f"{name}:{i + 1}", text[at:], None))
        i += 1
    return out


SHOWN = [s for path in DOCS for s in _shown(path)]


def _tokens(command: str) -> list[str]:
    """The command's words up to a shell operator; synopsis brackets and alternatives (`a|b`) opened up."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        words = command.split()
    out: list[str] = []
    depth = 0
    for word in words:
        opened = word.count("[")
        if word in _SHELL_STOP and depth == 0:
            break
        depth += opened
        for part in word.strip("[]").split("|"):
            if part.startswith("-") and "/-" in part:  # -i/--in-place: both spellings
                out += part.split("/")
            elif part:
                out.append(part.strip("[]"))
        depth -= word.count("]")
    return out


def _command(
    parser: argparse.ArgumentParser, words: list[str]
) -> tuple[argparse.ArgumentParser, list[str], str]:
    path = ["kdra"]
    rest = words[1:]
    while rest:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or rest[0] not in subs[0].choices:
            break
        parser = subs[0].choices[rest[0]]
        path.append(rest[0])
        rest = rest[1:]
    return parser, rest, " ".join(path)


PARSER = build_parser()


@pytest.mark.parametrize("shown", SHOWN, ids=[f"{s.doc} {s.command[:60]}" for s in SHOWN])
def test_every_flag_shown_exists(shown: Shown) -> None:
    words = _tokens(shown.command)
    parser, rest, path = _command(PARSER, words)
    known = {s for a in parser._actions for s in a.option_strings}
    for word in rest:
        if not word.startswith("-") or word == "-" or re.fullmatch(r"-\d.*", word):
            continue
        flag = word.split("=", 1)[0]
        if re.fullmatch(r"-[A-Za-z]{2,}", flag) and all(f"-{c}" in known for c in flag[1:]):
            continue  # -vv
        assert flag in known, f"{shown.doc}: `{shown.command}`: {path} has no {flag}"


RUNNABLE = [s for s in SHOWN if s.output is not None]


def _normalise(text: str) -> list[str]:
    return [line.rstrip() for line in text.rstrip("\n").splitlines()]


def _matches(shown: list[str], actual: list[str]) -> bool:
    """Line by line; a shown `...` stands for any number of lines."""
    if not shown:
        return not actual
    if shown[0].strip() == "...":
        return any(_matches(shown[1:], actual[k:]) for k in range(len(actual) + 1))
    return bool(actual) and shown[0] == actual[0] and _matches(shown[1:], actual[1:])


@pytest.mark.parametrize("shown", RUNNABLE, ids=[f"{s.doc} {s.command[:60]}" for s in RUNNABLE])
def test_shown_output_is_what_the_command_prints(shown: Shown) -> None:
    argv = shlex.split(shown.command)[1:]
    proc = subprocess.run(
        [sys.executable, "-m", "kdra.cli.main", *argv],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"},
    )
    assert _matches(_normalise("\n".join(shown.output or ())), _normalise(proc.stdout)), (
        f"{shown.doc}: `{shown.command}` printed:\n{proc.stdout}"
    )
