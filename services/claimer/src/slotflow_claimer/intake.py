"""From a polled batch of JobDue records to durable claims: one transaction per batch.

In that transaction every record reaches a durable state: its run is claimed and its RunStarted
staged, or it is recorded as skipped or buffered by its overlap policy, or it changes nothing (a
duplicate of a run that is live elsewhere or finished), or it is parked in the DLQ as poison.
Only after the commit do its offsets count as done; a crash before that redelivers the records,
and the redelivery collapses on the run id.

Records are split into waves so that one statement never touches a run twice, and so that the
overlap choices for one job are made one after another, each seeing the one before it (all
waves share the transaction).
"""

import functools
import logging
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from pydantic import ValidationError

from slotflow import tracing
from slotflow.contracts import Envelope, JobDue
from slotflow.contracts.identity import identity_violation
from slotflow.core.identity import RERUN_MARK, rerun_number, run_id
from slotflow.errors import InvalidPayload, PoisonMessage
from slotflow.kafka.poison import dead_letter_envelope, decode_record, guess_ids, minimal_dead_letter
from slotflow.kafka.records import Record
from slotflow.pg.outbox import (
    Encoded,
    Staged,
    append_encoded,
    append_grouped,
    append_many,
    encoded,
    with_headers,
)
from slotflow.pg.pool import Conn, Pool
from slotflow.settings import KafkaSettings
from slotflow_claimer import store
from slotflow_claimer.events import SOURCE, TRACE_SCOPE, RunEvents
from slotflow_claimer.metrics import ClaimerMetrics
from slotflow_claimer.retrying import STORAGE_RETRYABLE, with_storage_retry
from slotflow_claimer.runs import Due, Run

log = logging.getLogger(__name__)


class _JobDueEnvelope(Envelope):
    """The envelope with its data validated as a JobDue in the same pass."""

    data: JobDue  # type: ignore[assignment]


@dataclass(frozen=True, slots=True)
class OverlapChoice:
    """What a new run's overlap policy does, given the runs of its job that are still active."""

    action: str  # claim | skip | buffer
    reason: str = ""
    #: Running runs of the job to cancel (cancel_previous).
    cancel: tuple[str, ...] = ()
    #: Buffered runs of the job this one replaces (cancel_previous).
    supersede: tuple[str, ...] = ()


def choose_by_overlap(overlap: str, active: Sequence[store.Active], max_concurrent: int = 1) -> OverlapChoice:
    """The overlap policy as a pure function (pure so it can be tested exhaustively).

    `active` lists the job's other runs that are running (with any lease: an expired one will be
    taken over, so it still runs) or buffered.
    """
    running = tuple(a.run_id for a in active if a.state == "running")
    pending = tuple(a.run_id for a in active if a.state == "pending")
    if overlap == "allow" or not (running or pending):
        return OverlapChoice("claim")
    if overlap == "skip":
        if running:
            return OverlapChoice("skip", reason=f"overlap skip: {running[0]} is still running")
        return OverlapChoice("claim")
    if overlap == "buffer_all":
        # A queue: a new run starts at once only while nothing waits ahead of it and fewer than
        # `max_concurrent` run; otherwise it waits its turn (start_buffered releases in slot order).
        if not pending and len(running) < max_concurrent:
            return OverlapChoice("claim")
        return OverlapChoice("buffer", reason=f"overlap buffer_all: waiting behind {(running + pending)[-1]}")
    if overlap == "buffer_one":
        if pending:
            return OverlapChoice("skip", reason=f"overlap buffer_one: {pending[0]} is already buffered")
        return OverlapChoice("buffer", reason=f"overlap buffer_one: waiting for {running[0]}")
    if overlap == "cancel_previous":
        if running:
            return OverlapChoice(
                "buffer",
                reason=f"overlap cancel_previous: cancelling {running[0]}",
                cancel=running,
                supersede=pending,
            )
        return OverlapChoice("claim", supersede=pending)
    raise ValueError(f"unknown overlap policy {overlap!r}")


def waves(dues: Sequence[Due]) -> list[list[Due]]:
    """Split ``dues`` into ordered waves: run ids unique per wave, and at most one run of a job per
    wave among runs whose overlap policy is not `allow` (their overlap choices depend on each other).

    A record always lands in a later wave than every earlier record it depends on, so per-job
    order from the partition is kept.
    """
    result: list[list[Due]] = []
    last_run: dict[str, int] = {}
    last_job: dict[str, int] = {}
    for due in dues:
        job = due.job
        index = last_run.get(job.run_id, -1) + 1
        guarded = job.overlap != "allow"
        if guarded:
            index = max(index, last_job.get(job.job_id, -1) + 1)
        while len(result) <= index:
            result.append([])
        result[index].append(due)
        last_run[job.run_id] = index
        if guarded:
            last_job[job.job_id] = index
    return result


@dataclass
class Admission:
    """What one batch came to."""

    claimed: list[Run] = field(default_factory=list)
    skipped: int = 0
    buffered: int = 0
    duplicates: int = 0
    poison: int = 0
    #: The claim spans of the batch (tracing on), ended when its transaction has committed.
    spans: list[tracing.Span] = field(default_factory=list)
    #: When the batch's admission began (ns since the epoch; the claim spans start there).
    began: int = field(default_factory=time.time_ns)


class Intake:
    """Turns polled JobDue records into claims (see the module docstring)."""

    def __init__(
        self,
        pool: Pool,
        *,
        schema: str,
        owner: str,
        lease_ttl: float,
        ticker_schema: str = "ticker",
        kafka: KafkaSettings,
        events: RunEvents,
        metrics: ClaimerMetrics,
    ) -> None:
        self._pool = pool
        self._schema = schema
        self._ticker_schema = ticker_schema
        self._owner = owner
        self._ttl = lease_ttl
        self._max_bytes = kafka.max_message_bytes
        self._dlq_topic = events.dlq_topic
        self._events = events
        self._metrics = metrics

    def decode(self, records: Sequence[Record]) -> tuple[list[Due], list[tuple[Record, PoisonMessage]]]:
        dues: list[Due] = []
        poison: list[tuple[Record, PoisonMessage]] = []
        for record in records:
            due = self._decode_fast(record)
            if due is not None:
                dues.append(due)
                continue
            try:
                envelope, message = decode_record(record, accept=(JobDue,), max_bytes=self._max_bytes)
            except PoisonMessage as err:
                poison.append((record, err))
                continue
            if isinstance(message, JobDue):
                dues.append(Due(record, envelope, message))
        return dues, poison

    def _decode_fast(self, record: Record) -> Due | None:
        """A well-formed JobDue validated in one pass from its bytes, or None.

        None sends the record through `decode_record`, which is slower and says exactly what is
        wrong with it; so every check here is one `decode_record` makes too, and a record is
        accepted here only if it would be accepted there.
        """
        value = record.value
        if not value or len(value) > self._max_bytes:
            return None
        try:
            envelope = _JobDueEnvelope.model_validate_json(value)
        except ValidationError:
            return None
        job = envelope.data
        if (
            envelope.type != JobDue.message_type
            or envelope.version != JobDue.message_version
            or envelope.key != job.job_id
            or (record.key is not None and record.key != envelope.key.encode())
            or identity_violation(envelope, job) is not None
        ):
            return None
        return Due(record, None, job)

    async def admit(self, records: Sequence[Record]) -> Admission:
        """Bring every record of the batch to a durable state in one transaction."""
        dues, poison = self.decode(records)
        outcome = Admission(poison=len(poison))
        try:
            async with self._pool.acquire() as conn, conn.transaction():
                staged: list[Encoded] = []
                dues, forged = await self._without_forged_reruns(conn, dues)
                poison.extend(forged)
                outcome.poison = len(poison)
                await store.lock_jobs(conn, {d.job.job_id for d in dues if d.job.overlap != "allow"})
                for wave in waves(dues):
                    staged.extend(await self._admit_wave(conn, wave, outcome))
                # Every event of the waves goes with a state change made once (a claim, a skip,
                # a supersede), so they travel grouped; a poison record's dead letter may be staged
                # again when the record comes back, so it keeps a row of its own, whose
                # (topic, event_id) collapses the second one.
                await append_grouped(conn, schema=self._schema, rows=staged)
                if poison:
                    at = await _db_now(conn)
                    letters = []
                    for record, err in poison:
                        log.error("claimer: dead-lettering %s (%s): %s", record.position, err.reason, err)
                        letters.append(encoded(poison_letter(self._dlq_topic, record, err, at=at)))
                    await append_encoded(conn, schema=self._schema, rows=letters)
        except BaseException as err:
            for span in outcome.spans:  # the claims rolled back with the transaction
                tracing.record_error(span, err)
                span.end()
            raise
        for span in outcome.spans:
            span.end()
        m = self._metrics
        m.claimed.labels("intake").inc(len(outcome.claimed))
        m.duplicates.inc(outcome.duplicates)
        m.poison.inc(outcome.poison)
        m.buffered.inc(outcome.buffered)
        return outcome

    async def admit_each(self, records: Sequence[Record]) -> Admission:
        """Admit records one at a time, parking any the database refuses (a batch failed).

        A record can pass validation and still be refused by PostgreSQL (a number beyond the
        column's range, say); alone in its own transaction it cannot take its batch with it.
        """
        total = Admission()
        for record in records:
            try:
                one = await with_storage_retry(
                    functools.partial(self.admit, [record]), what="admit one JobDue"
                )
            except Exception as err:  # noqa: BLE001 - whatever the database refused, park it, move on
                await with_storage_retry(functools.partial(self.park, record, err), what="park a JobDue")
                total.poison += 1
                continue
            total.claimed.extend(one.claimed)
            total.skipped += one.skipped
            total.buffered += one.buffered
            total.duplicates += one.duplicates
            total.poison += one.poison
        return total

    async def park(self, record: Record, error: BaseException) -> None:
        """Dead-letter ``record`` through the outbox with reason `unprocessable`.

        Total but for outages: should the database refuse the full letter too, the minimal one
        (position, reason, error: always storable) is staged instead, and should even that be
        refused the record is skipped with a critical log, so its partition moves on.

        Raises:
            the `STORAGE_RETRYABLE` errors: PostgreSQL is away; the caller retries.
        """
        log.error("claimer: parking %s, refused by the database: %r", record.position, error)
        for minimal in (False, True):
            try:
                async with self._pool.acquire() as conn, conn.transaction():
                    at = await _db_now(conn)
                    letter = poison_letter(self._dlq_topic, record, error, at=at, reason="unprocessable")
                    if minimal:
                        letter = Staged(
                            self._dlq_topic,
                            minimal_dead_letter(
                                record, error, source_service=SOURCE, occurred_at=at, reason="unprocessable"
                            ),
                        )
                    await append_many(conn, schema=self._schema, items=[letter])
            except STORAGE_RETRYABLE:
                raise
            except Exception as err:  # noqa: BLE001 - try the minimal letter, then skip
                log.error(
                    "claimer: the %s letter for %s was refused: %r",
                    "minimal" if minimal else "full",
                    record.position,
                    err,
                )
                continue
            self._metrics.poison.inc()
            return
        log.critical("claimer: skipping %s: no dead letter for it could be staged", record.position)

    async def _admit_wave(self, conn: Conn, wave: Sequence[Due], outcome: Admission) -> list[Encoded]:
        schema = self._schema
        staged: list[Encoded] = []
        wave = await self._without_orphan_redrives(conn, wave, outcome)
        to_claim = [d for d in wave if d.job.overlap == "allow"]
        guarded = [d for d in wave if d.job.overlap != "allow"]
        if guarded:
            existing = await store.existing_run_ids(conn, schema, [d.job.run_id for d in guarded])
            # A run that exists already had its overlap decided when it first arrived; retries,
            # takeovers and redrives of it go through the claim's own rules.
            to_claim.extend(d for d in guarded if d.job.run_id in existing)
            fresh = [d for d in guarded if d.job.run_id not in existing]
            if fresh:
                to_claim.extend(await self._apply_overlap(conn, fresh, outcome, staged))
        claimed = await store.claim(conn, schema, to_claim, owner=self._owner, ttl=self._ttl)
        outcome.claimed.extend(claimed)
        outcome.duplicates += len(to_claim) - len(claimed)
        if tracing.enabled():
            staged.extend(self._traced_start(run, outcome) for run in claimed)
        else:
            staged.extend(self._events.started_row(run, run.updated_at) for run in claimed)
        return staged

    async def _without_forged_reruns(
        self, conn: Conn, dues: list[Due]
    ) -> tuple[list[Due], list[tuple[Record, PoisonMessage]]]:
        """``dues`` without the re-runs the ticker never issued, and those as poison to park.

        A re-run's JobDue (an operator's RerunSlots) may reopen a finished run or start a second
        effect of a completed slot (`{run id}#rerun-{n}`), so its number must be one the ticker
        recorded for that slot, forced or not as the run id says (`ticker.rerun_issued`, written in
        the transaction that staged the JobDue, so a genuine one is always found). Anyone who can
        write jobs.due could otherwise run a slot again at will.
        """
        claimed = [(due, rerun_claim(due.job)) for due in dues]
        asked = [(due, claim) for due, claim in claimed if claim is not None]
        if not asked:
            return dues, []
        issued = await store.reruns_issued(
            conn,
            self._ticker_schema,
            [(due.job.job_id, due.job.slot, number, forced) for due, (number, forced) in asked],
        )
        refused = {
            id(due): (number, forced)
            for (due, (number, forced)), ok in zip(asked, issued, strict=True)
            if not ok
        }
        kept: list[Due] = []
        forged: list[tuple[Record, PoisonMessage]] = []
        for due in dues:
            if id(due) not in refused:
                kept.append(due)
                continue
            number, forced = refused[id(due)]
            what = "forced re-run" if forced else "re-run"
            forged.append(
                (
                    due.record,
                    InvalidPayload(
                        f"forged re-run: the ticker issued no {what} {number} of schedule "
                        f"{due.job.job_id!r} at {due.job.slot.isoformat()} (run {due.job.run_id!r})"
                    ),
                )
            )
        return kept, forged

    async def _without_orphan_redrives(
        self, conn: Conn, wave: Sequence[Due], outcome: Admission
    ) -> list[Due]:
        """``wave`` without the redrive re-issues of runs this claimer never recorded.

        A JobDue with a redrive number (the ticker re-issuing a slot, the orchestrator retrying a
        parked activity) may only reopen a dead-lettered run (`_CLAIM`); it never creates one, so a
        redrive of a forged letter naming a slot that never fired fires nothing.
        """
        reissued = [d.job.run_id for d in wave if d.redrive_count > 0]
        if not reissued:
            return list(wave)
        known = await store.existing_run_ids(conn, self._schema, reissued)
        kept: list[Due] = []
        for due in wave:
            if due.redrive_count > 0 and due.job.run_id not in known:
                log.warning(
                    "claimer: %s re-issues run %s for redrive %d, but no such run was ever claimed here; "
                    "nothing runs",
                    due.record.position,
                    due.job.run_id,
                    due.redrive_count,
                )
                outcome.duplicates += 1
                continue
            kept.append(due)
        return kept

    def _traced_start(self, run: Run, outcome: Admission) -> Encoded:
        """RunStarted under a claim span (child of the JobDue's context), ended at the commit."""
        due = run.due
        span = tracing.tracer(TRACE_SCOPE).start_span(
            f"claim {due.topic}",
            context=run.trace_parent(),
            kind=tracing.SpanKind.CONSUMER,
            start_time=outcome.began,
            attributes={
                **tracing.messaging(
                    due.topic,
                    operation="claim",
                    operation_type="process",
                    key=due.key,
                    partition=due.partition,
                    offset=due.offset,
                ),
                **run.span_attributes(),
                "slotflow.claimer": self._owner,
            },
        )
        outcome.spans.append(span)
        run.trace = tracing.context_of(span)
        return with_headers(self._events.started_row(run, run.updated_at), tracing.headers_for(span))

    async def _apply_overlap(
        self, conn: Conn, fresh: Sequence[Due], outcome: Admission, staged: list[Encoded]
    ) -> list[Due]:
        schema = self._schema
        by_job: dict[str, list[store.Active]] = defaultdict(list)
        for active in await store.active_runs(conn, schema, [d.job.job_id for d in fresh]):
            by_job[active.job_id].append(active)
        to_claim: list[Due] = []
        unstarted: list[store.Unstarted] = []
        cancel: list[str] = []
        supersede: list[str] = []
        for due in fresh:
            choice = choose_by_overlap(
                due.job.overlap, by_job.get(due.job.job_id, ()), due.job.max_concurrent
            )
            cancel.extend(choice.cancel)
            supersede.extend(choice.supersede)
            if choice.action == "claim":
                to_claim.append(due)
            elif choice.action == "skip":
                unstarted.append(store.Unstarted(due, "skipped", choice.reason))
            else:
                unstarted.append(store.Unstarted(due, "pending", choice.reason))
        if supersede:
            reason = "overlap cancel_previous: replaced by a newer run"
            for run in await store.supersede_pending(
                conn, schema, supersede, owner=self._owner, reason=reason
            ):
                staged.append(encoded(self._events.skipped(run, run.updated_at, reason=reason)))
                self._metrics.outcomes.labels("skipped", "superseded").inc()
        if cancel:
            await store.request_cancel(conn, schema, cancel)
        reasons = {u.due.job.run_id: u.reason for u in unstarted}
        for run in await store.insert_unstarted(conn, schema, unstarted, owner=self._owner):
            if run.state == "skipped":
                outcome.skipped += 1
                self._metrics.outcomes.labels("skipped", "overlap").inc()
                staged.append(encoded(self._events.skipped(run, run.updated_at, reason=reasons[run.run_id])))
            else:
                outcome.buffered += 1
        return to_claim


def rerun_claim(job: JobDue) -> tuple[int, bool] | None:
    """(re-run number, forced) a JobDue claims to be, or None for any other JobDue.

    A forced re-run is the run `{run id}#rerun-{n}` (all its attempts: its retries carry no re-run
    number); a re-run of the slot's own run carries its number in `JobDue.rerun`. The contracts'
    identity rules have already tied the two together.
    """
    if job.workflow_id is not None or (not job.rerun and RERUN_MARK not in job.run_id):
        return None  # the intake's hot path: almost every JobDue is no re-run
    slot_run = run_id(job.job_id, job.slot)
    if job.run_id != slot_run:
        number = rerun_number(job.run_id, slot_run)
        return None if number is None else (number, True)
    return (job.rerun, False) if job.rerun else None


def poison_letter(
    dlq_topic: str, record: Record, error: BaseException, *, at: datetime, reason: str | None = None
) -> Staged:
    """The dead letter the claimer stages for ``record``; total for any bytes (property-tested)."""
    run_id, job_id, tags = guess_ids(record)
    letter = dead_letter_envelope(
        record,
        error,
        source_service=SOURCE,
        occurred_at=at,
        reason=reason,
        run_id=run_id,
        job_id=job_id,
        tags=tags,
    )
    return Staged(dlq_topic, letter)


async def _db_now(conn: Conn) -> datetime:
    value = await conn.fetchval("SELECT now()")
    if not isinstance(value, datetime):
        raise TypeError("now() did not return a timestamp")
    return value
