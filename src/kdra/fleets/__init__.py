"""Fleets: hand-written cluster descriptions (kind Fleet) and the bundled example fleets, rendered into the
Nodes, ResourceSlices and DeviceClasses a real cluster with the vendors' DRA drivers would have.

    from kdra.fleets import load_fleet, render, iter_render
    fleet = load_fleet("mixed")            # a bundled name, or a path to a Fleet YAML/JSON file
    objects = render(fleet)                # DeviceClasses, then per node: Node + its ResourceSlices
    for obj in iter_render(load_fleet("uniform-500")):   # streaming, for large fleets
        ...

Rendered objects share read-only sub-dicts between identical nodes; deep-copy before mutating.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from kdra.errors import InputError
from kdra.fleets.render import (
    FleetPublisher,
    RenderOptions,
    device_classes,
    iter_render,
    legacy_allocatable,
    legacy_resources,
    node_topology,
    render,
)
from kdra.fleets.spec import MAX_NODES, Accelerator, Fleet, Pool, Taint, Topology, parse_fleet
from kdra.fleets.summary import PoolSummary, summarize

BUNDLED: dict[str, str] = {
    "mixed": "data/mixed.yaml",
    "uniform-500": "data/uniform-500.yaml",
    "node-types": "data/node-types.yaml",  # kdra plan's default candidate node types (no nodes)
    "alibaba-openb": "",  # built from data/alibaba-openb-shapes.csv
}

__all__ = [
    "BUNDLED",
    "Accelerator",
    "Fleet",
    "FleetPublisher",
    "Pool",
    "PoolSummary",
    "RenderOptions",
    "Taint",
    "Topology",
    "bundled_names",
    "device_classes",
    "iter_render",
    "legacy_allocatable",
    "legacy_resources",
    "load_fleet",
    "node_topology",
    "parse_fleet",
    "render",
    "summarize",
]


def bundled_names() -> list[str]:
    return sorted(BUNDLED)


def _load_yaml(text: str, source: str) -> Any:
    from kdra.api.load import load_documents

    docs = load_documents(text, source)
    if len(docs) != 1:
        raise InputError(f"{source}: expected exactly one Fleet document, found {len(docs)}")
    return docs[0]


def load_fleet(name_or_path: str | Path | Fleet, *, max_nodes: int = MAX_NODES) -> Fleet:
    """A Fleet from a bundled name (`mixed`, `uniform-500`, `alibaba-openb`), a Fleet YAML/JSON file, or an
    openb-style node-list CSV, of at most `max_nodes` nodes. Raises InputError naming what was wrong."""
    if isinstance(name_or_path, Fleet):
        return name_or_path
    text_name = str(name_or_path)
    path = Path(text_name)
    if not text_name.strip():
        raise InputError(f"fleet {text_name!r}: Required value: a bundled fleet name or a fleet file")
    if path.is_dir():
        raise InputError(
            f"fleet {text_name!r}: Is a directory: a fleet is one Fleet YAML/JSON file or an openb "
            "node-list CSV"
        )
    if path.exists():
        if path.suffix == ".csv":
            from kdra.fleets import openb

            return openb.read_csv(path, max_nodes=max_nodes)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise InputError(f"{path}: {e.strerror}") from None
        except UnicodeDecodeError as e:
            raise InputError(f"{path}: not UTF-8 text (byte {e.start})") from None
        return parse_fleet(_load_yaml(text, str(path)), str(path), max_nodes=max_nodes)
    if text_name in BUNDLED:
        if text_name == "alibaba-openb":
            from kdra.fleets import openb

            return openb.bundled()
        text = resources.files("kdra.fleets").joinpath(BUNDLED[text_name]).read_text()
        return parse_fleet(
            _load_yaml(text, f"bundled:{text_name}"), f"bundled:{text_name}", max_nodes=max_nodes
        )
    raise InputError(
        f"fleet {text_name!r}: no such file, and not a bundled fleet (bundled: {', '.join(bundled_names())})"
    )
