"""KubeSource's informer loop on a scripted client: list, watch, resume, relist on 410, optional kinds."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from kdra.cluster.store import NotFoundError
from kdra.kube.client import ExpiredError
from kdra.observe.kube import KubeSource, wait_ready
from kdra.observe.model import FleetState


def claim(name: str, device: str, rv: str) -> dict[str, Any]:
    return {
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
        "status": {
            "allocation": {
                "devices": {"results": [{"request": "gpu", "driver": "d", "pool": "p", "device": device}]}
            }
        },
    }


class ScriptedClient:
    """Lists and watch streams from a script; records the resourceVersions watches resumed from."""

    def __init__(self) -> None:
        self.lists: dict[str, list[tuple[list[dict[str, Any]], str]]] = {
            "ResourceClaim": [([claim("a", "d0", "10")], "10"), ([claim("b", "d1", "30")], "30")],
        }
        self.watches: dict[str, list[Any]] = {
            "ResourceClaim": [
                [("ADDED", claim("c", "d2", "11")), ("BOOKMARK", {"metadata": {"resourceVersion": "12"}})],
                ExpiredError("too old"),
            ],
        }
        self.resumed: list[tuple[str, str]] = []
        self.done = threading.Event()

    def list_with_version(self, kind: str) -> tuple[list[dict[str, Any]], str]:
        if kind == "Queue":
            raise NotFoundError("the server could not find the requested resource")
        script = self.lists.get(kind)
        if not script:
            return [], "1"
        return script.pop(0)

    def watch_stream(
        self, kind: str, rv: str, *, timeout_seconds: int, stop: threading.Event
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        self.resumed.append((kind, rv))
        script = self.watches.get(kind)
        if not script:
            if kind == "ResourceClaim":
                self.done.set()
            stop.wait(0.05)
            return
        step = script.pop(0)
        if isinstance(step, Exception):
            raise step
        yield from step

    def close(self) -> None:
        pass


def test_list_watch_resume_and_relist_after_expiry() -> None:
    client = ScriptedClient()
    state = FleetState()
    source = KubeSource(client, state).start()  # type: ignore[arg-type]
    try:
        assert wait_ready(source, 10)
        assert client.done.wait(10)
    finally:
        source.stop()
    # a (listed), c (watched) went away with the relist that followed the 410; b came with it
    assert sorted(state.claims) == [("ns", "b")]
    claim_watches = [rv for kind, rv in client.resumed if kind == "ResourceClaim"]
    assert claim_watches[:3] == ["10", "12", "30"]  # resumed after the bookmark, then from the relist
    assert source.relists["ResourceClaim"] == 2
    assert "Queue" not in source.relists  # not served: skipped, still ready
