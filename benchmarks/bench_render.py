"""Render 5,000 nodes of 8 x H100 with DynamicMIG (1,040,000 devices, 45,000 ResourceSlices).

Prints wall time and peak memory (ru_maxrss of a fresh process per mode) for:
  stream       iter_render(): one node's objects at a time (what a store that ingests objects would use)
  materialize  render(): every object in one list (what a simulator holding the whole cluster does)
  validate     render() + kdra.validation.rules.validate_objects on the first 100 nodes (rate per node)

    python benchmarks/bench_render.py [--nodes 5000] [--mode all|stream|materialize|validate]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))


def fleet(nodes: int):  # type: ignore[no-untyped-def]
    from kdra.fleets import parse_fleet

    return parse_fleet(
        {
            "apiVersion": "kdra.dev/v1alpha1",
            "kind": "Fleet",
            "metadata": {"name": "bench"},
            "spec": {
                "pools": [
                    {
                        "name": "h100",
                        "count": nodes,
                        "namePattern": "h100-{index:05d}",
                        "cpu": "224",
                        "memory": "2Ti",
                        "topology": {
                            "zones": ["a", "b"],
                            "nodesPerRack": 4,
                            "racksPerBlock": 8,
                            "nvlinkDomainSize": 8,
                        },
                        "accelerator": {"model": "H100-SXM-80GB", "count": 8, "mig": {"mode": "dynamic"}},
                    }
                ]
            },
        }
    )


def run(mode: str, nodes: int) -> dict[str, float]:
    from kdra.fleets import iter_render, render

    f = fleet(nodes)
    t0 = time.perf_counter()
    devices = slices = objects = 0
    if mode == "stream":
        for o in iter_render(f):
            objects += 1
            if o["kind"] == "ResourceSlice":
                slices += 1
                devices += len(o["spec"].get("devices", ()))
        elapsed = time.perf_counter() - t0
    else:
        objs = render(f)
        elapsed = time.perf_counter() - t0
        objects = len(objs)
        for o in objs:
            if o["kind"] == "ResourceSlice":
                slices += 1
                devices += len(o["spec"].get("devices", ()))
        if mode == "validate":
            from kdra.validation.rules import validate_objects

            head = [
                o for o in objs if o.get("spec", {}).get("nodeName", o["metadata"]["name"]) < "h100-00100"
            ]
            t1 = time.perf_counter()
            validate_objects(head)
            per_node = (time.perf_counter() - t1) / 100
            return {"nodes": nodes, "validate_s_per_node": per_node, "validate_s_all_est": per_node * nodes}
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux -> MiB
    return {
        "nodes": nodes,
        "objects": objects,
        "slices": slices,
        "devices": devices,
        "seconds": elapsed,
        "devices_per_s": devices / elapsed,
        "peak_rss_mib": peak,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--mode", default="all", choices=("all", "stream", "materialize", "validate"))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(run(args.mode, args.nodes)))
        return 0
    modes = ("stream", "materialize", "validate") if args.mode == "all" else (args.mode,)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"render {args.nodes} nodes x 8 H100-SXM-80GB, DynamicMIG (python {sys.version.split()[0]}; "
        f"interpreter baseline ~{base:.0f} MiB)"
    )
    for mode in modes:
        out = subprocess.run(
            [sys.executable, __file__, "--child", "--mode", mode, "--nodes", str(args.nodes)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        r = json.loads(out)
        if mode == "validate":
            print(
                f"  {mode:12} {r['validate_s_per_node'] * 1000:.1f} ms/node -> "
                f"~{r['validate_s_all_est']:.0f} s for all {args.nodes} nodes"
            )
        else:
            print(
                f"  {mode:12} {r['devices']:,} devices in {r['slices']:,} slices ({r['objects']:,} objects): "
                f"{r['seconds']:.2f} s ({r['devices_per_s']:,.0f} devices/s), "
                f"peak RSS {r['peak_rss_mib']:,.0f} MiB"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
