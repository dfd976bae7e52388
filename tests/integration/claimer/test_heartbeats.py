"""Activity heartbeats on the real broker and database: details recorded for the next attempt, a
silent attempt failed by its heartbeat_timeout and retried (by its own claimer, or by another's
reaper when its claimer is gone), and a zombie's heartbeat refused by the fence."""

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import Any

from slotflow.contracts import RetryPolicy
from slotflow.contracts.topics import RUN_EVENTS
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.runs import HandlerRegistry, RunContext
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow_claimer import store
from tests.integration.claimer.conftest import StartClaimer
from tests.integration.claimer.support import TopicReader, job_due, publish, run_row, wait_state
from tests.integration.ticker.support import Replica, start_ticker, stop_ticker


@contextlib.asynccontextmanager
async def ticking(kafka: KafkaSettings, pg_dsn: str) -> AsyncIterator[Replica]:
    """The real ticker, which keeps the retries' one-shot timers."""
    ticker = await start_ticker(kafka, pg_dsn)
    try:
        yield ticker
    finally:
        await stop_ticker(ticker)


def policy(**fields: Any) -> RetryPolicy:
    return RetryPolicy(base=timedelta(milliseconds=100), cap=timedelta(milliseconds=200), **fields)


def history(row: dict[str, Any]) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = json.loads(row["history"])
    return entries


async def test_a_handler_that_heartbeats_then_fails_resumes_from_its_details_on_the_next_attempt(
    kafka: KafkaSettings,
    pg_dsn: str,
    producer: Producer,
    db: Pool,
    registry: HandlerRegistry,
    start_claimer: StartClaimer,
) -> None:
    seen: list[tuple[int, Any]] = []

    def import_rows(ctx: RunContext) -> dict[str, int]:
        # A plain `def`: it runs in a worker thread and heartbeats from there.
        seen.append((ctx.attempt, ctx.heartbeat_details))
        start = ctx.heartbeat_details["row"] if ctx.heartbeat_details else 0
        for row in range(start, 6):
            ctx.heartbeat({"row": row})
            if ctx.attempt == 1 and row == 3:
                # Failing right after a heartbeat the throttle held back: the outcome carries it.
                raise ConnectionError("the file server went away")
        return {"resumed_at": start}

    registry.register("test.import", import_rows)
    await start_claimer()
    # A long heartbeat_timeout: a throttle of 8 s, so only the first heartbeat is written before
    # the failure and the rest travel with the failed attempt's outcome.
    job = job_due("import", handler="test.import", retry=policy(heartbeat_timeout=timedelta(seconds=10)))
    async with ticking(kafka, pg_dsn):
        await publish(producer, kafka, [job])
        row = await wait_state(db, job.run_id, "completed")
    assert seen == [(1, None), (2, {"row": 3})]
    assert json.loads(row["result"]) == {"resumed_at": 3}
    assert row["attempt"] == 2
    assert json.loads(row["heartbeat_details"]) == {"row": 5}
    assert [entry["error_type"] for entry in history(row)] == ["ConnectionError"]


async def test_a_handler_that_stops_heartbeating_fails_by_its_heartbeat_timeout_and_is_retried(
    kafka: KafkaSettings,
    pg_dsn: str,
    producer: Producer,
    db: Pool,
    registry: HandlerRegistry,
    start_claimer: StartClaimer,
) -> None:
    seen: list[tuple[int, Any]] = []
    cancelled: list[int] = []

    async def sync_accounts(ctx: RunContext) -> str:
        seen.append((ctx.attempt, ctx.heartbeat_details))
        if ctx.attempt == 1:
            ctx.heartbeat({"synced": 40})
            try:
                await asyncio.Event().wait()  # hangs: no heartbeat from here on
            except asyncio.CancelledError:
                cancelled.append(ctx.attempt)
                raise
        return "synced"

    registry.register("test.sync", sync_accounts)
    # A lease far longer than the heartbeat timeout: the timeout, not a lapse, ends the attempt.
    claimer = await start_claimer(lease_ttl_seconds=30.0)
    job = job_due("sync", handler="test.sync", retry=policy(heartbeat_timeout=timedelta(seconds=1)))
    started = time.monotonic()
    async with ticking(kafka, pg_dsn), TopicReader(kafka, RUN_EVENTS) as events:
        await publish(producer, kafka, [job])
        row = await wait_state(db, job.run_id, "completed")
        failed = await events.wait_for("run.failed", run_id=job.run_id)
    assert time.monotonic() - started < 20  # far inside the 30 s lease
    assert seen == [(1, None), (2, {"synced": 40})]
    assert cancelled == [1]
    assert (row["attempt"], row["takeovers"], row["lease_lapses"]) == (2, 0, 0)
    assert failed[0].data["error_type"] == "HeartbeatTimeout"
    assert "heartbeat_timeout 1 s" in failed[0].data["message"]
    assert failed[0].data["retryable"] is True
    [entry] = history(row)
    assert (entry["error_type"], entry["owner"]) == ("HeartbeatTimeout", claimer.owner)


async def test_a_claimer_gone_silent_past_the_heartbeat_timeout_is_failed_by_another_claimers_reaper(
    kafka: KafkaSettings,
    pg_dsn: str,
    producer: Producer,
    db: Pool,
    registry: HandlerRegistry,
    start_claimer: StartClaimer,
) -> None:
    seen: list[tuple[int, str, Any]] = []

    async def sync_accounts(ctx: RunContext) -> str:
        seen.append((ctx.attempt, ctx.owner, ctx.heartbeat_details))
        if ctx.attempt == 1:
            ctx.heartbeat({"synced": 7})
            await asyncio.Event().wait()  # its claimer dies in here
        return "synced"

    registry.register("test.sync", sync_accounts)
    # The first claimer's reaper is off, so only the second's can notice; leases of 30 s, so the
    # lapse path would take 30 s: the heartbeat deadline must end the attempt long before.
    first = await start_claimer(lease_ttl_seconds=30.0, reaper_interval_seconds=3600)
    # 3 s: room to stop the first claimer before its own deadline would fail the attempt there.
    job = job_due("silent", handler="test.sync", retry=policy(heartbeat_timeout=timedelta(seconds=3)))
    async with ticking(kafka, pg_dsn):
        await publish(producer, kafka, [job])
        await assert_eventually(lambda: seen, timeout=30)
        await assert_eventually(
            lambda: db.fetchval(
                "SELECT heartbeat_details IS NOT NULL FROM claimer.runs WHERE run_id = $1", job.run_id
            )
        )
        await first.kill()  # what a frozen claimer looks like from outside: a live lease, silence
        silent_since: datetime = await db.fetchval("SELECT now()")
        second = await start_claimer(lease_ttl_seconds=30.0, reaper_interval_seconds=0.2)
        row = await wait_state(db, job.run_id, "completed", timeout=60)
    assert [(attempt, details) for attempt, _, details in seen] == [(1, None), (2, {"synced": 7})]
    assert seen[1][1] == second.owner
    assert (row["attempt"], row["takeovers"], row["lease_lapses"]) == (2, 0, 0)
    [entry] = history(row)
    assert entry["error_type"] == "HeartbeatTimeout"
    assert f"claimer {first.owner}" in entry["message"]
    # Failed by the heartbeat deadline, not after the 30 s lease.
    failed_at = datetime.fromisoformat(entry["finished_at"])
    assert failed_at - silent_since < timedelta(seconds=15)
    # The silent claimer's late writes under its token (1) bounce: the attempt was failed under 2.
    async with db.acquire() as conn:
        assert not await store.record_heartbeat(
            conn, "claimer", run_id=job.run_id, token=1, details='{"synced": 99}', timeout=1.0
        )
        late = store.OutcomeWrite(job.run_id, 1, "completed", result='"late"', due=None)
        assert await store.record_outcomes(conn, "claimer", [late]) == []
    after = await run_row(db, job.run_id)
    assert after is not None
    assert (after["state"], json.loads(after["heartbeat_details"])) == ("completed", {"synced": 7})


async def test_a_zombies_heartbeat_is_refused_and_its_handler_cancelled(
    kafka: KafkaSettings, producer: Producer, db: Pool, registry: HandlerRegistry, start_claimer: StartClaimer
) -> None:
    beats = 0
    cancelled = threading.Event()

    async def keep_beating(ctx: RunContext) -> None:
        nonlocal beats
        try:
            while True:
                beats += 1
                ctx.heartbeat({"beat": beats})
                await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    registry.register("test.beating", keep_beating)
    # Lease heartbeats every 10 s: within this test only the activity heartbeat can find the loss.
    claimer = await start_claimer(lease_ttl_seconds=30.0)
    job = job_due("zombie", handler="test.beating", retry=policy(heartbeat_timeout=timedelta(seconds=1)))
    await publish(producer, kafka, [job])
    await assert_eventually(
        lambda: db.fetchval(
            "SELECT heartbeat_details IS NOT NULL FROM claimer.runs WHERE run_id = $1", job.run_id
        ),
        timeout=30,
    )
    # Another claimer takes the run over (what a reaper does once this one froze past its lease).
    await db.execute(
        "UPDATE claimer.runs SET fence_token = fence_token + 1, owner = 'intruder', "
        "lease_expires_at = now() + interval '1 minute', heartbeat_deadline = now() + interval '1 minute', "
        """heartbeat_details = '{"intruder": true}' WHERE run_id = $1""",
        job.run_id,
    )
    await assert_eventually(cancelled.is_set, timeout=5)
    rejected = {"write": "heartbeat"}
    assert claimer.metrics.value("slotflow_claimer_fence_rejected_total", rejected) == 1
    await assert_eventually(lambda: claimer.executor.in_flight == 0)
    row = await run_row(db, job.run_id)
    assert row is not None
    assert (row["state"], row["owner"], row["fence_token"]) == ("running", "intruder", 2)
    assert json.loads(row["heartbeat_details"]) == {"intruder": True}
