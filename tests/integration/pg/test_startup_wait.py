"""A service starting while PostgreSQL is not up yet waits for it (reliability bug 2).

PostgreSQL "coming up late" is a real TCP forwarder to the real database that starts listening
only after the pool has begun trying: before it, connections are refused, as they are while the
server starts or restarts.
"""

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from urllib.parse import urlsplit, urlunsplit

import pytest

from slotflow.errors import TransientStorageError
from slotflow.pg.pool import CONNECTION_ERRORS, create_pool, wait_for_pool
from slotflow.settings import PostgresSettings


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()


@contextlib.asynccontextmanager
async def forwarder(port: int, target_host: str, target_port: int) -> AsyncIterator[None]:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(target_host, target_port)
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    server = await asyncio.start_server(serve, "127.0.0.1", port)
    try:
        yield
    finally:
        server.close()


def _via(dsn: str, port: int) -> tuple[str, str, int]:
    parts = urlsplit(dsn)
    host, target_port = parts.hostname or "127.0.0.1", parts.port or 5432
    auth = parts.netloc.rpartition("@")[0]
    netloc = f"{auth}@127.0.0.1:{port}" if auth else f"127.0.0.1:{port}"
    return urlunsplit(parts._replace(netloc=netloc)), host, target_port


async def test_a_pool_opened_before_postgres_listens_waits_for_it(pg_dsn: str) -> None:
    port = _free_port()
    dsn, host, target_port = _via(pg_dsn, port)
    settings = PostgresSettings(dsn=dsn, startup_wait_seconds=60)

    # Refused now: what a service starting before the database saw (and exited on).
    with pytest.raises(TransientStorageError):
        await create_pool(settings, min_size=1, max_size=1)

    opening = asyncio.create_task(wait_for_pool(settings, min_size=1, max_size=1))
    await asyncio.sleep(1.5)  # the database is "starting": the pool must keep trying, not fail
    assert not opening.done(), opening.exception() if opening.done() else None
    async with forwarder(port, host, target_port):
        pool = await asyncio.wait_for(opening, timeout=30)
        try:
            assert await pool.fetchval("SELECT 1") == 1
        finally:
            await pool.close()


async def test_the_wait_is_bounded(pg_dsn: str) -> None:
    dsn, _, _ = _via(pg_dsn, _free_port())
    with pytest.raises(TransientStorageError):
        await asyncio.wait_for(
            wait_for_pool(PostgresSettings(dsn=dsn, startup_wait_seconds=0.5), min_size=1, max_size=1),
            timeout=10,
        )


def test_an_operation_torn_down_by_a_shutdown_counts_as_the_database_being_away() -> None:
    # asyncpg's words when a fast shutdown closes a connection the pool is resetting; the outbox
    # relay crashed on it because it was not a connection error.
    import asyncpg

    error = asyncpg.InternalClientError("cannot switch to state 15; another operation (2) is in progress")
    assert isinstance(error, CONNECTION_ERRORS)
