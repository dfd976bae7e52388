"""Handlers the chaos tests load into claimer subprocesses (SLOTFLOW_CLAIMER_HANDLER_MODULES).

`chaos.payout` is the payouts example plus what a test needs to see and steer: every invocation
and its fate appended to `handler_attempts` (no constraints, so a duplicate effect would show),
and, on the first claim only (or on every claim: `hold_until_epoch`), a pause before paying so a
test can kill, freeze or cut off the claimer in the middle of a run.
"""

import asyncio
import contextlib
import os
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import payouts  # examples/payouts, on PYTHONPATH in the subprocess

from slotflow.errors import DownstreamUnavailable, FenceRejected
from slotflow.pg.pool import Conn
from slotflow.runs import RunContext, handler


async def note(conn: Conn, ctx: RunContext, phase: str) -> None:
    await conn.execute(
        "INSERT INTO handler_attempts (run_id, attempt, fence_token, owner, phase) VALUES ($1, $2, $3, $4, $5)",
        ctx.run_id,
        ctx.attempt,
        ctx.fence_token,
        ctx.owner,
        phase,
    )


@handler("chaos.payout")
async def chaos_payout(ctx: RunContext) -> Any:
    if ctx.pool is None:
        raise RuntimeError("chaos handlers need the handler database")
    # One connection for the whole attempt: after the "start" note nothing waits on I/O until the
    # payout write is on its way, so a frozen claimer that wakes goes straight to that write.
    async with ctx.pool.acquire() as conn:
        await note(conn, ctx, "start")
        if ctx.fence_token == 1:
            if "hold_s" in ctx.payload:
                await asyncio.sleep(float(ctx.payload["hold_s"]))  # SIGKILL lands in here
            if "pay_after_epoch" in ctx.payload:
                # An absolute instant, so a claimer frozen before or during this pause pays at once
                # when it wakes after that instant.
                await asyncio.sleep(max(float(ctx.payload["pay_after_epoch"]) - time.time(), 0.0))
        if "hold_until_epoch" in ctx.payload:
            # Every claim waits until then, so the run is mid-handler whenever a test cuts it off.
            await asyncio.sleep(max(float(ctx.payload["hold_until_epoch"]) - time.time(), 0.0))

        return await on_the_wire(_pay_and_note(conn, ctx))


async def on_the_wire(write: Coroutine[Any, Any, Any]) -> Any:
    """Await ``write`` (the payout and its note) to the end, even if the handler is cancelled.

    A write that has started cannot be recalled by cancelling the handler (the claimer noticing
    its lease is gone), like a request already on the wire. Only the fence stops it, which is what
    these tests are about; and the note of its fate must land whichever comes first, or a test
    waiting for it waits for nothing.
    """
    task = asyncio.ensure_future(write)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await task
        raise


async def _pay_and_note(conn: Conn, ctx: RunContext) -> Any:
    """The payouts example's fenced write, noted as applied or rejected in the attempts table."""
    try:
        result = await payouts.pay_merchants(_on(conn, ctx))
    except FenceRejected:
        await note(conn, ctx, "rejected")
        raise
    await note(conn, ctx, "applied")
    return result


def _on(conn: Conn, ctx: RunContext) -> RunContext:
    """``ctx`` whose fenced writes go through ``conn`` (the example writes via ctx.fenced)."""
    return _ConnContext(ctx, conn)  # type: ignore[return-value]


class _ConnContext:
    def __init__(self, ctx: RunContext, conn: Conn) -> None:
        self._ctx = ctx
        self.fenced = _ConnFenced(ctx, conn)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)


class _ConnFenced:
    def __init__(self, ctx: RunContext, conn: Conn) -> None:
        self._ctx = ctx
        self._conn = conn

    async def upsert(self, **kwargs: Any) -> Any:
        return await self._ctx.fenced.upsert(conn=self._conn, **kwargs)


@handler("chaos.exit")
async def chaos_exit(ctx: RunContext) -> None:
    """A careless handler: `sys.exit` from inside a run (it used to kill each claimer in turn)."""
    raise SystemExit(f"handler gave up on {ctx.run_id}")


@handler("chaos.crash")
async def chaos_crash(ctx: RunContext) -> None:
    """A run that takes its process down with it (a segfault, the OOM killer): no outcome, ever."""
    if ctx.pool is not None:
        async with ctx.pool.acquire() as conn:
            await note(conn, ctx, "start")
    os._exit(70)


@handler("chaos.bank", downstreams=["bank-api"])
async def chaos_bank(ctx: RunContext) -> Any:
    """A dependency shared by every process: down while `bank_state.down`; each call is noted."""
    if ctx.pool is None:
        raise RuntimeError("chaos handlers need the handler database")
    async with ctx.pool.acquire() as conn:
        down = bool(await conn.fetchval("SELECT down FROM bank_state"))
        await conn.execute(
            "INSERT INTO bank_calls (run_id, attempt, owner, ok) VALUES ($1, $2, $3, $4)",
            ctx.run_id,
            ctx.attempt,
            ctx.owner,
            not down,
        )
    if down:
        raise DownstreamUnavailable("bank-api", "bank-api answered 503 (simulated outage)")
    return {"paid": ctx.run_id}


async def _pay_once(ctx: RunContext) -> Any:
    """`_pay_and_note` on a connection of its own."""
    if ctx.pool is None:
        raise RuntimeError("chaos handlers need the handler database")
    async with ctx.pool.acquire() as conn:
        return await _pay_and_note(conn, ctx)


async def _note_start(ctx: RunContext) -> None:
    if ctx.pool is None:
        raise RuntimeError("chaos handlers need the handler database")
    async with ctx.pool.acquire() as conn:
        await note(conn, ctx, "start")


@handler("chaos.sync_payout")
def chaos_sync_payout(ctx: RunContext) -> Any:
    """A plain def that blocks (a sync driver, time.sleep): it runs in the claimer's thread pool."""
    ctx.call(_note_start(ctx))
    time.sleep(float(ctx.payload.get("block_s", 0)))
    return ctx.call(_pay_once(ctx))


@handler("chaos.loop_blocker")
async def chaos_loop_blocker(ctx: RunContext) -> Any:
    """An async def that blocks the event loop on its first claim (the bug a thread cannot fix).

    It blocks until the file named by ``release`` exists (a test creates it once another claimer
    has taken the run over and paid), at most ``block_s`` seconds, then pays. The payout is on the
    wire the moment the loop is free again: the overdue heartbeat that then learns the lease is
    gone cancels the handler, not the write, so the late write always meets the fence.
    """
    await _note_start(ctx)
    if ctx.fence_token == 1:
        release = Path(str(ctx.payload["release"]))
        deadline = time.monotonic() + float(ctx.payload.get("block_s", 60))
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # on the loop, on purpose
    return await on_the_wire(_pay_once(ctx))


@handler("chaos.heartbeat_payout")
async def chaos_heartbeat_payout(ctx: RunContext) -> Any:
    """A payout that heartbeats while it waits (activity heartbeats, `ctx.heartbeat`).

    Its first attempt records how far it got, then keeps heartbeating until ``pay_after_epoch`` and
    pays: a test freezes its claimer in that loop. A later attempt notes `resumed` when it reads
    those details, and pays at once.
    """
    if ctx.pool is None:
        raise RuntimeError("chaos handlers need the handler database")
    async with ctx.pool.acquire() as conn:
        await note(conn, ctx, "start")
        if ctx.attempt == 1:
            ctx.heartbeat({"stage": "authorized"})
            while time.time() < float(ctx.payload["pay_after_epoch"]):
                ctx.heartbeat()
                await asyncio.sleep(0.05)
        elif ctx.heartbeat_details == {"stage": "authorized"}:
            await note(conn, ctx, "resumed")
        return await on_the_wire(_pay_and_note(conn, ctx))
