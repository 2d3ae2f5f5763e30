"""Label selectors: the string form (`a=b,c!=d,e in (x,y),!f`) and the metav1.LabelSelector dict form.

Matching follows k8s.io/apimachinery/pkg/labels: requirements are ANDed; `!=` and `notin` match objects
without the label; `in`/`=` need the label present.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kdra.errors import InputError

_OPS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str  # In | NotIn | Exists | DoesNotExist | Gt | Lt
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op == "In":
            return labels.get(self.key) in self.values
        if op == "NotIn":
            return labels.get(self.key) not in self.values
        if op == "Exists":
            return self.key in labels
        if op == "DoesNotExist":
            return self.key not in labels
        value = labels.get(self.key)
        if value is None:
            return False
        try:
            have, want = int(value), int(self.values[0])
        except (ValueError, IndexError):
            return False
        return have > want if op == "Gt" else have < want


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A parsed selector; the empty selector matches everything, `nothing=True` matches nothing."""

    requirements: tuple[Requirement, ...] = ()
    nothing: bool = False

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        if self.nothing:
            return False
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements and not self.nothing

    def __str__(self) -> str:
        parts = []
        for r in self.requirements:
            if r.operator == "In" and len(r.values) == 1:
                parts.append(f"{r.key}={r.values[0]}")
            elif r.operator == "NotIn" and len(r.values) == 1:
                parts.append(f"{r.key}!={r.values[0]}")
            elif r.operator == "Exists":
                parts.append(r.key)
            elif r.operator == "DoesNotExist":
                parts.append(f"!{r.key}")
            elif r.operator in ("Gt", "Lt"):
                parts.append(f"{r.key}{'>' if r.operator == 'Gt' else '<'}{r.values[0]}")
            else:
                parts.append(f"{r.key} {r.operator.lower()} ({','.join(r.values)})")
        return ",".join(parts)


EVERYTHING = LabelSelector()

_TERM = re.compile(
    r"^\s*(?:(?P<not>!)\s*(?P<nkey>[^\s,=!<>()]+)"
    r"|(?P<key>[^\s,=!<>()]+)\s*(?:(?P<op>==|=|!=|<|>)\s*(?P<val>[^\s,()]*)"
    r"|\s+(?P<setop>in|notin)\s*\((?P<set>[^)]*)\))?)\s*$"
)


def _split_terms(text: str) -> list[str]:
    terms: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    terms.append("".join(cur))
    return terms


def parse_selector(text: str) -> LabelSelector:
    """Parse the string form used by `kubectl -l`; raises InputError naming the bad term."""
    if not text.strip():
        return EVERYTHING
    reqs: list[Requirement] = []
    for term in _split_terms(text):
        m = _TERM.match(term)
        if not m:
            raise InputError(f"label selector {text!r}: cannot parse requirement {term.strip()!r}")
        if m.group("not"):
            reqs.append(Requirement(m.group("nkey"), "DoesNotExist"))
        elif m.group("setop"):
            values = tuple(v.strip() for v in m.group("set").split(",") if v.strip())
            reqs.append(Requirement(m.group("key"), "In" if m.group("setop") == "in" else "NotIn", values))
        elif m.group("op"):
            op = m.group("op")
            val = m.group("val")
            if op in ("=", "=="):
                reqs.append(Requirement(m.group("key"), "In", (val,)))
            elif op == "!=":
                reqs.append(Requirement(m.group("key"), "NotIn", (val,)))
            else:
                reqs.append(Requirement(m.group("key"), "Gt" if op == ">" else "Lt", (val,)))
        else:
            reqs.append(Requirement(m.group("key"), "Exists"))
    return LabelSelector(tuple(reqs))


def from_label_selector(sel: Mapping[str, Any] | None, *, what: str = "selector") -> LabelSelector:
    """metav1.LabelSelector (matchLabels + matchExpressions) -> LabelSelector. None matches nothing
    (as upstream's LabelSelectorAsSelector(nil)); {} matches everything."""
    if sel is None:
        return LabelSelector(nothing=True)
    reqs = [Requirement(str(k), "In", (str(v),)) for k, v in sorted((sel.get("matchLabels") or {}).items())]
    for i, expr in enumerate(sel.get("matchExpressions") or []):
        op = expr.get("operator")
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise InputError(f"{what}.matchExpressions[{i}].operator: Unsupported value: {op!r}")
        reqs.append(
            Requirement(str(expr.get("key", "")), op, tuple(str(v) for v in expr.get("values") or ()))
        )
    return LabelSelector(tuple(reqs))


def node_selector_requirement(expr: Mapping[str, Any]) -> Requirement:
    """A core/v1 NodeSelectorRequirement (operators include Gt/Lt) as a Requirement."""
    op = expr.get("operator")
    if op not in _OPS:
        raise InputError(f"nodeSelectorRequirement {expr.get('key')!r}: Unsupported value: {op!r}")
    return Requirement(str(expr.get("key", "")), op, tuple(str(v) for v in expr.get("values") or ()))
