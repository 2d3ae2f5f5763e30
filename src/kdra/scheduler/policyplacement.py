"""A trace-replay placement policy (FGD, kdra's) running inside kdra's scheduler, as `kdra replay` runs it.

`FragmentationScore` is a PreFilter and Score plugin; `PolicyDevicePreference` is the allocator's device
preference (kdra.allocator.preference) for the same policy, so the node and the GPUs inside it are the
policy's choice, as in the replay engine (kdra.replay.engine):

- **Learning** (`online`, the default): each pod is told to the policy once, when its first scheduling
  attempt starts (`Policy.learn`), before it is placed: the policy reads the workload's shapes, share sizes
  and CPU per GPU from the pods it has seen (kdra.scheduler.workload), as `kdra replay --online` does.
- **The fleet**: one GPU view per node this scheduler places on (`LiveViews`: free CPU, memory and
  milli-GPU per GPU, from the scheduler's cache and DRA state; `owned`: kdra scheduler's --owned-nodes),
  kept current as nodes change, handed to `Policy.prepare_fleet` again whenever the node set changes
  (where CPU binds, the rare shapes' hosts).
- **The node**: the policy scores every feasible node; the best one, ties to the first node in a fixed
  order of node names (`name_order`: what `kdra replay --ties name` uses), gets the whole score and every
  other node none, with a weight above what all other score plugins together can give: the policy decides.
- **The GPUs**: the allocator's search tries the node's GPUs in the order of `Policy.device_keys` (the
  policy's measure per GPU), so the devices are the policy's too, and every rule is still the allocator's.

What the policy sees of a pod: its CPU and memory requests and, from its ResourceClaims, the count of
devices of the GPU DeviceClass and their `shares` capacity request (none: whole GPUs). A request's CEL
selectors (a GPU model) are not read: such a pod is scored as one that takes any model.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kdra.api.quantity import parse_quantity_any
from kdra.api.wellknown import NVIDIA_GPU_CLASS
from kdra.scheduler.fragmentation import MAX_NODE_SCORE
from kdra.scheduler.framework import SUCCESS, CycleState, PreFilterPlugin, ScorePlugin, Status
from kdra.scheduler.gpupolicies import MILLI, GpuNodeView, PodRequest, Policy

if TYPE_CHECKING:
    from kdra.allocator.index import DeviceEntry, NodeView
    from kdra.allocator.preference import RequestView, SearchContext, SortKey
    from kdra.scheduler.cache import SchedulerCache
    from kdra.scheduler.devicepref import Probe
    from kdra.scheduler.podinfo import NodeInfo, PodInfo

GPU_CLASS = NVIDIA_GPU_CLASS
TRACE_MODEL_LABEL = "kdra.dev/trace-gpu-model"
_NANO = 10**9
_STATE = "FragmentationScore"


def name_order(names: Iterable[str]) -> dict[str, int]:
    """A fixed pseudo-random order of nodes by name (ties go to the first): the same in every process and
    on every run, whatever order the nodes were listed in."""
    keyed = sorted((hashlib.blake2b(n.encode(), digest_size=8).digest(), n) for n in names)
    return {n: r for r, (_h, n) in enumerate(keyed)}


class LiveViews:
    """GPU node views read from a scheduler's cache and DRA state, one object per node, updated in place
    (its `version` bumped) when the node's NodeInfo changes.

    A node's GPUs are the devices of `device_class` on it, in slice order; a GPU's free milli-GPU is its
    `shares` capacity (1,000 per GPU in consumable-shares mode) less what allocated and in-flight claims
    consume, 0 when a claim holds it exclusively."""

    def __init__(self, cache: SchedulerCache | None = None, device_class: str = GPU_CLASS) -> None:
        self.cache = cache
        self.device_class = device_class
        self.views: dict[str, GpuNodeView] = {}
        self.devices: dict[str, list[tuple[str, str, str]]] = {}  # node -> its GPUs' keys in view order
        self._seen: dict[str, tuple[int, int]] = {}  # node -> (NodeInfo generation, cache epoch)

    def _bound(self) -> SchedulerCache:
        if self.cache is None:
            raise RuntimeError("FragmentationScore: bind_cache() before scheduling")
        return self.cache

    def view_of(self, ni: NodeInfo) -> GpuNodeView:
        """The node's view, current."""
        # The DRA state changes a node's devices only by touching the node (its generation) or, for
        # devices of no node and new slices or classes, by a new cache epoch.
        stamp = (ni.generation, self._bound().epoch)
        view = self.views.get(ni.name)
        if view is not None and self._seen.get(ni.name) == stamp:
            return view
        fresh = self._read(ni)
        if view is None:
            view = self.views[ni.name] = fresh
        else:
            view.cpu_cap, view.mem_cap, view.max_pods = fresh.cpu_cap, fresh.mem_cap, fresh.max_pods
            view.cpu_free, view.mem_free, view.pods = fresh.cpu_free, fresh.mem_free, fresh.pods
            view.gpu_free[:] = fresh.gpu_free
            view.model = fresh.model
            view.version += 1
        self._seen[ni.name] = stamp
        return view

    def _read(self, ni: NodeInfo) -> GpuNodeView:
        from kdra.scheduler.podinfo import CPU, MEMORY

        dra = self._bound().dra
        gpus: list[int] = []
        keys: list[tuple[str, str, str]] = []
        consumed = dra.state.consumed
        dedicated = dra.state.dedicated
        for d in dra.index.devices_of_class(self.device_class, node=ni.name):
            keys.append(d.key)
            if d.key in dedicated:
                gpus.append(0)
                continue
            cap = d.capacity.get("shares")
            if cap is None:
                gpus.append(MILLI)
                continue
            total = cap.value.nanos // _NANO
            used = consumed.get(d.key, {}).get("shares", 0) // _NANO
            gpus.append(round((total - used) * MILLI / total) if total else 0)
        self.devices[ni.name] = keys
        alloc, req = ni.allocatable, ni.requested
        mib = 1 << 20
        return GpuNodeView(
            ni.name,
            ni.labels.get(TRACE_MODEL_LABEL, ni.labels.get("nvidia.com/gpu.product", "")),
            alloc.get(CPU, 0),
            alloc.get(MEMORY, 0) // mib,
            alloc.get(CPU, 0) - req.get(CPU, 0),
            (alloc.get(MEMORY, 0) - req.get(MEMORY, 0)) // mib,
            gpus,
            len(ni.pods),
            alloc.get("pods", 110),
        )

    def request_of(self, pi: PodInfo) -> PodRequest | None:
        """CPU and memory from the pod; GPUs and their share from its claims' requests of the GPU class.
        None while a claim the pod names is not in the cache yet (a watch may bring the pod first)."""
        from kdra.api.pods import entry_claim_names
        from kdra.scheduler.cache import claim_key
        from kdra.scheduler.podinfo import CPU, MEMORY

        num = 0
        milli = 0
        claims = self._bound().claims
        for name in entry_claim_names(pi.pod):
            claim = claims.get(claim_key(pi.namespace, name))
            if claim is None:
                return None
            for r in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
                ex = r.get("exactly") or {}
                if ex.get("deviceClassName") != self.device_class:
                    continue
                num += int(ex.get("count") or 1)
                shares = ((ex.get("capacity") or {}).get("requests") or {}).get("shares")
                # A quantity: the API server writes 1000 back as "1k".
                milli = int(parse_quantity_any(shares).value()) if shares is not None else MILLI
        return PodRequest(pi.requests.get(CPU, 0), pi.requests.get(MEMORY, 0) >> 20, num, milli if num else 0)


class FragmentationScore(PreFilterPlugin, ScorePlugin):
    """A placement policy as kdra scheduler's node choice (module docstring). `policy`: the policy, or a
    factory of fresh ones (a scheduler built again, as `kdra simulate` does per mode, starts a fresh one).
    `online=False` keeps what the policy was prepared with and learns nothing."""

    name = "FragmentationScore"
    # The best node gets MAX_NODE_SCORE x weight: more than every other score plugin of a profile together
    # (about a dozen, weights 1-3, at most 100 each), so the policy's choice is the node.
    weight = 100

    def __init__(
        self,
        policy: Policy | Callable[[], Policy],
        views: LiveViews | None = None,
        *,
        online: bool = True,
    ) -> None:
        self._factory = policy if not isinstance(policy, Policy) else None
        self.policy: Policy = policy if isinstance(policy, Policy) else policy()
        self.views = views or LiveViews()
        self.online = online
        self.device_preference = PolicyDevicePreference(self)
        self.current: PodRequest | None = None  # the pod of the scheduling attempt under way
        # The nodes this scheduler places on (kdra scheduler --owned-nodes), by their labels; None: all.
        self.owned: Callable[[Mapping[str, str]], bool] | None = None
        self._learned: set[str] = set()
        self._fleet: tuple[str, ...] = ()
        self._order: dict[str, int] = {}
        self._fleet_gen = 0  # bumped each time the policy is handed the fleet again
        self._epoch: Hashable = None  # the policy's epoch as of the attempt's PreFilter
        self._scores: dict[PodRequest, _ShapeScores] = {}

    def bind_cache(self, cache: SchedulerCache) -> None:
        previous = self.cache if hasattr(self, "cache") else None
        super().bind_cache(cache)
        if previous is not None and previous is not cache and self._factory is not None:
            self.policy = self._factory()
            self._learned.clear()
            self._fleet = ()
            self._scores.clear()
        if self.views.cache is not cache:
            self.views = LiveViews(cache, self.views.device_class)

    # -- PreFilter: learn the pod, keep the fleet current ---------------------------------------

    def pre_filter(self, state: CycleState, pi: PodInfo) -> Status:
        req = self.views.request_of(pi)
        self.current = req
        if req is None:
            return SUCCESS  # scored as any pod once its claims are known (DynamicResources waits for them)
        state[_STATE] = req
        owned = self.owned
        nodes = [ni for ni in self.cache.nodes if ni.allocatable and (owned is None or owned(ni.labels))]
        names = tuple(ni.name for ni in nodes)
        views = [self.views.view_of(ni) for ni in nodes]
        if names != self._fleet:
            self._fleet = names
            self._order = name_order(names)
            self.policy.prepare_fleet(views)
            self._fleet_gen += 1
            self._scores.clear()
        if self.online and pi.uid not in self._learned:
            self._learned.add(pi.uid)
            self.policy.learn(req)
        self._epoch = self.policy.epoch()  # fleet-wide state (e.g. which rare hosts are kept) as of now
        return SUCCESS

    # -- Score: the policy's best node takes it --------------------------------------------------

    def signature(self, state: CycleState, pi: PodInfo) -> Hashable:
        # The node search may keep other plugins' answers for unchanged nodes: this plugin's score() is a
        # constant, its node choice is made in normalize() from the policy's scores (`_policy_scores`).
        return _STATE

    def needs_normalize(self, state: CycleState, pi: PodInfo) -> bool:
        return True

    def score(self, state: CycleState, pi: PodInfo, ni: NodeInfo) -> int:
        return 0

    def _policy_scores(self, req: PodRequest, idxs: Iterable[int]) -> dict[int, float]:
        """The policy's score of each node for the pod (-inf where its view says the pod does not fit),
        kept per pod shape as `kdra replay` keeps them (kdra.replay.engine.Placer): a node is scored again
        when its view changed, every node when the policy reads the workload again, and the nodes of
        `Policy.epoch_scope` when only fleet-wide state moved."""
        c = self._scores.get(req)
        if c is None:
            if len(self._scores) > 4096:
                self._scores.clear()
            c = self._scores[req] = _ShapeScores()
        if c.epoch != self._epoch:
            scope = self.policy.epoch_scope(c.epoch)
            if scope is None:
                c.scores.clear()
            else:
                for j in scope:
                    if j < len(self._fleet):
                        c.scores.pop(self._fleet[j], None)
            c.epoch = self._epoch
        nodes = self.cache.nodes
        out: dict[int, float] = {}
        for i in idxs:
            view = self.views.view_of(nodes[i])
            hit = c.scores.get(view.name)
            if hit is None or hit[0] is not view or hit[1] != view.version:
                s = self.policy.score(view, req)[0] if view.fits(req) else float("-inf")
                hit = c.scores[view.name] = (view, view.version, s)
            out[i] = hit[2]
        return out

    def normalize(self, state: CycleState, pi: PodInfo, scores: dict[int, int]) -> None:
        if not scores:
            return
        req: PodRequest | None = state.get(_STATE)
        raw = self._policy_scores(req, scores) if req is not None else {}
        nodes = self.cache.nodes
        order = self._order
        best = max(
            scores, key=lambda i: (raw.get(i, float("-inf")), -order.get(nodes[i].name, len(order) + i))
        )
        for i in scores:
            scores[i] = MAX_NODE_SCORE if i == best else 0


class _ShapeScores:
    """The policy's scores for one pod shape: node name -> (its view, the view's version, score)."""

    __slots__ = ("epoch", "scores")

    def __init__(self) -> None:
        self.epoch: Hashable = None
        self.scores: dict[str, tuple[GpuNodeView, int, float]] = {}


class PolicyDevicePreference:
    """The allocator's device preference for a FragmentationScore's policy: a node's GPUs in the order of
    `Policy.device_keys` for the pod of the attempt under way (kdra.allocator.preference)."""

    name = "policy"
    measure_name = "fragmentation: the policy's measure of the node (idle milli-GPU no typical pod can use)"

    def __init__(self, plugin: FragmentationScore) -> None:
        self.plugin = plugin

    def token(self) -> Hashable:
        """What the order depends on besides the node's state: the pod of the attempt and the policy's
        state as of its PreFilter (allocations found under another token are searched again)."""
        plugin = self.plugin
        return (plugin.current, plugin._fleet_gen, plugin._epoch)

    def keys(self, ctx: SearchContext, request: RequestView, devices: Sequence[DeviceEntry]) -> list[SortKey]:
        plugin = self.plugin
        req = plugin.current
        ni = plugin.cache.node_by_name.get(ctx.node_name)
        view = plugin.views.view_of(ni) if ni is not None else None
        if req is None or view is None or not req.num_gpu or not view.fits(req):
            return [(0,)] * len(devices)
        gpus = plugin.policy.score(view, req)[1]
        ranks = plugin.policy.device_keys(view, req, gpus)
        index = {k: i for i, k in enumerate(plugin.views.devices.get(ctx.node_name, ()))}
        out: list[Any] = []
        for d in devices:
            i = index.get(d.key)
            out.append((0, ranks[i]) if i is not None and i < len(ranks) else (1, 0))
        return out

    def measure(self, view: NodeView, probe: Probe, devices: Sequence[DeviceEntry]) -> float:
        """The policy's fragmentation of the node once the probe's allocation is in (explanations)."""
        plugin = self.plugin
        gv = plugin.views.views.get(view.node_name)
        fm = getattr(plugin.policy, "measure", None)
        if gv is None or fm is None:
            return 0.0
        frees = []
        for key in plugin.views.devices.get(view.node_name, ()):
            dev = next((d for d in view.devices if d.key == key), None)
            if dev is None or probe.in_use(dev):
                frees.append(0)
                continue
            cap = dev.capacity.get("shares")
            if cap is None:
                frees.append(0 if probe.shared_in_use(dev) else MILLI)
                continue
            total = cap.value.nanos
            used = probe.consumed(dev).get("shares", 0)
            frees.append(round((total - used) * MILLI / total) if total else 0)
        return round(float(fm.of(gv.model, gv.cpu_free, gv.mem_free, frees)) / MILLI, 4)
