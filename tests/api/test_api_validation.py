# ruff: noqa: E501  (upstream messages are quoted whole)
"""API-server validation rules, one test per rule or limit (dra-semantics.md section 3), with
upstream's wording. Bad input of every kind must give field errors, never a traceback."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kdra.errors import InputError
from kdra.validation.rules import FieldError, validate, validate_objects

LABEL_ERR = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
    "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)


def claim(requests: list[dict[str, Any]] | None = None, **devices: Any) -> dict[str, Any]:
    reqs = (
        requests
        if requests is not None
        else [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]
    )
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "claim-0", "namespace": "default"},
        "spec": {"devices": {"requests": reqs, **devices}},
    }


def device(name: str = "gpu-0", **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "attributes": {"model": {"string": "H100"}, "gpu.example.com/index": {"int": 0}},
        "capacity": {"memory": {"value": "80Gi"}},
        **fields,
    }


def rslice(devices: Any = ..., **spec: Any) -> dict[str, Any]:
    """A valid slice; `devices=None` leaves the list out, the default is one device."""
    body: dict[str, Any] = {
        "driver": "gpu.example.com",
        "pool": {"name": "node-1", "generation": 1, "resourceSliceCount": 1},
        "nodeName": "node-1",
        "devices": [device()] if devices is ... else devices,
    }
    body.update(spec)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "node-1-gpu"},
        "spec": {k: v for k, v in body.items() if v is not None},
    }


def dclass(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu.example.com"},
        "spec": spec,
    }


def lines(obj: dict[str, Any], **kw: Any) -> list[str]:
    return [str(e) for e in validate(obj, **kw)]


def test_valid_objects_pass() -> None:
    assert lines(claim()) == []
    assert lines(rslice()) == []
    assert lines(dclass(selectors=[{"cel": {"expression": 'device.driver == "gpu.example.com"'}}])) == []


def test_field_error_str() -> None:
    e = FieldError("spec.x", "Invalid value", "a", "bad")
    assert str(e) == 'spec.x: Invalid value: "a": bad'
    assert str(FieldError("spec.x", "Required value")) == "spec.x: Required value"
    assert str(FieldError("spec.x", "Invalid value", None, "d")) == "spec.x: Invalid value: null: d"
    assert str(FieldError("spec.x", "Too many", 33, "must have at most 32 items")) == (
        "spec.x: Too many: 33: must have at most 32 items"
    )


# ---- names ---------------------------------------------------------------------------------------------


def test_bad_request_name_wording() -> None:
    c = claim([{"name": "Gpu", "exactly": {"deviceClassName": "gpu"}}])
    assert lines(c) == [f'spec.devices.requests[0].name: Invalid value: "Gpu": {LABEL_ERR}']


def test_request_name_with_dots() -> None:
    c = claim([{"name": "a.b", "exactly": {"deviceClassName": "gpu"}}])
    assert lines(c) == ['spec.devices.requests[0].name: Invalid value: "a.b": must not contain dots']


def test_bad_object_name() -> None:
    c = claim()
    c["metadata"]["name"] = "Claim_0"
    assert lines(c)[0].startswith('metadata.name: Invalid value: "Claim_0": a lowercase RFC 1123 subdomain')


def test_missing_name() -> None:
    c = claim()
    del c["metadata"]["name"]
    assert lines(c) == ["metadata.name: Required value: name or generateName is required"]


def test_cluster_scoped_namespace_ignored() -> None:
    """kube-apiserver 1.36.3 accepts (and drops) a namespace on a cluster-scoped object (recorded)."""
    s = rslice()
    s["metadata"]["namespace"] = "default"
    assert lines(s) == []


def test_bad_class_name() -> None:
    c = claim([{"name": "gpu", "exactly": {"deviceClassName": "GPU!"}}])
    assert lines(c)[0].startswith('spec.devices.requests[0].exactly.deviceClassName: Invalid value: "GPU!"')


def test_bad_driver_name_too_long() -> None:
    s = rslice(driver="a" * 64 + ".com")
    assert "spec.driver: Too long: may not be more than 63 bytes" in lines(s)


def test_attribute_names() -> None:
    d = device(attributes={"bad-name": {"string": "x"}, "a/b/c": {"int": 1}, "x" * 33: {"bool": True}})
    out = lines(rslice([d]))
    assert any(
        o.startswith('spec.devices[0].attributes: Invalid value: "bad-name": a valid C identifier')
        for o in out
    )
    # more than one slash: accepted by kube-apiserver 1.36.3 (recorded), so by kdra too
    assert not any('"a/b/c"' in o for o in out)
    assert "spec.devices[0].attributes: Too long: may not be more than 32 bytes" in out


def test_attribute_value_rules() -> None:
    d = device(
        attributes={
            "s": {"string": "x" * 65},
            "v": {"version": "1.2"},
            "two": {"int": 1, "bool": True},
            "none": {},
        }
    )
    out = lines(rslice([d]))
    assert "spec.devices[0].attributes[s].string: Too long: may not be more than 64 bytes" in out
    assert (
        'spec.devices[0].attributes[v].version: Invalid value: "1.2": must be a string compatible with semver.org '
        "spec 2.0.0"
    ) in out
    assert 'spec.devices[0].attributes[none]: Invalid value: "": exactly one value must be specified' in out
    assert any(o.startswith("spec.devices[0].attributes[two]: Invalid value: {") for o in out)


def test_list_attributes() -> None:
    d = device(attributes={"numa": {"ints": [0, 1]}, "empty": {"strings": []}})
    out = lines(rslice([d]), list_type_attributes=True)
    assert out == [
        "spec.devices[0].attributes[empty].strings: Invalid value: []: must not be empty if specified"
    ]
    # DRAListTypeAttributes is off by default in 1.36: the API server drops list fields, leaving no value
    assert lines(rslice([d])) == [
        'spec.devices[0].attributes[empty]: Invalid value: "": exactly one value must be specified',
        'spec.devices[0].attributes[numa]: Invalid value: "": exactly one value must be specified',
    ]


# ---- list limits ----------------------------------------------------------------------------------------


def _req(i: int) -> dict[str, Any]:
    return {"name": f"r{i}", "exactly": {"deviceClassName": "gpu"}}


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (
            claim([_req(i) for i in range(33)]),
            "spec.devices.requests: Too many: 33: must have at most 32 items",
        ),
        (
            claim(
                [
                    {
                        "name": "r",
                        "firstAvailable": [{"name": f"s{i}", "deviceClassName": "gpu"} for i in range(9)],
                    }
                ]
            ),
            "spec.devices.requests[0].firstAvailable: Too many: 9: must have at most 8 items",
        ),
        (
            claim(
                [
                    {
                        "name": "r",
                        "exactly": {
                            "deviceClassName": "gpu",
                            "selectors": [{"cel": {"expression": "true"}}] * 33,
                        },
                    }
                ]
            ),
            "spec.devices.requests[0].exactly.selectors: Too many: 33: must have at most 32 items",
        ),
        (
            claim(constraints=[{"matchAttribute": "a.com/x"}] * 33),
            "spec.devices.constraints: Too many: 33: must have at most 32 items",
        ),
        (
            claim(config=[{"opaque": {"driver": "a.com", "parameters": {}}}] * 33),
            "spec.devices.config: Too many: 33: must have at most 32 items",
        ),
        (
            rslice([device(f"d{i}") for i in range(129)]),
            "spec.devices: Too many: 129: must have at most 128 items",
        ),
        (
            rslice(
                [device(f"d{i}", taints=[{"key": "k", "effect": "NoSchedule"}]) for i in range(65)],
            ),
            "spec.devices: Too many: 65: must have at most 64 items",
        ),
        (
            rslice([device(taints=[{"key": f"k{i}", "effect": "NoSchedule"} for i in range(17)])]),
            "spec.devices[0].taints: Too many: 17: must have at most 16 items",
        ),
        (
            rslice(
                None,
                sharedCounters=[{"name": f"s{i}", "counters": {"c": {"value": "1"}}} for i in range(9)],
            ),
            "spec.sharedCounters: Too many: 9: must have at most 8 items",
        ),
        (
            rslice(
                None,
                sharedCounters=[{"name": "s", "counters": {f"c{i}": {"value": "1"} for i in range(33)}}],
            ),
            "spec.sharedCounters[0].counters: Too many: 33: must have at most 32 items",
        ),
        (
            rslice(
                [
                    device(
                        consumesCounters=[
                            {"counterSet": f"s{i}", "counters": {"c": {"value": "1"}}} for i in range(3)
                        ]
                    )
                ]
            ),
            "spec.devices[0].consumesCounters: Too many: 3: must have at most 2 items",
        ),
        (
            rslice([device(bindingConditions=list("abcde"), bindingFailureConditions=["f"])]),
            "spec.devices[0].bindingConditions: Too many: 5: must have at most 4 items",
        ),
        (
            dclass(selectors=[{"cel": {"expression": "true"}}] * 33),
            "spec.selectors: Too many: 33: must have at most 32 items",
        ),
        (
            dclass(config=[{"opaque": {"driver": "a.com", "parameters": {}}}] * 33),
            "spec.config: Too many: 33: must have at most 32 items",
        ),
    ],
)
def test_list_limits(obj: dict[str, Any], expected: str) -> None:
    assert expected in lines(obj, cel=False)


def test_attributes_and_capacities_limit() -> None:
    attrs = {f"a{i}": {"int": i} for i in range(30)}
    caps = {f"c{i}": {"value": "1"} for i in range(3)}
    out = lines(rslice([device(attributes=attrs, capacity=caps)]))
    assert out == [
        "spec.devices[0]: Invalid value: 33: the total number of attributes and capacities must not exceed 32"
    ]


def test_attribute_values_limit() -> None:
    attrs = {"a": {"ints": list(range(49))}}
    out = lines(rslice([device(attributes=attrs, capacity={})]), list_type_attributes=True)
    assert out == [
        "spec.devices[0]: Invalid value: 49: the total number of attribute values must not exceed 48"
    ]


def test_allocation_results_and_reserved_for_limits() -> None:
    c = claim()
    result = {"request": "gpu", "driver": "gpu.example.com", "pool": "node-1", "device": "gpu-0"}
    ref = {"resource": "pods", "name": "p", "uid": "u"}
    c["status"] = {
        "allocation": {"devices": {"results": [result] * 33}},
        "reservedFor": [dict(ref, uid=f"u{i}") for i in range(257)],
    }
    out = lines(c)
    assert "status.reservedFor: Too many: 257: must have at most 256 items" in out
    assert "status.allocation.devices.results: Too many: 33: must have at most 32 items" in out


def test_reserved_for_needs_allocation() -> None:
    c = claim()
    c["status"] = {"reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}]}
    assert lines(c) == ["status.reservedFor: Forbidden: may not be specified when `allocated` is not set"]


def test_allocation_result_request_must_exist() -> None:
    c = claim()
    c["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "nope", "driver": "gpu.example.com", "pool": "p", "device": "d"}]
            }
        }
    }
    assert lines(c) == [
        'status.allocation.devices.results[0].request: Invalid value: "nope": must be the name of a request in the '
        "claim or the name of a request and a subrequest separated by '/'"
    ]


# ---- request rules --------------------------------------------------------------------------------------


def test_exactly_or_first_available() -> None:
    assert lines(claim([{"name": "r"}])) == [
        "spec.devices.requests[0]: Required value: exactly one of `exactly` or `firstAvailable` is required"
    ]
    both = {
        "name": "r",
        "exactly": {"deviceClassName": "a"},
        "firstAvailable": [{"name": "s", "deviceClassName": "a"}],
    }
    assert lines(claim([both])) == [
        "spec.devices.requests[0]: Invalid value: null: exactly one of `exactly` or `firstAvailable` is required, "
        "but multiple fields are set"
    ]


def test_allocation_mode_and_count() -> None:
    def one(**kw: Any) -> list[str]:
        return lines(claim([{"name": "r", "exactly": {"deviceClassName": "a", **kw}}]))

    assert one() == []
    assert one(count=2) == []
    assert one(allocationMode="All") == []
    assert one(allocationMode="All", count=1) == [
        "spec.devices.requests[0].exactly.count: Invalid value: 1: must not be specified when allocationMode is 'All'"
    ]
    assert one(count=-1) == [
        "spec.devices.requests[0].exactly.count: Invalid value: -1: must be greater than zero"
    ]
    assert one(allocationMode="Some") == [
        'spec.devices.requests[0].exactly.allocationMode: Unsupported value: "Some": supported values: "All", '
        '"ExactCount"'
    ]
    assert one(deviceClassName="") == ["spec.devices.requests[0].exactly.deviceClassName: Required value"]


def test_duplicate_request_names() -> None:
    assert lines(claim([_req(1), _req(1)])) == ['spec.devices.requests[1]: Duplicate value: "r1"']


def test_constraints_reference_existing_requests() -> None:
    reqs = [_req(0), {"name": "fa", "firstAvailable": [{"name": "s0", "deviceClassName": "a"}]}]
    ok = claim(reqs, constraints=[{"requests": ["r0", "fa", "fa/s0"], "matchAttribute": "a.com/numa"}])
    assert lines(ok) == []
    bad = claim(reqs, constraints=[{"requests": ["r9", "fa/s9", "r0/x/y"], "matchAttribute": "numa"}])
    out = lines(bad)
    assert (
        'spec.devices.constraints[0].requests[0]: Invalid value: "r9": must be the name of a request in the '
        in (out[0])
    )
    assert any(o.startswith('spec.devices.constraints[0].requests[1]: Invalid value: "fa/s9"') for o in out)
    assert any(o.startswith('spec.devices.constraints[0].requests[2]: Invalid value: "r0/x/y"') for o in out)
    assert (
        'spec.devices.constraints[0].matchAttribute: Invalid value: "numa": a fully qualified name must be a domain '
        "and a name separated by a slash"
    ) in out


def test_constraint_needs_one_attribute() -> None:
    assert lines(claim(constraints=[{"requests": ["gpu"]}])) == [
        'spec.devices.constraints[0]: Required value: exactly one of "matchAttribute" or "distinctAttribute" is '
        "required, but multiple fields are set"
    ]


def test_config_rules() -> None:
    c = claim(
        config=[
            {"requests": ["gpu"]},
            {"opaque": {"driver": "a.com", "parameters": ["x"]}},
            {"opaque": {"driver": "a.com", "parameters": {"x": "y" * 11000}}},
        ]
    )
    assert lines(c) == [
        "spec.devices.config[0].opaque: Required value",
        'spec.devices.config[1].opaque.parameters: Invalid value: "<value omitted>": must be a valid JSON object',
        "spec.devices.config[2].opaque.parameters: Too long: may not be more than 10240 bytes",
    ]


def test_tolerations() -> None:
    tols = [
        {"operator": "Exists", "value": "x"},
        {"key": "bad key", "operator": "Equal", "value": "v"},
        {"operator": "Maybe"},
        {"key": "k", "effect": "Sometimes"},
    ]
    out = lines(claim([{"name": "r", "exactly": {"deviceClassName": "a", "tolerations": tols}}]))
    p = "spec.devices.requests[0].exactly.tolerations"
    assert f'{p}[0].value: Invalid value: "x": must be empty for operator `Exists`' in out
    assert any(o.startswith(f'{p}[1].key: Invalid value: "bad key": name part must consist of') for o in out)
    assert f'{p}[2].operator: Unsupported value: "Maybe": supported values: "Equal", "Exists"' in out
    assert (
        f'{p}[3].effect: Unsupported value: "Sometimes": supported values: "NoExecute", "NoSchedule", "None"'
        in out
    )


def test_taints() -> None:
    out = lines(rslice([device(taints=[{"key": "k"}, {"key": "k", "effect": "Later"}, {"effect": "None"}])]))
    assert "spec.devices[0].taints[0].effect: Required value" in out
    assert any(o.startswith('spec.devices[0].taints[1].effect: Unsupported value: "Later"') for o in out)
    assert any(
        o.startswith('spec.devices[0].taints[2].key: Invalid value: "": name part must be non-empty')
        for o in out
    )


# ---- slice rules ----------------------------------------------------------------------------------------


def test_node_selection_exclusive() -> None:
    both = rslice(allNodes=True)
    assert lines(both) == [
        'spec: Invalid value: "{`nodeName`, `allNodes`}": exactly one of `nodeName`, `nodeSelector`, `allNodes`, '
        "`perDeviceNodeSelection` is required, but multiple fields are set"
    ]
    none = rslice(nodeName=None)
    assert lines(none) == [
        "spec: Required value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is "
        "required"
    ]
    sel = rslice(
        nodeName=None,
        nodeSelector={
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "In", "values": ["b"]}]}] * 2
        },
    )
    assert any("must have exactly one node selector term" in o for o in lines(sel))
    assert lines(rslice(nodeName=None, allNodes=False)) == [
        "spec.allNodes: Invalid value: false: must be either unset or set to true",
        "spec: Required value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is "
        "required",
    ]


def test_per_device_node_selection() -> None:
    s = rslice([device(nodeName="node-1"), device("gpu-1")], nodeName=None, perDeviceNodeSelection=True)
    assert lines(s) == [
        "spec.devices[1]: Required value: exactly one of `nodeName`, `nodeSelector`, or `allNodes` is required when "
        "`perDeviceNodeSelection` is set to true in the ResourceSlice spec"
    ]
    s = rslice([device(allNodes=True)])
    assert lines(s) == [
        "spec.devices[0]: Invalid value: null: `nodeName`, `nodeSelector` and `allNodes` can only be set if "
        "`perDeviceNodeSelection` is set to true in the ResourceSlice spec"
    ]


def test_devices_and_shared_counters_exclusive() -> None:
    s = rslice(sharedCounters=[{"name": "s", "counters": {"c": {"value": "1"}}}])
    assert lines(s) == ['spec: Invalid value: "": only one of `sharedCounters` or `devices` is allowed']


def test_pool_rules() -> None:
    s = rslice(pool={"name": "", "generation": -1, "resourceSliceCount": 0})
    assert lines(s) == [
        "spec.pool.name: Required value",
        "spec.pool.resourceSliceCount: Invalid value: 0: must be greater than zero",
        "spec.pool.generation: Invalid value: -1: must be greater than or equal to zero",
    ]


def test_duplicate_device_names() -> None:
    assert lines(rslice([device(), device()])) == ['spec.devices[1]: Duplicate value: "gpu-0"']


def test_binding_conditions_pairing() -> None:
    out = lines(rslice([device(bindingConditions=["ready"])]))
    assert out == [
        "spec.devices[0].bindingFailureConditions: Invalid value: null: bindingFailureConditions are required to "
        "use bindingConditions"
    ]
    out = lines(rslice([device(bindingConditions=["a"], bindingFailureConditions=["a"])]))
    assert out == [
        'spec.devices[0].bindingFailureConditions[0]: Invalid value: "a": bindingFailureConditions must not overlap '
        "with bindingConditions"
    ]


def test_request_policy_rules() -> None:
    cap = {
        "value": "10",
        "requestPolicy": {"default": "3", "validValues": ["1", "4", "2", "20"]},
    }
    out = lines(rslice([device(allowMultipleAllocations=True, capacity={"c": cap})]))
    p = "spec.devices[0].capacity[c].requestPolicy.validValues"
    assert f'{p}[2]: Invalid value: "2": values must be sorted in ascending order' in out
    assert f'{p}[3]: Invalid value: "20": option is larger than capacity value: 10' in out
    assert f'{p}: Invalid value: "3": default value is not valid according to the requestPolicy' in out
    rng = {"value": "10", "requestPolicy": {"default": "3", "validRange": {"min": "2", "step": "4"}}}
    out = lines(rslice([device(allowMultipleAllocations=True, capacity={"c": rng})]))
    assert out == [
        'spec.devices[0].capacity[c].requestPolicy.validRange.step: Invalid value: "3": value is not a multiple of '
        "a given step (4) from (2)"
    ]
    out = lines(rslice([device(capacity={"c": rng})]))
    assert out == [
        "spec.devices[0].capacity[c].requestPolicy: Forbidden: allowMultipleAllocations must be true"
    ]


# ---- quantities -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["80 Gi", "lots", "1.1.1", "", "1Qi"])
def test_bad_quantities(bad: str) -> None:
    out = lines(rslice([device(capacity={"memory": {"value": bad}})]))
    assert len(out) == 1
    assert out[0].startswith(
        f"spec.devices[0].capacity[memory].value: Invalid value: {bad!r}".replace("'", '"')
    )


def test_bad_counter_quantity_and_capacity_request() -> None:
    s = rslice(None, sharedCounters=[{"name": "s", "counters": {"mem": {"value": "x"}}}])
    assert lines(s)[0].startswith(
        'spec.sharedCounters[0].counters[mem].value: Invalid value: "x": quantities must'
    )
    c = claim(
        [{"name": "r", "exactly": {"deviceClassName": "a", "capacity": {"requests": {"memory": "1Mm"}}}}]
    )
    assert lines(c) == [
        'spec.devices.requests[0].exactly.capacity.requests[memory]: Invalid value: "1Mm": unable to parse '
        "quantity's suffix"
    ]


# ---- CEL ------------------------------------------------------------------------------------------------


def test_cel_too_long() -> None:
    expr = "true && " * 1300 + "true"
    assert lines(dclass(selectors=[{"cel": {"expression": expr}}])) == [
        "spec.selectors[0].cel.expression: Too long: may not be more than 10240 bytes"
    ]


def test_cel_compile_error() -> None:
    out = lines(dclass(selectors=[{"cel": {"expression": "noSuchVar"}}]))
    assert len(out) == 1
    assert out[0].startswith(
        'spec.selectors[0].cel.expression: Invalid value: "noSuchVar": compilation failed: ERROR: <input>:1:1: '
        "undeclared reference to 'noSuchVar'"
    )


@pytest.mark.parametrize(
    "expr", ["device.driver ==", "device.attributes[", "1 + 'a'", 'device.driver == "a" ||']
)
def test_cel_syntax_errors(expr: str) -> None:
    out = lines(dclass(selectors=[{"cel": {"expression": expr}}]))
    assert len(out) == 1
    assert "compilation failed" in out[0]
    assert out[0].startswith("spec.selectors[0].cel.expression: Invalid value: ")


def test_cel_cost_limit() -> None:
    """An expression whose estimated cost exceeds 1,000,000 is rejected at validation time, like the
    apiserver does, so a selector that would run (nearly) forever never reaches the allocator."""
    attrs = 'device.attributes["a.com"]'
    expr = f"{attrs}.exists(k, {attrs}.exists(j, {attrs}.exists(l, {attrs}.exists(m, k + j + l + m == 'x'))))"
    out = lines(dclass(selectors=[{"cel": {"expression": expr}}]))
    assert out == ["spec.selectors[0].cel.expression: Forbidden: too complex, exceeds cost limit"]


def test_cel_selector_required() -> None:
    assert lines(dclass(selectors=[{}])) == ["spec.selectors[0].cel: Required value"]


# ---- wrong types ----------------------------------------------------------------------------------------


def test_string_where_int_belongs() -> None:
    c = claim([{"name": "r", "exactly": {"deviceClassName": "a", "count": "two"}}])
    assert lines(c) == [
        'spec.devices.requests[0].exactly.count: Invalid value: "two": must be of type integer'
    ]


def test_list_where_map_belongs() -> None:
    s = rslice([device(attributes=[{"model": "x"}])])
    assert lines(s) == ['spec.devices[0].attributes: Invalid value: [{"model":"x"}]: must be of type object']


def test_map_where_list_belongs() -> None:
    c = claim()
    c["spec"]["devices"]["requests"] = {"name": "gpu"}
    assert lines(c) == ['spec.devices.requests: Invalid value: {"name":"gpu"}: must be of type array']


def test_scalars_everywhere() -> None:
    for obj in (claim(), rslice(), dclass()):
        for key in ("metadata", "spec"):
            broken = copy.deepcopy(obj)
            broken[key] = 7
            assert validate(broken)  # an error, not a traceback


def test_wrong_api_version() -> None:
    c = claim()
    c["apiVersion"] = "resource.k8s.io/v1beta1"
    assert lines(c) == [
        'apiVersion: Unsupported value: "resource.k8s.io/v1beta1": supported values: "resource.k8s.io/v1"'
    ]


# ---- templates, pods, nodes -----------------------------------------------------------------------------


def test_claim_template_paths() -> None:
    t = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t"},
        "spec": {"spec": {"devices": {"requests": [{"name": "R", "exactly": {"deviceClassName": "a"}}]}}},
    }
    assert lines(t) == [f'spec.spec.devices.requests[0].name: Invalid value: "R": {LABEL_ERR}']


def pod(claims: list[dict[str, Any]], container_claims: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {
            "resourceClaims": claims,
            "containers": [{"name": "c", "image": "x", "resources": {"claims": container_claims}}],
        },
    }


def test_pod_resource_claims() -> None:
    ok = pod([{"name": "gpu", "resourceClaimTemplateName": "t"}], [{"name": "gpu"}])
    assert lines(ok) == []
    out = lines(
        pod(
            [
                {"name": "gpu", "resourceClaimTemplateName": "t"},
                {"name": "gpu", "resourceClaimName": "c"},
                {"name": "x", "resourceClaimName": "c", "resourceClaimTemplateName": "t"},
                {"name": "y"},
            ],
            [{"name": "nope"}, {"name": "gpu"}, {"name": "gpu"}],
        )
    )
    assert 'spec.resourceClaims[1].name: Duplicate value: "gpu"' in out
    assert any(
        "at most one of `resourceClaimName` or `resourceClaimTemplateName` may be specified" in o for o in out
    )
    assert any("must specify one of: `resourceClaimName`, `resourceClaimTemplateName`" in o for o in out)
    assert (
        'spec.containers[0].resources.claims[0]: Not found: "nope": must be one of the names in '
        "pod.spec.resourceClaims: gpu, x, y"
    ) in out
    assert 'spec.containers[0].resources.claims[2]: Duplicate value: "gpu"' in out


def test_node_name() -> None:
    assert lines({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "Node_1"}})[0].startswith(
        'metadata.name: Invalid value: "Node_1"'
    )


# ---- validate_objects -----------------------------------------------------------------------------------


def test_validate_objects_names_object_and_path() -> None:
    c = claim([{"name": "Bad", "exactly": {"deviceClassName": "a"}}])
    s = rslice([device("Bad_Device")])
    with pytest.raises(InputError) as e:
        validate_objects([c, s, claim()])
    msg = str(e.value).splitlines()
    assert msg[0].startswith(
        'ResourceClaim default/claim-0: spec.devices.requests[0].name: Invalid value: "Bad"'
    )
    assert msg[1].startswith('ResourceSlice node-1-gpu: spec.devices[0].name: Invalid value: "Bad_Device"')
    assert len(msg) == 2
    validate_objects([claim(), rslice()])  # no error


# ---- fuzzing: any JSON shape gives FieldErrors, never an exception ----------------------------------------

json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["", "gpu", "All", "ExactCount", "Exists", "1Gi", "a.com/x", "NoSchedule", "true"]),
)
json_value = st.recursive(
    json_leaf,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(
            st.one_of(
                st.sampled_from(
                    [
                        "name",
                        "exactly",
                        "firstAvailable",
                        "deviceClassName",
                        "selectors",
                        "cel",
                        "expression",
                        "count",
                        "allocationMode",
                        "tolerations",
                        "attributes",
                        "capacity",
                        "value",
                        "requestPolicy",
                        "validRange",
                        "validValues",
                        "default",
                        "min",
                        "max",
                        "step",
                        "string",
                        "int",
                        "ints",
                        "version",
                        "counters",
                        "counterSet",
                        "consumesCounters",
                        "taints",
                        "nodeSelector",
                        "nodeSelectorTerms",
                        "matchExpressions",
                        "requests",
                        "opaque",
                        "parameters",
                        "driver",
                        "pool",
                        "results",
                        "allocation",
                        "devices",
                        "reservedFor",
                        "bindingConditions",
                    ]
                ),
                st.text(max_size=6),
                st.integers(min_value=-3, max_value=3),  # YAML allows non-string keys
                st.none(),
            ),
            children,
            max_size=5,
        ),
    ),
    max_leaves=25,
)


def _graft(base: dict[str, Any], path: list[str | int], value: Any) -> dict[str, Any]:
    obj = copy.deepcopy(base)
    cur: Any = obj
    for step in path[:-1]:
        cur = cur[step]
    cur[path[-1]] = value
    return obj


GRAFT_POINTS: list[tuple[dict[str, Any], list[str | int]]] = [
    (claim(), ["spec"]),
    (claim(), ["spec", "devices"]),
    (claim(), ["spec", "devices", "requests", 0]),
    (claim(), ["spec", "devices", "requests", 0, "exactly"]),
    (claim(), ["status"]),
    (rslice(), ["spec"]),
    (rslice(), ["spec", "devices", 0]),
    (rslice(), ["spec", "devices", 0, "attributes"]),
    (rslice(), ["spec", "devices", 0, "capacity"]),
    (rslice(), ["spec", "pool"]),
    (dclass(), ["spec"]),
    (pod([], []), ["spec"]),
    (claim(), ["metadata"]),
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(range(len(GRAFT_POINTS))), json_value)
def test_fuzz_any_shape(point: int, value: Any) -> None:
    base, path = GRAFT_POINTS[point]
    obj = _graft(base, path, value)
    errs = validate(obj, cel=False)
    for e in errs:
        assert isinstance(str(e), str)


@settings(max_examples=200, deadline=None)
@given(json_value)
def test_fuzz_whole_object(value: Any) -> None:
    for kind in ("ResourceClaim", "ResourceSlice", "DeviceClass", "ResourceClaimTemplate", "Pod", "Node"):
        obj = {"apiVersion": "resource.k8s.io/v1" if kind != "Pod" else "v1", "kind": kind}
        if isinstance(value, dict):
            obj.update(value)
            obj["kind"] = kind
        else:
            obj["spec"] = value
        for e in validate(obj, cel=False):
            str(e)


def test_core_api_version() -> None:
    assert lines({"apiVersion": "apps/v1", "kind": "Pod", "metadata": {"name": "p"}}) == [
        'apiVersion: Unsupported value: "apps/v1": supported values: "v1"'
    ]


def test_extended_resource_name() -> None:
    assert lines(dclass(extendedResourceName="example.com/gpu")) == []
    for bad in ("gpu", "kubernetes.io/gpu", "requests.example.com/gpu"):
        assert lines(dclass(extendedResourceName=bad)) == [
            f'spec.extendedResourceName: Invalid value: "{bad}": must be a valid extended resource name'
        ]


def test_claim_status_devices_must_be_allocated() -> None:
    c = claim()
    c["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "gpu", "driver": "gpu.example.com", "pool": "p", "device": "gpu-0"}]
            }
        },
        "devices": [
            {"driver": "gpu.example.com", "pool": "p", "device": "gpu-0"},
            {"driver": "gpu.example.com", "pool": "p", "device": "gpu-9", "networkData": {"ips": ["a"] * 17}},
        ],
    }
    assert lines(c) == [
        'status.devices[1]: Invalid value: {"Driver":"gpu.example.com","Pool":"p","Device":"gpu-9","ShareID":""}: '
        "must be an allocated device in the claim",
        "status.devices[1].networkData.ips: Too many: 17: must have at most 16 items",
    ]


def test_allocation_result_fields() -> None:
    c = claim()
    c["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": "", "pool": "a//b", "device": "D", "shareID": "not-a-uuid"}
                ],
                "config": [{"source": "FromNowhere", "opaque": {"driver": "a.com", "parameters": {}}}],
            },
            "nodeSelector": {"nodeSelectorTerms": []},
        },
        "reservedFor": [{"resource": "pods", "name": "p"}],
    }
    out = lines(c)
    assert "status.reservedFor[0].uid: Required value" in out
    assert "status.allocation.devices.results[0].driver: Required value" in out
    assert any(o.startswith('status.allocation.devices.results[0].pool: Invalid value: ""') for o in out)
    assert any(o.startswith('status.allocation.devices.results[0].device: Invalid value: "D"') for o in out)
    assert any(
        o.startswith('status.allocation.devices.results[0].shareID: Invalid value: "not-a-uuid"') for o in out
    )
    assert (
        'status.allocation.devices.config[0].source: Unsupported value: "FromNowhere": supported values: '
        '"FromClaim", "FromClass"'
    ) in out
    assert (
        "status.allocation.nodeSelector.nodeSelectorTerms: Required value: must have at least one node selector term"
        in out
    )


def test_node_selector_rules() -> None:
    sel = {
        "nodeSelectorTerms": [
            {
                "matchExpressions": [
                    {"key": "a", "operator": "In"},
                    {"key": "b", "operator": "Exists", "values": ["x"]},
                    {"key": "c", "operator": "Gt", "values": ["1", "2"]},
                    {"key": "d", "operator": "Near"},
                ],
                "matchFields": [{"key": "metadata.uid", "operator": "In", "values": ["x"]}],
            }
        ]
    }
    out = lines(rslice(nodeName=None, nodeSelector=sel))
    p = "spec.nodeSelector.nodeSelectorTerms[0]"
    assert out == [
        f"{p}.matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'",
        f"{p}.matchExpressions[1].values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
        f"{p}.matchExpressions[2].values: Required value: must be specified single value when `operator` is 'Lt' or 'Gt'",
        f'{p}.matchExpressions[3].operator: Invalid value: "Near": not a valid selector operator',
        f'{p}.matchFields[0].key: Invalid value: "metadata.uid": not a valid field selector key',
    ]
