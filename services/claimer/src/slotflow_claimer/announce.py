"""ClaimerAnnounced: which handlers this claimer serves, at start-up and every interval.

The announcement leaves through the claimer's outbox like every other event it emits. Its id is
the claimer and the database clock's instant, so each announcement is a new record on the
compacted claimers topic, and the newest one per claimer is what the api keeps.
"""

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from slotflow.contracts import ClaimerAnnounced, wrap
from slotflow.core.identity import slot_label
from slotflow.core.stopping import sleep_or_stop
from slotflow.pg.outbox import Staged, append_many
from slotflow.pg.pool import Pool

log = logging.getLogger(__name__)


class Announcer:
    """Stages one ClaimerAnnounced now and then one every ``interval`` seconds until stopped."""

    def __init__(
        self,
        pool: Pool,
        *,
        schema: str,
        owner: str,
        handlers: list[str],
        interval: float,
        topic: str,
        wake_relay: Callable[[], None] | None = None,
    ) -> None:
        self._pool = pool
        self._schema = schema
        self._owner = owner
        self._handlers = tuple(handlers)
        self._interval = interval
        self._topic = topic
        self._wake = wake_relay
        self._started_at: datetime | None = None

    async def announce(self) -> None:
        async with self._pool.acquire() as conn, conn.transaction():
            now: datetime = await conn.fetchval("SELECT now()")
            started = self._started_at = self._started_at or now
            message = ClaimerAnnounced(
                claimer_id=self._owner,
                handlers=self._handlers,
                interval=timedelta(seconds=self._interval),
                started_at=started,
            )
            envelope = wrap(
                message,
                id=f"{self._owner}@{slot_label(now)}",
                key=self._owner,
                source="claimer",
                occurred_at=now,
            )
            await append_many(conn, schema=self._schema, items=[Staged(self._topic, envelope)])
        if self._wake is not None:
            self._wake()

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.announce()
            except Exception as err:  # noqa: BLE001 - advisory: a lost announcement is sent again next interval
                log.warning("claimer %s: could not announce its handlers: %r", self._owner, err)
            if await sleep_or_stop(stop, self._interval):
                return
