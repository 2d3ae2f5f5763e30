"""Prometheus text exposition format 0.0.4, written by hand.

Why not prometheus_client: its collectors build a Sample object per series on every scrape; for the 40,000
per-device series of a large fleet that is several hundred milliseconds and a few hundred megabytes of
garbage per scrape (benchmarks/bench_exporter.py measures both). Here every series line is a string built
once, when the object it describes changes, and a scrape only joins strings.

Format (https://prometheus.io/docs/instrumenting/exposition_formats/): `# HELP`, `# TYPE`, then every
sample of the family, contiguous; label values escape backslash, double quote and newline.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def escape(value: str) -> str:
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return value


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def fmt_value(v: float | int) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return repr(round(v, 9))


def labels(names: Sequence[str], values: Sequence[str]) -> str:
    """`{a="x",b="y"}` (empty string for no labels)."""
    if not names:
        return ""
    return "{" + ",".join(f'{n}="{escape(v)}"' for n, v in zip(names, values, strict=True)) + "}"


def line(name: str, label_text: str, value: float | int) -> str:
    return f"{name}{label_text} {fmt_value(value)}\n"


def header(name: str, kind: str, help_text: str) -> str:
    return f"# HELP {name} {escape_help(help_text)}\n# TYPE {name} {kind}\n"


class SeriesTable:
    """Series lines keyed by the object they describe, kept in buckets whose joined, encoded bytes are cached:
    a change re-joins one bucket, a scrape only copies bytes. Dict-like: `table[key] = lines`, `pop`."""

    __slots__ = ("_blobs", "_buckets", "_dirty", "_n", "_part")

    def __init__(self, buckets: int = 256, part: int | None = None) -> None:
        # `part`: bucket by this element of a tuple key (a device's pool), so that similar lines stay
        # together and the exposition compresses well
        self._n = buckets
        self._part = part
        self._buckets: list[dict[Any, str]] = [{} for _ in range(buckets)]
        self._blobs: list[bytes] = [b""] * buckets
        self._dirty: set[int] = set()

    def __setitem__(self, key: Any, text: str) -> None:
        i = self._index(key)
        self._buckets[i][key] = text
        self._dirty.add(i)

    def __getitem__(self, key: Any) -> str:
        return self._buckets[self._index(key)][key]

    def __contains__(self, key: Any) -> bool:
        return key in self._buckets[self._index(key)]

    def __len__(self) -> int:
        return sum(len(b) for b in self._buckets)

    def _index(self, key: Any) -> int:
        return hash(key if self._part is None else key[self._part]) % self._n

    def pop(self, key: Any, default: str | None = None) -> str | None:
        i = self._index(key)
        text = self._buckets[i].pop(key, None)
        if text is None:
            return default
        self._dirty.add(i)
        return text

    def values(self) -> Iterable[str]:
        for b in self._buckets:
            yield from b.values()

    def blobs(self) -> list[bytes]:
        for i in self._dirty:
            self._blobs[i] = "".join(self._buckets[i].values()).encode()
        self._dirty.clear()
        return self._blobs


class Histogram:
    """A cumulative histogram with fixed buckets and optional labels (one child per label tuple)."""

    def __init__(self, name: str, help_text: str, buckets: Sequence[float], label_names: Sequence[str] = ()):
        self.name = name
        self.help = help_text
        self.buckets = tuple(sorted(buckets))
        self.label_names = tuple(label_names)
        # label values -> (bucket counts (non-cumulative, last = +Inf), sum, count)
        self.children: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}

    def observe(self, value: float, label_values: Sequence[str] = ()) -> None:
        key = tuple(label_values)
        child = self.children.get(key)
        if child is None:
            child = self.children[key] = ([0] * (len(self.buckets) + 1), [0.0, 0.0])
        counts, acc = child
        i = 0
        for i, b in enumerate(self.buckets):  # noqa: B007 - i is used after the loop
            if value <= b:
                break
        else:
            i = len(self.buckets)
        counts[i] += 1
        acc[0] += value
        acc[1] += 1

    def count(self, label_values: Sequence[str] = ()) -> int:
        child = self.children.get(tuple(label_values))
        return int(child[1][1]) if child else 0

    def render(self) -> str:
        out = [header(self.name, "histogram", self.help)]
        for key in sorted(self.children):
            counts, acc = self.children[key]
            base = [f'{n}="{escape(v)}"' for n, v in zip(self.label_names, key, strict=True)]
            cum = 0
            for b, c in zip((*self.buckets, math.inf), counts, strict=True):
                cum += c
                le = "+Inf" if math.isinf(b) else fmt_value(float(b))
                lbl = ",".join([*base, 'le="' + le + '"'])
                out.append(f"{self.name}_bucket{{{lbl}}} {cum}\n")
            suffix = "{" + ",".join(base) + "}" if base else ""
            out.append(f"{self.name}_sum{suffix} {fmt_value(acc[0])}\n")
            out.append(f"{self.name}_count{suffix} {int(acc[1])}\n")
        return "".join(out)


def parse_text(text: str) -> Iterable[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of every sample in a text exposition (for `kdra top -f` and the tests)."""
    for raw in text.splitlines():
        if not raw or raw.startswith("#"):
            continue
        brace = raw.find("{")
        if brace < 0:
            name, _, rest = raw.partition(" ")
            yield name, {}, _parse_float(rest.split()[0])
            continue
        name = raw[:brace]
        lbls: dict[str, str] = {}
        i = brace + 1
        n = len(raw)
        while i < n and raw[i] != "}":
            eq = raw.index("=", i)
            key = raw[i:eq].strip().lstrip(",").strip()
            j = eq + 2  # skip ="
            buf: list[str] = []
            while raw[j] != '"':
                if raw[j] == "\\":
                    nxt = raw[j + 1]
                    buf.append("\n" if nxt == "n" else nxt)
                    j += 2
                else:
                    buf.append(raw[j])
                    j += 1
            lbls[key] = "".join(buf)
            i = j + 1
            if i < n and raw[i] == ",":
                i += 1
        tail = raw[i + 1 :].split()
        yield name, lbls, _parse_float(tail[0])


def _parse_float(s: str) -> float:
    if s == "+Inf":
        return math.inf
    if s == "-Inf":
        return -math.inf
    return float(s)
