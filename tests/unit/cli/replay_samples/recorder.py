"""Record a history the way the orchestrator would: decide, answer every activity and timer, repeat."""

from datetime import UTC, datetime, timedelta
from typing import Any

from slotflow.contracts import (
    ActivityCompleted,
    ActivityScheduled,
    HistoryEvent,
    TimerStarted,
    WorkflowStarted,
    WorkflowTimerFired,
    wrap,
)
from slotflow.workflow.runtime import WorkflowRuntime

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def record(
    cls: type[object], workflow_type: str, workflow_id: str, order: dict[str, Any]
) -> list[HistoryEvent]:
    """The whole history of one run of ``cls``; each activity returns `{"done": name, "order": ...}`."""
    runtime = WorkflowRuntime([cls])
    history: list[HistoryEvent] = [
        WorkflowStarted(
            workflow_id=workflow_id,
            sequence=1,
            workflow_type=workflow_type,
            input=order,
            command_id=f"c-{workflow_id}",
        )
    ]
    now = T0
    for _ in range(100):
        decision = runtime.replay(history, now=now)
        history.extend(decision.events)
        if decision.closed:
            return history
        for event in decision.events:
            seq = history[-1].sequence + 1
            if isinstance(event, ActivityScheduled):
                history.append(
                    ActivityCompleted(
                        workflow_id=workflow_id,
                        sequence=seq,
                        scheduled_sequence=event.sequence,
                        result={"done": event.activity, "order": order.get("id")},
                    )
                )
            elif isinstance(event, TimerStarted):
                now = max(now, event.fire_at) + timedelta(seconds=1)
                history.append(
                    WorkflowTimerFired(
                        workflow_id=workflow_id,
                        sequence=seq,
                        started_sequence=event.sequence,
                        timer_id=event.timer_id,
                        fired_at=now,
                    )
                )
    raise AssertionError(f"{workflow_type} did not finish in 100 decisions")


def envelopes(history: list[HistoryEvent]) -> list[dict[str, Any]]:
    """The history as the topic carries it (JSON envelopes keyed by workflow id)."""
    return [
        wrap(
            e, id=f"{e.workflow_id}#{e.sequence}", key=e.workflow_id, source="orchestrator", occurred_at=T0
        ).model_dump(mode="json")
        for e in history
    ]
