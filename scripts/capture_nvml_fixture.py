#!/usr/bin/env python3
"""Record what NVML reports on this GPU host into kdra's NVML fixture format (kdra-nvml-fixture/v1).

    python scripts/capture_nvml_fixture.py -o tests/drivers/fixtures/nvml-<host>.json

Needs nvidia-ml-py (`pip install nvidia-ml-py`) and an NVIDIA driver. The record holds what the NVIDIA DRA
driver
reads: devices, MIG mode, GPU-instance profiles with their possible placements, existing MIG devices, and the
PCIe root / NUMA node from sysfs. `kdra driver nvml --fixture FILE` and tests/drivers replay it.
Without kdra installed it still runs from a checkout (it puts ../src on sys.path).
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from kdra.drivers.nvml import capture_host
from kdra.errors import KdraError


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", default="-", help="file to write (default: stdout)")
    ap.add_argument("--sysfs", default="/sys", help="sysfs root (default /sys)")
    args = ap.parse_args()
    try:
        record = capture_host(args.sysfs)
    except KdraError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    record["host"] = socket.gethostname()
    record["capturedAt"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    record["synthetic"] = False
    text = json.dumps(record, indent=1) + "\n"
    if args.output == "-":
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text)
        print(f"wrote {args.output}: {len(record['devices'])} GPU(s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
