"""Why a pod fits on none of many nodes, in a few lines: nodes grouped by reason, then the nearest ones.

An `Explanation` says why claims do not fit on one node; on a fleet of a thousand nodes the per-node texts
run to thousands of lines. kube-scheduler's answer is one line that counts nodes per reason ("0/5 nodes are
available: 3 Insufficient cpu, 2 node(s) had untolerated taint"). `NodesSummary` does that for device
reasons too: each node's verdict (the scheduler's node-level reasons, or the allocator's explanation) is
reduced to one reason phrased without node-specific values, nodes with the same reason are counted together,
and what differs between them is folded into one detail ("largest is 80Gi", "at most 1 free"). Then the
nodes that came closest (fewest devices short) are shown in full. `kdra allocate`, `kdra explain` and the
Kubernetes-mode scheduler's Events and PodScheduled messages all use this one grouping.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kdra.allocator.explain import Explanation, RequestExplanation
from kdra.api.quantity import in_unit_of

DEFAULT_NODES = 3  # nodes shown in full after the summary


@dataclass
class NodeFinding:
    """One node's verdict for a pod (or a group of claims)."""

    node: str
    fits: bool = False
    # kube-scheduler's node-level reasons (filter plugins: "Insufficient cpu", "node(s) had untolerated
    # taint {...}", ...), when the node was ruled out before device allocation.
    reasons: tuple[str, ...] = ()
    # The allocator's Explanation (or a LazyExplanation) when the devices did not fit.
    explanation: Any = None
    # A node-level message that is neither (an allocation error on that node, a claim allocated elsewhere).
    message: str = ""
    devices: tuple[str, ...] = ()  # what it would get, when it fits
    # For a node ruled out before device allocation: how many node-level checks failed (every filter,
    # not only the first), and a function giving (no device of a requested class at all, devices short)
    # as if the node had passed them: how close it came, for `nearest`.
    checks: int = 0
    device_gap: Callable[[], tuple[bool, int]] | None = None

    def explained(self) -> Explanation | None:
        ex = self.explanation
        if ex is not None and not isinstance(ex, Explanation) and hasattr(ex, "get"):
            ex = ex.get()
        return ex if isinstance(ex, Explanation) else None

    def text(self) -> str:
        """The full per-node detail, `node NAME: ...` first."""
        if self.fits:
            devs = ", ".join(self.devices)
            return f"node {self.node}: fits" + (f" ({devs})" if devs else "")
        ex = self.explained()
        if ex is not None and self.message:  # an allocation error on this node, with what the allocator saw
            rest = str(ex).splitlines()[1:]
            return "\n".join([f"node {self.node}: {self.message}", *rest])
        if ex is not None:
            return str(ex)
        if self.reasons:
            return f"node {self.node}: " + ", ".join(self.reasons)
        msg = self.message or "cannot allocate all claims"
        return msg if msg.startswith(f"node {self.node}:") else f"node {self.node}: {msg}"


# ------------------------------------------------------------------------------------------ details


class _Detail:
    """What differs between nodes with the same reason, folded into one phrase."""

    def add(self, other: _Detail) -> None:
        raise NotImplementedError

    def text(self) -> str:
        raise NotImplementedError


class _Most(_Detail):
    def __init__(self, label: str, value: int) -> None:
        self.label, self.value = label, value

    def add(self, other: _Detail) -> None:
        if isinstance(other, _Most):
            self.value = max(self.value, other.value)

    def text(self) -> str:
        return f"{self.label} {self.value:,}"


def _number(value: str) -> float | None:
    from kdra.api.quantity import parse_quantity

    try:
        return float(parse_quantity(value).as_float())
    except (ValueError, TypeError, AttributeError):
        return None


class _Values(_Detail):
    """The values the failing selector looked at: the largest of numbers (in the unit the selector asks
    for), else the distinct values."""

    def __init__(self, values: dict[str, str], needs: str = "") -> None:
        self.values: dict[str, list[str]] = {k: [v] for k, v in values.items() if v != "<not set>"}
        self.unset = {k for k, v in values.items() if v == "<not set>"}
        self.needs = needs

    def add(self, other: _Detail) -> None:
        if not isinstance(other, _Values):
            return
        for k, vs in other.values.items():
            mine = self.values.setdefault(k, [])
            for v in vs:
                if v not in mine:
                    mine.append(v)
        self.unset |= other.unset

    def text(self) -> str:
        parts = []
        single = len(self.values) == 1
        for k, vs in self.values.items():
            nums = [(n, v) for v in vs if (n := _number(v)) is not None]
            label = "" if single else f"{k} "
            if nums and len(nums) == len(vs):
                parts.append(f"largest {label}is {in_unit_of(max(nums)[1], self.needs)}")
            else:
                shown = ", ".join(vs[:3]) + (f" and {len(vs) - 3} more" if len(vs) > 3 else "")
                parts.append(f"{label or 'devices have '}{shown}")
        for k in sorted(self.unset):
            parts.append(f"{k} not set on some devices")
        return "; ".join(parts)


@dataclass
class ReasonGroup:
    reason: str  # phrased for "N <reason>": "have no device of class gpu.nvidia.com"
    nodes: list[str] = field(default_factory=list)
    detail: _Detail | None = None

    @property
    def count(self) -> int:
        return len(self.nodes)

    def text(self) -> str:
        detail = self.detail.text() if self.detail is not None else ""
        if detail and self.reason.endswith(")"):
            return f"{self.count:,} {self.reason[:-1]}; {detail})"
        return f"{self.count:,} {self.reason}" + (f" ({detail})" if detail else "")

    def to_dict(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "count": self.count,
            "detail": self.detail.text() if self.detail is not None else "",
            "nodes": list(self.nodes),
        }


# ---------------------------------------------------------------------------------- classification


def _base(request: str) -> str:
    return request.split("/", 1)[0]


def _who(r: RequestExplanation, several_claims: bool) -> str:
    req = f"request {_base(r.request)}"
    return f"claim {r.claim} {req}" if several_claims else req


def _needs(r: RequestExplanation) -> str:
    nm = r.nearest_miss
    if nm is None:
        return ""
    keys = list(nm.values)
    if len(keys) == 1 and not nm.needs.startswith("`"):
        return f"{keys[0]} {nm.needs}"
    return nm.needs


def _request_reason(r: RequestExplanation, several: bool) -> tuple[str, _Detail | None]:
    who = _who(r, several)
    elsewhere = (
        f" (the devices matching {who} are of class {', '.join(r.other_classes)})" if r.other_classes else ""
    )
    if r.class_selected == 0:
        if r.selector_errors:
            return f"cannot evaluate the selectors of class {r.device_class} for {who}", None
        return f"have no device of class {r.device_class}{elsewhere}", None
    if r.request_selected == 0:
        nm = r.nearest_miss
        if r.selector_errors and nm is None:
            return f"cannot evaluate the selectors of {who}", None
        if nm is not None:
            which = "class selector" if nm.from_class else "selector"
            return (
                f"fail {which} #{nm.selector_index} of {who} (needs {_needs(r)}){elsewhere}",
                _Values(nm.values, _needs(r)),
            )
        return f"have no device matching {who}", None
    if r.mode == "All":
        return f"cannot give {who} every matching device (some are in use or blocked)", _Most(
            "at most free:", r.usable
        )
    if r.request_selected < r.needed:
        return f"have fewer than {r.needed} devices matching {who}", _Most("most:", r.request_selected)
    blockers = [
        (r.in_use, "in use"),
        (r.blocked_by_counters, "blocked by counters"),
        (r.blocked_by_capacity, "without the capacity asked for"),
        (r.blocked_by_taints, "tainted"),
        (r.blocked_by_constraints, "without the constrained attribute"),
    ]
    n, why = max(blockers, key=lambda b: b[0])
    what = f", the rest {why}" if n else ""
    return f"have fewer than {r.needed} free devices for {who}{what}", _Most("most free:", r.usable)


_CONSTRAINT = re.compile(
    r"^claim (?P<claim>\S+), constraint #(?P<i>\d+): (?P<kind>matchAttribute|distinctAttribute) "
    r"(?P<attr>\S+) needs (?P<need>\d+) (?P<rest>.*?)"
    r"(?: \(largest group: .* with (?P<most>\d+)\)|, usable devices have (?P<have>\d+))?$"
)
_TOGETHER = re.compile(
    r"^together the claims need (\d+) devices, but only (\d+) different usable devices exist$"
)
_COUNTER = re.compile(
    r"^the requests need at least (\S+) of counter (\S+)/(\S+) in pool \S+, only (\S+) left$"
)
_SEARCH = re.compile(r"^search stopped after \d+ steps \(limit (\d+)\)")


def _claim_reason(text: str, several: bool) -> tuple[str, _Detail | None]:
    m = _CONSTRAINT.match(text)
    if m:
        who = f" of claim {m['claim']}" if several else ""
        if m["kind"] == "matchAttribute":
            reason = f"have no {m['need']} usable devices with the same {m['attr']} (matchAttribute{who})"
            return reason, _Most("largest group:", int(m["most"] or 0))
        reason = f"have fewer than {m['need']} different values of {m['attr']} (distinctAttribute{who})"
        return reason, _Most("most:", int(m["have"] or 0))
    m = _TOGETHER.match(text)
    if m:
        return f"have fewer than {m[1]} usable devices for all claims together", _Most("most:", int(m[2]))
    m = _COUNTER.match(text)
    if m:
        return f"have less than {m[1]} of counter {m[3]} left for the requests", None
    m = _SEARCH.match(text)
    if m:
        return f"were not decided within the search budget ({m[1]} steps)", None
    return text, None


def classify(finding: NodeFinding) -> tuple[str, _Detail | None]:
    """One reason for a node that does not fit, phrased to follow a count ("12 have ...")."""
    if finding.reasons:
        return ", ".join(finding.reasons), None
    ex = finding.explained()
    if ex is None or finding.message:
        msg = finding.message or "cannot allocate all claims"
        return msg.removeprefix(f"node {finding.node}: "), None
    several = len({r.claim for r in ex.requests}) > 1
    alternatives: dict[tuple[str, str], list[RequestExplanation]] = {}
    for r in ex.requests:
        alternatives.setdefault((r.claim, _base(r.request)), []).append(r)
    for alts in alternatives.values():
        if not any(a.fits_alone for a in alts):
            return _request_reason(alts[0], several)
    for reason in ex.reasons:
        return _claim_reason(reason, several)
    if ex.invalid_pools:
        return "have invalid resource pools", None
    if ex.incomplete_pools:
        return "have incomplete resource pools (being updated)", None
    return "cannot allocate all claims", None


def distance(finding: NodeFinding) -> tuple[int, int, int, str]:
    """How far a node is from fitting: (tier, devices short, node-level checks failed, name). A node that
    passed the node-level checks is nearer than one ruled out by them, and that one nearer than a node
    without a single device of a requested class; among nodes ruled out, fewer devices short (where the
    caller estimated them), then fewer failed checks, come first."""
    if finding.fits:
        return (0, 0, 0, finding.node)
    if finding.reasons or finding.message:
        checks = max(finding.checks, len(finding.reasons))
        if finding.device_gap is None:
            return (2, 0, checks, finding.node)
        none, missing = finding.device_gap()
        return (3 if none else 2, missing, checks, finding.node)
    ex = finding.explained()
    if ex is None:
        return (2, 0, 0, finding.node)
    short: dict[tuple[str, str], int] = {}
    classless = False
    for r in ex.requests:
        key = (r.claim, _base(r.request))
        gap = max(0, r.needed - r.usable) if r.mode != "All" else int(not r.fits_alone)
        short[key] = min(short.get(key, gap), gap)
        classless = classless or (r.class_selected == 0 and not r.fits_alone)
    # A node without a single device of the class is farther than one ruled out by a taint or a selector.
    return (3 if classless else 1, sum(short.values()) or len(ex.reasons), 0, finding.node)


# ----------------------------------------------------------------------------------------- summary


class NodesSummary:
    """Nodes grouped by why they do not fit, and the nearest ones, for `len(findings)` nodes."""

    def __init__(self, findings: Iterable[NodeFinding]) -> None:
        self.findings = list(findings)
        self.fitting = [f.node for f in self.findings if f.fits]
        groups: dict[str, ReasonGroup] = {}
        for f in self.findings:
            if f.fits:
                continue
            reason, detail = classify(f)
            g = groups.get(reason)
            if g is None:
                g = groups[reason] = ReasonGroup(reason, detail=detail)
            elif detail is not None:
                if g.detail is None:
                    g.detail = detail
                else:
                    g.detail.add(detail)
            g.nodes.append(f.node)
        self.groups = sorted(groups.values(), key=lambda g: (-g.count, g.reason))

    @property
    def total(self) -> int:
        return len(self.findings)

    def headline(self) -> str:
        """`0/1,213 nodes: 1,100 have no device of class X; 96 have fewer than 2 free ...; 17 fail ...`"""
        head = f"{len(self.fitting):,}/{self.total:,} nodes"
        if not self.findings:
            return f"{head}: no node to try"
        if not self.groups:
            return f"{head} fit"
        parts = "; ".join(g.text() for g in self.groups)
        return f"{head}: {parts}" if not self.fitting else f"{head} fit; the others: {parts}"

    def nearest(self, limit: int | None = DEFAULT_NODES) -> list[NodeFinding]:
        """The nodes that do not fit, nearest first; `limit` None = all."""
        misses = sorted((f for f in self.findings if not f.fits), key=distance)
        return misses if limit is None else misses[: max(0, limit)]

    def lines(self, nodes: int | None = DEFAULT_NODES, hint: str = "--nodes N or -v shows more") -> list[str]:
        """The headline, then the nearest nodes in full (indented)."""
        out = [self.headline()]
        shown = self.nearest(nodes)
        misses = self.total - len(self.fitting)
        if shown:
            more = f"; {hint}" if len(shown) < misses and hint else ""
            label = "nearest node" if len(shown) == 1 else f"nearest {len(shown)} nodes"
            out.append(f"{label} (of {misses:,} that do not fit{more}):")
            for f in shown:
                out.extend("  " + line for line in f.text().splitlines())
        return out

    def text(self, nodes: int | None = DEFAULT_NODES, hint: str = "--nodes N or -v shows more") -> str:
        return "\n".join(self.lines(nodes, hint))

    def to_dict(self, nodes: int | None = DEFAULT_NODES) -> dict[str, Any]:
        return {
            "message": self.headline(),
            "nodes": self.total,
            "fit": list(self.fitting),
            "reasons": [g.to_dict() for g in self.groups],
            "nearest": [f.node for f in self.nearest(nodes)],
        }


def bounded(text: str, limit: int, suffix: str = " ...") -> str:
    """`text` cut to at most `limit` bytes of UTF-8 (the API's length rules count bytes), ending in
    `suffix` when cut (kube-scheduler's truncateMessage). Where the kept part has a line break, the cut is
    at the last one, so no line is left half-written (a claim's name cut to 'train-g' reads as another
    claim); a single long line is cut on a character boundary."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    cut = data[: max(0, limit - len(suffix.encode("utf-8")))].decode("utf-8", errors="ignore")
    line_end = cut.rfind("\n")
    return (cut[:line_end] if line_end > 0 else cut) + suffix


def summarize(findings: Sequence[NodeFinding]) -> NodesSummary:
    return NodesSummary(findings)


__all__ = ["DEFAULT_NODES", "NodeFinding", "NodesSummary", "ReasonGroup", "bounded", "classify", "summarize"]
