"""`kdra cluster`: render a fleet into Kubernetes objects, describe it, list the catalog and bundled fleets.

    kdra cluster render -f FLEET [--legacy] [--no-dra] [--no-validate] [-o yaml|json]
    kdra cluster describe -f FLEET [-o table|json]
    kdra cluster catalog [-o table|json]
    kdra cluster fleets
    kdra cluster attributes [-c FLEET] [--driver NAME] [-o table|json]

FLEET is a Fleet file (kind Fleet, apiVersion kdra.dev/v1alpha1), an openb-style node-list CSV, or the name of
a bundled fleet (mixed, uniform-500, alibaba-openb).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Iterable
from typing import Any

from kdra.cli.common import add_gates_arg, add_limit_args, feature_gates, limits

EPILOG = """\
render prints, as multi-document YAML (or a v1 List in JSON) that `kdra allocate` and kubectl accept:
  the DeviceClasses of the vendors present, then for each node its Node (status capacity/allocatable: cpu,
  memory, pods) and the ResourceSlices its DRA drivers publish. --legacy adds the extended resources a device
  plugin would advertise (nvidia.com/gpu, nvidia.com/mig-<profile>, amd.com/gpu, google.com/tpu) to each Node;
  --no-dra leaves out ResourceSlices and DeviceClasses (the pure device-plugin view).
"""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "cluster",
        help="render, describe and list accelerator fleets",
        description=__doc__.splitlines()[0],
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="cluster_command", metavar="SUBCOMMAND")

    r = sub.add_parser(
        "render",
        help="print Nodes, ResourceSlices and DeviceClasses of a fleet",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    r.add_argument("-f", "--fleet", required=True, help="fleet file, node-list CSV or bundled fleet name")
    r.add_argument("--legacy", action="store_true", help="add device-plugin extended resources to Nodes")
    r.add_argument("--no-dra", action="store_true", help="omit ResourceSlices and DeviceClasses")
    r.add_argument("--no-validate", action="store_true", help="skip API validation of the rendered objects")
    r.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")
    add_limit_args(r)
    add_gates_arg(r, feature_gates=False)
    r.set_defaults(func=_render)

    d = sub.add_parser("describe", help="a per-pool summary of a fleet")
    d.add_argument("-f", "--fleet", required=True, help="fleet file, node-list CSV or bundled fleet name")
    d.add_argument("-o", "--output", choices=("table", "json"), default="table")
    add_limit_args(d)
    d.set_defaults(func=_describe)

    c = sub.add_parser(
        "catalog", help="the accelerator models kdra knows, with sources and unverified numbers"
    )
    c.add_argument("-o", "--output", choices=("table", "json"), default="table")
    c.set_defaults(func=_catalog)

    f = sub.add_parser("fleets", help="list the bundled fleets")
    f.set_defaults(func=_fleets)

    a = sub.add_parser(
        "attributes",
        help="every attribute and capacity name the fleet's devices publish, with a CEL snippet",
        description="Per driver and device type: every attribute and capacity name in the fleet's "
        "ResourceSlices, how many devices have it, an example value, the qualified name (for "
        "matchAttribute) and a CEL selector matching the example (for a claim's selectors).",
    )
    a.add_argument(
        "-c",
        "-f",
        "--fleet",
        dest="fleet",
        default="mixed",
        help="fleet file or bundled name (default: mixed)",
    )
    a.add_argument("--driver", default=None, help="only this driver (e.g. gpu.nvidia.com)")
    a.add_argument("-o", "--output", choices=("table", "json"), default="table")
    add_limit_args(a)
    a.set_defaults(func=_attributes)
    p.set_defaults(func=lambda args: (p.print_help(sys.stderr), 2)[1])


def _render(args: argparse.Namespace) -> int:
    from kdra.api.load import dump_json, dump_yaml
    from kdra.fleets import iter_render, load_fleet

    fleet = load_fleet(args.fleet, **limits(args))
    features = feature_gates(args)
    objs: Iterable[dict[str, Any]] = iter_render(
        fleet, dra=not args.no_dra, legacy=args.legacy, kubernetes_version=features.version
    )
    if not args.no_validate:
        from kdra.api.validation import validate_objects

        objs = list(objs)
        validate_objects(objs, features=features)
    out = sys.stdout
    if args.output == "json":
        out.write(dump_json(list(objs)))
        return 0
    first = True
    for obj in objs:
        # Rendered objects share sub-dicts; a JSON round trip unshares them so YAML gets no anchors/aliases.
        text = dump_yaml(json.loads(json.dumps(obj)))
        out.write(text if first else "---\n" + text)
        first = False
    return 0


def _gib(n: int) -> str:
    return f"{n / (1 << 30):,.0f} GiB" if n else "-"


def _describe(args: argparse.Namespace) -> int:
    from kdra.fleets import load_fleet, summarize

    fleet = load_fleet(args.fleet, **limits(args))
    rows = summarize(fleet)
    if args.output == "json":
        doc = {
            "fleet": fleet.name,
            "nodes": fleet.node_count,
            "pools": [
                {
                    **dataclasses.asdict(r),
                    "devices": r.devices,
                    "accelerators": r.accelerators,
                    "zones": list(r.zones),
                }
                for r in rows
            ],
        }
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Fleet {fleet.name}: {fleet.node_count} nodes", title_justify="left")
    for col, just in (
        ("pool", "left"),
        ("nodes", "right"),
        ("model", "left"),
        ("accel/node", "right"),
        ("DRA devices", "right"),
        ("slices/node", "right"),
        ("accel memory", "right"),
        ("partitions", "left"),
        ("sharing", "left"),
        ("cpu/mem per node", "left"),
        ("zones", "left"),
    ):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    tot_nodes = tot_acc = tot_dev = tot_mem = 0
    for r in rows:
        mem = r.accelerator_memory_bytes_per_node * r.nodes
        table.add_row(
            r.pool,
            str(r.nodes),
            r.model,
            str(r.accelerators_per_node),
            f"{r.devices:,}",
            str(r.slices_per_node),
            _gib(mem),
            r.partitioning,
            r.sharing,
            f"{r.cpu} / {r.memory}",
            ", ".join(r.zones) or "-",
        )
        tot_nodes += r.nodes
        tot_acc += r.accelerators
        tot_dev += r.devices
        tot_mem += mem
    table.add_section()
    table.add_row(
        "total", str(tot_nodes), "", f"{tot_acc:,} accel", f"{tot_dev:,}", "", _gib(tot_mem), "", "", "", ""
    )
    Console(width=200).print(table)
    return 0


def _catalog(args: argparse.Namespace) -> int:
    from kdra.drivers.catalog import AmdModel, GpuModel, TpuModel, all_models

    models = all_models()
    if args.output == "json":
        out = []
        for m in models:
            d = dataclasses.asdict(m)
            out.append(d)
        sys.stdout.write(json.dumps(out, indent=2, default=str) + "\n")
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title="kdra accelerator catalog", title_justify="left")
    for col in (
        "model",
        "vendor",
        "product",
        "arch / gen",
        "memory",
        "compute",
        "partitioning",
        "unverified",
    ):
        table.add_column(col)
    for m in models:
        if isinstance(m, GpuModel):
            parts = ", ".join(p.name for p in m.mig_profiles) or "-"
            unv = sorted({*m.unverified, *(f"mig.{f}" for p in m.mig_profiles for f in p.unverified)})
            table.add_row(
                m.key,
                "nvidia",
                m.product_name,
                f"{m.architecture} (cc {m.compute_capability})",
                f"{m.memory_mib:,} MiB",
                f"{m.multiprocessors} SMs",
                parts,
                ", ".join(unv) or "-",
            )
        elif isinstance(m, AmdModel):
            table.add_row(
                m.key,
                "amd",
                m.product_name,
                m.family,
                f"{m.memory_mib:,} MiB",
                f"{m.compute_units} CUs",
                ", ".join(x.profile for x in m.partition_modes),
                ", ".join(m.unverified) or "-",
            )
        elif isinstance(m, TpuModel):
            table.add_row(
                m.key,
                "google",
                m.accelerator,
                m.tpu_gen,
                f"{m.hbm_gib} GiB HBM/chip",
                f"{'/'.join(map(str, m.chips_per_host))} chips/host",
                ", ".join(m.topologies),
                ", ".join(m.unverified) or "-",
            )
    Console(width=220).print(table)
    return 0


def _fleets(args: argparse.Namespace) -> int:
    from kdra.fleets import bundled_names, load_fleet

    for name in bundled_names():
        f = load_fleet(name)
        print(f"{name:15} {f.node_count:6} nodes  {f.description}")
    return 0


def _attributes(args: argparse.Namespace) -> int:
    from kdra.fleets import iter_render, load_fleet
    from kdra.fleets.attributes import collect

    fleet = load_fleet(args.fleet, **limits(args))
    types = collect(iter_render(fleet, nodes=False))
    if args.driver:
        types = [t for t in types if t.driver == args.driver]
        if not types:
            from kdra.errors import InputError

            raise InputError(
                f"--driver {args.driver}: Not found: no device of fleet {fleet.name} has that driver"
            )
    if args.output == "json":
        sys.stdout.write(json.dumps([t.to_dict() for t in types], indent=2) + "\n")
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console(width=220)
    for t in types:
        d = t.to_dict()
        table = Table(
            title=f"{t.driver}, type {t.type}: {t.devices:,} devices", title_justify="left", show_lines=False
        )
        for col in ("kind", "name", "devices", "example", "CEL selector"):
            table.add_column(col, overflow="fold")
        for what, items in (("attribute", d["attributes"]), ("capacity", d["capacity"])):
            for item in items:
                table.add_row(
                    what if what == "capacity" else item["kind"],
                    item["name"],
                    f"{item['devices']:,}",
                    item["example"],
                    item["cel"],
                )
        console.print(table)
    console.print(
        "Unqualified names are in the driver's domain (matchAttribute takes them as DRIVER/NAME); a selector "
        'on another domain\'s name reads device.attributes["DOMAIN"].NAME.'
    )
    return 0
