"""Differential test: kdra's allocator against the real one (support.oracle) on random worlds.

For every seed, `support.worlds.random_world(seed)` is run under each supported Kubernetes version,
in-process through the placement loop `kdra allocate` and `kdra explain` use (kdra.scheduler.placement) and
through that version's oracle, as kube-scheduler places a pod: groups (one pod's claims each) in turn, the
allocator on every node (name order); "invalid resource pools were encountered" rules out one node, any other
error ends the world; among the nodes that fit, DynamicResources' prioritized-list score decides (ties to the
first by name), and that node's devices are in use for the next group. The answers must agree: outcome per
group, the error text, which nodes failed with invalid pools, and where upstream is deterministic (not its
"stable" allocator, which walks pools in Go map order) the node and every allocation field except shareID.

`PYTHONPATH=tests python -m support.differential --n 100000` runs many; a disagreement is shrunk
(objects removed while it persists) and with `--save DIR` written as a scenario-corpus case
(tests/scenarios format) with the oracle's answer as the expectation.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kdra.allocator import FeatureGates
from kdra.api.features import DEFAULTS, SUPPORTED_VERSIONS, picks_deterministically
from kdra.api.types import Obj
from kdra.errors import InputError
from kdra.scheduler.placement import Placer
from support.oracle import Oracle
from support.worlds import World, random_world

RESULT_KEYS = (
    "request",
    "driver",
    "pool",
    "device",
    "adminAccess",
    "tolerations",
    "bindingConditions",
    "bindingFailureConditions",
    "consumedCapacity",
)


def _name(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def features_for(world: World, version: str) -> FeatureGates:
    return FeatureGates(world.gates(version), version)  # type: ignore[arg-type]


# Upstream's search time per node before the case counts as inconclusive (kube-scheduler's own DRA
# Filter timeout is 10 s; worlds are small, so anything near this is a search explosion upstream).
ORACLE_TIMEOUT_SECONDS = 3.0


def oracle_case(world: World, version: str, case_id: str, timeout: float = ORACLE_TIMEOUT_SECONDS) -> Obj:
    return {
        "id": case_id,
        "timeoutSeconds": timeout,
        "gates": world.gates(version),
        "nodes": sorted(world.nodes, key=_name),
        "deviceClasses": world.classes,
        "resourceSlices": world.slices,
        "allocatedClaims": world.allocated,
        "groups": world.groups,
    }


def run_kdra(world: World, features: FeatureGates) -> list[Obj]:
    """kdra's answers in the oracle's shape: each group through the one placement loop that `kdra
    allocate` and `kdra explain` use (kdra.scheduler.placement), in-process."""
    placer = Placer([*world.nodes, *world.classes, *world.slices, *world.allocated], features)
    answers: list[Obj] = []
    for group in world.groups:
        placement = placer.place(None, group)
        if placement.error is not None:
            answers.append({"outcome": "error", "node": placement.error_node, "error": str(placement.error)})
            break
        ans: Obj = {"outcome": "unschedulable"}
        if placement.placed:
            ans = {"outcome": "allocation", "node": placement.node, "allocations": placement.allocations}
            ans["scores"] = {s.node: s.plugins.get("DynamicResources", 0) for s in placement.scores}
            placer.commit(placement)
        node_errors = {f.node: f.message for f in placement.findings if f.message}
        if node_errors:
            ans["nodeErrors"] = node_errors
        if placement.gave_up:  # also where the group fit elsewhere: those nodes' verdicts are unknown
            ans["gaveUp"] = placement.gave_up
        answers.append(ans)
    return answers


def _norm_allocation(alloc: Obj) -> Obj:
    devices = alloc.get("devices") or {}
    results = []
    for r in devices.get("results") or []:
        results.append({k: r[k] for k in RESULT_KEYS if r.get(k) not in (None, [], {}, False)})
    out: Obj = {"results": results}
    if devices.get("config"):
        out["config"] = devices["config"]
    if alloc.get("nodeSelector"):
        out["nodeSelector"] = alloc["nodeSelector"]
    return json.loads(json.dumps(out, sort_keys=True))


def _budget_explains(got: Obj, want: Obj) -> bool:
    """Whether kdra's step budget, spent on some nodes of this group, can explain an outcome or node
    different from upstream's: kdra placed nothing, or upstream's answer (a node that fit, an error) came
    from a node where kdra stopped searching. A group kdra placed while upstream found no node is a real
    difference whatever the budget did."""
    unsure = got.get("gaveUp") or []
    return bool(unsure) and (got["outcome"] != "allocation" or want.get("node") in unsure)


def _gave_up_first(kdra: Sequence[Obj], oracle: Obj) -> bool:
    """kdra's search budget ran out in a group where upstream answered otherwise (compare's inconclusive
    case on kdra's side)."""
    return any(
        got.get("gaveUp")
        and (
            (
                (got["outcome"] != want["outcome"] or got.get("node") != want.get("node"))
                and _budget_explains(got, want)
            )
            or sorted(got.get("nodeErrors") or {}) != sorted(want.get("nodeErrors") or {})
        )
        for got, want in zip(kdra, oracle.get("groups") or [], strict=False)
    )


def compare(kdra: Sequence[Obj], oracle: Obj) -> str | None:
    """None when the answers agree, else a one-line signature of the first difference (its class)."""
    deterministic = picks_deterministically(str(oracle.get("version")), str(oracle.get("variant")))
    groups = oracle.get("groups") or []
    if oracle.get("fatal"):
        return f"oracle fatal: {oracle['fatal']}"
    for i, want in enumerate(groups):
        if i >= len(kdra):
            return f"group {i}: kdra stopped early"
        got = kdra[i]
        wo, go = want["outcome"], got["outcome"]
        if wo == "timeout":
            return None  # inconclusive: upstream gave up (kube-scheduler: "timed out")
        if not deterministic and (i > 0 or "error" in (wo, go)):
            # Later groups depend on which devices the stable allocator happened to pick, and whether a
            # selector error is reached on which device is first in its (Go map) order.
            return None
        if wo != go and _budget_explains(got, want):
            # Inconclusive too: kdra's search stopped at its step budget (deterministic, far below
            # kube-scheduler's 10 s filter timeout) where upstream went on; whether upstream answered
            # within the oracle's timeout depends on how fast the machine is, so comparing would make
            # the outcome depend on the machine. Report.gave_up counts these.
            return None
        if wo != go:
            return f"group {i}: outcome kdra={go} upstream={wo}"
        if wo == "error" and got.get("error") != want.get("error"):
            if not deterministic:
                return None
            return f"group {i}: error text kdra={got.get('error')!r} upstream={want.get('error')!r}"
        # A node where kdra's search stopped at its step budget says nothing about invalid pools: upstream
        # reports them only after its search on that node found nothing (allocateOne first, then the pool
        # check), and kdra never finished that search. Inconclusive there, like the outcome above.
        unsure = set(got.get("gaveUp") or [])
        got_errs = sorted(set(got.get("nodeErrors") or {}) - unsure)
        want_errs = sorted(set(want.get("nodeErrors") or {}) - unsure)
        if got_errs != want_errs and deterministic:
            return (
                f"group {i}: invalid-pool nodes kdra={sorted(got.get('nodeErrors') or {})} "
                f"upstream={sorted(want.get('nodeErrors') or {})}"
            )
        if wo == "allocation" and deterministic:
            if got.get("node") != want.get("node") and _budget_explains(got, want):
                return None  # upstream's node is one where kdra's search stopped at its budget
            if got.get("node") != want.get("node"):
                return f"group {i}: node kdra={got.get('node')} upstream={want.get('node')}"
            ka = [_norm_allocation(a) for a in got.get("allocations") or []]
            oa = [_norm_allocation(a) for a in want.get("allocations") or []]
            if ka != oa:
                return f"group {i}: allocation differs ({_diff_kind(ka, oa)})"
    if len(kdra) > len(groups):
        return f"kdra went on after upstream stopped at group {len(groups) - 1}"
    return None


def _diff_kind(ka: list[Obj], oa: list[Obj]) -> str:
    for a, b in zip(ka, oa, strict=False):
        ra, rb = a.get("results") or [], b.get("results") or []
        if [(r["driver"], r["pool"], r["device"]) for r in ra] != [
            (r["driver"], r["pool"], r["device"]) for r in rb
        ]:
            return "devices"
        for x, y in zip(ra, rb, strict=False):
            for k in RESULT_KEYS:
                if x.get(k) != y.get(k):
                    return f"result field {k}"
        for k in ("config", "nodeSelector"):
            if a.get(k) != b.get(k):
                return k
    return "claims"


# ---------------------------------------------------------------------------------------------------
# shrinking
# ---------------------------------------------------------------------------------------------------


def _items(world: World, path: tuple[Any, ...]) -> list[Any]:
    """The list at `path`: a World attribute, then keys and indexes into it."""
    node: Any = getattr(world, path[0])
    for key in path[1:]:
        if isinstance(node, dict) and key not in node:
            return []  # e.g. a slice with only sharedCounters
        node = node[key]
    return node if isinstance(node, list) else []


def _without(world: World, path: tuple[Any, ...], i: int) -> World:
    w = world.copy()
    del _items(w, path)[i]
    return w


def _without_request(world: World, gi: int, ci: int, ri: int) -> World:
    """The claim without one request, and without the constraints' and configs' references to it."""
    w = world.copy()
    devices = w.groups[gi][ci]["spec"]["devices"]
    name = devices["requests"].pop(ri)["name"]
    for entry in [*(devices.get("constraints") or []), *(devices.get("config") or [])]:
        if entry.get("requests"):
            entry["requests"] = [r for r in entry["requests"] if r.split("/")[0] != name] or None
            if entry["requests"] is None:
                del entry["requests"]
    return w


def _api_valid(world: World) -> bool:
    """What a cluster of every supported release would accept (a shrunk case must stay a real input)."""
    from kdra.validation.rules import validate_objects

    try:
        for version in SUPPORTED_VERSIONS:
            validate_objects(
                world.objects(), list_type_attributes=True, features=features_for(world, version)
            )
    except InputError:
        return False
    return True


def _candidates(world: World) -> Iterable[World]:
    """Smaller variants of `world`, coarse first: whole groups, nodes, in-use claims, slices and classes,
    then claims, devices, constraints and configs, requests, gate overrides, and last single selectors,
    attributes, capacities and labels."""
    paths: list[tuple[Any, ...]] = [("groups",), ("nodes",), ("allocated",), ("slices",), ("classes",)]
    paths += [("groups", gi) for gi in range(len(world.groups))]
    paths += [("slices", si, "spec", "devices") for si in range(len(world.slices))]
    for path in paths:
        n = len(_items(world, path))
        if path[0] == "groups" and len(path) == 2 and n <= 1:
            continue  # an empty group says nothing
        for i in range(n - 1, -1, -1):
            yield _without(world, path, i)
    for gi, group in enumerate(world.groups):
        for ci, claim in enumerate(group):
            devices = claim["spec"]["devices"]
            for key in ("constraints", "config"):
                if devices.get(key):
                    v = world.copy()
                    del v.groups[gi][ci]["spec"]["devices"][key]
                    yield v
            if len(devices["requests"]) > 1:
                for ri in range(len(devices["requests"]) - 1, -1, -1):
                    yield _without_request(world, gi, ci, ri)
    for gate in list(world.gate_overrides):
        v = world.copy()
        del v.gate_overrides[gate]
        yield v
    # Finest: a class's selectors, a device's attributes and capacities, a node's labels.
    for ci, cls in enumerate(world.classes):
        for i in range(len(cls["spec"].get("selectors") or []) - 1, -1, -1):
            yield _without(world, ("classes", ci, "spec", "selectors"), i)
    for si, sl in enumerate(world.slices):
        for di, dev in enumerate(sl["spec"].get("devices") or []):
            for key in ("attributes", "capacity"):
                for name in list(dev.get(key) or {}):
                    v = world.copy()
                    del v.slices[si]["spec"]["devices"][di][key][name]
                    yield v
    for ni, node in enumerate(world.nodes):
        for label in list((node.get("metadata") or {}).get("labels") or {}):
            v = world.copy()
            del v.nodes[ni]["metadata"]["labels"][label]
            yield v


def shrink(world: World, still_fails: Callable[[World], bool], budget: int = 2000) -> World:
    """Greedy: keep the first smaller variant that still fails, until none does (or the budget ends)."""
    tries = 0
    improved = True
    while improved and tries < budget:
        improved = False
        for cand in _candidates(world):
            if not _api_valid(cand):
                continue
            tries += 1
            try:
                failing = still_fails(cand)
            except Exception:
                failing = False
            if failing:
                world = cand
                improved = True
                break
            if tries >= budget:
                break
    return world


# ---------------------------------------------------------------------------------------------------
# corpus cases
# ---------------------------------------------------------------------------------------------------


def corpus_case(world: World, version: str, answer: Obj, signature: str) -> Obj:
    """The world as a tests/scenarios case: claims of the first group loose, later groups as Pods."""
    objects: list[Obj] = [*sorted(world.nodes, key=_name), *world.classes, *world.slices, *world.allocated]
    for gi, group in enumerate(world.groups):
        objects.extend(group)
        if gi == 0:
            continue
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"pod-{gi}", "namespace": "default"},
                "spec": {
                    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
                    "resourceClaims": [
                        {"name": f"c{ci}", "resourceClaimName": _name(c)} for ci, c in enumerate(group)
                    ],
                },
            }
        )
    expect: Obj
    groups = answer.get("groups") or []
    failed = next((g for g in groups if g["outcome"] != "allocation"), None)
    if failed is None:
        expect = {"allocation": {}}
        for group, g in zip(world.groups, groups, strict=True):
            for claim, alloc in zip(group, g["allocations"], strict=True):
                norm = _norm_allocation(alloc)
                entry: Obj = {"results": norm["results"], "nodeSelector": norm.get("nodeSelector")}
                if "config" in norm:
                    entry["config"] = norm["config"]
                expect["allocation"][_name(claim)] = entry
    elif failed["outcome"] == "error":
        expect = {"error": failed["error"]}
    else:
        expect = {"unschedulable": True}
        if failed.get("nodeErrors"):
            expect["explanationContains"] = ["invalid resource pools were encountered"]
    digest = hashlib.sha256(json.dumps([objects, version], sort_keys=True).encode()).hexdigest()[:10]
    case: Obj = {
        "name": f"diff-{version.replace('.', '-')}-{digest}",
        "description": f"Found by the differential test (seed {world.seed}, Kubernetes {version}): "
        f"{signature}. Expectation recorded from the real allocator (support.oracle).",
        "cites": [
            f"k8s.io/dynamic-resource-allocation/structured ({answer.get('variant')} allocator, "
            f"Kubernetes {version})"
        ],
        "kubernetesVersion": version,
    }
    if world.gate_overrides:
        case["featureGates"] = {k: v for k, v in world.gates(version).items() if k in world.gate_overrides}
    case["objects"] = objects
    case["expect"] = expect
    return case


# ---------------------------------------------------------------------------------------------------
# the run
# ---------------------------------------------------------------------------------------------------


@dataclass
class Report:
    cases: Counter[str] = field(default_factory=Counter)  # per version
    agree: Counter[str] = field(default_factory=Counter)
    inconclusive: Counter[str] = field(default_factory=Counter)  # upstream timed out
    gave_up: Counter[str] = field(default_factory=Counter)  # kdra's search budget ran out first
    classes: Counter[tuple[str, str]] = field(default_factory=Counter)  # (version, signature)
    examples: dict[tuple[str, str], int] = field(default_factory=dict)  # first seed per class
    kdra_seconds: float = 0.0  # CPU, in-process
    oracle_seconds: float = 0.0  # wall, from a chunk's start until every oracle answered it
    failures: list[tuple[int, str, str]] = field(default_factory=list)  # (seed, version, signature)

    def summary(self) -> str:
        lines = []
        for v in sorted(self.cases):
            lines.append(
                f"Kubernetes {v}: {self.cases[v]} cases, {self.agree[v]} agree, "
                f"{self.inconclusive[v]} inconclusive (upstream timed out), {self.gave_up[v]} "
                f"inconclusive (kdra's search budget), "
                f"{self.cases[v] - self.agree[v] - self.inconclusive[v] - self.gave_up[v]} disagree"
            )
        for (v, sig), n in self.classes.most_common():
            lines.append(f"  {v} x{n}: {sig} (e.g. seed {self.examples[(v, sig)]})")
        lines.append(
            f"kdra {self.kdra_seconds:.1f} s CPU in-process; {self.oracle_seconds:.1f} s wall until the "
            "oracles (running alongside) had answered"
        )
        return "\n".join(lines)


def _signature(sig: str) -> str:
    """The class of a difference: the signature without group numbers and quoted details."""
    import re

    s = re.sub(r"^group \d+: ", "", sig)
    s = re.sub(r"'[^']*'", "'…'", s)
    s = re.sub(r"\[[^\]]*\]", "[…]", s)
    return s


def run(
    seeds: Iterable[int],
    versions: Sequence[str] = SUPPORTED_VERSIONS,
    *,
    oracles: dict[str, Oracle] | None = None,
    save: Path | None = None,
    shrink_failures: bool = True,
    batch: int = 500,
    log: Callable[[str], None] | None = None,
    timeout: float = ORACLE_TIMEOUT_SECONDS,
) -> Report:
    report = Report()
    own = oracles is None
    oracles = oracles or {v: Oracle(v) for v in versions}
    seeds = list(seeds)
    pool = ThreadPoolExecutor(max_workers=len(versions))
    try:
        for start in range(0, len(seeds), batch):
            chunk = [random_world(s) for s in seeds[start : start + batch]]
            # Every version's oracle works on the chunk (own processes) while kdra answers here.
            t0 = time.perf_counter()
            pending = {v: pool.submit(_ask, oracles[v], chunk, v, timeout) for v in versions}
            mine: dict[str, list[list[Obj]]] = {}
            for version in versions:
                c0 = time.process_time()
                mine[version] = [_kdra_or_crash(world, version) for world in chunk]
                report.kdra_seconds += time.process_time() - c0
            answers = {v: f.result() for v, f in pending.items()}
            report.oracle_seconds += time.perf_counter() - t0
            for version in versions:
                for world, got, answer in zip(chunk, mine[version], answers[version], strict=True):
                    report.cases[version] += 1
                    sig = compare(got, answer)
                    if sig is None:
                        if any(g["outcome"] == "timeout" for g in answer.get("groups") or []):
                            report.inconclusive[version] += 1
                        elif _gave_up_first(got, answer):
                            report.gave_up[version] += 1
                        else:
                            report.agree[version] += 1
                        continue
                    cls = _signature(sig)
                    report.classes[(version, cls)] += 1
                    report.examples.setdefault((version, cls), world.seed)
                    report.failures.append((world.seed, version, sig))
                    if log:
                        log(f"seed {world.seed} Kubernetes {version}: {sig}")
                    if save is not None and report.classes[(version, cls)] <= 3:
                        save_case(world, version, oracles[version], sig, save, shrink_failures, log, timeout)
    finally:
        pool.shutdown()
        if own:
            for o in oracles.values():
                o.close()
    return report


def _ask(oracle: Oracle, worlds: list[World], version: str, timeout: float) -> list[Obj]:
    return list(oracle.run(oracle_case(w, version, f"{w.seed}", timeout) for w in worlds))


def _kdra_or_crash(world: World, version: str) -> list[Obj]:
    try:
        return run_kdra(world, features_for(world, version))
    except Exception as exc:  # a crash is a disagreement too
        return [{"outcome": f"crash {type(exc).__name__}: {exc}"}]


def check_world(
    world: World, version: str, oracle: Oracle, timeout: float = ORACLE_TIMEOUT_SECONDS
) -> tuple[str | None, Obj, list[Obj]]:
    """(difference or None, the oracle's answer, kdra's answers) for one world and version."""
    answer = oracle.run_one(oracle_case(world, version, str(world.seed), timeout))
    got = run_kdra(world, features_for(world, version))
    return compare(got, answer), answer, got


def shows_in_case(sig: str, answer: Obj) -> bool:
    """Whether a difference (compare's signature) shows in the corpus case written for the world: the case
    expects upstream's outcome for all claims together, i.e. every group placed, or the first group not
    placed (corpus_case). A difference in a later group than that is not in the case, which would pass;
    nor is one in which nodes reported invalid pools (the case at most expects the message somewhere)."""
    import re

    if ": invalid-pool nodes " in sig:
        return False  # a case names no node: which nodes found invalid pools shows only in a world
    m = re.match(r"group (\d+): ", sig)
    if m is None:
        return True  # a whole-world difference (fatal, stopped early)
    outcomes = [g["outcome"] for g in answer.get("groups") or []]
    first_unplaced = next((i for i, o in enumerate(outcomes) if o != "allocation"), len(outcomes))
    return int(m.group(1)) <= first_unplaced


def save_case(
    world: World,
    version: str,
    oracle: Oracle,
    sig: str,
    folder: Path,
    do_shrink: bool = True,
    log: Callable[[str], None] | None = None,
    timeout: float = ORACLE_TIMEOUT_SECONDS,
) -> Path | None:
    """Shrink a disagreeing world (keeping the same class of difference) and write it to `folder` as a
    scenario-corpus case whose expectation is the oracle's answer. None (and a log line) where the
    difference cannot show in a case (see shows_in_case)."""
    cls = _signature(sig)

    def still_fails(w: World, *, in_case: bool) -> bool:
        s, answer, _ = check_world(w, version, oracle, timeout)
        if s is None or _signature(s) != cls:
            return False
        return not in_case or shows_in_case(s, answer)

    # Keep what the case can show if the world starts that way; otherwise shrink anyway and check after.
    _, answer0, _ = check_world(world, version, oracle, timeout)
    in_case = shows_in_case(sig, answer0)
    small = shrink(world, lambda w: still_fails(w, in_case=in_case)) if do_shrink else world
    s, answer, _ = check_world(small, version, oracle, timeout)
    if s is None:
        return None
    if not shows_in_case(s, answer):
        # A case records one outcome for the whole world: every claim allocated, or the first group that
        # could not be placed. A difference in a later group (after a group neither placed) would be
        # written as a case that passes, hiding the disagreement: save the world itself instead, with
        # upstream's answer per group (tests/differential replays these, test_saved_worlds).
        path = save_world(small, version, answer, s, folder)
        if log:
            log(f"  saved {path} (the difference lies after a group upstream could not place: no case)")
        return path
    case = corpus_case(small, version, answer, s)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{case['name']}.yaml"
    path.write_text(yaml.safe_dump(case, sort_keys=False, width=110))
    if log:
        log(f"  saved {path}")
    return path


WORLD_SUFFIX = ".world.json"


def save_world(world: World, version: str, answer: Obj, signature: str, folder: Path) -> Path:
    """A disagreeing world as it is (groups and all), for differences a corpus case cannot hold; named
    like a case, `<name>.world.json`, with upstream's outcome (and node) per group."""
    data: Obj = {
        "description": f"Found by the differential test (seed {world.seed}, Kubernetes {version}): "
        f"{signature}. Replayed group by group against the oracle by tests/differential (test_saved_worlds).",
        "version": version,
        "upstream": [{k: g[k] for k in ("outcome", "node") if k in g} for g in answer.get("groups") or []],
        "seed": world.seed,
        "gate_overrides": world.gate_overrides,
        "nodes": world.nodes,
        "classes": world.classes,
        "slices": world.slices,
        "allocated": world.allocated,
        "groups": world.groups,
    }
    body = {k: data[k] for k in ("gate_overrides", "nodes", "classes", "slices", "allocated", "groups")}
    digest = hashlib.sha256(json.dumps([body, version], sort_keys=True).encode()).hexdigest()[:10]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"diff-{version.replace('.', '-')}-{digest}{WORLD_SUFFIX}"
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path


def load_world(path: Path) -> tuple[World, str, list[Obj]]:
    """(world, version, upstream's outcomes per group) from a file save_world wrote."""
    data = json.loads(path.read_text())
    world = World(
        data["seed"],
        data["nodes"],
        data["classes"],
        data["slices"],
        data["allocated"],
        data["groups"],
        dict(data.get("gate_overrides") or {}),
    )
    return world, str(data["version"]), list(data["upstream"])


def _outcomes(answer: Obj) -> list[tuple[str, str]]:
    return [(g["outcome"], str(g.get("error", ""))) for g in answer.get("groups") or []]


def version_difference(world: World, oracles: dict[str, Oracle], timeout: float) -> str | None:
    """Where the two releases' real allocators answer a world differently (both deterministic), the
    class of the difference: such a world pins a behaviour that `--kubernetes-version` must switch.
    Only worlds whose outcomes do not depend on the order nodes are tried in count (kube-scheduler
    scores nodes, kdra takes them by name; a corpus case must hold on a real cluster too)."""
    old, new = SUPPORTED_VERSIONS[0], SUPPORTED_VERSIONS[-1]
    answers = {v: oracles[v].run_one(oracle_case(world, v, str(world.seed), timeout)) for v in (old, new)}
    if any(
        not picks_deterministically(v, str(a.get("variant"))) or a.get("fatal") for v, a in answers.items()
    ):
        return None
    if any(g["outcome"] == "timeout" for a in answers.values() for g in a.get("groups") or []):
        return None
    if len(world.nodes) > 1:
        for v in (old, new):
            case = oracle_case(world, v, str(world.seed), timeout)
            case["nodes"] = case["nodes"][::-1]
            if _outcomes(oracles[v].run_one(case)) != _outcomes(answers[v]):
                return None
    sig = compare(answers[old].get("groups") or [], answers[new])
    if sig is None:
        return None
    sig = sig.replace("kdra=", f"{old}=").replace("upstream=", f"{new}=")
    if " error text " in sig:  # one class per kind of message, not one for every message
        texts = [_first_error(answers[v]) for v in (old, new)]
        return f"error text {_message_kind(texts[0])!r} -> {_message_kind(texts[1])!r}"
    return _signature(sig)


def _first_error(answer: Obj) -> str:
    return next((str(g.get("error", "")) for g in answer.get("groups") or [] if "error" in g), "")


def _message_kind(text: str) -> str:
    """A message without its names and numbers (and the claim/request prefix), cut short."""
    import re

    return re.sub(r"\S*\d\S*|'[^']*'", "#", text.split(": ", 1)[-1])[:32]


def save_version_case(
    world: World, oracles: dict[str, Oracle], folder: Path, timeout: float = ORACLE_TIMEOUT_SECONDS
) -> Path | None:
    """Shrink a world on which 1.36 and 1.37 differ (keeping the class of the difference) and write it as
    a corpus case holding for both releases: `expect` the newest one's answer, `expectByVersion` the
    older one's. None when the world's gates are not what a cluster of either release would run."""
    from support.corpus import effective_gates  # corpus imports nothing from here

    for v in SUPPORTED_VERSIONS:
        if {**DEFAULTS[v], **effective_gates({"featureGates": world.gate_overrides}, v)} != world.gates(v):
            return None
    cls = version_difference(world, oracles, timeout)
    if cls is None:
        return None
    small = shrink(world, lambda w: version_difference(w, oracles, timeout) == cls)
    old, new = SUPPORTED_VERSIONS[0], SUPPORTED_VERSIONS[-1]
    answers = {v: oracles[v].run_one(oracle_case(small, v, str(small.seed), timeout)) for v in (old, new)}
    case = corpus_case(small, new, answers[new], cls)
    del case["kubernetesVersion"]
    digest = case["name"].rsplit("-", 1)[1]
    case["name"] = f"diff-versions-{digest}"
    case["description"] = (
        f"Kubernetes {old} and {new} answer differently (found by the differential test, seed "
        f"{world.seed}): {cls}. Both expectations recorded from the real allocators (support.oracle)."
    )
    case["cites"] = [
        f"k8s.io/dynamic-resource-allocation/structured ({answers[v].get('variant')} allocator, "
        f"Kubernetes {v})"
        for v in (new, old)
    ]
    if world.gate_overrides:
        case["featureGates"] = dict(sorted(small.gate_overrides.items()))
    ordered: Obj = {}
    for k, val in case.items():
        ordered[k] = val
        if k == "expect":
            ordered["expectByVersion"] = {old: corpus_case(small, old, answers[old], cls)["expect"]}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{ordered['name']}.yaml"
    path.write_text(yaml.safe_dump(ordered, sort_keys=False, width=110))
    return path


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m support.differential", description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=2000, help="worlds to generate (each runs under every version)")
    p.add_argument("--seed", type=int, default=0, help="first seed")
    p.add_argument("--version", action="append", choices=SUPPORTED_VERSIONS, help="only these versions")
    p.add_argument("--save", type=Path, help="shrink disagreements and save them as corpus cases here")
    p.add_argument(
        "--version-cases",
        type=Path,
        metavar="DIR",
        help="instead: save (shrunk) worlds on which the releases' real allocators differ, one per class",
    )
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    versions = args.version or list(SUPPORTED_VERSIONS)
    if args.version_cases:
        return _version_cases(range(args.seed, args.seed + args.n), args.version_cases)
    t0 = time.perf_counter()
    report = run(
        range(args.seed, args.seed + args.n),
        versions,
        save=args.save,
        log=None if args.quiet else (lambda m: print(m, file=sys.stderr, flush=True)),
    )
    print(report.summary())
    print(f"{time.perf_counter() - t0:.1f} s wall")
    return 0 if not report.failures else 1


def _version_cases(seeds: Iterable[int], folder: Path) -> int:
    seen: set[str] = set()
    with Oracle(SUPPORTED_VERSIONS[0]) as old, Oracle(SUPPORTED_VERSIONS[-1]) as new:
        oracles: dict[str, Oracle] = {SUPPORTED_VERSIONS[0]: old, SUPPORTED_VERSIONS[-1]: new}
        for seed in seeds:
            world = random_world(seed)
            cls = version_difference(world, oracles, ORACLE_TIMEOUT_SECONDS)
            if cls is None or cls in seen:
                continue
            path = save_version_case(world, oracles, folder)
            if path is not None:
                seen.add(cls)
                print(f"seed {seed}: {cls} -> {path}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
