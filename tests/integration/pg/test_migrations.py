"""The migration runner applies each file once, even with replicas starting at the same moment."""

import asyncio
from pathlib import Path

import pytest

from slotflow.errors import MigrationDrift, MigrationError
from slotflow.pg.migrations import INBOX, OUTBOX, MigrationSource, apply_migrations
from slotflow.pg.pool import Pool


def write_migrations(directory: Path) -> MigrationSource:
    directory.mkdir()
    # Not idempotent on purpose: a second application would fail or double the counter.
    (directory / "0001_create.sql").write_text(
        "CREATE TABLE {schema}.applied (n integer NOT NULL);\nINSERT INTO {schema}.applied VALUES (1);\n"
    )
    (directory / "0002_again.sql").write_text("INSERT INTO {schema}.applied VALUES (2);\n")
    return MigrationSource("svc", directory)


async def test_concurrent_runners_apply_each_file_exactly_once(pg_pool: Pool, tmp_path: Path) -> None:
    source = write_migrations(tmp_path / "m")

    results = await asyncio.gather(
        *(apply_migrations(pg_pool, schema="svc", sources=[OUTBOX, INBOX, source]) for _ in range(6))
    )

    applied = [name for result in results for name in result]
    assert sorted(applied) == sorted(
        [
            "outbox/0001_outbox",
            "outbox/0002_headers_as_json",
            "outbox/0003_grouped_rows",
            "inbox/0001_inbox",
            "svc/0001_create",
            "svc/0002_again",
        ]
    )
    assert await pg_pool.fetchval("SELECT array_agg(n ORDER BY n) FROM svc.applied") == [1, 2]
    assert await apply_migrations(pg_pool, schema="svc", sources=[OUTBOX, INBOX, source]) == []


async def test_editing_an_applied_migration_is_refused(pg_pool: Pool, tmp_path: Path) -> None:
    source = write_migrations(tmp_path / "m")
    await apply_migrations(pg_pool, schema="svc", sources=[source])
    (source.directory / "0001_create.sql").write_text("CREATE TABLE {schema}.other (n int);\n")

    with pytest.raises(MigrationDrift, match="svc/0001_create"):
        await apply_migrations(pg_pool, schema="svc", sources=[source])


async def test_misnamed_file_and_bad_schema_are_clear_errors(pg_pool: Pool, tmp_path: Path) -> None:
    directory = tmp_path / "bad"
    directory.mkdir()
    (directory / "create-things.sql").write_text("SELECT 1;")
    with pytest.raises(MigrationError, match=r"NNNN_description\.sql"):
        await apply_migrations(pg_pool, schema="svc", sources=[MigrationSource("bad", directory)])
    with pytest.raises(MigrationError, match="invalid schema name"):
        await apply_migrations(pg_pool, schema="svc; DROP TABLE x", sources=[])


async def test_failed_migration_leaves_nothing_half_applied(pg_pool: Pool, tmp_path: Path) -> None:
    directory = tmp_path / "m"
    directory.mkdir()
    (directory / "0001_ok.sql").write_text("CREATE TABLE {schema}.t (n int);")
    (directory / "0002_broken.sql").write_text("INSERT INTO {schema}.missing VALUES (1);")
    with pytest.raises(Exception, match="missing"):
        await apply_migrations(pg_pool, schema="svc", sources=[MigrationSource("svc", directory)])
    # One transaction: the first file rolled back with the second.
    assert await pg_pool.fetchval("SELECT to_regclass('svc.t')") is None
