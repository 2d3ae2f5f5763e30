"""Capacity planning for DRA pods and gangs (`kdra plan`, docs/plan.md): the cheapest nodes to add so pending
pods fit (`plan_scale_up`), the nodes that can be drained (`plan_scale_down`), each checked with kdra's own
allocator, node filters and scheduler."""

from kdra.plan.inputs import Inputs, split
from kdra.plan.nodetypes import NodeType, node_types
from kdra.plan.scaledown import ScaleDown, plan_scale_down
from kdra.plan.scaleup import ScaleUp, plan_scale_up

__all__ = [
    "Inputs",
    "NodeType",
    "ScaleDown",
    "ScaleUp",
    "node_types",
    "plan_scale_down",
    "plan_scale_up",
    "split",
]
