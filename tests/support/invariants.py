"""An independent invariant checker for fault tests on a real cluster: it reads the API, not kdra's state.

`check_cluster(client, ...)` lists Pods, ResourceClaims and ResourceSlices (and kdra PodGroups when asked)
and returns every violation of what must hold whatever crashed, paused or raced:

- **double allocation**: no device is in two claims' results, unless the slice marks it
  `allowMultipleAllocations` and the shares' `consumedCapacity` stay within its capacity (results with
  `adminAccess: true` do not count); and the devices allocated from a pool draw no more from its shared
  counters (`sharedCounters`, e.g. a GPU's MIG partitions and the whole GPU) than the counter sets hold;
- **bound pods hold their claims**: every pod bound to a node (and not terminal) has each of its claims
  allocated, reserved for it (`status.reservedFor` carries its uid, or its scheduling.k8s.io PodGroup's
  for a PodGroup-level claim, KEP-5729) and allocated for its node
  (`status.allocation.nodeSelector` admits the node);
- **no leak**: no allocated claim without a consumer, no `reservedFor` entry naming a pod that is gone or
  terminal, no delete-protection finalizer on a claim that is not allocated;
- **pending pods are explained**: every unbound pod of the named schedulers has `PodScheduled=False`
  with a message;
- **explanations name only the pod's own objects**: what is written on a pod (its PodScheduled and
  DisruptionTarget messages, its Events) names no claim but its own or its gang's (`claim NS/NAME`) and no
  other namespace (`NS/...`); a PodGroup's condition and Events name no other namespace;
- **no partial gang**: for each gang (kdra `PodGroup` `spec.minMember`, pods naming it with the
  `kdra.dev/pod-group` annotation or label, or the `gangs` argument), the number of bound members is 0 or
  at least the minimum.

For a preemption (a fault test says which pods are which), `preemption_outcome(client, namespace, ...)`
checks once the cluster settled: **no preemptor forgotten** (every preemptor bound), **victims minimal**
(no more of the preemptible pods gone or going than the fewest that make room), **no intruder on freed
devices** (no other pod holds a device the victims held). **No partial gang outside the binding window**
is the partial-gang rule above, required of every check taken after the binding window (a fault test
polls it from a restart on).

From the API server's audit log (`ControlPlaneConfig(audit_log=True)`), `writes_after_lease_loss(...)`
adds one more: **no write after the lease ran out**: a replica with leader election writes nothing once
its renew deadline after its last successful Lease renewal has passed (whatever the write's answer: a 504
may still have committed).

Some of these are transiently false while a controller catches up (a claim of a deleted pod is released a
moment later); callers wait for the cluster to settle (`wait_consistent`) and then require an empty list.
Used by every Kubernetes-mode fault test, so one definition of "consistent" serves them all.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kdra.allocator._nodes import node_selector_matches
from kdra.api.pods import pod_claim_names
from kdra.api.quantity import Quantity
from kdra.api.types import Obj
from kdra.api.workloadapi import is_reserved_for_pod

DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"
GANG_REFS = ("kdra.dev/pod-group",)


class Lister(Protocol):
    def list(self, kind: str, namespace: str | None = None) -> list[Obj]: ...


@dataclass(frozen=True)
class Violation:
    rule: (
        str  # double-allocation | unreserved | wrong-node | leak | unexplained | foreign-name | partial-gang
    )
    # | stale-write
    object: str  # Kind namespace/name
    message: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.object}: {self.message}"


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


def _terminal(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _device_table(slices: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str, str], Mapping[str, Any]]:
    out: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    for s in slices:
        spec = s.get("spec") or {}
        driver, pool = spec.get("driver", ""), (spec.get("pool") or {}).get("name", "")
        for d in spec.get("devices") or []:
            out[(driver, pool, d.get("name", ""))] = d
    return out


def double_allocations(
    claims: Iterable[Mapping[str, Any]], slices: Iterable[Mapping[str, Any]]
) -> list[Violation]:
    devices = _device_table(slices)
    holders: dict[tuple[str, str, str], list[tuple[str, Mapping[str, Any]]]] = {}
    for c in claims:
        alloc = (c.get("status") or {}).get("allocation") or {}
        for r in (alloc.get("devices") or {}).get("results") or []:
            if r.get("adminAccess"):
                continue
            key = (r.get("driver", ""), r.get("pool", ""), r.get("device", ""))
            holders.setdefault(key, []).append((_name(c), r))
    out = []
    for key, held in sorted(holders.items()):
        if len(held) < 2:
            continue
        dev = devices.get(key) or {}
        who = ", ".join(sorted(n for n, _ in held))
        if not dev.get("allowMultipleAllocations"):
            out.append(Violation("double-allocation", f"device {'/'.join(key)}", f"held by {who}"))
            continue
        used: dict[str, Quantity] = {}
        for _n, r in held:
            for cap, q in (r.get("consumedCapacity") or {}).items():
                used[cap] = used.get(cap, Quantity.parse(0)) + Quantity.parse(q)
        for cap, total in sorted(used.items()):
            have = ((dev.get("capacity") or {}).get(cap) or {}).get("value")
            if have is not None and total > Quantity.parse(have):
                out.append(
                    Violation(
                        "double-allocation",
                        f"device {'/'.join(key)}",
                        f"shares consume {total} of capacity {cap} {have} ({who})",
                    )
                )
    return out


def counter_overuse(
    claims: Iterable[Mapping[str, Any]], slices: Iterable[Mapping[str, Any]]
) -> list[Violation]:
    """Allocated devices that together consume more of a pool's shared counters than it has."""
    slices = list(slices)
    have: dict[tuple[str, str, str, str], Quantity] = {}
    draws: dict[tuple[str, str, str], list[tuple[str, str, Quantity]]] = {}
    for s in slices:
        spec = s.get("spec") or {}
        driver, pool = spec.get("driver", ""), (spec.get("pool") or {}).get("name", "")
        for cs in spec.get("sharedCounters") or []:
            for n, c in (cs.get("counters") or {}).items():
                have[(driver, pool, cs.get("name", ""), n)] = Quantity.parse((c or {}).get("value", "0"))
        for d in spec.get("devices") or []:
            for cc in d.get("consumesCounters") or []:
                for n, c in (cc.get("counters") or {}).items():
                    draws.setdefault((driver, pool, d.get("name", "")), []).append(
                        (cc.get("counterSet", ""), n, Quantity.parse((c or {}).get("value", "0")))
                    )
    if not have:
        return []
    used: dict[tuple[str, str, str, str], Quantity] = {}
    who: dict[tuple[str, str, str, str], set[str]] = {}
    for c in claims:
        alloc = (c.get("status") or {}).get("allocation") or {}
        for r in (alloc.get("devices") or {}).get("results") or []:
            if r.get("adminAccess"):
                continue
            driver, pool = r.get("driver", ""), r.get("pool", "")
            for cs, n, q in draws.get((driver, pool, r.get("device", "")), ()):
                k = (driver, pool, cs, n)
                used[k] = used.get(k, Quantity.parse(0)) + q
                who.setdefault(k, set()).add(_name(c))
    out = []
    for k, total in sorted(used.items()):
        limit = have.get(k)
        if limit is not None and total > limit:
            out.append(
                Violation(
                    "double-allocation",
                    f"counter set {k[0]}/{k[1]}/{k[2]}",
                    f"{k[3]}: devices allocated draw {total} of {limit} ({', '.join(sorted(who[k]))})",
                )
            )
    return out


def check_cluster(
    client: Lister,
    namespace: str | None = None,
    *,
    schedulers: Iterable[str] = ("kdra",),
    gangs: Mapping[str, tuple[int, Iterable[str]]] | None = None,
    read_pod_groups: bool = True,
) -> list[Violation]:
    """Every violation on the cluster (or in one namespace: pods, claims and gangs there; devices are
    checked across all claims, since a double allocation can cross namespaces)."""
    pods = client.list("Pod", namespace)
    ns_claims = client.list("ResourceClaim", namespace)
    all_claims = ns_claims if namespace is None else client.list("ResourceClaim")
    slices = client.list("ResourceSlice")
    nodes = {n["metadata"]["name"]: n for n in client.list("Node")}
    out = double_allocations(all_claims, slices) + counter_overuse(all_claims, slices)

    live = {(p["metadata"].get("namespace"), p["metadata"]["name"]): p for p in pods}
    by_uid = {p["metadata"].get("uid"): p for p in pods}
    claims = {(c["metadata"].get("namespace"), c["metadata"]["name"]): c for c in ns_claims}

    for p in pods:
        node = (p.get("spec") or {}).get("nodeName")
        if not node or _terminal(p):
            continue
        ns = p["metadata"].get("namespace")
        labels = ((nodes.get(node) or {}).get("metadata") or {}).get("labels") or {}
        for cname in pod_claim_names(p):
            c = claims.get((ns, cname))
            where = f"Pod {_name(p)}"
            if c is None:
                out.append(
                    Violation("unreserved", where, f"bound to {node} but its claim {cname} does not exist")
                )
                continue
            st = c.get("status") or {}
            if not st.get("allocation"):
                out.append(
                    Violation("unreserved", where, f"bound to {node} but claim {cname} is not allocated")
                )
                continue
            if not is_reserved_for_pod(p, c, accept_pod_group=True):
                out.append(
                    Violation(
                        "unreserved", where, f"bound to {node} but claim {cname} is not reserved for it"
                    )
                )
            sel = st["allocation"].get("nodeSelector")
            if sel and not node_selector_matches(sel, node, labels):
                out.append(
                    Violation(
                        "wrong-node", where, f"bound to {node} but claim {cname} is allocated elsewhere"
                    )
                )

    for c in ns_claims:
        st = c.get("status") or {}
        where = f"ResourceClaim {_name(c)}"
        rf = st.get("reservedFor") or []
        if st.get("allocation") and not rf and not c["metadata"].get("deletionTimestamp"):
            out.append(Violation("leak", where, "allocated without a consumer"))
        for r in rf:
            if r.get("resource", "pods") != "pods":
                continue
            pod = by_uid.get(r.get("uid"))  # reservedFor names pods of the claim's own namespace
            if pod is None or _terminal(pod):
                state = "gone" if pod is None else "terminal"
                out.append(Violation("leak", where, f"reserved for pod {r.get('name')} that is {state}"))
        if not st.get("allocation") and DELETE_PROTECTION in (c["metadata"].get("finalizers") or []):
            out.append(
                Violation("leak", where, f"{DELETE_PROTECTION} finalizer on a claim that is not allocated")
            )

    names = set(schedulers)
    for p in pods:
        spec = p.get("spec") or {}
        if spec.get("nodeName") or _terminal(p) or p["metadata"].get("deletionTimestamp"):
            continue
        if (spec.get("schedulerName") or "default-scheduler") not in names:
            continue
        cond = next(
            (c for c in (p.get("status") or {}).get("conditions") or [] if c.get("type") == "PodScheduled"),
            None,
        )
        if cond is None or cond.get("status") != "False" or not cond.get("message"):
            out.append(
                Violation("unexplained", f"Pod {_name(p)}", "pending without a PodScheduled=False message")
            )

    out += foreign_names(client, pods, namespace)

    groups: dict[str, tuple[int, set[str]]] = {}
    if read_pod_groups:
        try:
            for g in client.list("PodGroup", namespace):
                key = _name(g)
                groups[key] = (int((g.get("spec") or {}).get("minMember") or 1), set())
        except Exception:  # the CRD is not installed: no kdra gangs to check
            groups = {}
        for p in pods:
            gname = _gang_of(p)
            key = f"{_ns(p)}/{gname}"
            if gname and key in groups:
                groups[key][1].add(p["metadata"]["name"])
    for key, (minimum, members) in (gangs or {}).items():
        groups[key] = (minimum, set(members))
    for key, (minimum, members) in sorted(groups.items()):
        ns = key.split("/", 1)[0] if "/" in key else namespace
        bound = [
            m
            for m in sorted(members)
            if (member := live.get((ns, m))) is not None
            and (member.get("spec") or {}).get("nodeName")
            and not _terminal(member)
        ]
        if 0 < len(bound) < minimum:
            out.append(
                Violation(
                    "partial-gang",
                    f"gang {key}",
                    f"{len(bound)} of minMember {minimum} bound: {', '.join(bound)}",
                )
            )
    return out


_CLAIM_REF = re.compile(r"\bclaim ([a-z0-9][a-z0-9.-]*)/([a-z0-9.-]*)")


def _namespace_refs(namespaces: Iterable[str]) -> re.Pattern[str] | None:
    names = sorted(set(namespaces), key=len, reverse=True)
    if not names:
        return None
    return re.compile(r"(?<![\w./-])(" + "|".join(re.escape(n) for n in names) + r")/")


def foreign_names(
    client: Lister, pods: Iterable[Mapping[str, Any]], namespace: str | None
) -> list[Violation]:
    """What is written on a pod names only its own claims and namespace; on a PodGroup, its namespace."""
    try:
        namespaces = {n["metadata"]["name"] for n in client.list("Namespace")}
    except Exception:  # a store without Namespaces: the namespaces of the objects seen
        namespaces = set()
    pods = list(pods)
    namespaces |= {str(p["metadata"].get("namespace")) for p in pods}
    try:
        groups = client.list("PodGroup", namespace)
    except Exception:
        groups = []
    events: dict[tuple[str, str, str], list[str]] = {}
    for ns in sorted({str(p["metadata"].get("namespace")) for p in pods} | {_ns(g) for g in groups}):
        for e in client.list("Event", ns):
            io = e.get("involvedObject") or {}
            key = (str(io.get("kind")), ns, str(io.get("name")))
            events.setdefault(key, []).append(str(e.get("message") or e.get("note") or ""))
    out = []

    def scan(
        where: str,
        own_ns: str,
        texts: Iterable[str],
        own_claims: set[str] | None,
        own_prefixes: tuple[str, ...] = (),
    ) -> None:
        others = _namespace_refs(namespaces - {own_ns})
        for text in texts:
            bad = sorted({m[1] for m in others.finditer(text)}) if others is not None else []
            if own_claims is not None:
                bad += sorted(
                    {
                        f"claim {m[1]}/{m[2]}"
                        for m in _CLAIM_REF.finditer(text)
                        if m[1] != own_ns or (m[2] and not _is_own_claim(m[2], own_claims, own_prefixes))
                    }
                )
            if bad:
                first = text.splitlines()[0][:200] if text else ""
                out.append(Violation("foreign-name", where, f"names {', '.join(bad)}: {first!r}"))

    # A gang's explanation, written on each member, names the member that fits nowhere and its claims.
    gang_claims: dict[tuple[str, str], set[str]] = {}
    for p in pods:
        gang = _gang_of(p)
        if gang:
            gang_claims.setdefault((_ns(p), gang), set()).update(pod_claim_names(p))
    for p in pods:
        ns, name = str(p["metadata"].get("namespace")), str(p["metadata"]["name"])
        own = set(pod_claim_names(p)) | gang_claims.get((ns, _gang_of(p) or ""), set())
        conds = [
            str(c.get("message") or "")
            for c in (p.get("status") or {}).get("conditions") or []
            if c.get("type") in ("PodScheduled", "DisruptionTarget")
        ]
        scan(f"Pod {ns}/{name}", ns, conds + events.get(("Pod", ns, name), []), own, _generated_prefixes(p))
    for g in groups:
        ns, name = _ns(g), str(g["metadata"]["name"])
        conds = [str(c.get("message") or "") for c in (g.get("status") or {}).get("conditions") or []]
        scan(f"PodGroup {ns}/{name}", ns, conds + events.get(("PodGroup", ns, name), []), None)
    return out


def _generated_prefixes(pod: Mapping[str, Any]) -> tuple[str, ...]:
    """The generateName the resourceclaim controller gives a template entry's claim (`<pod>-<entry>-`).
    Its status names only the latest: kube-controller-manager may make a second claim for a pod that has
    ended (its sync races the first claim's deletion), while Events still name the claim the pod ran with."""
    name = (pod.get("metadata") or {}).get("name")
    return tuple(
        f"{name}-{e.get('name')}-"
        for e in (pod.get("spec") or {}).get("resourceClaims") or []
        if e.get("resourceClaimTemplateName")
    )


def _is_own_claim(name: str, own: set[str], prefixes: tuple[str, ...]) -> bool:
    return name in own or any(name.startswith(p) and len(name) == len(p) + 5 for p in prefixes)


def _gang_of(pod: Mapping[str, Any]) -> str | None:
    meta = pod.get("metadata") or {}
    for ref in GANG_REFS:
        got = (meta.get("annotations") or {}).get(ref) or (meta.get("labels") or {}).get(ref)
        if got:
            return str(got)
    return None


def _ns(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("namespace"))


def _live(pod: Mapping[str, Any]) -> bool:
    return not (pod.get("metadata") or {}).get("deletionTimestamp") and not _terminal(pod)


def devices_of(client: Lister, namespace: str, pods: Iterable[str]) -> set[str]:
    """The devices (driver/pool/device) the claims of these pods hold now."""
    names = set(pods)
    by_pod = {p["metadata"]["name"]: p for p in client.list("Pod", namespace)}
    claims = {c["metadata"]["name"]: c for c in client.list("ResourceClaim", namespace)}
    out = set()
    for name in names & set(by_pod):
        for cname in pod_claim_names(by_pod[name]):
            alloc = ((claims.get(cname) or {}).get("status") or {}).get("allocation") or {}
            for r in (alloc.get("devices") or {}).get("results") or []:
                out.add(f"{r.get('driver')}/{r.get('pool')}/{r.get('device')}")
    return out


def holdings(client: Lister, namespace: str) -> str:
    """Who holds what in a namespace now, one line per pod (node, nomination, terminating) and per claim
    (devices, reservedFor): what a timed-out wait on a preemption prints, so that a device two pods were
    given is named in the failure itself."""
    lines = []
    for p in sorted(client.list("Pod", namespace), key=_name):
        meta, st = p["metadata"], p.get("status") or {}
        flags = " terminating" if meta.get("deletionTimestamp") else ""
        nominated = st.get("nominatedNodeName")
        node = (p.get("spec") or {}).get("nodeName")
        lines.append(
            f"pod {meta['name']}: node={node or '-'}"
            f"{f' nominated={nominated}' if nominated else ''} phase={st.get('phase', '-')}{flags}"
            f"{'' if node else _why_pending(st)}"
        )
    for c in sorted(client.list("ResourceClaim", namespace), key=_name):
        st = c.get("status") or {}
        results = ((st.get("allocation") or {}).get("devices") or {}).get("results") or []
        devs = ",".join(str(r.get("device")) for r in results) or "-"
        users = ",".join(str(r.get("name")) for r in st.get("reservedFor") or []) or "-"
        lines.append(f"claim {c['metadata']['name']}: devices={devs} reservedFor={users}")
    return "\n".join(lines)


def _why_pending(status: Obj) -> str:
    """An unbound pod's PodScheduled condition as its scheduler wrote it, or that none has tried it yet."""
    for c in status.get("conditions") or []:
        if c.get("type") == "PodScheduled":
            return f" PodScheduled={c.get('status')} {c.get('reason', '')}: {c.get('message', '')}"
    return " (no scheduler has written PodScheduled)"


def preemption_outcome(
    client: Lister,
    namespace: str,
    *,
    preemptors: Iterable[str],
    preemptible: Iterable[str],
    minimum: int,
    intruders: Iterable[str],
    freed: Iterable[str],
) -> list[Violation]:
    """A preemption's end state: every preemptor bound; at most `minimum` of the `preemptible` pods gone,
    terminating or failed; no intruder holding one of the devices (`freed`, driver/pool/device) the
    preemptible pods held before."""
    pods = {p["metadata"]["name"]: p for p in client.list("Pod", namespace)}
    out = []
    for name in sorted(set(preemptors)):
        p = pods.get(name)
        if p is None or not (p.get("spec") or {}).get("nodeName") or not _live(p):
            nominated = ((p or {}).get("status") or {}).get("nominatedNodeName")
            out.append(
                Violation(
                    "forgotten-preemptor",
                    f"Pod {namespace}/{name}",
                    "not bound" + (f" (nominated to {nominated})" if nominated else " and not nominated"),
                )
            )
    gone = sorted(n for n in set(preemptible) if n not in pods or not _live(pods[n]))
    if len(gone) > minimum:
        out.append(
            Violation(
                "excess-victims",
                f"namespace {namespace}",
                f"{len(gone)} victims for a need of {minimum}: {', '.join(gone)}",
            )
        )
    held = devices_of(client, namespace, [n for n in intruders if n in pods and _live(pods[n])])
    taken = sorted(held & set(freed))
    if taken:
        out.append(
            Violation("intruder", f"namespace {namespace}", f"freed devices taken: {', '.join(taken)}")
        )
    return out


def wait_consistent(
    client: Lister, namespace: str | None = None, *, timeout: float = 60.0, interval: float = 1.0, **kw: Any
) -> list[Violation]:
    """Re-check until no violation is left or `timeout` (stretched by the runner's timeout factor)
    passes; returns what is still violated."""
    from support.wait import scaled

    deadline = time.monotonic() + scaled(timeout)
    while True:
        found = check_cluster(client, namespace, **kw)
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(interval)


# -- the audit log ----------------------------------------------------------------------------------------

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
_HTTP_METHOD = {
    "create": "POST",
    "update": "PUT",
    "patch": "PATCH",
    "delete": "DELETE",
    "deletecollection": "DELETE",
}


def _uri_path(ev: Mapping[str, Any]) -> str:
    return str(ev.get("requestURI") or "").split("?", 1)[0]


def audit_events(path: str | Path) -> list[Obj]:
    """The audit log's events (JSON lines), in order; a line cut short by a writer still writing is
    skipped."""
    out = []
    try:
        text = Path(path).read_text(errors="replace")
    except FileNotFoundError:
        return []
    for line in text.splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if isinstance(ev, dict):
            out.append(ev)
    return out


def audit_time(ev: Mapping[str, Any]) -> float:
    """When the API server received the request (seconds since the epoch)."""
    ts = str(ev.get("requestReceivedTimestamp") or ev.get("stageTimestamp") or "")
    return _dt.datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def _describe(ev: Mapping[str, Any]) -> str:
    ref = ev.get("objectRef") or {}
    code = (ev.get("responseStatus") or {}).get("code")
    what = "/".join(x for x in (ref.get("resource"), ref.get("subresource")) if x)
    name = "/".join(x for x in (ref.get("namespace"), ref.get("name")) if x)
    return f"{ev.get('verb')} {what} {name} -> {code}"


def writes_after_lease_loss(
    events: Iterable[Mapping[str, Any]],
    *,
    writer: str,
    lease: str,
    renew_deadline: float,
    until: float | None = None,
    reported: Collection[tuple[str, str]] = (),
) -> list[Violation]:
    """Every write by `writer` (a substring of its User-Agent) received after its leadership ended: later
    than `renew_deadline` after the latest successful renewal of the Lease `lease` by that writer (the
    renewal was received after the writer started it, so the writer's own deadline is no later). Writes
    before the writer first led count too (a standby writes nothing but its Lease). `until` bounds the
    events looked at (seconds since the epoch), e.g. to a trial's window. `reported`: (HTTP method, path)
    of writes the writer itself reported sent after its lease ran out (paused between its last check and
    the send, which no client can fence: kdra.kube.leader); those are not stale writes it missed."""
    out: list[Violation] = []
    valid_until: float | None = None  # None: has not led yet
    for ev in events:
        if writer not in str(ev.get("userAgent") or "") or ev.get("verb") not in WRITE_VERBS:
            continue
        if ev.get("stage") not in (None, "ResponseComplete", "Panic"):
            continue
        t = audit_time(ev)
        if until is not None and t > until:
            continue
        ref = ev.get("objectRef") or {}
        code = int((ev.get("responseStatus") or {}).get("code") or 0)
        if ref.get("resource") == "leases" and ref.get("name") in (lease, None, ""):  # "": a create
            if 200 <= code < 300:
                valid_until = t + renew_deadline
            continue  # Lease writes are conditional on its resourceVersion: a stale one fails alone
        if valid_until is None or t > valid_until:
            if reported and (_HTTP_METHOD.get(str(ev.get("verb")), ""), _uri_path(ev)) in reported:
                continue
            late = (
                "before it led" if valid_until is None else f"{t - valid_until:.2f}s after its lease ran out"
            )
            out.append(Violation("stale-write", writer, f"{_describe(ev)}, received {late}"))
    return out
