"""Reading a workflow's recorded history: the pure fold from events to state.

The api's read model and `slotflow replay` (which result answers which decision, whether a
divergence is still open) read history through this package (docs/workflows-history.md). The
orchestrator decides by replaying the workflow code itself (`slotflow.workflow`).
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
