"""The object store: get/list/watch/create/update/delete with resourceVersion and conflicts.

`Store` is the interface the scheduler and the simulator use; `MemoryStore` is the embedded default.
"""

from kdra.api.types import Obj
from kdra.cluster.clock import VirtualClock, WallClock, format_time
from kdra.cluster.selectors import LabelSelector, from_label_selector, parse_selector
from kdra.cluster.store import (
    AlreadyExistsError,
    ConflictError,
    InvalidObjectError,
    MemoryStore,
    NotFoundError,
    Store,
    StoreError,
    Watch,
    WatchEvent,
    clone,
    obj_key,
)

__all__ = [
    "AlreadyExistsError",
    "ConflictError",
    "InvalidObjectError",
    "LabelSelector",
    "MemoryStore",
    "NotFoundError",
    "Obj",
    "Store",
    "StoreError",
    "VirtualClock",
    "WallClock",
    "Watch",
    "WatchEvent",
    "clone",
    "format_time",
    "from_label_selector",
    "obj_key",
    "parse_selector",
]
