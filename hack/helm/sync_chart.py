#!/usr/bin/env python3
"""Generate the Helm chart's copies of deploy/ (one source of truth: deploy/rbac and deploy/crds).

- deploy/helm/kdra/templates/_rbac_rules.tpl: one named template `kdra.rules.<Role name>` per ClusterRole
  and Role in deploy/rbac/*.yaml, holding its rules as they are there. A `resourceNames` entry "kdra" (the
  default scheduler name, which deploy/rbac's Lease rule names) becomes the chart's `scheduler.name`.
- deploy/helm/kdra/crds/*.yaml: deploy/crds/*.yaml, byte for byte after a header.

Usage: hack/helm/sync_chart.py [--check]   (--check: exit 1 and name the stale files instead of writing)
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
CHART = DEPLOY / "helm" / "kdra"
HEADER = "# Generated from {src} by hack/helm/sync_chart.py: edit that file, then run the script.\n"


def _rules_yaml(rules: list[dict]) -> str:
    text = yaml.safe_dump(rules, default_flow_style=None, sort_keys=False, width=200).rstrip("\n")
    return text.replace("resourceNames: [kdra]", "resourceNames: [{{ .Values.scheduler.name | quote }}]")


def rbac_template() -> str:
    out = [HEADER.format(src="deploy/rbac/*.yaml").replace("# ", "{{- /* ", 1).rstrip("\n") + " */ -}}\n"]
    for path in sorted((DEPLOY / "rbac").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") not in ("ClusterRole", "Role"):
                continue
            name = doc["metadata"]["name"]
            out.append(
                f'\n{{{{- define "kdra.rules.{name}" -}}}}\n'
                f"{_rules_yaml(doc.get('rules') or [])}\n"
                "{{- end -}}\n"
            )
    return "".join(out)


def expected() -> dict[Path, str]:
    files = {CHART / "templates" / "_rbac_rules.tpl": rbac_template()}
    for crd in sorted((DEPLOY / "crds").glob("*.yaml")):
        files[CHART / "crds" / crd.name] = HEADER.format(src=f"deploy/crds/{crd.name}") + crd.read_text()
    return files


def main(argv: list[str]) -> int:
    check = "--check" in argv
    want = expected()
    stale = [p for p, text in want.items() if not p.is_file() or p.read_text() != text]
    extra = [p for p in (CHART / "crds").glob("*.yaml") if p not in want]
    if check:
        for p in stale + extra:
            print(f"{p.relative_to(ROOT)} is out of date: run hack/helm/sync_chart.py", file=sys.stderr)
        return 1 if stale or extra else 0
    for p in extra:
        p.unlink()
    for p in stale:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(want[p])
        print(f"wrote {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
