"""Infrastructure retries inside the claimer: storage that is briefly away is waited for.

Only failures that say nothing about the statement itself are retried: the database unreachable,
a deadlock or serialisation failure (PostgreSQL rolled the transaction back; running it again is
correct). Every transaction retried here is all-or-nothing, so a retry never doubles a write.
"""

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TypeVar

import asyncpg

from slotflow.core.retry import full_jitter_delay
from slotflow.core.stopping import raise_if_cancelled
from slotflow.errors import TransientStorageError
from slotflow.pg.pool import CONNECTION_ERRORS

log = logging.getLogger(__name__)

T = TypeVar("T")

STORAGE_RETRYABLE: tuple[type[BaseException], ...] = (
    *CONNECTION_ERRORS,
    asyncpg.TransactionRollbackError,
    TransientStorageError,
    TimeoutError,
)

_rng = random.Random()  # noqa: S311 - jitter, not secrets


async def storage_pause(attempt: int) -> None:
    """A full-jitter pause before retry ``attempt`` (50 ms doubling, capped at 2 s).

    Raises:
        asyncio.CancelledError: the task was cancelled and the storage error being retried is what
            the driver made of it (`raise_if_cancelled`): the retry must not swallow it.
    """
    raise_if_cancelled()
    delay = full_jitter_delay(
        attempt=min(attempt, 10),
        base=timedelta(milliseconds=50),
        cap=timedelta(seconds=2),
        draw=_rng.random(),
    )
    await asyncio.sleep(delay.total_seconds())


async def with_storage_retry(op: Callable[[], Awaitable[T]], *, what: str, attempts: int | None = None) -> T:
    """Run ``op`` until it succeeds, retrying storage failures (at most ``attempts`` times if given)."""
    attempt = 0
    while True:
        try:
            return await op()
        except STORAGE_RETRYABLE as err:
            attempt += 1
            if attempts is not None and attempt >= attempts:
                raise
            log.warning("claimer: %s failed (try %d), retrying: %r", what, attempt, err)
            await storage_pause(attempt)


async def retry_unless_stopped(op: Callable[[], Awaitable[T]], *, what: str, stop: asyncio.Event) -> T | None:
    """Like `with_storage_retry`, but gives up (None) once ``stop`` is set after a failure."""
    attempt = 0
    while True:
        try:
            return await op()
        except STORAGE_RETRYABLE as err:
            attempt += 1
            if stop.is_set():
                log.warning("claimer: %s abandoned at shutdown: %r", what, err)
                return None
            log.warning("claimer: %s failed (try %d), retrying: %r", what, attempt, err)
            await storage_pause(attempt)
