"""A small migration runner: each service owns one schema and applies numbered `.sql` files once.

Files are named `NNNN_description.sql` and are append-only: an applied file whose checksum changes
raises `MigrationDrift`. Two replicas starting at once serialise on a transaction-scoped advisory
lock keyed by the schema name, so each file runs exactly once.

Migrations come from named sources: a service's own folder, plus shared components from the
library (the outbox and the inbox, which every service's schema carries; the payload table, which
the workflow orchestrator's does). Versions count per source.
"""

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from slotflow.errors import MigrationDrift, MigrationError
from slotflow.pg.pool import Pool
from slotflow.pg.statements import sql

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_SCHEMA = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

# The schema is created only when it is missing: even `CREATE SCHEMA IF NOT EXISTS` needs CREATE
# on the database, which a service's own role does not hold where the schema was made for it
# (`slotflow db bootstrap-roles`: the schema exists, owned by the role).
_SCHEMA_EXISTS = "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)"
_CREATE_SCHEMA = "CREATE SCHEMA IF NOT EXISTS {schema}"
# The bookkeeping table lives in the service's own schema. The advisory lock makes the whole
# "read applied versions, apply the rest" step atomic across concurrent runners.
_BOOTSTRAP = """
CREATE TABLE IF NOT EXISTS {schema}.schema_migrations (
    source     text        NOT NULL,
    version    integer     NOT NULL,
    name       text        NOT NULL,
    checksum   text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source, version)        -- unique: a file is recorded, and so applied, once
);
"""
_APPLIED = "SELECT source, version, checksum FROM {schema}.schema_migrations"
# Recorded in the transaction that applied the file (the primary key refuses a second record).
_RECORD = """
INSERT INTO {schema}.schema_migrations (source, version, name, checksum) VALUES ($1, $2, $3, $4)
"""


@dataclass(frozen=True)
class MigrationSource:
    """A folder of migrations under a name that is unique within a schema."""

    name: str
    directory: Path


SQL_DIR = Path(__file__).parent / "sql"
OUTBOX = MigrationSource("outbox", SQL_DIR / "outbox")
INBOX = MigrationSource("inbox", SQL_DIR / "inbox")
#: Content-addressed workflow payloads (slotflow.pg.payloads), carried by the service that offloads them.
PAYLOADS = MigrationSource("payloads", SQL_DIR / "payloads")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def load_migrations(directory: Path) -> list[Migration]:
    """Read `NNNN_name.sql` files in version order.

    Raises:
        MigrationError: a file is misnamed or two files share a version.
    """
    found: dict[int, Migration] = {}
    for path in sorted(directory.glob("*.sql")):
        match = _NAME.match(path.name)
        if match is None:
            raise MigrationError(f"migration file {path.name} is not named NNNN_description.sql")
        version = int(match.group(1))
        if version in found:
            raise MigrationError(
                f"two migrations share version {version}: {found[version].name}, {path.name}"
            )
        found[version] = Migration(version, path.stem, path.read_text())
    return [found[v] for v in sorted(found)]


async def apply_migrations(pool: Pool, *, schema: str, sources: Sequence[MigrationSource]) -> list[str]:
    """Apply every migration of ``sources`` not yet recorded in ``schema``; return those applied.

    `{schema}` inside a file is replaced by the schema name, so a service's SQL can name its tables
    without hard-coding where they live.

    Raises:
        MigrationDrift: an applied file changed since it ran.
        MigrationError: a file is misnamed or the schema name is invalid.
    """
    if _SCHEMA.match(schema) is None:
        raise MigrationError(f"invalid schema name {schema!r}")
    applied: list[str] = []
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", f"slotflow.migrate.{schema}")
        if not await conn.fetchval(_SCHEMA_EXISTS, schema):
            await conn.execute(sql(_CREATE_SCHEMA, schema))
        await conn.execute(sql(_BOOTSTRAP, schema))
        rows = await conn.fetch(sql(_APPLIED, schema))
        done = {(str(r["source"]), int(r["version"])): str(r["checksum"]) for r in rows}
        for source in sources:
            for migration in load_migrations(source.directory):
                recorded = done.get((source.name, migration.version))
                if recorded is not None:
                    if recorded != migration.checksum:
                        raise MigrationDrift(
                            f"migration {source.name}/{migration.name} in schema {schema} "
                            "changed after it was applied"
                        )
                    continue
                await conn.execute(sql(migration.sql, schema))
                await conn.execute(
                    sql(_RECORD, schema),
                    source.name,
                    migration.version,
                    migration.name,
                    migration.checksum,
                )
                applied.append(f"{source.name}/{migration.name}")
    return applied
