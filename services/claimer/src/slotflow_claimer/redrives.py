"""The claimer's side of a redrive (docs/decisions/0009): reopen a schedule's dead-lettered run from
its own row, or read a poison record back from the claimer's topics and take it again.

A `run` request names a letter's origin and run; the claimer reopens the run only as its own row
allows (`store.reopen`: dead-lettered, a schedule's, the row's JobDue at the letter's position, a
redrive number above the row's). The reopened run is retried: `RunRetrying`, and the retry timer
of its next attempt due now, whose JobDue is the one the claimer stored at intake; the answer is
staged with them, in the transaction that reopens. A record read back from jobs.due goes through
the intake's checks and claim, as if it had just arrived.
"""

import functools
import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from slotflow.contracts import Envelope, RedriveRequested
from slotflow.contracts.topics import DLQ_MESSAGES
from slotflow.kafka.records import Record
from slotflow.kafka.redrive import Answer, outcome_envelope
from slotflow.pg.outbox import Staged, append_many
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from slotflow_claimer import store
from slotflow_claimer.events import SOURCE, RunEvents
from slotflow_claimer.executor import Executor
from slotflow_claimer.intake import Admission, Intake
from slotflow_claimer.retrying import with_storage_retry

log = logging.getLogger(__name__)


class ClaimerRedrives:
    """Carries out the redrive requests addressed to the claimer."""

    def __init__(
        self,
        pool: Pool,
        *,
        schema: str,
        kafka: KafkaSettings,
        events: RunEvents,
        intake: Intake,
        executor: Executor,
        wake_relay: Callable[[], None],
    ) -> None:
        self._pool = pool
        self._schema = schema
        self._dlq = kafka.topic(DLQ_MESSAGES)
        self._events = events
        self._intake = intake
        self._executor = executor
        self._wake_relay = wake_relay

    async def on_request(self, envelope: Envelope, request: RedriveRequested) -> Answer | None:
        """Reopen the run a `run` request names; None once the answer is staged with it."""
        del envelope
        if request.kind != "run" or request.run_id is None:
            return Answer.refused(f"the claimer reopens schedules' runs; this is a {request.kind} redrive")
        return await with_storage_retry(functools.partial(self._reopen, request), what="reopen a run")

    async def _reopen(self, request: RedriveRequested) -> Answer | None:
        async with self._pool.acquire() as conn, conn.transaction():
            reopened = await store.reopen(
                conn,
                self._schema,
                run_id=str(request.run_id),
                redrive=request.redrive,
                topic=request.topic,
                partition=request.partition,
                offset=request.offset,
            )
            run = reopened.run
            if run is None:
                return Answer.refused(reopened.refusal)
            at: datetime = await conn.fetchval("SELECT now()")
            done = Answer.done(
                f"reopened run {run.run_id} (redrive {request.redrive}) with a fresh budget of "
                f"{'unlimited' if run.retry.unlimited else run.retry.max_attempts} attempt(s), from attempt "
                f"{run.attempt + 1}, as it was stored"
            )
            await append_many(
                conn,
                schema=self._schema,
                items=[
                    self._events.retrying(run, at, retry_at=at, delay=timedelta(0)),
                    self._events.retry_timer(run, at, retry_at=at),
                    Staged(self._dlq, outcome_envelope(request, service=SOURCE, answer=done, at=at)),
                ],
            )
        self._wake_relay()
        log.info(
            "claimer: reopened run %s for redrive %d of %s",
            run.run_id,
            request.redrive,
            request.dead_letter_id,
        )
        return None

    async def reread_job_due(self, record: Record) -> Answer:
        """A JobDue read back from its topic, taken as the intake takes any: decoded and checked,
        then claimed, skipped or recognised as a duplicate by the run's own row."""
        _, poison = self._intake.decode([record])
        if poison:
            _, err = poison[0]
            return Answer.refused(
                f"the claimer read {record.position} back and refused it again: {err.reason}: {err}"
            )
        try:
            admission: Admission = await with_storage_retry(
                functools.partial(self._intake.admit, [record]), what="admit a JobDue read back"
            )
        except Exception as err:  # noqa: BLE001 - what the database refuses for this record is the answer
            return Answer.refused(
                f"the claimer read {record.position} back; the database refused it: {err!r}"
            )
        self._wake_relay()
        self._executor.start_all(admission.claimed)
        if admission.claimed:
            run = admission.claimed[0]
            return Answer.done(
                f"the claimer read {record.position} back and claimed run {run.run_id} (attempt {run.attempt})"
            )
        if admission.skipped or admission.buffered:
            return Answer.done(
                f"the claimer read {record.position} back; its overlap policy skipped or buffered it"
            )
        return Answer.done(
            f"the claimer read {record.position} back; it changed nothing (its run is recorded already: "
            "live, finished or dead-lettered)"
        )
