"""`slotflow db bootstrap-roles`: one PostgreSQL role per service, each owning its schema.

Run once per database by an operator whose connection may create roles (SLOTFLOW_PG_ADMIN_DSN,
or --dsn); `--print` shows the SQL instead, to review or run with psql. Idempotent.
"""

import asyncio
import os

import asyncpg

from slotflow.cli.context import Context
from slotflow.cli.errors import CliError, UsageError
from slotflow.errors import ConfigurationError
from slotflow.logs import redact, register_dsn
from slotflow.pg.roles import bootstrap_roles as run_bootstrap
from slotflow.pg.roles import bootstrap_sql

ADMIN_DSN_VARIABLE = "SLOTFLOW_PG_ADMIN_DSN"
#: Connection errors: the database is not there, or refused us before any statement ran.
_UNREACHABLE = (OSError, asyncpg.InterfaceError, asyncpg.CannotConnectNowError)


def bootstrap_roles(ctx: Context) -> int:
    """Create (or bring up to date) every service's role, schema and read grants."""
    prefix: str = ctx.args.prefix
    try:
        statements = bootstrap_sql(prefix)
    except ConfigurationError as err:
        raise UsageError(str(err)) from None
    if ctx.args.print_sql:
        ctx.out.write("BEGIN;\n" + "\n".join(statements) + "\nCOMMIT;\n")
        return 0
    dsn = ctx.args.dsn or os.environ.get(ADMIN_DSN_VARIABLE) or os.environ.get("SLOTFLOW_PG_DSN")
    if not dsn:
        raise UsageError(f"no administrator connection: pass --dsn or set {ADMIN_DSN_VARIABLE}")
    register_dsn(dsn)
    shown = redact(dsn)
    try:
        grants = asyncio.run(asyncio.wait_for(run_bootstrap(dsn, prefix), ctx.timeout))
    except asyncpg.InsufficientPrivilegeError as err:
        raise CliError(
            f"{shown}: this role may not create roles or schemas ({err}); connect as one that may"
        ) from None
    except asyncpg.PostgresError as err:
        raise CliError(f"bootstrap failed on {shown}: {type(err).__name__}: {err}") from None
    except (*_UNREACHABLE, TimeoutError) as err:
        raise CliError(
            f"cannot connect to PostgreSQL at {shown}: {redact(str(err)) or type(err).__name__}"
        ) from None
    rows = [{"role": g.role, "schema": g.schema, "rights": g.rights} for g in grants]
    if ctx.as_json:
        ctx.emit_json(rows)
    else:
        ctx.emit_table(
            rows,
            [
                ("role", lambda r: str(r["role"])),
                ("schema", lambda r: str(r["schema"])),
                ("rights", lambda r: str(r["rights"])),
            ],
            empty="no roles",
        )
    return 0
