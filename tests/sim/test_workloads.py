"""Workloads and generators: expansion, annotations, device-plugin conversion, clear errors."""

from __future__ import annotations

from typing import Any

import pytest

from kdra.deviceplugin.pods import to_device_plugin
from kdra.errors import InputError
from kdra.sim.generator import expand_generator
from kdra.sim.workload import build_workload


def gen(streams: list, duration: str = "1d", **extra: object) -> dict:
    return {
        "apiVersion": "kdra.dev/v1alpha1",
        "kind": "WorkloadGenerator",
        "metadata": {"name": "g"},
        "spec": {"duration": duration, "streams": streams, **extra},
    }


NOTEBOOK = {
    "name": "nb",
    "type": "notebook",
    "arrivals": {"every": "2h"},
    "runTime": "1h",
    "gpu": {"memory": "9Gi"},
}


def test_generator_is_seeded_and_expands_to_kubernetes_objects() -> None:
    a = expand_generator(
        gen(
            [
                NOTEBOOK,
                {
                    "name": "train",
                    "type": "job",
                    "arrivals": {"count": 2},
                    "parallelism": 3,
                    "runTime": {"min": "1h", "max": "2h"},
                    "gpu": {"count": 8},
                },
            ]
        ),
        seed=1,
    )
    b = expand_generator(
        gen(
            [
                NOTEBOOK,
                {
                    "name": "train",
                    "type": "job",
                    "arrivals": {"count": 2},
                    "parallelism": 3,
                    "runTime": {"min": "1h", "max": "2h"},
                    "gpu": {"count": 8},
                },
            ]
        ),
        seed=1,
    )
    assert a.objects == b.objects and a.horizon == 86400
    kinds = {o["kind"] for o in a.objects}
    assert kinds == {"ResourceClaimTemplate", "Pod", "Job"}
    tmpl = next(
        o for o in a.objects if o["kind"] == "ResourceClaimTemplate" and o["metadata"]["name"] == "nb-accel"
    )
    subs = tmpl["spec"]["spec"]["devices"]["requests"][0]["firstAvailable"]
    assert [s["name"] for s in subs] == ["mig", "share", "whole"]
    wl = build_workload(a.objects)
    jobs = [g for g in wl.groups if g.kind == "Job"]
    assert len(jobs) == 2 and all(len(g.pods) == 3 for g in jobs)
    assert all(3600 <= g.run_time <= 7200 for g in jobs)  # type: ignore[operator]
    c = expand_generator(gen([NOTEBOOK]), seed=2)
    assert c.objects != expand_generator(gen([NOTEBOOK]), seed=1).objects


@pytest.mark.parametrize(
    ("stream", "message"),
    [
        ({**NOTEBOOK, "type": "batch"}, "spec.streams[0].type: Unsupported value: 'batch'"),
        ({**NOTEBOOK, "runTime": "soon"}, "spec.streams[0].runTime: Invalid value: 'soon'"),
        ({**NOTEBOOK, "gpu": {"memory": "lots"}}, "spec.streams[0].gpu.memory: Invalid value: 'lots'"),
        ({**NOTEBOOK, "arrivals": {}}, "spec.streams[0].arrivals: Invalid value: give exactly one of"),
        ({**NOTEBOOK, "colour": "red"}, "spec.streams[0].colour: Unsupported value: unknown field"),
        ({**NOTEBOOK, "name": "Bad_Name"}, "spec.streams[0].name: Invalid value: 'Bad_Name'"),
    ],
)
def test_generator_errors_name_the_field(stream: dict, message: str) -> None:
    with pytest.raises(InputError) as err:
        expand_generator(gen([stream]))
    assert str(err.value).startswith("WorkloadGenerator g: ")
    assert message in str(err.value)


def pod(name: str, **ann: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": ann},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]},
    }


def test_arrival_and_run_time_annotations() -> None:
    wl = build_workload([pod("b", **{"kdra.dev/arrival-time": "2h", "kdra.dev/run-time": "30m"}), pod("a")])
    assert [(g.name, g.arrival, g.run_time) for g in wl.groups] == [("a", 0.0, None), ("b", 7200.0, 1800.0)]


@pytest.mark.parametrize(
    ("objs", "message"),
    [
        (
            [pod("x", **{"kdra.dev/run-time": "forever"})],
            "Pod default/x: metadata.annotations[kdra.dev/run-time]: Invalid value: 'forever'",
        ),
        (
            [{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}}],
            "Service default/s: kind: Unsupported value: 'Service'",
        ),
        (
            [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": "p"},
                    "spec": {
                        "containers": [{"name": "c", "image": "x"}],
                        "resourceClaims": [{"name": "g", "resourceClaimTemplateName": "missing"}],
                    },
                }
            ],
            "Pod default/p: spec.resourceClaims[0].resourceClaimTemplateName: Not found: 'missing'",
        ),
        (
            [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": {"name": "d"},
                    "spec": {
                        "replicas": -1,
                        "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}},
                    },
                }
            ],
            "Deployment default/d: spec.replicas: Invalid value: -1",
        ),
        (
            [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": {"name": "d"},
                    "spec": {"template": {"spec": {}}},
                }
            ],
            "Deployment default/d: spec.template.spec.containers: Required value",
        ),
        ([pod("x"), pod("x")], "Pod default/x: metadata.name: Duplicate value: 'x'"),
    ],
)
def test_bad_workloads_name_object_and_field(objs: list, message: str) -> None:
    with pytest.raises(InputError) as err:
        build_workload(objs)
    assert message in str(err.value)


def test_device_plugin_view_rounds_fractions_up_to_whole_devices() -> None:
    objs = expand_generator(
        gen([NOTEBOOK, {"name": "train", "type": "job", "arrivals": {"count": 1}, "gpu": {"count": 8}}])
    ).objects
    wl = build_workload(objs)
    templates = {
        (o["metadata"]["namespace"], o["metadata"]["name"]): o
        for o in wl.static
        if o["kind"] == "ResourceClaimTemplate"
    }
    by_kind = {g.kind: g.pods[0] for g in wl.groups}
    nb = to_device_plugin(by_kind["Pod"], templates, {}, {})
    train = to_device_plugin(by_kind["Job"], templates, {}, {})
    assert nb["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert train["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    assert "resourceClaims" not in nb["spec"] and "claims" not in nb["spec"]["containers"][0]["resources"]


def test_random_mutations_of_the_bundled_workload_are_a_workload_or_an_input_error() -> None:
    """What a user's edit of a workload file can break (a value of the wrong type, a field dropped, a
    list repeated) is an InputError listing each problem once, or a workload, never another exception
    (crashes once: a mapping as metadata.name; a wrong-typed container resources reported twice)."""
    import copy
    import random
    from pathlib import Path

    import yaml

    from kdra.api.load import load_text

    text = (Path(__file__).parents[2] / "src/kdra/sim/data/mixed-day.yaml").read_text()
    original = list(yaml.safe_load_all(text))
    weird: list[object] = [None, "", "x", -1, 0, 1.5, 10**30, [], {}, [None], {"a": None}, True, "1Gi", "-5"]
    rng = random.Random(15)

    def places(o: object, at: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        out = [at] if at else []
        items = o.items() if isinstance(o, dict) else enumerate(o) if isinstance(o, list) else []
        for k, v in items:
            out += places(v, (*at, k))
        return out

    outcomes = {"workload": 0, "InputError": 0}
    for _ in range(200):
        docs = copy.deepcopy(original)
        for _ in range(rng.randint(1, 3)):
            *parents, last = rng.choice(places(docs))
            holder: Any = docs
            for k in parents:
                holder = holder[k]
            if isinstance(holder, dict) and rng.random() < 0.3:
                del holder[last]
            elif isinstance(holder[last], list) and holder[last] and rng.random() < 0.3:
                holder[last] = holder[last] * 3
            else:
                holder[last] = copy.deepcopy(rng.choice(weird))
        try:
            build_workload(load_text(yaml.safe_dump_all(docs)), max_pods=300)
            outcomes["workload"] += 1
        except InputError as e:  # every problem once, one line each
            lines = [ln for ln in str(e).splitlines() if not ln.startswith(" | ")]  # CEL's caret lines
            assert len(lines) == len(set(lines)), str(e)
            outcomes["InputError"] += 1
    assert outcomes["workload"] and outcomes["InputError"], outcomes  # both kinds were reached
