"""Quantity against the real Go resource.Quantity: 3,500 strings (upstream's test table, signed
variants, random numbers with every suffix, scanner-alphabet junk) as kube-apiserver 1.36.3 decoded
and printed them (recorded by record_go_quantities.py into data/go_quantities.yaml).

The strings reached Go through JSON, whose decoder trims surrounding whitespace before ParseQuantity,
so they are compared through `parse_quantity_any` (the object-field path); `Quantity.parse` is the
strict ParseQuantity and rejects " 1".
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kdra.api.quantity import Quantity, parse_quantity_any

RECORDED = Path(__file__).resolve().parent / "data" / "go_quantities.yaml"
ROWS: list[tuple[str, str | None]] = [(r[0], r[1]) for r in yaml.safe_load(RECORDED.read_text())]


def test_recorded_corpus_size() -> None:
    assert len(ROWS) > 3000
    assert sum(1 for _, out in ROWS if out is None) > 100  # rejections are covered too


def test_parse_and_print_like_go() -> None:
    mismatches = []
    for text, go_printed in ROWS:
        try:
            printed: str | None = str(parse_quantity_any(text))
        except ValueError:
            printed = None
        if printed != go_printed:
            mismatches.append((text, go_printed, printed))
    assert mismatches == []


@pytest.mark.parametrize("text", [" 1", "1 ", "+1 "])
def test_strict_parse_rejects_whitespace(text: str) -> None:
    with pytest.raises(ValueError):
        Quantity.parse(text)
    assert parse_quantity_any(text) == Quantity.parse("1")
