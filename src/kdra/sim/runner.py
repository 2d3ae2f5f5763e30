"""Load a fleet and a workload, run the simulation in each mode, and collect what the reports need."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from kdra.api.features import FeatureGates
from kdra.errors import InputError
from kdra.scheduler.scheduler import SchedulerConfig
from kdra.sim.engine import DEVICE_PLUGIN, DRA, ModeResult, Simulation
from kdra.sim.metrics import compute_metrics, headline, per_workload
from kdra.sim.workload import Workload, build_workload

DEFAULT_FLEET = "mixed"
DEFAULT_WORKLOAD = "mixed-month"


def bundled_workloads() -> list[str]:
    root = resources.files("kdra.sim") / "data"
    return sorted(p.name.removesuffix(".yaml") for p in root.iterdir() if p.name.endswith(".yaml"))


def load_workload(
    name_or_path: str,
    seed: int,
    max_pods: int | None = None,
    validate: str = "strict",
    devices: Sequence[Any] = (),
    features: FeatureGates | None = None,
) -> Workload:
    """A bundled workload or a file/folder of objects; unknown fields per `validate` (kdra.api.fields).
    `devices`: the fleet's objects, so that a generator's whole GPUs can also be whole shareable GPUs.
    `features`: the release and gates the objects are admitted with (kdra.sim.workload.build_workload)."""
    from kdra.api.load import load_paths, load_text

    if not name_or_path.strip():
        # Path("") is the current folder: every YAML and JSON file under it was read as the workload.
        raise InputError(
            "workload '': Required value: a bundled workload name or a file or folder of objects"
        )
    path = Path(name_or_path)
    if (
        path.exists()
        or name_or_path == "-"
        or "/" in name_or_path
        or name_or_path.endswith((".yaml", ".yml", ".json"))
    ):
        objs = load_paths([name_or_path], allow_empty=False)
        label = path.stem if name_or_path != "-" else "stdin"
    else:
        res = resources.files("kdra.sim") / "data" / f"{name_or_path}.yaml"
        if not res.is_file():
            raise InputError(
                f"workload {name_or_path!r}: no such file, and not a bundled workload "
                f"(bundled: {', '.join(bundled_workloads())})"
            )
        objs = load_text(res.read_text(), f"bundled workload {name_or_path}")
        label = name_or_path
    if not objs:
        raise InputError(f"workload {name_or_path}: no objects")
    from kdra.api.fields import check_fields

    check_fields(objs, validate, version=features.version if features is not None else None)
    from kdra.api.exportfile import replayable_workload  # a `kdra export` file: its pods, replayed
    from kdra.sim.workload import MAX_PODS

    return build_workload(
        replayable_workload(objs),
        name=label,
        seed=seed,
        max_pods=MAX_PODS if max_pods is None else max_pods,
        devices=devices,
        features=features,
    )


@dataclass
class ModeReport:
    result: ModeResult
    metrics: dict[str, Any]
    workloads: dict[str, dict[str, float]]


@dataclass
class SimulationReport:
    fleet: str
    workload: str
    seed: int
    modes: dict[str, ModeReport] = field(default_factory=dict)

    @property
    def headline(self) -> dict[str, Any] | None:
        if DRA in self.modes and DEVICE_PLUGIN in self.modes:
            dra, dp = self.modes[DRA], self.modes[DEVICE_PLUGIN]
            return headline(dra.result, dp.result, dra.metrics, dp.metrics)
        return None


def fleet_objects(
    fleet: str, version: str | None = None, max_nodes: int | None = None
) -> tuple[str, list[Any], Any]:
    """(name, the Nodes, DeviceClasses and ResourceSlices, the Fleet or None) of a bundled fleet or a Fleet
    file, rendered as that release's drivers publish; a `kdra export` file stands for its objects as they
    are (no Fleet: DRA only)."""
    from kdra.api.exportfile import load_exported_cluster
    from kdra.fleets import load_fleet, render
    from kdra.fleets.spec import MAX_NODES

    exported = load_exported_cluster(fleet)
    if exported is not None:
        return exported[0], exported[1], None
    fl = load_fleet(fleet, max_nodes=max_nodes or MAX_NODES)
    objects = (
        render(fl, dra=True, legacy=False, kubernetes_version=version)
        if version
        else render(fl, dra=True, legacy=False)
    )
    return getattr(fl, "name", str(fleet)), objects, fl


def simulate(
    fleet: str = DEFAULT_FLEET,
    workload: str | Workload = DEFAULT_WORKLOAD,
    modes: Sequence[str] = (DRA, DEVICE_PLUGIN),
    seed: int = 0,
    config: SchedulerConfig | None = None,
    progress: Callable[[str, float, float], None] | None = None,
    *,
    max_nodes: int | None = None,
    max_pods: int | None = None,
    validate: str = "strict",
) -> SimulationReport:
    from kdra.fleets import render

    # The drivers publish what that release's drivers publish (config.features carries the release).
    features = (config or SchedulerConfig()).features
    version = features.version
    name, dra_objects, fl = fleet_objects(fleet, version, max_nodes)
    if fl is None:
        modes = [m for m in modes if m == DRA]
    wl = (
        workload
        if isinstance(workload, Workload)
        else load_workload(workload, seed, max_pods, validate, devices=dra_objects, features=features)
    )
    report = SimulationReport(name, wl.name, seed)
    for mode in modes:
        objects = (
            dra_objects
            if mode == DRA or fl is None
            else render(fl, dra=False, legacy=True, kubernetes_version=version)
        )
        sim = Simulation(objects, wl, mode, config=config, seed=seed, dra_objects=dra_objects)
        cb = None
        if progress is not None:

            def cb(now: float, horizon: float, mode: str = mode) -> None:
                progress(mode, now, horizon)

        result = sim.run(cb)
        report.modes[mode] = ModeReport(result, compute_metrics(result), per_workload(result))
    return report
