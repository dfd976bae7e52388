"""Retention: rows a service no longer needs are deleted in small batches, on a loop.

Each owning service names its purges: a statement that deletes at most `$2` rows older than
`$1` seconds by the database clock (never the caller's: replicas' clocks differ) and returns one
row per deleted row. A purge runs its statement until a batch comes back short, so one pass
empties the backlog while no transaction holds more than a batch's locks; each statement selects
with `FOR UPDATE SKIP LOCKED` so replicas purging at once split the work instead of queueing.

Rows that other transactions hang dependants on (a read-model run's dues and attempts) are purged
in two statements of one transaction: the first locks a batch and returns its keys, the second
deletes them with their dependants. One statement cannot: under READ COMMITTED its snapshot is
taken before it locks, so a dependant committed between the two (by a writer that locked the
parent, added the dependant and committed in that gap) is invisible to the statement's own
deletes and outlives its parent. Writers lock the parent before adding to it, so once the batch is
locked the second statement's fresh snapshot sees every dependant there will be.

A retention of 0 keeps everything: no purge runs.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta

import asyncpg

from slotflow.core.stopping import sleep_or_stop
from slotflow.pg.pool import CONNECTION_ERRORS, Pool

log = logging.getLogger(__name__)

_ERRORS: tuple[type[BaseException], ...] = (*CONNECTION_ERRORS, asyncpg.PostgresError)


@dataclass(frozen=True)
class Purge:
    """One kind of row to purge: ``statement`` takes ($1 age in seconds, $2 batch size).

    With ``delete`` set, ``statement`` only locks the batch and returns its keys (first column),
    and ``delete`` takes ($1 those keys, $2 the age in seconds) in the same transaction (see the
    module docstring for why). Each returns one row per row it took.
    """

    name: str
    statement: str
    keep: timedelta
    delete: str | None = None


async def purge_once(pool: Pool, purge: Purge, *, batch_size: int, max_batches: int = 1_000) -> int:
    """Run ``purge`` until a batch deletes fewer than ``batch_size`` rows; returns how many went."""
    if purge.keep <= timedelta(0):
        return 0
    total = 0
    for _ in range(max_batches):
        taken = await _purge_batch(pool, purge, batch_size)
        total += taken
        if taken < batch_size:
            break
    return total


async def _purge_batch(pool: Pool, purge: Purge, batch_size: int) -> int:
    seconds = purge.keep.total_seconds()
    if purge.delete is None:
        return len(await pool.fetch(purge.statement, seconds, batch_size))
    async with pool.acquire() as conn, conn.transaction():
        locked = await conn.fetch(purge.statement, seconds, batch_size)
        if locked:
            await conn.fetch(purge.delete, [row[0] for row in locked], seconds)
    return len(locked)


async def purge_loop(
    stop: asyncio.Event,
    pool: Pool,
    purges: Sequence[Purge],
    *,
    interval: float,
    batch_size: int,
    on_purged: Callable[[str, int], Awaitable[None] | None] | None = None,
) -> None:
    """Every ``interval`` seconds run each purge; an outage pauses a pass, never the service."""
    while not stop.is_set():
        for purge in purges:
            try:
                deleted = await purge_once(pool, purge, batch_size=batch_size)
            except _ERRORS as err:
                log.warning("purge of %s paused: %s", purge.name, err)
                continue
            if deleted:
                log.info("purged %d %s older than %s", deleted, purge.name, purge.keep)
            if on_purged is not None:
                result = on_purged(purge.name, deleted)
                if result is not None:
                    await result
        await sleep_or_stop(stop, interval)
