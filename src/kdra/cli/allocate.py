"""`kdra allocate`: allocate devices to ResourceClaims offline, as kube-scheduler's DRA plugin would.

The contract that other tools and checks rely on:

    kdra allocate -f FILE [-f FILE ...] [--node NAME] [--kubernetes-version 1.36|1.37]
                  [--feature-gates Gate=bool,...] [-n NS | -A] [--validate strict|warn|ignore]
                  [-o yaml|json|table|wide|name] [--nodes N | -v]
                  [--device-preference fragmentation|binpack|spread|topology]

Exit codes: 0 allocated; 1 valid input that does not fit (explanation on stderr and, in -o json/yaml, in the
List's top-level `explanation` field); 2 invalid input or usage; 3 an allocation error in upstream's sense.
This module parses, validates and prints; the decisions are kdra.scheduler.offline's (the placement loop).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable
from typing import Any

import yaml

from kdra.api.types import namespaced_name
from kdra.errors import AllocationError, InputError

SUPPORTED_KINDS = (
    "Node",
    "DeviceClass",
    "ResourceSlice",
    "DeviceTaintRule",
    "ResourceClaim",
    "ResourceClaimTemplate",
    "Pod",
)
# Objects a `kubectl get -o yaml` dump commonly carries along; they do not affect allocation.
IGNORED_KINDS = ("Namespace",)

EPILOG = """\
inputs:
  Any mix of Node, DeviceClass, ResourceSlice, DeviceTaintRule, ResourceClaim, ResourceClaimTemplate and
  Pod objects, as multi-document YAML, JSON or `kind: List` (what `kubectl get -o yaml` prints). `-f -`
  reads stdin; a folder is read recursively. Everything is validated with the API server's rules first,
  unknown fields included (--validate=strict, the default; warn or ignore to relax). -n NS allocates only
  that namespace's claims and pods (objects without a namespace are in NS). A DeviceTaintRule's taint is
  added to the devices its selector matches, as kube-scheduler does when DRADeviceTaintRules is on.

what is allocated:
  ResourceClaims that already have status.allocation count as in use (devices, counters, capacity).
  Without Pods, all other claims are allocated together, in input order, as one pod's claims would be.
  With Pods, each pod's claims are allocated in turn (resourceClaimTemplateName entries are instantiated
  as the resourceclaim controller does, with a deterministic name suffix); later pods see earlier pods'
  allocations as in use. Claims that no pod references are allocated first, as one group.

nodes:
  Node objects when given; otherwise the nodes named by the ResourceSlices' nodeName fields (a
  label-less Node each). With --node only that node is tried. Every pod is placed as kube-scheduler
  places it, claims or not: every node is filtered with the scheduler's plugins (nodeSelector, required
  node affinity, tolerations, nodeName, resources, then the devices; a Node without status.allocatable
  is not checked for resources), and the nodes that fit are scored with its Score plugins (the
  prioritized-list rank of firstAvailable requests, NodeResourcesFit, preferred node affinity and
  PreferNoSchedule taints). The highest score wins; equal scores go to the first node by name
  (kube-scheduler picks one of them at random). Extended resources a DeviceClass serves
  (extendedResourceName, KEP-5004) are allocated through DRA as kube-scheduler does, as a claim of
  their own in the output. An allocation error on any node is an allocation error (exit 3).

output:
  The newly allocated ResourceClaims with status.allocation, as a v1 List (-o yaml, -o json) or a
  kubectl-like table (-o table, -o wide with more columns), or -o name. The List's `placements` field
  says why each pod went where it went: the node, how many nodes fit, and the best nodes' scores with
  each plugin's part (3, --nodes N, -v for all). When something does not fit, the explanation is printed
  on stderr: the nodes grouped by reason, then the 3 nearest nodes in full (those that came closest:
  fewest devices short, then fewest failed checks; --nodes N, -v for all); the List also carries it in a
  top-level `explanation` field (structured).

device preference (opt-in):
  --device-preference NAME orders the devices the allocator tries (kdra.scheduler.devicepref): every rule
  still holds, only the choice among valid devices changes. The output then says, per pod, whether the
  preference or the rules decided (`devicePreference` in -o yaml/json: the policy, its measure, the chosen
  devices and their score against upstream's first fit; a line on stderr with -o table).

exit codes:
  0 allocated; 1 valid input that does not fit; 2 invalid input or usage; 3 allocation error
  (upstream's sense: CEL runtime error, claim limit exceeded, All over an incomplete pool, ...).
"""


def register(subparsers: Any) -> None:
    from kdra.cli.common import (
        add_device_preference_arg,
        add_gates_arg,
        add_namespace_args,
        add_validate_arg,
        reporting_cel,
    )
    from kdra.cli.conventions import add_flag, add_output
    from kdra.cli.kube import add_context_args

    parser = subparsers.add_parser(
        "allocate",
        help="allocate devices to ResourceClaims as kube-scheduler would, and explain failures",
        description="Allocate devices to ResourceClaims as kube-scheduler's DRA plugin would "
        "(Kubernetes 1.37 by default, or --kubernetes-version 1.36).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_flag(
        parser,
        "--filename",
        dest="files",
        help="YAML/JSON file or folder with the objects; '-' reads stdin; repeatable",
    )
    add_context_args(
        parser,
        kubeconfig_help="read the objects from this cluster (read-only) instead of files (kdra.kube.export)",
    )
    parser.add_argument("--node", metavar="NAME", help="try only this node")
    add_gates_arg(parser)
    add_namespace_args(parser, "claims and pods")
    add_validate_arg(parser)
    add_output(
        parser,
        ("yaml", "json", "table"),
        help="yaml or json: a v1 List; wide: the table with more columns; name: resourceclaim/NAME",
    )
    detail = parser.add_mutually_exclusive_group()
    add_flag(
        detail,
        "--nodes",
        type=int,
        default=None,
        help="when something does not fit, detail the N nearest nodes after the summary (default 3)",
    )
    add_flag(detail, "--verbose", help="when something does not fit, detail every node")
    add_device_preference_arg(parser, "-o json records the policy and the chosen set's score vs first fit")
    parser.set_defaults(func=reporting_cel("kdra allocate", run))


# --------------------------------------------------------------------------------------------- helpers


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _name(obj: dict[str, Any]) -> str:
    return str(_meta(obj).get("name", ""))


def _namespace(obj: dict[str, Any]) -> str:
    return str(_meta(obj).get("namespace") or "default")


def _node_name(node: dict[str, Any]) -> str:
    return _name(node)


# ----------------------------------------------------------------------------------------- the run


def _load(paths: list[str]) -> list[dict[str, Any]]:
    from kdra.api.load import load_paths

    for path in paths:
        if path != "-" and not os.path.exists(path):
            raise InputError(f"{path}: no such file or directory")
    return list(load_paths(paths, allow_empty=False))


def _check_kinds(objs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    kept = []
    for i, obj in enumerate(objs):
        kind = obj.get("kind") if isinstance(obj, dict) else None
        if kind in IGNORED_KINDS:
            continue
        if kind not in SUPPORTED_KINDS:
            what = f"{kind} {_name(obj)}" if isinstance(obj, dict) and kind else f"object #{i + 1}"
            raise InputError(
                f"{what}: kind: Unsupported value: {kind!r}: supported kinds: {', '.join(SUPPORTED_KINDS)}"
            )
        kept.append(obj)
    return kept


def _unique(objs: list[dict[str, Any]], kind: str, namespaced: bool) -> None:
    seen: set[str] = set()
    for obj in objs:
        key = namespaced_name(obj) if namespaced else _name(obj)
        if key in seen:
            raise InputError(f"{kind} {key}: metadata.name: Duplicate value: {_name(obj)!r}")
        seen.add(key)


def _default_namespace(objs: Iterable[dict[str, Any]], namespace: str) -> None:
    """`-n NS` with files: namespaced objects without metadata.namespace are in NS (as `kubectl apply -n`)."""
    for obj in objs:
        if obj.get("kind") in ("ResourceClaim", "ResourceClaimTemplate", "Pod"):
            meta = obj.setdefault("metadata", {})
            if isinstance(meta, dict) and not meta.get("namespace"):
                meta["namespace"] = namespace


def run(args: argparse.Namespace) -> int:
    """The subcommand; a search that recurses too deep is an allocation error, never a traceback."""
    try:
        return _run(args)
    except RecursionError as err:
        raise AllocationError(f"allocation aborted: search too deep ({err})") from err


def _run(args: argparse.Namespace) -> int:
    from kdra.api.fields import check_fields
    from kdra.cli.common import feature_gates, namespace_filter, positive_int, validate_mode
    from kdra.scheduler import offline
    from kdra.validation.admission import admit

    gates = feature_gates(args)
    validate = validate_mode(args)
    only_ns = namespace_filter(args)
    if args.nodes is not None:
        positive_int("--nodes", args.nodes, 0)
    preference = None
    if getattr(args, "device_preference", None):
        from kdra.scheduler.devicepref import make_device_preference

        preference = make_device_preference(args.device_preference)
    if bool(args.files) == bool(getattr(args, "kubeconfig", None)):
        both = ", not both" if args.files else ""
        raise InputError(
            f"give the objects with -f FILE or read them from a cluster with --kubeconfig FILE{both}"
        )
    if args.files:
        loaded = _load(args.files)
        if only_ns:
            _default_namespace(loaded, only_ns)
    else:
        from kdra.cli.kube import make_client
        from kdra.kube.export import export_objects

        loaded = export_objects(make_client(args))
    objs = _check_kinds(loaded)
    check_fields(loaded, validate)
    # Namespaces are validated along (they carry the label adminAccess needs), then set aside.
    # List-typed attributes are accepted whatever the gate says: slices stored while it was on keep them,
    # and the allocator then treats them as upstream does with the gate off.
    admit(
        objs + [o for o in loaded if o.get("kind") in IGNORED_KINDS],
        list_type_attributes=True,
        features=gates,
    )

    by_kind: dict[str, list[dict[str, Any]]] = {k: [] for k in SUPPORTED_KINDS}
    for obj in objs:
        by_kind[str(obj["kind"])].append(obj)
    for kind, namespaced in (
        ("Node", False),
        ("DeviceClass", False),
        ("DeviceTaintRule", False),
        ("ResourceClaim", True),
        ("ResourceClaimTemplate", True),
        ("Pod", True),
    ):
        _unique(by_kind[kind], kind, namespaced)

    result = offline.allocate(by_kind, gates, namespace=only_ns, node=args.node, preference=preference)
    shown = None if args.verbose else (args.nodes if args.nodes is not None else 3)
    _print_output(args.output, result, shown)
    return 1 if result.failures else 0


# ------------------------------------------------------------------------------------------- output


Failure = tuple[Any, Any]  # (kdra.scheduler.offline.Group, kdra.scheduler.placement.Placement)


def _summary(failure: Failure) -> Any:
    from kdra.allocator.summary import NodesSummary

    return NodesSummary(failure[1].findings)


def _pending(failure: Failure) -> list[str]:
    return [namespaced_name(c) for c in failure[1].claims]


def _failure_data(failure: Failure, shown: int | None) -> dict[str, Any]:
    summary = _summary(failure)
    nearest = summary.nearest(shown)
    group = failure[0]
    return {
        "pod": namespaced_name(group.pod) if group.pod is not None else None,
        "claims": _pending(failure),
        "summary": summary.to_dict(shown),
        "nodes": [
            {
                "node": f.node,
                "reason": f.text(),
                "details": ex.to_dict() if (ex := f.explained()) is not None else None,
            }
            for f in nearest
        ],
    }


def _failure_who(failure: Failure) -> str:
    group = failure[0]
    if group.pod is not None:
        return f"pod {namespaced_name(group.pod)}"
    return "claims " + ", ".join(_pending(failure))


def _failure_what(failure: Failure) -> str:
    if failure[1].claims or failure[1].extended_claim is not None:
        return "cannot allocate all claims on any node"
    return "fits on no node"


def _failure_text(failure: Failure, shown: int | None) -> str:
    lines = [f"{_failure_who(failure)}: {_failure_what(failure)}"]
    if not failure[1].findings:
        lines.append("  no node to try")
    else:
        lines.extend("  " + line for line in _summary(failure).lines(shown))
    return "\n".join(lines)


def _placement_data(group: Any, placement: Any, shown: int | None) -> dict[str, Any]:
    """Where a group went and why: the node, and the scores of the best nodes (the scheduler's Score
    plugins, normalised and weighted; ties go to the first node by name)."""
    scores = placement.scores if shown is None else placement.scores[: max(1, shown)]
    return {
        "pod": namespaced_name(group.pod) if group.pod is not None else None,
        "claims": [namespaced_name(c) for c in placement.claims],
        "node": placement.node,
        "nodesFit": len(placement.scores),
        "scores": [s.to_dict() for s in scores],
    }


def _print_output(output: str, result: Any, shown: int | None) -> None:
    newly = result.newly
    failures = result.failures
    choices = result.choices
    items = [claim for claim, _, _ in newly]
    if failures:
        print("\n".join(_failure_text(f, shown) for f in failures), file=sys.stderr)
    if output in ("table", "wide"):
        _print_table(newly, wide=output == "wide")
        if choices:
            from kdra.scheduler.devicepref import describe_choice

            for c in choices:
                who = f"pod {c['pod']}" if c["pod"] else "claims " + ", ".join(c["claims"])
                print(f"{who} on {c['node']}: {describe_choice(c)}", file=sys.stderr)
        return
    if output == "name":
        for claim in items:
            sys.stdout.write(f"resourceclaim.resource.k8s.io/{_name(claim)}\n")
        return
    listing: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "List",
        "metadata": {"resourceVersion": ""},
        "items": items,
    }
    placed = [(g, p) for g, p in result.placements if p.placed]
    if placed:
        listing["placements"] = [_placement_data(g, p, shown) for g, p in placed]
    if choices:
        listing["devicePreference"] = {"policy": choices[0]["policy"], "choices": choices}
    if failures:
        listing["explanation"] = {
            "message": "; ".join(
                f"{_failure_who(f)}: {_failure_what(f)}: {_summary(f).headline()}" for f in failures
            ),
            "unschedulable": [_failure_data(f, shown) for f in failures],
        }
    if output == "json":
        sys.stdout.write(json.dumps(listing, indent=2) + "\n")
    else:
        sys.stdout.write(yaml.safe_dump(listing, sort_keys=False, default_flow_style=False))


def _consumed(result: dict[str, Any]) -> str:
    consumed = result.get("consumedCapacity") or {}
    return ",".join(f"{k}={v}" for k, v in consumed.items()) or "-"


def _print_table(newly: list[tuple[dict[str, Any], str, dict[str, Any] | None]], wide: bool = False) -> None:
    header: tuple[str, ...] = ("CLAIM", "REQUEST", "DRIVER", "POOL", "DEVICE", "NODE")
    if wide:
        header = ("NAMESPACE", *header, "POD", "SHARE", "CONSUMED")
    rows: list[tuple[str, ...]] = []
    for claim, node, pod in newly:
        results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
            "results"
        ) or []
        for r in results:
            row: tuple[str, ...] = (
                _name(claim),
                str(r.get("request", "")),
                str(r.get("driver", "")),
                str(r.get("pool", "")),
                str(r.get("device", "")),
                node,
            )
            if wide:
                row = (
                    _namespace(claim),
                    *row,
                    _name(pod) if pod is not None else "-",
                    str(r.get("shareID") or "-"),
                    _consumed(r),
                )
            rows.append(row)
    if not rows:
        print("No resources found", file=sys.stderr)
        return
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        sys.stdout.write("   ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() + "\n")
