"""Claimers running in-process against the real broker and a fresh database, per test."""

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.runs import HandlerRegistry
from slotflow.settings import KafkaSettings, PostgresSettings
from slotflow_api.app import create_app
from slotflow_api.config import ApiSettings
from slotflow_api.config import Settings as ApiServiceSettings
from slotflow_claimer.app import ClaimerService
from tests.integration.api.conftest import AUTH, TEST_TOKEN
from tests.integration.claimer.support import create_user_tables, payouts_module, settings_for

StartClaimer = Callable[..., Awaitable[ClaimerService]]

#: Every state-changing request names its client (the API's CSRF rule, docs/api.md).
CLIENT_HEADERS = {"X-Slotflow-Client": "test", **AUTH}


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
    started: list[ClaimerService] = []

    async def start(
        *, registry_: HandlerRegistry | None = None, rng: Any = None, **overrides: Any
    ) -> ClaimerService:
        claimer = ClaimerService(
            settings_for(kafka, pg_dsn, **overrides), registry=registry_ or registry, rng=rng
        )
        await claimer.start()
        started.append(claimer)
        return claimer

    yield start
    for claimer in started:
        await claimer.stop(grace=0.5)


@pytest.fixture
async def api(kafka: KafkaSettings, pg_dsn: str) -> AsyncIterator[httpx.AsyncClient]:
    """The api in-process (projector included) on the same Kafka namespace and database."""
    settings = ApiServiceSettings(
        api=ApiSettings(
            projector_poll_ms=50, readiness_timeout_seconds=5.0, bootstrap_token=SecretStr(TEST_TOKEN)
        ),
        kafka=kafka,
        postgres=PostgresSettings(dsn=pg_dsn, pool_min_size=1, pool_max_size=5),
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://api.test", timeout=40, headers=CLIENT_HEADERS
        ) as http:
            yield http
