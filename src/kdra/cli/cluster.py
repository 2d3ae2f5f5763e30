"""`kdra cluster`: render a fleet into Kubernetes objects, describe it, list the catalog and bundled fleets.

    kdra cluster render -c FLEET [--legacy] [--no-dra] [--no-validate] [-o yaml|json]
    kdra cluster describe -c FLEET [-o table|wide|name|json]
    kdra cluster catalog [-o table|wide|name|json]
    kdra cluster fleets
    kdra cluster attributes [-c FLEET] [--driver NAME] [-o table|wide|name|json]

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

from kdra.cli.common import add_fleet_arg, add_gates_arg, add_limit_args, feature_gates, limits
from kdra.cli.conventions import add_output

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
    add_fleet_arg(r, default=None, required=True)
    r.add_argument("--legacy", action="store_true", help="add device-plugin extended resources to Nodes")
    r.add_argument("--no-dra", action="store_true", help="omit ResourceSlices and DeviceClasses")
    r.add_argument("--no-validate", action="store_true", help="skip API validation of the rendered objects")
    add_output(r, ("yaml", "json"))
    add_limit_args(r)
    add_gates_arg(r, feature_gates=False)
    r.set_defaults(func=_render)

    d = sub.add_parser("describe", help="a per-pool summary of a fleet")
    add_fleet_arg(d, default=None, required=True)
    add_output(d, ("table", "json"), help="wide: every column; name: node/NAME of every node")
    add_limit_args(d)
    d.set_defaults(func=_describe)

    c = sub.add_parser(
        "catalog", help="the accelerator models kdra knows, with sources and unverified numbers"
    )
    add_output(c, ("table", "json"), help="wide: with the unverified figures; name: model/NAME")
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
    add_fleet_arg(a)
    a.add_argument("--driver", default=None, help="only this driver (e.g. gpu.nvidia.com)")
    add_output(
        a, ("table", "json"), help="wide: with the qualified name; name: DOMAIN/NAME of every attribute"
    )
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
        from kdra.validation.rules import validate_objects

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
    if args.output == "name":
        from kdra.cli.output import write_names
        from kdra.fleets import iter_render

        write_names(
            f"node/{o['metadata']['name']}" for o in iter_render(fleet, dra=False) if o["kind"] == "Node"
        )
        return 0
    from kdra.cli.output import write_table

    wide = args.output == "wide"
    header = ["pool", "nodes", "model", "accel/node", "DRA devices", "accel memory", "partitions", "sharing"]
    if wide:
        header += ["slices/node", "cpu/mem per node", "zones"]
    table: list[list[str]] = []
    tot_nodes = tot_acc = tot_dev = tot_mem = 0
    for r in rows:
        mem = r.accelerator_memory_bytes_per_node * r.nodes
        row = [
            r.pool,
            str(r.nodes),
            r.model,
            str(r.accelerators_per_node),
            f"{r.devices:,}",
            _gib(mem),
            r.partitioning,
            r.sharing,
        ]
        if wide:
            row += [str(r.slices_per_node), f"{r.cpu} / {r.memory}", ",".join(r.zones) or "-"]
        table.append(row)
        tot_nodes += r.nodes
        tot_acc += r.accelerators
        tot_dev += r.devices
        tot_mem += mem
    table.append(["total", str(tot_nodes), "", f"{tot_acc:,}", f"{tot_dev:,}", _gib(tot_mem), "", ""])
    if wide:
        table[-1] += ["", "", ""]
    print(f"Fleet {fleet.name}: {fleet.node_count:,} nodes, {_accelerators(rows)}")
    write_table(header, table)
    return 0


def _accelerators(rows: list[Any]) -> str:
    """`200 accelerators (184 GPUs, 16 TPU chips)`: the count every doc quotes, by kind."""
    kinds: dict[str, int] = {}
    for r in rows:
        if r.accelerators:
            kind = "TPU chips" if r.model.startswith("tpu") else "GPUs"
            kinds[kind] = kinds.get(kind, 0) + r.accelerators
    total = sum(kinds.values())
    parts = ", ".join(f"{n:,} {k}" for k, n in sorted(kinds.items()))
    return f"{total:,} accelerators" + (f" ({parts})" if len(kinds) > 1 else "")


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
    if args.output == "name":
        from kdra.cli.output import write_names

        write_names(f"model/{m.key}" for m in models)
        return 0
    from kdra.cli.output import write_table

    wide = args.output == "wide"
    header = ["model", "vendor", "product", "arch / gen", "memory", "compute", "partitioning"]
    if wide:
        header.append("unverified")
    table: list[list[str]] = []
    for m in models:
        if isinstance(m, GpuModel):
            unv = sorted({*m.unverified, *(f"mig.{f}" for p in m.mig_profiles for f in p.unverified)})
            row = [
                m.key,
                "nvidia",
                m.product_name,
                f"{m.architecture} (cc {m.compute_capability})",
                f"{m.memory_mib:,} MiB",
                f"{m.multiprocessors} SMs",
                ",".join(p.name for p in m.mig_profiles) or "-",
                ",".join(unv) or "-",
            ]
        elif isinstance(m, AmdModel):
            row = [
                m.key,
                "amd",
                m.product_name,
                m.family,
                f"{m.memory_mib:,} MiB",
                f"{m.compute_units} CUs",
                ",".join(x.profile for x in m.partition_modes),
                ",".join(m.unverified) or "-",
            ]
        elif isinstance(m, TpuModel):
            row = [
                m.key,
                "google",
                m.accelerator,
                m.tpu_gen,
                f"{m.hbm_gib} GiB HBM/chip",
                f"{'/'.join(map(str, m.chips_per_host))} chips/host",
                ",".join(m.topologies),
                ",".join(m.unverified) or "-",
            ]
        else:
            continue
        table.append(row if wide else row[:-1])
    write_table(header, table)
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
    objs = [o for o in iter_render(fleet, nodes=False) if o["kind"] in ("DeviceClass", "ResourceSlice")]
    types = collect(objs)
    if args.driver is not None:
        from kdra.errors import InputError

        if not args.driver:
            raise InputError(
                "--driver: Required value: name a driver (e.g. gpu.nvidia.com) or leave the flag out"
            )
        types = [t for t in types if t.driver == args.driver]
        if not types:
            raise InputError(
                f"--driver {args.driver}: Not found: no device of fleet {fleet.name} has that driver"
            )
    classes = _class_rows(objs, types)
    if args.output == "json":
        doc = {
            "deviceClasses": [
                dict(zip(("name", "selects", "selector"), row, strict=True)) for row in classes
            ],
            "deviceTypes": [t.to_dict() for t in types],
        }
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return 0
    if args.output == "name":
        from kdra.cli.output import write_names

        names = {f"deviceclass/{row[0]}" for row in classes}
        for t in types:
            d = t.to_dict()
            names |= {f"attribute/{a['qualifiedName']}" for a in d["attributes"]}
            names |= {f"capacity/{c['qualifiedName']}" for c in d["capacity"]}
        write_names(sorted(names))
        return 0
    from kdra.cli.output import write_table

    wide = args.output == "wide"
    header = ["driver", "type", "kind", "name", "devices", "example", "CEL selector"]
    if wide:
        header[4:4] = ["qualified name"]
    table: list[list[str]] = []
    for t in types:
        d = t.to_dict()
        for what, items in (("attribute", d["attributes"]), ("capacity", d["capacity"])):
            for item in items:
                row = [
                    t.driver,
                    t.type,
                    what if what == "capacity" else item["kind"],
                    item["name"],
                    f"{item['devices']:,}",
                    item["example"],
                    item["cel"],
                ]
                if wide:
                    row[4:4] = [item["qualifiedName"]]
                table.append(row)
    write_table(["device class", "selects", "selector"], classes)
    print()
    write_table(header, table)
    print(
        "Unqualified names are in the driver's domain (matchAttribute takes them as DRIVER/NAME); a selector "
        'on another domain\'s name reads device.attributes["DOMAIN"].NAME.'
    )
    return 0


def _class_rows(objs: list[dict[str, Any]], types: list[Any]) -> list[list[str]]:
    """Each DeviceClass, the device types it selects (`gpu.nvidia.com/gpu (120)`) and its selector: which
    class a claim names to reach which devices."""
    rows = []
    for obj in objs:
        if obj["kind"] != "DeviceClass":
            continue
        name = str(obj["metadata"]["name"])
        selects = [f"{t.driver}/{t.type} ({t.classes[name]:,})" for t in types if name in t.classes]
        if not selects and types and len({t.driver for t in types}) == 1:
            continue  # --driver: only the classes of that driver
        exprs = [
            str(((sel or {}).get("cel") or {}).get("expression", ""))
            for sel in (obj.get("spec") or {}).get("selectors") or []
        ]
        rows.append([name, ", ".join(selects) or "-", " && ".join(exprs) or "-"])
    return rows
