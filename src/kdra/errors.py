"""Errors every layer may raise; the CLI maps them to exit codes without printing a traceback."""

from __future__ import annotations


class KdraError(Exception):
    """Base of all errors kdra reports to users. `exit_code` is what the CLI exits with; `hint`, when set,
    is printed on a line of its own after the message: what to look at next (the message itself keeps
    upstream's wording where upstream has one)."""

    exit_code = 2
    hint = ""


class InputError(KdraError):
    """Invalid input or usage: malformed files, objects that fail validation, unknown names."""

    exit_code = 2


class AllocationError(KdraError):
    """An allocation error in upstream's sense: a CEL runtime error, the claim limit, All over an
    incomplete pool."""

    exit_code = 3
