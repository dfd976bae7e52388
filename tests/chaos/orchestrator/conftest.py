"""Fixtures for orchestrator chaos tests: orchestrator subprocesses, an in-process claimer."""

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from slotflow.testing.processes import ProcessGroup, ServiceProcess
from slotflow_orchestrator.app import apply_migrations
from tests.chaos.orchestrator.procs import orchestrator_process
from tests.integration.orchestrator.conftest import (  # noqa: F401 - fixtures shared with integration
    db,
    producer,
    registry,
    start_claimer,
)

SpawnOrchestrator = Callable[..., Any]


@pytest.fixture
async def schema(db: Pool) -> Pool:  # noqa: F811 - the shared fixture
    # The schema exists before any process starts, so the test can watch it at once.
    await apply_migrations(db)
    return db


@pytest.fixture
def spawn(
    kafka: KafkaSettings, pg_dsn: str, schema: Pool, tmp_path: Path, processes: ProcessGroup
) -> SpawnOrchestrator:
    """Start orchestrator processes (waiting until each serves metrics); all are killed afterwards."""

    async def _spawn(name: str, **settings: Any) -> ServiceProcess:
        return await processes.start(orchestrator_process(name, kafka, pg_dsn, tmp_path, **settings))

    return _spawn
