"""An activity its workflow no longer waits on is abandoned: the step asks the claimers to cancel
its run (Step.activity_cancels) and the outbound rows carry a CancelActivity each, on the internal
topic, under an id derived from the run."""

from collections.abc import Sequence
from datetime import UTC, datetime

from slotflow.contracts import (
    ActivityCompleted,
    ActivityParked,
    ActivityScheduled,
    CancelActivity,
    CancelRequested,
    CancelWorkflow,
    HistoryEvent,
    SignalReceived,
    SignalWorkflow,
    TerminateWorkflow,
    WorkflowCancelled,
    WorkflowContinuedAsNew,
    WorkflowStarted,
    wrap,
)
from slotflow.contracts.topics import ACTIVITY_CANCELS
from slotflow.pg.outbox import Staged
from slotflow.settings import KafkaSettings
from slotflow_orchestrator.outbound import Outbound
from slotflow_orchestrator.stepping import Input, Moves, Row, abandoned_by_ended_runs, step

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
WF = "order-1"
RUNNING = Row("checkout", "running")


class Code:
    """The workflow code, scripted: `moves(history)` is what it does next."""

    def __init__(self, moves: "Moves | None" = None) -> None:
        self.moves = moves or Moves()

    def knows(self, workflow_type: str) -> bool:
        return workflow_type == "checkout"

    def signal_refusal(self, workflow_type: str, signal: str, payload: dict[str, object]) -> str | None:
        return None

    def replay(self, history: Sequence[HistoryEvent], *, now: datetime) -> Moves:
        moves = self.moves
        self.moves = Moves()
        return moves


def history(*activities: int) -> list[HistoryEvent]:
    events: list[HistoryEvent] = [
        WorkflowStarted(workflow_id=WF, sequence=1, workflow_type="checkout", command_id="c1")
    ]
    for sequence in activities:
        events.append(
            ActivityScheduled(
                workflow_id=WF, sequence=sequence, activity="ship.book", run_id=f"{WF}/{sequence}"
            )
        )
    return events


def command(message: CancelWorkflow | TerminateWorkflow, id: str = "cmd-9") -> Input:
    return Input(1, wrap(message, id=id, key=WF, source="test", occurred_at=NOW), message)


def test_a_cancelled_workflow_asks_the_claimers_to_cancel_its_pending_activities() -> None:
    code = Code(Moves(events=[WorkflowCancelled(workflow_id=WF, sequence=5, reason="customer cancelled")]))
    out = step(
        WF,
        RUNNING,
        history(2, 3),
        [command(CancelWorkflow(workflow_id=WF, reason="customer cancelled"))],
        workflow_code=code,
        now=NOW,
    )
    assert [type(e) for e in out.events] == [CancelRequested, WorkflowCancelled]
    assert out.status == "cancelled"
    assert sorted(out.activity_cancels) == [2, 3]
    activity, reason = out.activity_cancels[2]
    assert activity.run_id == f"{WF}/2"
    assert reason == f"workflow {WF} was cancelled: customer cancelled"

    rows = Outbound(KafkaSettings()).rows(out, out.events, now=NOW)
    cancels = [r.envelope for r in rows if isinstance(r, Staged) and r.topic == ACTIVITY_CANCELS.name]
    assert [e.id for e in cancels] == [f"{WF}/2/cancel", f"{WF}/3/cancel"]
    first = cancels[0]
    assert first.key == WF
    assert CancelActivity.model_validate(first.data).run_id == f"{WF}/2"
    assert first.data == {
        "workflow_id": WF,
        "sequence": 2,
        "run_id": f"{WF}/2",
        "handler": "ship.book",
        "reason": f"workflow {WF} was cancelled: customer cancelled",
    }


def test_a_terminated_workflow_cancels_its_activities_and_a_parked_one_is_left_alone() -> None:
    parked = ActivityParked(
        workflow_id=WF,
        sequence=4,
        scheduled_sequence=3,
        reason="permanent_error",
        error_type="E",
        message="m",
    )
    out = step(
        WF,
        RUNNING,
        [*history(2, 3), parked],
        [command(TerminateWorkflow(workflow_id=WF, reason="stuck"))],
        workflow_code=Code(),
        now=NOW,
    )
    assert out.status == "failed"
    assert list(out.activity_cancels) == [2]
    assert out.activity_cancels[2][1] == f"workflow {WF} was terminated: stuck"


def test_an_activity_the_code_cancelled_is_cancelled_while_the_workflow_goes_on() -> None:
    code = Code(Moves(events=[], cancel_activities=[2, 7]))  # 7 is nothing pending: ignored
    out = step(WF, RUNNING, history(2, 3), [], workflow_code=code, now=NOW, redecide=True)
    assert list(out.activity_cancels) == [2]
    assert out.activity_cancels[2][1] == f"workflow {WF} cancelled the activity"
    assert out.status is None  # nothing appended: the workflow runs on


def test_continuing_as_new_cancels_what_the_run_left_pending() -> None:
    code = Code(
        Moves(
            events=[
                WorkflowContinuedAsNew(workflow_id=WF, sequence=4, workflow_type="checkout", input={"n": 2})
            ]
        )
    )
    out = step(WF, RUNNING, history(2, 3), [], workflow_code=code, now=NOW, redecide=True)
    assert [type(e) for e in out.events] == [WorkflowContinuedAsNew, WorkflowStarted]
    assert sorted(out.activity_cancels) == [2, 3]
    assert out.activity_cancels[3][1] == f"workflow {WF} continued as new"


def test_a_workflow_that_ends_with_nothing_pending_cancels_nothing() -> None:
    code = Code(Moves(events=[WorkflowCancelled(workflow_id=WF, sequence=3, reason="")]))
    out = step(WF, RUNNING, history(), [command(CancelWorkflow(workflow_id=WF))], workflow_code=code, now=NOW)
    assert out.status == "cancelled"
    assert out.activity_cancels == {}


def test_a_cancel_the_code_passes_on_to_its_step_says_the_workflow_was_cancelled() -> None:
    """The runtime reports the step the cancelled body stopped waiting for; the reason is the
    workflow's cancellation, not the code's own."""
    code = Code(
        Moves(
            events=[WorkflowCancelled(workflow_id=WF, sequence=4, reason="customer cancelled")],
            cancel_activities=[2],
        )
    )
    out = step(
        WF,
        RUNNING,
        history(2),
        [command(CancelWorkflow(workflow_id=WF, reason="customer cancelled"))],
        workflow_code=code,
        now=NOW,
    )
    assert out.activity_cancels[2][1] == f"workflow {WF} was cancelled: customer cancelled"


def test_deciding_anew_asks_again_to_cancel_what_the_replayed_code_had_abandoned() -> None:
    # A rebuild (or a stuck workflow's new code) decides anew: the cancels the replayed history
    # had asked for are asked again, the ones with an outcome since left out.
    moves = Moves(events=[], abandoned_earlier=[2, 3])
    out = step(WF, RUNNING, history(2), [], workflow_code=Code(moves), now=NOW, redecide=True)
    assert list(out.activity_cancels) == [2]
    assert out.activity_cancels[2][1] == f"workflow {WF} cancelled the activity"


def test_an_ordinary_decision_does_not_ask_again() -> None:
    # Its cancel went out with the decision that abandoned it: every later decision replays past it.
    moves = Moves(events=[], abandoned_earlier=[2])
    signal = SignalWorkflow(workflow_id=WF, signal="nudge", payload={})
    inputs = [Input(1, wrap(signal, id="sig-1", key=WF, source="test", occurred_at=NOW), signal)]
    out = step(WF, RUNNING, history(2), inputs, workflow_code=Code(moves), now=NOW)
    assert [type(e) for e in out.events] == [SignalReceived]
    assert out.activity_cancels == {}


def test_the_activities_ended_runs_left_pending_are_derived_from_the_history() -> None:
    parked = ActivityParked(
        workflow_id=WF,
        sequence=4,
        scheduled_sequence=3,
        reason="permanent_error",
        error_type="E",
        message="m",
    )
    continued = WorkflowContinuedAsNew(workflow_id=WF, sequence=5, workflow_type="checkout", input={})
    second = WorkflowStarted(
        workflow_id=WF, sequence=6, workflow_type="checkout", command_id="c1", continued_from=5
    )
    late = ActivityScheduled(workflow_id=WF, sequence=7, activity="ship.book", run_id=f"{WF}/7")
    done = ActivityCompleted(workflow_id=WF, sequence=8, scheduled_sequence=7, result=None)
    waiting = ActivityScheduled(workflow_id=WF, sequence=9, activity="ship.book", run_id=f"{WF}/9")
    cancelled = WorkflowCancelled(workflow_id=WF, sequence=10, reason="customer cancelled")
    events = [*history(2, 3), parked, continued, second, late, done, waiting, cancelled]

    found = abandoned_by_ended_runs(WF, events)
    assert [(a.sequence, reason, end.sequence) for a, reason, end in found] == [
        (2, f"workflow {WF} continued as new", 5),  # 3 was parked: dead-lettered already
        (9, f"workflow {WF} was cancelled: customer cancelled", 10),
    ]
    # The open run's own pending work is not abandoned.
    assert [a.sequence for a, _, _ in abandoned_by_ended_runs(WF, events[:-1])] == [2]
