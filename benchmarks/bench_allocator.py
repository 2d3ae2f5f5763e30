"""Allocator benchmarks (issue 2, scope 8). Prints figures; asserts nothing.

(a) scheduler_perf shape: 500 nodes x 10 devices (one slice per node), half of them in use, one claim
    with one 1-device request tried against every node (what a Filter pass does).
(b) one 8 x H100 node with dynamic MIG (208 devices, 8 counter sets; shared/reference/examples), pods
    whose claims mix full GPUs and MIG profiles, with some partitions already in use.
(c) unsatisfiable requests: the allocator must give up, explanation included, in well under a second.

Usage: python benchmarks/bench_allocator.py [--quick] [--device-preference=NAME|all]
(--device-preference: (b) only, first fit and then with each device preference on)
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import yaml

from kdra.allocator import AllocatedState, Allocator, AllocatorIndex, FeatureGates
from kdra.allocator.index import SliceCache

FEATURES = FeatureGates()


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def fmt_ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f} ms"


def report(
    name: str, per_call: list[float], successes: int, wall: float, cpu: list[float] | None = None
) -> None:
    """Wall-clock percentiles, plus this thread's CPU time per call: the machine is shared, and
    being descheduled shows up in wall-clock tails but is not the allocator's cost."""
    line = (
        f"  {name}: calls={len(per_call)} allocations={successes} "
        f"allocations/s={successes / wall:,.0f} calls/s={len(per_call) / wall:,.0f} "
        f"p50={fmt_ms(pct(per_call, 50))} p99={fmt_ms(pct(per_call, 99))} max={fmt_ms(max(per_call))}"
    )
    if cpu:
        line += f" | cpu p50={fmt_ms(pct(cpu, 50))} p99={fmt_ms(pct(cpu, 99))}"
    print(line)


# ---------------------------------------------------------------------------------------------
# (a) 500 nodes x 10 devices, half in use
# ---------------------------------------------------------------------------------------------

DRIVER = "test-driver.cdi.k8s.io"


def node_slice(i: int) -> dict[str, Any]:
    name = f"node-{i:03d}"
    devices = []
    for d in range(10):
        devices.append(
            {
                "name": f"dev-{d}",
                "attributes": {
                    "model": {"string": "A100"},
                    "numa": {"int": d % 2},
                    "driverVersion": {"version": "1.2.3"},
                    "healthy": {"bool": True},
                },
                "capacity": {"memory": {"value": "40Gi"}},
            }
        )
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{name}-slice", "resourceVersion": "1", "uid": f"uid-{name}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": name,
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def one_device_claim(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "test-class"}}]}},
    }


def bench_a(cycles: int) -> None:
    print("(a) 500 nodes x 10 devices, half in use; one 1-device claim tried against every node")
    classes = {
        "test-class": {
            "metadata": {"name": "test-class"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        }
    }
    slices = [node_slice(i) for i in range(500)]
    nodes = [{"metadata": {"name": f"node-{i:03d}", "labels": {}}} for i in range(500)]
    allocated = []
    for i in range(500):
        for d in range(0, 10, 2):
            allocated.append(
                {
                    "metadata": {"name": f"used-{i}-{d}"},
                    "status": {
                        "allocation": {
                            "devices": {
                                "results": [
                                    {
                                        "request": "gpu",
                                        "driver": DRIVER,
                                        "pool": f"node-{i:03d}",
                                        "device": f"dev-{d}",
                                    }
                                ]
                            }
                        }
                    },
                }
            )
    t0 = time.perf_counter()
    index = AllocatorIndex(classes, slices, FEATURES)
    t_index = time.perf_counter() - t0
    t0 = time.perf_counter()
    state = AllocatedState.from_claims(allocated, FEATURES)
    t_state = time.perf_counter() - t0
    print(
        f"  index build (5000 devices): {fmt_ms(t_index)}; allocated state (2500 claims): {fmt_ms(t_state)}"
    )
    rebuild_with_rules(classes, slices)

    def cycle(label: str, n: int) -> None:
        per_node: list[float] = []
        cpu: list[float] = []
        successes = 0
        wall0 = time.perf_counter()
        for c in range(n):
            allocator = Allocator.from_index(index, state)
            claim = one_device_claim(f"pod-{label}-{c}")
            for node in nodes:
                t, tc = time.perf_counter(), time.thread_time()
                out = allocator.allocate(node, [claim])
                per_node.append(time.perf_counter() - t)
                cpu.append(time.thread_time() - tc)
                successes += out.allocations is not None
        report(label, per_node, successes, time.perf_counter() - wall0, cpu)

    cycle("first cycle (cold: CEL evaluated, node views built)", 1)
    cycle(f"next {cycles} cycles (warm index)", cycles)


def rebuild_with_rules(classes: dict[str, Any], slices: list[dict[str, Any]]) -> None:
    """What a scheduler pays to rebuild its index after an event (slice, class or DeviceTaintRule), with
    the slices compiled before (warm cache): without rules and with 20 rules of one device each on as many
    nodes, interleaved."""
    rules = [
        {
            "kind": "DeviceTaintRule",
            "metadata": {"name": f"maintenance-{i}"},
            "spec": {
                "deviceSelector": {"driver": DRIVER, "pool": f"node-{i * 25:03d}", "device": "dev-0"},
                "taint": {"key": "example.com/maintenance", "effect": "NoSchedule"},
            },
        }
        for i in range(20)
    ]
    cache = SliceCache()
    AllocatorIndex(classes, slices, FEATURES, slice_cache=cache)
    t0 = time.perf_counter()
    AllocatorIndex(classes, slices, FEATURES, slice_cache=cache, taint_rules=rules)
    cold = time.perf_counter() - t0
    plain: list[float] = []
    ruled: list[float] = []
    for _ in range(7):
        t0 = time.perf_counter()
        AllocatorIndex(classes, slices, FEATURES, slice_cache=cache)
        plain.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        AllocatorIndex(classes, slices, FEATURES, slice_cache=cache, taint_rules=rules)
        ruled.append(time.perf_counter() - t0)
    print(
        f"  index rebuild, slices compiled before (median of 7): "
        f"no rules {fmt_ms(statistics.median(plain))}; "
        f"20 DeviceTaintRules {fmt_ms(statistics.median(ruled))} (first time, 20 slices compiled with "
        f"the rules' taints: {fmt_ms(cold)})"
    )


# ---------------------------------------------------------------------------------------------
# (b) 8 x H100 with dynamic MIG
# ---------------------------------------------------------------------------------------------

NV = "gpu.nvidia.com"


def h100_slices() -> list[dict[str, Any]]:
    # The repository's golden copy of shared/reference/examples/h100x8-dynamic-mig.yaml (same content).
    path = Path(__file__).resolve().parents[1] / "tests/drivers/golden/h100x8-dynamic-mig.yaml"
    if not path.exists():
        path = Path("/work/shared/reference/examples/h100x8-dynamic-mig.yaml")
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


H100_CLASSES = {
    "gpu.nvidia.com": {
        "metadata": {"name": "gpu.nvidia.com"},
        "spec": {
            "selectors": [
                {"cel": {"expression": f'device.driver == "{NV}" && device.attributes["{NV}"].type == "gpu"'}}
            ]
        },
    },
    "mig.nvidia.com": {
        "metadata": {"name": "mig.nvidia.com"},
        "spec": {
            "selectors": [
                {"cel": {"expression": f'device.driver == "{NV}" && device.attributes["{NV}"].type == "mig"'}}
            ]
        },
    },
}


def mig_request(name: str, profile: str, count: int = 1) -> dict[str, Any]:
    return {
        "name": name,
        "exactly": {
            "deviceClassName": "mig.nvidia.com",
            "count": count,
            "selectors": [{"cel": {"expression": f'device.attributes["{NV}"].profile == "{profile}"'}}],
        },
    }


def gpu_request(name: str, count: int = 1) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count}}


def claim(name: str, requests: list[dict[str, Any]], constraints: list[Any] | None = None) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    return {"metadata": {"name": name, "namespace": "default"}, "spec": {"devices": devices}}


POD_SHAPES = [
    [claim("full-1", [gpu_request("gpu")])],
    [claim("mig-small", [mig_request("mig", "1g.10gb", 2)])],
    [claim("mig-mixed", [mig_request("a", "3g.40gb"), mig_request("b", "2g.20gb")])],
    [claim("train", [gpu_request("gpus", 2)], [{"matchAttribute": "resource.kubernetes.io/numaNode"}])],
    [claim("inference", [mig_request("m", "1g.20gb")]), claim("full", [gpu_request("gpu")])],
    [
        claim(
            "prio",
            [
                {
                    "name": "accel",
                    "firstAvailable": [
                        {
                            "name": "mig",
                            "deviceClassName": "mig.nvidia.com",
                            "selectors": [
                                {"cel": {"expression": f'device.attributes["{NV}"].profile == "7g.80gb"'}}
                            ],
                        },
                        {"name": "gpu", "deviceClassName": "gpu.nvidia.com"},
                    ],
                }
            ],
        )
    ],
]

IN_USE = [  # some partitions and one full GPU already allocated
    ("gpu-node-01", "gpu-0"),
    ("gpu-node-01", "gpu-1-mig-3g40gb-9-4"),
    ("gpu-node-01", "gpu-2-mig-1g10gb-19-0"),
    ("gpu-node-01", "gpu-2-mig-1g10gb-19-1"),
    ("gpu-node-01", "gpu-2-mig-2g20gb-14-2"),
    ("gpu-node-01", "gpu-3-mig-4g40gb-5-0"),
]


def bench_b(iterations: int, prefer: str | None = None) -> None:
    """`prefer`: a device preference (kdra.scheduler.devicepref) for the allocator's search."""
    from kdra.scheduler.devicepref import make_device_preference

    slices = h100_slices()
    ndev = sum(len(s["spec"].get("devices") or []) for s in slices)
    nsets = sum(len(s["spec"].get("sharedCounters") or []) for s in slices)
    print(
        f"(b) 8 x H100 dynamic MIG node ({ndev} devices, {nsets} counter sets), "
        f"mixed pods, some partitions in use; device preference: {prefer or 'none (first fit)'}"
    )
    policy = make_device_preference(prefer) if prefer else None
    node = {"metadata": {"name": "gpu-node-01", "labels": {}}}
    index = AllocatorIndex(H100_CLASSES, slices, FEATURES)
    names = {d["name"] for s in slices for d in s["spec"].get("devices") or []}
    in_use = [
        {
            "metadata": {"name": f"used-{dev}"},
            "status": {
                "allocation": {
                    "devices": {"results": [{"request": "r", "driver": NV, "pool": pool, "device": dev}]}
                }
            },
        }
        for pool, dev in IN_USE
        if dev in names
    ]
    state = AllocatedState.from_claims(in_use, FEATURES)

    # Independent pods against the same state (a Filter call per pod). The first round pays for CEL
    # evaluation of the node's 208 devices; later rounds reuse the index (a scheduler's steady state).
    first: list[float] = []
    per_call: list[float] = []
    cpu: list[float] = []
    successes = 0
    wall0 = 0.0
    for i in range(iterations + 1):
        if i == 1:
            wall0 = time.perf_counter()
        allocator = Allocator.from_index(index, state, prefer=policy)
        for shape in POD_SHAPES:
            t, tc = time.perf_counter(), time.thread_time()
            out = allocator.allocate(node, shape)
            dt = time.perf_counter() - t
            if i == 0:
                first.append(dt)
            else:
                per_call.append(dt)
                cpu.append(time.thread_time() - tc)
                successes += out.allocations is not None
    print(f"  first round (cold index, CEL evaluated): {', '.join(fmt_ms(x) for x in first)}")
    report("independent pods, warm index", per_call, successes, time.perf_counter() - wall0, cpu)

    # Fill the node: allocate pods one after the other, each allocation becoming in-use state,
    # until a whole round of pod shapes does not fit; repeated to get enough samples.
    ok_calls: list[float] = []
    ok_cpu: list[float] = []
    failed_calls: list[float] = []
    failed_cpu: list[float] = []
    successes = 0
    wall0 = time.perf_counter()
    for _ in range(max(1, iterations // 2)):
        st = AllocatedState.from_claims(in_use, FEATURES)
        failures = 0
        i = 0
        while failures < len(POD_SHAPES) and i < 400:
            shape = POD_SHAPES[i % len(POD_SHAPES)]
            allocator = Allocator.from_index(index, st, prefer=policy)
            t, tc = time.perf_counter(), time.thread_time()
            out = allocator.allocate(node, shape)
            dt, dc = time.perf_counter() - t, time.thread_time() - tc
            i += 1
            if out.allocations is None:
                failures += 1
                failed_calls.append(dt)
                failed_cpu.append(dc)
                continue
            failures = 0
            ok_calls.append(dt)
            ok_cpu.append(dc)
            successes += 1
            for a in out.allocations:
                for r in a["devices"]["results"]:
                    st.add_result(r, FEATURES)
    wall = time.perf_counter() - wall0
    report("filling the node (successful calls)", ok_calls, successes, wall, ok_cpu)
    print(
        f"    calls that did not fit (explanation included): {len(failed_calls)}, "
        f"p50={fmt_ms(pct(failed_calls, 50))} p99={fmt_ms(pct(failed_calls, 99))} | "
        f"cpu p50={fmt_ms(pct(failed_cpu, 50))} p99={fmt_ms(pct(failed_cpu, 99))}"
    )


# ---------------------------------------------------------------------------------------------
# (c) unsatisfiable requests
# ---------------------------------------------------------------------------------------------


def bench_c() -> None:
    print("(c) unsatisfiable requests: time to give up, explanation included")
    slices = h100_slices()
    node = {"metadata": {"name": "gpu-node-01", "labels": {}}}
    index = AllocatorIndex(H100_CLASSES, slices, FEATURES)
    cases = {
        "9 full GPUs on an 8-GPU node": [claim("big", [gpu_request("gpus", 9)])],
        "10 pods' claims for 1 GPU each (8 GPUs)": [claim(f"c{i}", [gpu_request("g")]) for i in range(10)],
        "30 x 1g.10gb on one parent GPU (matchAttribute)": [
            claim("same-gpu", [mig_request("m", "1g.10gb", 30)], [{"matchAttribute": f"{NV}/parentUUID"}])
        ],
        "7g.80gb + 1g.10gb on the same parent GPU (counters forbid; search runs)": [
            claim(
                "same-parent",
                [mig_request("big", "7g.80gb"), mig_request("small", "1g.10gb")],
                [{"matchAttribute": f"{NV}/parentUUID"}],
            )
        ],
        "4 + 4 GPUs, all on one NUMA node (4 per NUMA node)": [
            claim(
                "numa",
                [gpu_request("a", 4), gpu_request("b", 4)],
                [{"matchAttribute": "resource.kubernetes.io/numaNode"}],
            )
        ],
    }
    # kubernetes#131730's shape: many identical devices, two requests whose constraint can never hold.
    flat = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "flat"},
        "spec": {
            "driver": "d",
            "nodeName": "n",
            "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"dev-{i}", "attributes": {"serial": {"int": i}}} for i in range(16)],
        },
    }
    flat_class = {"c": {"metadata": {"name": "c"}, "spec": {}}}
    flat_claim = claim(
        "combinatorial",
        [
            {"name": "a", "exactly": {"deviceClassName": "c", "count": 8}},
            {"name": "b", "exactly": {"deviceClassName": "c", "count": 8}},
        ],
        [{"requests": ["b"], "matchAttribute": "d/serial"}],
    )
    # Counters forbid what constraints allow: 24 partitions of one counter set (9 left), 5 + 5 wanted.
    part = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "parts"},
        "spec": {
            "driver": "d",
            "nodeName": "n",
            "pool": {"name": "q", "generation": 1, "resourceSliceCount": 2},
            "devices": [
                {
                    "name": f"part-{i}",
                    "attributes": {"g": {"int": i % 2}},
                    "consumesCounters": [{"counterSet": "cs", "counters": {"c": {"value": "1"}}}],
                }
                for i in range(24)
            ],
        },
    }
    counters = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "counters"},
        "spec": {
            "driver": "d",
            "nodeName": "n",
            "pool": {"name": "q", "generation": 1, "resourceSliceCount": 2},
            "sharedCounters": [{"name": "cs", "counters": {"c": {"value": "9"}}}],
        },
    }
    part_claim = claim(
        "parts",
        [
            {"name": "a", "exactly": {"deviceClassName": "c", "count": 5}},
            {"name": "b", "exactly": {"deviceClassName": "c", "count": 5}},
        ],
        [{"matchAttribute": "d/g"}],
    )
    for label, claims in cases.items():
        _time_failure(label, Allocator.from_index(index, AllocatedState()), node, claims)
    _time_failure(
        "16 devices, 8+8 with an unsatisfiable matchAttribute (kubernetes#131730 shape)",
        Allocator(flat_class, [flat], [], FEATURES),
        {"metadata": {"name": "n"}},
        [flat_claim],
    )
    _time_failure(
        "24 partitions, 5 + 5 wanted, counters leave room for 9",
        Allocator(flat_class, [part, counters], [], FEATURES),
        {"metadata": {"name": "n"}},
        [part_claim],
    )
    _time_failure(
        "same, exact pruning off: the search runs into its step budget",
        Allocator(flat_class, [part, counters], [], FEATURES, prune=False),
        {"metadata": {"name": "n"}},
        [part_claim],
    )


def _time_failure(
    label: str, allocator: Allocator, node: dict[str, Any], claims: list[dict[str, Any]]
) -> None:
    times = []
    out = None
    for _ in range(5):
        t = time.perf_counter()
        out = allocator.allocate(node, claims)
        str(out.explanation)
        times.append(time.perf_counter() - t)
    assert out is not None
    status = "FITS?!" if out.allocations is not None else "gave up"
    summary = out.explanation.summary if out.explanation else ""
    print(
        f"  {label}: {status} in {fmt_ms(times[0])} (first), {fmt_ms(statistics.median(times))} (median); "
        f"steps={out.steps}; {summary}"
    )


def main() -> None:
    quick = "--quick" in sys.argv
    prefs = [a.split("=", 1)[1] for a in sys.argv if a.startswith("--device-preference=")]
    if prefs:  # only (b), once per preference: the hook's cost on the 208-device node
        from kdra.scheduler.devicepref import DEVICE_PREFERENCES

        names = list(DEVICE_PREFERENCES) if prefs == ["all"] else prefs
        for name in [None, *names]:
            bench_b(iterations=20 if quick else 200, prefer=name)
        return
    bench_a(cycles=2 if quick else 10)
    bench_b(iterations=20 if quick else 200)
    bench_c()


if __name__ == "__main__":
    main()
