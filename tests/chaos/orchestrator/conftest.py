"""Fixtures for orchestrator chaos tests: orchestrator subprocesses, an in-process claimer."""

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow_orchestrator.app import apply_migrations
from tests.chaos.orchestrator.procs import OrchestratorProcess
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
async def spawn(
    kafka: KafkaSettings, pg_dsn: str, schema: Pool, tmp_path: Path
) -> AsyncIterator[SpawnOrchestrator]:
    """Start orchestrator processes (waiting until each serves metrics); all are killed afterwards."""
    started: list[OrchestratorProcess] = []

    async def _spawn(name: str, **settings: Any) -> OrchestratorProcess:
        proc = OrchestratorProcess(name, kafka, pg_dsn, tmp_path, **settings)
        started.append(proc)
        await assert_eventually(proc.ready, timeout=60, interval=0.2, message=f"orchestrator {name} ready")
        return proc

    yield _spawn
    for proc in started:
        proc.close()
