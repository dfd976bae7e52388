"""A DLQ service running in-process against the real broker and a fresh database, per test."""

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool, create_pool
from slotflow.pg.statements import sql_with
from slotflow.principals import SignatureSettings
from slotflow.settings import KafkaSettings, PostgresSettings
from slotflow_dlq.app import DlqService
from slotflow_dlq.config import DlqSettings, Settings

BIG = 16 * 1024 * 1024


@dataclass
class Running:
    service: DlqService
    pool: Pool
    stop: asyncio.Event
    task: "asyncio.Task[None]"

    async def count(self, where: str = "true", *args: Any) -> int:
        counted = sql_with("SELECT count(*) FROM {schema}.dead_letters WHERE {where}", "dlq", where=where)
        return int(await self.pool.fetchval(counted, *args))


async def start_dlq(
    kafka: KafkaSettings, pg_dsn: str, *, signatures: SignatureSettings | None = None, **overrides: Any
) -> Running:
    settings = DlqSettings(**{"metrics_port": 0, "gauge_seconds": 0.2, **overrides})
    service = DlqService(
        Settings(
            dlq=settings,
            kafka=kafka,
            postgres=PostgresSettings(dsn=pg_dsn),
            signatures=signatures or SignatureSettings(),
        )
    )
    stop = asyncio.Event()
    task = asyncio.create_task(service.run(stop))
    ready = asyncio.create_task(service.ready.wait())
    done, _ = await asyncio.wait([task, ready], timeout=60, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        ready.cancel()
        await task  # raises what stopped it
    if ready not in done:
        raise AssertionError("the DLQ service did not start within 60 s")
    pool = await create_pool(PostgresSettings(dsn=pg_dsn), min_size=1, max_size=4)
    return Running(service, pool, stop, task)


async def stop_dlq(running: Running) -> None:
    running.stop.set()
    try:
        await asyncio.wait_for(running.task, timeout=60)
    finally:
        await running.pool.close()


@pytest.fixture
async def start(kafka: KafkaSettings, pg_dsn: str) -> AsyncIterator[Callable[..., Any]]:
    """Start a DLQ service with setting overrides; every one started is stopped after the test."""
    started: list[Running] = []

    async def _start(**overrides: Any) -> Running:
        running = await start_dlq(kafka, pg_dsn, **overrides)
        started.append(running)
        return running

    yield _start
    for running in started:
        if not running.task.done():
            await stop_dlq(running)


@pytest.fixture
async def dlq(start: Callable[..., Any]) -> Running:
    running: Running = await start()
    return running


@pytest.fixture
async def producer(kafka: KafkaSettings) -> AsyncIterator[Producer]:
    async with Producer(kafka, client_id="test-feed", max_message_bytes=BIG) as feed:
        yield feed
