"""`kdra top`: a kubectl-top-like view of each node's devices and who holds them."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from kdra.errors import InputError


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "top",
        help="show each node's devices with the claim and pod holding them",
        description="A terminal view, like `kubectl top`, of each node's devices with the claim and pod "
        "holding them and their share of the device's capacity. Reads a live cluster (--kubeconfig, or "
        "$KUBECONFIG, the in-cluster config, ~/.kube/config, as kubectl) or a "
        "file: Kubernetes objects (e.g. `kubectl get nodes,resourceslices,resourceclaims,pods -A -o yaml`) "
        "or a saved scrape of `kdra exporter` (`curl .../metrics > FILE`).",
    )
    from kdra.cli.kube import KUBECONFIG_HELP

    src = p.add_mutually_exclusive_group()
    src.add_argument("--kubeconfig", metavar="FILE", help=KUBECONFIG_HELP)
    src.add_argument("-f", "--filename", metavar="FILE", help="objects (YAML/JSON) or exporter metrics text")
    p.add_argument("--context", help="kubeconfig context (default: current-context)")
    p.add_argument("--node", help="only this node")
    p.add_argument("--all", action="store_true", help="also list free dynamic partitions (MIG profiles)")
    p.add_argument("-w", "--watch", action="store_true", help="refresh in place until interrupted")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes (default: 2)")
    p.set_defaults(func=run)


def _rows_from_file(path: str) -> list[Any]:
    from kdra.api.load import load_text
    from kdra.observe.top import is_metrics_text, rows_from_metrics, rows_from_state, state_from_objects

    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as f:
                text = f.read()
    except OSError as exc:
        raise InputError(f"-f {path}: {exc.strerror or exc}") from None
    if is_metrics_text(text):
        return rows_from_metrics(text)
    return rows_from_state(state_from_objects(load_text(text, path)))


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.live import Live

    from kdra.observe.top import render_table, rows_from_state

    if args.interval <= 0:
        raise InputError(f"--interval: Invalid value: {args.interval}: must be positive")
    console = Console()
    if not console.is_terminal:
        console = Console(width=250)  # piped: full rows, like kubectl, rather than 80 columns
    source = None
    state = None
    if not args.filename:
        from kdra.observe.kube import KubeSource, client_for, wait_ready
        from kdra.observe.model import FleetState

        state = FleetState()
        kinds = ("Node", "ResourceSlice", "ResourceClaim")
        source = KubeSource(client_for(args.kubeconfig, args.context), state, kinds).start()
        if not wait_ready(source, 60):
            source.stop()
            print(f"error: could not read the cluster: {source.problem()}", file=sys.stderr)
            return 1

    def rows() -> list[Any]:
        return rows_from_state(state) if state is not None else _rows_from_file(args.filename)

    try:
        if not args.watch:
            if source is not None:
                source.stop()
            console.print(render_table(rows(), show_all=args.all, node=args.node))
            return 0
        if not console.is_terminal:  # piped: one table per refresh, like `kubectl get -w`
            while True:
                console.print(render_table(rows(), show_all=args.all, node=args.node))
                console.file.flush()
                time.sleep(args.interval)
        with Live(render_table(rows(), show_all=args.all, node=args.node), console=console) as live:
            while True:
                time.sleep(args.interval)
                live.update(render_table(rows(), show_all=args.all, node=args.node))
    except KeyboardInterrupt:
        return 0
    finally:
        if source is not None:
            source.stop()
