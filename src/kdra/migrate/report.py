"""What a migration is asked to do (Options) and what it found (Report), with the names messages use."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kdra.api.quantity import parse_quantity
from kdra.errors import InputError
from kdra.migrate.kinds import KINDS, Place
from kdra.migrate.messages import Messages, Spool
from kdra.migrate.nodes import Path, path_text

CLAIMS = "claims"
EXTENDED_RESOURCE = "extended-resource"
MODES = (CLAIMS, EXTENDED_RESOURCE)


@dataclass(frozen=True)
class Options:
    mode: str = CLAIMS
    # Memory of one GPU, to turn HAMi's nvidia.com/gpumem-percentage into an absolute capacity request.
    gpu_memory: str | None = None
    # Kinds added with --kind (KIND[.GROUP] -> places); they extend and override the built-in table.
    extra_kinds: tuple[tuple[str, tuple[Place, ...]], ...] = ()
    # --fleet: the target's DeviceClasses and the ResourceSlices with shareable devices, so that a whole
    # GPU can also be a share of all of a shareable GPU's capacity (kdra.api.whole).
    shareable: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        if self.gpu_memory is not None:
            gpu_memory_bytes(self.gpu_memory)  # refused here, before any input is read

    def gpu_memory_size(self) -> int | None:
        """--gpu-memory in bytes (rounded up), None when not given."""
        return None if self.gpu_memory is None else gpu_memory_bytes(self.gpu_memory)

    def kinds(self) -> dict[str, tuple[Place, ...]]:
        if not self.extra_kinds:
            return KINDS
        return {**KINDS, **dict(self.extra_kinds)}


_MAX_GPU_MEMORY = 2**63 - 1  # bytes: what an int64 quantity holds


def gpu_memory_bytes(text: str) -> int:
    """One GPU's memory as a Kubernetes quantity (`80Gi`, `81559Mi`, `85.9G`), in bytes rounded up; raises
    InputError naming the option and the rule."""
    where = f"--gpu-memory {text!r}"
    try:
        quantity = parse_quantity(text.strip())
    except ValueError as err:
        raise InputError(f"{where}: not a Kubernetes quantity ({err}); one GPU's memory, e.g. 80Gi") from None
    size = -(-quantity.nanos // 10**9)
    if size <= 0:
        raise InputError(f"{where}: one GPU's memory must be greater than zero")
    if size > _MAX_GPU_MEMORY:
        raise InputError(f"{where}: beyond int64 bytes")
    return size


@dataclass
class Report:
    """What happened to one input.

    changes: what --check lists (one line per edit); notes: rewrites that change more than the request
    itself, one line per object with what and why (always printed); warnings: things left as they are;
    invalid: input Kubernetes would reject (exit 2); blocked: accelerator requests that remain and cannot be
    converted (--check fails, a migration refuses); classes: the DeviceClasses the result needs. The message
    lists are in memory, or bounded in memory and kept in a spool (`spooled`, what a whole stream reports).
    """

    changes: Messages = field(default_factory=Messages)
    notes: Messages = field(default_factory=Messages)
    warnings: Messages = field(default_factory=Messages)
    invalid: Messages = field(default_factory=Messages)
    blocked: Messages = field(default_factory=Messages)
    classes: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def spooled(cls, spool: Spool) -> Report:
        return cls(Messages(spool), Messages(spool), Messages(spool), Messages(spool), Messages(spool))

    @property
    def failed(self) -> bool:
        return bool(self.invalid or self.blocked)

    def flush(self) -> None:
        """Write every line still held in memory to the spool (an input is done: the next one's messages get
        the memory)."""
        for messages in (self.changes, self.notes, self.warnings, self.invalid, self.blocked):
            messages.flush()


@dataclass
class Where:
    """Names an object for messages: `file: document N (Kind ns/name)`."""

    source: str
    document: int
    first_line: int  # 1-based line of the document body in the file
    kind: str = ""
    name: str = ""
    namespace: str = ""
    prefix: Path = ()  # path of the object inside its document (kind: List items)
    _described: str | None = field(default=None, repr=False, compare=False)

    def describe(self) -> str:
        if self._described is None:
            self._described = self._describe()
        return self._described

    def _describe(self) -> str:
        where = f"{self.source}: document {self.document}"
        if self.prefix:
            where += f" {path_text(self.prefix)}"
        if not self.kind:
            return f"{where} (no kind)"
        name = self.name if len(self.name) <= 80 else self.name[:77] + "..."
        ident = f"{self.namespace[:80]}/{name}" if self.namespace else (name or "<unnamed>")
        return f"{where} ({self.kind} {ident})"

    def at(self, path: Path, line: int | None = None) -> str:
        """`<object>: <path> (line L)`; `line` is 0-based within the document body."""
        text = f"{self.describe()}: {path_text(self.prefix + path)}"
        if line is not None:
            text += f" (line {self.first_line + line})"
        return text
