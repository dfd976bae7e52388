"""Retrying a parked activity in the pure decision step (docs/decisions/0009): only while the
workflow still waits on that exact activity, parked, with the claimer's run dead-lettered; every
other case refused with the reason that tells an operator why, and every redrive request answered."""

from datetime import UTC, datetime

import pytest

from slotflow.contracts import (
    ActivityCompleted,
    ActivityFailed,
    ActivityParked,
    ActivityRetried,
    ActivityScheduled,
    HistoryEvent,
    RedriveRequested,
    RetryActivity,
    WorkflowFailed,
)
from slotflow.history import OpenWork
from slotflow.history.fold import Recorded, fold
from slotflow.issuers import RunRecord
from slotflow_orchestrator.stepping import Row, step
from tests.unit.orchestrator.test_stepping import NOW, RUNNING, WF, Scripted, item, started

CLOSED = Row("checkout", "failed")


def parked_history() -> list[HistoryEvent]:
    return [
        *started(),
        ActivityScheduled(
            workflow_id=WF, sequence=2, activity="shipping.book", run_id=f"{WF}/2", on_dead_letter="park"
        ),
        ActivityParked(
            workflow_id=WF, sequence=3, scheduled_sequence=2, reason="attempts_exhausted", error_type="Closed"
        ),
    ]


def dead(redrives: int = 0, state: str = "dead_lettered") -> dict[str, RunRecord]:
    return {f"{WF}/2": RunRecord(f"{WF}/2", state, 2, 2, "shipping.book", redrive_count=redrives)}


def request(sequence: int = 2) -> RedriveRequested:
    return RedriveRequested(
        request_id="a" * 32,
        dead_letter_id="t:0:9",
        command_id="redrive-1",
        target="orchestrator",
        kind="activity",
        topic="t",
        partition=0,
        offset=9,
        run_id=f"{WF}/{sequence}",
        workflow_id=WF,
        sequence=sequence,
    )


def test_a_retry_of_a_parked_activity_appends_activity_retried_and_reissues_it() -> None:
    out = step(
        WF, RUNNING, parked_history(), [item(RetryActivity(workflow_id=WF, sequence=2), "r1")],
        workflow_code=Scripted(), now=NOW, records=dead(redrives=1),
    )  # fmt: skip
    [retried] = out.events
    assert isinstance(retried, ActivityRetried)
    assert (retried.sequence, retried.scheduled_sequence, retried.redrive, retried.command_id) == (
        4,
        2,
        2,
        "r1",
    )
    [(activity, redrive)] = out.reissues
    assert (activity.sequence, activity.activity, redrive) == (2, "shipping.book", 2)
    assert [(a.command_id, a.reason) for a in out.acks] == [("r1", None)]
    # Retried, it is no longer parked: a second retry before its outcome is refused.
    again = step(
        WF, RUNNING, [*parked_history(), retried], [item(RetryActivity(workflow_id=WF, sequence=2), "r2")],
        workflow_code=Scripted(), now=NOW, records=dead(redrives=2),
    )  # fmt: skip
    assert again.events == []
    assert again.acks[0].reason == (
        f"shipping.book #2 of workflow {WF} is not parked: its run is still being tried (or was retried already)"
    )


def test_a_redrive_request_is_answered_either_way() -> None:
    done = step(
        WF, RUNNING, parked_history(), [item(request(), "redrive:" + "a" * 32)],
        workflow_code=Scripted(), now=NOW, records=dead(),
    )  # fmt: skip
    [answer] = done.redrive_answers
    assert answer.done
    assert answer.reason == f"retried activity shipping.book #2 of workflow {WF} (redrive 1)"
    assert done.acks == []  # a request is no command: its answer goes to the dlq
    retried = done.events[0]
    assert isinstance(retried, ActivityRetried)
    assert retried.command_id == "redrive-1"  # the operator's command, not the request's id
    refused = step(
        WF, RUNNING, parked_history(), [item(request(sequence=5), "redrive:" + "a" * 32)],
        workflow_code=Scripted(), now=NOW, records=dead(),
    )  # fmt: skip
    [answer] = refused.redrive_answers
    assert (answer.done, answer.reason) == (False, f"workflow {WF} has no activity at #5")
    assert refused.events == []


def compensated_history() -> list[HistoryEvent]:
    return [
        *started(),
        ActivityScheduled(workflow_id=WF, sequence=2, activity="payments.authorize", run_id=f"{WF}/2"),
        ActivityCompleted(workflow_id=WF, sequence=3, scheduled_sequence=2),
        ActivityScheduled(workflow_id=WF, sequence=4, activity="payments.capture", run_id=f"{WF}/4"),
        ActivityFailed(
            workflow_id=WF, sequence=5, scheduled_sequence=4, error_type="Declined", permanent=True
        ),
        ActivityScheduled(
            workflow_id=WF,
            sequence=6,
            activity="payments.void",
            run_id=f"{WF}/6",
            compensation=True,
            compensates=2,
        ),
        ActivityCompleted(workflow_id=WF, sequence=7, scheduled_sequence=6),
        WorkflowFailed(workflow_id=WF, sequence=8, error_type="Declined", compensated=True),
    ]


@pytest.mark.parametrize(
    ("history", "row", "sequence", "records", "reason"),
    [
        ([], None, 2, {}, f"workflow {WF} is not known"),
        (
            compensated_history(), CLOSED, 4, {},
            f"{WF} already compensated this step: payments.capture #4 failed at #5, then payments.void at #6 ran",
        ),
        (
            [*parked_history(), WorkflowFailed(workflow_id=WF, sequence=4, error_type="WorkflowTerminated")],
            CLOSED, 2, dead(), f"workflow {WF} is closed (failed): it no longer waits on shipping.book #2",
        ),
        (
            [*parked_history(), ActivityCompleted(workflow_id=WF, sequence=4, scheduled_sequence=2)],
            RUNNING, 2, dead(), f"workflow {WF} no longer waits on shipping.book #2: it completed at #4",
        ),
        (parked_history(), RUNNING, 2, {}, f"the claimer holds no run {WF}/2 (purged, or never claimed)"),
        (
            parked_history(), RUNNING, 2, dead(state="running"),
            f"the claimer's run {WF}/2 is running, not dead-lettered",
        ),
    ],
)  # fmt: skip
def test_a_retry_that_cannot_be_carried_out_is_refused_with_the_reason(
    history: list[HistoryEvent], row: Row | None, sequence: int, records: dict[str, RunRecord], reason: str
) -> None:
    out = step(
        WF, row, history, [item(RetryActivity(workflow_id=WF, sequence=sequence), "r")],
        workflow_code=Scripted(), now=NOW, records=records,
    )  # fmt: skip
    assert out.events == []
    assert out.reissues == []
    assert [(a.command_id, a.reason) for a in out.acks] == [("r", reason)]


def test_open_work_and_the_fold_follow_parked_and_retried() -> None:
    history = parked_history()
    assert set(OpenWork.of(history).parked) == {2}
    retried = ActivityRetried(workflow_id=WF, sequence=4, scheduled_sequence=2, redrive=1, command_id="r1")
    work = OpenWork.of([*history, retried])
    assert (set(work.parked), set(work.activities)) == (set(), {2})
    at = datetime(2026, 12, 3, tzinfo=UTC)
    state = fold([Recorded(e, at) for e in [*history, retried]])
    assert state is not None
    [step_] = state.steps
    assert (step_["state"], step_["retries"], step_["error"]) == ("scheduled", 1, None)
    assert fold([Recorded(e, at) for e in history]) is not None
    parked_state = fold([Recorded(e, at) for e in history])
    assert parked_state is not None
    assert parked_state.steps[0]["state"] == "parked"
