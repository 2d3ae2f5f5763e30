"""`kdra exporter`: claim-level Prometheus metrics from a live cluster or a running simulation."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from typing import Any

from kdra.cli.common import add_limit_args, limits
from kdra.errors import InputError


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "exporter",
        help="serve claim-level Prometheus metrics (who holds which device, stranded memory, why pods wait)",
        description="Serve Prometheus metrics over HTTP: one series per allocated device with its claim, "
        "pod, driver, pool, device, request, node, DeviceClass and product (dcgm-exporter-joinable dra_* "
        "labels), per-device allocation, fleet aggregates (devices and GPU-equivalents allocated, "
        "stranded memory), "
        "pending claims and pods by reason, scheduling latency and queue shares. Metrics are kept current "
        "from watches, never re-listed per scrape. Without --from-simulation it follows the cluster of "
        "--kubeconfig, $KUBECONFIG, the in-cluster config or ~/.kube/config. See docs/observability.md.",
    )
    from kdra.cli.common import add_fleet_arg, add_workload_arg
    from kdra.cli.conventions import add_flag
    from kdra.cli.kube import KUBECONFIG_HELP
    from kdra.cli.serving import add_serving_args

    src = p.add_mutually_exclusive_group()
    add_flag(src, "--kubeconfig", help=KUBECONFIG_HELP)
    src.add_argument(
        "--from-simulation",
        action="store_true",
        help="run `kdra simulate`'s DRA model in-process and export its fleet as it runs",
    )
    add_flag(p, "--context", help="kubeconfig context (default: current-context)")
    add_fleet_arg(p, what="simulation fleet")
    add_workload_arg(p)
    p.add_argument("--seed", type=int, default=0, help="simulation seed (default: 0)")
    p.add_argument(
        "--speed",
        type=float,
        default=3600.0,
        help="simulated seconds per wall second (default: 3600; 0: as fast as possible)",
    )
    p.add_argument(
        "--listen", default="127.0.0.1:9405", metavar="HOST:PORT", help="address (default: 127.0.0.1:9405)"
    )
    p.add_argument(
        "--once",
        action="store_true",
        help="print the metrics once to stdout and exit instead of serving them: a cluster's after the "
        "initial list; a simulation's at the moment --at names",
    )
    p.add_argument(
        "--at",
        default="peak",
        metavar="DURATION|peak|end",
        help="--once --from-simulation: the simulated moment to print: a time from the start (12h, 3d), "
        "`peak` (the instant the most GPU-equivalents were allocated; the default) or `end` (when the "
        "workload is over, often an empty fleet)",
    )
    add_limit_args(p, nodes=True, pods=True)
    add_flag(p, "--verbose", help="-v info, -vv debug (API requests)")
    add_serving_args(p)
    p.set_defaults(func=run)


class _Snapshot:
    """The exporter's text at the simulated moment --at names, taken while the simulation runs."""

    def __init__(self, state: Any, at: str) -> None:
        from kdra.api.durations import parse_duration

        self.state = state
        self.mode = at if at in ("peak", "end") else "time"
        self.until = parse_duration(at, "--at") if self.mode == "time" else 0.0
        self.text: bytes | None = None
        self.when = 0.0
        self.best = -1.0

    def allocated(self) -> float:
        with self.state.lock:
            return float(sum(row[3] for row in self.state.sums.groups.values()))

    def __call__(self, now: float) -> bool:
        if self.mode == "time":
            if now > self.until:
                return True  # the snapshot taken at the last instant up to --at stands
            self.text, self.when = self.state.render(), now
            return False
        if self.mode == "peak":
            value = self.allocated()
            if value > self.best:
                self.best = value
                self.text, self.when = self.state.render(), now
        return False


def run(args: argparse.Namespace) -> int:
    from kdra.cli.serving import serving_options
    from kdra.observe.model import FleetState
    from kdra.observe.server import MetricsServer, listen_error, parse_listen

    address = parse_listen(args.listen)
    options = serving_options(args)
    verbose = getattr(args, "verbose", 0)
    logging.basicConfig(
        level=logging.DEBUG if verbose > 1 else logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    if args.speed < 0:
        raise InputError(f"--speed: Invalid value: {args.speed}: must not be negative")
    state = FleetState()
    stop: list[Any] = []
    source = None
    if not args.from_simulation:
        from kdra.observe.kube import KubeSource, client_for, wait_ready

        source = KubeSource(
            client_for(args.kubeconfig, args.context), state, log_denials=not args.once
        ).start()
        stop.append(source.stop)
        ready = source.ready
        if args.once:
            if not wait_ready(source, 120):
                source.stop()
                print(f"error: could not read the cluster: {source.problem()}", file=sys.stderr)
                return 1
            source.stop()
            sys.stdout.buffer.write(state.render())
            return 0
    else:
        from kdra.observe.sources import SimulationSource

        snapshot = _Snapshot(state, args.at) if args.once else None
        sim = SimulationSource(
            state, args.fleet, args.workload, args.seed, speed=0 if args.once else args.speed, **limits(args)
        )
        if snapshot is not None:
            from kdra.api.durations import format_duration

            sim.on_instant = snapshot
            sim.run()
            if sim.error is not None:
                raise sim.error
            if snapshot.text is None or snapshot.mode == "end":
                snapshot.text, snapshot.when = state.render(), sim.simulated_now
            what = {"peak": f"peak allocation, {max(snapshot.best, 0):,.1f} GPU-equivalents", "end": "end"}
            print(
                f"kdra exporter: metrics at simulated time {format_duration(snapshot.when)} "
                f"({what.get(snapshot.mode, '--at ' + args.at)})",
                file=sys.stderr,
            )
            sys.stdout.buffer.write(snapshot.text)
            return 0
        sim.start()
        stop.append(sim.stop)
        ready = threading.Event()
        ready.set()
    try:
        server = MetricsServer(state, address, options=options)
    except OSError as exc:
        for s in stop:
            s()
        raise listen_error("--listen", args.listen, exc) from None
    server.health_detail = "waiting for the initial list"
    if source is not None:
        kube_source = source

        def detail() -> str | None:
            if kube_source.failed.is_set():  # listed once, but a watch (or relist) is refused: going stale
                return f"forbidden: {kube_source.problem()}"
            if server.ready.is_set():
                return None
            return f"waiting for the initial list ({kube_source.problem()})"

        server.checks.add("readyz", "ready", detail)

    def mark_ready() -> None:
        ready.wait()
        server.warm()  # render and compress once before the first scrape
        server.ready.set()

    threading.Thread(target=mark_ready, daemon=True).start()
    print(f"kdra exporter: serving {server.url}", file=sys.stderr, flush=True)
    previous = signal.signal(
        signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start()
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)  # the process's again (kdra.kube.run does the same)
        server.server_close()
        for s in stop:
            s()
    return 0
