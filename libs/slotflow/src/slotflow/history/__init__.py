"""Reading a workflow's recorded history (docs/workflows-history.md).

`fold` derives the state the api's read model and `slotflow replay` show (status, steps, timers,
children, saga, divergence); `OpenWork` folds, one event at a time, what the history leaves open
(the current run, its pending activities, timers and children, its end), which the orchestrator
decides with. Both are pure and agree on the pending work of the current run.
"""

from slotflow.history.fold import (
    STATUSES,
    TERMINAL_STATUSES,
    Recorded,
    WorkflowState,
    contiguous,
    fold,
    run_history,
)
from slotflow.history.open_work import OpenWork

__all__ = [
    "STATUSES",
    "TERMINAL_STATUSES",
    "OpenWork",
    "Recorded",
    "WorkflowState",
    "contiguous",
    "fold",
    "run_history",
]
