"""What kube-apiserver 1.38 validates differently from 1.37 (pkg/apis/resource/validation/validation.go at
v1.38.0-beta.0): qualified names with more than one slash, version attributes with numbers longer than
18 digits, and the capacity names of requests and results. The texts are kube-apiserver 1.38's (checked
with a server-side dry run against the v1.38.0-beta.0 binary)."""

from __future__ import annotations

from typing import Any

import pytest

from kdra.allocator import FeatureGates
from kdra.validation.rules import validate

V137, V138 = FeatureGates.for_version("1.37"), FeatureGates.for_version("1.38")


def slice_with(attributes: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "s"},
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": "n1",
            "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "d0", "attributes": attributes}],
        },
    }


def claim_with_capacity(requests: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "default"},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "r", "exactly": {"deviceClassName": "gpu", "capacity": {"requests": requests}}}
                ]
            }
        },
    }


def texts(obj: dict[str, Any], features: FeatureGates) -> list[str]:
    return [str(e) for e in validate(obj, features=features)]


def test_a_name_with_two_slashes_is_refused_from_1_38() -> None:
    obj = slice_with({"gpu.example.com/a/b": {"string": "x"}})
    assert texts(obj, V137) == []
    slashes = (
        'spec.devices[0].attributes: Invalid value: "gpu.example.com/a/b": must not contain more than one'
    )
    assert texts(obj, V138) == [slashes + " slash"]


def test_version_numbers_have_at_most_18_digits_from_1_38() -> None:
    ok = slice_with({"v": {"version": "1.2.123456789012345678"}})
    long = slice_with({"v": {"version": "1.2.1234567890123456789"}})
    assert texts(ok, V138) == [] and texts(long, V137) == []
    assert texts(long, V138) == [
        'spec.devices[0].attributes[v].version: Invalid value: "1.2.1234567890123456789": must be a string '
        "compatible with semver.org spec 2.0.0, with at most 18 digits in numbers"
    ]


@pytest.mark.parametrize("name", ["bad name", "a/b/c", "/x"])
def test_capacity_request_names_are_checked_from_1_38(name: str) -> None:
    obj = claim_with_capacity({name: "1"})
    assert texts(obj, V137) == []
    got = texts(obj, V138)
    assert len(got) == 1 and got[0].startswith(
        "spec.devices.requests[0].exactly.capacity.requests: Invalid value"
    )


def test_valid_capacity_request_names_pass_in_1_38() -> None:
    assert texts(claim_with_capacity({"memory": "1Gi", "gpu.example.com/shares": "1"}), V138) == []


def test_cel_compile_errors_leave_out_the_empty_container_from_1_38() -> None:
    obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "c"},
        "spec": {"selectors": [{"cel": {"expression": "noSuchVar"}}]},
    }
    head = (
        'spec.selectors[0].cel.expression: Invalid value: "noSuchVar": compilation failed: '
        "ERROR: <input>:1:1: "
    )
    assert texts(obj, V137) == [
        head + "undeclared reference to 'noSuchVar' (in container '')\n | noSuchVar\n | ^"
    ]
    assert texts(obj, V138) == [head + "undeclared reference to 'noSuchVar'\n | noSuchVar\n | ^"]
