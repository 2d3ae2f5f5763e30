"""DeviceTaintRules: the taints they add to the devices of ResourceSlices.

kube-scheduler never reads raw slices when DRADeviceTaintRules is on: its ResourceSlice tracker
(k8s.io/dynamic-resource-allocation resourceslice/tracker, applyPatches) appends the taint of every rule
whose selector matches a device to that device's taints, and the allocator sees those patched slices. The
same happens here, where slices are compiled for the allocator (kdra.allocator.index.SliceCache), so every
path that allocates sees the rules' taints exactly as it sees a slice's own.

Selector: each of driver, pool and device that is set must equal the device's; an empty selector matches
every device. A rule without a selector matches nothing in 1.37 and later, and every device in 1.36 (its
tracker skipped the selector checks when the selector was nil). The taint is copied as the tracker copies
it: key, value, effect and timeAdded.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kdra.api.features import FeatureGates

TAINT_FIELDS = ("key", "value", "effect", "timeAdded")


@dataclass(frozen=True, slots=True)
class TaintRule:
    """One DeviceTaintRule as the tracker applies it; None in a selector field: any."""

    name: str
    driver: str | None
    pool: str | None
    device: str | None
    taint: Mapping[str, Any]


# What the rules add to one slice: (device name, rule name, taint) in rule order.
SliceRuleTaints = tuple[tuple[str, str, Mapping[str, Any]], ...]


def _selector_field(sel: Mapping[str, Any], name: str) -> str | None:
    value = sel.get(name)
    return None if value is None else str(value)


def compile_rules(rules: Iterable[Mapping[str, Any]], features: FeatureGates) -> list[TaintRule]:
    """The rules that apply under `features` (none when DRADeviceTaintRules is off, as kube-scheduler's
    tracker then is a plain slice informer), ordered by name. Malformed rules (which the API server
    would not have stored) add nothing."""
    if not features.device_taint_rules:
        return []
    out = []
    for rule in rules:
        if not isinstance(rule, Mapping):
            continue
        spec = rule.get("spec")
        if not isinstance(spec, Mapping):
            continue
        sel = spec.get("deviceSelector")
        if sel is None and features.version == "1.36":
            sel = {}
        taint = spec.get("taint")
        if not isinstance(sel, Mapping) or not isinstance(taint, Mapping):
            continue
        out.append(
            TaintRule(
                name=str((rule.get("metadata") or {}).get("name") or ""),
                driver=_selector_field(sel, "driver"),
                pool=_selector_field(sel, "pool"),
                device=_selector_field(sel, "device"),
                taint={k: taint[k] for k in TAINT_FIELDS if k in taint},
            )
        )
    out.sort(key=lambda r: r.name)
    return out


def slice_rule_taints(raw: Mapping[str, Any], rules: Sequence[TaintRule]) -> SliceRuleTaints:
    """The taints `rules` add to the devices of the ResourceSlice `raw`, in rule order."""
    spec = raw.get("spec") or {}
    driver = spec.get("driver", "")
    pool = (spec.get("pool") or {}).get("name", "")
    out: list[tuple[str, str, Mapping[str, Any]]] = []
    for rule in rules:
        if rule.driver is not None and rule.driver != driver:
            continue
        if rule.pool is not None and rule.pool != pool:
            continue
        for d in spec.get("devices") or ():
            name = d.get("name", "") if isinstance(d, Mapping) else ""
            if rule.device is None or rule.device == name:
                out.append((name, rule.name, rule.taint))
    return tuple(out)


def fingerprint(added: SliceRuleTaints) -> str:
    """A hashable stand-in for what the rules add to a slice (taints are dicts)."""
    return json.dumps(added, sort_keys=True, default=str)


def tainted_slices(
    rules: Iterable[Mapping[str, Any]], slices: Iterable[Mapping[str, Any]], features: FeatureGates
) -> list[Mapping[str, Any]]:
    """The slices with a device that one of `rules` taints: those whose taints a change of the rules
    changes, which kube-scheduler's tracker reports as updates of these slices."""
    compiled = compile_rules(rules, features)
    if not compiled:
        return []
    return [s for s in slices if slice_rule_taints(s, compiled)]
