"""End to end with the real claimer: a run dead-lettered for a handler nobody had deployed is
parked by the DLQ service; once the handler is registered, a redrive completes it exactly once,
and redriving it again changes nothing downstream."""

from datetime import UTC, datetime

from slotflow.commands import publish_command
from slotflow.contracts import DeadLetterFilter, JobDue, RedriveDeadLetters
from slotflow.contracts.topics import JOBS_DUE
from slotflow.core.identity import run_id
from slotflow.kafka.producer import Producer
from slotflow.runs import HandlerRegistry, RunContext
from slotflow.settings import KafkaSettings, PostgresSettings
from slotflow.testing import assert_eventually
from slotflow_claimer.app import ClaimerService
from slotflow_claimer.config import ClaimerSettings, Settings
from slotflow_claimer.events import job_due_envelope
from slotflow_dlq import queries
from tests.integration.dlq.conftest import Running

SLOT = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)


async def test_redrive_after_the_handler_is_deployed_completes_the_run_exactly_once(
    dlq: Running, producer: Producer, kafka: KafkaSettings, pg_dsn: str
) -> None:
    registry = HandlerRegistry()
    settings = Settings(
        claimer=ClaimerSettings(
            lease_ttl_seconds=3.0,
            commit_interval_seconds=0.1,
            shutdown_grace_seconds=1.0,
            poll_timeout_ms=100,
        ),
        kafka=kafka,
        postgres=PostgresSettings(dsn=pg_dsn),
    )
    claimer = ClaimerService(settings, registry=registry)
    await claimer.start()
    try:
        job = JobDue(
            run_id=run_id("statements", SLOT),
            job_id="statements",
            slot=SLOT,
            handler="statements.monthly",
            tags=("money-moving",),
        )
        await producer.send(kafka.topic(JOBS_DUE), job_due_envelope(job, at=SLOT))

        async def parked() -> bool:
            return await dlq.count("reason = 'unknown_handler' AND run_id = $1", job.run_id) == 1

        await assert_eventually(parked, timeout=30, message="the run parked as unknown_handler")
        [entry] = (
            await queries.list_dead_letters(
                dlq.pool, schema="dlq", selection=DeadLetterFilter(run_id=job.run_id)
            )
        ).items
        assert (entry.source_service, entry.job_id, entry.status) == ("claimer", "statements", "parked")
        assert entry.original_type == "job.due"

        calls: list[tuple[int, int]] = []

        async def monthly(ctx: RunContext) -> str:
            calls.append((ctx.attempt, ctx.fence_token))
            return "sent"

        registry.register("statements.monthly", monthly)  # the deploy that fixes the cause
        await publish_command(
            producer,
            kafka,
            RedriveDeadLetters(selection=DeadLetterFilter(ids=(entry.dead_letter_id,))),
            source="test",
        )

        async def completed() -> bool:
            state = await dlq.pool.fetchval("SELECT state FROM claimer.runs WHERE run_id = $1", job.run_id)
            return bool(state == "completed")

        await assert_eventually(completed, timeout=30, message="the redriven run completed")
        assert len(calls) == 1

        # Redriving once more (explicitly, it is no longer parked) reaches the claimer and is a no-op.
        duplicates = claimer.metrics.value("slotflow_claimer_jobdue_duplicates_total")
        again = RedriveDeadLetters(selection=DeadLetterFilter(ids=(entry.dead_letter_id,), status="redriven"))
        await publish_command(producer, kafka, again, source="test")

        async def seen_again() -> bool:
            return claimer.metrics.value("slotflow_claimer_jobdue_duplicates_total") > duplicates

        await assert_eventually(seen_again, timeout=30, message="the second redrive reached the claimer")
        assert len(calls) == 1
        row = await dlq.pool.fetchrow(
            "SELECT state, redrive_count FROM claimer.runs WHERE run_id = $1", job.run_id
        )
        assert row is not None
        assert (row["state"], row["redrive_count"]) == ("completed", 1)
        detail = await queries.get_dead_letter(dlq.pool, schema="dlq", dead_letter_id=entry.dead_letter_id)
        assert detail is not None
        assert (detail.status, detail.redrive_count, len(detail.redrives)) == ("redriven", 2, 2)
        # Nothing failed again, so nothing new was parked.
        assert await dlq.count() == 1
    finally:
        await claimer.stop(grace=0.5)
