"""The one Event builder: what `kubectl get events` and `kubectl describe` read from kdra's Events."""

from __future__ import annotations

import re

from kdra.kube.events import MAX_EVENT_MESSAGE, object_event, pod_event


def test_a_pod_read_from_a_list_still_names_its_kind() -> None:
    pod = {"metadata": {"name": "train-0", "namespace": "ml", "uid": "u1", "resourceVersion": "7"}}
    ev = pod_event(pod, "FailedScheduling", "0/3 nodes are available", "Warning", "kdra", "kdra-0")
    assert ev["involvedObject"] == {
        "apiVersion": "v1", "kind": "Pod", "name": "train-0", "namespace": "ml", "uid": "u1",
        "resourceVersion": "7",
    }  # fmt: skip
    assert ev["metadata"] == {"generateName": "train-0.", "namespace": "ml"}
    assert (ev["type"], ev["reason"], ev["reportingComponent"], ev["reportingInstance"]) == (
        "Warning", "FailedScheduling", "kdra", "kdra-0",
    )  # fmt: skip
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", ev["firstTimestamp"])


def test_a_cluster_scoped_object_s_event_goes_to_default_and_long_messages_are_cut() -> None:
    queue = {"apiVersion": "kdra.dev/v1alpha1", "kind": "Queue", "metadata": {"name": "research"}}
    ev = object_event(queue, "InvalidSpec", "x" * (MAX_EVENT_MESSAGE + 10), "Warning", "kdra", "kdra-0")
    assert ev["metadata"]["namespace"] == "default"
    assert "namespace" not in ev["involvedObject"]
    involved = ev["involvedObject"]
    assert (involved["apiVersion"], involved["kind"]) == ("kdra.dev/v1alpha1", "Queue")
    assert len(ev["message"]) == MAX_EVENT_MESSAGE
