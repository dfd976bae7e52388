"""Replay recorded histories against the current code, before deploying it.

    from slotflow.workflow import Replayer
    result = Replayer(workflows=[Checkout]).replay(history)   # NonDeterminismError on a mismatch

`replay` re-runs the code against every event of the history's last run and checks each decision,
exactly as the orchestrator does after a crash, but acts on nothing. The result says how the run
stands and which decisions the code would make next if the history's last inputs are still
unanswered (a history cut off mid-run is fine).
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from slotflow.contracts.workflows import (
    HistoryEvent,
    WorkflowCancelled,
    WorkflowCompleted,
    WorkflowContinuedAsNew,
    WorkflowFailed,
)
from slotflow.workflow.runtime import DEFAULT_MAX_HISTORY_EVENTS, WorkflowRuntime, run_start

Status = Literal["running", "completed", "failed", "cancelled", "continued_as_new"]
_STATUS: dict[type[HistoryEvent], Status] = {
    WorkflowCompleted: "completed",
    WorkflowFailed: "failed",
    WorkflowCancelled: "cancelled",
    WorkflowContinuedAsNew: "continued_as_new",
}
#: Replays use a fixed instant for decisions the history does not have yet (they are only reported).
REPLAY_NOW = datetime(2000, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """A clean replay: the code matched every recorded decision."""

    workflow_id: str
    workflow_type: str
    #: Events of the replayed run (from its WorkflowStarted on).
    events: int
    status: Status
    #: Decisions the code makes now that the history does not have yet (its last inputs unanswered).
    next_events: list[HistoryEvent] = field(default_factory=list)


class Replayer:
    """Checks recorded histories against workflow classes; see the module docstring."""

    def __init__(
        self, workflows: Iterable[type[object]], *, max_history_events: int = DEFAULT_MAX_HISTORY_EVENTS
    ) -> None:
        self._runtime = WorkflowRuntime(workflows, max_history_events=max_history_events)

    def replay(self, history: Sequence[HistoryEvent]) -> ReplayResult:
        """Replay ``history`` against the code.

        Raises:
            NonDeterminismError: the first decision that differs (sequence, recorded, got).
            UnknownWorkflowType: the history's workflow type is not among ``workflows``.
            InvalidHistory: the history breaks the contract.
        """
        start = run_start(history)
        decision = self._runtime.replay(history, now=REPLAY_NOW)
        started = history[start]
        status: Status = _STATUS.get(type(history[-1]), "running")
        return ReplayResult(
            workflow_id=started.workflow_id,
            workflow_type=getattr(started, "workflow_type", ""),
            events=len(history) - start,
            status=status,
            next_events=list(decision.events),
        )

    def replay_all(self, histories: Iterable[Sequence[HistoryEvent]]) -> list[ReplayResult]:
        """Replay each history; stops at the first mismatch (its NonDeterminismError)."""
        return [self.replay(history) for history in histories]
