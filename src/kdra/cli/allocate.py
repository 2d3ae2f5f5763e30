"""`kdra allocate`: allocate devices to ResourceClaims offline, as kube-scheduler's DRA plugin would.

The contract (issue 2, scope 6) that other tools and checks rely on:

    kdra allocate -f FILE [-f FILE ...] [--node NAME] [--kubernetes-version 1.36|1.37]
                  [--feature-gates Gate=bool,...] [-o yaml|json|table]

Exit codes: 0 allocated; 1 valid input that does not fit (explanation on stderr and, in -o json/yaml, in the
List's top-level `explanation` field); 2 invalid input or usage; 3 an allocation error in upstream's sense.
This module only wires kdra.api (load, validation, templates) to kdra.allocator; it decides nothing itself.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import sys
from collections.abc import Iterable
from typing import Any

import yaml

from kdra.cli.gates import add_gate_flags, gates_from_args
from kdra.errors import AllocationError, InputError, KdraError

SUPPORTED_KINDS = ("Node", "DeviceClass", "ResourceSlice", "ResourceClaim", "ResourceClaimTemplate", "Pod")
# Objects a `kubectl get -o yaml` dump commonly carries along; they do not affect allocation.
IGNORED_KINDS = ("Namespace",)

EPILOG = """\
inputs:
  Any mix of Node, DeviceClass, ResourceSlice, ResourceClaim, ResourceClaimTemplate and Pod objects, as
  multi-document YAML, JSON or `kind: List` (what `kubectl get -o yaml` prints). `-f -` reads stdin; a folder
  is read recursively. Everything is validated with the API server's rules first.

what is allocated:
  ResourceClaims that already have status.allocation count as in use (devices, counters, capacity).
  Without Pods, all other claims are allocated together, in input order, as one pod's claims would be.
  With Pods, each pod's claims are allocated in turn (resourceClaimTemplateName entries are instantiated
  as the resourceclaim controller does, with a deterministic name suffix); later pods see earlier pods'
  allocations as in use. Claims that no pod references are allocated first, as one group.

nodes:
  Node objects when given; otherwise the nodes named by the ResourceSlices' nodeName fields (a
  label-less Node each). With --node only that node is tried; otherwise nodes in name order and the
  first node that fits wins.

output:
  The newly allocated ResourceClaims with status.allocation, as a v1 List (-o yaml, -o json) or a
  kubectl-like table (-o table). When something does not fit, the List also carries a top-level
  `explanation` field (structured) and the explanation is printed on stderr.

exit codes:
  0 allocated; 1 valid input that does not fit; 2 invalid input or usage; 3 allocation error
  (upstream's sense: CEL runtime error, claim limit exceeded, All over an incomplete pool, ...).
"""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "allocate",
        help="allocate devices to ResourceClaims as kube-scheduler would, and explain failures",
        description="Allocate devices to ResourceClaims as kube-scheduler's DRA plugin would "
        "(Kubernetes 1.37 by default, or --kubernetes-version 1.36).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "-f",
        "--filename",
        dest="files",
        action="append",
        metavar="FILE",
        help="YAML/JSON file or folder with the objects; '-' reads stdin; repeatable",
    )
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="read the objects from this cluster (read-only) instead of files (kdra.kube.export)",
    )
    parser.add_argument("--context", default=None, help="kubeconfig context (default: its current-context)")
    parser.add_argument("--node", metavar="NAME", help="try only this node")
    add_gate_flags(parser)
    parser.add_argument(
        "-o", "--output", choices=("yaml", "json", "table"), default="yaml", help="output format"
    )
    parser.set_defaults(func=run)


# --------------------------------------------------------------------------------------------- helpers


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _name(obj: dict[str, Any]) -> str:
    return str(_meta(obj).get("name", ""))


def _namespace(obj: dict[str, Any]) -> str:
    return str(_meta(obj).get("namespace") or "default")


def _ref(obj: dict[str, Any]) -> str:
    return f"{_namespace(obj)}/{_name(obj)}"


def _node_name(node: dict[str, Any]) -> str:
    return _name(node)


def _requirement_matches(req: dict[str, Any], value: str | None) -> bool:
    """One NodeSelectorRequirement (core/v1 semantics) against a label or field value."""
    op = req.get("operator")
    values = [str(v) for v in req.get("values") or []]
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            left, right = int(value), int(values[0])
        except ValueError:
            return False
        return left > right if op == "Gt" else left < right
    return False


def _node_selector_matches(selector: dict[str, Any] | None, node: dict[str, Any]) -> bool:
    """A NodeSelector (terms ORed, requirements ANDed); nil selects every node."""
    if not selector:
        return True
    labels = _meta(node).get("labels") or {}
    fields = {"metadata.name": _node_name(node)}
    for term in selector.get("nodeSelectorTerms") or []:
        exprs = term.get("matchExpressions") or []
        field_reqs = term.get("matchFields") or []
        if not exprs and not field_reqs:
            continue
        if all(_requirement_matches(r, labels.get(r.get("key"))) for r in exprs) and all(
            _requirement_matches(r, fields.get(r.get("key"))) for r in field_reqs
        ):
            return True
    return False


def _explanation_data(explanation: Any) -> Any:
    """The allocator's explanation as JSON-compatible data."""
    if explanation is None:
        return None
    for attr in ("to_dict", "as_dict"):
        method = getattr(explanation, attr, None)
        if callable(method):
            return method()
    if dataclasses.is_dataclass(explanation) and not isinstance(explanation, type):
        return dataclasses.asdict(explanation)
    if isinstance(explanation, (dict, list, str, int, float, bool)):
        return explanation
    return str(explanation)


def _explanation_text(explanation: Any) -> str:
    if explanation is None:
        return "cannot allocate all claims"
    if isinstance(explanation, str):
        return explanation
    for attr in ("render", "format", "text"):
        method = getattr(explanation, attr, None)
        if callable(method):
            try:
                return str(method())
            except TypeError:
                continue
    return str(explanation)


# ----------------------------------------------------------------------------------------- the run


@dataclasses.dataclass
class _Group:
    """Claims allocated together: one pod's claims, or the claims no pod references."""

    pod: dict[str, Any] | None
    claims: list[dict[str, Any]]  # in pod order; may include claims allocated earlier


@dataclasses.dataclass
class _Failure:
    group: _Group
    nodes: list[dict[str, Any]]


def _load(paths: list[str]) -> list[dict[str, Any]]:
    from kdra.api.load import load_paths

    for path in paths:
        if path != "-" and not os.path.exists(path):
            raise InputError(f"{path}: no such file or directory")
    return list(load_paths(paths))


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
        key = _ref(obj) if namespaced else _name(obj)
        if key in seen:
            raise InputError(f"{kind} {key}: metadata.name: Duplicate value: {_name(obj)!r}")
        seen.add(key)


def run(args: argparse.Namespace) -> int:
    """The subcommand; an unanticipated error still ends in a message and exit 3, never a traceback."""
    try:
        return _run(args)
    except (KdraError, BrokenPipeError, KeyboardInterrupt):
        raise
    except RecursionError as err:
        raise AllocationError(f"allocation aborted: search too deep ({err})") from err
    except Exception as err:
        raise AllocationError(f"internal error: {type(err).__name__}: {err} (please report this)") from err


def _run(args: argparse.Namespace) -> int:
    from kdra.allocator import AllocationOutcome, Allocator
    from kdra.api.templates import instantiate_template, is_claim_for_pod
    from kdra.api.validation import validate_objects

    gates = gates_from_args(args)
    if bool(args.files) == bool(getattr(args, "kubeconfig", None)):
        raise InputError("give the objects with -f FILE or read them from a cluster with --kubeconfig FILE")
    if args.files:
        loaded = _load(args.files)
    else:
        from kdra.cli.kube import make_client
        from kdra.kube.export import export_objects

        loaded = export_objects(make_client(args))
    objs = _check_kinds(loaded)
    # Namespaces are validated along (they carry the label adminAccess needs), then set aside.
    # List-typed attributes are accepted whatever the gate says: slices stored while it was on keep them,
    # and the allocator then treats them as upstream does with the gate off.
    validate_objects(
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
        ("ResourceClaim", True),
        ("ResourceClaimTemplate", True),
        ("Pod", True),
    ):
        _unique(by_kind[kind], kind, namespaced)

    classes = {_name(c): c for c in by_kind["DeviceClass"]}
    slices = by_kind["ResourceSlice"]
    templates = {_ref(t): t for t in by_kind["ResourceClaimTemplate"]}
    claims = [copy.deepcopy(c) for c in by_kind["ResourceClaim"]]
    claims_by_ref = {_ref(c): c for c in claims}
    pods = by_kind["Pod"]

    def allocated(claim: dict[str, Any]) -> bool:
        return bool((claim.get("status") or {}).get("allocation"))

    # -- groups: claims no pod references (one group), then each pod's claims ----------------------
    groups: list[_Group] = []
    referenced: set[str] = set()
    pod_groups: list[_Group] = []
    taken_names = set(claims_by_ref)
    for pod in pods:
        group = _Group(pod=pod, claims=[])
        ns = _namespace(pod)
        statuses = {
            s.get("name"): s.get("resourceClaimName")
            for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
        }
        for i, entry in enumerate((pod.get("spec") or {}).get("resourceClaims") or []):
            entry_name = str(entry.get("name", ""))
            where = f"Pod {_ref(pod)}: spec.resourceClaims[{i}]"
            claim: dict[str, Any] | None = None
            if entry.get("resourceClaimName"):
                ref = f"{ns}/{entry['resourceClaimName']}"
                claim = claims_by_ref.get(ref)
                if claim is None:
                    raise InputError(
                        f"{where}.resourceClaimName: Not found: {entry['resourceClaimName']!r}: "
                        f"no ResourceClaim {ref} in the input"
                    )
            elif entry.get("resourceClaimTemplateName"):
                status_name = statuses.get(entry_name)
                if status_name and f"{ns}/{status_name}" in claims_by_ref:
                    claim = claims_by_ref[f"{ns}/{status_name}"]
                else:
                    claim = next((c for c in claims if is_claim_for_pod(c, pod, entry_name)), None)
                if claim is None:
                    tref = f"{ns}/{entry['resourceClaimTemplateName']}"
                    template = templates.get(tref)
                    if template is None:
                        raise InputError(
                            f"{where}.resourceClaimTemplateName: Not found: "
                            f"{entry['resourceClaimTemplateName']!r}: "
                            f"no ResourceClaimTemplate {tref} in the input"
                        )
                    in_ns = {ref.split("/", 1)[1] for ref in taken_names if ref.split("/", 1)[0] == ns}
                    claim = instantiate_template(pod, entry_name, template, in_ns)
                    taken_names.add(_ref(claim))
                    claims_by_ref[_ref(claim)] = claim
            else:
                continue  # nothing to allocate for this entry (validation reports a malformed one)
            referenced.add(_ref(claim))
            if all(c is not claim for c in group.claims):
                group.claims.append(claim)
        pod_groups.append(group)
    loose = [c for c in claims if _ref(c) not in referenced and not allocated(c)]
    if loose or not pods:
        groups.append(_Group(pod=None, claims=loose))
    groups.extend(pod_groups)

    # -- nodes -------------------------------------------------------------------------------------
    nodes = sorted(by_kind["Node"], key=_node_name)
    if not nodes:
        names: set[str] = set()
        for s in slices:
            spec = s.get("spec") or {}
            if spec.get("nodeName"):
                names.add(str(spec["nodeName"]))
            for dev in spec.get("devices") or []:
                if isinstance(dev, dict) and dev.get("nodeName"):
                    names.add(str(dev["nodeName"]))
        if args.node:
            names = {args.node}
        nodes = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": n}} for n in sorted(names)]
    if args.node:
        nodes = [n for n in nodes if _node_name(n) == args.node]
        if not nodes:
            raise InputError(f"--node {args.node}: Not found: no Node {args.node!r} in the input")
    needs_node = any(not allocated(c) for g in groups for c in g.claims)
    if needs_node and not nodes:
        raise InputError("no nodes: give Node objects, ResourceSlices with spec.nodeName, or --node NAME")

    # -- allocate, group by group ------------------------------------------------------------------
    in_use = [c for c in claims if allocated(c)]
    newly: list[tuple[dict[str, Any], str]] = []  # (claim, node name)
    newly_ids: set[int] = set()
    failures: list[_Failure] = []
    for group in groups:
        pending = [c for c in group.claims if not allocated(c)]
        fixed = [c for c in group.claims if allocated(c)]
        if not pending and (group.pod is None or not any(id(c) in newly_ids for c in fixed)):
            continue  # nothing to allocate and no reservation to add to this run's output
        allocator = Allocator(classes, slices, in_use, gates) if pending else None
        tried: list[dict[str, Any]] = []
        placed = False
        for node in nodes:
            node_name = _node_name(node)
            pod_node = ((group.pod or {}).get("spec") or {}).get("nodeName")
            if pod_node and pod_node != node_name:
                tried.append({"node": node_name, "reason": f"pod is bound to node {pod_node}"})
                continue
            blocked = next(
                (
                    c
                    for c in fixed
                    if not _node_selector_matches(c["status"]["allocation"].get("nodeSelector"), node)
                ),
                None,
            )
            if blocked is not None:
                tried.append(
                    {
                        "node": node_name,
                        "reason": f"allocated claim {_ref(blocked)} is not available on this node "
                        "(status.allocation.nodeSelector)",
                    }
                )
                continue
            if allocator is None:
                outcome = AllocationOutcome(node_name, [])
            else:
                try:
                    outcome = allocator.allocate(node, pending)
                except AllocationError as err:
                    if _is_node_error(err):
                        tried.append({"node": node_name, "reason": str(err)})
                        continue
                    raise
            if outcome.allocations is not None:
                for claim, allocation in zip(pending, outcome.allocations, strict=True):
                    claim.setdefault("status", {})["allocation"] = allocation
                    newly.append((claim, node_name))
                    newly_ids.add(id(claim))
                    in_use.append(claim)
                if group.pod is not None:
                    # PreBind reserves every claim of the pod; only this run's claims are in the output.
                    for claim in group.claims:
                        if id(claim) in newly_ids:
                            _reserve_for(claim, group.pod)
                placed = True
                break
            explanation = outcome.explanation
            tried.append(
                {
                    "node": node_name,
                    "reason": _explanation_text(explanation),
                    "details": _explanation_data(explanation),
                }
            )
        if not placed:
            failures.append(_Failure(group=group, nodes=tried))

    _print_output(args.output, newly, failures)
    return 1 if failures else 0


def _is_node_error(err: AllocationError) -> bool:
    try:
        from kdra.allocator import NodeAllocationError
    except ImportError:  # pragma: no cover - until the allocator exports it
        return "invalid resource pools were encountered" in str(err)
    return isinstance(err, NodeAllocationError)


def _reserve_for(claim: dict[str, Any], pod: dict[str, Any]) -> None:
    """status.reservedFor as kube-scheduler's PreBind writes it for the pod that got the allocation."""
    from kdra.api.templates import pod_uid

    entry = {"resource": "pods", "name": _name(pod), "uid": pod_uid(pod)}
    reserved = claim["status"].setdefault("reservedFor", [])
    if all(r.get("uid") != entry["uid"] for r in reserved):
        reserved.append(entry)


# ------------------------------------------------------------------------------------------- output


def _failure_data(failure: _Failure) -> dict[str, Any]:
    return {
        "pod": _ref(failure.group.pod) if failure.group.pod is not None else None,
        "claims": [_ref(c) for c in failure.group.claims if not (c.get("status") or {}).get("allocation")],
        "nodes": failure.nodes,
    }


def _failure_who(failure: _Failure) -> str:
    if failure.group.pod is not None:
        return f"pod {_ref(failure.group.pod)}"
    return "claims " + ", ".join(_failure_data(failure)["claims"])


def _failure_text(failure: _Failure) -> str:
    lines = [f"{_failure_who(failure)}: cannot allocate all claims on any node"]
    if not failure.nodes:
        lines.append("  no node to try")
    for entry in failure.nodes:
        reason = str(entry["reason"]).rstrip()
        if not reason.startswith(f"node {entry['node']}:"):
            reason = f"node {entry['node']}: {reason}"
        lines.extend("  " + line for line in reason.splitlines())
    return "\n".join(lines)


def _print_output(output: str, newly: list[tuple[dict[str, Any], str]], failures: list[_Failure]) -> None:
    items = [claim for claim, _ in newly]
    if failures:
        print("\n".join(_failure_text(f) for f in failures), file=sys.stderr)
    if output == "table":
        _print_table(newly)
        return
    listing: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "List",
        "metadata": {"resourceVersion": ""},
        "items": items,
    }
    if failures:
        listing["explanation"] = {
            "message": "; ".join(_failure_text(f).splitlines()[0] for f in failures),
            "unschedulable": [_failure_data(f) for f in failures],
        }
    if output == "json":
        sys.stdout.write(json.dumps(listing, indent=2) + "\n")
    else:
        sys.stdout.write(yaml.safe_dump(listing, sort_keys=False, default_flow_style=False))


def _print_table(newly: list[tuple[dict[str, Any], str]]) -> None:
    header = ("CLAIM", "REQUEST", "DRIVER", "POOL", "DEVICE", "NODE")
    rows: list[tuple[str, ...]] = []
    for claim, node in newly:
        results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
            "results"
        ) or []
        for r in results:
            rows.append(
                (
                    _name(claim),
                    str(r.get("request", "")),
                    str(r.get("driver", "")),
                    str(r.get("pool", "")),
                    str(r.get("device", "")),
                    node,
                )
            )
    if not rows:
        print("No resources found", file=sys.stderr)
        return
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        sys.stdout.write("   ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() + "\n")
