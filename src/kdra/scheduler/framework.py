"""The scheduling framework: extension points and statuses, after kube-scheduler's
pkg/scheduler/framework/interface.go.

A plugin subclasses `Plugin` and overrides the extension points it implements. Filter and score plugins
also say what their answer depends on (`signature`), which lets the scheduler cache per-node answers for
pods that look alike and only re-evaluate nodes whose state changed (see scheduler.py): kdra evaluates
every node every cycle (percentageOfNodesToScore = 100) at the cost of only the nodes that changed.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from kdra.allocator.preference import SortKey

if TYPE_CHECKING:
    from kdra.scheduler.cache import SchedulerCache
    from kdra.scheduler.podinfo import NodeInfo, PodInfo
    from kdra.scheduler.session import Session

MAX_NODE_SCORE = 100


class Code(IntEnum):
    SUCCESS = 0
    ERROR = 1
    UNSCHEDULABLE = 2
    UNSCHEDULABLE_AND_UNRESOLVABLE = 3
    WAIT = 4
    SKIP = 5
    PENDING = 6


# Module-level: reading a member off the Enum class on every `ok` cost more than the comparison itself.
_OK_CODES = (Code.SUCCESS, Code.SKIP)


@dataclass(frozen=True, slots=True)
class Status:
    code: Code = Code.SUCCESS
    reasons: tuple[str, ...] = ()
    plugin: str = ""
    # kdra: a structured explanation (e.g. the allocator's), printable with str().
    explanation: Any = None

    @property
    def ok(self) -> bool:
        return self.code in _OK_CODES

    @property
    def message(self) -> str:
        return ", ".join(self.reasons)

    def with_plugin(self, plugin: str) -> Status:
        return Status(self.code, self.reasons, plugin, self.explanation)


SUCCESS = Status()
SKIP = Status(Code.SKIP)


def unschedulable(*reasons: str, explanation: object = None, resolvable: bool = True) -> Status:
    code = Code.UNSCHEDULABLE if resolvable else Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    return Status(code, tuple(reasons), "", explanation)


def error(reason: str) -> Status:
    return Status(Code.ERROR, (reason,))


class CycleState(dict[str, Any]):
    """Per-pod, per-cycle scratch space that PreFilter fills and later extension points read."""


# Cluster events a plugin can ask to be woken up by (framework.ClusterEvent, simplified to strings).
EV_NODE_ADD = "Node/Add"
EV_NODE_UPDATE = "Node/Update"
EV_POD_DELETE = "AssignedPod/Delete"  # also completion: an assigned pod stops using its resources
EV_CLAIM_CHANGE = "ResourceClaim/Change"
EV_SLICE_CHANGE = "ResourceSlice/Change"
EV_CLASS_CHANGE = "DeviceClass/Change"
EV_TEMPLATE_ADD = "ResourceClaimTemplate/Add"
# A gang's group object (PodGroup, Workload) created or its spec changed: only the gang's own members are
# asked, and only the gang plugin registers it. A Queue's spec changed: only the queue gate registers it.
EV_GROUP_CHANGE = "PodGroup/Change"
EV_QUEUE_CHANGE = "Queue/Change"
ALL_EVENTS = frozenset(
    {
        EV_NODE_ADD,
        EV_NODE_UPDATE,
        EV_POD_DELETE,
        EV_CLAIM_CHANGE,
        EV_SLICE_CHANGE,
        EV_CLASS_CHANGE,
        EV_TEMPLATE_ADD,
    }
)


@dataclass(frozen=True, slots=True, eq=False)
class ClusterEvent:
    """One change the scheduler saw: an EV_* name, the object before and after (None when it was added
    or deleted), and for node-scoped changes (a Node, a pod assigned to a node) the node's name.
    `memo` lets a plugin compute what the event means once for all the pods it asks about."""

    name: str
    old: Any = None
    new: Any = None
    node: str = ""
    memo: dict[Any, Any] = field(default_factory=dict)


def _field(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


class Plugin:
    """Base of all plugins: `name` identifies it in statuses; `events` wake pods it rejected, and
    `queueing_hint` says, per event and pod, whether the event may make the pod schedulable (upstream's
    QueueingHintFn: Queue or QueueSkip). A hint must never say no to an event that could help: it only
    spares pods retries that are bound to fail."""

    name = "Plugin"
    events: frozenset[str] = ALL_EVENTS
    # True when `queueing_hint` never says no to an event that could help a pod this plugin rejected,
    # and the plugin's answers change only through the events it registered: a pod only such plugins
    # rejected can wait for an event, with no 5-minute retry as a safety net (SchedulingQueue).
    exact_hints: ClassVar[bool] = False
    # A cheap Filter that rules out many nodes (a gang's topology domain): runs before the profile's
    # other filters, so the allocator is not asked about nodes it would discard anyway.
    filter_first = False

    def bind_cache(self, cache: SchedulerCache) -> None:
        """Called once with the scheduler's cache (the snapshot plugins read)."""
        self.cache = cache

    def queueing_hint(self, event: ClusterEvent, pi: PodInfo) -> bool:
        """Whether `event` may make `pi`, which this plugin rejected, schedulable (default: yes)."""
        return True

    def drop_caches(self) -> None:
        """Forget what was derived for pod shapes (memory back after a burst); rebuilt on demand."""

    def open_session(self, ssn: Session) -> None:
        """A session opened (kdra.scheduler.session): read what this plugin needs of it (another plugin,
        what the session plugins contributed)."""


class QueueSortPlugin(Plugin):
    def sort_key(self, pi: PodInfo) -> tuple[SortKey, ...]:
        raise NotImplementedError


class PreEnqueuePlugin(Plugin):
    def pre_enqueue(self, pi: PodInfo) -> Status:
        return SUCCESS


class PreFilterPlugin(Plugin):
    def pre_filter(self, state: CycleState, pi: PodInfo) -> Status:
        return SUCCESS


class FilterPlugin(Plugin):
    # Node fields Filter reads, for plugins whose Filter reads only the pod and the node (no PreFilter
    # state): a change to one node can then only change the answer on that node, so the queueing hint
    # for a node-scoped event is exact: a Node update that leaves these fields alone cannot help, and
    # otherwise the event helps iff Filter now passes on that node. None: no such hint (always queue).
    node_fields: ClassVar[tuple[tuple[str, ...], ...] | None] = None

    def filter(self, state: CycleState, pi: PodInfo, ni: NodeInfo) -> Status:
        return SUCCESS

    def queueing_hint(self, event: ClusterEvent, pi: PodInfo) -> bool:
        if self.node_fields is None or not event.node:
            return True
        unchanged = event.old is not None and event.new is not None
        if (
            event.name == EV_NODE_UPDATE
            and unchanged
            and all(_field(event.old, f) == _field(event.new, f) for f in self.node_fields)
        ):
            return False
        ni = self.cache.node_by_name.get(event.node)
        if ni is None:  # the node is gone: it cannot make the pod pass there
            return False
        return self.filter(CycleState(), pi, ni).ok

    def signature(self, state: CycleState, pi: PodInfo) -> Hashable:
        """Everything of the pod (and cycle state) that this plugin's Filter reads; pods with equal
        signatures get equal answers on a node whose generation did not change. None = do not cache."""
        return None

    def own_names(self, state: CycleState, pi: PodInfo) -> Sequence[str]:
        """The names of the pod's own objects that this plugin's Filter texts may carry, in an order pods
        with equal signatures share: their answers are shared with these names neutral
        (kdra.scheduler.owntext)."""
        return ()


class PostFilterPlugin(Plugin):
    def post_filter(self, state: CycleState, pi: PodInfo, statuses: Mapping[str, Status]) -> PostFilterResult:
        return PostFilterResult()


@dataclass(slots=True)
class PostFilterResult:
    nominated_node: str = ""
    status: Status = field(default_factory=lambda: unschedulable())


class ScorePlugin(Plugin):
    weight = 1

    def score(self, state: CycleState, pi: PodInfo, ni: NodeInfo) -> int:
        return 0

    def signature(self, state: CycleState, pi: PodInfo) -> Hashable:
        return None

    def needs_normalize(self, state: CycleState, pi: PodInfo) -> bool:
        """True when scores are rescaled across nodes (NormalizeScore); those cannot be cached as totals."""
        return False

    def normalize(self, state: CycleState, pi: PodInfo, scores: dict[int, int]) -> None:
        """Rescale raw scores in place (node idx -> score)."""

    def active(self, state: CycleState, pi: PodInfo) -> bool:
        """False when the plugin would score every node alike for this pod (skipped)."""
        return True


class ReservePlugin(Plugin):
    def reserve(self, state: CycleState, pi: PodInfo, node: str) -> Status:
        return SUCCESS

    def unreserve(self, state: CycleState, pi: PodInfo, node: str) -> None:
        return None


class PermitPlugin(Plugin):
    """Permit (kube-scheduler): after Reserve, approve the pod, reject it, or return Code.WAIT to hold it
    reserved until `Scheduler.allow_waiting` / `reject_waiting` (gang scheduling waits for all members)."""

    def permit(self, state: CycleState, pi: PodInfo, node: str) -> Status:
        return SUCCESS


class PreBindPlugin(Plugin):
    def pre_bind(self, state: CycleState, pi: PodInfo, node: str) -> Status:
        return SUCCESS


P = TypeVar("P", bound=Plugin)


@dataclass
class Profile:
    """A scheduler profile: the plugins at each extension point, in order."""

    name: str = "default-scheduler"
    plugins: Sequence[Plugin] = ()

    def at(self, kind: type[P]) -> list[P]:
        return [p for p in self.plugins if isinstance(p, kind)]
