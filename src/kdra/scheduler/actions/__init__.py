"""A session's actions, one module each (KAI-Scheduler's pkg/scheduler/actions): each gets the session
(kdra.scheduler.session) and works through the scheduler's cycle and the gangs-and-queues parts.

- `allocate`: pods one by one in queue order (kube-scheduler's scheduleOne loop: `AllocateAction`), or
  jobs queue by queue, all or nothing (`AllocateJobs`);
- `stale`: gangs running below their minimum evicted whole after a grace period;
- `reclaim`: jobs of queues below their fair share take from queues above theirs;
- `preempt`: a job takes from lower-priority jobs of its own queue;
- `report`: Queue status and the conditions of objects kdra cannot use.
"""

from kdra.scheduler.actions.allocate import AllocateAction, AllocateJobs
from kdra.scheduler.actions.preempt import Preempt
from kdra.scheduler.actions.reclaim import Reclaim
from kdra.scheduler.actions.report import Report
from kdra.scheduler.actions.stale import StaleGangs

__all__ = ["AllocateAction", "AllocateJobs", "Preempt", "Reclaim", "Report", "StaleGangs"]
