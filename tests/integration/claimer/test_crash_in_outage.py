"""A claimer whose loop crashes while PostgreSQL drops its connections still stops.

A loop cancelled inside `conn.transaction()` on a connection the server has closed (a restart, a
reset) gets asyncpg's `InterfaceError: cannot call Transaction.__aexit__(): the underlying
connection is closed` in place of its CancelledError. The storage retries took that for an outage
and went on, so after another loop crashed the supervisor waited for them forever: the process
never stopped its Kafka consumer, kept its partitions (membership heartbeats run in the
background) and nothing restarted it. Every pause of a retry now honours such a swallowed
cancellation.
"""

import asyncio

import asyncpg
import pytest

from slotflow.core.stopping import sleep_or_stop
from slotflow.pg.pool import Pool
from slotflow.service import Supervisor
from slotflow_claimer.retrying import retry_unless_stopped, with_storage_retry


class LoopCrashed(Exception):
    """Another loop of the service failed."""


async def crash_while_a_transaction_is_cut(pg_dsn: str, pool: Pool, retrying_loop: str) -> None:
    inside = asyncio.Event()
    backend: list[int] = []
    gave_up = False

    async def in_transaction() -> None:
        if gave_up:
            raise RuntimeError("the test gave up waiting")  # ends a loop that swallowed its cancel
        async with pool.acquire() as conn, conn.transaction():
            backend.append(await conn.fetchval("SELECT pg_backend_pid()"))
            inside.set()
            await asyncio.sleep(3)  # a broker acknowledgement, a handler's work

    async def storage_loop(stop: asyncio.Event) -> None:
        while not stop.is_set():
            if retrying_loop == "with_storage_retry":
                await with_storage_retry(in_transaction, what="a pass")
            else:
                await retry_unless_stopped(in_transaction, what="a pass", stop=stop)

    async def relay_like_loop(stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await in_transaction()
            except asyncpg.InterfaceError:
                await sleep_or_stop(stop, 0.1)

    async def crashing(stop: asyncio.Event) -> None:
        await inside.wait()
        admin = await asyncpg.connect(pg_dsn)
        try:
            # What a fast shutdown does to every session: terminated, the socket closed.
            await admin.execute("SELECT pg_terminate_backend($1)", backend[-1])
        finally:
            await admin.close()
        await asyncio.sleep(0.5)
        raise LoopCrashed("a loop crashed")

    supervisor = Supervisor("claimer-under-test")
    supervisor.add("storage", relay_like_loop if retrying_loop == "sleep_or_stop" else storage_loop)
    supervisor.add("crashing", crashing)
    running = asyncio.create_task(supervisor.run(asyncio.Event()))
    done, _ = await asyncio.wait({running}, timeout=20)
    if not done:
        # Without the fix the supervisor never returns: the storage loop retries forever.
        gave_up = True
        await asyncio.wait({running}, timeout=20)
    assert done, "the supervisor still waits for a loop that swallowed its cancellation"
    with pytest.raises(LoopCrashed):
        await running


@pytest.mark.parametrize("retrying_loop", ["with_storage_retry", "retry_unless_stopped", "sleep_or_stop"])
async def test_a_crash_stops_loops_retrying_inside_a_cut_transaction(
    pg_dsn: str, pg_pool: Pool, retrying_loop: str
) -> None:
    await crash_while_a_transaction_is_cut(pg_dsn, pg_pool, retrying_loop)
