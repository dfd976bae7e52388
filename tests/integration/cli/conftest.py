"""Fixtures for the CLI tests: the `slotflow` console script run as a subprocess against the api
served on a loopback port, both on the real Kafka and PostgreSQL."""

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic import SecretStr

from slotflow.settings import KafkaSettings, PostgresSettings
from slotflow_api.app import create_app
from slotflow_api.config import ApiSettings, Settings
from tests.integration.api.conftest import TEST_TOKEN
from tests.integration.cli.support import served

SCRIPT = Path(sys.executable).with_name("slotflow")


@dataclass(frozen=True)
class Outcome:
    code: int
    out: str
    err: str


@dataclass(frozen=True)
class Cli:
    """Runs the installed `slotflow` script with the test's Kafka namespace and API URL."""

    kafka: KafkaSettings
    api_url: str

    def env(self, **overrides: str) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if not key.startswith("SLOTFLOW_")}
        env.update(
            SLOTFLOW_KAFKA_BOOTSTRAP=self.kafka.bootstrap,
            SLOTFLOW_KAFKA_TOPIC_NAMESPACE=self.kafka.topic_namespace,
            SLOTFLOW_API_URL=self.api_url,
            # The api runs with authentication on; the CLI takes its token from the environment.
            SLOTFLOW_TOKEN=TEST_TOKEN,
        )
        env.update(self.kafka.security.env())
        env.update(overrides)
        return env

    async def __call__(self, *argv: str, env: dict[str, str] | None = None, timeout: float = 60) -> Outcome:
        process = await asyncio.create_subprocess_exec(
            str(SCRIPT),
            *argv,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env or self.env(),
        )
        out, err = await asyncio.wait_for(process.communicate(), timeout=timeout)
        code = process.returncode
        if code is None:
            raise AssertionError(f"slotflow {' '.join(argv)} did not exit")
        return Outcome(code, out.decode(), err.decode())

    async def many(self, *commands: Sequence[str]) -> list[Outcome]:
        """Several invocations at once (independent ones only)."""
        return list(await asyncio.gather(*(self(*argv) for argv in commands)))


@pytest.fixture
def api_settings(kafka: KafkaSettings, pg_dsn: str) -> Settings:
    return Settings(
        api=ApiSettings(
            projector_poll_ms=50, readiness_timeout_seconds=5.0, bootstrap_token=SecretStr(TEST_TOKEN)
        ),
        kafka=kafka,
        postgres=PostgresSettings(dsn=pg_dsn, pool_min_size=1, pool_max_size=5),
    )


@pytest.fixture
async def api_url(api_settings: Settings) -> AsyncIterator[str]:
    async with served(create_app(api_settings)) as base:
        yield base


@pytest.fixture
def cli(kafka: KafkaSettings, api_url: str) -> Cli:
    if not SCRIPT.exists():
        pytest.fail(
            f"{SCRIPT} is missing: run `make setup` (it installs libs/slotflow-base and libs/slotflow editable)"
        )
    return Cli(kafka, api_url)
