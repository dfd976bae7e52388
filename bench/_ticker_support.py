"""Shared set-up for the ticker benchmarks: fresh databases, bulk-seeded schedules, a fingerprint.

Seeding goes straight into the ticker's table with one INSERT ... SELECT generate_series (creating a
million schedules through commands would measure the command path, not what the bench is about).
The rows are exactly what `CreateSchedule` would have stored: the definition JSON and the grid
position `start_position` computes.
"""

import os
import platform
import statistics
import subprocess
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path

import asyncpg

from slotflow.contracts import ScheduleDefinition
from slotflow.kafka.admin import ensure_topics
from slotflow.pg.pool import Pool, create_pool
from slotflow.settings import KafkaSettings, PostgresSettings
from slotflow_ticker.app import migrate
from slotflow_ticker.config import TickerSettings

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"


def with_database(dsn: str, database: str) -> str:
    base, _, tail = dsn.rpartition("/")
    query = "?" + tail.split("?", 1)[1] if "?" in tail else ""
    return f"{base}/{database}{query}"


@asynccontextmanager
async def fresh_database(pool_size: int = 8) -> AsyncIterator[tuple[str, Pool]]:
    """A new database with the ticker schema migrated; dropped afterwards."""
    admin_dsn = PostgresSettings().dsn
    name = f"bench_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(admin_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    dsn = with_database(admin_dsn, name)
    pool = await create_pool(PostgresSettings(dsn=dsn), min_size=2, max_size=pool_size)
    try:
        await migrate(pool, TickerSettings(metrics_port=0))
        yield dsn, pool
    finally:
        await pool.close()
        admin = await asyncpg.connect(admin_dsn)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


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
        f"""
        INSERT INTO ticker.schedules (schedule_id, definition, next_slot, next_fire_at, covered_until)
        SELECT '{prefix}' || i, $1::jsonb, {first_fire}, {first_fire}, {covered_sql}
          FROM generate_series(1, $2) AS i
        """,
        definition.model_dump_json(),
        count,
    )
    await pool.execute("VACUUM ANALYZE ticker.schedules")


@asynccontextmanager
async def bench_topics() -> AsyncIterator[KafkaSettings]:
    """Kafka settings in a fresh topic namespace with every topic created; deleted afterwards."""
    from aiokafka.admin import AIOKafkaAdminClient

    settings = KafkaSettings().model_copy(update={"topic_namespace": f"bench_{uuid.uuid4().hex[:10]}"})
    await ensure_topics(settings.bootstrap, settings.topics())
    try:
        yield settings
    finally:
        admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap)
        await admin.start()
        try:
            await admin.delete_topics([spec.name for spec in settings.topics()])
        finally:
            await admin.close()


async def server_version() -> str:
    """The PostgreSQL server's version string (the devstack's)."""
    conn = await asyncpg.connect(PostgresSettings().dsn)
    try:
        return str(await conn.fetchval("SHOW server_version"))
    finally:
        await conn.close()


def fingerprint(server_version: str | None = None) -> dict[str, object]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()
    kernel = subprocess.run(["uname", "-r"], capture_output=True, text=True, check=False).stdout.strip()
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "kernel": kernel,
        "postgres": server_version,
        "load_average_at_start": [round(x, 2) for x in load],
        "when": datetime.now().astimezone().isoformat(timespec="seconds"),
    }


def _process_cpu(pid: int) -> float:
    """User + system CPU seconds of a local process (from /proc); 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def backend_cpu(pool: Pool) -> dict[int, float]:
    """CPU seconds so far of every PostgreSQL backend serving this pool's database, by pid.

    The devstack's server runs on this host, so its backends are readable in /proc. Take it before
    and after a loop: the difference is the database's own CPU for that loop.
    """
    pids = await pool.fetch("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
    return {r["pid"]: _process_cpu(r["pid"]) for r in pids}


def cpu_spent(before: dict[int, float], after: dict[int, float]) -> float:
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def median(values: list[float]) -> float:
    return statistics.median(values)
