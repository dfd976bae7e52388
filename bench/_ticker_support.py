"""Shared set-up for the ticker benchmarks: migrated databases, bulk-seeded schedules, backend CPU.

Seeding goes straight into the ticker's table with one INSERT ... SELECT generate_series (creating a
million schedules through commands would measure the command path, not what the bench is about).
The rows are exactly what `CreateSchedule` would have stored: the definition JSON and the grid
position `start_position` computes.
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
from _common import process_cpu_seconds, scratch_database

from slotflow.contracts import ScheduleDefinition
from slotflow.pg.pool import Pool, create_pool
from slotflow.pg.statements import compose
from slotflow.settings import PostgresSettings
from slotflow_ticker.app import migrate
from slotflow_ticker.config import TickerSettings
from slotflow_ticker.sql import CRON_RULES


@asynccontextmanager
async def fresh_database(pool_size: int = 8) -> AsyncIterator[tuple[str, Pool]]:
    """A new database with the ticker schema migrated; dropped afterwards."""
    async with scratch_database() as dsn:
        pool = await create_pool(PostgresSettings(dsn=dsn), min_size=2, max_size=pool_size)
        try:
            await migrate(pool, TickerSettings(metrics_port=0))
            yield dsn, pool
        finally:
            await pool.close()


# `{first_fire}` and `{covered}` are SQL expressions of `i` given by the bench, not values. The rows
# are written under this version's cron rules, as the ticker writes them (a row under older rules
# waits for the review before any claim takes it).
_SEED = """
INSERT INTO ticker.schedules (schedule_id, definition, next_slot, next_fire_at, covered_until, cron_rules)
SELECT $3::text || i, $1::jsonb, {first_fire}, {first_fire}, {covered}, {cron_rules}
  FROM generate_series(1, $2) AS i
"""


async def seed(
    pool: Pool,
    *,
    count: int,
    definition: ScheduleDefinition,
    first_fire: str,
    prefix: str = "s",
    covered: str | None = None,
) -> None:
    """Insert ``count`` schedules; ``first_fire`` is a SQL expression of `i` (1..count) for next_slot.

    Jitter-free definitions only: next_fire_at = next_slot.
    """
    if definition.jitter:
        raise ValueError("seeded schedules have no jitter")
    covered_sql = covered or f"({first_fire}) - interval '1 microsecond'"
    await pool.execute(
        compose(_SEED, first_fire=first_fire, covered=covered_sql, cron_rules=str(CRON_RULES)),
        definition.model_dump_json(),
        count,
        prefix,
    )
    await pool.execute("VACUUM ANALYZE ticker.schedules")


async def server_version() -> str:
    """The PostgreSQL server's version string (the devstack's)."""
    conn = await asyncpg.connect(PostgresSettings().dsn)
    try:
        return str(await conn.fetchval("SHOW server_version"))
    finally:
        await conn.close()


async def backend_cpu(pool: Pool) -> dict[int, float]:
    """CPU seconds so far of every PostgreSQL backend serving this pool's database, by pid.

    The devstack's server runs on this host, so its backends are readable in /proc. Take it before
    and after a loop: the difference is the database's own CPU for that loop.
    """
    pids = await pool.fetch("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
    return {r["pid"]: process_cpu_seconds(r["pid"]) for r in pids}


def cpu_spent(before: dict[int, float], after: dict[int, float]) -> float:
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())
