"""What the read model purges, and the window it can still vouch for (docs/api.md, "Retention").

Job runs that ended (completed, dead-lettered, skipped) more than `SLOTFLOW_API_RETENTION_DAYS`
ago go, with their dues and attempts, and so do skipped slots and operators' slot repairs
(re-run, marked) whose slot is older than that. A run ends at or
after its slot, so once the purge has cut at instant H every run whose slot is at or after H is
still here: H is the horizon, recorded with the deletion itself, and the audit judges no slot
before it (it cannot tell a purged run from a missed one). Activity runs stay with their
workflows, and runs still in progress stay however old.

The horizon outlives a rebuild, and every projected batch drops what it brought from before it
(`forget_purged`), so a replay of the topics does not bring purged runs back.
The statements, each with the invariant it keeps, are in `slotflow_api.sql.retention`.
"""

import asyncio
from collections.abc import Sequence
from datetime import datetime, timedelta

from slotflow.pg.pool import Conn, Pool
from slotflow.pg.retention import Purge, purge_loop
from slotflow.pg.statements import sql
from slotflow_api.config import Settings
from slotflow_api.sql.retention import (
    FORGET_PURGED,
    LOCK_ENDED_RUNS,
    PURGE_LOCKED_RUNS,
    PURGE_SKIPPED,
    PURGE_SLOT_REPAIRS,
    RETENTION_HORIZON,
)


def purges(schema: str, *, days: float) -> list[Purge]:
    keep = timedelta(days=days)
    return [
        Purge("ended runs", sql(LOCK_ENDED_RUNS, schema), keep, delete=sql(PURGE_LOCKED_RUNS, schema)),
        Purge("skipped slots", sql(PURGE_SKIPPED, schema), keep),
        Purge("slot repairs", sql(PURGE_SLOT_REPAIRS, schema), keep),
    ]


async def forget_purged(conn: Conn, schema: str, run_ids: Sequence[str]) -> None:
    """Drop what a batch projected from before the horizon (in the batch's transaction)."""
    await conn.execute(sql(FORGET_PURGED, schema), list(run_ids))


async def horizon(pool: Pool, schema: str) -> datetime | None:
    """The oldest instant the read model vouches for, or None when nothing was ever purged."""
    value = await pool.fetchval(sql(RETENTION_HORIZON, schema))
    return value if isinstance(value, datetime) else None


async def purge_read_model(stop: asyncio.Event, pool: Pool, settings: Settings) -> None:
    api = settings.api
    await purge_loop(
        stop,
        pool,
        purges(api.db_schema, days=api.retention_days),
        interval=api.purge_interval_seconds,
        batch_size=api.purge_batch_size,
    )
