"""Malformed Fleet documents get InputError, never a traceback (seeded random documents)."""

from __future__ import annotations

import random
from typing import Any

from kdra.errors import InputError
from kdra.fleets import parse_fleet, render

VALUES: list[Any] = [
    None,
    0,
    -1,
    3,
    1.5,
    True,
    "",
    "x",
    "H100",
    "A100-40GB",
    "L4",
    "MI300X",
    "v6e",
    "4x4",
    "2x4",
    [],
    [1],
    ["a"],
    {},
    {"a": 1},
    "static",
    "dynamic",
    "none",
    "all-1g.10gb",
    ["3g.40gb", "1g.10gb"],
    {"mode": "static", "layout": "all-1g.5gb"},
    {"mode": "consumable-shares", "shares": 2},
    {"zones": ["a"]},
    {"nodesPerRack": 2},
    [{"key": "a", "effect": "NoSchedule"}],
    "1Ti",
    "64",
    "{pool}-{index}",
    "{bogus}",
    "{index:xx}",
    "{",
    129,
    64,
]
POOL_KEYS = [
    "name",
    "count",
    "namePattern",
    "startIndex",
    "names",
    "cpu",
    "memory",
    "pods",
    "labels",
    "topology",
    "accelerator",
    "taints",
    "deviceTaints",
    "maxDevicesPerSlice",
    "junk",
]
ACC_KEYS = ["model", "count", "mig", "sharing", "partition", "topology"]


def test_random_pools_never_crash() -> None:
    rng = random.Random(7)
    ok = 0
    for _ in range(1500):
        pool: dict[str, Any] = {"name": "p", "count": 2}
        for k in rng.sample(POOL_KEYS, rng.randint(0, 5)):
            pool[k] = rng.choice(VALUES)
        if rng.random() < 0.7:
            acc = {k: rng.choice(VALUES) for k in rng.sample(ACC_KEYS, rng.randint(1, 4))}
            if rng.random() < 0.5:
                acc["model"] = rng.choice(["H100", "A100-40GB", "L4", "MI300X", "v6e", "v5p"])
            if rng.random() < 0.5:
                acc["count"] = rng.choice([1, 2, 4, 8])
            pool["accelerator"] = acc
        doc = {
            "apiVersion": "kdra.dev/v1alpha1",
            "kind": "Fleet",
            "metadata": {"name": "f"},
            "spec": {"pools": [pool]},
        }
        try:
            render(parse_fleet(doc))
            ok += 1
        except InputError as e:
            assert str(e).startswith("Fleet f")
    assert ok > 50  # the generator also produces valid fleets
