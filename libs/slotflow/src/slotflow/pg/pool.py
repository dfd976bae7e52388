"""asyncpg pool creation and the `Pool`/`Conn` aliases every SQL function takes.

Functions that take `conn: Conn` run inside the caller's transaction and never open one; functions
that take `pool: Pool` own their transaction.
"""

import asyncio
import logging
import random
import ssl
from typing import Any, TypeAlias

import asyncpg

from slotflow.errors import ConfigurationError, TransientStorageError
from slotflow.settings import PostgresSettings

log = logging.getLogger(__name__)

Pool: TypeAlias = "asyncpg.Pool[asyncpg.Record]"
Conn: TypeAlias = "asyncpg.Connection[asyncpg.Record] | asyncpg.pool.PoolConnectionProxy[asyncpg.Record]"

#: Errors that mean "the database was not there", as opposed to "the statement was wrong".
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    asyncpg.CannotConnectNowError,
    asyncpg.ConnectionDoesNotExistError,
    asyncpg.InterfaceError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.TooManyConnectionsError,
    # A connection torn down under an operation in flight (a fast shutdown while the pool resets
    # a released connection: "cannot switch to state 15; another operation (2) is in progress").
    # It says nothing about the statement; the outbox relay crashed on it (reliability bug 2).
    asyncpg.InternalClientError,
)


class PostgresCertificateRefused(ConfigurationError):
    """The server's TLS certificate did not verify against sslrootcert, or not for the DSN's host."""


async def create_pool(
    settings: PostgresSettings, *, min_size: int | None = None, max_size: int | None = None, **kwargs: Any
) -> Pool:
    """Open a pool against ``settings.dsn``.

    Raises:
        PostgresCertificateRefused: the server's certificate failed verification (sslmode
            verify-ca or verify-full): a wrong CA or host name does not heal by waiting.
        TransientStorageError: PostgreSQL did not answer.
    """
    try:
        pool = await asyncpg.create_pool(
            settings.dsn,
            min_size=settings.pool_min_size if min_size is None else min_size,
            max_size=settings.pool_max_size if max_size is None else max_size,
            **{**settings.connect_kwargs(), **kwargs},
        )
    except ssl.SSLCertVerificationError as err:
        raise PostgresCertificateRefused(
            f"PostgreSQL at {settings.display_dsn} presented a certificate that failed verification: "
            f"certificate verify failed: {err.verify_message or err}; check sslrootcert (the CA that signed the server's "
            "certificate) and that the DSN's host is a name the certificate holds"
        ) from err
    except CONNECTION_ERRORS as err:
        # The DSN is shown masked: this message reaches logs and crash reports.
        raise TransientStorageError(f"cannot connect to PostgreSQL at {settings.display_dsn}: {err}") from err
    return pool


async def wait_for_pool(
    settings: PostgresSettings,
    *,
    min_size: int | None = None,
    max_size: int | None = None,
    rng: random.Random | None = None,
    **kwargs: Any,
) -> Pool:
    """`create_pool` for a service starting up: PostgreSQL still starting or restarting is waited
    for, with full-jitter back-off (0.1 s doubling, capped at 5 s), for up to
    ``settings.startup_wait_seconds``.

    Why: a service that exits because the database came up a second after it did is a replica
    lost wherever nothing restarts it (reliability bug 2: tickers and the api did).

    Raises:
        TransientStorageError: PostgreSQL did not answer within the wait.
    """
    draw = (rng or random.Random()).random  # noqa: S311 - jitter, not secrets
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settings.startup_wait_seconds
    attempt = 0
    while True:
        try:
            return await create_pool(settings, min_size=min_size, max_size=max_size, **kwargs)
        except TransientStorageError as err:
            left = deadline - loop.time()
            if left <= 0:
                raise
            delay = min(left, draw() * min(5.0, 0.1 * 2 ** min(attempt, 10)))
            attempt += 1
            log.warning("PostgreSQL not reachable yet (try %d), retrying in %.2f s: %s", attempt, delay, err)
            await asyncio.sleep(delay)
