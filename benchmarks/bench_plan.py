"""kdra plan scale-up at scale, and against a cluster-autoscaler-style estimator on the same inputs.

Workload (seeded): 5,000 pending pods, 200 of them gangs (2-6 members of 2 or 4 whole GPUs; a third of the
gangs require one rack), whole-GPU pods (1 and 2 GPUs), MIG-or-whole pods (firstAvailable: a MIG device
of at least 10Gi or 40Gi, else a whole GPU), pods three at a time sharing one claim, AMD GPU pods, TPU pods
(4 chips, tolerating the taint), CPU-only pods. Node types: the bundled `node-types` (10 pools), the NVIDIA
8-GPU servers in racks of 4 nodes. The cluster starts empty.

The baseline ("CA-style") is cluster-autoscaler's scale-up loop as documented (FAQ "How does scale-up
work?", estimator/binpacking_estimator.go): pods are independent (a gang's members and its topology are
not seen), for each node group first-fit decreasing onto new template nodes of that group alone, the
expander takes the one group that places the most pods per cost, and the loop repeats for the rest. It is
given kdra's allocator as its DRA check (the best case for it). Both node sets are then run through kdra's
scheduler (kdra.plan.verify), each told where its planner expects the pods (status.nominatedNodeName, as
an autoscaler writes it under KEP-5278): the pods it leaves pending are what each set cannot actually
place.

    python benchmarks/bench_plan.py [--pods 5000] [--gangs 200] [--seed 0] [--no-baseline]
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import resource
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from kdra.allocator import FeatureGates
from kdra.fleets import load_fleet
from kdra.fleets.spec import LABEL_RACK, Topology
from kdra.plan.bins import Bin, Placement, new_bin
from kdra.plan.demand import build_demand, gang_specs, ref
from kdra.plan.inputs import Inputs, split
from kdra.plan.nodetypes import NodeType, node_types
from kdra.plan.probe import Prober
from kdra.plan.scaleup import plan_scale_up, rendered
from kdra.plan.verify import check

NS = "bench"
RACKED = True
Obj = dict[str, Any]


def _tmpl(name: str, request: Obj) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"spec": {"devices": {"requests": [{"name": "r", **request}]}}},
    }


def _mig(mem: str) -> Obj:
    sel = f'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("{mem}")) >= 0'
    return {
        "firstAvailable": [
            {"name": "mig", "deviceClassName": "mig.nvidia.com", "selectors": [{"cel": {"expression": sel}}]},
            {"name": "whole", "deviceClassName": "gpu.nvidia.com"},
        ]
    }


def _exactly(cls: str, n: int) -> Obj:
    return {"exactly": {"deviceClassName": cls, "count": n}}


def _pod(name: str, cpu: str, templates: tuple[str, ...] = (), claim: str | None = None, **kw: Any) -> Obj:
    entries = [{"name": f"t{i}", "resourceClaimTemplateName": t} for i, t in enumerate(templates)]
    if claim:
        entries.append({"name": "shared", "resourceClaimName": claim})
    meta: Obj = {"name": name, "namespace": NS}
    if kw.get("group"):
        meta["labels"] = {"kdra.dev/pod-group": kw.pop("group")}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "containers": [
                {"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu, "memory": "4Gi"}}}
            ],
            "resourceClaims": entries,
            **kw,
        },
    }


def workload(pods: int, gangs: int, seed: int) -> list[Obj]:
    rnd = random.Random(seed)
    objs: list[Obj] = [
        _tmpl("gpu1", _exactly("gpu.nvidia.com", 1)),
        _tmpl("gpu2", _exactly("gpu.nvidia.com", 2)),
        _tmpl("gpu4", _exactly("gpu.nvidia.com", 4)),
        _tmpl("mig10", _mig("10Gi")),
        _tmpl("mig40", _mig("40Gi")),
        _tmpl("amd1", _exactly("gpu.amd.com", 1)),
        _tmpl("tpu4", _exactly("tpu.google.com", 4)),
    ]
    n = 0
    for g in range(gangs):
        size = rnd.randint(2, 6)
        spec: Obj = {"minMember": size}
        if g % 3 == 0 and RACKED:
            spec["topologyConstraint"] = {"requiredTopologyLevel": LABEL_RACK}
        objs.append(
            {
                "apiVersion": "kdra.dev/v1alpha1",
                "kind": "PodGroup",
                "metadata": {"name": f"g{g}", "namespace": NS},
                "spec": spec,
            }
        )
        per = rnd.choice(["gpu2", "gpu4"])
        for i in range(size):
            objs.append(_pod(f"g{g}-{i}", "16", (per,), group=f"g{g}"))
            n += 1
    rest = pods - n
    mix = [
        ("gpu1", 0.26),
        ("gpu2", 0.07),
        ("mig10", 0.26),
        ("mig40", 0.09),
        ("shared", 0.07),
        ("amd1", 0.03),
        ("tpu4", 0.03),
        ("cpu", 0.19),
    ]
    shared = 0
    i = 0
    while i < rest:
        kind = rnd.choices([k for k, _ in mix], [w for _, w in mix])[0]
        if kind == "shared":
            claim = f"shared-{shared}"
            objs.append(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaim",
                    "metadata": {"name": claim, "namespace": NS},
                    "spec": {"devices": {"requests": [{"name": "r", **_exactly("gpu.nvidia.com", 1)}]}},
                }
            )
            for k in range(min(3, rest - i)):
                objs.append(_pod(f"s{shared}-{k}", "2", claim=claim))
                i += 1
            shared += 1
        elif kind == "cpu":
            objs.append(_pod(f"c{i}", str(rnd.choice([2, 4, 8]))))
            i += 1
        elif kind == "tpu4":
            tol = [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}]
            objs.append(_pod(f"t{i}", "8", ("tpu4",), tolerations=tol))
            i += 1
        else:
            objs.append(_pod(f"p{i}", str(rnd.choice([1, 2, 4])), (kind,)))
            i += 1
    return objs


def bench_types(features: FeatureGates) -> list[NodeType]:
    fleet = load_fleet("node-types")
    racked = {"h100-8", "h200-8", "b200-8", "a100-80gb-8"}
    fleet = dataclasses.replace(
        fleet,
        pools=[
            dataclasses.replace(p, topology=Topology(nodes_per_rack=4)) if p.name in racked else p
            for p in fleet.pools
        ],
    )
    return node_types(fleet, features)


# -- the cluster-autoscaler-style baseline ---------------------------------------------------------------


def ca_style(inputs: Inputs, types: list[NodeType], features: FeatureGates) -> list[Bin]:
    """Node groups one at a time, pods independent: see the module docstring."""
    demand = build_demand(
        inputs.pending, inputs.claims, inputs.templates, {}
    )  # no gangs: CA does not see them
    prober = Prober(types, features)
    units = [u for j in demand.jobs for u in j.units]
    # CA's binpacking estimator sorts pods by their cpu+memory score, largest first.
    units.sort(key=lambda u: -sum(pd.info.requests.get("cpu", 0) for pd in u.pods))
    added: list[Bin] = []
    serial = 0
    while units:
        best: tuple[float, NodeType, list[Bin], set[int]] | None = None
        for t in types:
            bins: list[Bin] = []
            placed: set[int] = set()
            for k, u in enumerate(units):
                if not prober.probe(u, t).fits:
                    continue
                ok = any(isinstance(b.place(u), Placement) for b in bins if u.shape not in b.full)
                if not ok:
                    b = new_bin(t, f"{t.name}-ca-{serial + len(bins)}", features)
                    if isinstance(b.place(u), Placement):
                        bins.append(b)
                        ok = True
                if ok:
                    placed.add(k)
            if placed:
                score = t.price * len(bins) / len(placed)
                if best is None or score < best[0]:
                    best = (score, t, bins, placed)
        if best is None:
            break
        _, _, bins, placed = best
        added += bins
        serial += len(bins)
        units = [u for k, u in enumerate(units) if k not in placed]
    return added


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=5000)
    ap.add_argument("--gangs", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-baseline", action="store_true")
    args = ap.parse_args()
    features = FeatureGates()
    objs = workload(args.pods, args.gangs, args.seed)
    inputs = split(objs)
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    types = bench_types(features)
    t1 = time.perf_counter()
    plan = plan_scale_up(inputs, types, features)
    t2 = time.perf_counter()
    cpu = time.process_time() - cpu0
    ratio = plan.cost / plan.lower_bound if plan.lower_bound else float("inf")
    print(
        f"workload: {len(inputs.pending)} pending pods, {len(gang_specs(inputs.scheduling))} gangs; "
        f"{len(types)} node types (rendered in {t1 - t0:.2f} s)"
    )
    print(
        f"kdra plan:  {len(plan.added):5d} nodes {plan.cost:10.2f}/h  lower bound {plan.lower_bound:10.2f}/h "
        f"(cost/bound {ratio:.3f})\n"
        f"            {t2 - t1:6.2f} s wall, {cpu:.2f} s CPU: search and bound "
        f"{t2 - t1 - plan.check_seconds:.2f} s ({cpu - plan.check_cpu_seconds:.2f} s CPU), kdra's scheduler "
        f"checking it {plan.check_seconds:.2f} s ({plan.check_cpu_seconds:.2f} s CPU) in "
        f"{len(plan.searches)} round(s); unschedulable {sum(len(u.job.pods) for u in plan.unplaced)}, "
        f"left pending by the scheduler {len(plan.left)}"
    )
    counts: dict[str, int] = {}
    for b in plan.added:
        assert b.type is not None
        counts[b.type.name] = counts.get(b.type.name, 0) + 1
    print("            " + ", ".join(f"{n} x {k}" for k, n in sorted(counts.items())))
    if not args.no_baseline:
        t3 = time.perf_counter()
        ca = ca_style(inputs, types, features)
        t4 = time.perf_counter()
        cost = sum(b.type.price for b in ca if b.type is not None)
        # Told where CA-style expects each pod, as kdra's plan is (KEP-5278 nominations).
        expected = {pd.key: b.name for b in ca for p in b.placements for pd in p.unit.pods}
        verdict = check(inputs, rendered(ca, features), inputs.pending, nominated=expected)
        t5 = time.perf_counter()
        gang_pods = {
            ref(p) for p in inputs.pending if (p["metadata"].get("labels") or {}).get("kdra.dev/pod-group")
        }
        left_gang = sum(1 for k in verdict.unbound if k in gang_pods)
        print(
            f"CA-style:   {len(ca):5d} nodes {cost:10.2f}/h  "
            f"({cost / plan.cost if plan.cost else 0:.2f}x kdra's)  "
            f"{t4 - t3:6.2f} s; kdra's scheduler leaves {len(verdict.unbound)} pods pending on it "
            f"({left_gang} gang members) [check {t5 - t4:.1f} s]"
        )
    print(f"peak RSS {_rss_mib():.0f} MiB")


if __name__ == "__main__":
    main()
