"""What a new user relies on (issue 16): explanations that scale, pod constraints in `kdra allocate`, strict
input, CLI conventions, the views and the fleets, through the real entry point where a user would."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from kdra.cli.main import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "allocate"
DRIVER = "gpu.example.com"


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 2
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def dump(tmp_path: Path, objs: list[dict[str, Any]], name: str = "in.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(objs, sort_keys=False))
    return str(path)


def node(
    name: str, labels: dict[str, str] | None = None, taints: list[Any] | None = None, cpu: str = "16"
) -> Any:
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "status": {"allocatable": {"cpu": cpu, "memory": "64Gi", "pods": "110"}},
    }
    if taints:
        obj["spec"] = {"taints": taints}
    return obj


def gpu_slice(node_name: str, memories: list[str], driver: str = DRIVER) -> Any:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-{driver}"},
        "spec": {
            "driver": driver,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {"name": f"gpu-{i}", "capacity": {"memory": {"value": m}}} for i, m in enumerate(memories)
            ],
        },
    }


def device_class(driver: str = DRIVER) -> Any:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": driver},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
    }


def claim(
    name: str, count: int = 1, selectors: list[str] = (), allocated_on: tuple[str, str] | None = None
) -> Any:  # type: ignore[assignment]
    obj: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": DRIVER,
                            "count": count,
                            "selectors": [{"cel": {"expression": e}} for e in selectors],
                        },
                    }
                ]
            }
        },
    }
    if allocated_on is not None:
        n, dev = allocated_on
        obj["status"] = {
            "allocation": {
                "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": n, "device": dev}]},
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [n]}]}
                    ]
                },
            }
        }
    return obj


def pod(name: str, claim_name: str, **spec: Any) -> Any:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [
                {"name": "main", "image": "x", "resources": {"requests": {"cpu": spec.pop("cpu", "1")}}}
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim_name}],
            **spec,
        },
    }


BIG = 'device.capacity["gpu.example.com"].memory.compareTo(quantity("141Gi")) >= 0'


def fleet_of_40() -> list[Any]:
    """30 nodes of another vendor, 6 with 80Gi GPUs, 4 with two 141Gi GPUs of which one is in use."""
    objs: list[Any] = [device_class(), device_class("other.example.com")]
    for i in range(30):
        objs += [node(f"a-{i:02d}"), gpu_slice(f"a-{i:02d}", ["40Gi"] * 4, "other.example.com")]
    for i in range(6):
        objs += [node(f"b-{i}"), gpu_slice(f"b-{i}", ["80Gi"] * 8)]
    for i in range(4):
        objs += [
            node(f"c-{i}"),
            gpu_slice(f"c-{i}", ["141Gi", "141Gi"]),
            claim(f"used-{i}", allocated_on=(f"c-{i}", "gpu-0")),
        ]
    return objs


# ------------------------------------------------------------------------------ 1. explanations that scale


def test_summary_groups_nodes_by_reason_then_the_nearest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = dump(tmp_path, [*fleet_of_40(), claim("big", 2, [BIG])])
    code, out, err = run(["allocate", "-f", path, "-o", "json"], capsys)
    assert code == 1
    lines = err.splitlines()
    assert lines[0] == "claims default/big: cannot allocate all claims on any node"
    assert lines[1] == (
        "  0/40 nodes: 30 have no device of class gpu.example.com; "
        "6 fail selector #0 of request gpu (needs memory >= 141Gi; largest is 80Gi); "
        "4 have fewer than 2 free devices for request gpu, the rest in use (most free: 1)"
    )
    assert "nearest 3 nodes (of 40 that do not fit; --nodes N or -v shows more)" in lines[2]
    shown = [line.strip().split(":")[0] for line in lines if line.startswith("    node ")]
    assert shown == ["node c-0", "node c-1", "node c-2"]  # one device short: the nearest
    assert len(lines) < 30  # not one block per node
    listing = json.loads(out)
    failure = listing["explanation"]["unschedulable"][0]
    counts = {r["reason"]: r["count"] for r in failure["summary"]["reasons"]}
    assert sorted(counts.values()) == [4, 6, 30] and failure["summary"]["nodes"] == 40
    assert [n["node"] for n in failure["nodes"]] == ["c-0", "c-1", "c-2"]
    assert failure["nodes"][0]["details"]["requests"][0]["inUse"] == 1
    # --nodes N and -v
    _, _, err = run(["allocate", "-f", path, "--nodes", "1", "-o", "name"], capsys)
    assert sum(1 for line in err.splitlines() if line.startswith("    node ")) == 1
    _, _, err = run(["allocate", "-f", path, "-v", "-o", "name"], capsys)
    assert sum(1 for line in err.splitlines() if line.startswith("    node ")) == 40


def test_the_same_grouping_in_kubernetes_mode_messages() -> None:
    """The scheduler hands every node's verdict on (FitFailure); the Event is cut to the API's 1,024 bytes
    as kube-scheduler's truncateMessage does, the condition keeps kube-scheduler's first line."""
    from kdra.cluster.store import MemoryStore
    from kdra.kube.explain import EVENT_MESSAGE_LIMIT, unschedulable_messages
    from kdra.scheduler.nodefit import FitFailure
    from kdra.scheduler.scheduler import Scheduler

    store = MemoryStore()
    for obj in fleet_of_40():
        store.create(obj)
    store.create(claim("big", 2, [BIG]))
    store.create(pod("trainer", "big"))
    sched = Scheduler(store)
    result = sched.run(0)[0]
    assert result.node is None and isinstance(result.explanation, FitFailure)
    condition, event = unschedulable_messages(result.message, result.explanation)
    first, second = condition.splitlines()[:2]
    assert first == "0/40 nodes are available: 40 cannot allocate all claims."
    assert second.startswith("0/40 nodes: 30 have no device of class gpu.example.com; 6 fail selector #0")
    assert len(event.encode()) <= EVENT_MESSAGE_LIMIT and event.startswith(first)
    # cut at a line's end: every line the Event keeps is a whole line of the condition
    kept = event.removesuffix(" ...").splitlines()
    assert len(kept) > 2 and all(line in condition.splitlines() for line in kept), kept
    assert "node c-0: cannot allocate all claims" in condition
    # many nodes, one long reason each: still bounded, cut on a character boundary
    long = unschedulable_messages("0/9 nodes are available: ü" + "x" * 5000, None)
    assert len(long[1].encode()) <= EVENT_MESSAGE_LIMIT and long[1].endswith(" ...")


# ------------------------------------------------------------------- 2. allocate honours pod constraints


def test_allocate_honours_selector_affinity_taints_and_resources(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    taint = [{"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"}]
    objs = [
        device_class(),
        node("h100", {"pool": "h100"}),
        gpu_slice("h100", ["80Gi"] * 2),
        node("v100", {"pool": "v100"}),
        gpu_slice("v100", ["32Gi"] * 2),
        node("tainted", {"pool": "tpu"}, taints=taint),
        gpu_slice("tainted", ["16Gi"] * 2),
        node("small", {"pool": "small"}, cpu="2"),
        gpu_slice("small", ["16Gi"] * 2),
        *(claim(f"c{i}") for i in range(5)),
        pod("pinned", "c0", nodeSelector={"pool": "v100"}),
        pod(
            "affine",
            "c1",
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "pool", "operator": "In", "values": ["tpu", "small"]}
                                ]
                            }
                        ]
                    }
                }
            },
            cpu="4",
        ),
        pod(
            "tolerates",
            "c2",
            tolerations=[{"key": "google.com/tpu", "operator": "Exists"}],
            nodeSelector={"pool": "tpu"},
        ),
        pod("no-toleration", "c3", nodeSelector={"pool": "tpu"}),
        pod("huge", "c4", cpu="100"),
    ]
    code, out, err = run(["allocate", "-f", dump(tmp_path, objs), "-o", "wide"], capsys)
    assert code == 1
    rows = {line.split()[1]: line.split()[6] for line in out.splitlines()[1:]}
    assert rows == {"c0": "v100", "c2": "tainted"}
    assert "pod default/affine: cannot allocate all claims on any node" in err
    assert "1 node(s) had untolerated taint {google.com/tpu: present}" in err  # affine: tpu tainted
    assert "Insufficient cpu" in err  # affine on small (2 cpu), huge everywhere
    assert "node(s) didn't match Pod's node affinity/selector" in err
    header = out.splitlines()[0].split()
    assert header == [
        "NAMESPACE",
        "CLAIM",
        "REQUEST",
        "DRIVER",
        "POOL",
        "DEVICE",
        "NODE",
        "POD",
        "SHARE",
        "CONSUMED",
    ]


def test_later_pods_see_earlier_pods_cpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    objs = [device_class(), node("n", cpu="3"), gpu_slice("n", ["80Gi"] * 4), claim("a"), claim("b")]
    objs += [pod("first", "a", cpu="2"), pod("second", "b", cpu="2")]
    code, out, err = run(["allocate", "-f", dump(tmp_path, objs), "-o", "name"], capsys)
    assert code == 1 and out == "resourceclaim.resource.k8s.io/a\n"
    assert "pod default/second" in err and "1 Insufficient cpu" in err


def test_namespace_flag_allocates_only_that_namespace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = claim("elsewhere")
    other["metadata"]["namespace"] = "team-b"
    mine = claim("mine")
    del mine["metadata"]["namespace"]  # -n puts it in team-a, as kubectl apply -n does
    objs = [device_class(), node("n"), gpu_slice("n", ["80Gi"] * 2), other, mine]
    code, out, _ = run(["allocate", "-f", dump(tmp_path, objs), "-n", "team-a", "-o", "wide"], capsys)
    assert code == 0
    assert [line.split()[:2] for line in out.splitlines()[1:]] == [["team-a", "mine"]]
    code, out, _ = run(["allocate", "-f", dump(tmp_path, objs), "-A", "-o", "name"], capsys)
    assert sorted(out.split()) == [
        "resourceclaim.resource.k8s.io/elsewhere",
        "resourceclaim.resource.k8s.io/mine",
    ]


# ---------------------------------------------------------------------------------------- 3. strict input


def test_unknown_fields_are_found_per_release() -> None:
    from kdra.api.fields import unknown_fields

    slice_ = gpu_slice("n", ["80Gi"])
    slice_["spec"]["devices"][0]["consumesCounters"] = [
        {"counterSet": "s", "counters": {}, "compatibilityGroups": []}
    ]
    slice_["spec"]["devices"][0]["attributes"] = {"x": {"string": "y", "bogus": 1}}
    assert unknown_fields(slice_, "1.36") == [
        "spec.devices[0].consumesCounters[0].compatibilityGroups",
        "spec.devices[0].attributes[x].bogus",
    ]
    assert unknown_fields(slice_) == ["spec.devices[0].attributes[x].bogus"]  # 1.37 has compatibilityGroups
    raw = claim("c")
    raw["spec"]["devices"]["config"] = [
        {"opaque": {"driver": DRIVER, "parameters": {"anything": {"goes": 1}}}}
    ]
    assert unknown_fields(raw) == []  # opaque parameters are the driver's, not the schema's
    assert unknown_fields({"apiVersion": "kdra.dev/v1alpha1", "kind": "Fleet", "x": 1}) == []


def test_aliases_within_reason_still_load() -> None:
    from kdra.api.load import load_text

    text = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: &l {a: b}, annotations: *l}\n"
    assert load_text(text)[0]["metadata"]["annotations"] == {"a": "b"}


# ------------------------------------------------------------------------------------ 4. CLI conventions


def test_version_on_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--version"], ["allocate", "--version"], ["cluster", "render", "--version"]):
        code, out, _ = run(argv, capsys)
        assert code == 0 and out.startswith("kdra ")
    assert run(["version"], capsys)[1].startswith("kdra ")


def test_repeated_flags_accumulate() -> None:
    parser = build_parser()
    args = parser.parse_args(
        [
            "replay",
            "alibaba",
            "--policy",
            "kdra",
            "--policy",
            "fgd,best-fit",
            "--seeds",
            "1",
            "--seeds",
            "3-4",
        ]
    )
    from kdra.cli.replay import parse_seeds, resolve_policies

    assert resolve_policies(args.policy) == ["kdra", "fgd", "best-fit"]
    assert parse_seeds(",".join(args.seeds)) == [1, 3, 4]
    args = parser.parse_args(
        [
            "allocate",
            "-f",
            "x",
            "--feature-gates",
            "DRAPartitionableDevices=false",
            "--feature-gates",
            "DRAListTypeAttributes=true",
        ]
    )
    from kdra.cli.common import feature_gates

    gates = feature_gates(args)
    assert not gates.partitionable_devices and gates.list_type_attributes


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_completion_completes_commands_flags_and_choices(capsys: pytest.CaptureFixture[str]) -> None:
    code, script, _ = run(["completion", "bash"], capsys)
    assert code == 0
    probe = script + (
        't(){ COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]}-1)); COMPREPLY=(); _kdra; '
        'echo "${COMPREPLY[*]}"; }\n'
        "t kdra al\nt kdra allocate -o ''\nt kdra cluster at\nt kdra replay alibaba --pol\n"
    )
    done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=30)
    assert done.stdout.splitlines() == ["allocate", "yaml json table wide name", "attributes", "--policy"]
    assert run(["completion", "zsh"], capsys)[1].startswith("# zsh completion")


def test_export_takes_the_file_with_output_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import kdra.cli.kube as kube_cli
    import kdra.kube.export as export

    monkeypatch.setattr(kube_cli, "make_client", lambda args: object())
    monkeypatch.setattr(export, "export_objects", lambda client, ns=None: [node("n")])
    base = ["export", "--kubeconfig", "unused"]
    assert run([*base, "-o", "json"], capsys)[1].startswith("{")  # -o is the format, stdout by default
    target = tmp_path / "c.yaml"
    code, _, err = run([*base, "--output-file", str(target)], capsys)
    assert code == 0 and "wrote 1 Node" in err and yaml.safe_load(target.read_text())["kind"] == "Node"
    code, _, err = run([*base, "-o", str(tmp_path / "old.json")], capsys)  # -o is only ever the format
    assert code == 2 and "invalid choice" in err and not (tmp_path / "old.json").exists()


def test_progress_lines_when_stderr_is_not_a_terminal() -> None:
    from kdra.cli.common import Progress

    stream = io.StringIO()
    with Progress(["simulate dra"], stream=stream, period=0.0) as progress:
        progress.update("simulate dra", 5, 10, "simulate dra")
    assert stream.getvalue().startswith("progress after ") and "simulate dra 50%" in stream.getvalue()
    quiet = io.StringIO()
    with Progress(["x"], stream=quiet, period=3600) as progress:  # a short run prints nothing
        progress.update("x", 1, 2)
    assert quiet.getvalue() == ""


# ------------------------------------------------------------------------------------------------ 5. views


def test_top_shows_a_partitioned_gpu_as_used_and_pending_pods(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    example = EXAMPLES / "h100-mig-node.yaml"
    code, allocated, _ = run(["allocate", "-f", str(example)], capsys)
    assert code == 0
    objs = [o for o in yaml.safe_load_all(example.read_text()) if o]
    objs += yaml.safe_load(allocated)["items"]
    path = dump(tmp_path, objs)
    code, out, _ = run(["top", "-f", path], capsys)
    assert code == 0
    gpu0 = next(line for line in out.splitlines() if line.split()[1:2] == ["gpu-0"])
    assert "74%" in gpu0 and "(3 partitions held)" in gpu0  # 40 + 10 + 10 GB of 80 GB
    head = out.splitlines()[0]
    shown = [
        line
        for line in out.splitlines()[2:]
        if line.strip() and not line.startswith(("PENDING", "ml-team/", "3 pending"))
    ]
    assert head.startswith("1 nodes, 9/12 devices allocated") and len(shown) == 12
    assert "3 pending pods" in out and "ml-team/vllm-serve" in out
    # --all: the counts are of every row shown
    code, out, _ = run(["top", "-f", path, "--all"], capsys)
    rows = [line for line in out.splitlines()[2:] if line.split() and line.split()[0] not in ("PENDING",)]
    total = int(out.splitlines()[0].split("/")[1].split()[0])
    assert total == 208 and "hidden" not in out.splitlines()[0]
    del rows
    # the same from the exporter's text (a saved scrape)
    from kdra.observe.top import rows_from_metrics, rows_from_state, state_from_objects

    state = state_from_objects(objs)
    a = {r.key: round(r.used, 2) for r in rows_from_state(state)}
    b = {r.key: round(r.used, 2) for r in rows_from_metrics(state.render().decode())}
    assert a == b and a["gpu.nvidia.com/gpu-node-01/gpu-0"] == 0.74
    code, out, _ = run(["top", "-f", path, "-o", "name"], capsys)
    assert "gpu.nvidia.com/gpu-node-01/gpu-0\n" in out and len(out.split()) == 9


def test_exporter_once_prints_the_moment_asked_for(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    from kdra.observe.exposition import parse_text

    def claims(text: bytes) -> int:
        return sum(1 for n, _l, _v in parse_text(text.decode()) if n == "kdra_claim_device_info")

    assert main(["exporter", "--from-simulation", "--once", "--workload", "mixed-day"]) == 0
    peak = capsysbinary.readouterr()
    assert b"(peak allocation," in peak.err and claims(peak.out) > 0
    assert main(["exporter", "--from-simulation", "--once", "--workload", "mixed-day", "--at", "end"]) == 0
    end = capsysbinary.readouterr()
    assert b"(end)" in end.err and claims(end.out) == 0  # the workload is over
    assert main(["exporter", "--from-simulation", "--once", "--workload", "mixed-day", "--at", "90m"]) == 0
    assert b"simulated time 1h" in capsysbinary.readouterr().err


def test_report_titles_and_axes_fit_the_run() -> None:
    from kdra.sim.report import report_title, to_html
    from kdra.sim.runner import simulate
    from kdra.sim.svg import step_chart, time_axis

    assert time_axis(9 * 3600) == (3600.0, "hour") and time_axis(30 * 86400)[1] == "day"
    assert time_axis(300)[1] == "minute"
    zero = step_chart("t", [("a", "#000", [(0.0, 0.0), (10.0, 0.0)])], x_max=9 * 3600, y_label="GiB")
    assert "e-0" not in zero and ">hour<" in zero
    report = simulate("mixed", "mixed-day", ("dra",))
    assert report_title(report) == "DRA"
    html = to_html(report)
    assert "<h1>DRA: mixed-day on the mixed fleet</h1>" in html and "--mode dra" in html
    assert "DRA vs device plugins" not in html and ">hour<" in html


# ----------------------------------------------------------------------------------------------- 6. fleets


def test_bundled_fleets_have_dgx_style_pcie_pairs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kdra.fleets import load_fleet, render

    slices = [
        o
        for o in render(load_fleet("mixed"))
        if o["kind"] == "ResourceSlice" and o["spec"]["nodeName"] == "h100-zone-a-0"
    ]
    attrs = {d["name"]: d["attributes"] for s in slices for d in s["spec"].get("devices") or []}
    roots = [attrs[f"gpu-{i}"]["resource.kubernetes.io/pcieRoot"]["string"] for i in range(8)]
    numa = [attrs[f"gpu-{i}"]["resource.kubernetes.io/numaNode"]["int"] for i in range(8)]
    assert len(set(roots)) == 4 and all(roots[2 * i] == roots[2 * i + 1] for i in range(4))
    assert numa == [0, 0, 0, 0, 1, 1, 1, 1]
    # the README's "two GPUs on one PCIe root" claim fits on the bundled fleet
    code, out, _ = run(["cluster", "render", "-c", "mixed"], capsys)
    fleet_file = tmp_path / "mixed.yaml"
    fleet_file.write_text(out)
    pair = claim("pair", 2)
    pair["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "gpu.nvidia.com"
    pair["spec"]["devices"]["constraints"] = [{"matchAttribute": "resource.kubernetes.io/pcieRoot"}]
    code, out, err = run(
        ["allocate", "-f", str(fleet_file), "-f", dump(tmp_path, [pair], "pair.yaml"), "-o", "table"], capsys
    )
    assert code == 0, err
    assert len(out.splitlines()) == 3


def test_cluster_attributes_lists_names_with_selectors_that_match(capsys: pytest.CaptureFixture[str]) -> None:
    from kdra.cel import compile_selector, device_input
    from kdra.fleets import iter_render, load_fleet

    code, out, _ = run(["cluster", "attributes", "-c", "mixed", "-o", "json"], capsys)
    assert code == 0
    doc = json.loads(out)
    types = {(t["driver"], t["type"]): t for t in doc["deviceTypes"]}
    # the classes a claim can name, and which device types each selects
    classes = {c["name"]: c["selects"] for c in doc["deviceClasses"]}
    assert classes["mig.nvidia.com"].startswith("gpu.nvidia.com/mig (")
    assert [c["name"] for c in types[("gpu.nvidia.com", "gpu")]["deviceClasses"]] == ["gpu.nvidia.com"]
    assert {
        ("gpu.nvidia.com", "gpu"),
        ("gpu.nvidia.com", "mig"),
        ("gpu.amd.com", "amdgpu"),
        ("tpu.google.com", "-"),
    } <= set(types)
    gpu = {a["name"]: a for a in types[("gpu.nvidia.com", "gpu")]["attributes"]}
    assert 'device.attributes["kdra.dev"].nvlinkDomain == ' in gpu["kdra.dev/nvlinkDomain"]["cel"]
    assert "productName" in gpu and "model" not in gpu and "index" not in gpu
    # every snippet compiles in the DRA CEL environment and matches a device that has the example value
    devices = [
        (s["spec"]["driver"], d)
        for s in iter_render(load_fleet("mixed"), nodes=False)
        if s["kind"] == "ResourceSlice"
        for d in s["spec"].get("devices") or []
    ]
    for (driver, dtype), t in types.items():
        for item in t["attributes"] + t["capacity"]:
            program = compile_selector(item["cel"])
            assert any(
                drv == driver
                and ((d.get("attributes") or {}).get("type") or {}).get("string", "-") == dtype
                and program.matches(
                    device_input(drv, d.get("attributes") or {}, d.get("capacity") or {}, False)
                )
                for drv, d in devices
            ), item["cel"]
    code, out, _ = run(["cluster", "attributes", "-c", "mixed", "--driver", "tpu.google.com"], capsys)
    assert code == 0 and "tpu.google.com   -" in out and "mig.nvidia.com" not in out
