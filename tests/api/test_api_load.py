"""Loading and dumping: multi-document YAML, JSON, `kind: List`; clear errors for malformed input;
dump -> load loses nothing."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from kdra.api.load import _Loader, dump_json, dump_yaml, load_paths, load_text
from kdra.api.types import kind_of, name_of, namespace_of, object_ref
from kdra.errors import InputError

_REPO = Path(__file__).resolve().parents[2]
SHARED = next(
    (p for p in (_REPO / "shared", _REPO.parent / "shared", Path("/work/shared")) if p.is_dir()),
    _REPO.parent / "shared",
)

CLAIM = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: c1
  creationTimestamp: 2024-05-01T10:00:00Z
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: gpu.example.com
futureField:
  keep: me
"""


def test_multi_document_yaml() -> None:
    text = "# leading comment\n---\n" + CLAIM + "---\n---\n" + CLAIM.replace("c1", "c2") + "---\n"
    objs = load_text(text, "claims.yaml")
    assert [name_of(o) for o in objs] == ["c1", "c2"]
    # timestamps stay strings (a datetime would not survive a JSON dump); unknown fields survive
    assert objs[0]["metadata"]["creationTimestamp"] == "2024-05-01T10:00:00Z"
    assert objs[0]["futureField"] == {"keep": "me"}


def test_yaml_merge_keys_are_not_duplicates() -> None:
    text = "apiVersion: v1\nkind: X\nbase: &b {x: 1, y: 1}\nm:\n  <<: *b\n  x: 2\n"
    assert load_text(text, "m.yaml")[0]["m"] == {"x": 2, "y": 1}


def test_yaml_flow_mapping_is_not_mistaken_for_json() -> None:
    assert load_text("{apiVersion: v1, kind: Node, metadata: {name: n}}", "n.yaml")[0]["kind"] == "Node"


def test_kubectl_list_is_flattened() -> None:
    items = yaml.safe_load(CLAIM)
    text = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [items, items], "metadata": {}})
    objs = load_text(text, "dump.yaml")
    assert [kind_of(o) for o in objs] == ["ResourceClaim", "ResourceClaim"]


def test_typed_list_items_get_kind() -> None:
    text = json.dumps(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimList",
            "items": [{"metadata": {"name": "a"}}],
        }
    )
    (obj,) = load_text(text, "api.json")
    assert obj["kind"] == "ResourceClaim"
    assert obj["apiVersion"] == "resource.k8s.io/v1"


def test_json_object_and_array() -> None:
    one = json.dumps(yaml.safe_load(CLAIM.replace("2024-05-01T10:00:00Z", "'x'")))
    assert name_of(load_text(one, "c.json")[0]) == "c1"
    assert len(load_text(f"[{one}, {one}]", "c.json")) == 2


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        (
            "apiVersion: v1\nkind: Pod\nmetadata: {name: [x\n",
            ["f.yaml", "document 1", "line", "invalid YAML"],
        ),
        ("apiVersion: v1\nkind: Pod\n---\nkey: [1, 2\n", ["f.yaml", "document 2", "line 5", "invalid YAML"]),
        ("apiVersion: v1\nkind: Pod\n---\n- a\n- b\n", ["f.yaml", "document 2 (line 3)", "got a list"]),
        ("just a string\n", ["document 1", "got a string"]),
        ("kind: Pod\nmetadata: {}\n", ["document 1", "missing apiVersion"]),
        ("apiVersion: v1\nmetadata: {}\n", ["document 1", "missing kind"]),
        ("apiVersion: v1\nkind: [Pod]\n", ["kind must be a string"]),
        ("apiVersion: v1\nkind: List\nitems: 3\n", ["items must be a list"]),
        ("apiVersion: v1\nkind: List\nitems: [3]\n", ["items[0]", "got a number"]),
        ('{"apiVersion": "v1", "kind": ', ["f.yaml", "line 1", "invalid JSON"]),
        ("\tapiVersion: v1\n", ["invalid YAML"]),
        ("a: 1\na: *unknown\n", ["invalid YAML"]),
        ("? [a, b]\n: 1\n", ["invalid YAML"]),
        ("apiVersion: v1\nkind: X\nb: !!binary aGVsbG8=\n", ["line 3", "binary tag is not allowed"]),
        ("apiVersion: v1\nkind: X\nb: !custom x\n", ["invalid YAML"]),
        (
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n  name: b\n",
            ["line 5", "found duplicate key 'name'"],
        ),
        # ObjectMeta's types, as the API server decodes them (a crash in simulate once).
        ("apiVersion: v1\nkind: Pod\nmetadata: [a]\n", ["document 1", "metadata must be a mapping"]),
        (
            "apiVersion: v1\nkind: Pod\nmetadata: {name: {a: 1}}\n",
            ["metadata.name must be a string, got a mapping"],
        ),
        (
            "apiVersion: v1\nkind: Pod\nmetadata: {name: a, namespace: [b]}\n",
            ["metadata.namespace", "got a list"],
        ),
        (
            "apiVersion: v1\nkind: Pod\nmetadata: {name: a, labels: [b]}\n",
            ["metadata.labels must be a mapping"],
        ),
        (
            "apiVersion: v1\nkind: Node\nmetadata: {name: a, labels: {gpu: true}}\n",
            ["metadata.labels['gpu'] must be a string, got a boolean (quote it)"],
        ),
    ],
)
def test_malformed_input(text: str, fragments: list[str]) -> None:
    with pytest.raises(InputError) as e:
        load_text(text, "f.yaml")
    for frag in fragments:
        assert frag in str(e.value)


def test_load_paths_folder_stdin_and_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "2.yml").write_text(CLAIM.replace("c1", "c2"))
    (tmp_path / "1.yaml").write_text(CLAIM)
    (tmp_path / "notes.txt").write_text("not yaml: [")
    (tmp_path / "3.json").write_text(
        json.dumps({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}})
    )
    objs = load_paths([tmp_path])
    assert [name_of(o) for o in objs] == ["c1", "n", "c2"]

    monkeypatch.setattr(sys, "stdin", io.StringIO(CLAIM))
    assert name_of(load_paths(["-"])[0]) == "c1"

    with pytest.raises(InputError, match="no such file"):
        load_paths([tmp_path / "missing.yaml"])
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(b"apiVersion: v1\nkind: Pod\nmetadata: {name: \xe9}\n")
    with pytest.raises(InputError, match="not UTF-8"):
        load_paths([bad])
    broken = tmp_path / "broken.yaml"
    broken.write_text(CLAIM + "---\nfoo: [\n")
    with pytest.raises(InputError, match=r"broken\.yaml: document 2"):
        load_paths([broken])


def test_dump_yaml_style() -> None:
    objs = load_text(CLAIM, "c.yaml")
    out = dump_yaml(objs + objs)
    assert out.count("---\n") == 1
    assert out.startswith("apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata:\n")
    assert "    requests:\n    - name: gpu\n" in out  # kubectl's block style, lists not indented
    assert dump_yaml([]) == ""


def test_dump_yaml_quotes_what_yaml12_reads_as_numbers() -> None:
    obj = {"apiVersion": "v1", "kind": "X", "q": ["1e3", "1E6", "0x1F", "12", "1.5", "yes", "1Gi", ".inf"]}
    out = dump_yaml([obj])
    for s in ("'1e3'", "'1E6'", "'0x1F'", "'12'", "'1.5'", "'yes'", "'.inf'"):
        assert s in out
    assert "- 1Gi" in out
    assert load_text(out, "x") == [obj]


def test_dump_json() -> None:
    objs = load_text(CLAIM, "c.yaml")
    single = json.loads(dump_json(objs))
    assert single["kind"] == "ResourceClaim"
    several = json.loads(dump_json(objs + objs))
    assert several["kind"] == "List"
    assert several["apiVersion"] == "v1"
    assert len(several["items"]) == 2
    assert json.loads(dump_json([]))["items"] == []


def _corpus_files() -> list[Path]:
    files = sorted((SHARED / "reference" / "examples").glob("*.yaml"))
    files += sorted((_REPO / "tests" / "allocator" / "conformance" / "v1.36").glob("*.yaml"))[:40]
    return files


def test_round_trip_corpus_present() -> None:
    assert len(_corpus_files()) == 42, f"expected shared/ examples and conformance files under {SHARED}"


@pytest.mark.parametrize("path", _corpus_files(), ids=lambda p: p.stem)
def test_round_trip_corpus(path: Path) -> None:
    if "conformance" in str(path):
        doc = yaml.load(path.read_text(), Loader=_Loader)
        objs = doc.get("deviceClasses", []) + doc.get("resourceSlices", []) + doc.get("claims", [])
    else:
        objs = load_paths([path])
    assert load_text(dump_yaml(objs), "x.yaml") == objs
    assert load_text(dump_json(objs), "x.json") == objs


json_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
    st.sampled_from(
        ["1e3", "0x10", "yes", "null", "~", "2024-01-01", "1Gi", "-", "---", "a: b", "#x", "'q'"]
    ),
)
json_doc = st.recursive(
    json_scalar,
    lambda c: st.one_of(st.lists(c, max_size=4), st.dictionaries(st.text(max_size=8), c, max_size=4)),
    max_leaves=20,
)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text(max_size=8), json_doc, max_size=5))
def test_round_trip_any_fields(extra: dict[str, Any]) -> None:
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Thing", **extra}
    obj["apiVersion"], obj["kind"] = "v1", "Thing"
    assert load_text(dump_yaml([obj]), "x.yaml") == [obj]
    assert load_text(dump_json([obj]), "x.json") == [obj]


def test_accessors() -> None:
    (c,) = load_text(CLAIM, "c.yaml")
    assert object_ref(c) == "ResourceClaim default/c1"
    assert namespace_of(c) == "default"
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
    assert object_ref(node) == "Node n1"
    assert namespace_of(node) == ""
    assert object_ref({"kind": 3, "metadata": []}) == "<unknown kind> default/<unnamed>"
    assert name_of(None) == ""


_YAML_PIECES = [*"ab:-[]{}'\"\n #&*!|>?%@`,.0123 \t\\", "---\n", "kind: X\n", "apiVersion: v1\n", "  - "]
yamlish = st.lists(st.sampled_from(_YAML_PIECES), max_size=40).map("".join)


@settings(max_examples=400, deadline=None)
@given(yamlish)
def test_any_text_gives_objects_or_input_error(text: str) -> None:
    try:
        objs = load_text(text, "fuzz.yaml")
    except InputError as e:
        assert str(e).startswith("fuzz.yaml")
        return
    for obj in objs:
        assert isinstance(obj, dict) and obj["apiVersion"] and obj["kind"]


def test_dump_yaml_writes_no_anchors_for_shared_subdicts() -> None:
    shared = {"value": "80Gi"}
    objs = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": n}, "data": {"a": shared, "b": shared}}
        for n in ("x", "y")
    ]
    text = dump_yaml(objs)
    assert "&" not in text and "*id" not in text
    assert load_text(text, "dump") == objs
