"""The lease reaper: runs whose claimer stopped renewing are taken over with a higher token.

A claimer that dies after its run's RunStarted became durable has committed that JobDue's offset,
so no redelivery will ever bring the run back: the reaper is what finishes it. Any live claimer
reaps; `FOR UPDATE SKIP LOCKED` splits the expired runs between them, and the token bump makes the
old owner's late writes bounce. It takes only as many runs as it has room for.

It also fails the attempts that went silent past their heartbeat deadline (an activity's
`heartbeat_timeout`) while their claimer could not notice it itself, frozen, dead or cut off from
the database: the run is taken with the next token and the attempt's failure recorded here, so
it is retried by its policy without waiting for the lease to lapse (docs/claimer.md, "Heartbeats").

It also restarts buffered runs whose start was lost (their job has nothing running any more).
"""

import asyncio
import logging
from collections.abc import Callable

from slotflow.pg.outbox import append_many
from slotflow.pg.pool import Pool
from slotflow.service import sleep_or_stop
from slotflow_claimer import store
from slotflow_claimer.events import RunEvents
from slotflow_claimer.executor import Executor
from slotflow_claimer.metrics import ClaimerMetrics
from slotflow_claimer.retrying import STORAGE_RETRYABLE
from slotflow_claimer.runs import Run

log = logging.getLogger(__name__)

#: How long past an attempt's heartbeat deadline (database clock) the reaper waits before failing
#: it: the claimer running a live attempt fails it itself at the deadline, counted from the
#: handler's start rather than the claim, so the reaper acts only on claimers that cannot.
SILENCE_GRACE_SECONDS = 1.0


class Reaper:
    def __init__(
        self,
        pool: Pool,
        *,
        schema: str,
        owner: str,
        lease_ttl: float,
        executor: Executor,
        events: RunEvents,
        metrics: ClaimerMetrics,
        wake_relay: Callable[[], None],
    ) -> None:
        self._pool = pool
        self._schema = schema
        self._owner = owner
        self._ttl = lease_ttl
        self._executor = executor
        self._events = events
        self._metrics = metrics
        self._wake_relay = wake_relay
        self._passes = 0

    async def time_out_silent(self) -> int:
        """Fail the attempts silent past their heartbeat deadline (as many as there is room for)."""
        room = self._executor.free()
        if room == 0:
            return 0
        async with self._pool.acquire() as conn:
            silent = await store.time_out_silent(
                conn, self._schema, owner=self._owner, ttl=self._ttl, limit=room, grace=SILENCE_GRACE_SECONDS
            )
        for found in silent:
            log.warning(
                "run %s: attempt %d sent no heartbeat in time (claimer %s); failing it with token %d",
                found.run.run_id,
                found.run.attempt,
                found.owner,
                found.run.fence_token,
            )
        if silent:
            self._executor.time_out(silent)
        return len(silent)

    async def reap_once(self) -> list[Run]:
        """Take over expired leases (as many as there is room for) and start them here."""
        room = self._executor.free()
        if room == 0:
            return []
        await self._executor.excuse_lapses()
        async with self._pool.acquire() as conn, conn.transaction():
            taken = await store.reap(conn, self._schema, owner=self._owner, ttl=self._ttl, limit=room)
            await append_many(
                conn, schema=self._schema, items=[self._events.started(run, run.updated_at) for run in taken]
            )
        for run in taken:
            log.warning(
                "run %s: took over from an expired lease with token %d (attempt %d)",
                run.run_id,
                run.fence_token,
                run.attempt,
            )
            self._executor.start(run)
        self._metrics.takeovers.inc(len(taken))
        self._metrics.claimed.labels("takeover").inc(len(taken))
        return taken

    async def restart_orphaned_buffers(self) -> list[Run]:
        async with self._pool.acquire() as conn, conn.transaction():
            jobs = await store.orphaned_buffers(conn, self._schema, older_than=self._ttl, limit=100)
            if not jobs:
                return []
            await store.lock_jobs(conn, jobs)
            started = await store.start_buffered(conn, self._schema, jobs, owner=self._owner, ttl=self._ttl)
            await append_many(
                conn,
                schema=self._schema,
                items=[self._events.started(run, run.updated_at) for run in started],
            )
        for run in started:
            self._executor.start(run)
        self._metrics.claimed.labels("buffered").inc(len(started))
        return started

    async def run(self, stop: asyncio.Event, interval: float) -> None:
        while not await sleep_or_stop(stop, interval):
            try:
                await self.time_out_silent()
                taken = await self.reap_once()
                self._passes += 1
                if self._passes % 10 == 0:
                    taken += await self.restart_orphaned_buffers()
            except STORAGE_RETRYABLE as err:
                log.warning("claimer: reaper pass failed: %r", err)
                continue
            if taken:
                self._wake_relay()
