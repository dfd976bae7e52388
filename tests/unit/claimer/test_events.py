"""What the claimer stages validates as the contract says, with deterministic ids."""

import base64
from datetime import timedelta

import pytest

from slotflow.contracts import REGISTRY, CancelTimer, DeadLettered, RunCompleted, RunStarted, StartTimer
from slotflow.contracts.catalogue import TIMER_COMMAND_TYPES
from slotflow.contracts.codec import decode, encode
from slotflow.contracts.timers import retry_timer_id
from slotflow.errors import PermanentError
from slotflow.kafka.poison import decode_record
from slotflow.kafka.records import Record
from slotflow.pg.outbox import encoded
from slotflow.settings import KafkaSettings
from slotflow_claimer.events import RunEvents
from tests.unit.claimer.support import NOW, run

EVENTS = RunEvents(KafkaSettings(topic_namespace="ns"))


def roundtrip(envelope: object) -> object:
    parsed = decode(encode(envelope))  # type: ignore[arg-type]
    return REGISTRY.parse(parsed)


def test_run_started_and_completed_validate_and_are_named_by_run_and_token() -> None:
    r = run(token=3, state="completed", result={"payout_id": 9})
    started = EVENTS.started(r, NOW)
    completed = EVENTS.completed(r, NOW)
    assert started.topic == "ns.slotflow.runs.events.v1"
    assert started.envelope.id == f"{r.run_id}/3/started"
    assert completed.envelope.id == f"{r.run_id}/3/completed"
    assert started.envelope.key == r.job_id
    message = roundtrip(started.envelope)
    assert isinstance(message, RunStarted)
    assert message.fence_token == 3
    done = roundtrip(completed.envelope)
    assert isinstance(done, RunCompleted)
    assert done.result == {"payout_id": 9}


def test_activity_events_carry_the_workflow_and_sequence() -> None:
    message = roundtrip(EVENTS.started(run(workflow_id="order-7", sequence=3), NOW).envelope)
    assert isinstance(message, RunStarted)
    assert (message.workflow_id, message.sequence) == ("order-7", 3)


def test_the_retry_timer_fires_the_next_attempt_of_the_same_job_due() -> None:
    r = run(attempt=2)
    staged = EVENTS.retry_timer(r, NOW, retry_at=NOW + timedelta(seconds=3))
    assert staged.topic == "ns.slotflow.timers.commands.v1"
    assert staged.envelope.id == staged.envelope.key == retry_timer_id(r.run_id, 3) == f"retry:{r.run_id}#3"
    timer = roundtrip(staged.envelope)
    assert isinstance(timer, StartTimer)
    job = timer.on_fire.job  # type: ignore[union-attr]
    assert (job.run_id, job.attempt, job.kind) == (r.run_id, 3, "retry")
    assert job.payload == r.payload


def test_every_timer_command_the_claimer_sends_passes_the_tickers_check() -> None:
    """The ticker refuses a timer whose id does not follow from its action (docs/ticker.md,
    "Timer ids"), and takes timer commands from the internal topic only: both the retry and a held
    run's resume (with the cancel of its hold) must pass, or a retry would never fire."""
    r = run(attempt=2)
    staged = [
        EVENTS.retry_timer(r, NOW, retry_at=NOW),
        *EVENTS.resume_timers(r, NOW, resume_at=NOW),
        # A run its workflow cancelled while it waited for its retry: that timer is cancelled.
        EVENTS.cancel_retry_timer(r, NOW),
    ]
    for item in staged:
        assert item.topic == "ns.slotflow.timers.commands.v1"
        value = encode(item.envelope)
        decode_record(
            Record("t", 0, 0, item.envelope.key.encode(), value, (), None), accept=TIMER_COMMAND_TYPES
        )
    assert [type(roundtrip(i.envelope)) for i in staged] == [StartTimer, StartTimer, CancelTimer, CancelTimer]
    cancelled = roundtrip(staged[-1].envelope)
    assert isinstance(cancelled, CancelTimer)
    assert cancelled.timer_id == retry_timer_id(r.run_id, 3)


def test_a_dead_letter_carries_the_original_record_and_the_history() -> None:
    history = [
        {
            "event": "failed",
            "attempt": 1,
            "fence_token": 1,
            "owner": "claimer-a",
            "error_type": "PermanentError",
            "message": "closed",
            "started_at": NOW.isoformat(),
            "finished_at": NOW.isoformat(),
        }
    ]
    r = run(state="dead_lettered", history=history)
    event, letter = EVENTS.dead_lettered(r, NOW, reason="permanent_error", error=PermanentError("closed"))
    assert letter.topic == "ns.slotflow.dlq.messages.v1"
    parked = roundtrip(letter.envelope)
    assert isinstance(parked, DeadLettered)
    assert parked.reason == "permanent_error"
    assert parked.run_id == r.run_id
    assert [h.attempt for h in parked.history] == [1]
    assert parked.tags == ("money",)
    # Byte-exact, so the DLQ service can send the very record back.
    assert base64.b64decode(parked.value_b64) == r.due.value
    assert letter.envelope.id == r.due.position
    assert event.envelope.id == f"{r.run_id}/1/dead_lettered"


@pytest.mark.parametrize("result", [None, {"payout_id": 9, "ok": True}, [1, 2.5, "x\u00e9"]])
@pytest.mark.parametrize("workflow", [None, "order-7"])
def test_the_fast_rows_are_the_envelopes_the_models_build(result: object, workflow: str | None) -> None:
    r = run(token=4, state="completed", result=result, workflow_id=workflow, sequence=3 if workflow else None)
    for fast, slow in (
        (EVENTS.started_row(r, NOW), EVENTS.started(r, NOW)),
        (EVENTS.completed_row(r, NOW), EVENTS.completed(r, NOW)),
    ):
        assert fast == encoded(slow)
        assert isinstance(REGISTRY.parse(decode(fast.value)), (RunStarted, RunCompleted))
