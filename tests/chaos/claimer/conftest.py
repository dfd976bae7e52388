"""Fixtures for claimer chaos tests: claimer subprocesses, the user tables, a JobDue producer."""

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow_claimer.app import migrate
from tests.chaos.claimer.procs import ClaimerProcess
from tests.integration.claimer.support import create_user_tables

SpawnClaimer = Callable[..., Any]


@pytest.fixture
async def db(pg_pool: Pool) -> Pool:
    async with pg_pool.acquire() as conn:
        await create_user_tables(conn)
    # The claimer schema exists before any process starts, so tests can watch it at once.
    await migrate(pg_pool)
    return pg_pool


@pytest.fixture
async def producer(kafka: KafkaSettings) -> AsyncIterator[Producer]:
    async with Producer(kafka, client_id="chaos-feed") as feed:
        yield feed


@pytest.fixture
async def spawn(kafka: KafkaSettings, pg_dsn: str, db: Pool, tmp_path: Path) -> AsyncIterator[SpawnClaimer]:
    """Start claimer processes (waiting until each serves metrics); all are killed afterwards."""
    started: list[ClaimerProcess] = []

    async def _spawn(name: str, **settings: Any) -> ClaimerProcess:
        proc = ClaimerProcess(name, kafka, pg_dsn, tmp_path, **settings)
        started.append(proc)
        await assert_eventually(proc.ready, timeout=60, interval=0.2, message=f"claimer {name} ready")
        return proc

    yield _spawn
    for proc in started:
        proc.close()
