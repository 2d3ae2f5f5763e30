"""`kdra simulate` on a MIG-heavy workload: upstream's first fit against each device preference.

    python benchmarks/bench_device_preference.py                     # examples/simulate, load 1.0 and 0.7
    python benchmarks/bench_device_preference.py --loads 1.0 --preferences fragmentation

The fleet is examples/simulate/mig-fleet.yaml (6 x 8 H100 in DynamicMIG mode), the workload
examples/simulate/mig-heavy.yaml (notebooks and inference on 1g/2g/3g slices, jobs on whole GPUs) with its
arrival rates scaled by each load factor. The same pods arrive in every run (same seed); only the devices
the allocator picks on a node differ. Prints, per load and policy: pods scheduled, pending and withdrawn
unscheduled at the end, GPU-hours allocated, the p90 wait, how many placements the preference decided
(against first fit under the same state), and the CPU seconds of the run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

ROOT = Path(__file__).resolve().parent.parent


def scaled_workload(load: float) -> Any:
    import yaml

    from kdra.api.durations import format_duration, parse_duration
    from kdra.sim.workload import build_workload

    docs = list(yaml.safe_load_all((ROOT / "examples/simulate/mig-heavy.yaml").read_text()))
    for doc in docs:
        for s in doc["spec"]["streams"]:
            every = s.get("arrivals", {}).get("every")
            if every is not None:
                s["arrivals"]["every"] = format_duration(parse_duration(every, "every") / load)
    return build_workload(docs, name=f"mig-heavy x{load:g}", seed=0)


def main() -> int:
    from kdra.scheduler.scheduler import SchedulerConfig
    from kdra.sim.runner import simulate

    ap = argparse.ArgumentParser()
    ap.add_argument("--loads", default="1.0,0.7")
    ap.add_argument("--preferences", default="fragmentation,binpack,spread,topology")
    args = ap.parse_args()
    fleet = str(ROOT / "examples/simulate/mig-fleet.yaml")
    print(f"{'load':>5} {'policy':<14} {'scheduled':>9} {'pending':>7} {'withdrawn':>9} {'GPU-h':>8} "
          f"{'wait p90':>9} {'decided':>8} {'CPU s':>6}")  # fmt: skip
    for load in (float(x) for x in args.loads.split(",")):
        wl = scaled_workload(load)
        for pref in [None, *args.preferences.split(",")]:
            c0 = time.process_time()
            report = simulate(fleet, wl, ("dra",), 0, SchedulerConfig(device_preference=pref))
            cpu = time.process_time() - c0
            mr = report.modes["dra"]
            m = mr.metrics
            decided = sum(1 for c in mr.result.device_choices.values() if c.get("decidedBy") == "preference")
            print(
                f"{load:>5.2f} {pref or 'first fit':<14} {m['pods_scheduled']:>9} {m['pods_pending']:>7} "
                f"{m['pods_withdrawn_unscheduled']:>9} {m['gpu_hours_allocated']:>8,.0f} "
                f"{m['wait_seconds_p90'] / 3600:>8.1f}h {decided if pref else '-':>8} {cpu:>6.1f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
