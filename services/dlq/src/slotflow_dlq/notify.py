"""Deliver webhook notifications for dead-lettered money-moving runs.

Notifications are staged in the same transaction that parks the entry, and delivered here, away
from parking: a slow or dead webhook delays nothing, and a crash between parking and delivery
forgets nothing. Each delivery is leased (its `next_at` pushed past the request timeout) before
the POST, so replicas never send one twice at the same moment. Failures are retried with full
jitter, `random(0, min(cap, base * 2**attempt))`, up to a bound, then given up and counted.

Delivery is at-least-once: the body carries `dead_letter_id`, also sent as `Idempotency-Key`.
"""

import asyncio
import json
import logging
import random
from datetime import timedelta
from typing import Any

import asyncpg
import httpx

from slotflow.core.retry import full_jitter_delay
from slotflow.pg.pool import CONNECTION_ERRORS, Pool
from slotflow.pg.statements import sql
from slotflow.service import sleep_or_stop
from slotflow_dlq.metrics import DlqMetrics

log = logging.getLogger(__name__)

_ERRORS: tuple[type[BaseException], ...] = (*CONNECTION_ERRORS, asyncpg.PostgresError)


# Due notifications, each leased by moving next_at past the delivery's timeout: SKIP LOCKED so
# several notifiers split them, and a notifier that dies mid-delivery leaves its lease to expire,
# after which another delivers again (the receiver dedupes on the Idempotency-Key it is sent).
LEASE_DUE = """
UPDATE {schema}.notifications n
   SET attempts = n.attempts + 1, next_at = now() + make_interval(secs => $2)
 WHERE dead_letter_id IN (
        SELECT dead_letter_id FROM {schema}.notifications
         WHERE delivered_at IS NULL AND gave_up_at IS NULL AND next_at <= now()
         ORDER BY next_at LIMIT $1 FOR UPDATE SKIP LOCKED)
RETURNING dead_letter_id, payload::text AS payload, attempts
"""
DELIVERED = (
    "UPDATE {schema}.notifications SET delivered_at = now(), last_error = '' WHERE dead_letter_id = $1"
)
GAVE_UP = "UPDATE {schema}.notifications SET gave_up_at = now(), last_error = $2 WHERE dead_letter_id = $1"
# The next attempt's time from the database clock plus the full-jitter delay.
RETRY_LATER = """
UPDATE {schema}.notifications SET next_at = now() + make_interval(secs => $2), last_error = $3
 WHERE dead_letter_id = $1
"""


class Notifier:
    def __init__(
        self,
        pool: Pool,
        *,
        schema: str,
        url: str,
        metrics: DlqMetrics,
        timeout: float = 5.0,
        max_attempts: int = 8,
        base: float = 1.0,
        cap: float = 300.0,
        poll_interval: float = 0.5,
        batch_size: int = 20,
        rng: random.Random | None = None,
    ) -> None:
        self._pool = pool
        self._schema = schema
        self._url = url
        self._metrics = metrics
        self._timeout = timeout
        self._max_attempts = max_attempts
        self._base = timedelta(seconds=base)
        self._cap = timedelta(seconds=cap)
        self._poll_interval = poll_interval
        self._batch_size = batch_size
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not secrets
        self._wake = asyncio.Event()

    def wake(self) -> None:
        self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        async with httpx.AsyncClient(timeout=self._timeout) as client:
            while not stop.is_set():
                try:
                    sent = await self.deliver_due(client)
                except _ERRORS as err:
                    log.warning("notifier paused: %s", err)
                    sent = 0
                if sent == 0:
                    self._wake.clear()
                    await sleep_or_stop(stop, self._poll_interval, wake=self._wake)

    async def deliver_due(self, client: httpx.AsyncClient) -> int:
        """Deliver every notification due now (one batch); returns how many were tried."""
        rows = await self._pool.fetch(
            sql(LEASE_DUE, self._schema),
            self._batch_size,
            self._timeout * 2 + 1,
        )
        await asyncio.gather(*(self._deliver(client, row) for row in rows))
        return len(rows)

    async def _deliver(self, client: httpx.AsyncClient, row: Any) -> None:
        dead_letter_id = str(row["dead_letter_id"])
        attempt = int(row["attempts"])
        body: dict[str, Any] = json.loads(row["payload"])
        body["attempt"] = attempt
        try:
            response = await client.post(self._url, json=body, headers={"Idempotency-Key": dead_letter_id})
            error = None if response.is_success else f"HTTP {response.status_code}"
        except httpx.HTTPError as err:
            error = f"{type(err).__name__}: {err}"
        if error is None:
            self._metrics.notifications.labels("delivered").inc()
            await self._pool.execute(sql(DELIVERED, self._schema), dead_letter_id)
            return
        if attempt >= self._max_attempts:
            self._metrics.notifications.labels("gave_up").inc()
            log.error("webhook for %s given up after %d attempts: %s", dead_letter_id, attempt, error)
            await self._pool.execute(
                sql(GAVE_UP, self._schema),
                dead_letter_id,
                error[:2000],
            )
            return
        self._metrics.notifications.labels("failed").inc()
        delay = full_jitter_delay(
            attempt=attempt - 1, base=self._base, cap=self._cap, draw=self._rng.random()
        )
        log.warning(
            "webhook for %s failed (try %d), next in %.2fs: %s",
            dead_letter_id,
            attempt,
            delay.total_seconds(),
            error,
        )
        await self._pool.execute(
            sql(RETRY_LATER, self._schema),
            dead_letter_id,
            delay.total_seconds(),
            error[:2000],
        )
