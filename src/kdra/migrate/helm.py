"""Helm charts given to `kdra migrate`: not YAML until rendered, so say how, and which values to look at.

A chart directory (it has Chart.yaml) is reported as a whole: the way to migrate it is to render it
(`helm template ... | kdra migrate -`) or to convert at install time with a post-renderer. What the user may
want to change in the chart itself is listed: accelerator requests in its values files (with their key paths)
and the template lines that write them (with the `.Values` keys they read).
"""

from __future__ import annotations

import re
from pathlib import Path

from kdra.migrate import resources as res
from kdra.migrate.nodes import YAMLError, compose, path_text
from kdra.migrate.scan import requests, value_text

_VALUES_REF = re.compile(r"\.Values((?:\.[A-Za-z0-9_]+)+)")
_MAX_LINES = 20


def is_chart(path: Path) -> bool:
    return path.is_dir() and (path / "Chart.yaml").is_file()


def chart_of(path: Path) -> Path | None:
    """The chart directory a file or folder belongs to, if any (a parent with Chart.yaml)."""
    for parent in [path, *path.parents]:
        if is_chart(parent):
            return parent
    return None


def chart_message(chart: Path) -> str:
    lines = [
        f"{chart}: a Helm chart (Chart.yaml): its templates are not manifests until rendered",
        f"  render and migrate:   helm template RELEASE {chart} [-f values.yaml] | kdra migrate -",
        f"  or at install time:   helm install RELEASE {chart} --post-renderer kdra --post-renderer-args "
        "migrate "
        "--post-renderer-args --no-device-classes",
    ]
    found: list[str] = []
    for values in sorted(chart.glob("values*.yaml")) + sorted(chart.glob("values*.yml")):
        try:
            root = compose(values.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, YAMLError):
            continue
        for request in requests(root):
            found.append(
                f"  {values.relative_to(chart.parent)}:{request.key.start_mark.line + 1}: "
                f"{path_text(request.path)} = {value_text(request.value)} (the chart puts this request "
                "into a "
                "pod; once the pods get claims, set it to nothing)"
            )
    templates = chart / "templates"
    for template in sorted(templates.rglob("*")) if templates.is_dir() else []:
        if not template.is_file() or template.suffix not in (".yaml", ".yml", ".tpl"):
            continue
        try:
            text = template.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            if not res.LEGACY_PATTERN.search(line) or re.search(
                r"gpu\.product|gpu\.present|gke-accelerator", line
            ):
                continue
            refs = sorted({m.group(1).lstrip(".") for m in _VALUES_REF.finditer(line)})
            read = f" (reads values: {', '.join(refs)})" if refs else ""
            found.append(f"  {template.relative_to(chart.parent)}:{number}: {line.strip()}{read}")
    if found:
        lines.append("  accelerator requests in the chart (what to change if you edit the chart instead):")
        lines += found[:_MAX_LINES]
        if len(found) > _MAX_LINES:
            lines.append(f"  ... and {len(found) - _MAX_LINES} more")
    return "\n".join(lines)
