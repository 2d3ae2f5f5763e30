"""Byte preservation over the layouts people write: random mixes of indentation, dash offsets, flow and block
resources, comments, CRLF and quoting. For each generated manifest the migration must parse, keep every line
that carries no device request byte for byte and in order, and say the same as the original apart from the
requests it replaced."""

from __future__ import annotations

import difflib
from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from kdra.migrate import Options, migrate_text


@st.composite
def manifests(draw: st.DrawFn) -> tuple[str, list[int]]:
    """A Deployment in a random layout, and the GPU count of each container (0: no request)."""
    m = draw(st.sampled_from([2, 4]))
    dash = {key: draw(st.sampled_from([0, 2])) for key in ("containers", "env", "tolerations", "args")}
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    gpus = draw(st.lists(st.integers(0, 3), min_size=1, max_size=3))
    selector = draw(st.booleans())
    comments = draw(st.booleans())

    def ind(level: int) -> str:
        return " " * (m * level)

    lines = ["apiVersion: apps/v1", "kind: Deployment", "metadata:", f"{ind(1)}name: web", "spec:"]
    lines += [f"{ind(1)}template:", f"{ind(2)}spec:"]
    if selector:
        lines += [f"{ind(3)}nodeSelector:", f"{ind(4)}nvidia.com/gpu.product: NVIDIA-L4", f"{ind(4)}zone: a"]
    lines.append(f"{ind(3)}containers:")
    base = m * 3 + dash["containers"]
    for index, count in enumerate(gpus):
        pad = " " * (base + 2)
        if comments:
            lines.append(" " * base + f"# container {index}")
        lines.append(" " * base + f"- name: c{index}")
        lines.append(pad + f'image: "registry.example.com/c{index}:1.0"')
        lines.append(pad + "args:")
        lines += [" " * (base + 2 + dash["args"]) + f"- --flag={i}" for i in range(2)]
        lines.append(pad + "env:")
        lines.append(" " * (base + 2 + dash["env"]) + "- {name: A, value: 'x: y'}")
        style = draw(st.sampled_from(["block", "flow", "mixed"]))
        if count == 0 and draw(st.booleans()):
            continue  # no resources at all
        if style == "flow":
            lines.append(pad + f"resources: {{limits: {{nvidia.com/gpu: {count}, memory: 1Gi}}}}")
        elif style == "mixed":
            lines += [pad + "resources:", pad + " " * m + f"limits: {{cpu: '1', nvidia.com/gpu: {count}}}"]
        else:
            lines += [pad + "resources:", pad + " " * m + "limits:"]
            if comments:
                lines.append(pad + " " * (2 * m) + "# the GPUs")
            lines += [pad + " " * (2 * m) + f"nvidia.com/gpu: {count}", pad + " " * (2 * m) + "memory: 1Gi"]
    lines.append(f"{ind(3)}tolerations:")
    lines.append(" " * (m * 3 + dash["tolerations"]) + "- {key: dedicated, operator: Exists}")
    return newline.join(lines) + newline, gpus


def _strip(obj: Any) -> Any:
    """The data without what a migration adds or removes."""
    if isinstance(obj, dict):
        out = {}
        for key, value in obj.items():
            if key in ("resourceClaims", "claims") or str(key).startswith("nvidia.com/gpu"):
                continue
            if key == "tolerations":
                value = [t for t in value if t.get("key") != "nvidia.com/gpu"]
            stripped = _strip(value)
            if stripped in ({}, None) and key in ("limits", "resources", "nodeSelector"):
                continue
            out[key] = stripped
        return out
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


@settings(max_examples=60, deadline=None)
@given(manifests())
def test_any_layout_keeps_unrelated_lines_and_data(case: tuple[str, list[int]]) -> None:
    text, gpus = case
    result = migrate_text(text, "gen.yaml", Options())
    assert not result.report.failed, result.report.invalid + result.report.blocked
    out = result.text
    docs = [d for d in yaml.safe_load_all(out) if d]
    deployment = docs[0]
    assert _strip(deployment) == _strip(yaml.safe_load(text))
    spec = deployment["spec"]["template"]["spec"]
    wanted = [count for count in gpus if count]
    if wanted:
        (template,) = [d for d in docs if d["kind"] == "ResourceClaimTemplate"]
        requests = {
            r["name"]: (r["exactly"] if "exactly" in r else r["firstAvailable"][0])["count"]
            for r in template["spec"]["spec"]["devices"]["requests"]
        }
        for index, container in enumerate(spec["containers"]):
            refs = [c["request"] for c in (container.get("resources") or {}).get("claims") or []]
            assert sum(requests[r] for r in refs) == gpus[index]
    else:
        assert "resourceClaims" not in spec
    newline = "\r\n" if "\r\n" in text else "\n"
    assert "\n" not in out.replace("\r\n", "") or newline == "\n"
    source, output = text.splitlines(keepends=True), out.splitlines(keepends=True)
    matcher = difflib.SequenceMatcher(None, source, output, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag in ("delete", "replace"):
            for line in source[i1:i2]:
                changed = "nvidia.com/gpu" in line or line.strip() in (
                    "resources:",
                    "limits:",
                    "nodeSelector:",
                )
                assert changed, f"unrelated line changed: {line!r} -> {output[j1:j2]!r}"
