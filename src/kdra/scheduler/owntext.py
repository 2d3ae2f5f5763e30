"""Texts shared by pods of one shape name each reader's own objects.

The scheduler keeps Filter answers per pod signature (kdra.scheduler.scheduler): a claim's spec decides the
answer, not its name or namespace, so replicas and look-alike pods in other namespaces share them. The texts
in those answers do name the objects of the pod that computed them ("claim tenant-a/x-dev, request g: ...").
So a text is kept *neutral*: each name of the pod that computed it becomes a token for its position among
the pod's names (`OwnNames.neutral`; pods with equal signatures have their claims at the same positions),
and a text is made a pod's own (`personal`) only where it is written on that pod. A pod's condition and
Events then name only its own objects, whoever computed the answers, and counts of equal reasons are not
split by whose names they carried.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Mapping, Sequence
from typing import Any

_TOKEN = re.compile("\x00([0-9]+)\x00")


def token(i: int) -> str:
    return f"\x00{i}\x00"


class OwnNames:
    """The names of one pod's objects that Filter texts may carry, in signature order."""

    __slots__ = ("names",)

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)

    def __bool__(self) -> bool:
        return bool(self.names)

    def neutral(self, text: str) -> str:
        """`text` with this pod's names replaced by their position tokens."""
        names = self.names
        if not any(n in text for n in names):
            return text
        index = {n: i for i, n in enumerate(names)}
        return _pattern(names).sub(lambda m: token(index[m[0]]), text)

    def personal(self, text: str) -> str:
        return personal(text, self.names)


@functools.lru_cache(maxsize=4096)
def _pattern(names: tuple[str, ...]) -> re.Pattern[str]:
    # Longest first, so `ns/a-b` is not read as `ns/a`; a name counts only as a whole word of a reference
    # (`tenant-a/` is a namespace's extended-resource claim, not the start of `tenant-a/x`).
    alts = "|".join(re.escape(n) for n in sorted(set(names), key=len, reverse=True))
    return re.compile(rf"(?<![\w./-])(?:{alts})(?![\w./-])")


def personal(text: str, names: Sequence[str]) -> str:
    """A neutral text with its tokens replaced by `names` (the reader's, in signature order)."""
    if "\x00" not in text:
        return text
    return _TOKEN.sub(lambda m: names[int(m[1])] if int(m[1]) < len(names) else "", text)


def neutral_tree(obj: object, own: OwnNames) -> object:
    """A copy of a structured explanation (dataclasses, lists, dicts, strings) with `own`'s names made
    neutral wherever a string carries them."""
    if isinstance(obj, str):
        return own.neutral(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {f.name: neutral_tree(getattr(obj, f.name), own) for f in dataclasses.fields(obj)}
        return dataclasses.replace(obj, **changes)
    if isinstance(obj, list):
        return [neutral_tree(v, own) for v in obj]
    if isinstance(obj, tuple):
        return tuple(neutral_tree(v, own) for v in obj)
    if isinstance(obj, Mapping):
        return {neutral_tree(k, own): neutral_tree(v, own) for k, v in obj.items()}
    return obj


class NeutralExplanation:
    """An allocator explanation (structured or lazy) seen through `neutral`: computed on first use, like
    the explanation it wraps, then kept."""

    __slots__ = ("_own", "_value", "inner")

    def __init__(self, inner: object, own: OwnNames) -> None:
        self.inner = inner
        self._own = own
        self._value: object = None

    @property
    def computed(self) -> bool:
        return self._value is not None

    def get(self) -> object:
        if self._value is None:
            inner = self.inner
            value = inner.get() if hasattr(inner, "get") else inner
            self._value = neutral_tree(value, self._own)
        return self._value

    def to_dict(self) -> dict[str, Any]:
        got = self.get()
        return got.to_dict() if hasattr(got, "to_dict") else {"text": str(got)}

    def __str__(self) -> str:
        return str(self.get())


__all__ = ["NeutralExplanation", "OwnNames", "neutral_tree", "personal", "token"]
