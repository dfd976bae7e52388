"""Fixtures for the api tests: the app running in-process against the real Kafka and PostgreSQL."""

import os
import secrets
import shutil
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from playwright.async_api import Browser, async_playwright
from pydantic import SecretStr

from slotflow.contracts import Message, wrap
from slotflow.contracts.topics import TopicSpec
from slotflow.kafka.producer import Producer
from slotflow.settings import KafkaSettings, PostgresSettings
from slotflow_api.app import create_app
from slotflow_api.config import ApiSettings, Settings

#: The api under test runs with authentication on and this bootstrap (admin) token: the tests
#: exercise the API as a deployment would, and the ones about tokens and scopes create their own.
TEST_TOKEN = "sft_" + secrets.token_urlsafe(32)
AUTH = {"Authorization": f"Bearer {TEST_TOKEN}"}
#: Every state-changing request names its client (the API's CSRF rule, docs/api.md).
CLIENT_HEADERS = {"X-Slotflow-Client": "test", **AUTH}


@pytest.fixture
def api_settings(kafka: KafkaSettings, pg_dsn: str) -> Settings:
    return Settings(
        api=ApiSettings(
            projector_poll_ms=50,
            readiness_timeout_seconds=5.0,
            bootstrap_token=SecretStr(TEST_TOKEN),
            pool_size=5,
        ),
        kafka=kafka,
        postgres=PostgresSettings(dsn=pg_dsn, pool_min_size=1, pool_max_size=5),
    )


@pytest.fixture
async def app(api_settings: Settings) -> AsyncIterator[FastAPI]:
    application = create_app(api_settings)
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://api.test", timeout=40, headers=CLIENT_HEADERS
    ) as http:
        yield http


@pytest.fixture
async def producer(kafka: KafkaSettings) -> AsyncIterator[Producer]:
    async with Producer(kafka, client_id="api-test") as started:
        yield started


class Emitter:
    """Produces contract messages to a topic the way the owning service would."""

    def __init__(self, producer: Producer, kafka: KafkaSettings) -> None:
        self.producer = producer
        self.kafka = kafka

    async def __call__(
        self,
        spec: TopicSpec,
        message: Message,
        *,
        id: str,
        key: str,
        occurred_at: datetime | None = None,
        source: str = "test",
    ) -> None:
        envelope = wrap(message, id=id, key=key, source=source, occurred_at=occurred_at or datetime.now(UTC))
        await self.producer.send(self.kafka.topic(spec), envelope)


@pytest.fixture
def emit(producer: Producer, kafka: KafkaSettings) -> Emitter:
    return Emitter(producer, kafka)


# The dashboard's browser tests (test_ui*.py): Debian's Chromium, never a downloaded one.
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    if shutil.which(CHROMIUM) is None:
        pytest.fail(f"{CHROMIUM} is missing: run deploy/devstack/install-tools.sh (make test does)")
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    target = Path(os.environ.get("SLOTFLOW_SCREENSHOT_DIR") or tmp_path)
    target.mkdir(parents=True, exist_ok=True)
    return target
