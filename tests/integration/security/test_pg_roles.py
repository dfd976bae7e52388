"""One PostgreSQL role per service (`slotflow db bootstrap-roles`): each service migrates its own
schema at start under its own role and owns what it creates; the claimer's role can neither write
nor read the ticker's schema, nor make a schema; the read grants (orchestrator → claimer's
runs and payloads, api → stats) read and do nothing else. On the TLS cluster, so all of it over verify-full."""

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from slotflow.cli.__main__ import main as slotflow_cli
from slotflow.kafka.producer import Producer
from slotflow.pg.payloads import get_payload, put_payload
from slotflow.pg.pool import Pool, create_pool
from slotflow.pg.roles import SERVICE_ROLES
from slotflow.pg.statements import compose, quote_ident, sql
from slotflow.service import migrate
from slotflow.settings import KafkaSettings, PostgresSettings
from slotflow.testing import assert_eventually
from slotflow.testing.processes import ServiceProcess, free_port, stack_env
from slotflow_api.projector import migrate as api_migrate
from slotflow_claimer.app import migrate as claimer_migrate
from slotflow_dlq.app import MIGRATIONS as DLQ_MIGRATIONS
from slotflow_orchestrator.app import apply_migrations as orchestrator_migrate
from slotflow_orchestrator.sql import CLAIMER_RUNS, LOCK_INPUTS
from slotflow_stats.sink import create_schema as stats_create_schema
from slotflow_ticker.app import migrate as ticker_migrate
from slotflow_ticker.config import TickerSettings
from tests.integration.security.conftest import REPO, TlsPostgres

PREFIX = "slotflow_"
OWNED = """
SELECT c.relname, pg_get_userbyid(c.relowner) AS owner
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'S', 'v', 'm')
"""


@pytest.fixture
async def bootstrapped(tls_pg: TlsPostgres, tls_database: str) -> str:
    """The fresh database with every service's role and schema; run twice (idempotent)."""
    admin = tls_pg.with_database(tls_database)
    for _ in range(2):
        code = await asyncio.to_thread(
            slotflow_cli, ["db", "bootstrap-roles", "--dsn", admin, "--prefix", PREFIX]
        )
        assert code == 0
    return tls_database


@pytest.fixture
async def pools(tls_pg: TlsPostgres, bootstrapped: str) -> AsyncIterator[dict[str, Pool]]:
    """A pool per service, each connected as that service's role."""
    opened: dict[str, Pool] = {}
    try:
        for entry in SERVICE_ROLES:
            dsn = tls_pg.with_database(bootstrapped, user=PREFIX + entry.service)
            opened[entry.service] = await create_pool(PostgresSettings(dsn=dsn), min_size=1, max_size=2)
        yield opened
    finally:
        for pool in opened.values():
            await pool.close()


async def _migrate_each_as_itself(pools: dict[str, Pool]) -> None:
    await ticker_migrate(pools["ticker"], TickerSettings())
    await claimer_migrate(pools["claimer"])
    await orchestrator_migrate(pools["orchestrator"])
    await migrate(pools["dlq"], schema="dlq", source=DLQ_MIGRATIONS)
    await api_migrate(pools["api"], "api")
    async with pools["stats"].acquire() as conn:
        await stats_create_schema(conn, "stats")


async def test_each_service_migrates_and_owns_only_its_schema(pools: dict[str, Pool]) -> None:
    await _migrate_each_as_itself(pools)
    for entry in SERVICE_ROLES:
        rows = await pools[entry.service].fetch(OWNED, entry.schema)
        assert rows, f"nothing in schema {entry.schema}"
        assert {r["owner"] for r in rows} == {PREFIX + entry.service}, (entry.schema, rows)
        super_or_creator = await pools[entry.service].fetchrow(
            "SELECT rolsuper, rolcreatedb, rolcreaterole, rolbypassrls FROM pg_roles WHERE rolname = current_user"
        )
        assert super_or_creator is not None
        assert not any(super_or_creator.values())


async def test_the_claimer_role_cannot_touch_the_ticker_schema(pools: dict[str, Pool]) -> None:
    await _migrate_each_as_itself(pools)
    claimer = pools["claimer"]
    refused = [
        "INSERT INTO ticker.schedules (schedule_id, definition, covered_until) VALUES ('x', '{}', now())",
        "UPDATE ticker.schedules SET paused = true",
        "DELETE FROM ticker.timers",
        "SELECT count(*) FROM ticker.schedules",
        "SELECT count(*) FROM ticker.slot_reruns",
        "CREATE TABLE ticker.intruder (id integer)",
        "CREATE SCHEMA intruder",
        "CREATE TABLE public.intruder (id integer)",
        "DROP TABLE ticker.schedules",
    ]
    for statement in refused:
        with pytest.raises(asyncpg.InsufficientPrivilegeError) as denied:
            await claimer.execute(statement)
        assert "permission denied" in str(denied.value) or "must be owner" in str(denied.value), statement
    # The one question it may ask the ticker: did it issue this re-run (answered, nothing read).
    assert await claimer.fetchval("SELECT ticker.rerun_issued('x', now(), 1, false)") is False
    # Its own schema it writes freely.
    await claimer.execute("CREATE TABLE claimer.own_probe (id integer)")


async def test_read_grants_read_and_nothing_more(pools: dict[str, Pool]) -> None:
    await _migrate_each_as_itself(pools)
    async with pools["claimer"].acquire() as conn:
        ref = await put_payload(conn, schema="claimer", data=b'{"result": "large"}')
    async with pools["orchestrator"].acquire() as conn:
        assert await get_payload(conn, schema="claimer", ref=ref) == b'{"result": "large"}'
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await put_payload(conn, schema="claimer", data=b"forged")
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute("DELETE FROM claimer.payloads")
        # The claimer's run rows back every activity outcome: the decision's own statement reads
        # them under the orchestrator's role, which cannot change one.
        decision_inputs = compose(LOCK_INPUTS, claimer=quote_ident("claimer"))
        async with conn.transaction():
            assert await conn.fetch(sql(decision_inputs, "orchestrator"), ["wf"]) == []
        assert await conn.fetch(sql(CLAIMER_RUNS, "claimer"), ["wf/2"]) == []
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute("UPDATE claimer.runs SET state = 'completed'")
    api = pools["api"]
    assert await api.fetchval("SELECT count(*) FROM stats.windows") == 0
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await api.execute("DELETE FROM stats.windows")
    # The grants go one way: the claimer reads nothing of the orchestrator's, stats nothing of the api's.
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await pools["claimer"].fetchval("SELECT count(*) FROM orchestrator.payloads")
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await pools["stats"].fetchval("SELECT count(*) FROM api.projector_state")


async def test_a_ticker_process_runs_under_its_own_role(
    tls_pg: TlsPostgres, bootstrapped: str, kafka: KafkaSettings, producer: Producer, tmp_path: Path
) -> None:
    dsn = tls_pg.with_database(bootstrapped, user=PREFIX + "ticker")
    port = free_port()
    env = stack_env(kafka, dsn, "SLOTFLOW_TICKER_", ticker_id="role-ticker", metrics_port=port)
    ticker = ServiceProcess(
        "slotflow_ticker", "ticker", env=env, log_dir=tmp_path, cwd=REPO, metrics_port=port
    )
    try:
        await assert_eventually(ticker.ready, timeout=60, message="the ticker serves metrics")
        admin = await asyncpg.connect(tls_pg.with_database(bootstrapped))
        try:
            users = await admin.fetch(
                "SELECT DISTINCT usename FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
                bootstrapped,
            )
            tables = await admin.fetch(OWNED, "ticker")
        finally:
            await admin.close()
    finally:
        ticker.stop()
    assert [r["usename"] for r in users] == [PREFIX + "ticker"]
    # It migrated its schema at start, as itself.
    assert {r["relname"] for r in tables} >= {"schedules", "timers", "schema_migrations", "outbox"}
    assert {r["owner"] for r in tables} == {PREFIX + "ticker"}
