"""free_port: ports for the servers a test starts, out of the way of outgoing connections and of other
test processes."""

from __future__ import annotations

import socket

import pytest

from support import controlplane
from support.controlplane import _ephemeral_low, free_port


def test_ports_are_below_the_ephemeral_range_distinct_and_bindable() -> None:
    low = _ephemeral_low()
    ports = [free_port() for _ in range(20)]
    assert len(set(ports)) == 20
    assert all(controlplane.PORT_FLOOR <= p < low for p in ports), ports
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", ports[0]))  # reserved, not taken: the server can bind it


def test_a_port_another_process_reserved_or_one_in_use_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    # Three ports no other process uses or reserves (fixed numbers failed beside other tests' servers):
    # reserved here first, then made what the test needs.
    taken, reserved, free = (free_port() for _ in range(3))
    held = {p: controlplane._PORT_LOCKS.pop(p) for p in (taken, reserved, free)}
    held.pop(free).close()
    held.pop(taken).close()
    tries = iter([taken, reserved, free])

    class Seq:
        def randrange(self, a: int, b: int) -> int:
            return next(tries)

    monkeypatch.setattr(controlplane.secrets, "SystemRandom", lambda: Seq())
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    with held[reserved], listener:  # the reservation's lock file stays locked, as another process's would
        listener.bind(("127.0.0.1", taken))
        listener.listen()
        assert free_port() == free
