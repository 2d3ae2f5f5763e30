"""Kustomize overlays given to `kdra migrate`: their patches are not manifests, not migrated on their own.

A strategic-merge patch looks like a Deployment, but kustomize merges it into one: converting it in place
would append a ResourceClaimTemplate to the patch file (which kustomize reads as a second patch) and leave
the base's request untouched. A JSON 6902 patch names the resource in a JSON pointer (`nvidia.com~1gpu`), so
nothing looked like a request and `--check` passed. Both are reported as requests that cannot be converted
(`--check` fails, a migration refuses), with the way that works: migrate what kustomize builds.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kdra.migrate import resources as res

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")


def kustomization_of(folder: Path) -> Path | None:
    for name in KUSTOMIZATION_FILES:
        if (folder / name).is_file():
            return folder / name
    return None


def _names_request(text: str) -> bool:
    """Whether patch text names an accelerator resource, also as a JSON pointer (`~1` is `/`)."""
    return bool(res.LEGACY_PATTERN.search(text.replace("~1", "/").replace("~0", "~")))


def _patches(doc: Any) -> Iterator[tuple[str, str | None, str | None]]:
    """(field, the patch file, the inline patch text) of every patch a kustomization names."""
    if not isinstance(doc, dict):
        return
    for key in ("patches", "patchesJson6902", "patchesStrategicMerge"):
        entries = doc.get(key)
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, str):  # patchesStrategicMerge: a file name or an inline patch
                inline = "\n" in entry or entry.lstrip().startswith(("apiVersion", "kind", "{"))
                yield key, None if inline else entry, entry if inline else None
            elif isinstance(entry, dict):
                path, patch = entry.get("path"), entry.get("patch")
                yield key, path if isinstance(path, str) else None, patch if isinstance(patch, str) else None


def _hint(folder: Path) -> str:
    return (
        f"  hint: kustomize merges patches into the resources they target, so a patch cannot carry the "
        f"ResourceClaimTemplate a claim needs: migrate what kustomize builds (kustomize build {folder} | "
        "kdra migrate -), or migrate the base and drop the request from the patch"
    )


def patch_files(kustomization: Path) -> set[Path]:
    """The files a kustomization uses as patches."""
    from kdra.api.load import load_documents
    from kdra.errors import InputError

    try:
        docs = load_documents(kustomization.read_text(encoding="utf-8"), str(kustomization))
    except (OSError, UnicodeDecodeError, InputError):
        return set()
    return {
        (kustomization.parent / path).resolve()
        for doc in docs
        for _, path, _ in _patches(doc)
        if path is not None
    }


def problems(kustomization: Path) -> list[str]:
    """One entry per patch of `kustomization` that sets an accelerator request (inline or in its file)."""
    from kdra.api.load import load_documents
    from kdra.errors import InputError

    try:
        text = kustomization.read_text(encoding="utf-8")
        docs = load_documents(text, str(kustomization))
    except (OSError, UnicodeDecodeError, InputError):
        return []
    out: list[str] = []
    folder = kustomization.parent
    for doc in docs:
        for key, path, patch in _patches(doc):
            if patch is not None and _names_request(patch):
                first = patch.strip().splitlines()[0]
                at = text.find(first)
                line = text[:at].count("\n") + 1 if at >= 0 else 1
                out.append(
                    f"{kustomization}:{line}: an inline kustomize patch ({key}) sets an accelerator request"
                    f"\n{_hint(folder)}"
                )
            if path is not None:
                file = folder / path
                try:
                    body = file.read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError):
                    continue
                if _names_request(body):
                    lines = body.replace("~1", "/").splitlines()
                    line = next((i for i, t in enumerate(lines, 1) if res.LEGACY_PATTERN.search(t)), 1)
                    out.append(
                        f"{file}:{line}: a kustomize patch ({key} of {kustomization}) sets an accelerator "
                        f"request\n{_hint(folder)}"
                    )
    return out


__all__ = ["KUSTOMIZATION_FILES", "kustomization_of", "patch_files", "problems"]
