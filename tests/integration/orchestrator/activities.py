"""The test saga's activities, run by in-process claimers as `{workflow_id}/{sequence}`.

Each one records its effect in `order_effects`, an append-only table with no unique key: every
attempt that reached the world leaves a row, so a test can count effects independently of
slotflow's own keys (a real handler keys its write by `ctx.run_id`, as examples/orders does).
They are registered per test (`ACTIVITIES`), not with `@handler`, so they never collide with
examples/orders' handlers of the same names in one process.
"""

import asyncio
import json
from typing import Any

from slotflow.errors import PermanentError
from slotflow.pg.pool import Conn
from slotflow.runs import RunContext

EFFECTS_SQL = """
CREATE TABLE IF NOT EXISTS order_effects (
    run_id   text        NOT NULL,
    activity text        NOT NULL,
    attempt  integer     NOT NULL,
    order_id text        NOT NULL,
    payload  jsonb       NOT NULL,
    at       timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""


class CaptureDeclined(PermanentError):
    """The card issuer refused the capture: retrying cannot change the answer."""


#: Where a test holds an activity in flight: an order whose payload names a `gate` activity makes
#: that activity record its arrival in `gates_entered`, then wait until the test opens the gate
#: (`gates_open`) before it has its effect.
GATES_SQL = """
CREATE TABLE IF NOT EXISTS gates_entered (order_id text, activity text, run_id text);
CREATE TABLE IF NOT EXISTS gates_open (order_id text, activity text)
"""


async def create_tables(conn: Conn) -> None:
    """Create the effects table in the handler database (idempotent)."""
    await conn.execute(EFFECTS_SQL)
    await conn.execute(CARRIER_SQL)
    await conn.execute(GATES_SQL)


async def _gate(ctx: RunContext, activity: str) -> None:
    """Hold ``activity`` in flight until the test opens its gate, if the order asks for one."""
    if ctx.payload.get("gate") != activity or ctx.pool is None:
        return
    order_id = str(ctx.payload.get("order_id", ""))
    await ctx.pool.execute(
        "INSERT INTO gates_entered (order_id, activity, run_id) VALUES ($1, $2, $3)",
        order_id,
        activity,
        ctx.run_id,
    )
    opened = "SELECT count(*) FROM gates_open WHERE order_id = $1 AND activity = $2"
    while await ctx.pool.fetchval(opened, order_id, activity) == 0:
        await asyncio.sleep(0.05)


async def _record(ctx: RunContext, activity: str) -> None:
    if ctx.pool is None:
        raise PermanentError("the order activities need a handler database (SLOTFLOW_CLAIMER_HANDLER_DSN)")
    await ctx.pool.execute(
        "INSERT INTO order_effects (run_id, activity, attempt, order_id, payload) VALUES ($1, $2, $3, $4, $5::jsonb)",
        ctx.run_id,
        activity,
        ctx.attempt,
        str(ctx.payload.get("order_id", "")),
        json.dumps(dict(ctx.payload)),
    )


class GatewayUnreachable(Exception):
    """The payment gateway did not answer: a retryable failure."""


async def authorize(ctx: RunContext) -> dict[str, Any]:
    await _record(ctx, "payments.authorize")
    if ctx.payload.get("fail_first") and ctx.attempt == 1:
        # A retry goes through the claimer's durable timer at the ticker.
        raise GatewayUnreachable(f"gateway unreachable for order {ctx.payload['order_id']}")
    result: dict[str, Any] = {"order_id": ctx.payload["order_id"], "authorization": f"auth-{ctx.run_id}"}
    if ctx.payload.get("blob_bytes"):
        # A large result (a scanned receipt, say): the history holds it by reference.
        result["blob"] = "x" * int(ctx.payload["blob_bytes"])
    return result


async def reserve(ctx: RunContext) -> dict[str, Any]:
    await _gate(ctx, "inventory.reserve")
    await _record(ctx, "inventory.reserve")
    return {"order_id": ctx.payload["order_id"], "reservation": f"res-{ctx.run_id}"}


async def capture(ctx: RunContext) -> dict[str, Any]:
    await _record(ctx, "payments.capture")
    if ctx.payload.get("capture_fails"):
        raise CaptureDeclined(f"capture of order {ctx.payload['order_id']} declined")
    return {"order_id": ctx.payload["order_id"], "captured": True}


async def release(ctx: RunContext) -> None:
    await _gate(ctx, "inventory.release")
    await _record(ctx, "inventory.release")


async def void(ctx: RunContext) -> None:
    await _gate(ctx, "payments.void")
    await _record(ctx, "payments.void")


async def slow(ctx: RunContext) -> None:
    """Takes longer than any deadline the tests give it."""
    await _record(ctx, "shipping.slow")
    await asyncio.sleep(float(ctx.payload.get("seconds", 30)))


class CarrierClosed(Exception):
    """The carrier's booking API is down: a retryable failure."""


CARRIER_SQL = "CREATE TABLE IF NOT EXISTS carrier_open (order_id text PRIMARY KEY)"


async def book(ctx: RunContext) -> dict[str, Any]:
    """Books a shipment once the test opened the carrier for the order (`carrier_open`)."""
    await _record(ctx, "shipping.book")
    if ctx.pool is None:
        raise PermanentError("shipping.book needs a handler database")
    order_id = str(ctx.payload["order_id"])
    if await ctx.pool.fetchval("SELECT count(*) FROM carrier_open WHERE order_id = $1", order_id) == 0:
        raise CarrierClosed(f"carrier closed for order {order_id}")
    return {"order_id": order_id, "booking": f"book-{ctx.run_id}"}


#: Handler name -> function, for a test's HandlerRegistry.
ACTIVITIES = {
    "payments.authorize": authorize,
    "inventory.reserve": reserve,
    "payments.capture": capture,
    "inventory.release": release,
    "payments.void": void,
    "shipping.slow": slow,
    "shipping.book": book,
}
