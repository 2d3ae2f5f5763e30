"""`kdra driver nvml`: the ResourceSlices NVIDIA's DRA driver would publish for the GPUs of this host.

    kdra driver nvml [--node NAME] [--dynamic-mig] [--consumable-shares unlimited|memory|N]
                     [--fixture FILE] [--capture FILE] [-o yaml|json]

Reads NVML through nvidia-ml-py (GPUs, MIG mode, MIG profiles and placements, existing MIG devices) and prints
slices in the same shape as the simulated driver. On a host without an NVIDIA driver it says so and exits 2.
--fixture replays a record written by scripts/capture_nvml_fixture.py (or --capture) instead of the live host.
"""

from __future__ import annotations

import argparse
import json
import math
import socket
import sys
from pathlib import Path
from typing import Any

from kdra.cli.common import add_limit_args, limits
from kdra.errors import InputError


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "driver",
        help="run a DRA driver's discovery on this host and print its slices",
        description=__doc__.splitlines()[0],
    )
    sub = p.add_subparsers(dest="driver_command", metavar="DRIVER")
    n = sub.add_parser(
        "nvml",
        help="NVIDIA GPUs via NVML (gpu.nvidia.com)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    n.add_argument("--node", default=None, help="node (and pool) name; default: this host's name")
    n.add_argument("--dynamic-mig", action="store_true", help="publish as the DynamicMIG feature gate does")
    n.add_argument(
        "--consumable-shares",
        default=None,
        metavar="MODE",
        help="unlimited | memory | N, as the driver's --consumable-shares flag",
    )
    n.add_argument("--fixture", default=None, help="replay a recorded NVML capture instead of the live host")
    n.add_argument("--capture", default=None, help="also write the NVML capture of this host to FILE")
    n.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")
    n.set_defaults(func=_nvml)
    _register_sim(sub)
    p.set_defaults(func=lambda args: (p.print_help(sys.stderr), 2)[1])


def _shares(v: str | None) -> str | int | None:
    if v is None or v in ("unlimited", "memory", "disabled"):
        return None if v == "disabled" else v
    try:
        n = int(v)
    except ValueError:
        n = 0
    if n <= 0:
        raise InputError(
            f"--consumable-shares: Invalid value: {v!r}: unlimited, memory or a positive integer"
        )
    return n


def _nvml(args: argparse.Namespace) -> int:
    from kdra.api.load import dump_json, dump_yaml
    from kdra.drivers.nvml import FixtureNvml, capture, capture_host, render_capture

    shares = _shares(args.consumable_shares)
    if args.fixture:
        fixture = FixtureNvml.from_file(args.fixture)
        try:
            record = capture(fixture)
            record["host"] = fixture.record.get("host")
            slices = render_capture(record, "probe")
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
            raise InputError(
                f"{args.fixture}: not a kdra-nvml-fixture/v1 record: {type(e).__name__}: {e}"
            ) from None
    else:
        record = capture_host()
    if args.capture:
        Path(args.capture).write_text(json.dumps(record, indent=1) + "\n")
    if not record["devices"]:
        raise InputError("NVML reports no GPUs on this host")
    node = (args.node or str(record.get("host") or socket.gethostname())).lower()
    slices = render_capture(record, node, dynamic_mig=args.dynamic_mig, consumable_shares=shares)
    slices = json.loads(json.dumps(slices))  # unshare sub-dicts (no YAML anchors)
    sys.stdout.write(dump_json(slices) if args.output == "json" else dump_yaml(slices))
    return 0


def _register_sim(sub: Any) -> None:
    """`kdra driver sim`: kdra.kube.driver publishes a fleet to a live cluster."""
    from kdra.cli.common import add_fleet_arg, add_gates_arg
    from kdra.cli.conventions import add_flag
    from kdra.cli.kube import add_kube_args

    s = sub.add_parser(
        "sim",
        help="publish a fleet's Nodes and ResourceSlices to a cluster, like the DRA drivers' node plugins",
        description="Create the fleet's Nodes (Ready, with capacity/allocatable) and publish its "
        "ResourceSlices (one pool per node and driver, generation bumped on change, stale slices removed).",
    )
    add_kube_args(s, qps=100, burst=200)
    add_fleet_arg(s, default=None, required=True)
    add_flag(s, "--watch", action="store_true", help="keep the cluster in sync with the fleet file")
    s.add_argument("--interval", type=float, default=5.0, metavar="S", help="--watch period (default 5 s)")
    add_limit_args(s)
    add_gates_arg(s, feature_gates=False)
    s.set_defaults(func=_sim)


def _sim(args: argparse.Namespace) -> int:
    from kdra.cli.kube import make_client
    from kdra.kube.driver import run_driver_sim

    if not (math.isfinite(args.interval) and args.interval > 0):
        # 0 re-published the fleet in a busy loop against the API server; below 0 was an internal error.
        raise InputError(
            f"--interval: Invalid value: {args.interval:g}: must be a positive number of seconds"
        )
    client = make_client(args)
    try:
        run_driver_sim(
            client,
            args.fleet,
            watch=args.watch,
            interval=args.interval,
            kubernetes_version=args.kubernetes_version,
            max_nodes=limits(args).get("max_nodes"),
        )
    except KeyboardInterrupt:
        return 0
    return 0
