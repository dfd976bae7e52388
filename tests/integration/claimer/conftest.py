"""Claimers running in-process against the real broker and a fresh database, per test."""

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.runs import HandlerRegistry
from slotflow.settings import KafkaSettings
from slotflow_claimer.app import Claimer
from tests.integration.claimer.support import create_user_tables, payouts_module, settings_for

StartClaimer = Callable[..., Awaitable[Claimer]]


@pytest.fixture
async def producer(kafka: KafkaSettings) -> AsyncIterator[Producer]:
    async with Producer(kafka, client_id="test-feed") as feed:
        yield feed


@pytest.fixture
async def db(pg_pool: Pool) -> Pool:
    """The test database with the payouts ledger and the append-only attempts table."""
    async with pg_pool.acquire() as conn:
        await create_user_tables(conn)
    return pg_pool


@pytest.fixture
def registry() -> HandlerRegistry:
    """A registry per test, holding the payouts example; tests add their own handlers."""
    reg = HandlerRegistry()
    reg.register("payouts.pay_merchants", payouts_module().pay_merchants)
    return reg


@pytest.fixture
async def start_claimer(
    kafka: KafkaSettings, pg_dsn: str, db: Pool, registry: HandlerRegistry
) -> AsyncIterator[StartClaimer]:
    """Start a claimer with setting overrides; every one started is stopped after the test."""
    started: list[Claimer] = []

    async def start(
        *, registry_: HandlerRegistry | None = None, rng: Any = None, **overrides: Any
    ) -> Claimer:
        claimer = Claimer(settings_for(kafka, pg_dsn, **overrides), registry=registry_ or registry, rng=rng)
        await claimer.start()
        started.append(claimer)
        return claimer

    yield start
    for claimer in started:
        await claimer.stop(grace=0.5)
