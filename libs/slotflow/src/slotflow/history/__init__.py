"""Reading a workflow's recorded history: the pure fold from events to state.

The api's read model, `slotflow replay` and the orchestrator read history through this package
(docs/workflows-history.md).
"""

from slotflow.history.fold import (
    STATUSES,
    TERMINAL_STATUSES,
    Recorded,
    WorkflowState,
    contiguous,
    fold,
)

__all__ = ["STATUSES", "TERMINAL_STATUSES", "Recorded", "WorkflowState", "contiguous", "fold"]
