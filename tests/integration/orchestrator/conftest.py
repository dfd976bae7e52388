"""An orchestrator (the real workflow runtime), claimers and a ticker per test, on the real stack."""

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.runs import HandlerRegistry
from slotflow.settings import KafkaSettings
from slotflow_claimer.app import ClaimerService
from slotflow_orchestrator.workflow_code import RuntimeWorkflowCode, load_workflow_code
from tests.integration.claimer.support import settings_for as claimer_settings
from tests.integration.orchestrator.activities import ACTIVITIES, create_tables
from tests.integration.orchestrator.support import (
    Running,
    Workflows,
    orchestrator_settings,
    start_orchestrator,
)
from tests.integration.ticker.support import Replica, start_ticker, stop_ticker

StartOrchestrator = Callable[..., Awaitable[Running]]
StartClaimer = Callable[..., Awaitable[ClaimerService]]

#: The workflow modules every orchestrator of these tests serves.
WORKFLOW_MODULES = ["tests.integration.orchestrator.saga", "tests.integration.orchestrator.flows"]


@pytest.fixture
def workflow_code() -> RuntimeWorkflowCode:
    return load_workflow_code(WORKFLOW_MODULES)


@pytest.fixture
async def producer(kafka: KafkaSettings) -> AsyncIterator[Producer]:
    async with Producer(kafka, client_id="test-commands") as feed:
        yield feed


@pytest.fixture
async def db(pg_pool: Pool) -> Pool:
    async with pg_pool.acquire() as conn:
        await create_tables(conn)
    return pg_pool


@pytest.fixture
def registry() -> HandlerRegistry:
    reg = HandlerRegistry()
    for name, fn in ACTIVITIES.items():
        reg.register(name, fn)
    return reg


@pytest.fixture
async def start_orchestrator_(
    kafka: KafkaSettings, pg_dsn: str, db: Pool, workflow_code: RuntimeWorkflowCode
) -> AsyncIterator[StartOrchestrator]:
    started: list[Running] = []

    async def start(*, with_workflow_code: RuntimeWorkflowCode | None = None, **overrides: Any) -> Running:
        settings = orchestrator_settings(kafka, pg_dsn, **overrides)
        running = await start_orchestrator(settings, with_workflow_code or workflow_code)
        started.append(running)
        return running

    yield start
    for running in started:
        await running.stop()


@pytest.fixture
async def ticker(kafka: KafkaSettings, pg_dsn: str, db: Pool) -> AsyncIterator[Replica]:
    """One ticker: durable workflow timers fire through it."""
    replica = await start_ticker(kafka, pg_dsn)
    yield replica
    await stop_ticker(replica)


@pytest.fixture
async def start_claimer(
    kafka: KafkaSettings, pg_dsn: str, db: Pool, registry: HandlerRegistry
) -> AsyncIterator[StartClaimer]:
    started: list[ClaimerService] = []

    async def start(**overrides: Any) -> ClaimerService:
        claimer = ClaimerService(claimer_settings(kafka, pg_dsn, **overrides), registry=registry)
        await claimer.start()
        started.append(claimer)
        return claimer

    yield start
    for claimer in started:
        await claimer.stop(grace=0.5)


@pytest.fixture
async def workflows(
    kafka: KafkaSettings,
    producer: Producer,
    db: Pool,
    start_orchestrator_: StartOrchestrator,
    start_claimer: StartClaimer,
) -> Workflows:
    """One orchestrator serving WORKFLOW_MODULES and one claimer serving ACTIVITIES, started."""
    await start_orchestrator_()
    await start_claimer()
    return Workflows(kafka, producer, db)
