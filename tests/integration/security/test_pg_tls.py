"""PostgreSQL over verified TLS (sslmode=verify-full, the devstack's SLOTFLOW_PG_TLS=1): a real
ticker process and slotflow.pg's pool work over it, every connection encrypted; a server whose
certificate does not chain to the configured CA, or does not name the host connected to, is
refused at once with a message that says which, and a service given one exits saying so."""

import asyncio
import contextlib
import re
import sys
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest

from slotflow.contracts import CreateSchedule, OnceSpec, ScheduleDefinition
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import PostgresCertificateRefused, create_pool, wait_for_pool
from slotflow.service import migrate
from slotflow.settings import KafkaSettings, PostgresSettings
from slotflow.testing import assert_eventually
from slotflow.testing.processes import ServiceProcess, free_port, stack_env
from slotflow_ticker.app import MIGRATIONS as TICKER_MIGRATIONS
from tests.integration.security.conftest import REPO, TlsPostgres
from tests.integration.ticker.support import send

sys.path.append(str(REPO / "deploy" / "devstack"))
from _tls import make_ca


def _with_root(dsn: str, ca: Path) -> str:
    """``dsn`` trusting ``ca`` instead of the devstack's CA."""
    base, _, _query = dsn.partition("?")
    return f"{base}?sslmode=verify-full&sslrootcert={ca}"


@contextlib.asynccontextmanager
async def forwarder(listen_host: str, target_port: int) -> AsyncIterator[int]:
    """Bytes from ``listen_host``:<port> to 127.0.0.1:``target_port`` and back: the same server,
    reached under another address, so its certificate does not name the host the client asked for."""

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection("127.0.0.1", target_port)
        await asyncio.gather(pipe(client_r, server_w), pipe(server_r, client_w))

    server = await asyncio.start_server(handle, listen_host, 0)
    port = int(server.sockets[0].getsockname()[1])
    try:
        yield port
    finally:
        server.close()
        await server.wait_closed()


async def test_the_pool_migrates_and_commits_over_verify_full(tls_pg: TlsPostgres, tls_database: str) -> None:
    settings = PostgresSettings(dsn=tls_pg.with_database(tls_database))
    assert "sslmode=verify-full" in settings.dsn
    assert f"sslrootcert={tls_pg.ca_cert}" in settings.dsn
    pool = await create_pool(settings, min_size=1, max_size=2)
    try:
        applied = await migrate(pool, schema="ticker", source=TICKER_MIGRATIONS)
        assert applied, "nothing migrated"
        async with pool.acquire() as conn, conn.transaction():
            await conn.execute("CREATE TABLE ticker.tls_probe (id integer PRIMARY KEY)")
            await conn.execute("INSERT INTO ticker.tls_probe VALUES (1)")
            row = await conn.fetchrow("SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        assert row is not None
        ssl, version = row["ssl"], row["version"]
        assert ssl is True
        assert version in ("TLSv1.2", "TLSv1.3")
        assert await pool.fetchval("SELECT count(*) FROM ticker.tls_probe") == 1
    finally:
        await pool.close()


async def test_a_ticker_process_runs_over_verify_full(
    tls_pg: TlsPostgres, tls_database: str, kafka: KafkaSettings, producer: Producer, tmp_path: Path
) -> None:
    dsn = tls_pg.with_database(tls_database)
    port = free_port()
    env = stack_env(kafka, dsn, "SLOTFLOW_TICKER_", ticker_id="tls-ticker", metrics_port=port)
    ticker = ServiceProcess(
        "slotflow_ticker", "ticker", env=env, log_dir=tmp_path, cwd=REPO, metrics_port=port
    )
    try:
        await assert_eventually(ticker.ready, timeout=60, message="the ticker serves metrics")
        at = (datetime.now(UTC) + timedelta(hours=1)).replace(microsecond=0)
        definition = ScheduleDefinition(spec=OnceSpec(at=at), handler="tls.noop")
        await send(producer, kafka, CreateSchedule(schedule_id="over-tls", definition=definition))
        conn = await asyncpg.connect(dsn)
        try:

            async def stored() -> bool:
                found = await conn.fetchval(
                    "SELECT count(*) FROM ticker.schedules WHERE schedule_id = 'over-tls'"
                )
                return bool(found)

            await assert_eventually(stored, timeout=30, message="the ticker stored the schedule")
            # Every connection the ticker holds to its database is encrypted.
            rows = await conn.fetch(
                "SELECT s.ssl FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) "
                "WHERE a.datname = $1 AND a.pid <> pg_backend_pid() AND a.backend_type = 'client backend'",
                tls_database,
            )
        finally:
            await conn.close()
    finally:
        ticker.stop()
    assert rows, "the ticker holds no connection"
    assert all(r["ssl"] for r in rows), rows


async def test_a_certificate_from_another_ca_is_refused_at_once(
    tls_pg: TlsPostgres, tls_database: str, tmp_path: Path
) -> None:
    rogue, _ = make_ca(tmp_path / "rogue", "not the devstack CA")
    settings = PostgresSettings(
        dsn=_with_root(tls_pg.with_database(tls_database), rogue), startup_wait_seconds=300
    )
    started = time.monotonic()
    with pytest.raises(PostgresCertificateRefused) as refused:
        await wait_for_pool(settings, min_size=1, max_size=1)
    # Not retried for the 300 s start-up wait: a wrong CA does not heal.
    assert time.monotonic() - started < 10
    message = str(refused.value)
    assert "certificate verify failed" in message
    assert "unable to get local issuer certificate" in message
    assert "sslrootcert" in message


async def test_a_host_the_certificate_does_not_name_is_refused(
    tls_pg: TlsPostgres, tls_database: str
) -> None:
    # 127.0.0.2 is loopback too, but the server's certificate names only 127.0.0.1 and localhost.
    async with forwarder("127.0.0.2", tls_pg.port) as port:
        verify_full = tls_pg.with_database(tls_database, host="127.0.0.2").replace(
            f":{tls_pg.port}/", f":{port}/"
        )
        with pytest.raises(
            PostgresCertificateRefused,
            match=re.escape("IP address mismatch, certificate is not valid for '127.0.0.2'"),
        ):
            await create_pool(PostgresSettings(dsn=verify_full), min_size=1, max_size=1)
        # The same path with the chain checked but not the name connects: the refusal was the name's.
        verify_ca = verify_full.replace("sslmode=verify-full", "sslmode=verify-ca")
        pool = await create_pool(PostgresSettings(dsn=verify_ca), min_size=1, max_size=1)
        try:
            assert await pool.fetchval("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()") is True
        finally:
            await pool.close()


async def test_a_ticker_given_the_wrong_ca_exits_saying_why(
    tls_pg: TlsPostgres, tls_database: str, kafka: KafkaSettings, tmp_path: Path
) -> None:
    rogue, _ = make_ca(tmp_path / "rogue", "not the devstack CA")
    env = stack_env(
        kafka, _with_root(tls_pg.with_database(tls_database), rogue), "SLOTFLOW_TICKER_", metrics_port=0
    )
    ticker = ServiceProcess("slotflow_ticker", "ticker", env=env, log_dir=tmp_path, cwd=REPO)
    try:
        code = await asyncio.to_thread(ticker.proc.wait, 60)
    finally:
        ticker.close()
    log = ticker.log_path.read_text()
    assert code != 0
    assert "PostgresCertificateRefused" in log, log[-3000:]
    assert "failed verification" in log
