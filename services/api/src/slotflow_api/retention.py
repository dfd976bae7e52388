"""What the read model purges, and the window it can still vouch for (docs/api.md, "Retention").

Job runs that ended (completed, dead-lettered, skipped) more than `SLOTFLOW_API_RETENTION_DAYS`
ago go, with their dues and attempts, and so do skipped slots older than that. A run ends at or
after its slot, so once the purge has cut at instant H every run whose slot is at or after H is
still here: H is the horizon, recorded with the deletion itself, and the audit judges no slot
before it (it cannot tell a purged run from a missed one). Activity runs stay with their
workflows, and runs still in progress stay however old.
"""

import asyncio
from datetime import datetime, timedelta

from slotflow.pg.pool import Pool
from slotflow.pg.retention import Purge, purge_loop
from slotflow.pg.statements import sql
from slotflow_api.config import Settings

# Ended job runs with COALESCE(finished_at, slot) before the cut (runs_ended), at most $2; their
# dues and attempts go in the same statement, and the horizon rises to the cut when any run went.
# now() is the transaction's instant, so every reference names the same cut.
PURGE_RUNS = """
WITH doomed AS (
    SELECT run_id FROM {schema}.runs
     WHERE state IN ('completed', 'dead_lettered', 'skipped') AND workflow_id IS NULL
       AND COALESCE(finished_at, slot) < now() - make_interval(secs => $1)
     ORDER BY COALESCE(finished_at, slot)
     LIMIT $2
       FOR UPDATE SKIP LOCKED
), dues AS (
    DELETE FROM {schema}.run_dues WHERE run_id IN (SELECT run_id FROM doomed)
), tries AS (
    DELETE FROM {schema}.run_attempts WHERE run_id IN (SELECT run_id FROM doomed)
), gone AS (
    DELETE FROM {schema}.runs WHERE run_id IN (SELECT run_id FROM doomed) RETURNING run_id
), raised AS (
    INSERT INTO {schema}.retention AS t (only_row, horizon)
    SELECT true, now() - make_interval(secs => $1) WHERE EXISTS (SELECT 1 FROM gone)
    ON CONFLICT (only_row) DO UPDATE SET horizon = GREATEST(t.horizon, EXCLUDED.horizon)
)
SELECT run_id FROM gone
"""

# Skipped slots before the cut (skipped_slots_slot); the horizon rises as for runs.
PURGE_SKIPPED = """
WITH doomed AS (
    SELECT schedule_id, slot FROM {schema}.skipped_slots
     WHERE slot < now() - make_interval(secs => $1)
     ORDER BY slot
     LIMIT $2
       FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM {schema}.skipped_slots s USING doomed d
     WHERE s.schedule_id = d.schedule_id AND s.slot = d.slot RETURNING s.slot
), raised AS (
    INSERT INTO {schema}.retention AS t (only_row, horizon)
    SELECT true, now() - make_interval(secs => $1) WHERE EXISTS (SELECT 1 FROM gone)
    ON CONFLICT (only_row) DO UPDATE SET horizon = GREATEST(t.horizon, EXCLUDED.horizon)
)
SELECT slot FROM gone
"""

HORIZON = "SELECT horizon FROM {schema}.retention"


def purges(schema: str, *, days: float) -> list[Purge]:
    keep = timedelta(days=days)
    return [
        Purge("ended runs", sql(PURGE_RUNS, schema), keep),
        Purge("skipped slots", sql(PURGE_SKIPPED, schema), keep),
    ]


async def horizon(pool: Pool, schema: str) -> datetime | None:
    """The oldest instant the read model vouches for, or None when nothing was ever purged."""
    value = await pool.fetchval(sql(HORIZON, schema))
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
