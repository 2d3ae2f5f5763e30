"""`kdra top`: a kubectl-top-like view of each node's devices and who holds them."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from kdra.cli.common import add_namespace_args
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
    from kdra.cli.conventions import add_flag, add_output
    from kdra.cli.kube import KUBECONFIG_HELP

    src = p.add_mutually_exclusive_group()
    add_flag(src, "--kubeconfig", help=KUBECONFIG_HELP)
    add_flag(
        src,
        "--filename",
        help="objects (YAML/JSON) or exporter metrics text; '-' reads stdin; repeatable (merged)",
    )
    add_flag(p, "--context", help="kubeconfig context (default: current-context)")
    p.add_argument("--node", help="only this node")
    p.add_argument("--all", action="store_true", help="also list free dynamic partitions (MIG profiles)")
    add_namespace_args(p, "claims and pending pods")
    add_output(
        p, ("table",), help="wide: with driver and pool; name: driver/pool/device of each device in use"
    )
    add_flag(p, "--watch", action="store_true", help="refresh in place until interrupted")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes (default: 2)")
    p.set_defaults(func=run)


def _read_files(paths: list[str]) -> tuple[list[Any], list[Any]]:
    """Every -f: saved scrapes are read together, object files are merged into one fleet; a scrape and
    object files together are refused (they describe the fleet twice)."""
    from kdra.api.load import load_text, read_stdin
    from kdra.observe.top import (
        is_metrics_text,
        pending_from_metrics,
        pending_from_state,
        rows_from_metrics,
        rows_from_state,
        state_from_objects,
    )

    scrapes: list[str] = []
    objs: list[Any] = []
    for path in paths:
        try:
            if path == "-":
                text = read_stdin()
            else:
                with open(path, encoding="utf-8") as f:
                    text = f.read()
        except OSError as exc:
            raise InputError(f"-f {path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            raise InputError(f"-f {path}: not UTF-8 text (byte {exc.start})") from None
        source = "<stdin>" if path == "-" else path
        if is_metrics_text(text):
            scrapes.append(text)
            continue
        found = load_text(text, source)
        if not found:
            raise InputError(f"no objects in {source}: expected Kubernetes objects or metrics")
        objs.extend(found)
    if objs:
        from kdra.validation.admission import admit

        admit(objs, cel=False, list_type_attributes=True)
    if scrapes and objs:
        raise InputError(
            "-f: give either saved scrapes or Kubernetes objects, not both (they describe the fleet twice)"
        )
    if scrapes:
        text = "\n".join(scrapes)
        return rows_from_metrics(text), pending_from_metrics(text)
    state = state_from_objects(objs)
    return rows_from_state(state), pending_from_state(state)


def run(args: argparse.Namespace) -> int:
    from rich.live import Live

    from kdra.cli.common import namespace_filter
    from kdra.cli.output import console as make_console
    from kdra.observe.top import device_names, pending_from_state, render_table, rows_from_state

    if args.interval <= 0:
        raise InputError(f"--interval: Invalid value: {args.interval}: must be positive")
    namespace = namespace_filter(args)
    console = make_console()
    if not console.is_terminal:
        console = make_console(width=250)  # piped: full rows, like kubectl, rather than 80 columns
    source = None
    state = None
    if not args.filename:
        from kdra.observe.kube import KubeSource, client_for, wait_ready
        from kdra.observe.model import FleetState

        state = FleetState()
        kinds = ("Node", "ResourceSlice", "ResourceClaim", "Pod")
        source = KubeSource(
            client_for(args.kubeconfig, args.context), state, kinds, log_denials=False
        ).start()
        if not wait_ready(source, 60):
            source.stop()
            print(f"error: could not read the cluster: {source.problem()}", file=sys.stderr)
            return 1

    def read() -> tuple[list[Any], list[Any]]:
        if state is not None:
            return rows_from_state(state), pending_from_state(state)
        return _read_files(args.filename)

    def view() -> Any:
        rows, pending = read()
        if namespace is not None:
            pending = [p for p in pending if p.pod.split("/", 1)[0] == namespace]
        if args.node is not None and args.node not in {r.node for r in rows}:
            raise _UnknownNode(args.node)
        if args.output == "name":
            return "\n".join(device_names(rows, args.node, namespace))
        return render_table(
            rows,
            show_all=args.all,
            node=args.node,
            pending=pending if args.node is None else [],
            wide=args.output == "wide",
            namespace=namespace,
        )

    try:
        if not args.watch:
            if source is not None:
                source.stop()
            out = view()
            if isinstance(out, str):
                if out:
                    sys.stdout.write(out + "\n")
            else:
                console.print(out)
            return 0
        if not console.is_terminal:  # piped: one table per refresh, like `kubectl get -w`
            while True:
                console.print(view())
                console.file.flush()
                time.sleep(args.interval)
        with Live(view(), console=console) as live:
            while True:
                time.sleep(args.interval)
                live.update(view())
    except _UnknownNode as exc:
        print(
            f'error: node "{exc.args[0]}" not found (no devices or claims on a node of that name)',
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        if source is not None:
            source.stop()


class _UnknownNode(Exception):
    pass
