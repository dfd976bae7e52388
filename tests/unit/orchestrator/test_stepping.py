"""The pure decision step: which inputs become history, which are answered, which are dropped.

The workflow code here is a scripted stand-in for the workflow runtime (`replay` returns what a test
says the code would do next); the real runtime is exercised by the integration tests.
"""

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from slotflow.contracts import (
    ActivityCompleted,
    ActivityFailed,
    ActivityScheduled,
    AttemptRecord,
    CancelRequested,
    CancelWorkflow,
    Envelope,
    HistoryEvent,
    Message,
    NonDeterminismDetected,
    RunCompleted,
    RunDeadLettered,
    SearchAttributesUpserted,
    SignalReceived,
    SignalWorkflow,
    StartWorkflow,
    TerminateWorkflow,
    TimerFired,
    TimerStarted,
    WorkflowCompleted,
    WorkflowContinuedAsNew,
    WorkflowFailed,
    WorkflowStarted,
    WorkflowTimerFired,
    wrap,
)
from slotflow.contracts.search import search_attribute, typed_search_attributes
from slotflow.issuers import RunRecord
from slotflow_orchestrator.stepping import (
    TERMINATED,
    TIMED_OUT,
    BrokenDecision,
    Diverged,
    Input,
    Moves,
    Row,
    execution_timer_id,
    step,
)

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
WF = "order-1"


class Scripted:
    """Knows `checkout`; `replay` answers with whatever `script(history)` returns."""

    def __init__(
        self, script: Callable[[Sequence[HistoryEvent]], Sequence[HistoryEvent]] | None = None
    ) -> None:
        self.script = script or (lambda history: ())
        self.calls: list[int] = []

    def knows(self, workflow_type: str) -> bool:
        return workflow_type == "checkout"

    def signal_refusal(self, workflow_type: str, signal: str, payload: dict[str, Any]) -> str | None:
        # Its `parcel` handler takes a weight in grams only.
        if workflow_type == "checkout" and signal == "parcel" and not isinstance(payload.get("grams"), int):
            return "the payload does not fit the parameter of handler Checkout.parcel: grams: not an int"
        return None

    def replay(self, history: Sequence[HistoryEvent], *, now: datetime) -> Moves:
        self.calls.append(len(history))
        return Moves(events=list(self.script(history)))


def schedule_next(
    activity: str = "inventory.reserve",
) -> Callable[[Sequence[HistoryEvent]], list[HistoryEvent]]:
    def script(history: Sequence[HistoryEvent]) -> list[HistoryEvent]:
        seq = len(history) + 1
        return [ActivityScheduled(workflow_id=WF, sequence=seq, activity=activity, run_id=f"{WF}/{seq}")]

    return script


def item(message: Message, id: str, seq: int = 1) -> Input:
    envelope: Envelope = wrap(message, id=id, key=WF, source="test", occurred_at=NOW)
    return Input(seq, envelope, message)


def started() -> list[HistoryEvent]:
    return [WorkflowStarted(workflow_id=WF, sequence=1, workflow_type="checkout", command_id="c1")]


def scheduled() -> list[HistoryEvent]:
    return [
        *started(),
        ActivityScheduled(workflow_id=WF, sequence=2, activity="inventory.reserve", run_id=f"{WF}/2"),
    ]


RUNNING = Row("checkout", "running")


def run_completed(sequence: int, result: object = None, token: int = 1) -> RunCompleted:
    return RunCompleted(
        run_id=f"{WF}/{sequence}",
        job_id=WF,
        slot=NOW,
        attempt=1,
        fence_token=token,
        owner="c",
        workflow_id=WF,
        sequence=sequence,
        result=result,
        started_at=NOW,
        finished_at=NOW,
    )


def completed_record(sequence: int, result: object = None, token: int = 1) -> dict[str, RunRecord]:
    """The claimer's record of the run `run_completed` reports (the activity `scheduled` schedules)."""
    run_id = f"{WF}/{sequence}"
    return {run_id: RunRecord(run_id, "completed", token, 1, "inventory.reserve", result=result)}


def test_a_start_appends_workflow_started_and_the_codes_first_move() -> None:
    workflow_code = Scripted(schedule_next())
    start = StartWorkflow(workflow_id=WF, workflow_type="checkout", input={"order": 1})
    out = step(WF, None, [], [item(start, "c1")], workflow_code=workflow_code, now=NOW)
    assert [type(e) for e in out.events] == [WorkflowStarted, ActivityScheduled]
    first = out.events[0]
    assert isinstance(first, WorkflowStarted)
    assert first.command_id == "c1"
    assert first.input == {"order": 1}
    assert out.status == "running"
    assert out.started == start
    assert [(a.command_id, a.reason) for a in out.acks] == [("c1", None)]
    assert workflow_code.calls == [1]


def test_a_start_of_an_unknown_type_is_rejected_and_appends_nothing() -> None:
    start = StartWorkflow(workflow_id=WF, workflow_type="nope", input={})
    out = step(WF, None, [], [item(start, "c1")], workflow_code=Scripted(), now=NOW)
    assert out.events == []
    assert out.status is None
    assert out.acks[0].reason == "unknown workflow type 'nope'"


def closed() -> list[HistoryEvent]:
    return [*started(), WorkflowCompleted(workflow_id=WF, sequence=2, result={"n": 1})]


CLOSED = Row("checkout", "completed")


@pytest.mark.parametrize(
    ("policy", "history", "row", "answer"),
    [
        (
            "reject_duplicate",
            scheduled(),
            RUNNING,
            "already exists (running); id_reuse_policy is reject_duplicate",
        ),
        (
            "reject_duplicate",
            closed(),
            CLOSED,
            "already exists (closed); id_reuse_policy is reject_duplicate",
        ),
        (
            "allow_after_close",
            scheduled(),
            RUNNING,
            "is still open (running); id_reuse_policy allow_after_close",
        ),
    ],
)
def test_a_start_of_a_taken_id_refused_by_its_policy_appends_nothing(
    policy: str, history: list[HistoryEvent], row: Row, answer: str
) -> None:
    start = StartWorkflow(workflow_id=WF, workflow_type="checkout", id_reuse_policy=policy)  # type: ignore[arg-type]
    out = step(WF, row, history, [item(start, "c2")], workflow_code=Scripted(), now=NOW)
    assert out.events == []
    assert out.acks[0].reason is not None
    assert answer in out.acks[0].reason


@pytest.mark.parametrize("policy", ["allow_after_close", "terminate_running"])
def test_a_closed_id_reused_starts_a_new_run_after_the_last_ones_end(policy: str) -> None:
    start = StartWorkflow(workflow_id=WF, workflow_type="checkout", input={"n": 2}, id_reuse_policy=policy)  # type: ignore[arg-type]
    out = step(WF, CLOSED, closed(), [item(start, "c2")], workflow_code=Scripted(schedule_next()), now=NOW)
    assert [type(e) for e in out.events] == [WorkflowStarted, ActivityScheduled]
    again = out.events[0]
    assert isinstance(again, WorkflowStarted)
    assert (again.sequence, again.reused_after, again.command_id, again.input) == (3, 2, "c2", {"n": 2})
    assert out.events[1].sequence == 4
    assert out.status == "running"
    assert [(a.command_id, a.reason) for a in out.acks] == [("c2", None)]


def test_terminate_running_ends_the_open_run_cancels_its_timers_and_starts_the_next() -> None:
    history = [
        *started(),
        TimerStarted(workflow_id=WF, sequence=2, timer_id=f"{WF}/timer/2", fire_at=NOW + timedelta(hours=1)),
    ]
    row = Row("checkout", "running", NOW + timedelta(hours=2))
    start = StartWorkflow(
        workflow_id=WF,
        workflow_type="checkout",
        id_reuse_policy="terminate_running",
        execution_timeout=timedelta(minutes=5),
    )
    out = step(WF, row, history, [item(start, "c2")], workflow_code=Scripted(schedule_next()), now=NOW)
    assert [type(e) for e in out.events] == [WorkflowFailed, WorkflowStarted, ActivityScheduled]
    ended, again = out.events[0], out.events[1]
    assert isinstance(ended, WorkflowFailed)
    assert ended.error_type == TERMINATED
    assert "c2" in ended.message
    assert isinstance(again, WorkflowStarted)
    assert again.reused_after == 3
    # The first run's timers go; the new run's deadline has a timer id of its own.
    assert out.cancel_timers == [f"{WF}/timer/2", execution_timer_id(WF)]
    assert [t.timer_id for t in out.timers] == [execution_timer_id(WF, 4)]
    assert execution_timer_id(WF, 4) != execution_timer_id(WF)
    # The old run's execution timer firing late is not the new run's.
    late = TimerFired(timer_id=execution_timer_id(WF), owner=WF, fire_at=NOW, fired_at=NOW)
    after = step(
        WF,
        Row("checkout", "running", NOW),
        [*history, *out.events],
        [item(late, "t1")],
        workflow_code=Scripted(),
        now=NOW,
    )
    assert after.events == []


def test_an_execution_timeout_starts_a_timer_and_its_firing_fails_the_run() -> None:
    start = StartWorkflow(workflow_id=WF, workflow_type="checkout", execution_timeout=timedelta(minutes=5))
    out = step(WF, None, [], [item(start, "c1")], workflow_code=Scripted(schedule_next()), now=NOW)
    assert [(t.timer_id, t.fire_at) for t in out.timers] == [
        (execution_timer_id(WF), NOW + timedelta(minutes=5))
    ]
    fired = TimerFired(timer_id=execution_timer_id(WF), owner=WF, fire_at=NOW, fired_at=NOW)
    row = Row("checkout", "running", NOW + timedelta(minutes=5))
    late = step(
        WF, row, scheduled(), [item(fired, "t1")], workflow_code=Scripted(), now=NOW + timedelta(minutes=5)
    )
    assert len(late.events) == 1
    failed = late.events[0]
    assert isinstance(failed, WorkflowFailed)
    assert failed.error_type == TIMED_OUT
    assert failed.sequence == 3
    assert late.status == "failed"
    assert late.cancel_timers == [execution_timer_id(WF)]


def test_an_activity_result_counts_once_and_only_for_a_pending_activity() -> None:
    workflow_code = Scripted()
    inputs = [item(run_completed(2, {"ok": 1}), "r1"), item(run_completed(2, {"ok": 2}, token=2), "r2", 2)]
    records = completed_record(2, {"ok": 1})
    out = step(WF, RUNNING, scheduled(), inputs, workflow_code=workflow_code, now=NOW, records=records)
    assert len(out.events) == 1
    # The second names another claim (token 2): nothing is pending any more, and the claimer's
    # record (token 1) does not back it, so it changes nothing and is parked.
    assert [(r.input.envelope.id, r.verdict.rule) for r in out.refused] == [("r2", "fence")]
    done = out.events[0]
    assert isinstance(done, ActivityCompleted)
    assert done.scheduled_sequence == 2
    assert done.result == {"ok": 1}
    stray = step(
        WF, RUNNING, scheduled(), [item(run_completed(7), "r3")], workflow_code=workflow_code, now=NOW
    )
    assert stray.events == []
    assert stray.status is None
    assert [r.verdict.rule for r in stray.refused] == ["run_id"]


def test_a_dead_lettered_activity_fails_with_its_last_error() -> None:
    attempt = AttemptRecord(
        attempt=3,
        fence_token=3,
        owner="c",
        error_type="CardDeclined",
        message="no",
        started_at=NOW,
        finished_at=NOW,
    )
    dead = RunDeadLettered(
        run_id=f"{WF}/2",
        job_id=WF,
        slot=NOW,
        attempt=3,
        fence_token=3,
        owner="c",
        workflow_id=WF,
        sequence=2,
        reason="permanent_error",
        history=(attempt,),
    )
    # The claimer's record is what the history takes, not the event's copy of it.
    record = RunRecord(
        f"{WF}/2",
        "dead_lettered",
        3,
        3,
        "inventory.reserve",
        error={"error_type": "CardDeclined", "message": "no", "reason": "permanent_error"},
    )
    out = step(
        WF,
        RUNNING,
        scheduled(),
        [item(dead, "d1")],
        workflow_code=Scripted(),
        now=NOW,
        records={record.run_id: record},
    )
    failed = out.events[0]
    assert isinstance(failed, ActivityFailed)
    assert (failed.error_type, failed.message, failed.permanent) == ("CardDeclined", "no", True)


def test_signal_and_cancel_reach_a_running_workflow_and_are_refused_after_the_end() -> None:
    signal = SignalWorkflow(workflow_id=WF, signal="address", payload={"zip": "1"})
    cancel = CancelWorkflow(workflow_id=WF, reason="customer")
    out = step(
        WF,
        RUNNING,
        scheduled(),
        [item(signal, "s1"), item(cancel, "x1", 2)],
        workflow_code=Scripted(),
        now=NOW,
    )
    assert [type(e) for e in out.events] == [SignalReceived, CancelRequested]
    assert [e.sequence for e in out.events] == [3, 4]
    assert all(a.reason is None for a in out.acks)
    ended = [*scheduled(), WorkflowCompleted(workflow_id=WF, sequence=3)]
    late = step(
        WF, Row("checkout", "completed"), ended, [item(signal, "s2")], workflow_code=Scripted(), now=NOW
    )
    assert late.events == []
    assert late.acks[0].reason == f"workflow {WF} has already ended"
    unknown = step(WF, None, [], [item(signal, "s3")], workflow_code=Scripted(), now=NOW)
    assert unknown.acks[0].reason == f"workflow {WF} is not known"


def test_a_command_meant_for_another_run_of_the_id_is_rejected() -> None:
    # The id was reused: the current run began with start c2, after the run c1 began had ended.
    reused = [
        *started(),
        WorkflowCompleted(workflow_id=WF, sequence=2),
        WorkflowStarted(
            workflow_id=WF, sequence=3, workflow_type="checkout", command_id="c2", reused_after=2
        ),
    ]
    stale = [
        item(SignalWorkflow(workflow_id=WF, signal="go", start_command_id="c1"), "s1"),
        item(CancelWorkflow(workflow_id=WF, start_command_id="c1"), "x1", 2),
        item(TerminateWorkflow(workflow_id=WF, start_command_id="c1"), "t1", 3),
    ]
    out = step(WF, RUNNING, reused, stale, workflow_code=Scripted(), now=NOW)
    assert out.events == []
    assert [a.reason for a in out.acks] == [
        f"workflow {WF}'s current run was started by command 'c2', not 'c1': the run that command "
        "began has ended and the id was reused (or it began none)"
    ] * 3
    own = step(
        WF,
        RUNNING,
        reused,
        [item(CancelWorkflow(workflow_id=WF, start_command_id="c2"), "x2")],
        workflow_code=Scripted(),
        now=NOW,
    )
    assert [type(e) for e in own.events] == [CancelRequested]


def test_a_signal_its_handler_cannot_take_is_rejected_with_the_reason_and_appends_nothing() -> None:
    bad = SignalWorkflow(workflow_id=WF, signal="parcel", payload={"grams": "heavy"})
    good = SignalWorkflow(workflow_id=WF, signal="parcel", payload={"grams": 1200})
    workflow_code = Scripted()
    out = step(
        WF, RUNNING, scheduled(), [item(bad, "s1"), item(good, "s2", 2)], workflow_code=workflow_code, now=NOW
    )
    (received,) = out.events
    assert isinstance(received, SignalReceived)
    assert (received.payload, received.command_id) == ({"grams": 1200}, "s2")
    rejected, accepted = out.acks
    assert rejected.command_id == "s1"
    assert rejected.reason == (
        f"signal 'parcel' to workflow {WF}: the payload does not fit the parameter of handler "
        "Checkout.parcel: grams: not an int"
    )
    assert accepted.reason is None
    # A rejected signal alone changes nothing: the code is not even asked.
    workflow_code.calls.clear()
    alone = step(WF, RUNNING, scheduled(), [item(bad, "s3")], workflow_code=workflow_code, now=NOW)
    assert alone.events == []
    assert alone.acks[0].reason is not None
    assert workflow_code.calls == []


def test_terminate_ends_the_run_without_the_code_and_cancels_its_timers() -> None:
    history = [
        *started(),
        TimerStarted(workflow_id=WF, sequence=2, timer_id=f"{WF}/timer/2", fire_at=NOW + timedelta(hours=1)),
    ]
    workflow_code = Scripted(schedule_next())
    out = step(
        WF,
        RUNNING,
        history,
        [item(TerminateWorkflow(workflow_id=WF, reason="ops"), "k1")],
        workflow_code=workflow_code,
        now=NOW,
    )
    assert len(out.events) == 1
    ended = out.events[0]
    assert isinstance(ended, WorkflowFailed)
    assert ended.error_type == TERMINATED
    assert ended.message == "ops"
    assert workflow_code.calls == []
    assert out.cancel_timers == [f"{WF}/timer/2"]


def test_a_timer_firing_is_recorded_once() -> None:
    history = [
        *started(),
        TimerStarted(workflow_id=WF, sequence=2, timer_id=f"{WF}/timer/2", fire_at=NOW),
    ]
    fired = TimerFired(timer_id=f"{WF}/timer/2", owner=WF, sequence=2, fire_at=NOW, fired_at=NOW)
    out = step(
        WF, RUNNING, history, [item(fired, "t1"), item(fired, "t2", 2)], workflow_code=Scripted(), now=NOW
    )
    assert len(out.events) == 1
    assert isinstance(out.events[0], WorkflowTimerFired)


def test_divergence_appends_non_determinism_once_and_leaves_the_workflow_stuck() -> None:
    class Diverging(Scripted):
        def replay(self, history: Sequence[HistoryEvent], *, now: datetime) -> Moves:
            raise Diverged(2, "workflow.activity_scheduled inventory.reserve", "activity payments.charge")

    out = step(
        WF,
        RUNNING,
        scheduled(),
        [item(run_completed(2), "r1")],
        workflow_code=Diverging(),
        now=NOW,
        records=completed_record(2),
    )
    assert [type(e) for e in out.events] == [ActivityCompleted, NonDeterminismDetected]
    assert out.status == "stuck"
    assert out.diverged
    stuck = [*scheduled(), *out.events]
    again = step(WF, Row("checkout", "stuck"), stuck, [], workflow_code=Diverging(), now=NOW, redecide=True)
    assert again.events == []
    assert again.status is None


def test_a_runtime_that_skips_a_sequence_keeps_nothing() -> None:
    def gap(history: Sequence[HistoryEvent]) -> list[HistoryEvent]:
        return [WorkflowCompleted(workflow_id=WF, sequence=len(history) + 2)]

    with pytest.raises(BrokenDecision):
        step(
            WF,
            RUNNING,
            scheduled(),
            [item(run_completed(2), "r1")],
            workflow_code=Scripted(gap),
            now=NOW,
            records=completed_record(2),
        )


@pytest.mark.parametrize("status", ["completed", "failed", "cancelled"])
def test_a_closed_workflow_whose_history_was_purged_is_still_ended(status: str) -> None:
    """The retention purged its history rows; the row alone keeps its id taken and its end."""
    workflow_code = Scripted(schedule_next())
    row = Row("checkout", status)  # type: ignore[arg-type]
    again = StartWorkflow(workflow_id=WF, workflow_type="checkout", input={})
    signal = SignalWorkflow(workflow_id=WF, signal="go")
    cancel = CancelWorkflow(workflow_id=WF, reason="late")
    inputs = [
        item(again, "c2", 1),
        item(signal, "s1", 2),
        item(cancel, "x1", 3),
        item(run_completed(2), "r", 4),
    ]
    out = step(WF, row, [], inputs, workflow_code=workflow_code, now=NOW)
    assert out.events == []
    assert out.started is None
    assert out.status is None
    assert workflow_code.calls == []
    assert [(a.command_id, a.reason) for a in out.acks] == [
        ("c2", f"workflow {WF} already exists (closed, history purged); id_reuse_policy is reject_duplicate"),
        ("s1", f"workflow {WF} has already ended"),
        ("x1", f"workflow {WF} has already ended"),
    ]


# -- outcomes checked against their issuer (slotflow.issuers) ---------------------------------------


def test_a_forged_run_completed_under_another_run_id_is_refused_and_appends_nothing() -> None:
    forged = run_completed(2, {"paid_to": "attacker"}, token=999).model_copy(
        update={"run_id": "attacker-run", "owner": "attacker"}
    )
    out = step(
        WF,
        RUNNING,
        scheduled(),
        [item(forged, "f1")],
        workflow_code=Scripted(),
        now=NOW,
        records=completed_record(2),
    )
    assert (out.events, out.status, out.cancel_timers) == ([], None, [])
    [refusal] = out.refused
    assert refusal.input.envelope.id == "f1"
    assert (refusal.verdict.reason, refusal.verdict.rule) == ("unproven_outcome", "run_id")


def test_a_guessed_fence_is_refused_then_the_genuine_outcome_counts_with_the_recorded_result() -> None:
    guessed = run_completed(2, {"paid_to": "attacker"}, token=2)
    genuine = run_completed(2, {"paid_to": "merchant"}, token=1)
    records = completed_record(2, {"paid_to": "merchant"}, token=1)
    out = step(
        WF,
        RUNNING,
        scheduled(),
        [item(guessed, "f1"), item(genuine, "g1", 2)],
        workflow_code=Scripted(),
        now=NOW,
        records=records,
    )
    assert [r.verdict.detail for r in out.refused] == [
        f"run.completed does not match the claimer's record of run '{WF}/2': fence 2, recorded 1"
    ]
    [done] = out.events
    assert isinstance(done, ActivityCompleted)
    assert done.result == {"paid_to": "merchant"}


def test_the_right_integers_with_a_forged_result_record_the_claimers_result() -> None:
    forged = run_completed(2, {"paid_to": "attacker"})
    out = step(
        WF,
        RUNNING,
        scheduled(),
        [item(forged, "f1")],
        workflow_code=Scripted(),
        now=NOW,
        records=completed_record(2, {"paid_to": "merchant"}),
    )
    [done] = out.events
    assert isinstance(done, ActivityCompleted)
    assert done.result == {"paid_to": "merchant"}


def test_an_outcome_while_the_claimer_still_runs_the_activity_is_refused() -> None:
    running = {f"{WF}/2": RunRecord(f"{WF}/2", "running", 1, 1, "inventory.reserve")}
    out = step(
        WF,
        RUNNING,
        scheduled(),
        [item(run_completed(2), "f1")],
        workflow_code=Scripted(),
        now=NOW,
        records=running,
    )
    assert out.events == []
    assert [r.verdict.rule for r in out.refused] == ["state"]


def test_an_outcome_for_nothing_pending_is_dropped_only_when_the_claimers_record_backs_it() -> None:
    answered = [*scheduled(), ActivityCompleted(workflow_id=WF, sequence=3, scheduled_sequence=2, result=1)]
    copy = item(run_completed(2, {"forged": True}), "copy")
    backed = step(
        WF, RUNNING, answered, [copy], workflow_code=Scripted(), now=NOW, records=completed_record(2, 1)
    )
    # A copy of the genuine outcome (the record backs it) changes nothing and is dropped.
    assert (backed.events, backed.refused) == ([], [])
    late = [item(run_completed(7), "late"), item(run_completed(2, token=9), "forged")]
    out = step(WF, RUNNING, answered, late, workflow_code=Scripted(), now=NOW, records=completed_record(2, 1))
    assert out.events == []
    # Nothing scheduled at 7; at 2 the record holds another claim: both parked, not dropped.
    assert [(r.input.envelope.id, r.verdict.rule) for r in out.refused] == [
        ("late", "run_id"),
        ("forged", "fence"),
    ]
    assert (
        "names sequence 7 of workflow order-1, where no activity was scheduled"
        in out.refused[0].verdict.detail
    )
    # The same once the workflow ended: a forged outcome is parked, a backed copy dropped.
    ended = [*answered, WorkflowCompleted(workflow_id=WF, sequence=4, result=1)]
    after = step(
        WF,
        Row("checkout", "completed"),
        ended,
        [copy, late[1]],
        workflow_code=Scripted(),
        now=NOW,
        records=completed_record(2, 1),
    )
    assert [(r.input.envelope.id, r.verdict.rule) for r in after.refused] == [("forged", "fence")]


def slept(fire_at: datetime = NOW + timedelta(minutes=1)) -> list[HistoryEvent]:
    return [*started(), TimerStarted(workflow_id=WF, sequence=2, timer_id=f"{WF}/timer/2", fire_at=fire_at)]


def fired(timer_id: str, sequence: int | None, fire_at: datetime = NOW) -> TimerFired:
    return TimerFired(timer_id=timer_id, owner=WF, sequence=sequence, fire_at=fire_at, fired_at=NOW)


def test_a_forged_execution_timeout_of_a_workflow_without_one_is_refused() -> None:
    out = step(
        WF,
        RUNNING,
        scheduled(),
        [item(fired(execution_timer_id(WF), None), "t1")],
        workflow_code=Scripted(),
        now=NOW,
    )
    assert out.events == []
    assert [(r.verdict.reason, r.verdict.rule) for r in out.refused] == [("unproven_timer", "not_started")]


def test_a_forged_deadline_of_an_activity_without_one_is_refused() -> None:
    out = step(
        WF,
        RUNNING,
        scheduled(),
        [item(fired(f"{WF}/2#deadline", 2), "t1")],
        workflow_code=Scripted(),
        now=NOW,
    )
    assert out.events == []
    assert [r.verdict.rule for r in out.refused] == ["not_started"]


def test_a_deadline_fires_only_once_due() -> None:
    deadline = NOW + timedelta(minutes=5)
    history = [
        *started(),
        ActivityScheduled(
            workflow_id=WF,
            sequence=2,
            activity="inventory.reserve",
            run_id=f"{WF}/2",
            schedule_to_close_deadline=deadline,
        ),
    ]
    early = step(
        WF, RUNNING, history, [item(fired(f"{WF}/2#deadline", 2), "t1")], workflow_code=Scripted(), now=NOW
    )
    assert early.events == []
    assert [r.verdict.rule for r in early.refused] == ["early"]
    due = step(
        WF,
        RUNNING,
        history,
        [item(fired(f"{WF}/2#deadline", 2), "t1")],
        workflow_code=Scripted(),
        now=deadline,
    )
    [failed] = due.events
    assert isinstance(failed, ActivityFailed)
    assert due.refused == []
    # The attempt still running is stopped: its outcome no longer counts.
    assert due.activity_cancels[2][1] == "activity inventory.reserve passed its schedule-to-close deadline"


def test_a_sleeps_firing_under_another_timer_id_is_refused() -> None:
    out = step(
        WF,
        RUNNING,
        slept(NOW),
        [item(fired(f"{WF}/timer/7", 2), "t1")],
        workflow_code=Scripted(),
        now=NOW,
    )
    assert out.events == []
    [refusal] = out.refused
    assert refusal.verdict.rule == "timer_id"
    assert f"'{WF}/timer/2'" in refusal.verdict.detail


def test_an_early_firing_of_a_genuine_sleep_is_refused_by_the_database_clock() -> None:
    history = slept(NOW + timedelta(minutes=1))
    genuine = item(fired(f"{WF}/timer/2", 2, NOW + timedelta(minutes=1)), "t1")
    early = step(WF, RUNNING, history, [genuine], workflow_code=Scripted(), now=NOW)
    assert early.events == []
    assert [r.verdict.rule for r in early.refused] == ["early"]
    # The clock read once the inputs were visible counts, even if the transaction began earlier.
    on_time = step(
        WF, RUNNING, history, [genuine], workflow_code=Scripted(), now=NOW, clock=NOW + timedelta(minutes=1)
    )
    [done] = on_time.events
    assert isinstance(done, WorkflowTimerFired)
    assert (done.started_sequence, done.timer_id) == (2, f"{WF}/timer/2")


def test_a_firing_that_names_nothing_pending_is_dropped_only_when_the_history_started_it_and_it_is_due() -> (
    None
):
    woke = [
        *slept(NOW),
        WorkflowTimerFired(
            workflow_id=WF, sequence=3, started_sequence=2, timer_id=f"{WF}/timer/2", fired_at=NOW
        ),
    ]
    copy = item(fired(f"{WF}/timer/2", 2), "copy")
    backed = step(WF, RUNNING, woke, [copy], workflow_code=Scripted(), now=NOW)
    assert (backed.events, backed.refused) == ([], [])
    forged = [
        item(fired("anything", 9), "t1"),
        item(fired("other/timer/2", 2), "t2"),
        item(fired(execution_timer_id(WF), None), "t3"),
    ]
    out = step(WF, RUNNING, woke, forged, workflow_code=Scripted(), now=NOW)
    assert out.events == []
    assert [(r.input.envelope.id, r.verdict.rule) for r in out.refused] == [
        ("t1", "not_started"),
        ("t2", "timer_id"),
        ("t3", "not_started"),
    ]


# -- memo and search attributes ------------------------------------------------------------------


def test_a_start_records_its_memo_and_search_attributes_and_a_continued_run_carries_them_on() -> None:
    attributes = typed_search_attributes({"Customer": "acme", "Stage": "new"})

    def script(history: Sequence[HistoryEvent]) -> list[HistoryEvent]:
        seq = len(history) + 1
        if len(history) == 1:
            # The first run upserts, then continues as new; the next run waits.
            return [
                SearchAttributesUpserted(
                    workflow_id=WF,
                    sequence=seq,
                    search_attributes={"Stage": search_attribute("paid"), "Customer": None},
                ),
                WorkflowContinuedAsNew(workflow_id=WF, sequence=seq + 1, workflow_type="checkout", input={}),
            ]
        return []

    start = StartWorkflow(
        workflow_id=WF, workflow_type="checkout", memo={"note": "gift"}, search_attributes=attributes
    )
    out = step(WF, None, [], [item(start, "c1")], workflow_code=Scripted(script), now=NOW)
    first, upsert, continued, second = out.events
    assert isinstance(first, WorkflowStarted)
    assert first.memo == {"note": "gift"}
    assert first.search_attributes == attributes
    assert isinstance(upsert, SearchAttributesUpserted)
    assert isinstance(continued, WorkflowContinuedAsNew)
    assert isinstance(second, WorkflowStarted)
    assert second.continued_from == continued.sequence
    assert second.memo == {"note": "gift"}
    assert second.search_attributes == {"Stage": search_attribute("paid")}
