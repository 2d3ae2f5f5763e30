"""Record how the real Go resource.Quantity (inside kube-apiserver 1.36) parses and prints quantity
strings, for test_api_go_quantities.py.

Usage (from the repository root): .venv/bin/python tests/api/record_go_quantities.py

Every candidate string goes into the capacity of a ResourceSlice device that is created with a
server-side dry run; the API server decodes it with ParseQuantity and answers with the object as it
would store it, i.e. each quantity as Go's String() prints it. A string the API server cannot decode
fails the whole request, so strings are first sent in batches and a failing batch is split until the
culprits are alone. Output: tests/api/data/go_quantities.yaml, a list of [input, printed] where printed
is null for strings the API server rejected.
"""

from __future__ import annotations

import random
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))  # the test support, `support`

from kdra.cluster.store import StoreError  # noqa: E402
from kdra.kube.resources import resource_path  # noqa: E402
from support.controlplane import ControlPlane, ensure_binaries  # noqa: E402

OUT = HERE / "data" / "go_quantities.yaml"
PER_DEVICE = 32
PER_SLICE = 32 * 64


def candidates() -> list[str]:
    from test_api_quantity import INVALID, PARSE_EMIT, PARSE_TABLE, STRING_TABLE

    base = [t for t, _ in PARSE_TABLE] + [t for t, _ in PARSE_EMIT] + INVALID
    base += [e for _, e, _ in STRING_TABLE] + [a for _, _, a in STRING_TABLE if a]
    out = set(base) | {"-" + t for t in base} | {"+" + t for t in base}
    out |= {
        "0",
        "-0",
        "+0",
        ".",
        "-.",
        "+",
        "-",
        "0.0",
        "00",
        "010",
        "1e0",
        "1E-0",
        "1e+3",
        "1Ki0",
        "8Ei",
        "9Ei",
    }
    rng = random.Random(20260)
    suffixes = ["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
    suffixes += ["e3", "E6", "e-3", "E-9", "e+2", "e0", "e18", "e21", "e-12", "E-10"]
    for _ in range(3000):
        sign = rng.choice(["", "", "", "-", "+"])
        whole = "".join(
            rng.choice("0123456789") for _ in range(rng.choice([0, 1, 1, 2, 3, 4, 6, 9, 12, 16, 19, 22]))
        )
        frac = ""
        if rng.random() < 0.4:
            frac = "." + "".join(
                rng.choice("0123456789") for _ in range(rng.choice([0, 1, 2, 3, 5, 9, 11, 14]))
            )
        if not whole and not frac:
            whole = "1"
        out.add(sign + whole + frac + rng.choice(suffixes))
    for _ in range(300):  # junk from the scanner's alphabet
        out.add("".join(rng.choice("0123456789.+-eEinumkKMGTP") for _ in range(rng.randint(1, 6))))
    return sorted(out)


def _slice(values: list[str]) -> dict[str, Any]:
    devices = []
    for d in range(0, len(values), PER_DEVICE):
        chunk = values[d : d + PER_DEVICE]
        devices.append(
            {"name": f"d{d // PER_DEVICE}", "capacity": {f"c{i}": {"value": v} for i, v in enumerate(chunk)}}
        )
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "quantities"},
        "spec": {
            "driver": "q.example.com",
            "pool": {"name": "p", "generation": 0, "resourceSliceCount": 1},
            "allNodes": True,
            "devices": devices,
        },
    }


def _send(client: Any, values: list[str], out: dict[str, str | None]) -> None:
    try:
        stored = client.request(
            "POST",
            resource_path("ResourceSlice", None, api_version="resource.k8s.io/v1"),
            _slice(values),
            params={"dryRun": "All"},
        )
    except StoreError as e:
        if len(values) == 1:
            out[values[0]] = None
            return
        if e.code not in (400, 422):
            raise
        mid = len(values) // 2
        _send(client, values[:mid], out)
        _send(client, values[mid:], out)
        return
    for d, dev in enumerate(stored["spec"]["devices"]):
        for i, cap in dev["capacity"].items():
            out[values[d * PER_DEVICE + int(i[1:])]] = cap["value"]


def main() -> None:
    bin_dir = ensure_binaries(sys.stderr)
    values = candidates()
    out: dict[str, str | None] = {}
    with tempfile.TemporaryDirectory(prefix="kdra-quantities-") as work:
        cp = ControlPlane(bin_dir, Path(work)).start()
        try:
            client = cp.client()
            for start in range(0, len(values), PER_SLICE):
                _send(client, values[start : start + PER_SLICE], out)
        finally:
            cp.stop()
    header = (
        f"# Recorded by tests/api/record_go_quantities.py: how kube-apiserver {bin_dir.name} (Go's\n"
        "# resource.Quantity) prints each quantity string; null = rejected. Do not edit by hand.\n"
    )
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(
        header + yaml.safe_dump([[k, out[k]] for k in values], default_flow_style=None, width=1 << 20)
    )
    print(f"wrote {len(values)} quantities ({sum(v is None for v in out.values())} rejected) to {OUT}")


if __name__ == "__main__":
    main()
