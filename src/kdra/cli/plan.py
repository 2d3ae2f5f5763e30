"""`kdra plan`: capacity planning for DRA pods and gangs (docs/plan.md).

    kdra plan scale-up   [-f FILE ... | --kubeconfig FILE] [-c FLEET] [--node-types FLEET] [--price POOL=P]
                         [--max POOL=N] [-n NS | -A] [--queue Q] [POD ...] [-o table|wide|yaml|json|fleet]
                         [--report FILE]
    kdra plan scale-down [-f FILE ... | --kubeconfig FILE] [-c FLEET] [--node-types FLEET] [-o ...]

Exit codes: 0 a plan that places every pod; 1 a plan that leaves some pods unschedulable (they are listed with
the reason); 2 invalid input or usage. This module parses flags and prints; kdra.plan decides.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kdra.cli.common import add_gates_arg, add_namespace_args, add_validate_arg, reporting_cel
from kdra.cli.conventions import add_output
from kdra.errors import InputError

EPILOG = """\
inputs:
  The cluster and the pods to plan for as Kubernetes objects: -f FILE (YAML/JSON, folders, - for stdin; what
  `kdra export` writes) or --kubeconfig (a live cluster, read as `kdra export` does, with PodGroups,
  Workloads, Queues, Topology and PodDisruptionBudgets). -c FLEET adds a Fleet's nodes as the cluster.
  Without -f or -c, the cluster of the kubeconfig's loading rules (as kubectl). Pods without spec.nodeName
  are pending; pods with one are running where they are.

node types:
  --node-types FLEET: the pools of a Fleet (default: the bundled `node-types`, the catalog's accelerator
  servers with indicative prices; `kdra cluster describe -f node-types`). A pool in several zones is one type
  per zone. pools[].price is per node-hour (--price POOL=P overrides), pools[].maxCount the most nodes the
  pool may have, the cluster's nodes labelled kdra.dev/pool=POOL included (--max POOL=N overrides);
  pools[].minCount the fewest scale-down leaves. --node-type POOL (repeatable) keeps only those pools.

output:
  -o table (default) one row per node to add; wide adds devices and pods; yaml/json the ScaleUpPlan
  document; fleet the added nodes as a Fleet (`kdra driver sim -c` adds them to a cluster; with -c FLEET it
  is that fleet plus the added pools, which `kdra simulate -c` runs). --report FILE writes an HTML page.
"""


def _pairs(flag: str, values: list[str], convert: Any) -> dict[str, Any]:
    out = {}
    for v in values:
        key, sep, raw = v.partition("=")
        if not sep or not key:
            raise InputError(f"{flag} {v}: Invalid value: must be POOL=VALUE")
        try:
            out[key] = convert(raw)
        except ValueError:
            raise InputError(
                f"{flag} {v}: Invalid value: {raw!r} is not a valid {convert.__name__}"
            ) from None
        if out[key] < 0:
            raise InputError(f"{flag} {v}: Invalid value: must not be negative")
    return out


def _common(p: argparse.ArgumentParser) -> None:
    from kdra.cli.common import add_fleet_arg
    from kdra.cli.conventions import add_flag
    from kdra.cli.kube import add_context_args

    add_flag(
        p,
        "--filename",
        dest="files",
        help="Kubernetes objects: the cluster and its pods (repeatable; - for stdin)",
    )
    add_context_args(p)
    add_fleet_arg(p, default=None, what="the cluster's nodes from a fleet")
    p.add_argument(
        "--node-types",
        default="node-types",
        metavar="FLEET",
        help="candidate node types: a Fleet's pools (default: the bundled node-types)",
    )
    p.add_argument(
        "--node-type",
        action="append",
        default=[],
        metavar="POOL",
        help="only this pool of --node-types (repeatable)",
    )
    p.add_argument(
        "--price",
        action="append",
        default=[],
        metavar="POOL=PRICE",
        help="price per node-hour of a pool (repeatable)",
    )
    p.add_argument(
        "--max",
        action="append",
        default=[],
        metavar="POOL=N",
        help="the most nodes a pool may have (repeatable)",
    )
    add_output(
        p,
        ("table", "yaml", "json", "fleet"),
        help="name: node/NAME of each node to add or drain; fleet: a Fleet",
    )
    p.add_argument("--report", default=None, metavar="FILE", help="also write an HTML report")
    add_validate_arg(p)
    add_gates_arg(p)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "plan",
        help="the nodes to add so pending DRA pods and gangs fit, and the nodes to drain",
        description=__doc__.splitlines()[0],
    )
    sub = p.add_subparsers(dest="plan_command", metavar="COMMAND")
    up = sub.add_parser(
        "scale-up",
        help="the cheapest nodes to add so every pending pod and gang fits",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _common(up)
    add_namespace_args(up, "pending pods")
    up.add_argument("--queue", default=None, help="only the pods of this queue (the pod's or its gang's)")
    up.add_argument(
        "--scoring",
        choices=("LeastAllocated", "MostAllocated"),
        default="LeastAllocated",
        help="NodeResourcesFit scoring of the cluster's scheduler, for the plan's check (default: upstream's "
        "LeastAllocated; MostAllocated packs, as autoscaled clusters are often configured)",
    )
    up.add_argument("pods", nargs="*", metavar="POD", help="only these pending pods (NAME or NAMESPACE/NAME)")
    up.set_defaults(func=reporting_cel("kdra plan scale-up", _scale_up))
    down = sub.add_parser(
        "scale-down",
        help="the nodes that can be drained with every running pod placed on the rest",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _common(down)
    down.set_defaults(func=reporting_cel("kdra plan scale-down", _scale_down))
    p.set_defaults(func=lambda args: (p.print_help(sys.stderr), 2)[1])


def _load(args: argparse.Namespace) -> tuple[Any, Any, list[Any], Any]:
    """(features, inputs, node types, the -c Fleet or None)."""
    from kdra.api.fields import check_fields
    from kdra.api.load import load_paths
    from kdra.cli.common import feature_gates, validate_mode
    from kdra.fleets import load_fleet, render
    from kdra.plan.inputs import split
    from kdra.plan.nodetypes import node_types
    from kdra.plan.scaleup import existing_per_pool

    features = feature_gates(args)
    if args.files and args.kubeconfig:
        raise InputError(
            "give the objects with -f FILE or read them from a cluster with --kubeconfig, not both"
        )
    objs: list[Any] = []
    if args.files:
        from kdra.validation.admission import admit

        objs = load_paths(args.files)
        api = [o for o in objs if str(o.get("apiVersion", "")).split("/")[0] in ("v1", "resource.k8s.io")]
        check_fields(api, validate_mode(args))
        # Named, defaulted and validated with the API server's rules, as kdra allocate does.
        admit(api, list_type_attributes=True, features=features)
    elif args.kubeconfig or args.context or not args.fleet:  # kubectl's loading rules, as kdra export
        from kdra.cli.kube import make_client
        from kdra.plan.inputs import read_cluster

        objs = read_cluster(make_client(args))
    base = None
    if args.fleet:
        base = load_fleet(args.fleet)
        objs = [*render(base, kubernetes_version=features.version), *objs]
    inputs = split(objs)
    types = node_types(
        load_fleet(args.node_types),
        features,
        prices=_pairs("--price", args.price, float),
        limits=_pairs("--max", args.max, int),
        existing=existing_per_pool(inputs.nodes),
        only=args.node_type,
    )
    return features, inputs, types, base


def _print_table(rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        sys.stdout.write("   ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip() + "\n")


def _dump(doc: Any, output: str) -> None:
    if output == "json":
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        from kdra.api.load import dump_yaml

        sys.stdout.write(dump_yaml([doc]))


def _fleet_name(plan: Any, base: Any) -> str:
    """A name of the plan's own: `kdra driver sim` owns the nodes of a fleet name (it removes those a later
    run of the same name lacks), so two plans added to one cluster must not share one."""
    import hashlib

    digest = hashlib.sha256(",".join(b.name for b in plan.added).encode()).hexdigest()[:8]
    return f"{base.name}-scale-up-{digest}" if base is not None else f"scale-up-{digest}"


def _scale_up(args: argparse.Namespace) -> int:
    from kdra.cli.common import namespace_filter
    from kdra.plan.result import fleet_document, plan_document, table
    from kdra.plan.scaleup import plan_scale_up

    features, inputs, types, base = _load(args)
    plan = plan_scale_up(
        inputs,
        types,
        features,
        namespace=namespace_filter(args),
        queue=args.queue,
        names=args.pods,
        scoring=args.scoring,
    )
    doc = plan_document(plan)
    if args.report:
        from kdra.plan.report import write_report

        write_report(args.report, doc)
    if args.output in ("yaml", "json"):
        _dump(doc, args.output)
    elif args.output == "fleet":
        _dump(fleet_document(plan, _fleet_name(plan, base), base), "yaml")
    elif args.output == "name":
        from kdra.cli.output import write_names

        write_names(f"node/{b.name}" for b in plan.added)
    else:
        st = doc["status"]
        if plan.added:
            _print_table(table(plan, wide=args.output == "wide"))
        elif not plan.unplaced:
            print("No nodes to add: every pending pod fits on the cluster's nodes", file=sys.stderr)
        proof = "optimal" if st["optimal"] else f"lower bound {st['lowerBoundPerHour']:.2f}/h"
        print(
            f"{len(plan.added)} nodes to add, {st['costPerHour']:.2f}/h ({proof}); "
            f"{st['pendingPods']} pending "
            f"pods: {st['podsOnClusterNodes']} fit on the cluster's nodes, {st['podsOnAddedNodes']} on added "
            f"nodes, {st['unschedulablePods']} on none",
            file=sys.stderr,
        )
    for u in doc["status"]["unschedulable"]:
        detail = f": {u['nodeTypes']}" if u.get("nodeTypes") else ""
        print(f"unschedulable: {u['reason']}{detail}", file=sys.stderr)
    return 1 if plan.unplaced else 0


def _scale_down(args: argparse.Namespace) -> int:
    from kdra.plan.scaledown import drain_document, plan_scale_down

    features, inputs, types, base = _load(args)
    if base is not None:  # the cluster's own pools price its nodes
        from kdra.plan.nodetypes import node_types

        types = [*node_types(base, features), *types]
    plan = plan_scale_down(inputs, types, features)
    doc = drain_document(plan)
    if args.report:
        from kdra.plan.report import write_report

        write_report(args.report, doc)
    if args.output in ("yaml", "json"):
        _dump(doc, args.output)
        return 0
    if args.output == "fleet":
        raise InputError("-o fleet: Unsupported value: scale-down has no nodes to add (use yaml or json)")
    st = doc["status"]
    if args.output == "name":
        from kdra.cli.output import write_names

        write_names(f"node/{d['name']}" for d in st["drain"])
        return 0
    wide = args.output == "wide"
    rows = [["NODE", "POOL", "PRICE/H", "GPUS", "PODS MOVED", *(["POD NAMES"] if wide else [])]]
    for d in st["drain"]:
        rows.append(
            [d["name"], d.get("pool") or "-", f"{d['pricePerHour']:.2f}", str(d["gpus"]), str(len(d["pods"]))]
            + ([",".join(str(p) for p in d["pods"]) or "-"] if wide else [])
        )
    if len(rows) > 1:
        _print_table(rows)
    print(
        f"{len(st['drain'])} nodes to drain: {st['gpuHoursSavedPerWeek']:g} GPU-hours and "
        f"{st['savedPerWeek']:.2f} saved per week at the current load",
        file=sys.stderr,
    )
    return 0
