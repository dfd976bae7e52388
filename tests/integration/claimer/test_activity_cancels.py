"""A workflow's cancel of its activity on the real broker and database: the claimer running the
attempt cancels its handler (CancelledError mid-work, no retry, the run ends `cancelled`), a run not
yet claimed never starts, and a forged cancel (a schedule's run, another workflow's run the
orchestrator never cancelled) is parked and stops nothing. The test plays the orchestrator: it
writes its record (`orchestrator.activity_cancels`, what `activity_cancel_issued` answers from) and
publishes the CancelActivity as it would."""

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from slotflow.contracts import CancelActivity, RetryPolicy, wrap
from slotflow.contracts.topics import ACTIVITY_CANCELS, DLQ_MESSAGES, RUN_EVENTS, TIMER_COMMANDS
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.runs import HandlerRegistry, RunContext
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from tests.integration.claimer.conftest import StartClaimer
from tests.integration.claimer.support import TopicReader, job_due, publish, run_row, wait_state

RETRY = RetryPolicy(max_attempts=3, base=timedelta(milliseconds=100), cap=timedelta(milliseconds=200))


def cancel_of(workflow_id: str, sequence: int, handler: str, *, run_id: str | None = None) -> CancelActivity:
    return CancelActivity(
        workflow_id=workflow_id,
        sequence=sequence,
        run_id=run_id or f"{workflow_id}/{sequence}",
        handler=handler,
        reason=f"workflow {workflow_id} was cancelled: test",
    )


async def record_cancel(db: Pool, cancel: CancelActivity) -> None:
    """What the orchestrator's decision writes with the CancelActivity it stages."""
    await db.execute(
        "INSERT INTO orchestrator.activity_cancels (workflow_id, sequence, run_id, handler, reason) "
        "VALUES ($1, $2, $3, $4, $5)",
        cancel.workflow_id,
        cancel.sequence,
        cancel.run_id,
        cancel.handler,
        cancel.reason,
    )


async def send_cancel(
    producer: Producer, kafka: KafkaSettings, cancel: CancelActivity, *, id: str | None = None
) -> None:
    envelope = wrap(
        cancel,
        id=id or f"{cancel.run_id}/cancel",
        key=cancel.workflow_id,
        source="orchestrator",
        occurred_at=datetime.now(UTC),
    )
    await producer.send_many([(kafka.topic(ACTIVITY_CANCELS), envelope)])


def history(row: dict[str, Any]) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = json.loads(row["history"])
    return entries


async def test_a_running_activity_its_workflow_cancels_sees_cancelled_error_mid_work_and_ends_cancelled(
    kafka: KafkaSettings, producer: Producer, db: Pool, registry: HandlerRegistry, start_claimer: StartClaimer
) -> None:
    seen: list[str] = []
    entered = asyncio.Event()

    async def copy_files(ctx: RunContext) -> str:
        seen.append(f"attempt {ctx.attempt}")
        entered.set()
        try:
            for chunk in range(600):
                ctx.heartbeat({"chunk": chunk})
                await asyncio.sleep(0.1)
        except asyncio.CancelledError:
            seen.append(f"cancelled, is_cancelled={ctx.is_cancelled()}")  # cleanup runs here
            raise
        seen.append("finished")
        return "copied"

    registry.register("test.copy", copy_files)
    await start_claimer()
    job = job_due("wf-c1", handler="test.copy", kind="activity", workflow_id="wf-c1", sequence=2, retry=RETRY)
    cancel = cancel_of("wf-c1", 2, "test.copy")
    async with TopicReader(kafka, RUN_EVENTS) as events:
        await publish(producer, kafka, [job])
        await asyncio.wait_for(entered.wait(), 30)
        await asyncio.sleep(0.3)  # mid-work: a few chunks done
        await record_cancel(db, cancel)
        await send_cancel(producer, kafka, cancel)
        row = await wait_state(db, job.run_id, "cancelled")
        failed = await events.wait_for("run.failed", run_id=job.run_id)
    assert seen == ["attempt 1", "cancelled, is_cancelled=True"]
    assert (row["attempt"], row["takeovers"], row["cancel_requested"]) == (1, 0, True)
    assert row["cancel_requested_at"] is not None
    assert failed[0].data["error_type"] == "RunCancelled"
    assert failed[0].data["retryable"] is False
    assert "cancelled by workflow wf-c1" in failed[0].data["message"]
    assert [entry["event"] for entry in history(row)] == ["cancelled"]
    await asyncio.sleep(1.0)  # nothing retries it
    after = await run_row(db, job.run_id)
    assert after is not None
    assert (after["state"], after["attempt"]) == ("cancelled", 1)
    assert seen == ["attempt 1", "cancelled, is_cancelled=True"]


async def test_a_cancel_that_comes_before_the_run_means_it_never_starts(
    kafka: KafkaSettings, producer: Producer, db: Pool, registry: HandlerRegistry, start_claimer: StartClaimer
) -> None:
    calls: list[int] = []

    async def charge(ctx: RunContext) -> str:
        calls.append(ctx.attempt)
        return "charged"

    registry.register("test.charge", charge)
    await start_claimer()
    cancel = cancel_of("wf-c2", 3, "test.charge")
    await record_cancel(db, cancel)
    await send_cancel(producer, kafka, cancel)
    await assert_eventually(
        lambda: db.fetchval("SELECT count(*) FROM claimer.activity_cancels WHERE run_id = $1", cancel.run_id),
        timeout=30,
    )
    job = job_due(
        "wf-c2", handler="test.charge", kind="activity", workflow_id="wf-c2", sequence=3, retry=RETRY
    )
    await publish(producer, kafka, [job])
    row = await wait_state(db, job.run_id, "cancelled")
    assert calls == []
    assert row["attempt"] == 1


async def test_forged_cancels_of_a_schedules_run_and_another_workflows_run_are_parked_and_stop_nothing(
    kafka: KafkaSettings, producer: Producer, db: Pool, registry: HandlerRegistry, start_claimer: StartClaimer
) -> None:
    release = asyncio.Event()
    entered: list[str] = []

    async def hold(ctx: RunContext) -> str:
        entered.append(ctx.run_id)
        await release.wait()
        return "held and done"

    registry.register("test.hold", hold)
    await start_claimer()
    schedule_run = job_due("nightly", handler="test.hold", retry=RETRY)
    victim = job_due(
        "wf-victim", handler="test.hold", kind="activity", workflow_id="wf-victim", sequence=2, retry=RETRY
    )
    async with TopicReader(kafka, DLQ_MESSAGES) as letters:
        await publish(producer, kafka, [schedule_run, victim])
        await assert_eventually(lambda: len(entered) == 2, timeout=30)
        # A cancel naming the schedule's run: its run id is not its workflow's activity.
        await send_cancel(producer, kafka, cancel_of("nightly", 1, "test.hold", run_id=schedule_run.run_id))
        # Another workflow's genuine running activity, which its orchestrator never cancelled.
        await send_cancel(producer, kafka, cancel_of("wf-victim", 2, "test.hold"))

        async def parked() -> list[str] | None:
            reasons = sorted(
                str(e.data["reason"]) for e in await letters.drain() if e.type == "dlq.dead_lettered"
            )
            return reasons if len(reasons) == 2 else None

        reasons = await assert_eventually(parked, timeout=30)
        assert reasons == ["invalid_payload", "unproven_cancel"]
        await asyncio.sleep(2.0)  # past a lease renewal: nothing was flagged
        for run_id in (schedule_run.run_id, victim.run_id):
            row = await run_row(db, run_id)
            assert row is not None
            assert (row["state"], row["cancel_requested"]) == ("running", False)
        release.set()
        for run_id in (schedule_run.run_id, victim.run_id):
            row = await wait_state(db, run_id, "completed")
            assert json.loads(row["result"]) == "held and done"
    assert await db.fetchval("SELECT count(*) FROM claimer.activity_cancels") == 0


async def test_a_run_waiting_for_its_retry_ends_cancelled_and_its_retry_timer_is_cancelled(
    kafka: KafkaSettings,
    producer: Producer,
    db: Pool,
    registry: HandlerRegistry,
    start_claimer: StartClaimer,
) -> None:
    attempts: list[int] = []

    async def flaky(ctx: RunContext) -> str:
        attempts.append(ctx.attempt)
        raise ConnectionError("the carrier is down")

    registry.register("test.flaky", flaky)
    await start_claimer()
    # A retry a minute away: the cancel finds the run waiting for it.
    slow_retry = RetryPolicy(max_attempts=5, base=timedelta(seconds=60), cap=timedelta(seconds=60))
    job = job_due(
        "wf-c4", handler="test.flaky", kind="activity", workflow_id="wf-c4", sequence=2, retry=slow_retry
    )
    cancel = cancel_of("wf-c4", 2, "test.flaky")
    async with TopicReader(kafka, RUN_EVENTS) as events, TopicReader(kafka, TIMER_COMMANDS) as timers:
        await publish(producer, kafka, [job])
        await wait_state(db, job.run_id, "retrying")
        await record_cancel(db, cancel)
        await send_cancel(producer, kafka, cancel)
        row = await wait_state(db, job.run_id, "cancelled")
        failed = await events.wait_for("run.failed", run_id=job.run_id, count=2)
        cancelled_timer = await timers.wait_for("timer.cancel")
    assert attempts == [1]
    assert (row["attempt"], row["fence_token"], row["cancel_requested"]) == (1, 2, True)
    assert [entry["event"] for entry in history(row)] == ["failed", "cancelled"]
    assert [f.data["error_type"] for f in failed] == ["ConnectionError", "RunCancelled"]
    assert cancelled_timer[0].data["timer_id"] == f"retry:{job.run_id}#2"
