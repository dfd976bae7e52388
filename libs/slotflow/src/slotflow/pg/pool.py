"""asyncpg pool creation and the `Pool`/`Conn` aliases every SQL function takes.

Functions that take `conn: Conn` run inside the caller's transaction and never open one; functions
that take `pool: Pool` own their transaction.
"""

from typing import Any, TypeAlias

import asyncpg

from slotflow.errors import TransientStorageError
from slotflow.settings import PostgresSettings

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
)


async def create_pool(
    settings: PostgresSettings, *, min_size: int | None = None, max_size: int | None = None, **kwargs: Any
) -> Pool:
    """Open a pool against ``settings.dsn``.

    Raises:
        TransientStorageError: PostgreSQL did not answer.
    """
    try:
        pool = await asyncpg.create_pool(
            settings.dsn,
            min_size=settings.pool_min_size if min_size is None else min_size,
            max_size=settings.pool_max_size if max_size is None else max_size,
            **kwargs,
        )
    except CONNECTION_ERRORS as err:
        raise TransientStorageError(f"cannot connect to PostgreSQL: {err}") from err
    return pool
