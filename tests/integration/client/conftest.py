"""The whole system as real processes for the client tests: ticker, claimer and orchestrator serving
examples/orders, and the api with authentication on, all on the real Kafka and PostgreSQL."""

import secrets
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from slotflow.client import HttpTransport, KafkaTransport
from slotflow.settings import KafkaSettings
from slotflow.testing.processes import ProcessGroup, ServiceProcess, free_port, stack_env

REPO = Path(__file__).parents[3]
#: The api's bootstrap token (scope admin); only this test's api knows it.
ADMIN_TOKEN = "sft_" + secrets.token_urlsafe(32)
#: The orchestrator's query listener's token, given to the api.
QUERY_TOKEN = secrets.token_urlsafe(32)


@dataclass(frozen=True)
class Stack:
    kafka: KafkaSettings
    api_url: str


@pytest.fixture
def processes() -> Iterator[ProcessGroup]:
    group = ProcessGroup()
    try:
        yield group
    finally:
        group.close()


@pytest.fixture
async def stack(kafka: KafkaSettings, pg_dsn: str, tmp_path: Path, processes: ProcessGroup) -> Stack:
    """Every service as its own process, each waited for until it serves."""
    # The example's workflow and activities are imported from examples/ by the services.
    path = {"PYTHONPATH": f"{REPO / 'examples'}:{REPO}"}

    def service(module: str, prefix: str, **settings: object) -> ServiceProcess:
        port = free_port()
        env = stack_env(kafka, pg_dsn, prefix, metrics_port=port, **settings) | path
        return ServiceProcess(module, module, env=env, log_dir=tmp_path, cwd=REPO, metrics_port=port)

    await processes.start(service("slotflow_ticker", "SLOTFLOW_TICKER_"))
    await processes.start(
        service("slotflow_claimer", "SLOTFLOW_CLAIMER_", handler_modules="orders.activities")
    )
    # The orchestrator answers the api's queries on a listener of its own, behind a token.
    await processes.start(
        service(
            "slotflow_orchestrator",
            "SLOTFLOW_ORCHESTRATOR_",
            workflow_modules="orders.workflow",
            query_port=free_port(),
            query_token=QUERY_TOKEN,
        )
    )
    api_port = free_port()
    api_env = stack_env(
        kafka,
        pg_dsn,
        "SLOTFLOW_API_",
        port=api_port,
        bootstrap_token=ADMIN_TOKEN,
        projector_poll_ms=50,
        orchestrator_query_token=QUERY_TOKEN,
    )
    # The api serves /metrics on its own port: ready once it answers there.
    await processes.start(
        ServiceProcess("slotflow_api", "api", env=api_env, log_dir=tmp_path, cwd=REPO, metrics_port=api_port)
    )
    return Stack(kafka, f"http://127.0.0.1:{api_port}")


@pytest.fixture
async def http(stack: Stack) -> AsyncIterator[HttpTransport]:
    async with HttpTransport(stack.api_url, token=ADMIN_TOKEN) as transport:
        yield transport


@pytest.fixture
async def kafka_transport(stack: Stack) -> AsyncIterator[KafkaTransport]:
    async with KafkaTransport(stack.kafka, source="client-test") as transport:
        yield transport
