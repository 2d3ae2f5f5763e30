"""Pieces of the migration: document splitting, styles, names, selectors, and pod-level rules."""

from __future__ import annotations

import io
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kdra.migrate import Options, migrate_text
from kdra.migrate.context import TakenNames, free_name
from kdra.migrate.documents import bodies_mentioning, iter_chunks, split_documents
from kdra.migrate.edits import Editor, Style, guess_style
from kdra.migrate.nodes import compose, get, get_path
from kdra.migrate.resources import classify, product_expression, whole_number
from kdra.migrate.scan import patch_requests

# A whole GPU is never a share (kdra.api.whole).
EXCLUSIVE = {"cel": {"expression": "!device.allowMultipleAllocations"}}


def _migrate(text: str, **options: Any) -> tuple[str, list[dict[str, Any]], Any]:
    result = migrate_text(text, "t.yaml", Options(**options))
    assert not result.report.failed, result.report.invalid + result.report.blocked
    return result.text, [d for d in yaml.safe_load_all(io.StringIO(result.text)) if d], result.report


def _pod(containers: str, spec_extra: str = "", name: str = "p") -> str:
    return f"apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n{spec_extra}{containers}"


def _requests(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    (template,) = [o for o in objs if o["kind"] == "ResourceClaimTemplate"]
    requests: list[dict[str, Any]] = template["spec"]["spec"]["devices"]["requests"]
    return requests


# -- splitting and styles ------------------------------------------------------------------------------------

LINES = st.sampled_from(
    [
        "---",
        "--- # c",
        "...",
        "# Source: x/y.yaml",
        "",
        "  ",
        "a: 1",
        "b:",
        "  - c",
        "kind: Pod",
        "x: |",
        "  ---",
    ]
)


# Property tests run on a loaded shared machine: generation may be slow there, which says nothing about kdra.
ROBUST = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


@ROBUST
@given(st.lists(LINES, max_size=30), st.booleans())
def test_split_is_lossless(lines: list[str], final_newline: bool) -> None:
    text = "\n".join(lines) + ("\n" if final_newline else "")
    assert "".join(chunk.text for chunk in split_documents(text)) == text


@ROBUST
@given(
    st.lists(
        st.sampled_from(["", "  ", "# c", "---", "--- # c", "...", "%YAML 1.2", "a: 1", "  b"]), max_size=12
    )
)
def test_chunk_cuts_head_and_tail_as_the_lines_would(lines: list[str]) -> None:
    """_chunk finds head and tail from the ends; where \n is the only line break that is what the lines of
    str.splitlines give (the other breaks take that path)."""
    from kdra.migrate.documents import _chunk, _chunk_of_lines

    for end in ("", "\n"):
        text = "\n".join(lines) + end
        assert _chunk(text, 3, 2) == _chunk_of_lines(text, 3, 2)
    crlf = "\r\n".join(lines) + "\r\n"
    assert _chunk(crlf, 0, 1).text == crlf


@ROBUST
@given(st.lists(LINES, max_size=30), st.booleans(), st.lists(st.integers(1, 40), max_size=20))
def test_split_is_the_same_however_the_text_is_read(
    lines: list[str], final_newline: bool, cuts: list[int]
) -> None:
    """Files are read in blocks that end anywhere (inside a `---`, between \r and \n): the chunks must be
    those of the whole text, and the second pass's bodies those of the chunks that mention the word."""
    text = "\n".join(lines) + ("\n" if final_newline else "")
    pieces, at = [], 0
    for cut in cuts:
        pieces.append(text[at : at + cut])
        at += cut
    pieces.append(text[at:])
    whole = split_documents(text)
    assert list(iter_chunks(pieces)) == whole
    expected = [c.body for c in whole if "kind" in c.text]
    assert list(bodies_mentioning(pieces, ("kind",))) == expected


def test_split_keeps_helm_source_comments_with_their_document() -> None:
    text = "---\n# Source: a.yaml\nkind: A\n---\n# Source: b.yaml\nkind: B\n# trailing\n"
    chunks = split_documents(text)
    assert [c.body for c in chunks] == ["kind: A\n", "kind: B\n"]
    assert chunks[1].head == "---\n# Source: b.yaml\n"
    assert chunks[1].tail == "# trailing\n"
    assert chunks[1].line == 6


@pytest.mark.parametrize(
    ("text", "style"),
    [
        ("a:\n  b:\n  - c\n", Style(2, 0)),
        ("a:\n  b:\n    - c\n", Style(2, 2)),
        ("a:\n    b:\n        - c\n", Style(4, 4)),
        ("a: 1\n", Style(2, 0)),
    ],
)
def test_guess_style(text: str, style: Style) -> None:
    assert guess_style(text) == style


def test_editor_deletes_block_and_flow_entries_and_keeps_the_rest() -> None:
    text = (
        "a:\n  keep: 1   # c\n  # about gone\n  gone: 2\n  last: 3\nb: {x: 1, gone: 2, y: 3}\nc: {gone: 1}\n"
    )
    root = compose(text)
    editor = Editor(text, Style())
    editor.delete(get(root, "a"), "gone")
    editor.delete(get(root, "b"), "gone")
    editor.delete(get(root, "c"), "gone")
    assert editor.render() == "a:\n  keep: 1   # c\n  # about gone\n  last: 3\nb: {x: 1, y: 3}\nc: {}\n"


def test_editor_adds_in_the_style_around_it() -> None:
    text = "spec:\n    containers:\n      - name: a\n    flow: {x: 1}\n"
    root = compose(text)
    editor = Editor(text, Style(mapping=4, offset=2))
    editor.add(get(root, "spec"), "resourceClaims", [{"name": "gpu", "resourceClaimTemplateName": "t"}])
    editor.add(get_path(root, "spec", "flow"), "y", [1, "two words"])
    editor.append(get_path(root, "spec", "containers"), {"name": "b"})
    assert editor.render() == (
        "spec:\n    containers:\n      - name: a\n      - name: b\n    flow: {x: 1, y: [1, two words]}\n"
        "    resourceClaims:\n      - name: gpu\n        resourceClaimTemplateName: t\n"
    )


def test_editor_deletes_the_first_key_of_a_sequence_item() -> None:
    text = "- limits: {x: 1}\n  name: a\n- name: b\n"
    root = compose(text)
    editor = Editor(text, Style())
    editor.delete(root.value[0], "limits")
    assert editor.render() == "- name: a\n- name: b\n"


def test_editor_quotes_what_would_read_as_something_else() -> None:
    text = "m: {}\n"
    editor = Editor(text, Style())
    editor.add(compose(text).value[0][1], "k", "1")
    editor.add(compose(text).value[0][1], "t", "true")
    out = Editor(text, Style())
    root = compose(text)
    out.add(root.value[0][1], "n", "4")
    assert yaml.safe_load(out.render()) == {"m": {"n": "4"}}
    block = Editor("a:\n  b: 1\n", Style())
    root = compose(block.body)
    block.add(get(root, "a"), "e", "x: y")
    block.add(get(root, "a"), "f", "yes")
    block.add(get(root, "a"), "g", "device.attributes['d'].productName in ['A', 'B']")
    rendered = block.render()
    assert yaml.safe_load(rendered) == {
        "a": {"b": 1, "e": "x: y", "f": "yes", "g": "device.attributes['d'].productName in ['A', 'B']"}
    }
    assert "g: device.attributes['d'].productName in ['A', 'B']\n" in rendered  # plain when it can be


# -- names and selectors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "kind", "profile"),
    [
        ("nvidia.com/gpu", "gpu", ""),
        ("nvidia.com/mig-1g.10gb", "mig", "1g.10gb"),
        ("nvidia.com/mig-1g.10gb.me", "mig", "1g.10gb+me"),
        ("nvidia.com/mig-7g.80gb", "mig", "7g.80gb"),
        ("amd.com/gpu", "amd", ""),
        ("google.com/tpu", "tpu", ""),
        ("nvidia.com/gpumem", "hami-memory", ""),
        ("nvidia.com/gpumem-percentage", "hami-memory-percent", ""),
        ("nvidia.com/gpucores", "hami-cores", ""),
        ("nvidia.com/gpu.shared", "shared", ""),
        ("gpu.intel.com/i915", "intel", ""),
    ],
)
def test_classify(name: str, kind: str, profile: str) -> None:
    legacy = classify(name)
    assert legacy is not None and (legacy.kind, legacy.profile) == (kind, profile)


@pytest.mark.parametrize(
    "name", ["nvidia.com/priority", "cpu", "rdma/hca", "nvidia.com/gpux", "gpu.intel.com/millicores"]
)
def test_classify_ignores_the_rest(name: str) -> None:
    assert classify(name) is None


@pytest.mark.parametrize(
    ("name", "instance"),
    [
        ("nvidia.com/mig-1c.3g.40gb", "nvidia.com/mig-3g.40gb"),
        ("nvidia.com/mig-2c.4g.20gb", "nvidia.com/mig-4g.20gb"),
        ("nvidia.com/mig-1c.7g.80gb.me", "nvidia.com/mig-7g.80gb.me"),
    ],
)
@pytest.mark.parametrize("mode", ["claims", "extended-resource"])
def test_a_mig_compute_instance_is_refused_with_its_gpu_instance_named(
    name: str, instance: str, mode: str
) -> None:
    """NVIDIA's DRA driver publishes no MIG device whose compute instance is smaller than its GPU instance
    (nvlib.go skips C != G profiles): neither a claim nor a KEP-5004 class can serve it. It was 'no DRA
    DeviceClass is known', with a hint to write a claim by hand, which cannot exist either."""
    text = _pod(
        f"  containers:\n  - name: c\n    image: x\n    resources:\n      limits:\n        {name}: 1\n"
    )
    result = migrate_text(text, "t.yaml", Options(mode=mode))
    (message,) = list(result.report.blocked)
    assert result.text == text
    assert f"{name} is a MIG compute instance" in message
    assert "no DRA DeviceClass" not in message
    assert f"request the whole GPU instance ({instance}," in message
    assert classify(name) is None


def test_product_expression_rewrites_the_attribute_not_the_label() -> None:
    # GFD turns 'NVIDIA A100-SXM4-80GB' into 'NVIDIA-A100-SXM4-80GB', not invertible: rewrite the attribute.
    expr = product_expression(
        "gpu.nvidia.com", "nvidia.com/gpu.product", "In", ["NVIDIA-A100-SXM4-80GB-SHARED"]
    )
    assert (
        expr == "device.attributes['gpu.nvidia.com'].productName.replace(' ', '-') == 'NVIDIA-A100-SXM4-80GB'"
    )
    expr = product_expression("gpu.nvidia.com", "nvidia.com/gpu.product", "NotIn", ["A", "B"])
    assert expr == "!(device.attributes['gpu.nvidia.com'].productName.replace(' ', '-') in ['A', 'B'])"
    assert (
        product_expression("gpu.nvidia.com", "cloud.google.com/gke-accelerator", "In", ["nvidia-tesla-zz"])
        is None
    )


# -- pod-level rules -----------------------------------------------------------------------------------------


def test_regular_init_reuses_an_app_request_but_not_an_earlier_sidecar() -> None:
    text = _pod(
        "  initContainers:\n"
        "  - {name: side, image: s, restartPolicy: Always, resources: {limits: {nvidia.com/gpu: 1}}}\n"
        "  - {name: warm, image: w, resources: {limits: {nvidia.com/gpu: 1}}}\n"
        "  - {name: warm2, image: w, resources: {limits: {nvidia.com/gpu: 2}}}\n"
        "  containers:\n"
        "  - {name: app, image: a, resources: {limits: {nvidia.com/gpu: 1}}}\n"
    )
    _, objs, _ = _migrate(text)
    pod = objs[0]
    refs = {
        c["name"]: [r["request"] for r in c["resources"]["claims"]]
        for c in pod["spec"]["initContainers"] + pod["spec"]["containers"]
    }
    # warm runs while side is running, so it may not share side's GPU; app starts after warm finished. warm2
    # needs one more than app has: that one is its own, so the pod holds max(init + side, app + side) = 3.
    assert refs == {"side": ["side"], "warm": ["app"], "warm2": ["app", "warm2"], "app": ["app"]}
    assert [(r["name"], r["exactly"]["count"]) for r in _requests(objs)] == [
        ("side", 1),
        ("app", 1),
        ("warm2", 1),
    ]


def test_two_inits_in_a_row_share_one_request() -> None:
    text = _pod(
        "  initContainers:\n"
        "  - {name: a, image: x, resources: {limits: {nvidia.com/gpu: 1}}}\n"
        "  - {name: b, image: x, resources: {limits: {nvidia.com/gpu: 1}}}\n"
        "  containers:\n  - {name: main, image: x}\n"
    )
    _, objs, _ = _migrate(text)
    assert [r["name"] for r in _requests(objs)] == ["a"]
    assert objs[0]["spec"]["initContainers"][1]["resources"]["claims"] == [{"name": "gpu", "request": "a"}]


def test_zero_gpu_is_removed_without_a_claim() -> None:
    text = _pod(
        "  containers:\n  - name: c\n    image: x\n    resources:\n      limits:\n        nvidia.com/gpu: 0\n"
    )
    out, objs, report = _migrate(text)
    assert [o["kind"] for o in objs] == ["Pod"]
    assert "resources: {}" not in out and "nvidia.com/gpu" not in out
    assert "removed zero requests nvidia.com/gpu" in report.changes[0]


def test_names_do_not_collide_with_existing_claims_and_templates() -> None:
    text = (
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {name: p-gpu}\n"
        "spec: {spec: {devices: {requests: [{name: r, exactly: {deviceClassName: x}}]}}}\n---\n"
        + _pod(
            "  resourceClaims:\n  - {name: gpu, resourceClaimTemplateName: p-gpu}\n"
            "  containers:\n  - name: c\n    image: x\n    resources:\n"
            "      claims: [{name: gpu, request: r}]\n      limits: {nvidia.com/gpu: 1}\n"
        )
    )
    _, objs, _ = _migrate(text)
    pod = objs[1]
    assert pod["spec"]["resourceClaims"][1] == {"name": "gpu-2", "resourceClaimTemplateName": "p-gpu-2"}
    assert pod["spec"]["containers"][0]["resources"]["claims"][1] == {"name": "gpu-2", "request": "c"}
    assert objs[2]["metadata"]["name"] == "p-gpu-2"


def test_affinity_terms_that_differ_are_left_alone_with_a_warning() -> None:
    affinity = (
        "  affinity:\n    nodeAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n"
        "        nodeSelectorTerms:\n"
        "        - matchExpressions: [{key: nvidia.com/gpu.product, operator: In, values: [A]}]\n"
        "        - matchExpressions: [{key: nvidia.com/gpu.product, operator: In, values: [B]}]\n"
    )
    text = _pod(
        "  containers:\n  - {name: c, image: x, resources: {limits: {nvidia.com/gpu: 1}}}\n", affinity
    )
    out, objs, report = _migrate(text)
    assert "values: [A]" in out and "values: [B]" in out
    assert _requests(objs)[0]["exactly"]["selectors"] == [EXCLUSIVE]  # whole GPUs, no product choice
    assert any("node affinity on GPU product labels left as is" in w for w in report.warnings)


def test_identical_affinity_terms_move_into_the_claim() -> None:
    affinity = (
        "  affinity:\n    nodeAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n"
        "        nodeSelectorTerms:\n"
        "        - matchExpressions:\n"
        "          - {key: nvidia.com/gpu.product, operator: NotIn, values: [Tesla-T4]}\n"
        "          - {key: zone, operator: In, values: [a]}\n"
        "        - matchExpressions:\n"
        "          - {key: nvidia.com/gpu.product, operator: NotIn, values: [Tesla-T4]}\n"
        "          - {key: zone, operator: In, values: [b]}\n"
    )
    text = _pod(
        "  containers:\n  - {name: c, image: x, resources: {limits: {nvidia.com/gpu: 1}}}\n", affinity
    )
    _, objs, _ = _migrate(text)
    terms = objs[0]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
    ]
    assert _requests(objs)[0]["exactly"]["selectors"] == [
        {
            "cel": {
                "expression": "device.attributes['gpu.nvidia.com'].productName.replace(' ', '-') "
                "!= 'Tesla-T4'"
            }
        },
        EXCLUSIVE,
    ]


def test_product_selector_stays_when_no_nvidia_device_is_requested() -> None:
    text = _pod(
        "  containers:\n  - {name: c, image: x, resources: {limits: {amd.com/gpu: 1}}}\n",
        "  nodeSelector: {nvidia.com/gpu.product: X}\n",
    )
    out, objs, _ = _migrate(text)
    assert "nodeSelector: {nvidia.com/gpu.product: X}" in out
    assert _requests(objs)[0]["exactly"] == {"deviceClassName": "gpu.amd.com", "count": 1}


def test_unknown_gke_accelerator_is_warned_about_and_a_time_slice_is_a_share() -> None:
    text = _pod(
        "  containers:\n  - {name: c, image: x, resources:\n"
        "      {limits: {nvidia.com/gpu: 1, nvidia.com/gpu.shared: 1}}}\n",
        "  nodeSelector: {cloud.google.com/gke-accelerator: nvidia-future-x}\n",
    )
    out, objs, report = _migrate(text)
    assert "nvidia.com/gpu" not in out.split("kind: ResourceClaimTemplate")[0].replace(
        "key: nvidia.com/gpu", ""
    )
    assert "nvidia-future-x" in out
    assert len(report.warnings) == 1
    exactly = [r["exactly"] for r in _requests(objs)]
    assert exactly == [
        {"deviceClassName": "gpu.nvidia.com", "count": 1, "selectors": [EXCLUSIVE]},
        {
            "deviceClassName": "gpu.nvidia.com",
            "count": 1,
            "selectors": [{"cel": {"expression": "device.allowMultipleAllocations"}}],
        },
    ]


def test_hami_without_count_means_one_gpu() -> None:
    text = _pod("  containers:\n  - {name: c, image: x, resources: {limits: {nvidia.com/gpumem: 4000}}}\n")
    _, objs, _ = _migrate(text)
    assert _requests(objs)[0]["exactly"] == {
        "deviceClassName": "hami-core-gpu.project-hami.io",
        "count": 1,
        "capacity": {"requests": {"memory": "4000Mi"}},
    }


def test_mig_and_full_gpu_in_one_container_are_two_requests() -> None:
    text = _pod(
        "  containers:\n  - {name: c, image: x, resources:\n"
        "      {limits: {nvidia.com/gpu: 1, nvidia.com/mig-1g.5gb: 2}}}\n"
    )
    _, objs, _ = _migrate(text)
    assert [(r["name"], r["exactly"]["deviceClassName"], r["exactly"]["count"]) for r in _requests(objs)] == [
        ("c-gpu", "gpu.nvidia.com", 1),
        ("c-mig-1g5gb", "mig.nvidia.com", 2),
    ]


def test_json_style_flow_document_is_migrated() -> None:
    text = (
        '{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "j"}, "spec": {"containers": '
        '[{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}\n'
    )
    _, objs, _ = _migrate(text)
    assert objs[0]["kind"] == "List"  # one JSON object: the pod and its new template, still JSON
    pod, template = objs[0]["items"]
    assert pod["spec"]["containers"][0]["resources"] == {"claims": [{"name": "gpu", "request": "c"}]}
    assert template["kind"] == "ResourceClaimTemplate"


def test_generate_name_gives_the_template_name() -> None:
    text = (
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  generateName: sweep-\nspec:\n  template:\n    spec:\n"
        "      containers:\n      - {name: c, image: x, resources: {limits: {nvidia.com/gpu: 1}}}\n"
    )
    _, objs, _ = _migrate(text)
    assert objs[1]["metadata"] == {"name": "sweep-gpu"}


def test_crlf_files_keep_their_line_endings() -> None:
    text = _pod(
        "  containers:\n  - name: c  # main\n    image: x\n"
        "    resources:\n      limits: {nvidia.com/gpu: 1}\n"
    )
    text = ("# windows\n" + text).replace("\n", "\r\n")
    result = migrate_text(text, "t.yaml", Options())
    assert result.changed
    assert "\n" not in result.text.replace("\r\n", "")
    assert "  - name: c  # main\r\n" in result.text


def test_merge_keys_and_anchors_survive() -> None:
    text = (
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n  template:\n    spec:\n"
        "      containers:\n      - &base\n        name: a\n        image: x\n"
        "        resources: {limits: {nvidia.com/gpu: 1}}\n"
    )
    out, objs, _ = _migrate(text)
    assert "&base" in out
    assert objs[0]["spec"]["template"]["spec"]["containers"][0]["resources"]["claims"] == [
        {"name": "gpu", "request": "a"}
    ]


def test_resources_shared_through_an_alias_are_refused() -> None:
    text = _pod(
        "  containers:\n  - name: a\n    image: x\n    resources: &gpu\n      limits: {nvidia.com/gpu: 1}\n"
        "  - name: b\n    image: x\n    resources: *gpu\n"
    )
    result = migrate_text(text, "t.yaml", Options())
    assert result.text == text
    (error,) = result.report.blocked
    assert "spec.containers[1].resources (line 13): shares its resources with container 'a'" in error


@pytest.mark.parametrize(
    "containers",
    [
        # the name is an alias of a string elsewhere: its node lies at the anchor, so an edit there broke
        # the document ('internal error: the edited document does not parse')
        "  - name: a\n    image: x\n    env: [{name: R, value: &r nvidia.com/gpu}]\n"
        "    resources:\n      limits:\n        *r : 2\n",
        # the name carries the anchor another container's key uses
        "  - name: a\n    image: x\n    resources:\n      limits:\n        &r nvidia.com/gpu: 1\n"
        "  - name: b\n    image: x\n    resources:\n      limits:\n        *r : 1\n",
    ],
)
def test_a_resource_name_written_through_an_anchor_is_refused(containers: str) -> None:
    text = _pod("  containers:\n" + containers)
    result = migrate_text(text, "t.yaml", Options())
    assert result.text == text and not result.report.invalid
    assert result.report.blocked
    assert all("is a YAML anchor or alias" in error for error in result.report.blocked)


def test_a_count_carrying_an_anchor_is_refused() -> None:
    # removing `nvidia.com/gpu: &n "2"` removed the anchor `value: *n` uses: the output did not parse
    text = _pod(
        "  containers:\n  - name: a\n    image: x\n    resources:\n      limits:\n"
        '        nvidia.com/gpu: &n "2"\n'
        "    env:\n    - name: WORLD\n      value: *n\n"
    )
    result = migrate_text(text, "t.yaml", Options())
    assert result.text == text
    (error,) = result.report.blocked
    assert "the count of nvidia.com/gpu is a YAML anchor" in error


def test_an_anchor_on_a_moved_node_selector_is_not_lost() -> None:
    # the product label moves into the claim and its nodeSelector goes, with the anchor an env entry aliases:
    # the output had an undefined alias (exit 0)
    text = _pod(
        "  containers:\n  - name: c\n    image: x\n    env: [{name: PRODUCT, value: *p}]\n"
        "    resources: {limits: {nvidia.com/gpu: 1}}\n",
        spec_extra="  nodeSelector:\n    nvidia.com/gpu.product: &p NVIDIA-H100-80GB-HBM3\n",
    )
    result = migrate_text(text, "t.yaml", Options())
    assert result.text == text
    (error,) = result.report.blocked
    assert "t.yaml:7: document 1: the YAML anchor &p is on a request or node selection" in error


def test_a_device_in_an_ephemeral_container_is_invalid() -> None:
    # was "not in a pod spec kdra knows for Pod" with a hint to add --kind Pod=<path>
    text = _pod(
        "  containers:\n  - {name: c, image: x, resources: {limits: {nvidia.com/gpu: 1}}}\n"
        "  ephemeralContainers:\n  - {name: debug, image: x, resources: {limits: {nvidia.com/gpu: 1}}}\n"
    )
    result = migrate_text(text, "t.yaml", Options())
    assert result.text == text
    (error,) = result.report.invalid
    assert 'spec.ephemeralContainers[0].resources.limits["nvidia.com/gpu"] (line 9)' in error
    assert "cannot be set for an Ephemeral Container" in error


@pytest.mark.parametrize(
    ("patch", "names"),
    [
        (
            '{"containers":[{"name":"main","resources":{"limits":{"nvidia.com/gpu":"{{x}}"}}}]}',
            ["nvidia.com/gpu"],
        ),
        (
            "containers:\n- name: main\n  resources: {limits: {amd.com/gpu: {{inputs.parameters.n}}}}\n",
            ["amd.com/gpu"],
        ),
        ("nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}\n", []),
        ('{"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t-gpu"}]}', []),
    ],
)
def test_requests_in_an_argo_pod_spec_patch_are_found(patch: str, names: list[str]) -> None:
    assert patch_requests(patch) == names


def test_a_duplicate_request_key_is_reported_once() -> None:
    # the duplicate was followed by both keys again as requests "not in a pod spec kdra knows for Pod"
    text = _pod(
        "  containers:\n  - name: c\n    image: x\n    resources:\n      limits:\n"
        "        nvidia.com/gpu: 1\n        nvidia.com/gpu: 2\n      requests:\n        nvidia.com/gpu: 1\n"
    )
    result = migrate_text(text, "t.yaml", Options())
    assert result.text == text and not result.report.blocked
    (error,) = result.report.invalid
    assert "duplicate key 'nvidia.com/gpu'" in error


def test_templates_shared_through_an_alias_share_the_claim_template() -> None:
    text = (
        "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: j}\nspec:\n  pytorchReplicaSpecs:\n"
        "    Master:\n      template: &tpl\n        spec:\n          containers:\n"
        "          - {name: pytorch, image: x, resources: {limits: {nvidia.com/gpu: 8}}}\n"
        "    Worker:\n      replicas: 2\n      template: *tpl\n"
    )
    out, objs, _ = _migrate(text)
    assert "template: *tpl" in out
    replicas = objs[0]["spec"]["pytorchReplicaSpecs"]
    assert replicas["Worker"]["template"] == replicas["Master"]["template"]
    assert [o["metadata"]["name"] for o in objs[1:]] == ["j-master-gpu"]


@pytest.mark.parametrize(
    "text",
    ["yes", "No", "OFF", "on", "true", "nope", "tensorflow", "Norway", "offline", "1", "0x1f", "-1", "t"],
)
def test_text_of_reads_plain_scalars_as_a_safe_load_does(text: str) -> None:
    # text_of decides most plain scalars without the resolver; it must agree with it on every word
    from kdra.migrate.nodes import text_of

    value = yaml.safe_load(f"k: {text}")["k"]
    expected = ("true" if value else "false") if isinstance(value, bool) else str(value)
    assert text_of(get(compose(f"k: {text}"), "k")) == expected


@pytest.mark.parametrize("text", ["0", "7", "42", "010", "0o7", "1_000", "0x1f", "+3", "٣", "1e3", "2.0"])
def test_scalar_reads_numbers_as_a_safe_load_does(text: str) -> None:
    from kdra.migrate.nodes import scalar

    assert scalar(get(compose(f"k: {text}"), "k")) == yaml.safe_load(f"k: {text}")["k"]


@given(
    st.lists(
        st.tuples(st.sampled_from(["train-gpu", "serve-gpu", "train-gpu-2", "x" * 60]), st.booleans()),
        max_size=60,
    )
)
def test_taken_names_give_the_first_free_name_as_a_full_search_does(wants: list[tuple[str, bool]]) -> None:
    """The remembered numbers never skip a free name, also when other names are taken in between."""
    taken = TakenNames(set())
    for name, take_exact in wants:
        if take_exact:  # a name taken as is (pass 1, another template), not through free()
            taken.names.add(name)
            continue
        expected = free_name(name, set(taken.names), 63)
        assert taken.free(name, 63) == expected
        taken.names.add(expected)


@pytest.mark.parametrize(
    ("raw", "count"),
    [
        (2, 2),
        ("2", 2),
        (2.0, 2),
        ("2.0", 2),
        ("2000m", 2),
        ("1k", 1000),
        ("1G", 10**9),
        ("1Gi", 2**30),
        ("1e3", 1000),
        (" 3 ", 3),
        ("1.5", None),
        ("500m", None),
        ("-1", None),
        (-1, None),
        (True, None),
        (None, None),
        ("abc", None),
    ],
)
def test_a_count_is_any_whole_quantity_as_the_api_server_reads_it(raw: object, count: int | None) -> None:
    # Kubernetes accepts an extended resource's quantity when its value is whole (MilliValue % 1000 == 0),
    # suffix or not: `gpu.intel.com/memory.max: 1G` is a valid request, not a fraction.
    assert whole_number(raw) == count


def test_a_limit_range_item_reached_through_an_alias_is_reported_once() -> None:
    text = (
        "apiVersion: v1\nkind: LimitRange\nmetadata: {name: x}\nspec:\n  limits:\n"
        "  - &a {type: Container, max: {nvidia.com/gpu: 2}}\n  - *a\n"
        "  - {type: Container, default: {amd.com/gpu: 1}}\n"
    )
    result = migrate_text(text, "t.yaml", Options())
    assert len(result.report.warnings) == 1 and "max" in result.report.warnings[0]
    assert len(result.report.blocked) == 1 and "default" in result.report.blocked[0]


@pytest.mark.parametrize(
    ("name", "left_as_is"),
    [
        ("nvidia.com/hostdev", True),  # the network operator's host-device plugin
        ("nvidia.com/rdma_shared_device_a", True),
        ("nvidia.com/mlnx_sriov_rdma", True),  # an SR-IOV pool, named by the cluster
        ("nvidia.com/shared-a100", False),  # may be a GPU renamed by the device plugin's sharing config
        ("nvidia.com/gpu-nic", False),  # says gpu: never taken for a NIC
    ],
)
def test_nvidia_nics_stay_with_their_plugins_and_unknown_names_stay_refused(
    name: str, left_as_is: bool
) -> None:
    """A training Job asking for the network operator's NICs beside its GPUs was refused whole ("no DRA
    DeviceClass is known for nvidia.com/hostdev"): the GPUs now convert and the NICs stay, with a warning."""
    limits = f"        nvidia.com/gpu: 1\n        {name}: 1\n"
    text = _pod(f"  containers:\n  - name: c\n    image: i\n    resources:\n      limits:\n{limits}")
    result = migrate_text(text, "t.yaml", Options())
    if left_as_is:
        assert not result.report.failed
        assert any(name in w and "left as is" in w for w in result.report.warnings)
        (pod,) = [o for o in yaml.safe_load_all(io.StringIO(result.text)) if o and o["kind"] == "Pod"]
        assert pod["spec"]["containers"][0]["resources"]["limits"] == {name: 1}
    else:
        assert any(f"no DRA DeviceClass is known for {name}" in b for b in result.report.blocked)
