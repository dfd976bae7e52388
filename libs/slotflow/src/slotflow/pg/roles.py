"""One PostgreSQL role per service, with rights on its own schema only (and read where it must read).

`bootstrap_sql(prefix)` renders the idempotent script an operator runs once per database, as a role
that may create roles (`slotflow db bootstrap-roles`, or `--print` it and run it with psql); each
service then connects as its own role and applies its migrations into the schema it owns.

The read grants are what the code reads across schemas, and nothing else:

- the orchestrator reads the claimer's schema: every activity outcome is checked against its run's
  row in `claimer.runs` (`slotflow.issuers`), and an activity result too large for RunCompleted is
  stored in `claimer.payloads` (the orchestrator's `activity_payloads_schema`);
- the api reads the stats schema: the stats processor's windows (`slotflow_api.stats`).

One service asks another's schema a question without reading it: the claimer calls
`ticker.rerun_issued` (a SECURITY DEFINER function, whose answer is all it learns) before it takes
an operator's re-run, and `orchestrator.activity_cancel_issued` before it acts on a workflow's
cancel of an activity, so it holds USAGE on those two schemas and no right on any of their tables;
the api calls `orchestrator.query_route` to find the orchestrator that answers a workflow's query
(docs/decisions/0010).

PostgreSQL's default privileges cannot name one table, so a read grant covers the whole schema
(read only). Every other cross-service exchange goes through Kafka.
"""

import re
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from slotflow.errors import ConfigurationError
from slotflow.pg.statements import compose, quote_ident, sql

_SQL_DIR = Path(__file__).parent / "sql" / "roles"
#: A role prefix makes names like `slotflow_ticker`; the whole name must stay a plain identifier.
_PREFIX = re.compile(r"^[a-z_][a-z0-9_]{0,40}$")
DEFAULT_PREFIX = "slotflow_"


class BadRolePrefix(ConfigurationError):
    """A role prefix must be lower-case letters, digits and underscores, starting with a letter or _."""


@dataclass(frozen=True)
class ServiceRole:
    """A service, the schema it owns (its `db_schema` default), and the services whose schemas it reads."""

    service: str
    schema: str
    reads: tuple[str, ...] = ()
    #: Services whose schema's functions it calls (USAGE only: no table of theirs is readable).
    asks: tuple[str, ...] = ()


#: Every service that keeps state in PostgreSQL. The claimer's handlers use a database of the
#: user's own (SLOTFLOW_CLAIMER_HANDLER_DSN), not covered here.
SERVICE_ROLES: tuple[ServiceRole, ...] = (
    ServiceRole("ticker", "ticker"),
    ServiceRole("claimer", "claimer", asks=("ticker", "orchestrator")),
    ServiceRole("orchestrator", "orchestrator", reads=("claimer",)),
    ServiceRole("dlq", "dlq"),
    ServiceRole("stats", "stats"),
    ServiceRole("api", "api", reads=("stats",), asks=("orchestrator",)),
)
_BY_SERVICE = {r.service: r for r in SERVICE_ROLES}


def _literal(name: str) -> str:
    # Only names quote_ident accepts get here (lower-case letters, digits, _): nothing to escape.
    quote_ident(name)
    return f"'{name}'"


def role_name(prefix: str, service: str) -> str:
    """The role of ``service`` under ``prefix`` (`slotflow_ticker`).

    Raises:
        BadRolePrefix: the prefix is not a plain lower-case name.
    """
    if _PREFIX.match(prefix) is None:
        raise BadRolePrefix(f"role prefix {prefix!r}: use lower-case letters, digits and _ (e.g. slotflow_)")
    return prefix + service


def bootstrap_sql(prefix: str = DEFAULT_PREFIX) -> list[str]:
    """The statements that create every service's role and schema and the read grants, in order."""
    service_sql = (_SQL_DIR / "service.sql").read_text(encoding="utf-8")
    read_sql = (_SQL_DIR / "read.sql").read_text(encoding="utf-8")
    ask_sql = (_SQL_DIR / "ask.sql").read_text(encoding="utf-8")
    out: list[str] = []
    for entry in SERVICE_ROLES:
        role = role_name(prefix, entry.service)
        out.append(
            sql(
                compose(
                    service_sql,
                    role=quote_ident(role),
                    role_name=_literal(role),
                    schema_name=_literal(entry.schema),
                ),
                entry.schema,
            )
        )
    for entry in SERVICE_ROLES:
        for read in entry.reads:
            owner = _BY_SERVICE[read]
            out.append(
                sql(
                    compose(
                        read_sql,
                        reader=quote_ident(role_name(prefix, entry.service)),
                        owner=quote_ident(role_name(prefix, owner.service)),
                    ),
                    owner.schema,
                )
            )
        for asked in entry.asks:
            out.append(
                sql(
                    compose(ask_sql, asker=quote_ident(role_name(prefix, entry.service))),
                    _BY_SERVICE[asked].schema,
                )
            )
    return out


@dataclass(frozen=True)
class Grant:
    """One line of the grant table: a role and what it may do where."""

    role: str
    schema: str
    rights: str


def grant_table(prefix: str = DEFAULT_PREFIX) -> list[Grant]:
    """What `bootstrap_sql` grants, one line per role and schema (docs/security.md shows it)."""
    rows = [Grant(role_name(prefix, r.service), r.schema, "owner (all)") for r in SERVICE_ROLES]
    for entry in SERVICE_ROLES:
        rows.extend(
            Grant(role_name(prefix, entry.service), _BY_SERVICE[read].schema, "USAGE, SELECT")
            for read in entry.reads
        )
        rows.extend(
            Grant(role_name(prefix, entry.service), _BY_SERVICE[asked].schema, "USAGE (its functions only)")
            for asked in entry.asks
        )
    return rows


async def bootstrap_roles(
    dsn: str, prefix: str = DEFAULT_PREFIX, *, password: str | None = None
) -> list[Grant]:
    """Run `bootstrap_sql` against ``dsn`` (an administrator's connection) in one transaction.

    Raises:
        asyncpg.PostgresError: the administrator may not create roles or schemas.
    """
    statements = bootstrap_sql(prefix)
    conn = await asyncpg.connect(dsn, password=password)
    try:
        async with conn.transaction():
            for statement in statements:
                await conn.execute(statement)
    finally:
        await conn.close()
    return grant_table(prefix)
