"""The ticker's side of a redrive (docs/decisions/0009): re-issue a dead-lettered run's slot from its
schedule's current definition, or read a poison command back from its topic and take it again.

A `run` request with `definition: current` names a schedule's run (job id and slot). The ticker
builds that slot's JobDue from the definition the schedule has now (a handler name fixed by
`schedule update` since, a new payload or retry policy), under the same run id and with the run's
redrive number, and stages it with its answer in one transaction. The claimer reopens the
dead-lettered run with it once (a number above its row's) and never creates a run for it, so a
slot that never fired cannot be fired this way. A schedule that no longer exists is refused.
"""

import logging
from collections.abc import Callable
from datetime import datetime

from slotflow.contracts import Envelope, JobDue, RedriveRequested
from slotflow.contracts.topics import DLQ_MESSAGES
from slotflow.core.identity import run_id
from slotflow.kafka.redrive import Answer, outcome_envelope
from slotflow.pg.outbox import Staged
from slotflow.pg.pool import Pool
from slotflow.pg.statements import sql
from slotflow.settings import KafkaSettings
from slotflow_ticker.events import EventFactory, stage_all
from slotflow_ticker.rows import parse_definition
from slotflow_ticker.sql import STORED_DEFINITION

log = logging.getLogger(__name__)

SERVICE = "ticker"


class TickerRedrives:
    """Carries out the `run` redrive requests addressed to the ticker (`definition: current`)."""

    def __init__(
        self,
        pool: Pool,
        *,
        schema: str,
        kafka: KafkaSettings,
        events: EventFactory,
        wake_relay: Callable[[], None],
    ) -> None:
        self._pool = pool
        self._schema = schema
        self._dlq = kafka.topic(DLQ_MESSAGES)
        self._events = events
        self._wake_relay = wake_relay

    async def on_request(self, envelope: Envelope, request: RedriveRequested) -> Answer | None:
        """Re-issue the request's slot from its schedule's current definition; None once the
        JobDue and the answer are staged together."""
        del envelope
        if request.kind != "run" or request.definition != "current":
            return Answer.refused(
                f"the ticker re-issues a schedule's slot from its current definition; this is a "
                f"{request.kind} redrive ({request.definition})"
            )
        job_id, slot = request.job_id, request.slot
        if job_id is None or slot is None or request.run_id is None:
            return Answer.refused("the letter names no schedule and slot to re-issue")
        if run_id(job_id, slot) != request.run_id:
            return Answer.refused(
                f"run {request.run_id!r} is not the run of schedule {job_id!r} at {slot.isoformat()}"
            )
        async with self._pool.acquire() as conn, conn.transaction():
            stored = await conn.fetchval(sql(STORED_DEFINITION, self._schema), job_id)
            if stored is None:
                return Answer.refused(
                    f"schedule {job_id!r} no longer exists: there is no definition to re-issue its slot from"
                )
            definition = parse_definition(stored)
            now: datetime = await conn.fetchval("SELECT now()")
            job = JobDue(
                run_id=request.run_id,
                job_id=job_id,
                slot=slot,
                kind="manual",
                handler=definition.handler,
                payload=definition.payload,
                retry=definition.retry,
                overlap=definition.overlap,
                tags=definition.tags,
                fire_at=now,
                redrive=request.redrive,
            )
            done = Answer.done(
                f"re-issued run {request.run_id} (redrive {request.redrive}) from schedule {job_id}'s current "
                f"definition (handler {definition.handler})"
            )
            await stage_all(
                conn,
                schema=self._schema,
                items=[
                    self._events.job_due_message(job, occurred_at=now),
                    Staged(self._dlq, outcome_envelope(request, service=SERVICE, answer=done, at=now)),
                ],
            )
        self._wake_relay()
        log.info(
            "ticker: re-issued %s for redrive %d of %s",
            request.run_id,
            request.redrive,
            request.dead_letter_id,
        )
        return None
