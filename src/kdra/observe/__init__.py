"""Claim-level observability: which claim holds which device, how full the fleet is, why pods wait.

`FleetState` (kdra.observe.model) keeps that picture current from watch events and renders it as
Prometheus text; `MetricsServer` serves it (`kdra exporter`); kdra.observe.top draws it in a terminal
(`kdra top`). Sources: a kdra store or simulation (kdra.observe.sources) and the Kubernetes API
(kdra.observe.kube). Metric names and meanings: docs/observability.md.
"""

from kdra.observe.model import FleetState
from kdra.observe.server import MetricsServer

__all__ = ["FleetState", "MetricsServer"]
