"""Building histories by hand, as the orchestrator would append them."""

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from slotflow.contracts.workflows import (
    ActivityCompleted,
    ActivityFailed,
    ActivityScheduled,
    CancelRequested,
    ChildWorkflowCompleted,
    ChildWorkflowFailed,
    HistoryEvent,
    SignalReceived,
    TimerStarted,
    WorkflowStarted,
    WorkflowTimerFired,
)
from slotflow.workflow.commands import Decision
from slotflow.workflow.runtime import WorkflowRuntime

T0 = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
WF = "wf-1"


class History:
    """A growing history plus the runtime deciding on it, like a tiny orchestrator."""

    def __init__(
        self,
        runtime: WorkflowRuntime,
        workflow_type: str,
        input: dict[str, Any] | None = None,
        *,
        workflow_id: str = WF,
        **started: Any,
    ) -> None:
        self.runtime = runtime
        self.events: list[HistoryEvent] = [
            WorkflowStarted(
                workflow_id=workflow_id,
                sequence=1,
                workflow_type=workflow_type,
                input=input or {},
                command_id="cmd-1",
                **started,
            )
        ]
        self.workflow_id = workflow_id
        self.now = T0
        self.decisions: list[Decision] = []

    @property
    def next(self) -> int:
        return self.events[-1].sequence + 1

    def replay(self) -> Decision:
        decision = self.runtime.replay(self.events, now=self.now)
        self.events.extend(decision.events)
        self.decisions.append(decision)
        return decision

    def add(self, model: type[HistoryEvent], **fields: Any) -> HistoryEvent:
        event = model(workflow_id=self.workflow_id, sequence=self.next, **fields)
        self.events.append(event)
        return event

    def complete(self, scheduled: int, result: Any = None) -> None:
        self.add(ActivityCompleted, scheduled_sequence=scheduled, result=result)

    def fail(self, scheduled: int, error_type: str = "Boom", *, permanent: bool = True) -> None:
        self.add(
            ActivityFailed,
            scheduled_sequence=scheduled,
            error_type=error_type,
            message="it broke",
            permanent=permanent,
        )

    def fire(self, started: int) -> None:
        timer = self.events[started - self.events[0].sequence]
        self.now = timer.fire_at  # type: ignore[attr-defined]
        self.add(
            WorkflowTimerFired,
            started_sequence=started,
            timer_id=timer.timer_id,  # type: ignore[attr-defined]
            fired_at=self.now,
        )

    def signal(self, name: str, payload: dict[str, Any] | None = None) -> None:
        self.add(SignalReceived, signal=name, payload=payload or {})

    def cancel(self, reason: str = "customer cancelled") -> None:
        self.add(CancelRequested, reason=reason)

    def child_done(self, initiated: int, child_id: str, result: Any = None) -> None:
        self.add(
            ChildWorkflowCompleted, initiated_sequence=initiated, child_workflow_id=child_id, result=result
        )

    def child_failed(self, initiated: int, child_id: str, error_type: str = "Boom") -> None:
        self.add(
            ChildWorkflowFailed,
            initiated_sequence=initiated,
            child_workflow_id=child_id,
            error_type=error_type,
            message="child broke",
        )

    def drive(self, *, stop_at: str | None = None) -> "History":
        """Decide, then answer what the decision asked for (each activity completed with None, each
        timer fired), until a decision asks for nothing more, or right after one holding an event
        of type ``stop_at`` (left unanswered): the history a run of the code records."""
        while True:
            decision = self.replay()
            if any(e.message_type == stop_at for e in decision.events):
                return self
            asked = [e for e in decision.events if isinstance(e, ActivityScheduled | TimerStarted)]
            if not asked:
                return self
            for event in asked:
                if isinstance(event, ActivityScheduled):
                    self.complete(event.sequence)
                else:
                    self.fire(event.sequence)

    def advance(self, delta: timedelta) -> None:
        self.now += delta


def types(events: Sequence[HistoryEvent]) -> list[str]:
    return [e.message_type.removeprefix("workflow.") for e in events]
