"""Fixtures for claimer chaos tests: claimer subprocesses, the user tables, a JobDue producer."""

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from slotflow.testing.processes import ProcessGroup, ServiceProcess
from slotflow_claimer.app import migrate
from tests.chaos.claimer.procs import claimer_process
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
def spawn(
    kafka: KafkaSettings, pg_dsn: str, db: Pool, tmp_path: Path, processes: ProcessGroup
) -> SpawnClaimer:
    """Start claimer processes (waiting until each serves metrics); all are killed afterwards."""

    async def _spawn(name: str, **settings: Any) -> ServiceProcess:
        return await processes.start(claimer_process(name, kafka, pg_dsn, tmp_path, **settings))

    return _spawn
