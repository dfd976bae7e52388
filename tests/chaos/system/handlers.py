"""The workload's handlers and saga activities, loaded into the claimer processes.

Every attempt that reaches its effect appends a row to `system_effects` (no unique constraint,
no primary key: a second effect for one run id stays visible to the checker). The effect itself
is a row of the fenced `system_ledger`, written in the same transaction: a run id already in
the ledger is a redelivery or a takeover after the write, recorded as `collapsed`; a stale claim
writing after a newer one is refused by the fence and leaves no effect row at all.
"""

import os
from typing import Any

from slotflow.errors import PermanentError
from slotflow.pg.pool import Conn
from slotflow.runs import RunContext, handler

TABLES_SQL = """
-- Append-only on purpose: no key, so the checker sees every effect the handlers had.
CREATE TABLE IF NOT EXISTS system_effects (
    seq         bigserial,
    kind        text        NOT NULL,
    subject     text        NOT NULL,
    run_id      text        NOT NULL,
    phase       text        NOT NULL,
    fence_token bigint      NOT NULL,
    owner       text        NOT NULL,
    at          timestamptz NOT NULL DEFAULT clock_timestamp()
);
-- The operator's repairs: a parking order's reservation is refused until its row is here.
CREATE TABLE IF NOT EXISTS system_repairs (
    subject     text        PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT clock_timestamp()
);
-- The fenced ledger: one row per run id, stamped with the highest claim that wrote it.
CREATE TABLE IF NOT EXISTS system_ledger (
    run_id      text   PRIMARY KEY,
    kind        text   NOT NULL,
    fence_token bigint NOT NULL,
    owner       text   NOT NULL
);
"""


HOLD_S = float(os.environ.get("SYSTEM_EFFECT_HOLD_S", "0"))


class CaptureDeclined(PermanentError):
    """The sandbox issuer refuses this order's capture (its workflow id says so)."""


class ReservationRefused(PermanentError):
    """The sandbox warehouse refuses a parking order's reservation until an operator repairs it."""


#: What a parking order's id holds (the workload's `order-park-...`): its saga parks the reservation.
PARKING = "park"
REPAIR_SQL = "INSERT INTO system_repairs (subject) VALUES ($1) ON CONFLICT (subject) DO NOTHING"


async def repair(conn: Conn, subject: str) -> None:
    """The operator's fix for a parking order: its reservation succeeds from now on."""
    await conn.execute(REPAIR_SQL, subject)


async def create_tables(conn: Conn) -> None:
    await conn.execute(TABLES_SQL)


async def apply_once(ctx: RunContext, kind: str, subject: str) -> dict[str, Any]:
    if ctx.pool is None:
        raise RuntimeError("system handlers need the handler database")
    async with ctx.pool.acquire() as conn, conn.transaction():
        # Serialises the check and the write per run id: a row lock (FOR UPDATE) would not, since
        # the row does not exist yet. A claimer frozen inside this transaction keeps the lock, so its
        # rival waits, then finds the row once the frozen one wakes and commits.
        await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", ctx.run_id)
        if HOLD_S:
            await conn.execute("SELECT pg_sleep($1)", HOLD_S)
        held = await conn.fetchval("SELECT fence_token FROM system_ledger WHERE run_id = $1", ctx.run_id)
        phase = "collapsed"
        if held is None:
            await ctx.fenced.upsert(
                table="system_ledger",
                key={"run_id": ctx.run_id},
                values={"kind": kind, "owner": ctx.owner},
                conn=conn,
            )
            phase = "applied"
        await conn.execute(
            "INSERT INTO system_effects (kind, subject, run_id, phase, fence_token, owner) "
            "VALUES ($1, $2, $3, $4, $5, $6)",
            kind,
            subject,
            ctx.run_id,
            phase,
            ctx.fence_token,
            ctx.owner,
        )
    return {"run_id": ctx.run_id, "phase": phase}


@handler("system.payout")
async def payout(ctx: RunContext) -> dict[str, Any]:
    return await apply_once(ctx, str(ctx.payload.get("kind", "payout")), ctx.job_id)


def _order(ctx: RunContext) -> str:
    return ctx.workflow_id or ctx.run_id.rsplit("/", 1)[0]


@handler("system.authorize")
async def authorize(ctx: RunContext) -> dict[str, Any]:
    return await apply_once(ctx, "order.authorize", _order(ctx))


@handler("system.reserve")
async def reserve(ctx: RunContext) -> dict[str, Any]:
    order = _order(ctx)
    if PARKING in order:
        if ctx.pool is None:
            raise RuntimeError("system handlers need the handler database")
        async with ctx.pool.acquire() as conn:
            repaired = await conn.fetchval("SELECT 1 FROM system_repairs WHERE subject = $1", order)
        if repaired is None:
            raise ReservationRefused(f"reservation of {order} refused until an operator repairs it")
    return await apply_once(ctx, "order.reserve", order)


@handler("system.capture")
async def capture(ctx: RunContext) -> dict[str, Any]:
    if "decline" in _order(ctx):
        raise CaptureDeclined(f"capture of {_order(ctx)} declined")
    return await apply_once(ctx, "order.capture", _order(ctx))


@handler("system.release")
async def release(ctx: RunContext) -> dict[str, Any]:
    return await apply_once(ctx, "order.release", _order(ctx))


@handler("system.void")
async def void(ctx: RunContext) -> dict[str, Any]:
    return await apply_once(ctx, "order.void", _order(ctx))
