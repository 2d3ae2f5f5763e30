"""Kubernetes-mode commands: `kdra scheduler`, `kdra explain`, `kdra export` (kdra.kube does the work).

kdra scheduler --kubeconfig FILE [--scheduler-name kdra] [--kube-api-qps N --kube-api-burst N]
               [--leader-elect] [--leader-elect-lease-duration S ...]
kdra explain [POD] [-n NAMESPACE | -A] --kubeconfig FILE [-o text|json] [--nodes N | -v]
kdra export --kubeconfig FILE [--output-file FILE] [-o yaml|json] [-n NAMESPACE | -A]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

from kdra.cli.common import (
    PLACEMENTS,
    add_device_preference_arg,
    add_gates_arg,
    add_namespace_args,
    reporting_cel,
)
from kdra.cli.conventions import add_flag, add_output
from kdra.errors import InputError

KUBECONFIG_HELP = (
    "kubeconfig file (default, as kubectl and client-go: $KUBECONFIG, merged; the in-cluster config in a "
    "pod; ~/.kube/config)"
)


def add_context_args(p: argparse.ArgumentParser | Any, *, kubeconfig_help: str = KUBECONFIG_HELP) -> None:
    """--kubeconfig FILE and --context CONTEXT, as every command that reads a cluster spells them."""
    from kdra.cli.conventions import add_flag

    add_flag(p, "--kubeconfig", default=None, help=kubeconfig_help)
    add_flag(p, "--context", default=None, help="kubeconfig context (default: its current-context)")


def add_kube_args(
    p: argparse.ArgumentParser, *, required: bool = True, qps: float = 50, burst: int = 100
) -> None:
    """--kubeconfig/--context (every command finds its cluster by the same loading rules, see
    kdra.kube.kubeconfig; `required` is kept for callers and means nothing more) and the client's rate
    limit."""
    add_context_args(p)
    p.add_argument(
        "--kube-api-qps", type=float, default=qps, metavar="N", help=f"client QPS (default {qps:g})"
    )
    p.add_argument(
        "--kube-api-burst", type=int, default=burst, metavar="N", help=f"client burst (default {burst})"
    )


def make_client(args: argparse.Namespace, component: str = "", **kw: Any) -> Any:
    """The API client of a command's --kubeconfig/--context (and --kube-api-qps/burst when it has them);
    `component` ("scheduler/<identity>") goes into the User-Agent, so the API server's audit log tells
    replicas apart."""
    from kdra import __version__
    from kdra.kube.client import KubeClient

    qps = getattr(args, "kube_api_qps", None)
    burst = getattr(args, "kube_api_burst", None)
    if qps is not None and burst is not None:
        if qps < 0 or burst < 1:
            raise InputError("--kube-api-qps must not be negative and --kube-api-burst must be at least 1")
        kw.setdefault("qps", qps)
        kw.setdefault("burst", burst)
    if component:
        kw.setdefault("user_agent", f"kdra/{__version__} ({component})")
    return KubeClient.from_config(
        getattr(args, "kubeconfig", None), context=getattr(args, "context", None), **kw
    )


def register(subparsers: Any) -> None:
    s = subparsers.add_parser(
        "scheduler",
        help="schedule a cluster's pods (spec.schedulerName) with kdra, against its API server",
        description="Run kdra's scheduler as a secondary scheduler of a Kubernetes cluster: it schedules the "
        "pods whose spec.schedulerName names it, writes DRA allocations to ResourceClaim status and binds "
        "through pods/binding. ResourceClaims from templates are created by kube-controller-manager.",
    )
    add_kube_args(s)
    s.add_argument("--scheduler-name", default="kdra", help="spec.schedulerName to serve (default: kdra)")
    s.add_argument("--leader-elect", action="store_true", help="run only while holding a Lease")
    s.add_argument("--leader-elect-lease-duration", type=float, default=15.0, metavar="S")
    s.add_argument("--leader-elect-renew-deadline", type=float, default=10.0, metavar="S")
    s.add_argument("--leader-elect-retry-period", type=float, default=2.0, metavar="S")
    s.add_argument(
        "--leader-elect-resource-name", default=None, help="Lease name (default: the scheduler name)"
    )
    s.add_argument("--leader-elect-resource-namespace", default="kube-system")
    s.add_argument("--identity", default=None, help="leader-election identity (default: host_pid)")
    s.add_argument(
        "--resync",
        type=float,
        default=0.0,
        metavar="S",
        help="also relist every S seconds (default 0: never, as kube-scheduler's informers: a watch resumes "
        "from its resourceVersion and relists on 410 Gone; a periodic relist re-reads every pod and claim)",
    )
    s.add_argument(
        "--bind-workers",
        type=int,
        default=128,
        metavar="N",
        help="binding cycles in flight at once, beside the loop (0: bind in the loop; default 128)",
    )
    s.add_argument(
        "--owned-nodes",
        default=None,
        metavar="SELECTOR",
        help="partition with kube-scheduler: place pods only on the nodes this label selector matches "
        "(taint them kdra.dev/scheduler=<scheduler name>:NoSchedule to keep kube-scheduler off)",
    )
    s.add_argument(
        "--owned-device-classes",
        default=None,
        metavar="NAME,...",
        help="partition with kube-scheduler: allocate only claims whose requests name these DeviceClasses",
    )
    add_gates_arg(s)
    s.add_argument(
        "--filter-errors",
        choices=("fail-pod", "skip-node"),
        default="fail-pod",
        help="a Filter error on a node (a CEL runtime error in a selector): fail the pod's scheduling "
        "attempt (SchedulerError), as kube-scheduler does (default), or rule out only that node",
    )
    s.add_argument("--scoring", choices=("LeastAllocated", "MostAllocated"), default="LeastAllocated")
    # The scheduling session (kdra.scheduler.gangqueues), as `kdra simulate` runs it; a SchedulingShard
    # object on the cluster sets these too (its fields win over the flags).
    add_flag(
        s,
        "--placement",
        choices=PLACEMENTS,
        default="upstream",
        help="where devices go among nodes that fit (default upstream: NodeResourcesFit, first fitting; "
        "kdra: kdra's replay policy, learning the workload from the pods it sees, docs/replay.md)",
    )
    s.add_argument(
        "--gang-timeout", type=float, default=None, metavar="S", help="default scheduleTimeout of gangs"
    )
    s.add_argument(
        "--stale-gang-grace",
        type=float,
        default=60.0,
        metavar="S",
        help="evict a gang running below its minimum for S seconds, to place it again whole (default 60)",
    )
    s.add_argument(
        "--preemption-wait",
        type=float,
        default=120.0,
        metavar="S",
        help="how long a preemptor's binding waits for its victims' devices (default 120)",
    )
    s.add_argument(
        "--gang-device-search",
        action="store_true",
        help="when a gang member fits nowhere, re-assign the devices of members waiting at Permit "
        "(kdra.scheduler.gangsearch; opt-in, bounded)",
    )
    s.add_argument("--no-reclaim", action="store_true", help="do not reclaim across queues")
    s.add_argument("--no-preempt", action="store_true", help="do not preempt lower-priority jobs")
    add_device_preference_arg(s, "the Scheduled Event says whether the preference or the rules decided")
    s.add_argument(
        "--metrics-listen",
        metavar="HOST:PORT",
        default=None,
        help="serve /metrics (kdra exporter's metrics and the scheduling-attempt histogram), /healthz and "
        "/readyz (informers synced, leader or standby) here, from start-up (default: not served)",
    )
    s.add_argument(
        "--cel-attempt-budget",
        type=int,
        default=2_000_000,
        metavar="UNITS",
        help="CEL cost units one scheduling attempt may spend on selector results not evaluated before; a "
        "pod that needs more waits behind the others and goes on later (default 2,000,000; 0: unbounded)",
    )
    s.add_argument(
        "--cel-run-budget",
        type=int,
        default=4_000_000,
        metavar="UNITS",
        help="the same for one batch of attempts, after which new events are taken in (default 4,000,000)",
    )
    from kdra.cli.serving import add_serving_args

    add_serving_args(s)
    add_flag(s, "--verbose", help="-v info, -vv debug (API requests)")
    s.set_defaults(func=_scheduler)

    e = subparsers.add_parser(
        "explain",
        help="say why a pod does not fit: nodes grouped by reason, then the nearest nodes, on a live cluster",
        description="Explain why a pod does or does not fit: every node is checked as kube-scheduler's "
        "filters would (selectors, affinity, taints, resources), then for its ResourceClaims by kdra's "
        "allocator; the nodes are grouped by reason, and the nearest ones shown in full (which selector, "
        "counter, taint or constraint stopped which device). Without POD, every pending pod of the "
        "namespace (-A: of every namespace). Read-only.",
    )
    e.add_argument("pod", metavar="POD", nargs="?", default=None)
    add_namespace_args(e, "pending pods")
    add_kube_args(e)
    add_gates_arg(e)
    add_output(e, ("text", "json"))
    detail = e.add_mutually_exclusive_group()
    add_flag(
        detail, "--nodes", type=int, default=3, help="nearest nodes to detail after the summary (default 3)"
    )
    add_flag(detail, "--verbose", help="detail every node")
    e.set_defaults(func=reporting_cel("kdra explain", _explain))

    x = subparsers.add_parser(
        "export",
        help="write a cluster's DRA objects to a file that kdra allocate and kdra simulate accept",
        description="Write the cluster's Nodes, DeviceClasses, ResourceSlices, ResourceClaims, "
        "ResourceClaimTemplates and Pods (read-only) as a v1 List.",
    )
    add_kube_args(x)
    x.add_argument(
        "--output-file",
        dest="output_file",
        default=None,
        metavar="FILE",
        help="file to write (default '-': stdout)",
    )
    add_output(x, ("yaml", "json"), default="", help="default: by the file's suffix, else yaml")
    add_namespace_args(x, "claims, templates and pods")
    x.set_defaults(func=_export)


# -- scheduler ------------------------------------------------------------------------------------------


def _scheduler(args: argparse.Namespace) -> int:
    from kdra.cli.common import feature_gates
    from kdra.kube.leader import LeaderElector
    from kdra.kube.partition import Partition
    from kdra.kube.run import run_scheduler
    from kdra.kube.scheduler import default_identity
    from kdra.scheduler.gangqueues import GangQueueOptions
    from kdra.scheduler.plugins.noderesources import ScoringStrategy
    from kdra.scheduler.scheduler import SchedulerConfig

    logging.basicConfig(
        level=logging.DEBUG if args.verbose > 1 else logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    gates = feature_gates(args)
    _check_scheduler_flags(args)
    partition = Partition.parse(args.owned_nodes, args.owned_device_classes)
    config = SchedulerConfig(
        scoring=ScoringStrategy(type=args.scoring),
        features=gates,
        scheduler_name=args.scheduler_name,
        device_preference=args.device_preference,
        cel_attempt_budget=args.cel_attempt_budget or None,
        cel_run_budget=args.cel_run_budget or None,
        filter_errors=args.filter_errors,
    )
    endpoint = None
    if args.metrics_listen:
        from kdra.cli.serving import serving_options
        from kdra.observe.server import listen_error, parse_listen
        from kdra.observe.sources import SchedulerEndpoint

        address = parse_listen(args.metrics_listen, "--metrics-listen")
        options = serving_options(args)
        try:  # before the lease: probes of a standby are answered too
            endpoint = SchedulerEndpoint(address, options)
        except OSError as exc:
            raise listen_error("--metrics-listen", args.metrics_listen, exc) from None
    identity = args.identity or default_identity()
    client = make_client(args, f"scheduler/{identity}")
    # Its own client, as kube-scheduler's leader election has: renewals never wait behind the binding
    # workers in the rate limiter. Without --leader-elect the same Lease is claimed (not fenced) so that a
    # second scheduler serving the same name exits instead of binding the same pods (kdra.kube.leader).
    lease_client = make_client(args, f"scheduler/{identity}; leader-election")
    elector = LeaderElector(
        lease_client,
        args.leader_elect_resource_name or args.scheduler_name,
        args.leader_elect_resource_namespace,
        identity,
        lease_duration=args.leader_elect_lease_duration,
        renew_deadline=args.leader_elect_renew_deadline,
        retry_period=args.leader_elect_retry_period,
        claim=not args.leader_elect,
    )
    session_options = GangQueueOptions(
        placement=args.placement,
        gang_timeout=args.gang_timeout,
        reclaim=not args.no_reclaim,
        preempt=not args.no_preempt,
        stale_gang_grace=args.stale_gang_grace,
        gang_device_search=args.gang_device_search,
    )
    return run_scheduler(
        client,
        config,
        session_options,
        identity=identity,
        partition=partition,
        bind_workers=args.bind_workers,
        resync=args.resync,
        preemption_wait=args.preemption_wait,
        elector=elector,
        endpoint=endpoint,
    )


def _check_scheduler_flags(args: argparse.Namespace) -> None:
    """Every flag of `kdra scheduler` whose value no run can use, refused before anything starts (exit 2,
    naming the flag and the rule): a negative --resync or budget, a --gang-timeout below zero and a
    --leader-elect-retry-period of 0 were taken (the last re-read the Lease in a busy loop), a Lease name
    the API server refuses left the replica "waiting for the leader lease" for ever."""
    import math

    from kdra.kube.leader import check_timing
    from kdra.validation.rules import is_dns1123_label, is_dns1123_subdomain

    def bad(flag: str, value: object, rule: str) -> InputError:
        return InputError(f"{flag}: Invalid value: {value!r}: {rule}")

    name = args.scheduler_name
    # Pods name it in spec.schedulerName (a DNS subdomain) and kdra writes it as a label and taint value
    # (kdra.dev/quarantined-by, kdra.dev/scheduler: at most 63 characters).
    for problem in (
        *is_dns1123_subdomain(name),
        *(("must be no more than 63 characters",) if len(name) > 63 else ()),
    ):
        raise bad("--scheduler-name", name, f"{problem} (pods name it in spec.schedulerName)")
    if name == "default-scheduler":
        print(
            "warning: --scheduler-name default-scheduler: kube-scheduler serves this name too; unless it is "
            "not running, both will place the same pods",
            file=sys.stderr,
        )
    for flag, value in (
        ("--resync", args.resync),
        ("--stale-gang-grace", args.stale_gang_grace),
        ("--preemption-wait", args.preemption_wait),
        ("--gang-timeout", 0.0 if args.gang_timeout is None else args.gang_timeout),
    ):
        if not (math.isfinite(value) and value >= 0):
            raise bad(flag, value, "must be a number of seconds, 0 or more")
    for flag, count in (
        ("--bind-workers", args.bind_workers),
        ("--cel-attempt-budget", args.cel_attempt_budget),
        ("--cel-run-budget", args.cel_run_budget),
    ):
        if count < 0:
            raise bad(flag, count, "must not be negative")
    # With or without --leader-elect: without it the Lease is still claimed (kdra.kube.leader's claim mode).
    try:
        check_timing(
            args.leader_elect_lease_duration,
            args.leader_elect_renew_deadline,
            args.leader_elect_retry_period,
            (
                "--leader-elect-lease-duration",
                "--leader-elect-renew-deadline",
                "--leader-elect-retry-period",
            ),
        )
    except ValueError as e:
        raise InputError(str(e)) from None
    lease = args.leader_elect_resource_name or args.scheduler_name
    for problem in is_dns1123_subdomain(lease):
        raise bad("--leader-elect-resource-name", lease, problem)
    for problem in is_dns1123_label(args.leader_elect_resource_namespace):
        raise bad("--leader-elect-resource-namespace", args.leader_elect_resource_namespace, problem)


# -- explain --------------------------------------------------------------------------------------------


def _explain(args: argparse.Namespace) -> int:
    from kdra.cli.common import feature_gates, namespace_filter, positive_int
    from kdra.kube.explain import explain_pod

    positive_int("--nodes", args.nodes, 0)
    client = make_client(args)
    only_ns = namespace_filter(args)
    gates = feature_gates(args)
    shown = None if args.verbose else args.nodes
    if args.pod:
        if args.all_namespaces:
            raise InputError("-A/--all-namespaces: Forbidden: a pod is named; give its namespace with -n")
        targets = [(only_ns or client.config.namespace, args.pod)]
    else:
        pending = client.list(
            "Pod", None if only_ns is None and args.all_namespaces else only_ns or client.config.namespace
        )
        targets = [
            (p["metadata"].get("namespace") or "default", p["metadata"]["name"])
            for p in pending
            if not (p.get("spec") or {}).get("nodeName")
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]
        if not targets:
            where = (
                "any namespace" if args.all_namespaces else f"namespace {only_ns or client.config.namespace}"
            )
            print(f"No pending pods in {where}", file=sys.stderr)
            return 0
    reports = [explain_pod(client, name, ns, gates) for ns, name in targets]
    if args.output == "json":
        docs = [r.to_dict(shown) for r in reports]
        sys.stdout.write(json.dumps(docs[0] if args.pod else docs, indent=2, default=str) + "\n")
    else:
        sys.stdout.write("\n".join(r.text(max_nodes=shown) for r in reports))
    return 0 if all(r.fits or r.bound for r in reports) else 1


# -- export ---------------------------------------------------------------------------------------------


def _export(args: argparse.Namespace) -> int:
    from kdra.api.load import dump_json, dump_yaml
    from kdra.cli.common import namespace_filter
    from kdra.kube.export import export_objects

    target = args.output_file or "-"
    fmt = args.output
    client = make_client(args)
    objs = export_objects(client, namespace_filter(args))
    fmt = fmt or ("json" if target.endswith(".json") else "yaml")
    text = dump_json(objs) if fmt == "json" else dump_yaml(objs)
    if target == "-":
        sys.stdout.write(text)
    else:
        try:
            with open(target, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as e:
            raise InputError(f"--output-file {target}: {e.strerror or e}") from None
        counts: dict[str, int] = {}
        for o in objs:
            counts[o["kind"]] = counts.get(o["kind"], 0) + 1
        summary = ", ".join(f"{n} {k}" for k, n in counts.items())
        print(f"wrote {summary or 'nothing'} to {target}", file=sys.stderr)
    return 0
