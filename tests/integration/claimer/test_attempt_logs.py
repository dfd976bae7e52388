"""What a handler logs during an attempt travels with that attempt's outcome, and only that one's."""

import asyncio
import logging
import time
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import httpx

from slotflow.contracts import DeadLetterStatusChanged, RetryPolicy, wrap
from slotflow.contracts.topics import DLQ_EVENTS, JOBS_DUE, RUN_EVENTS
from slotflow.errors import PermanentError
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.runs import HandlerRegistry, RunContext
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow_claimer.capture import MAX_LINES
from tests.integration.claimer.conftest import StartClaimer
from tests.integration.claimer.support import TopicReader, job_due, publish, wait_state
from tests.integration.claimer.test_failures import ticking

handler_log = logging.getLogger("tests.payouts")


async def test_each_attempt_carries_its_own_log_lines(
    kafka: KafkaSettings,
    pg_dsn: str,
    producer: Producer,
    db: Pool,
    registry: HandlerRegistry,
    start_claimer: StartClaimer,
) -> None:
    handler_log.setLevel(logging.INFO)

    async def flaky(ctx: RunContext) -> str:
        handler_log.info("attempt %d of %s: calling the bank", ctx.attempt, ctx.run_id)
        # Another run on the same loop logs meanwhile: its lines must not land in this attempt.
        await asyncio.sleep(0.05)
        if ctx.attempt == 1:
            handler_log.warning("bank said 503")
            raise ConnectionError("gateway unreachable")
        return "paid"

    def chatty(ctx: RunContext) -> str:
        # A plain def runs in a thread: the capture follows it there. It logs past the bound.
        for i in range(MAX_LINES + 50):
            handler_log.info("line %d of %s", i, ctx.run_id)
        time.sleep(0.01)
        return "done"

    registry.register("test.flaky", flaky)
    registry.register("test.chatty", chatty)
    await start_claimer()
    policy = RetryPolicy(base=timedelta(milliseconds=300), cap=timedelta(seconds=1), max_attempts=3)
    job = job_due("flaky-logs", handler="test.flaky", retry=policy)
    noisy = job_due("chatty-logs", handler="test.chatty")
    async with ticking(kafka, pg_dsn):
        await publish(producer, kafka, [job, noisy])
        await wait_state(db, job.run_id, "completed")
        await wait_state(db, noisy.run_id, "completed")
    async with TopicReader(kafka, RUN_EVENTS) as events:
        completed = await events.wait_for("run.completed", run_id=job.run_id)
        loud = await events.wait_for("run.completed", run_id=noisy.run_id)
        failed = events.of_type("run.failed", job.run_id)
    first = failed[0].data["logs"]
    assert len(first) == 2, first
    assert first[0].endswith(f"INFO tests.payouts: attempt 1 of {job.run_id}: calling the bank")
    assert first[1].endswith("WARNING tests.payouts: bank said 503")
    assert "ConnectionError" in failed[0].data["traceback"]
    second = next(e for e in completed if e.data["attempt"] == 2).data["logs"]
    assert len(second) == 1
    assert second[0].endswith(f"attempt 2 of {job.run_id}: calling the bank")
    lines = loud[0].data["logs"]
    assert len(lines) == MAX_LINES + 1
    assert all(noisy.run_id in line for line in lines[:-1])
    assert lines[-1] == "... 50 more log lines of this attempt not kept"


async def test_the_run_page_and_the_dead_letter_show_every_attempt_with_its_logs(
    kafka: KafkaSettings,
    pg_dsn: str,
    producer: Producer,
    db: Pool,
    registry: HandlerRegistry,
    start_claimer: StartClaimer,
    api: httpx.AsyncClient,
) -> None:
    handler_log.setLevel(logging.INFO)

    async def declines(ctx: RunContext) -> None:
        handler_log.info("attempt %d: charging %s", ctx.attempt, ctx.payload["merchant_id"])
        if ctx.attempt == 1:
            raise ConnectionError("gateway unreachable")
        raise PermanentError("card declined by issuer")

    registry.register("test.declines", declines)
    await start_claimer()
    policy = RetryPolicy(base=timedelta(milliseconds=300), cap=timedelta(seconds=1), max_attempts=3)
    job = job_due("declines", handler="test.declines", retry=policy, payload={"merchant_id": "m-7"})
    async with ticking(kafka, pg_dsn):
        await publish(producer, kafka, [job])
        await wait_state(db, job.run_id, "dead_lettered")
    url = f"/v1/runs/{quote(job.run_id, safe='')}"

    async def projected() -> dict[str, Any] | None:
        body: dict[str, Any] = (await api.get(url)).json()
        attempts = body.get("attempts") or []
        return body if len(attempts) == 2 and all(a["logs"] for a in attempts) else None

    run = await assert_eventually(projected, timeout=30, message="both attempts projected with logs")
    assert run["payload"] == {"merchant_id": "m-7"}
    first, second = run["attempts"]
    assert first["outcome"] == "retrying"
    assert first["error"]["type"] == "ConnectionError"
    assert "raise ConnectionError" in first["traceback"]
    assert [line.split(" ", 2)[2] for line in first["logs"]] == [
        "INFO tests.payouts: attempt 1: charging m-7"
    ]
    assert second["outcome"] == "dead_lettered"
    assert "card declined by issuer" in second["traceback"]
    assert second["logs"][0].endswith("attempt 2: charging m-7")
    # Lists stay light: no payload, tracebacks or log lines per row.
    listed = (await api.get("/v1/runs", params={"job_id": job.job_id})).json()["items"][0]
    assert "payload" not in listed
    assert "logs" not in listed["attempts"][0]

    # The DLQ service parks the letter and announces it; the letter's page shows the run's story.
    letter_id = f"{kafka.topic(JOBS_DUE)}:0:0"
    parked = DeadLetterStatusChanged(
        dead_letter_id=letter_id,
        status="parked",
        reason="permanent_error",
        topic=kafka.topic(JOBS_DUE),
        source_service="claimer",
        job_id=job.job_id,
        run_id=job.run_id,
        at=datetime.now(UTC),
        error_type="PermanentError",
        error="card declined by issuer",
    )
    envelope = wrap(parked, id=f"{letter_id}/parked", key=letter_id, source="dlq", occurred_at=parked.at)
    await producer.send(kafka.topic(DLQ_EVENTS), envelope)

    async def letter() -> dict[str, Any] | None:
        response = await api.get(f"/v1/dlq/{quote(letter_id, safe='')}")
        return response.json() if response.status_code == 200 else None

    shown = await assert_eventually(letter, timeout=30, message="the letter projected")
    assert [a["outcome"] for a in shown["attempts"]] == ["retrying", "dead_lettered"]
    assert "card declined by issuer" in shown["traceback"]
    assert shown["attempts"][0]["logs"] == first["logs"]
