"""End to end with a real claimer, ticker and DLQ service: a run dead-lettered for a handler nobody
had deployed is parked; once the handler is registered, a redrive asks the claimer, which reopens
the run from its own row (a fresh budget, a retry timer through the ticker, the next fence token)
and the run completes exactly once. The letter reads `redriving` until the claimer answers, then
`redriven`; a second redrive of the same letter is refused by the claimer with its reason."""

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

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
from tests.integration.ticker.support import Replica, start_ticker, stop_ticker

SLOT = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)


@pytest.fixture
async def ticker(kafka: KafkaSettings, pg_dsn: str) -> AsyncIterator[Replica]:
    replica = await start_ticker(kafka, pg_dsn)
    yield replica
    await stop_ticker(replica)


def claimer_settings(kafka: KafkaSettings, pg_dsn: str) -> Settings:
    return Settings(
        claimer=ClaimerSettings(
            lease_ttl_seconds=3.0,
            commit_interval_seconds=0.1,
            shutdown_grace_seconds=1.0,
            poll_timeout_ms=100,
        ),
        kafka=kafka,
        postgres=PostgresSettings(dsn=pg_dsn),
    )


async def status_of(dlq: Running, dead_letter_id: str) -> tuple[str, str]:
    row = await dlq.pool.fetchrow("SELECT status, note FROM dlq.dead_letters WHERE id = $1", dead_letter_id)
    assert row is not None
    return str(row["status"]), str(row["note"])


async def test_redrive_after_the_handler_is_deployed_reopens_the_run_once(
    dlq: Running, producer: Producer, kafka: KafkaSettings, pg_dsn: str, ticker: Replica
) -> None:
    registry = HandlerRegistry()
    claimer = ClaimerService(claimer_settings(kafka, pg_dsn), registry=registry)
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
        fence_before = await dlq.pool.fetchval(
            "SELECT fence_token FROM claimer.runs WHERE run_id = $1", job.run_id
        )

        calls: list[tuple[int, int]] = []

        async def monthly(ctx: RunContext) -> str:
            calls.append((ctx.attempt, ctx.fence_token))
            return "sent"

        registry.register("statements.monthly", monthly)  # the deploy that fixes the cause
        await publish_command(
            producer,
            kafka,
            RedriveDeadLetters(selection=DeadLetterFilter(ids=(entry.dead_letter_id,))),
            command_id="redrive-statements",
            source="test",
        )

        async def completed() -> bool:
            state = await dlq.pool.fetchval("SELECT state FROM claimer.runs WHERE run_id = $1", job.run_id)
            return bool(state == "completed")

        await assert_eventually(completed, timeout=60, message="the redriven run completed")
        assert len(calls) == 1
        attempt, fence = calls[0]
        assert attempt == 2  # the next attempt,
        assert fence > fence_before  # under a higher fence token

        async def redriven() -> bool:
            return (await status_of(dlq, entry.dead_letter_id))[0] == "redriven"

        await assert_eventually(redriven, timeout=30, message="the claimer's answer marked it redriven")
        _, note = await status_of(dlq, entry.dead_letter_id)
        assert note.startswith("redriven by the claimer: reopened run statements@2026-12-01T00:00:00Z")

        # Redriving once more (explicitly: it is no longer parked) is refused by the run's own row.
        again = RedriveDeadLetters(selection=DeadLetterFilter(ids=(entry.dead_letter_id,), status="redriven"))
        await publish_command(producer, kafka, again, command_id="redrive-statements-again", source="test")

        async def refused() -> bool:
            return (await status_of(dlq, entry.dead_letter_id))[0] == "redrive_failed"

        await assert_eventually(refused, timeout=30, message="the second redrive refused")
        _, note = await status_of(dlq, entry.dead_letter_id)
        assert "is completed, not dead-lettered: nothing to redrive" in note
        assert len(calls) == 1
        row = await dlq.pool.fetchrow(
            "SELECT state, redrive_count FROM claimer.runs WHERE run_id = $1", job.run_id
        )
        assert row is not None
        assert (row["state"], row["redrive_count"]) == ("completed", 1)
        detail = await queries.get_dead_letter(dlq.pool, schema="dlq", dead_letter_id=entry.dead_letter_id)
        assert detail is not None
        assert [(r.target, r.kind, r.redrive, r.outcome) for r in detail.redrives] == [
            ("claimer", "run", 1, "done"),
            ("claimer", "run", 2, "refused"),
        ]
        # Nothing failed again, so nothing new was parked.
        assert await dlq.count() == 1
    finally:
        await claimer.stop(grace=0.5)
