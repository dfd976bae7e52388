"""Ticker test support: run replicas in-process or as subprocesses, tail topics, drain the outbox.

Shared by tests/integration/ticker and tests/chaos/ticker.
"""

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from slotflow.contracts import CronSpec, Envelope, IntervalSpec, JobDue, Message, ScheduleDefinition
from slotflow.contracts.codec import encode
from slotflow.contracts.envelope import envelope_headers
from slotflow.contracts.routing import build_command
from slotflow.kafka.producer import OutgoingRecord, Producer
from slotflow.pg.pool import Pool
from slotflow.principals import SignatureSettings
from slotflow.relay import OutboxRelay
from slotflow.settings import KafkaSettings, PostgresSettings
from slotflow.testing import assert_eventually, unique_name
from slotflow.testing.topics import TopicTail as TopicTail  # re-exported: the tests import it here
from slotflow_ticker.app import TickerService
from slotflow_ticker.config import Settings, TickerSettings
from tests.cron_oracle import expected_slots as cron_oracle_slots

SCHEMA = "ticker"


def ticker_settings(**overrides: Any) -> TickerSettings:
    values: dict[str, Any] = {
        "ticker_id": unique_name("tk"),
        "metrics_port": 0,
        "backlog_seconds": 0.5,
        "horizon_seconds": 2.0,
    }
    values.update(overrides)
    return TickerSettings(**values)


@dataclass
class Replica:
    app: TickerService
    stop: asyncio.Event
    task: "asyncio.Task[None]"


async def start_ticker(
    kafka: KafkaSettings, pg_dsn: str, *, signatures: SignatureSettings | None = None, **overrides: Any
) -> Replica:
    app = TickerService(
        Settings(
            ticker=ticker_settings(**overrides),
            kafka=kafka,
            postgres=PostgresSettings(dsn=pg_dsn),
            signatures=signatures or SignatureSettings(),
        )
    )
    stop = asyncio.Event()
    task = asyncio.create_task(app.run(stop))
    ready = asyncio.create_task(app.started.wait())
    done, _ = await asyncio.wait([task, ready], timeout=60, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        ready.cancel()
        await task
    if ready not in done:
        raise AssertionError("the ticker did not start within 60 s")
    return Replica(app, stop, task)


async def stop_ticker(replica: Replica) -> None:
    replica.stop.set()
    await asyncio.wait_for(replica.task, timeout=60)


@contextlib.asynccontextmanager
async def tickers(
    kafka: KafkaSettings, pg_dsn: str, count: int = 1, **overrides: Any
) -> AsyncIterator[list[Replica]]:
    replicas = [await start_ticker(kafka, pg_dsn, **overrides) for _ in range(count)]
    try:
        yield replicas
    finally:
        for replica in replicas:
            await stop_ticker(replica)


async def send(
    producer: Producer, kafka: KafkaSettings, message: Message, *, command_id: str | None = None
) -> str:
    """Publish one command; returns its id."""
    spec, envelope = build_command(message, command_id=command_id, source="test")
    await producer.send(kafka.topic(spec), envelope)
    return envelope.id


async def send_many(producer: Producer, kafka: KafkaSettings, messages: Iterable[Message]) -> list[str]:
    """Publish commands in one pipelined burst; returns their ids in order."""
    records = []
    ids = []
    for message in messages:
        spec, envelope = build_command(message, source="test")
        ids.append(envelope.id)
        records.append(
            OutgoingRecord(
                kafka.topic(spec), envelope.key.encode(), encode(envelope), envelope_headers(envelope)
            )
        )
    await producer.send_raw_many(records)
    return ids


async def drain_outbox(pool: Pool, kafka: KafkaSettings) -> int:
    """Publish whatever the stopped replicas left staged; returns how many rows."""
    async with Producer(kafka, client_id="drain") as producer:
        relay = OutboxRelay(pool, producer, schema=SCHEMA)
        total = 0
        while moved := await relay.relay_once():
            total += moved
        return total


async def db_now(pool: Pool) -> datetime:
    value: datetime = await pool.fetchval("SELECT now()")
    return value


async def wait_db_time(pool: Pool, instant: datetime, *, timeout: float = 60.0) -> None:
    """Until the database clock reaches ``instant`` (polling, never a fixed sleep)."""

    async def reached() -> bool:
        return await db_now(pool) >= instant

    await assert_eventually(reached, timeout=timeout, interval=0.05, message=f"database time {instant}")


def jobs_by_run(tail: TopicTail) -> dict[str, list[Envelope]]:
    runs: dict[str, list[Envelope]] = {}
    for envelope in tail.of_type("job.due"):
        runs.setdefault(envelope.data["run_id"], []).append(envelope)
    return runs


def expected_slots(definition: ScheduleDefinition, *, after: datetime, before: datetime) -> list[datetime]:
    """The slots in (after, before), computed independently: the documented cron and DST semantics
    (tests/cron_oracle.py, no code shared with the ticker), or plain arithmetic for an interval."""
    spec = definition.spec
    if isinstance(spec, CronSpec):
        slots, _ = cron_oracle_slots(
            spec.expression,
            spec.timezone,
            after=after,
            until=before - timedelta(microseconds=1),
            repeated=definition.dst.repeated,
            nonexistent=definition.dst.nonexistent,
        )
        return [slot.at for slot in slots]
    if isinstance(spec, IntervalSpec):
        found: list[datetime] = []
        k = (after - spec.anchor) // spec.every + 1
        while (at := (spec.anchor + k * spec.every).astimezone(UTC)) < before:
            found.append(at)
            k += 1
        return found
    raise AssertionError(f"no independent expectation for {spec!r}")


def duplicates(values: Iterable[str]) -> dict[str, int]:
    return {k: n for k, n in Counter(values).items() if n > 1}


def job(envelope: Envelope) -> JobDue:
    return JobDue.model_validate(envelope.data)


# --- subprocess replicas (chaos tests) ---------------------------------------------------------


@dataclass
class Process:
    ticker_id: str
    popen: "subprocess.Popen[bytes]"
    log: str

    def kill(self) -> None:
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(timeout=30)

    def terminate(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill()


def spawn_ticker(
    kafka: KafkaSettings,
    pg_dsn: str,
    *,
    log_dir: str,
    env: dict[str, str] | None = None,
    **settings: Any,
) -> Process:
    """Run `python -m slotflow_ticker` in its own process (its pid is the ticker's own, so signals reach it)."""
    ticker_id = settings.pop("ticker_id", unique_name("tk"))
    environment = {
        **os.environ,
        "SLOTFLOW_KAFKA_BOOTSTRAP": kafka.bootstrap,
        "SLOTFLOW_KAFKA_TOPIC_NAMESPACE": kafka.topic_namespace,
        "SLOTFLOW_PG_DSN": pg_dsn,
        "SLOTFLOW_TICKER_TICKER_ID": ticker_id,
        "SLOTFLOW_TICKER_METRICS_PORT": "0",
        **{f"SLOTFLOW_TICKER_{k.upper()}": str(v) for k, v in settings.items()},
        **(env or {}),
    }
    log = os.path.join(log_dir, f"{ticker_id}.log")
    with open(log, "ab") as out:
        popen = subprocess.Popen(
            [sys.executable, "-m", "slotflow_ticker", "--log-level", "INFO", "run"],
            env=environment,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return Process(ticker_id, popen, log)


async def wait_until_serving(pool: Pool, ticker_id: str, *, timeout: float = 60.0) -> None:
    """Until the replica's pool is connected (its application_name shows in pg_stat_activity)."""

    async def connected() -> bool:
        count = await pool.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
            f"slotflow-ticker-{ticker_id}",
        )
        return bool(count)

    await assert_eventually(connected, timeout=timeout, message=f"ticker {ticker_id} connected")


def at_least(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)
