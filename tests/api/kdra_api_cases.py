"""A catalogue of objects, mostly invalid, one per validation rule, shared by the recorded-verdict
test (test_api_recorded_verdicts.py) and the script that records what a real kube-apiserver says
about them (record_apiserver_verdicts.py). Each case is (id, object)."""

from __future__ import annotations

import copy
from typing import Any

Obj = dict[str, Any]


def claim(requests: list[Obj] | None = None, name: str = "claim-0", **devices: Any) -> Obj:
    reqs = (
        requests
        if requests is not None
        else [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]
    )
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": reqs, **devices}},
    }


def exact(**fields: Any) -> Obj:
    return {"name": "r", "exactly": {"deviceClassName": "gpu.example.com", **fields}}


def device(name: str = "gpu-0", **fields: Any) -> Obj:
    d: Obj = {
        "name": name,
        "attributes": {"model": {"string": "H100"}, "gpu.example.com/index": {"int": 0}},
        "capacity": {"memory": {"value": "80Gi"}},
    }
    d.update(fields)
    return {k: v for k, v in d.items() if v is not None}


def rslice(devices: Any = ..., name: str = "node-1-gpu", **spec: Any) -> Obj:
    body: Obj = {
        "driver": "gpu.example.com",
        "pool": {"name": "node-1", "generation": 1, "resourceSliceCount": 1},
        "nodeName": "node-1",
        "devices": [device()] if devices is ... else devices,
    }
    body.update(spec)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {k: v for k, v in body.items() if v is not None},
    }


def dclass(name: str = "gpu.example.com", **spec: Any) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": spec,
    }


def template(spec: Obj, name: str = "tmpl") -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


def pod(claims: list[Obj], container_claims: list[Obj], name: str = "pod-0") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "resourceClaims": claims,
            "containers": [
                {
                    "name": "c",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"claims": container_claims},
                }
            ],
        },
    }


def _with(obj: Obj, path: list[str | int], value: Any) -> Obj:
    out = copy.deepcopy(obj)
    cur: Any = out
    for step in path[:-1]:
        cur = cur[step]
    cur[path[-1]] = value
    return out


SEL_TERM = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-1"]}]}
ATTRS = 'device.attributes["a.com"]'
EXPENSIVE_CEL = (
    f"{ATTRS}.exists(k, {ATTRS}.exists(j, {ATTRS}.exists(l, {ATTRS}.exists(m, k + j + l + m == 'x'))))"
)


def cases() -> list[tuple[str, Obj]]:
    c: list[tuple[str, Obj]] = [
        # -- valid objects
        ("claim-valid", claim()),
        ("slice-valid", rslice()),
        ("class-valid", dclass(selectors=[{"cel": {"expression": 'device.driver == "gpu.example.com"'}}])),
        (
            "claim-valid-everything",
            claim(
                [
                    exact(
                        count=2,
                        selectors=[{"cel": {"expression": "true"}}],
                        tolerations=[{"operator": "Exists"}],
                    ),
                    {
                        "name": "fa",
                        "firstAvailable": [
                            {"name": "big", "deviceClassName": "a"},
                            {"name": "small", "deviceClassName": "a", "allocationMode": "All"},
                        ],
                    },
                ],
                constraints=[{"requests": ["r", "fa/big"], "matchAttribute": "gpu.example.com/numa"}],
                config=[
                    {"requests": ["fa"], "opaque": {"driver": "gpu.example.com", "parameters": {"a": 1}}}
                ],
            ),
        ),
        (
            "slice-valid-counters",
            rslice(None, sharedCounters=[{"name": "gpu-0", "counters": {"memory": {"value": "80Gi"}}}]),
        ),
        (
            "slice-valid-partitions",
            rslice(
                [
                    device(
                        consumesCounters=[{"counterSet": "gpu-0", "counters": {"memory": {"value": "10Gi"}}}]
                    )
                ]
            ),
        ),
        (
            "slice-valid-per-device",
            rslice([device(allNodes=True)], nodeName=None, perDeviceNodeSelection=True),
        ),
        ("slice-valid-node-selector", rslice(nodeName=None, nodeSelector={"nodeSelectorTerms": [SEL_TERM]})),
        (
            "slice-valid-request-policy",
            rslice(
                [
                    device(
                        allowMultipleAllocations=True,
                        capacity={
                            "bw": {
                                "value": "100",
                                "requestPolicy": {
                                    "default": "10",
                                    "validRange": {"min": "10", "max": "100", "step": "10"},
                                },
                            }
                        },
                    )
                ]
            ),
        ),
        ("template-valid", template({"spec": {"devices": {"requests": [exact()]}}})),
        ("pod-valid", pod([{"name": "gpu", "resourceClaimTemplateName": "tmpl"}], [{"name": "gpu"}])),
        # -- names
        ("claim-bad-name", _with(claim(), ["metadata", "name"], "Claim_0")),
        ("claim-bad-request-name", claim([{"name": "Gpu", "exactly": {"deviceClassName": "a"}}])),
        ("claim-request-name-dots", claim([{"name": "a.b", "exactly": {"deviceClassName": "a"}}])),
        ("claim-request-name-long", claim([{"name": "a" * 64, "exactly": {"deviceClassName": "a"}}])),
        ("claim-bad-class-name", claim([exact(deviceClassName="GPU!")])),
        ("claim-empty-class-name", claim([exact(deviceClassName="")])),
        ("class-bad-name", dclass(name="Bad_Class")),
        ("slice-bad-name", rslice(name="Slice_1")),
        ("slice-bad-driver", rslice(driver="Bad_Driver")),
        ("slice-long-driver", rslice(driver="a" * 64 + ".com")),
        ("slice-bad-pool", rslice(pool={"name": "a//b", "generation": 1, "resourceSliceCount": 1})),
        ("slice-empty-pool", rslice(pool={"name": "", "generation": -1, "resourceSliceCount": 0})),
        ("slice-bad-node-name", rslice(nodeName="Node_1")),
        ("slice-bad-device-name", rslice([device("GPU-0")])),
        ("slice-duplicate-device", rslice([device(), device()])),
        ("slice-attr-bad-id", rslice([device(attributes={"bad-id": {"string": "x"}})])),
        ("slice-attr-long-id", rslice([device(attributes={"x" * 33: {"string": "x"}})])),
        ("slice-attr-bad-domain", rslice([device(attributes={"Bad_Domain/x": {"string": "x"}})])),
        ("slice-attr-empty-domain", rslice([device(attributes={"/x": {"string": "x"}})])),
        ("slice-attr-empty-id", rslice([device(attributes={"a.com/": {"string": "x"}})])),
        ("slice-attr-two-slashes", rslice([device(attributes={"a/b/c": {"string": "x"}})])),
        ("slice-capacity-bad-name", rslice([device(capacity={"mem-ory": {"value": "1"}})])),
        # -- attribute values
        ("slice-attr-long-string", rslice([device(attributes={"s": {"string": "x" * 65}})])),
        ("slice-attr-bad-version", rslice([device(attributes={"v": {"version": "1.2"}})])),
        ("slice-attr-no-value", rslice([device(attributes={"v": {}})])),
        ("slice-attr-two-values", rslice([device(attributes={"v": {"int": 1, "bool": True}})])),
        (
            "slice-too-many-attrs",
            rslice(
                [
                    device(
                        attributes={f"a{i}": {"int": i} for i in range(30)},
                        capacity={f"c{i}": {"value": "1"} for i in range(3)},
                    )
                ]
            ),
        ),
        # -- limits
        (
            "claim-33-requests",
            claim([{"name": f"r{i}", "exactly": {"deviceClassName": "a"}} for i in range(33)]),
        ),
        (
            "claim-9-subrequests",
            claim(
                [
                    {
                        "name": "r",
                        "firstAvailable": [{"name": f"s{i}", "deviceClassName": "a"} for i in range(9)],
                    }
                ]
            ),
        ),
        ("claim-33-selectors", claim([exact(selectors=[{"cel": {"expression": "true"}}] * 33)])),
        ("claim-33-constraints", claim(constraints=[{"matchAttribute": "a.com/x"}] * 33)),
        ("claim-33-configs", claim(config=[{"opaque": {"driver": "a.com", "parameters": {}}}] * 33)),
        ("claim-17-tolerations", claim([exact(tolerations=[{"operator": "Exists"}] * 17)])),
        (
            "claim-33-constraint-requests",
            claim(
                [{"name": f"r{i}", "exactly": {"deviceClassName": "a"}} for i in range(2)],
                constraints=[{"requests": ["r0"] * 33, "matchAttribute": "a.com/x"}],
            ),
        ),
        ("slice-129-devices", rslice([device(f"d{i}") for i in range(129)])),
        (
            "slice-65-tainted-devices",
            rslice([device(f"d{i}", taints=[{"key": "k", "effect": "NoSchedule"}]) for i in range(65)]),
        ),
        (
            "slice-17-taints",
            rslice([device(taints=[{"key": f"k{i}", "effect": "NoSchedule"} for i in range(17)])]),
        ),
        (
            "slice-9-counter-sets",
            rslice(
                None, sharedCounters=[{"name": f"s{i}", "counters": {"c": {"value": "1"}}} for i in range(9)]
            ),
        ),
        (
            "slice-33-counters",
            rslice(
                None, sharedCounters=[{"name": "s", "counters": {f"c{i}": {"value": "1"} for i in range(33)}}]
            ),
        ),
        (
            "slice-3-consumptions",
            rslice(
                [
                    device(
                        consumesCounters=[
                            {"counterSet": f"s{i}", "counters": {"c": {"value": "1"}}} for i in range(3)
                        ]
                    )
                ]
            ),
        ),
        (
            "slice-33-consumed-counters",
            rslice(
                [
                    device(
                        consumesCounters=[
                            {"counterSet": "s", "counters": {f"c{i}": {"value": "1"} for i in range(33)}}
                        ]
                    )
                ]
            ),
        ),
        (
            "slice-5-binding-conditions",
            rslice([device(bindingConditions=list("abcde"), bindingFailureConditions=["f"])]),
        ),
        (
            "slice-11-valid-values",
            rslice(
                [
                    device(
                        allowMultipleAllocations=True,
                        capacity={
                            "c": {
                                "value": "100",
                                "requestPolicy": {
                                    "default": "1",
                                    "validValues": [str(i) for i in range(1, 12)],
                                },
                            }
                        },
                    )
                ]
            ),
        ),
        ("class-33-selectors", dclass(selectors=[{"cel": {"expression": "true"}}] * 33)),
        ("class-33-configs", dclass(config=[{"opaque": {"driver": "a.com", "parameters": {}}}] * 33)),
        # -- request rules
        ("claim-request-no-kind", claim([{"name": "r"}])),
        (
            "claim-request-both-kinds",
            claim(
                [
                    {
                        "name": "r",
                        "exactly": {"deviceClassName": "a"},
                        "firstAvailable": [{"name": "s", "deviceClassName": "a"}],
                    }
                ]
            ),
        ),
        ("claim-all-with-count", claim([exact(allocationMode="All", count=1)])),
        ("claim-negative-count", claim([exact(count=-1)])),
        ("claim-bad-mode", claim([exact(allocationMode="Some")])),
        ("claim-duplicate-requests", claim([exact(), exact()])),
        (
            "claim-duplicate-subrequests",
            claim([{"name": "r", "firstAvailable": [{"name": "s", "deviceClassName": "a"}] * 2}]),
        ),
        (
            "claim-constraint-unknown-request",
            claim(constraints=[{"requests": ["nope"], "matchAttribute": "a.com/x"}]),
        ),
        (
            "claim-constraint-bad-subrequest",
            claim(
                [{"name": "r", "firstAvailable": [{"name": "s", "deviceClassName": "a"}]}],
                constraints=[{"requests": ["r/t", "r/s/x"], "matchAttribute": "a.com/x"}],
            ),
        ),
        ("claim-constraint-not-qualified", claim(constraints=[{"matchAttribute": "numa"}])),
        ("claim-constraint-no-attribute", claim(constraints=[{"requests": ["gpu"]}])),
        ("claim-constraint-distinct", claim(constraints=[{"distinctAttribute": "a.com/x"}])),
        ("claim-config-no-opaque", claim(config=[{"requests": ["gpu"]}])),
        ("claim-config-bad-driver", claim(config=[{"opaque": {"driver": "Bad_Driver", "parameters": {}}}])),
        (
            "claim-config-params-not-object",
            claim(config=[{"opaque": {"driver": "a.com", "parameters": ["x"]}}]),
        ),
        (
            "claim-config-params-too-long",
            claim(config=[{"opaque": {"driver": "a.com", "parameters": {"x": "y" * 11000}}}]),
        ),
        (
            "claim-config-unknown-request",
            claim(config=[{"requests": ["nope"], "opaque": {"driver": "a.com", "parameters": {}}}]),
        ),
        ("claim-toleration-exists-value", claim([exact(tolerations=[{"operator": "Exists", "value": "x"}])])),
        (
            "claim-toleration-bad-key",
            claim([exact(tolerations=[{"key": "bad key", "operator": "Equal", "value": "v"}])]),
        ),
        (
            "claim-toleration-bad-value",
            claim([exact(tolerations=[{"key": "k", "operator": "Equal", "value": "bad value"}])]),
        ),
        ("claim-toleration-bad-operator", claim([exact(tolerations=[{"operator": "Maybe"}])])),
        ("claim-toleration-bad-effect", claim([exact(tolerations=[{"key": "k", "effect": "Sometimes"}])])),
        ("claim-selector-no-cel", claim([exact(selectors=[{}])])),
        ("claim-bad-capacity-request", claim([exact(capacity={"requests": {"memory": "1Mm"}})])),
        # -- CEL
        ("class-cel-undeclared", dclass(selectors=[{"cel": {"expression": "noSuchVar"}}])),
        ("class-cel-syntax", dclass(selectors=[{"cel": {"expression": "device.driver =="}}])),
        ("class-cel-not-bool", dclass(selectors=[{"cel": {"expression": "device.driver"}}])),
        ("class-cel-bad-types", dclass(selectors=[{"cel": {"expression": "1 + 'a'"}}])),
        ("class-cel-no-such-field", dclass(selectors=[{"cel": {"expression": "device.nope == 1"}}])),
        ("class-cel-too-long", dclass(selectors=[{"cel": {"expression": "true && " * 1300 + "true"}}])),
        ("class-cel-too-expensive", dclass(selectors=[{"cel": {"expression": EXPENSIVE_CEL}}])),
        ("class-cel-empty", dclass(selectors=[{"cel": {"expression": ""}}])),
        ("class-extended-resource-bad", dclass(extendedResourceName="gpu")),
        ("class-extended-resource-ok", dclass(extendedResourceName="example.com/gpu")),
        # -- slices
        ("slice-node-name-and-all-nodes", rslice(allNodes=True)),
        ("slice-no-node-selection", rslice(nodeName=None)),
        ("slice-all-nodes-false", rslice(nodeName=None, allNodes=False)),
        (
            "slice-two-selector-terms",
            rslice(nodeName=None, nodeSelector={"nodeSelectorTerms": [SEL_TERM, SEL_TERM]}),
        ),
        ("slice-empty-node-name", rslice(nodeName="")),
        (
            "slice-bad-node-selector",
            rslice(
                nodeName=None,
                nodeSelector={
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "a", "operator": "In"},
                                {"key": "b", "operator": "Exists", "values": ["x"]},
                                {"key": "c", "operator": "Gt", "values": ["1", "2"]},
                                {"key": "d", "operator": "Near"},
                                {"key": "bad key", "operator": "In", "values": ["bad value"]},
                            ],
                            "matchFields": [{"key": "metadata.uid", "operator": "In", "values": ["x"]}],
                        }
                    ]
                },
            ),
        ),
        (
            "slice-per-device-missing",
            rslice([device(nodeName="node-1"), device("gpu-1")], nodeName=None, perDeviceNodeSelection=True),
        ),
        (
            "slice-per-device-two",
            rslice([device(nodeName="node-1", allNodes=True)], nodeName=None, perDeviceNodeSelection=True),
        ),
        ("slice-device-node-without-per-device", rslice([device(allNodes=True)])),
        (
            "slice-devices-and-counters",
            rslice(sharedCounters=[{"name": "s", "counters": {"c": {"value": "1"}}}]),
        ),
        ("slice-counter-set-no-name", rslice(None, sharedCounters=[{"counters": {"c": {"value": "1"}}}])),
        (
            "slice-counter-set-bad-name",
            rslice(None, sharedCounters=[{"name": "Set_1", "counters": {"c": {"value": "1"}}}]),
        ),
        (
            "slice-counter-bad-name",
            rslice(None, sharedCounters=[{"name": "s", "counters": {"Bad_C": {"value": "1"}}}]),
        ),
        (
            "slice-counter-set-duplicate",
            rslice(None, sharedCounters=[{"name": "s", "counters": {"c": {"value": "1"}}}] * 2),
        ),
        ("slice-consumption-no-counters", rslice([device(consumesCounters=[{"counterSet": "s"}])])),
        (
            "slice-consumption-duplicate",
            rslice([device(consumesCounters=[{"counterSet": "s", "counters": {"c": {"value": "1"}}}] * 2)]),
        ),
        ("slice-taint-no-effect", rslice([device(taints=[{"key": "k"}])])),
        ("slice-taint-bad-effect", rslice([device(taints=[{"key": "k", "effect": "Later"}])])),
        ("slice-taint-no-key", rslice([device(taints=[{"effect": "None"}])])),
        (
            "slice-taint-bad-value",
            rslice([device(taints=[{"key": "k", "value": "bad value", "effect": "NoSchedule"}])]),
        ),
        ("slice-binding-only-conditions", rslice([device(bindingConditions=["ready"])])),
        ("slice-binding-only-failures", rslice([device(bindingFailureConditions=["failed"])])),
        ("slice-binding-overlap", rslice([device(bindingConditions=["a"], bindingFailureConditions=["a"])])),
        (
            "slice-binding-duplicate",
            rslice([device(bindingConditions=["a", "a"], bindingFailureConditions=["b"])]),
        ),
        (
            "slice-binding-bad-name",
            rslice([device(bindingConditions=["bad name"], bindingFailureConditions=["b"])]),
        ),
        (
            "slice-policy-without-multi",
            rslice(
                [
                    device(
                        capacity={
                            "c": {"value": "10", "requestPolicy": {"default": "1", "validValues": ["1"]}}
                        }
                    )
                ]
            ),
        ),
        (
            "slice-policy-both",
            rslice(
                [
                    device(
                        allowMultipleAllocations=True,
                        capacity={
                            "c": {
                                "value": "10",
                                "requestPolicy": {
                                    "default": "1",
                                    "validValues": ["1"],
                                    "validRange": {"min": "1"},
                                },
                            }
                        },
                    )
                ]
            ),
        ),
        (
            "slice-policy-values-unsorted",
            rslice(
                [
                    device(
                        allowMultipleAllocations=True,
                        capacity={
                            "c": {
                                "value": "10",
                                "requestPolicy": {"default": "3", "validValues": ["1", "4", "2", "20"]},
                            }
                        },
                    )
                ]
            ),
        ),
        (
            "slice-policy-values-no-default",
            rslice(
                [
                    device(
                        allowMultipleAllocations=True,
                        capacity={"c": {"value": "10", "requestPolicy": {"validValues": ["1"]}}},
                    )
                ]
            ),
        ),
        (
            "slice-policy-values-duplicate",
            rslice(
                [
                    device(
                        allowMultipleAllocations=True,
                        capacity={
                            "c": {"value": "10", "requestPolicy": {"default": "1", "validValues": ["1", "1"]}}
                        },
                    )
                ]
            ),
        ),
        (
            "slice-policy-range-no-min",
            rslice(
                [
                    device(
                        allowMultipleAllocations=True,
                        capacity={
                            "c": {
                                "value": "10",
                                "requestPolicy": {"default": "1", "validRange": {"max": "5"}},
                            }
                        },
                    )
                ]
            ),
        ),
        (
            "slice-policy-range-bounds",
            rslice(
                [
                    device(
                        allowMultipleAllocations=True,
                        capacity={
                            "c": {
                                "value": "10",
                                "requestPolicy": {"default": "1", "validRange": {"min": "20", "max": "15"}},
                            }
                        },
                    )
                ]
            ),
        ),
        (
            "slice-policy-range-step",
            rslice(
                [
                    device(
                        allowMultipleAllocations=True,
                        capacity={
                            "c": {
                                "value": "10",
                                "requestPolicy": {
                                    "default": "3",
                                    "validRange": {"min": "2", "max": "9", "step": "4"},
                                },
                            }
                        },
                    )
                ]
            ),
        ),
        (
            "slice-policy-range-zero-step",
            rslice(
                [
                    device(
                        allowMultipleAllocations=True,
                        capacity={
                            "c": {
                                "value": "10",
                                "requestPolicy": {"default": "3", "validRange": {"min": "2", "step": "0"}},
                            }
                        },
                    )
                ]
            ),
        ),
        (
            "slice-policy-range-no-default",
            rslice(
                [
                    device(
                        allowMultipleAllocations=True,
                        capacity={"c": {"value": "10", "requestPolicy": {"validRange": {"min": "2"}}}},
                    )
                ]
            ),
        ),
        (
            "slice-policy-range-default-above-max",
            rslice(
                [
                    device(
                        allowMultipleAllocations=True,
                        capacity={
                            "c": {
                                "value": "10",
                                "requestPolicy": {"default": "8", "validRange": {"min": "1", "max": "5"}},
                            }
                        },
                    )
                ]
            ),
        ),
        (
            "slice-policy-range-max-not-multiple",
            rslice(
                [
                    device(
                        allowMultipleAllocations=True,
                        capacity={
                            "c": {
                                "value": "10",
                                "requestPolicy": {
                                    "default": "2",
                                    "validRange": {"min": "2", "max": "9", "step": "4"},
                                },
                            }
                        },
                    )
                ]
            ),
        ),
        (
            "slice-policy-value-above-capacity",
            rslice(
                [
                    device(
                        allowMultipleAllocations=True,
                        capacity={
                            "c": {
                                "value": "10",
                                "requestPolicy": {"default": "1", "validValues": ["1", "20"]},
                            }
                        },
                    )
                ]
            ),
        ),
        ("slice-capacity-no-value", rslice([device(capacity={"memory": {}})])),
        ("slice-multi-no-policy", rslice([device(allowMultipleAllocations=True)])),
        ("slice-attr-list-gate-off", rslice([device(attributes={"numa": {"ints": [0, 1]}})])),
        ("slice-attr-empty-list-gate-off", rslice([device(attributes={"numa": {"strings": []}})])),
        ("slice-attr-long-version", rslice([device(attributes={"v": {"version": "1.0.0-" + "a" * 70}})])),
        ("slice-device-empty-name", rslice([device("")])),
        (
            "slice-pool-name-too-long",
            rslice(pool={"name": "a" * 254, "generation": 0, "resourceSliceCount": 1}),
        ),
        (
            "slice-taint-bad-key-prefix",
            rslice([device(taints=[{"key": "Bad_Prefix/k", "effect": "NoSchedule"}])]),
        ),
        (
            "claim-constraint-both-attributes",
            claim(constraints=[{"matchAttribute": "a.com/x", "distinctAttribute": "a.com/y"}]),
        ),
        ("claim-admin-access", claim([exact(adminAccess=True)])),
        ("claim-config-no-driver", claim(config=[{"opaque": {"driver": "", "parameters": {}}}])),
        ("claim-config-no-parameters", claim(config=[{"opaque": {"driver": "a.com"}}])),
        ("claim-zero-count", claim([exact(count=0)])),
        (
            "claim-subrequest-bad",
            claim(
                [
                    {
                        "name": "r",
                        "firstAvailable": [
                            {"name": "s", "deviceClassName": "", "allocationMode": "All", "count": 2}
                        ],
                    }
                ]
            ),
        ),
        (
            "claim-no-namespace-name",
            _with(claim(), ["metadata"], {"generateName": "claim-", "namespace": "default"}),
        ),
        ("class-config-no-opaque", dclass(config=[{}])),
        # -- metadata
        (
            "claim-bad-labels",
            _with(claim(), ["metadata", "labels"], {"bad key": "v", "ok": "bad value", "a.com/b": "x" * 64}),
        ),
        (
            "claim-bad-annotations",
            _with(claim(), ["metadata", "annotations"], {"bad key": "v", "Example.COM/ok": "any value"}),
        ),
        ("claim-bad-namespace", _with(claim(), ["metadata", "namespace"], "Bad_NS")),
        ("claim-no-name", _with(claim(), ["metadata"], {"namespace": "default"})),
        ("class-long-name", dclass(name="a" * 254)),
        ("class-with-namespace", _with(dclass(), ["metadata", "namespace"], "default")),
        ("node-bad-name", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "Node_1"}}),
        (
            "node-valid",
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": "node-1", "labels": {"kubernetes.io/hostname": "node-1"}},
            },
        ),
        (
            "template-metadata-annotations",
            template({"metadata": {"annotations": {"bad key": "v"}}, "spec": {"devices": {}}}),
        ),
        (
            "slice-taint-long-value",
            rslice([device(taints=[{"key": "k", "value": "v" * 64, "effect": "NoSchedule"}])]),
        ),
        (
            "slice-taint-long-key",
            rslice([device(taints=[{"key": "a.com/" + "k" * 64, "effect": "NoSchedule"}])]),
        ),
        (
            "slice-selector-long-value",
            rslice(
                nodeName=None,
                nodeSelector={
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "k", "operator": "In", "values": ["v" * 64]}]}
                    ]
                },
            ),
        ),
        (
            "claim-toleration-long-value",
            claim([exact(tolerations=[{"key": "k", "operator": "Equal", "value": "v" * 64}])]),
        ),
        ("claim-long-name", _with(claim(), ["metadata", "name"], "a" * 254)),
        ("claim-long-label-key", _with(claim(), ["metadata", "labels"], {"a.com/" + "k" * 64: "v"})),
        ("template-admin-access", template({"spec": {"devices": {"requests": [exact(adminAccess=True)]}}})),
        (
            "template-metadata-name",
            template({"metadata": {"name": "x", "labels": {"a": "b"}}, "spec": {"devices": {}}}),
        ),
        (
            "class-config-params-not-object",
            dclass(config=[{"opaque": {"driver": "a.com", "parameters": "x"}}]),
        ),
        ("class-selector-cel-missing-expression", dclass(selectors=[{"cel": {}}])),
        (
            "claim-subrequest-selector-bad-cel",
            claim(
                [
                    {
                        "name": "r",
                        "firstAvailable": [
                            {
                                "name": "s",
                                "deviceClassName": "a",
                                "selectors": [{"cel": {"expression": "device.x"}}],
                            }
                        ],
                    }
                ]
            ),
        ),
        ("claim-capacity-requests-bad-name", claim([exact(capacity={"requests": {"bad-name": "1"}})])),
        ("slice-attr-bad-bool-list", rslice([device(attributes={"b": {"bools": [True], "int": 1}})])),
        (
            "slice-consumption-no-set",
            rslice([device(consumesCounters=[{"counters": {"c": {"value": "1"}}}])]),
        ),
        ("slice-generation-missing", rslice(pool={"name": "node-1", "resourceSliceCount": 1})),
        ("slice-count-missing", rslice(pool={"name": "node-1", "generation": 1})),
        (
            "pod-init-container-claims",
            {
                **pod([{"name": "gpu", "resourceClaimName": "c"}], []),
                "spec": {
                    "resourceClaims": [{"name": "gpu", "resourceClaimName": "c"}],
                    "initContainers": [
                        {"name": "i", "image": "x", "resources": {"claims": [{"name": "nope"}]}}
                    ],
                    "containers": [{"name": "c", "image": "x"}],
                },
            },
        ),
        ("slice-attr-multibyte-string", rslice([device(attributes={"s": {"string": "é" * 33}})])),
        ("slice-attr-multibyte-ok", rslice([device(attributes={"s": {"string": "é" * 32}})])),
        ("slice-empty-devices", rslice([])),
        (
            "slice-empty-devices-and-counters",
            rslice([], sharedCounters=[{"name": "s", "counters": {"c": {"value": "1"}}}]),
        ),
        (
            "node-bad-label",
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "labels": {"a": "b c"}}},
        ),
        # -- quantities (the API server fails these in decoding)
        ("slice-bad-quantity", rslice([device(capacity={"memory": {"value": "80 Gi"}})])),
        (
            "slice-bad-counter-quantity",
            rslice(None, sharedCounters=[{"name": "s", "counters": {"c": {"value": "lots"}}}]),
        ),
        # -- wrong JSON types (the API server fails these in decoding)
        ("claim-count-string", claim([exact(count="two")])),
        ("slice-attributes-list", rslice([device(attributes=[{"model": "x"}])])),
        ("claim-requests-map", _with(claim(), ["spec", "devices", "requests"], {"name": "gpu"})),
        ("slice-spec-string", _with(rslice(), ["spec"], "oops")),
        # -- templates and pods
        (
            "template-bad-request",
            template(
                {"spec": {"devices": {"requests": [{"name": "R", "exactly": {"deviceClassName": "a"}}]}}}
            ),
        ),
        ("template-bad-label", template({"metadata": {"labels": {"bad key": "v"}}, "spec": {"devices": {}}})),
        (
            "pod-duplicate-claim",
            pod(
                [
                    {"name": "gpu", "resourceClaimTemplateName": "t"},
                    {"name": "gpu", "resourceClaimName": "c"},
                ],
                [],
            ),
        ),
        (
            "pod-claim-both-sources",
            pod([{"name": "x", "resourceClaimName": "c", "resourceClaimTemplateName": "t"}], []),
        ),
        ("pod-claim-no-source", pod([{"name": "y"}], [])),
        ("pod-claim-bad-name", pod([{"name": "Bad", "resourceClaimName": "c"}], [])),
        ("pod-container-unknown-claim", pod([{"name": "gpu", "resourceClaimName": "c"}], [{"name": "nope"}])),
        ("pod-container-no-claims", pod([], [{"name": "nope"}])),
        (
            "pod-container-duplicate-claim",
            pod([{"name": "gpu", "resourceClaimName": "c"}], [{"name": "gpu"}, {"name": "gpu"}]),
        ),
        (
            "pod-container-bad-request",
            pod([{"name": "gpu", "resourceClaimName": "c"}], [{"name": "gpu", "request": "Bad"}]),
        ),
    ]
    return c


# ---- status.allocation / reservedFor: validated by the API server on the status subresource ----------

STATUS_CLAIM = claim(
    [
        {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}},
        {
            "name": "fa",
            "firstAvailable": [
                {"name": "big", "deviceClassName": "a"},
                {"name": "small", "deviceClassName": "a"},
            ],
        },
    ],
    name="status-claim",
)

UID = "5f1c7a3e-2b4d-4c6e-8f90-1a2b3c4d5e6f"


def result(request: str = "gpu", device: str = "gpu-0", **extra: Any) -> Obj:
    return {"request": request, "driver": "gpu.example.com", "pool": "node-1", "device": device, **extra}


def allocation(*results: Obj, **extra: Any) -> Obj:
    return {"devices": {"results": list(results)}, **extra}


def pod_ref(i: int = 0) -> Obj:
    return {"resource": "pods", "name": f"pod-{i}", "uid": f"uid-{i}"}


def status_cases() -> list[tuple[str, Obj]]:
    node_sel = {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}
        ]
    }
    return [
        (
            "status-valid",
            {"allocation": allocation(result(), result("fa/big", "gpu-1"), nodeSelector=node_sel)},
        ),
        (
            "status-valid-reserved",
            {"allocation": allocation(result()), "reservedFor": [pod_ref(0), pod_ref(1)]},
        ),
        (
            "status-valid-share",
            {"allocation": allocation(result(shareID=UID, consumedCapacity={"memory": "10Gi"}))},
        ),
        ("status-33-results", {"allocation": allocation(*[result(device=f"d{i}") for i in range(33)])}),
        (
            "status-257-reserved",
            {"allocation": allocation(result()), "reservedFor": [pod_ref(i) for i in range(257)]},
        ),
        ("status-reserved-without-allocation", {"reservedFor": [pod_ref()]}),
        (
            "status-reserved-duplicate",
            {"allocation": allocation(result()), "reservedFor": [pod_ref(), pod_ref()]},
        ),
        (
            "status-reserved-missing-fields",
            {"allocation": allocation(result()), "reservedFor": [{"apiGroup": "x"}]},
        ),
        (
            "status-unknown-request",
            {"allocation": allocation(result("nope"), result("fa/none"), result("fa"))},
        ),
        (
            "status-bad-result-names",
            {"allocation": allocation({"request": "gpu", "driver": "", "pool": "a//b", "device": "D"})},
        ),
        (
            "status-bad-share-id",
            {
                "allocation": allocation(
                    result(shareID="not-a-uuid"), result(device="g2", shareID=UID.upper())
                )
            },
        ),
        ("status-binding-conditions", {"allocation": allocation(result(bindingConditions=["ready"]))}),
        (
            "status-bad-tolerations",
            {"allocation": allocation(result(tolerations=[{"operator": "Exists", "value": "x"}]))},
        ),
        (
            "status-bad-config",
            {
                "allocation": {
                    "devices": {
                        "results": [result()],
                        "config": [
                            {"source": "FromNowhere", "opaque": {"driver": "a.com", "parameters": {}}},
                            {"source": "FromClaim", "requests": ["nope"]},
                        ],
                    }
                }
            },
        ),
        (
            "status-empty-node-selector",
            {"allocation": allocation(result(), nodeSelector={"nodeSelectorTerms": []})},
        ),
        (
            "status-devices",
            {
                "allocation": allocation(result()),
                "devices": [
                    {"driver": "gpu.example.com", "pool": "node-1", "device": "gpu-0"},
                    {
                        "driver": "gpu.example.com",
                        "pool": "node-1",
                        "device": "gpu-9",
                        "networkData": {"ips": ["10.0.0.1/24"] * 2},
                    },
                ],
            },
        ),
    ]


# ---- the Workload API (scheduling.k8s.io/v1beta1, Kubernetes 1.38 with GenericWorkload and
# DRAWorkloadResourceClaims): PodGroup-level ResourceClaims (KEP-5729) --------------------------------

WORKLOAD_GATES = "GenericWorkload=true,DRAWorkloadResourceClaims=true"


def pod_group(claims: Any, name: str = "pg-0", api: str = "scheduling.k8s.io/v1beta1") -> Obj:
    return {
        "apiVersion": api,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}, "resourceClaims": claims},
    }


def workload(*template_claims: Any, name: str = "wl-0") -> Obj:
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "podGroupTemplates": [
                {"name": f"t{i}", "schedulingPolicy": {"gang": {"minCount": 2}}, "resourceClaims": c}
                for i, c in enumerate(template_claims)
            ]
        },
    }


def workload_cases() -> list[tuple[str, Obj]]:
    named = {"name": "a", "resourceClaimName": "x"}
    return [
        ("podgroup-claims-valid", pod_group([named, {"name": "b", "resourceClaimTemplateName": "t"}])),
        ("podgroup-claims-empty", pod_group([])),
        (
            "podgroup-claims-too-many",
            pod_group([{"name": n, "resourceClaimName": "x"} for n in "abcde"] + [{"name": "F"}]),
        ),
        ("podgroup-claim-both-sources", pod_group([{**named, "resourceClaimTemplateName": "t"}])),
        ("podgroup-claim-no-source", pod_group([{"name": "a"}])),
        ("podgroup-claim-no-name", pod_group([{"resourceClaimName": "x"}])),
        ("podgroup-claim-empty-name", pod_group([{"name": "", "resourceClaimName": "x"}])),
        ("podgroup-claim-bad-names", pod_group([{"name": "A_b", "resourceClaimName": "X_y"}])),
        ("podgroup-claim-long-name", pod_group([{"name": "a" * 64, "resourceClaimName": "x"}])),
        ("podgroup-claim-bad-template", pod_group([{"name": "a", "resourceClaimTemplateName": "bad/name"}])),
        ("podgroup-claim-empty-claim-name", pod_group([{"name": "a", "resourceClaimName": ""}])),
        ("podgroup-claims-duplicate", pod_group([named, {"name": "a", "resourceClaimName": "z"}])),
        (
            "podgroup-claims-several-problems",
            pod_group(
                [
                    {"name": "A"},
                    {"name": "b", "resourceClaimName": "x"},
                    {"name": "b", "resourceClaimName": "x"},
                ]
            ),
        ),
        (
            "workload-template-claims",
            workload(
                [{"name": n, "resourceClaimName": "x"} for n in "abcde"],
                [{"name": "a", "resourceClaimName": "x", "resourceClaimTemplateName": "y"}, {"name": "B"}],
                [named],
            ),
        ),
    ]
