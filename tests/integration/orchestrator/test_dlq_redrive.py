"""A parked activity, retried through its workflow, on the real broker and database with a real
claimer, ticker (the claimer's retries) and DLQ service: the claimers give up on it, the step is
marked parked with the DLQ reason while the workflow waits, and its letter names the workflow. A
bulk redrive leaves it out; a redrive naming it by id is routed to the orchestrator, which retries
it from its own history (ActivityRetried, the JobDue re-issued) and the workflow completes, each
attempt's effect recorded once. A retry of an activity that is no longer parked is refused with the
reason, and so is a RetryActivity for it. A saga step that failed and was compensated parks no
letter, and an older claimer's letter for it cannot be redriven."""

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from slotflow.commands import publish_command
from slotflow.contracts import (
    ActivityCompleted,
    ActivityParked,
    ActivityRetried,
    ActivityScheduled,
    CommandRejected,
    DeadLetterFilter,
    RedriveDeadLetters,
    RetryActivity,
    SignalWorkflow,
    WorkflowCompleted,
)
from slotflow.contracts.topics import DLQ_EVENTS, DLQ_MESSAGES, RUN_EVENTS, WORKFLOW_EVENTS
from slotflow.errors import PermanentError
from slotflow.kafka.poison import dead_letter_envelope
from slotflow.kafka.producer import Producer
from slotflow.kafka.reading import read_to_end
from slotflow.kafka.records import Record
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow_claimer.app import migrate as claimer_migrate
from tests.integration.dlq.conftest import Running, start_dlq, stop_dlq
from tests.integration.dlq.helpers import read_messages
from tests.integration.orchestrator.conftest import StartOrchestrator
from tests.integration.orchestrator.support import Workflows
from tests.integration.orchestrator.test_issuers import forged_completion
from tests.integration.ticker.support import Replica


@pytest.fixture
async def dlq(kafka: KafkaSettings, pg_dsn: str) -> AsyncIterator[Running]:
    running = await start_dlq(kafka, pg_dsn)
    yield running
    await stop_dlq(running)


async def letter_status(dlq: Running, dead_letter_id: str) -> tuple[str, str]:
    row = await dlq.pool.fetchrow("SELECT status, note FROM dlq.dead_letters WHERE id = $1", dead_letter_id)
    assert row is not None
    return str(row["status"]), str(row["note"])


async def test_a_parked_activity_is_retried_only_through_its_workflow(
    kafka: KafkaSettings, producer: Producer, ticker: Replica, dlq: Running, workflows: Workflows
) -> None:
    await workflows.start("pk-1", "tests.parked_booking", {"order_id": "pk-1"}, "start-pk-1")
    parked_history = await workflows.wait("pk-1", "workflow.activity_parked")
    parked = parked_history[-1]
    assert isinstance(parked, ActivityParked)
    assert (parked.scheduled_sequence, parked.reason, parked.error_type) == (
        2,
        "attempts_exhausted",
        "CarrierClosed",
    )
    assert parked.message == "carrier closed for order pk-1"

    async def in_the_dlq() -> bool:
        return await dlq.count("run_id = 'pk-1/2' AND status = 'parked'") == 1

    await assert_eventually(in_the_dlq, timeout=30, message="the activity's run parked in the DLQ")
    row = await dlq.pool.fetchrow(
        "SELECT id, workflow_id, sequence FROM dlq.dead_letters WHERE run_id = 'pk-1/2'"
    )
    assert row is not None
    letter_id = str(row["id"])
    assert (row["workflow_id"], row["sequence"]) == ("pk-1", 2)  # marked as the workflow's
    # Parked, the workflow waits: nothing more is appended while the run stays in the DLQ.
    assert [e.message_type for e in await workflows.history("pk-1")] == [
        "workflow.started",
        "workflow.activity_scheduled",
        "workflow.activity_parked",
    ]

    # A bulk redrive (no ids) leaves the workflow's letter out, says so, and changes nothing.
    bulk = RedriveDeadLetters(selection=DeadLetterFilter(run_id="pk-1/2"))
    await publish_command(producer, kafka, bulk, command_id="redrive-pk-1-bulk", source="test")
    answers = await read_messages(kafka, kafka.topic(DLQ_EVENTS), 2)
    [rejected] = [m for _, m in answers if isinstance(m, CommandRejected)]
    assert rejected.command_id == "redrive-pk-1-bulk"
    assert "1 workflows' parked activities, which a bulk redrive leaves out" in rejected.reason
    assert (await letter_status(dlq, letter_id))[0] == "parked"

    await workflows.db.execute("INSERT INTO carrier_open (order_id) VALUES ('pk-1')")  # the fix
    by_id = RedriveDeadLetters(selection=DeadLetterFilter(ids=(letter_id,)))
    await publish_command(producer, kafka, by_id, command_id="redrive-pk-1", source="test")

    events = await workflows.wait("pk-1", "workflow.completed")
    assert [e.message_type for e in events] == [
        "workflow.started",
        "workflow.activity_scheduled",
        "workflow.activity_parked",
        "workflow.activity_retried",
        "workflow.activity_completed",
        "workflow.completed",
    ]
    retried = events[3]
    assert isinstance(retried, ActivityRetried)
    assert (retried.scheduled_sequence, retried.redrive, retried.command_id) == (2, 1, "redrive-pk-1")
    completed = events[4]
    assert isinstance(completed, ActivityCompleted)
    assert completed.scheduled_sequence == 2
    done = events[-1]
    assert isinstance(done, WorkflowCompleted)
    assert done.result == {"order_id": "pk-1", "booking": "book-pk-1/2"}
    # Two attempts before the DLQ, one after the retry.
    assert await workflows.effects("pk-1/") == ["shipping.book"] * 3

    async def redriven() -> bool:
        return (await letter_status(dlq, letter_id))[0] == "redriven"

    await assert_eventually(redriven, timeout=30, message="the orchestrator's answer marked it redriven")
    assert (
        "retried activity shipping.book #2 of workflow pk-1 (redrive 1)"
        in (await letter_status(dlq, letter_id))[1]
    )

    # Again, now that the workflow closed: refused by the orchestrator with its reason.
    again = RedriveDeadLetters(selection=DeadLetterFilter(ids=(letter_id,), status="redriven"))
    await publish_command(producer, kafka, again, command_id="redrive-pk-1-again", source="test")

    async def refused() -> bool:
        return (await letter_status(dlq, letter_id))[0] == "redrive_failed"

    await assert_eventually(refused, timeout=30, message="the second redrive refused")
    note = (await letter_status(dlq, letter_id))[1]
    assert "refused by the orchestrator: workflow pk-1 is closed (completed)" in note
    retry = RetryActivity(workflow_id="pk-1", sequence=2)
    await workflows.send(retry, "retry-pk-1")
    acks = await read_messages(kafka, kafka.topic(WORKFLOW_EVENTS), 2)
    [no] = [m for _, m in acks if isinstance(m, CommandRejected) and m.command_id == "retry-pk-1"]
    assert "workflow pk-1 is closed (completed): it no longer waits on shipping.book #2" in no.reason
    assert await workflows.effects("pk-1/") == ["shipping.book"] * 3


async def test_retry_activity_resumes_a_parked_workflow(
    kafka: KafkaSettings, producer: Producer, ticker: Replica, dlq: Running, workflows: Workflows
) -> None:
    await workflows.start("pk-2", "tests.parked_booking", {"order_id": "pk-2"}, "start-pk-2")
    await workflows.wait("pk-2", "workflow.activity_parked")
    # Not parked at #1 (the start), nothing at #9: refused with the reason, nothing appended.
    await workflows.send(RetryActivity(workflow_id="pk-2", sequence=9), "retry-pk-2-nothing")
    await workflows.db.execute("INSERT INTO carrier_open (order_id) VALUES ('pk-2')")
    await workflows.send(RetryActivity(workflow_id="pk-2", sequence=2, reason="carrier back"), "retry-pk-2")
    events = await workflows.wait("pk-2", "workflow.completed")
    assert [e.message_type for e in events][2:] == [
        "workflow.activity_parked",
        "workflow.activity_retried",
        "workflow.activity_completed",
        "workflow.completed",
    ]
    acks = await read_messages(kafka, kafka.topic(WORKFLOW_EVENTS), 3)
    rejected = {m.command_id: m.reason for _, m in acks if isinstance(m, CommandRejected)}
    assert rejected == {"retry-pk-2-nothing": "workflow pk-2 has no activity at #9"}
    assert await workflows.effects("pk-2/") == ["shipping.book"] * 3


async def test_a_compensated_saga_steps_letter_cannot_be_redriven(
    kafka: KafkaSettings, producer: Producer, ticker: Replica, dlq: Running, workflows: Workflows
) -> None:
    """The finding: a declined capture that its saga handled (payments.void ran) was parked like
    poison, and its redrive ran payments.capture again after the void. Now the capture's final
    failure is the workflow's alone (no letter), and an older claimer's letter for it, redriven by
    id, is refused by the orchestrator with the reason; the capture does not run again."""
    order = {"order_id": "1002", "capture_fails": True}
    await workflows.start("order-1002", "tests.checkout", order, "start-order-1002")
    events = await workflows.wait("order-1002", "workflow.failed")
    [capture] = [e for e in events if isinstance(e, ActivityScheduled) and e.activity == "payments.capture"]
    compensations = [e for e in events if isinstance(e, ActivityScheduled) and e.compensates is not None]
    assert [c.activity for c in compensations] == ["inventory.release", "payments.void"]
    assert await workflows.effects("order-1002/") == [
        "payments.authorize",
        "inventory.reserve",
        "payments.capture",
        "inventory.release",
        "payments.void",
    ]
    # The declined capture parked no letter: the workflow handled it (its RunDeadLettered and any
    # letter leave the claimer's outbox together, so the DLQ topic holds it by now if it exists).
    parked = await read_to_end(kafka, kafka.topic(DLQ_MESSAGES))
    assert [r for r in parked if capture.run_id.encode() in (r.value or b"")] == []

    # An older claimer parked one: its letter is the capture's JobDue, as that claimer stored it.
    row = await workflows.db.fetchrow(
        "SELECT due_topic, due_partition, due_offset, due_key, due_value FROM claimer.runs WHERE run_id = $1",
        capture.run_id,
    )
    assert row is not None
    record = Record(
        row["due_topic"],
        row["due_partition"],
        row["due_offset"],
        row["due_key"],
        bytes(row["due_value"]),
        (),
        None,
    )
    legacy = dead_letter_envelope(
        record,
        PermanentError("capture of order 1002 declined"),
        source_service="claimer",
        occurred_at=datetime.now(UTC),
        reason="permanent_error",
        run_id=capture.run_id,
        job_id="order-1002",
    )
    await producer.send(kafka.topic(DLQ_MESSAGES), legacy)

    async def in_the_dlq() -> bool:
        return (
            await dlq.count(
                "id = $1 AND workflow_id = 'order-1002' AND sequence = $2", legacy.id, capture.sequence
            )
            == 1
        )

    await assert_eventually(in_the_dlq, timeout=30, message="the legacy letter marked as the workflow's")
    # A bulk redrive by failure reason leaves it out; one naming it is refused with the reason.
    bulk = RedriveDeadLetters(selection=DeadLetterFilter(reason="permanent_error"))
    await publish_command(producer, kafka, bulk, command_id="redrive-declined-bulk", source="test")
    by_id = RedriveDeadLetters(selection=DeadLetterFilter(ids=(legacy.id,)))
    await publish_command(producer, kafka, by_id, command_id="redrive-declined", source="test")

    async def refused() -> bool:
        return (await letter_status(dlq, legacy.id))[0] == "redrive_failed"

    await assert_eventually(refused, timeout=30, message="the orchestrator refused the redrive")
    note = (await letter_status(dlq, legacy.id))[1]
    assert note == (
        "refused by the orchestrator: order-1002 already compensated this step: payments.capture "
        f"#{capture.sequence} failed at #{capture.sequence + 1}, then inventory.release at "
        f"#{compensations[0].sequence}, payments.void at #{compensations[1].sequence} ran"
    )
    answers = await read_messages(kafka, kafka.topic(DLQ_EVENTS), 4)
    [bulk_answer] = [m for _, m in answers if isinstance(m, CommandRejected)]
    assert bulk_answer.command_id == "redrive-declined-bulk"
    assert "1 workflows' parked activities, which a bulk redrive leaves out" in bulk_answer.reason
    # The capture did not run again, and the workflow's history is as it was.
    assert (await workflows.effects("order-1002/")).count("payments.capture") == 1
    assert len(await workflows.history("order-1002")) == len(events)


async def test_a_refused_outcome_redriven_is_read_back_and_checked_again_by_the_decision(
    kafka: KafkaSettings,
    producer: Producer,
    db: Pool,
    dlq: Running,
    start_orchestrator_: StartOrchestrator,
) -> None:
    """A record the orchestrator refused (a forged RunCompleted) is the orchestrator's to redrive:
    it reads the record back from the runs topic (never the letter's bytes) and takes it through its
    intake again, where the decision checks it against the claimer's record as before; refused
    again, it changes nothing, and the workflow is untouched."""
    await claimer_migrate(db)
    running = await start_orchestrator_()
    workflows = Workflows(kafka, producer, db)
    wf = "redrive-forged"
    await workflows.start(wf, "tests.approval", {"order_id": wf}, f"start-{wf}")
    await workflows.send(SignalWorkflow(workflow_id=wf, signal="approve", payload={"by": "ops"}), f"sig-{wf}")
    scheduled = (await workflows.wait(wf, "workflow.activity_scheduled"))[-1]
    before = await workflows.history(wf)
    forged = forged_completion(
        wf, scheduled.sequence, run_id="attacker-run", fence=999, attempt=1, result={"pay_to": "attacker"}
    )
    sent = await producer.send(kafka.topic(RUN_EVENTS), forged)
    letter_id = f"{sent.topic}:{sent.partition}:{sent.offset}"

    async def parked() -> bool:
        return (
            await dlq.count("id = $1 AND reason = 'unproven_outcome' AND status = 'parked'", letter_id) == 1
        )

    await assert_eventually(parked, timeout=30, message="the forged outcome parked by the orchestrator")
    # The letter's bytes are not what is redriven: spoil them; the record is read from its topic.
    await dlq.pool.execute("UPDATE dlq.dead_letters SET value = 'spoiled'::bytea WHERE id = $1", letter_id)
    registry = running.orchestrator.metrics.registry

    def refusals() -> float:
        value = registry.get_sample_value(
            "slotflow_orchestrator_refused_inputs_total", {"reason": "unproven_outcome", "rule": "run_id"}
        )
        return value or 0.0

    assert refusals() == 1
    redrive = RedriveDeadLetters(selection=DeadLetterFilter(ids=(letter_id,)))
    await publish_command(producer, kafka, redrive, command_id="redrive-forged-outcome", source="test")

    async def checked_again() -> bool:
        status = await dlq.pool.fetchval("SELECT status FROM dlq.dead_letters WHERE id = $1", letter_id)
        return status == "redriven" and refusals() == 2

    await assert_eventually(checked_again, timeout=30, message="read back, taken in, refused again")
    note = await dlq.pool.fetchval("SELECT note FROM dlq.dead_letters WHERE id = $1", letter_id)
    assert note.startswith(
        f"redriven by the orchestrator: the orchestrator read {letter_id} back and took it in"
    )
    assert await workflows.history(wf) == before  # untouched
