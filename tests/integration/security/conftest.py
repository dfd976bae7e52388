"""A PostgreSQL of these tests' own, started through the devstack with SLOTFLOW_PG_TLS=1: its own
CA, a server certificate for 127.0.0.1 and localhost, and a DSN with sslmode=verify-full.

Private, so the shared devstack keeps its mode, and the roles the role tests create vanish with
it. One per session (initdb and a start cost a few seconds of CPU).
"""

import asyncio
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest

from slotflow.kafka.producer import Producer
from slotflow.settings import KafkaSettings
from slotflow.testing import unique_name
from slotflow.testing.processes import free_port

REPO = Path(__file__).resolve().parents[3]
sys.path.append(str(REPO / "deploy" / "devstack"))

from _config import Config  # noqa: E402  (the devstack's modules, from their folder)
from _postgres import start_postgres, stop_postgres  # noqa: E402


@dataclass(frozen=True)
class TlsPostgres:
    config: Config

    @property
    def dsn(self) -> str:
        """The superuser's DSN: sslmode=verify-full against the devstack's CA."""
        return self.config.dsn

    @property
    def port(self) -> int:
        return self.config.pg_port

    @property
    def ca_cert(self) -> Path:
        return self.config.pg_ca_cert

    def with_database(self, database: str, *, user: str = "slotflow", host: str = "127.0.0.1") -> str:
        """The DSN for ``database`` as ``user`` at ``host`` (TLS query kept)."""
        query = self.dsn.split("?", 1)[1]
        return f"postgresql://{user}@{host}:{self.port}/{database}?{query}"


@pytest.fixture(scope="session")
def tls_pg() -> Iterator[TlsPostgres]:
    state = Path(tempfile.mkdtemp(prefix="slotflow-pg-tls-"))
    # mkdtemp makes it 0700; run as root, the devstack runs PostgreSQL as the postgres OS user.
    state.chmod(0o755)
    config = Config(
        state_dir=state,
        cache_dir=REPO / ".cache",
        kafka_port=1,  # unused: only PostgreSQL starts
        controller_port=2,
        pg_port=free_port(),
        pg_tls=True,
    )
    try:
        asyncio.run(start_postgres(config))
        yield TlsPostgres(config)
    finally:
        asyncio.run(stop_postgres("fast", config))
        shutil.rmtree(state, ignore_errors=True)


@pytest.fixture
async def tls_database(tls_pg: TlsPostgres) -> AsyncIterator[str]:
    """A fresh database on the TLS cluster; its name. Dropped afterwards."""
    name = unique_name("t")
    admin = await asyncpg.connect(tls_pg.dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    yield name
    admin = await asyncpg.connect(tls_pg.dsn)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


@pytest.fixture
async def producer(kafka: KafkaSettings) -> AsyncIterator[Producer]:
    async with Producer(kafka, client_id="test-feed") as feed:
        yield feed
