"""`kdra simulate`: the discrete-event run, its JSON document, determinism and CLI errors."""

from __future__ import annotations

import json

import pytest

from kdra.cli.main import main
from kdra.sim.generator import expand_generator
from kdra.sim.report import to_html, to_json
from kdra.sim.runner import simulate
from kdra.sim.workload import build_workload

SMALL = {
    "apiVersion": "kdra.dev/v1alpha1",
    "kind": "WorkloadGenerator",
    "metadata": {"name": "small"},
    "spec": {
        "duration": "2d",
        "namespace": "ml",
        "streams": [
            {
                "name": "nb",
                "type": "notebook",
                "arrivals": {"every": "2h"},
                "runTime": {"min": "1h", "max": "6h"},
                "gpu": {"memory": "9Gi"},
            },
            {
                "name": "svc",
                "type": "inference",
                "arrivals": {"count": 2},
                "replicas": 3,
                "runTime": "1d",
                "gpu": {"memory": "18Gi"},
            },
            {
                "name": "train",
                "type": "job",
                "arrivals": {"every": "12h"},
                "parallelism": 2,
                "runTime": "8h",
                "gpu": {"count": 8, "model": "H100-SXM-80GB"},
            },
        ],
    },
}


@pytest.fixture(scope="module")
def small_report():  # type: ignore[no-untyped-def]
    wl = build_workload(expand_generator(SMALL).objects, name="small")
    return simulate("mixed", wl, seed=3)


def test_both_modes_schedule_and_dra_uses_fewer_gpus(small_report) -> None:  # type: ignore[no-untyped-def]
    dra = small_report.modes["dra"].metrics
    dp = small_report.modes["device-plugin"].metrics
    assert dra["pods_total"] == dp["pods_total"] > 0
    assert dra["pods_scheduled"] == dra["pods_total"]
    assert dra["gpus_allocated_peak"] < dp["gpus_allocated_peak"]
    assert dra["stranded_gpu_memory_bytes_peak"] < dp["stranded_gpu_memory_bytes_peak"]
    h = small_report.headline
    assert h["gpu_hours_saved"] > 0 and h["pods_compared"] > 0


def test_json_document_shape(small_report) -> None:  # type: ignore[no-untyped-def]
    doc = json.loads(to_json(small_report))
    assert set(doc["modes"]) == {"dra", "device-plugin"}
    for mode in doc["modes"].values():
        for key in (
            "pods_total",
            "pods_scheduled",
            "pods_pending",
            "gpus_allocated_peak",
            "gpu_allocation_ratio_mean",
            "stranded_gpu_memory_bytes_peak",
            "wait_seconds_p50",
            "wait_seconds_p99",
        ):
            assert key in mode["metrics"]
        assert mode["placements"] and {"pod", "node", "devices"} <= set(mode["placements"][0])
        assert isinstance(mode["pending"], list)
    dra_devices = [d for p in doc["modes"]["dra"]["placements"] for d in p["devices"]]
    assert any(d.startswith("gpu.nvidia.com/") for d in dra_devices)
    assert all("/" in d for p in doc["modes"]["device-plugin"]["placements"] for d in p["devices"])


def test_same_inputs_same_output(small_report) -> None:  # type: ignore[no-untyped-def]
    wl = build_workload(expand_generator(SMALL).objects, name="small")
    again = simulate("mixed", wl, seed=3)
    assert to_json(again) == to_json(small_report)


def test_html_report_is_self_contained(small_report) -> None:  # type: ignore[no-untyped-def]
    html = to_html(small_report)
    assert html.startswith("<!doctype html>") and html.count("<svg") >= 3
    assert "<script" not in html and "http://" not in html.replace("http://www.w3.org/2000/svg", "")


def test_cli_json_and_errors(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    import yaml

    wl = tmp_path / "w.yaml"
    wl.write_text(yaml.safe_dump(SMALL))
    assert main(["simulate", "--workload", str(wl), "--mode", "dra", "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert list(doc["modes"]) == ["dra"]
    assert main(["simulate", "-c", "no-such-fleet", "--workload", str(wl)]) == 2
    assert "no-such-fleet" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: x, annotations: {kdra.dev/arrival-time: never}}\n"
        "spec: {containers: [{name: c}]}\n"
    )
    assert main(["simulate", "--workload", str(bad)]) == 2
    assert "Pod default/x: metadata.annotations[kdra.dev/arrival-time]" in capsys.readouterr().err


def test_bundled_kubernetes_shaped_example_counts_a_shared_claim_once() -> None:
    report = simulate("mixed", "mixed-day", modes=("dra",))
    r = report.modes["dra"].result
    helper, server = r.pods["team-a/batch-helper"], r.pods["team-a/model-server"]
    assert helper.node == server.node and helper.devices == server.devices
    assert helper.gpu_equiv + server.gpu_equiv == 1.0
    # While both ran (2h..8h) and after the helper left (8h..12h), the shared GPU counts once.
    assert report.modes["dra"].metrics["pods_scheduled"] == 11
    legacy = r.pods["team-a/legacy-notebook"]
    assert legacy.devices and legacy.devices[0].startswith("gpu.nvidia.com/")  # KEP-5004


def test_bad_fleet_file_is_named(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "apiVersion: kdra.dev/v1alpha1\nkind: Fleet\nmetadata: {name: bad}\nspec:\n  pools:\n"
        "  - {name: gpu, count: 2, cpu: '32', memory: 128Gi, accelerator: {model: H999, count: 8}}\n"
    )
    assert main(["simulate", "-c", str(fleet), "--workload", "mixed-day"]) == 2
    err = capsys.readouterr().err
    assert "spec.pools[0].accelerator.model" in err and "H999" in err
    assert main(["simulate", "--seed", "-1"]) == 2


def test_device_preference_records_what_decided_and_keeps_every_pod_placed() -> None:
    """`kdra simulate --device-preference fragmentation` on the MIG-heavy example: the same pods are placed
    as under first fit (or more), and each placement in -o json carries the policy and both scores."""
    from pathlib import Path

    import yaml

    from kdra.scheduler.scheduler import SchedulerConfig

    root = Path(__file__).resolve().parents[2] / "examples" / "simulate"
    docs = list(yaml.safe_load_all((root / "mig-heavy.yaml").read_text()))
    docs[0]["spec"]["duration"] = "12h"
    wl = build_workload(docs, name="mig-heavy-12h", seed=0)
    fleet = str(root / "mig-fleet.yaml")
    first = simulate(fleet, wl, ("dra",), 0)
    pref = simulate(fleet, wl, ("dra",), 0, SchedulerConfig(device_preference="fragmentation"))
    assert pref.modes["dra"].metrics["pods_scheduled"] >= first.modes["dra"].metrics["pods_scheduled"] > 0
    doc = json.loads(to_json(pref))
    choices = [p["devicePreference"] for p in doc["modes"]["dra"]["placements"] if "devicePreference" in p]
    assert choices and all(c["policy"] == "fragmentation" for c in choices)
    assert {c["decidedBy"] for c in choices} <= {"preference", "rules"}
    assert any(c["decidedBy"] == "preference" for c in choices)
    for c in choices:
        if c["decidedBy"] == "preference":
            assert c["chosen"]["devices"] != c["firstFit"]["devices"]
    assert "devicePreference" not in json.dumps(json.loads(to_json(first)))


def test_a_pod_group_claim_is_allocated_once_for_the_gang_in_simulation_kep_5729(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """`kdra simulate --kubernetes-version 1.38` with the Workload API's PodGroup-level ResourceClaims on:
    3 members with a GPU each and the group's, on nodes of 4 GPUs, fit on one node only because the group's
    claim is allocated once; each member holds the group's GPU beside its own. Without the gate the API
    server drops spec.resourceClaims (with a warning), and each member's `shared` entry gets a claim of its
    own: 6 GPUs."""
    import yaml

    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "apiVersion: kdra.dev/v1alpha1\nkind: Fleet\nmetadata: {name: four}\nspec:\n  pools:\n"
        "  - {name: gpu, count: 2, cpu: '32', memory: 128Gi, accelerator: {model: H100-SXM-80GB, count: 4}}\n"
    )

    def template(name: str) -> dict:
        req = {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 1}}
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": "ml"},
            "spec": {"spec": {"devices": {"requests": [req]}}},
        }

    shared = {"name": "shared", "resourceClaimTemplateName": "shared"}
    group = {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 3}}, "resourceClaims": [shared]},
    }
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"train-{i}", "namespace": "ml", "annotations": {"kdra.dev/run-time": "1h"}},
            "spec": {
                "schedulingGroup": {"podGroupName": "train"},
                "containers": [
                    {
                        "name": "c",
                        "image": "pause",
                        "resources": {"claims": [{"name": "own"}, {"name": "shared"}]},
                    }
                ],
                "resourceClaims": [{"name": "own", "resourceClaimTemplateName": "own"}, shared],
            },
        }
        for i in range(3)
    ]
    wl = tmp_path / "w.yaml"
    wl.write_text(yaml.safe_dump_all([template("shared"), template("own"), group, *pods]))
    args = ["simulate", "-c", str(fleet), "--workload", str(wl), "--mode", "dra", "-o", "json"]
    args += ["--kubernetes-version", "1.38"]
    gates = ["--feature-gates", "GenericWorkload=true,DRAWorkloadResourceClaims=true"]
    assert main([*args, *gates]) == 0
    doc = json.loads(capsys.readouterr().out)
    placed = {p["pod"]: p for p in doc["modes"]["dra"]["placements"]}
    assert sorted(placed) == ["ml/train-0", "ml/train-1", "ml/train-2"]
    assert len({p["node"] for p in placed.values()}) == 1
    devices = [set(p["devices"]) for p in placed.values()]
    common = set.intersection(*devices)
    assert len(common) == 1 and len(set.union(*devices)) == 4, devices
    assert main([*args, "--feature-gates", "GenericWorkload=true"]) == 0
    out = capsys.readouterr()
    assert "spec.resourceClaims" in out.err
    placed = {p["pod"]: p for p in json.loads(out.out)["modes"]["dra"]["placements"]}
    devices = [set(p["devices"]) for p in placed.values()]
    assert len(devices) == 3 and len(set.union(*devices)) == 6, devices


SHARED_CLAIM_SHORT_THEN_LONG = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: shared-l40s, namespace: default}
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: gpu.nvidia.com
        selectors:
        - cel: {expression: 'device.attributes["gpu.nvidia.com"].productName.contains("L40S")'}
""" + "".join(
    f"""---
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
  annotations: {{kdra.dev/arrival-time: "0", kdra.dev/run-time: {hours}h}}
spec:
  containers:
  - name: c
    image: x
    resources: {{claims: [{{name: gpu}}]}}
  resourceClaims:
  - {{name: gpu, resourceClaimName: shared-l40s}}
"""
    for name, hours in (("a-short", 1), ("b-long", 10))
)


def test_a_shared_claims_hours_after_its_first_user_ends_count_in_the_headline(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Two pods share one GPU claim; the first bound ends after 1 h, the other runs 10 h. DRA holds one GPU
    for 10 h (metrics say 10.0) but the headline and per-workload figures counted only the first user's
    hour: "gpu_hours_dra 1.0 ... saved 10.0 (90.9%)" against the device plugin's 11.0."""
    f = tmp_path / "shared.yaml"
    f.write_text(SHARED_CLAIM_SHORT_THEN_LONG)
    report = simulate("mixed", str(f))
    dra = report.modes["dra"]
    assert dra.metrics["gpu_hours_allocated"] == 10.0
    assert sum(w["gpu_hours"] for w in dra.workloads.values()) == pytest.approx(10.0)
    h = report.headline
    assert h is not None
    assert (h["gpu_hours_dra"], h["gpu_hours_device_plugin"], h["gpu_hours_saved"]) == (10.0, 11.0, 1.0)
    assert h["gpus_allocated_peak_dra"] == 1.0


def test_a_placement_counts_the_shared_claim_it_took_over(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The pod that goes on using a shared claim after its first user ended holds the GPU from then: its
    placement said gpu_equivalents 0 while the headline counted its 9 h."""
    from kdra.sim.report import placements

    f = tmp_path / "shared.yaml"
    f.write_text(SHARED_CLAIM_SHORT_THEN_LONG)
    report = simulate("mixed", str(f))
    dra = report.modes["dra"]
    got = {p["pod"]: (p["gpu_equivalents"], p["gpu_hours"]) for p in placements(dra)}
    assert got == {"default/a-short": (1.0, 1.0), "default/b-long": (1.0, 9.0)}
    assert sum(h for _e, h in got.values()) == dra.metrics["gpu_hours_allocated"]
    dp = {p["pod"]: (p["gpu_equivalents"], p["gpu_hours"]) for p in placements(report.modes["device-plugin"])}
    assert dp == {"default/a-short": (1.0, 1.0), "default/b-long": (1.0, 10.0)}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # Each was taken by the fleets' CSV loader: an empty fleet (every pod pending, exit 0), a duplicate
        # that reached the store ("nodes "n1" already exists", no file or line), an extra field ignored, a
        # node of 0 CPU, and int()'s own words.
        ("", "line 1: missing column(s) sn, cpu_milli"),
        ("n1,32000,65536,2,T4\nn1,32000,65536,2,T4\n", "line 3: column sn: duplicate node 'n1'"),
        (
            "n1,32000,65536,2,T4\nBad_Name,32000,65536,2,T4\n",
            "line 3: column sn: node name 'Bad_Name': a lower",
        ),
        ("n1,32000,65536,2,T4,x\n", "line 2: 6 fields, the header has 5"),
        ("n1,0,65536,2,T4\n", "line 2: column cpu_milli: 0 must be at least 1"),
        ("n1,32000.5,65536,2,T4\n", "line 2: column cpu_milli: '32000.5' is not an integer"),
    ],
)
def test_simulate_node_list_csv_rows_are_checked_as_replays_are(
    tmp_path, capsys, text: str, message: str
) -> None:  # type: ignore[no-untyped-def]
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(("sn,cpu_milli,memory_mib,gpu,model\n" + text) if text else "")
    assert main(["simulate", "-c", str(nodes), "--workload", "mixed-day", "-o", "json"]) == 2
    err = capsys.readouterr().err
    assert f"{nodes}: {message}" in err and "Traceback" not in err


def test_simulate_node_list_csv_names_are_stripped_and_cpu_nodes_kept(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from kdra.fleets import load_fleet

    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\n n1 ,32000,65536,2,T4\nc1,64000,65536,0,\n")
    fleet = load_fleet(str(nodes))
    assert sorted(n for p in fleet.pools for n in p.names) == ["c1", "n1"]


def test_an_empty_workload_name_is_refused_not_read_as_the_current_folder(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["simulate", "--workload", "", "-o", "json"]) == 2
    assert "workload '': Required value" in capsys.readouterr().err


def test_a_static_mig_device_costs_what_the_same_dra_mig_device_costs() -> None:
    """Device plugin `nvidia.com/mig-3g.40gb` on an H100 node and the DRA MIG device of that profile are the
    same memory: the device plugin's figure came from the name's decimal GB (40e9 / 79.6 GiB = 0.468 GPU)
    against the published 40,448 MiB (0.496): 5-7% cheaper under the device plugin for the same device."""
    from kdra.sim.accounting import FleetGpus
    from kdra.sim.runner import fleet_objects

    _name, objs, _fl = fleet_objects("mixed")
    gpus = FleetGpus(objs)
    checked = 0
    for (_drv, _pool, _dev), (node, cost, dev) in gpus.devices.items():
        if dev.dtype != "mig" or not node.startswith("h100-mig"):
            continue
        profile = dev.attributes["profile"]["string"]
        legacy = gpus.legacy_cost(node, f"nvidia.com/mig-{profile}")
        assert legacy.gpu_equiv == pytest.approx(cost.gpu_equiv) and legacy.memory == cost.memory, profile
        checked += 1
    assert checked


def test_headline_sentence_says_more_where_dra_held_more() -> None:
    from types import SimpleNamespace

    from kdra.sim.report import headline_sentence

    h = {
        "pods_compared": 3,
        "gpu_hours_dra": 9.0,
        "gpu_hours_device_plugin": 8.0,
        "gpu_hours_saved_percent": -12.5,
        "gpus_saved_mean": -0.5,
        "stranded_gpu_memory_bytes_peak_device_plugin": 0,
        "stranded_gpu_memory_bytes_peak_dra": 10 << 30,
        "pods_not_placed_dra": 0,
        "pods_not_placed_device_plugin": 0,
    }
    text = headline_sentence(SimpleNamespace(headline=h))  # type: ignore[arg-type]
    # It said "-12.5% less, -0.5 GPUs freed on average" and that stranded memory "fell from 0 GiB to 10 GiB".
    assert "12.5% more, 0.5 GPUs more held on average" in text
    assert "rose from 0 GiB to 10 GiB" in text and "less" not in text and "fell" not in text


def test_html_cards_say_more_where_dra_held_more(small_report, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from kdra.sim.runner import SimulationReport

    h = dict(small_report.headline)
    h.update(
        gpu_hours_saved_percent=-12.5,
        gpus_saved_mean=-0.5,
        stranded_gpu_memory_bytes_peak_avoided=-(10 << 30),
    )
    monkeypatch.setattr(SimulationReport, "headline", property(lambda self: h))
    html = to_html(small_report)
    # The cards read "-12.5% fewer GPU-hours", "-0.5 GPUs freed", "-10 GiB stranded GPU memory avoided".
    assert "12.5%</div><div class='l'>more GPU-hours" in html
    assert "GPUs more held on average" in html and "more stranded GPU memory at peak" in html
    assert "fewer GPU-hours" not in html and "-12.5" not in html
