"""Device preference: an opt-in ordering hook the allocator's search consults when it picks devices.

Upstream's allocator takes the first devices that fit, in pool -> slice -> device order. With a
`DevicePreference` given to `Allocator(prefer=...)`, the search walks each request's candidates (whole
devices, MIG placements, shares of devices with allowMultipleAllocations) in the order of the keys the
preference returns instead, lowest first; equal keys keep upstream's order. Only the order changes: every
device is still checked against every rule (selectors, counters, capacity, taints, constraints), the
search is still exhaustive, so whatever it returns is a valid allocation, and it fits exactly when
upstream's does (if the step budget runs out in the preferred order, upstream's order is tried).

A request whose candidates include a device whose selectors fail to evaluate keeps upstream's order, so
CEL errors surface exactly where upstream reports them.

The keys are computed when the search starts a request (its first device), from a `SearchContext`: what
is in use, counters left and devices picked so far in this allocation, so a preference can take the
pod's other requests and claims into account (kdra.scheduler.devicepref holds the policies).
Without a preference nothing here runs: the allocator checks one attribute per request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from kdra.api.quantity import Quantity

if TYPE_CHECKING:
    from kdra.allocator.allocator import AllocatedState, ReqData, _Run
    from kdra.allocator.index import DeviceEntry, NodeView, Pool


class RequestView:
    """What a preference may read about the request being searched."""

    __slots__ = ("_rd",)

    def __init__(self, rd: ReqData) -> None:
        self._rd = rd

    @property
    def name(self) -> str:
        """`request` or `request/subrequest`."""
        return self._rd.full_name

    @property
    def claim_index(self) -> int:
        return self._rd.claim_index

    @property
    def request_index(self) -> int:
        return self._rd.request_index

    @property
    def class_name(self) -> str:
        return self._rd.class_name

    @property
    def count(self) -> int:
        return self._rd.num_devices

    @property
    def capacity_requests(self) -> Mapping[str, Quantity] | None:
        return self._rd.capacity_requests


class SearchContext:
    """The allocation in progress on one node, read-only: the committed state plus what this call has
    picked so far (devices, counters, consumed capacity)."""

    __slots__ = ("_run",)

    def __init__(self, run: _Run) -> None:
        self._run = run

    @property
    def node_name(self) -> str:
        return self._run.view.node_name

    @property
    def view(self) -> NodeView:
        """The pools and devices the node can see (kdra.allocator.index.NodeView)."""
        return self._run.view

    @property
    def state(self) -> AllocatedState:
        """What allocated (and, in a scheduler, assumed) claims hold; not this call's picks."""
        return self._run.state

    def in_use(self, dev: DeviceEntry) -> bool:
        """Held exclusively by an allocated claim or already picked in this call."""
        return self._run.device_in_use(dev.key)

    def shared_in_use(self, dev: DeviceEntry) -> bool:
        """A device with allowMultipleAllocations that some share (allocated or picked) uses."""
        return self._run.capacity_in_use(dev.key) or dev.key in self._run.state.shared

    def consumed(self, dev: DeviceEntry) -> dict[str, int]:
        """Consumed capacity in nano-units: allocated shares plus this call's."""
        run = self._run
        out = dict(run.state.consumed.get(dev.key) or {})
        for name, nanos in (run.allocating_capacity.get(dev.key) or {}).items():
            out[name] = out.get(name, 0) + nanos
        return out

    def pool(self, dev: DeviceEntry) -> tuple[int, Pool] | None:
        """(pool index, pool) of a device of this node."""
        view = self._run.view
        for pi, pool in enumerate(view.pools):
            if pool.driver == dev.driver and pool.name == dev.pool:
                return pi, pool
        return None

    def counters_left(self, pool_index: int) -> dict[str, dict[str, int]]:
        """Counters left per counter set of a pool (nano-units), after allocated devices and this call's
        picks. Read-only."""
        run = self._run
        rem = run.remaining.get(pool_index)
        if rem is not None:
            return rem
        avail, _broken = run.owner.available_counters(run.view.pools[pool_index])
        return avail

    def requests(self) -> list[RequestView]:
        """Every request of the call's claims in search order (a request with alternatives by its first
        subrequest): what the pod asks for besides the request being searched."""
        return [RequestView(rd) for key, rd in sorted(self._run.requests.items()) if key[2] == 0]

    def chosen(self) -> list[DeviceEntry]:
        """Devices picked so far in this call (earlier requests and claims of the pod), in order."""
        return [r.dev for results in self._run.results for r in results]


class SortKey(Protocol):
    """A candidate's sort key: anything the keys of one call can be ordered by (numbers, tuples)."""

    def __lt__(self, other: Any, /) -> bool: ...


class DevicePreference(Protocol):
    """The hook: one sort key per candidate (lower first; equal keys keep upstream's order)."""

    name: str

    def keys(
        self, ctx: SearchContext, request: RequestView, devices: Sequence[DeviceEntry]
    ) -> Sequence[SortKey]: ...


def preferred_order(
    run: _Run, rd: ReqData, cands: list[tuple[DeviceEntry, int, str | None]]
) -> list[tuple[DeviceEntry, int, str | None]]:
    """The candidates in the preference's order (called by the allocator when a request starts)."""
    prefer = run.prefer
    if prefer is None or len(cands) < 2 or any(err for _d, _p, err in cands):
        return cands
    keys = prefer.keys(SearchContext(run), RequestView(rd), [d for d, _p, _e in cands])
    if len(keys) != len(cands):
        raise ValueError(f"device preference {prefer.name}: {len(keys)} keys for {len(cands)} devices")
    order = sorted(range(len(cands)), key=keys.__getitem__)
    return [cands[i] for i in order]
